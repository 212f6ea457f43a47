"""fulcrum_ba.torch: the aggregated loss `J = sum_i w_i sum_t mask_it * l_it` on the caller's torch.

Plain Python over whatever torch the caller runs (the compiled extension never links libtorch);
imported only when used. The weights come from `fulcrum_ba.weights` over the **whole step batch**,
so summing `agg_loss` over any split of the rows, each with its slice of the weights, gives the
whole batch's loss and gradient: micro-batches, gradient accumulation and data-parallel shards need
no normaliser of their own.
"""

import torch


def agg_loss(loss_mat, loss_mask, weights):
    """`sum_i weights[i] * sum_t loss_mask[i, t] * loss_mat[i, t]`, accumulated in at least float32.

    Args:
        loss_mat: `[batch, tokens]` per-token losses, any float dtype and device; differentiable.
        loss_mask: `[batch, tokens]`, 0 where a token is not part of the loss (prompt, padding).
            Masked positions are never read, so a NaN there does not leak into the loss.
        weights: `[batch]` per-response weights (`fulcrum_ba.weights`), a list, array or tensor.
            A row with weight 0 contributes exactly 0.

    Returns:
        A scalar tensor on `loss_mat`'s device: float64 for a float64 `loss_mat`, float32 for
        float32, float16 and bfloat16 (whose sums over thousands of tokens would lose the loss).
    """
    if not isinstance(loss_mat, torch.Tensor) or loss_mat.dim() != 2:
        got = (
            f"a {loss_mat.dim()}-d tensor" if isinstance(loss_mat, torch.Tensor) else type(loss_mat).__name__
        )
        raise ValueError(f"loss_mat: expected a [batch, tokens] tensor, got {got}")
    if not isinstance(loss_mask, torch.Tensor) or loss_mask.shape != loss_mat.shape:
        got = tuple(loss_mask.shape) if isinstance(loss_mask, torch.Tensor) else type(loss_mask).__name__
        raise ValueError(
            f"loss_mask: expected a tensor of loss_mat's shape {tuple(loss_mat.shape)}, got {got}"
        )
    device = loss_mat.device
    dtype = torch.promote_types(loss_mat.dtype, torch.float32)  # never below float32, never a downcast
    if isinstance(weights, torch.Tensor):
        w = weights.detach().to(device=device, dtype=dtype)
    else:
        try:
            w = torch.as_tensor(weights, dtype=dtype, device=device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"weights: expected one number per row of loss_mat: {e}") from None
    if w.dim() != 1 or w.shape[0] != loss_mat.shape[0]:
        raise ValueError(
            f"weights: expected {loss_mat.shape[0]} entries (one per row of loss_mat), got shape {tuple(w.shape)}"
        )
    bad = ~torch.isfinite(w)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"weights[{i}]: value {w[i].item()} is not finite")

    mask = loss_mask.to(device=device, dtype=dtype)
    tokens = torch.where(mask != 0, loss_mat.to(dtype) * mask, torch.zeros((), device=device, dtype=dtype))
    per_row = tokens.sum(dim=-1)
    return torch.where(w != 0, per_row * w, torch.zeros((), device=device, dtype=dtype)).sum()
