"""fulcrum_ba.torch.agg_loss: the spec's aggregated loss, and its invariance to any row split."""

import json
import random
import subprocess
import sys

import fulcrum_ba
import pytest
from conftest import SPEC_VECTORS, random_batch

torch = pytest.importorskip("torch")
from fulcrum_ba.torch import agg_loss  # noqa: E402


def padded(rows, width, value=0.0, dtype=torch.float64):
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def test_reproduces_the_spec_losses():
    doc = json.loads(SPEC_VECTORS.read_text())
    for case in doc["cases"]:
        token_loss, lengths = case["expected"]["token_loss"], case["lengths"]
        width = max(max(lengths), 1)
        loss_mat = padded(token_loss, width, value=float("nan"))  # padding is never read
        mask = padded([[1.0] * n for n in lengths], width)
        adv = case["expected"]["advantages"]
        for key, expected in case["expected"]["rules"].items():
            rule, _, count = key.partition("/")
            w = fulcrum_ba.weights(
                case["groups"], adv, lengths, rule=rule, ba_count=count or "group", l_norm=case["l_norm"]
            )
            got = agg_loss(loss_mat, mask, w)
            assert got.dtype == torch.float64  # float64 in, float64 maths: the spec's tolerance
            # Positive and negative terms cancel: the error is relative to their magnitudes.
            scale = sum(wi * sum(abs(x) for x in row) for wi, row in zip(w, token_loss))
            err = abs(got.item() - expected["loss"])
            assert err <= doc["tolerance"] * scale + 1e-15, f"{case['name']} {key}"


def random_split(n, rng):
    """Rows 0..n cut into random, uneven, shuffled parts (a cut may go through a group)."""
    order = list(range(n))
    rng.shuffle(order)
    cuts = sorted(rng.sample(range(1, n), k=min(n - 1, rng.randint(1, 5)))) if n > 1 else []
    return [order[a:b] for a, b in zip([0] + cuts, cuts + [n])]


@pytest.mark.parametrize("rule", fulcrum_ba.RULES)
@pytest.mark.parametrize("seed", range(3))
def test_sum_over_any_row_split_equals_the_whole_batch(rule, seed):
    rng = random.Random(seed)
    groups, rewards, lengths = random_batch(rng, n_groups=4)
    adv = fulcrum_ba.advantages(groups, rewards)
    w = torch.tensor(fulcrum_ba.weights(groups, adv, lengths, rule=rule, l_norm=300.0))
    n, width = len(lengths), max(lengths) + 3
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(n, width, generator=gen, dtype=torch.float32)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).float()

    whole_in = base.clone().requires_grad_(True)
    whole = agg_loss(whole_in, mask, w)
    whole.backward()
    ref = (base.double() * mask.double()).sum(-1).mul(w.double()).sum().item()
    assert whole.item() == pytest.approx(ref, rel=1e-6, abs=1e-9)

    for _ in range(3):
        parts_in = base.clone().requires_grad_(True)
        total = sum(agg_loss(parts_in[idx], mask[idx], w[idx]) for idx in random_split(n, rng))
        total.backward()
        assert total.item() == pytest.approx(whole.item(), rel=1e-6, abs=1e-9)
        torch.testing.assert_close(parts_in.grad, whole_in.grad, rtol=1e-6, atol=1e-9)
    # The gradient is w_i on each unmasked token and 0 elsewhere.
    torch.testing.assert_close(whole_in.grad, (w[:, None] * mask).float())


def test_bf16_loss_accumulates_in_fp32():
    gen = torch.Generator().manual_seed(0)
    loss = torch.randn(64, 512, generator=gen).to(torch.bfloat16).requires_grad_(True)
    mask = torch.ones(64, 512)
    w = [1.0 / (64 * 512)] * 64
    got = agg_loss(loss, mask, w)
    assert got.dtype == torch.float32
    ref = loss.detach().double().mean().item()
    assert got.item() == pytest.approx(ref, rel=1e-5, abs=1e-7)
    got.backward()
    assert loss.grad.dtype == torch.bfloat16


def test_float64_loss_is_not_downcast():
    """At least float32, not at most: 1 + 1e-12 per token is lost in float32, kept in float64."""
    loss = torch.full((4, 1000), 1.0 + 1e-12, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(4, 1000, dtype=torch.bool)
    w = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    got = agg_loss(loss, mask, w)
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(1000 * (1.0 + 1e-12), rel=1e-14)
    assert got.item() != agg_loss(loss.detach().float(), mask, w).item()  # float32 cannot hold the 1e-12
    got.backward()
    assert loss.grad.dtype == torch.float64
    torch.testing.assert_close(loss.grad, w[:, None].expand(4, 1000), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_loss_accumulates_in_float32(dtype):
    # 4096 ones: float16 and bfloat16 could not count past 2048 and 256 by ones.
    loss = torch.ones(2, 4096, dtype=dtype)
    got = agg_loss(loss, torch.ones(2, 4096), [1.0, 1.0])
    assert got.dtype == torch.float32 and got.item() == 8192.0


def test_zero_weight_rows_and_masked_nan_contribute_nothing():
    loss = torch.tensor([[1.0, float("nan")], [float("inf"), float("nan")], [2.0, 3.0]], requires_grad=True)
    mask = torch.tensor([[1, 0], [1, 1], [1, 1]])
    got = agg_loss(loss, mask, [0.5, 0.0, 0.25])
    assert got.item() == pytest.approx(0.5 + 1.25)
    got.backward()
    assert torch.isfinite(loss.grad).all()


def test_on_gpu_when_there_is_one():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    loss = torch.randn(8, 16, device="cuda", dtype=torch.float16, requires_grad=True)
    mask = torch.ones(8, 16, device="cuda")
    got = agg_loss(loss, mask, torch.full((8,), 0.125))
    assert got.device.type == "cuda" and got.dtype == torch.float32
    got.backward()
    assert loss.grad.device.type == "cuda"


def test_the_submodule_is_an_attribute_and_torch_is_imported_only_on_use():
    """The README's `fulcrum_ba.torch.agg_loss` after a plain `import fulcrum_ba`."""
    code = (
        "import sys, fulcrum_ba\n"
        "print('torch' in sys.modules)\n"
        "print(fulcrum_ba.torch.agg_loss.__module__, 'torch' in sys.modules)\n"
        "print(hasattr(fulcrum_ba, 'nope'))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:3] == ["False", "fulcrum_ba.torch True", "False"]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            (torch.zeros(3), torch.zeros(3), [1.0] * 3),
            "loss_mat: expected a [batch, tokens] tensor, got a 1-d tensor",
        ),
        (
            (torch.zeros(2, 3), torch.zeros(2, 4), [1.0] * 2),
            "loss_mask: expected a tensor of loss_mat's shape (2, 3), got (2, 4)",
        ),
        (
            (torch.zeros(2, 3), torch.zeros(2, 3), [1.0] * 3),
            "weights: expected 2 entries (one per row of loss_mat), got shape (3,)",
        ),
        ((torch.zeros(2, 3), torch.zeros(2, 3), [1.0, float("nan")]), "weights[1]: value nan is not finite"),
        (
            (torch.zeros(2, 3), torch.zeros(2, 3), ["a", "b"]),
            "weights: expected one number per row of loss_mat",
        ),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(args, message):
    with pytest.raises(ValueError) as e:
        agg_loss(*args)
    assert str(e.value).startswith(message)
