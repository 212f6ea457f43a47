"""fulcrum_ba: Balanced Aggregation (and every other rule of fulcrum's spec) for verl and TRL.

The maths is fulcrum-core's own, compiled in (`fulcrum_ba._core`); nothing here re-implements a
formula. Every aggregation rule is linear in the token losses,

    J = sum_i w_i * sum_t l_{i,t},

with one weight per response computed from the **whole step batch** (lengths, advantage signs,
groups), so any micro-batch split of the batch gives the same loss and gradient.

- `weights(group_ids, advantages, lengths, rule="ba")`: the `w_i`;
- `advantages(group_ids, rewards)`: group-relative advantages (`grpo`, `mean`, `rloo`, `opo`);
- `analyze(group_ids, rewards, lengths)`: what `fulcrum analyze --json` prints;
- `fulcrum_ba.torch.agg_loss(loss_mat, loss_mask, weights)`: `J` on the caller's torch;
- `fulcrum_ba.trl.GRPOTrainer` and `fulcrum_ba.verl`: the trainer integrations.

Sequences may be lists, tuples, numpy arrays or torch tensors; group ids ints (Python or numpy) or
strings. Bad input raises `ValueError` naming the argument (and, for a name, listing the valid
ones). `fulcrum_ba.torch`, `.trl` and `.verl` are imported on first use.
"""

import importlib
import json

from . import _core

__version__ = _core.__version__

RULES = tuple(_core.RULES)
"""Every aggregation rule of the spec, in its order: token, token-group, seq, seq-sum, drgrpo, ba,
ba-batch."""
ESTIMATORS = tuple(_core.ESTIMATORS)
"""Every advantage estimator: grpo, mean, rloo, opo."""
BA_COUNTS = tuple(_core.BA_COUNTS)
"""BA's count W_g: group (W_g = G_g, the default) or signed (W_g = n+ + n-)."""


def weights(group_ids, advantages, lengths, rule=_core.DEFAULT_RULE, ba_count="group", l_norm=None):
    """One weight `w_i >= 0` per response under `rule`, for the whole step batch.

    Args:
        group_ids: the group (prompt) of each response, ints or strings; responses of a group need
            not be adjacent.
        advantages: `A_i`, one finite number per response.
        lengths: `L_i`, the loss-masked token count of each response (integers >= 0).
        rule: one of `RULES`.
        ba_count: BA's `W_g` for `ba` and `ba-batch`, one of `BA_COUNTS`.
        l_norm: `drgrpo`'s constant (the maximum response length of your config); `None` takes the
            longest response of the batch, as `fulcrum analyze` does.

    Returns:
        list[float], in input order; 0 for a response with `L_i = 0`.
    """
    return _core.weights(group_ids, advantages, lengths, rule, ba_count, l_norm)


def advantages(group_ids, rewards, lengths=None, estimator="grpo"):
    """Group-relative advantages `A_i` of the rewards (`estimator` one of `ESTIMATORS`).

    `grpo` is `(R - mean_g R) / (std_g R + 1e-6)` with Bessel's std, as verl; a group of one
    response or with all rewards equal gets exactly 0. `lengths` are required by `opo` only.
    """
    return _core.advantages(group_ids, rewards, lengths, estimator)


def analyze(group_ids, rewards, lengths, advantages=None, estimator="grpo", ba_count="group", l_norm=None):
    """The object `fulcrum analyze --json` prints for this batch.

    `{"advantages": [...], "rules": {RULE: {"weights", "mass_pos", "mass_neg", "mass_ratio",
    "len_weight_corr"}}, "diagnostics": {"len_mean", "len_cv", "len_pos_mean", "len_neg_mean",
    "len_gap", "len_gap_rel", "frac_mixed", "frac_all_correct", "frac_all_wrong"}}`; undefined
    values are `None`. `advantages=None` computes them with `estimator`; `l_norm=None` is the
    longest response.
    """
    text = _core.analyze_json(group_ids, rewards, lengths, advantages, estimator, ba_count, l_norm)
    return json.loads(text)


def check_name(what, name):
    """Raises the `ValueError` that `weights` or `advantages` would for a bad `name` of `what`
    (`"rule"`, `"ba_count"` or `"estimator"`): the valid names, and the nearest one."""
    _core.check_name(what, name)


# Imported on first use as `fulcrum_ba.NAME`: each imports its framework (torch, trl, verl), which
# `import fulcrum_ba` must not, and `import fulcrum_ba.NAME` is not needed to reach them. Not in
# `dir()`, so that introspection (`inspect.getmembers`) imports no framework.
_SUBMODULES = ("torch", "trl", "verl")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BA_COUNTS", "ESTIMATORS", "RULES", "advantages", "analyze", "check_name", "weights"]
