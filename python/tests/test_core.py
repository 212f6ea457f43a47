"""fulcrum_ba.weights / advantages / analyze: the spec's worked examples, equality with
`fulcrum analyze --json` on random batches, and the errors."""

import json
import math
import subprocess

import fulcrum_ba
import numpy as np
import pytest
from conftest import SPEC_VECTORS, fulcrum_cli, random_batch


def close(got, want, tol):
    return abs(got - want) <= tol * max(abs(want), 1e-12) or abs(got - want) <= 1e-15


def spec_cases():
    doc = json.loads(SPEC_VECTORS.read_text())
    assert len(doc["cases"]) >= 7, "fixture lost cases"
    return doc["tolerance"], doc["cases"]


def test_rule_names_are_the_specs():
    assert fulcrum_ba.RULES == ("token", "token-group", "seq", "seq-sum", "drgrpo", "ba", "ba-batch")
    assert fulcrum_ba.ESTIMATORS == ("grpo", "mean", "rloo", "opo")
    assert fulcrum_ba.BA_COUNTS == ("group", "signed")


def test_every_spec_vector_is_reproduced():
    tol, cases = spec_cases()
    checked = 0
    for case in cases:
        groups, rewards, lengths = case["groups"], case["rewards"], case["lengths"]
        want = case["expected"]
        adv = fulcrum_ba.advantages(groups, rewards, lengths, estimator=case["advantage"])
        assert all(close(g, w, tol) for g, w in zip(adv, want["advantages"], strict=True)), case["name"]
        for key, expected in want["rules"].items():
            rule, _, count = key.partition("/")
            w = fulcrum_ba.weights(
                groups, adv, lengths, rule=rule, ba_count=count or "group", l_norm=case["l_norm"]
            )
            assert len(w) == len(expected["weights"])
            for i, (g, e) in enumerate(zip(w, expected["weights"])):
                assert close(g, e, tol), f"{case['name']} {key} w[{i}]: got {g!r}, want {e!r}"
            checked += 1
    assert checked >= 7 * 9


@pytest.mark.parametrize("seed", range(6))
def test_weights_and_analyze_equal_the_cli_on_random_batches(tmp_path, seed):
    import random

    cli = fulcrum_cli()
    rng = random.Random(seed)
    groups, rewards, lengths = random_batch(rng, string_ids=seed % 2 == 1, binary=seed % 3 != 2)
    path = tmp_path / "rollouts.jsonl"
    path.write_text(
        "".join(
            json.dumps({"group": g, "reward": r, "length": n}) + "\n"
            for g, r, n in zip(groups, rewards, lengths)
        )
    )
    ba_count = ("group", "signed")[seed % 2]
    l_norm = None if seed < 3 else 512.0
    args = [cli, "analyze", str(path), "--json", "--ba-count", ba_count]
    if l_norm is not None:
        args += ["--l-norm", str(l_norm)]
    run = subprocess.run(args, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    from_cli = json.loads(run.stdout)

    report = fulcrum_ba.analyze(groups, rewards, lengths, ba_count=ba_count, l_norm=l_norm)
    assert report == from_cli  # one implementation: identical floats, keys and nulls
    adv = fulcrum_ba.advantages(groups, rewards)
    assert adv == from_cli["advantages"]
    as_arrays = seed % 2 == 0  # numpy inputs give the same weights as lists
    for rule in fulcrum_ba.RULES:
        if as_arrays:
            ids = np.array(groups) if isinstance(groups[0], str) else np.array(groups, dtype=np.int64)
            w = fulcrum_ba.weights(
                ids, np.array(adv), np.array(lengths), rule=rule, ba_count=ba_count, l_norm=l_norm
            )
        else:
            w = fulcrum_ba.weights(groups, adv, lengths, rule=rule, ba_count=ba_count, l_norm=l_norm)
        assert w == from_cli["rules"][rule]["weights"], rule


def test_analyze_with_given_advantages_and_no_mixed_group():
    report = fulcrum_ba.analyze([0, 0, 1, 1], [1, 1, 0, 0], [3, 5, 2, 2], advantages=[0.5, -0.5, 0.0, 0.0])
    assert report["advantages"] == [0.5, -0.5, 0.0, 0.0]
    assert report["rules"]["ba"]["mass_ratio"] == pytest.approx(1.0)
    report = fulcrum_ba.analyze([0, 0], [1, 1], [3, 5])
    assert report["diagnostics"]["len_gap"] is None
    assert report["rules"]["token"]["mass_ratio"] is None
    assert report["diagnostics"]["frac_all_correct"] == 1.0


def test_ba_gives_one_token_weight_per_sign_subset():
    groups, rewards, lengths = [0] * 6, [1, 1, 0, 0, 0, 1], [4, 40, 7, 70, 9, 12]
    adv = fulcrum_ba.advantages(groups, rewards)
    w = fulcrum_ba.weights(groups, adv, lengths)
    pos = {w[i] for i in range(6) if adv[i] > 0}
    neg = {w[i] for i in range(6) if adv[i] < 0}
    assert len(pos) == 1 and len(neg) == 1
    # Spec property 4: a mixed group with no zero advantage and W_g = G_g has sum w L = 1/M.
    assert math.isclose(sum(wi * li for wi, li in zip(w, lengths)), 1.0, rel_tol=1e-12)
    seq = fulcrum_ba.weights(groups, adv, lengths, rule="seq")
    assert len({seq[i] for i in range(6) if adv[i] > 0}) == 3


@pytest.mark.parametrize("ba_count", fulcrum_ba.BA_COUNTS)
@pytest.mark.parametrize("rule", fulcrum_ba.RULES)
def test_a_zero_length_response_counts_in_no_rule_but_its_group_counts_in_m(rule, ba_count):
    """An empty (fully masked) response is in none of S, P_g, N_g, n+-_g, T+-_g, W_g, whatever
    its advantage: adding one changes no other weight, bit for bit. A group of empty responses
    is still one of the M groups: it dilutes `ba` and `token-group`."""
    groups, adv, lengths = [0, 0, 0, 0, 1, 1], [1.0, -1.0, 0.5, -0.5, 1.0, -1.0], [4, 6, 10, 20, 3, 5]
    kw = dict(rule=rule, ba_count=ba_count, l_norm=32.0)
    base = fulcrum_ba.weights(groups, adv, lengths, **kw)
    for a in (2.0, -2.0, 0.0):
        w = fulcrum_ba.weights(groups + [0], adv + [a], lengths + [0], **kw)
        assert w == base + [0.0], a
    w = fulcrum_ba.weights(groups + [7, 7], adv + [1.0, -1.0], lengths + [0, 0], **kw)
    assert w[-2:] == [0.0, 0.0]
    if rule in ("ba", "token-group"):  # 1/M: M = 3 groups now, not 2
        assert w[:-2] == pytest.approx([x * 2 / 3 for x in base], rel=1e-14)
    else:
        assert w[:-2] == base


def test_a_zero_length_responses_reward_still_enters_its_groups_advantages():
    with_empty = fulcrum_ba.advantages([0, 0, 0], [1, 0, 0], [5, 5, 0])
    assert with_empty == fulcrum_ba.advantages([0, 0, 0], [1, 0, 0])  # lengths read by opo only
    assert with_empty[:2] != fulcrum_ba.advantages([0, 0], [1, 0])
    # opo's baseline is length-weighted: there an empty response's reward has no say.
    assert fulcrum_ba.advantages([0, 0, 0], [1, 0, 1], [5, 5, 0], estimator="opo")[:2] == [0.5, -0.5]


def test_group_ids_ints_and_strings_are_distinct_groups():
    w = fulcrum_ba.weights([1, "1"], [1.0, -1.0], [2, 6], rule="token-group")
    assert w == [1 / 4, 1 / 12]  # two groups of one response: 1 / (M * sum_g L)
    w = fulcrum_ba.weights([1, 1], [1.0, -1.0], [2, 6], rule="token-group")
    assert w == [1 / 8, 1 / 8]  # one group of two


def test_lengths_may_be_integral_floats_and_tensors():
    torch = pytest.importorskip("torch")
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    w = fulcrum_ba.weights(torch.tensor([0, 0]), torch.tensor([1.0, -1.0]), mask.sum(-1), rule="token")
    assert w == [0.2, 0.2]


def test_numpy_integer_scalars_are_group_ids_and_lengths():
    """`list(array)` holds numpy scalars, not Python ints: they are the same ids and counts."""
    groups, lengths = list(np.arange(4) // 2), list(np.array([3, 5, 2, 7], dtype=np.uint16))
    assert type(groups[0]) is np.int64 and type(lengths[0]) is np.uint16
    adv = fulcrum_ba.advantages(groups, [1.0, 0.0, 0.0, 1.0])
    assert adv == fulcrum_ba.advantages([0, 0, 1, 1], [1.0, 0.0, 0.0, 1.0])
    for rule in fulcrum_ba.RULES:
        want = fulcrum_ba.weights([0, 0, 1, 1], adv, [3, 5, 2, 7], rule=rule)
        assert fulcrum_ba.weights(groups, adv, lengths, rule=rule) == want, rule
        assert fulcrum_ba.weights(tuple(groups), np.array(adv), np.array(lengths), rule=rule) == want
    # A numpy id is the Python int of the same value: one group, not two.
    assert fulcrum_ba.weights([np.int32(1), 1], [1.0, -1.0], [2, 6], rule="token-group") == [1 / 8, 1 / 8]
    # Integral numpy floats are token counts, as Python floats are (a float mask's sum).
    lengths_f32 = list(np.array([3, 5, 2, 7], dtype=np.float32))
    assert fulcrum_ba.weights(groups, adv, lengths_f32) == fulcrum_ba.weights(groups, adv, lengths)
    report = fulcrum_ba.analyze(groups, np.array([1, 0, 0, 1]), lengths)
    assert report == fulcrum_ba.analyze([0, 0, 1, 1], [1, 0, 0, 1], [3, 5, 2, 7])


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [3, 4], rule="ba_batch"),
            'rule: unknown rule "ba_batch"\nvalid rules: token, token-group, seq, seq-sum, drgrpo, ba, ba-batch (did you mean ba-batch?)',
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [3, 4], ba_count="halves"),
            'ba_count: unknown ba count "halves"\nvalid ba counts: group, signed',
        ),
        (
            lambda: fulcrum_ba.advantages([0, 0], [1, 0], estimator="ppo"),
            'estimator: unknown advantage estimator "ppo"\nvalid advantage estimators: grpo, mean, rloo, opo (did you mean opo?)',
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [3]),
            "lengths: expected 2 entries (one per response), got 1",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0, 0], [1.0, -1.0], [3, 4, 5]),
            "advantages: expected 3 entries (one per response), got 2",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, float("nan")], [3, 4]),
            "advantages[1]: value NaN is not finite",
        ),
        (lambda: fulcrum_ba.advantages([0, 0], [1.0, float("inf")]), "rewards[1]: value inf is not finite"),
        (lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [3, -4]), "lengths[1]: negative length -4"),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [3, 4.5]),
            "lengths[1]: expected an integer token count, got 4.5",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0.5], [1.0, -1.0], [3, 4]),
            "group_ids[1]: expected an int or str group id, got float",
        ),
        (
            lambda: fulcrum_ba.weights([0, True], [1.0, -1.0], [3, 4]),
            "group_ids[1]: expected an int or str group id, got bool",
        ),
        (
            lambda: fulcrum_ba.weights([0, np.bool_(True)], [1.0, -1.0], [3, 4]),
            "group_ids[1]: expected an int or str group id, got bool",
        ),
        (
            lambda: fulcrum_ba.weights([0, np.float64(1.0)], [1.0, -1.0], [3, 4]),
            "group_ids[1]: expected an int or str group id, got float64",
        ),
        (
            lambda: fulcrum_ba.weights([0, np.uint64(2**63)], [1.0, -1.0], [3, 4]),
            "group_ids[1]: integer group id out of the i64 range",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [3, True]),
            "lengths[1]: expected an integer token count, got bool",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [3, np.bool_(False)]),
            "lengths[1]: expected an integer token count, got bool",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [np.int64(3), np.float32(4.5)]),
            "lengths[1]: expected an integer token count, got 4.5",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [np.int64(3), np.int8(-4)]),
            "lengths[1]: negative length -4",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [3, "4"]),
            "lengths[1]: expected an integer token count, got str",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, "x"], [3, 4]),
            "advantages[1]: expected a number, got a str",
        ),
        (
            lambda: fulcrum_ba.weights([0, 0], [1.0, -1.0], [3, 4], rule="drgrpo", l_norm=0.0),
            "l_norm: must be a finite number > 0, got 0",
        ),
        (
            lambda: fulcrum_ba.weights("ab", [1.0, -1.0], [3, 4]),
            "group_ids: expected a sequence (list or array), got a str",
        ),
        (
            lambda: fulcrum_ba.analyze([0, 0], [1, 0], [3, 4], advantages=[1.0]),
            "advantages: expected 2 entries (one per response), got 1",
        ),
        (
            lambda: fulcrum_ba.advantages([0, 0], [1, 0], estimator="opo"),
            "lengths: estimator opo weights the baseline by length, so lengths are required",
        ),
        (
            lambda: fulcrum_ba.check_name("rule", "bba"),
            'rule: unknown rule "bba"\nvalid rules: token, token-group, seq, seq-sum, drgrpo, ba, ba-batch'
            " (did you mean ba?)",
        ),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == message


def test_large_batch_is_fast_enough(rng):
    import time

    groups, rewards, lengths = [], [], []
    for g in range(2048):
        for _ in range(16):
            groups.append(g)
            rewards.append(float(rng.random() < 0.5))
            lengths.append(rng.randint(1, 4096))
    adv = fulcrum_ba.advantages(groups, rewards)
    t0 = time.perf_counter()
    w = fulcrum_ba.weights(np.array(groups), np.array(adv), np.array(lengths))
    elapsed = time.perf_counter() - t0
    assert len(w) == 32768 and all(x >= 0 for x in w)
    assert elapsed < 1.0, f"weights of 32k responses took {elapsed:.3f} s"


def test_the_extension_is_abi3_and_links_neither_libtorch_nor_libpython():
    import re
    import shutil

    so = fulcrum_ba._core.__file__
    assert so.endswith(".abi3.so"), so
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    dynamic = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    assert needed, dynamic
    assert not [n for n in needed if "torch" in n or "python" in n or n.startswith("libc10")], needed
