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
