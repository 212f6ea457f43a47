"""fulcrum_ba.verl: fulcrum's aggregation rules in verl (0.9.1, PyPI) as advantage estimators.

    pip install fulcrum-ba            # into verl's environment; then, in the verl command line:
    algorithm.adv_estimator=ba        # that is the one setting (ba-batch and token-group work too)

How (read against verl 0.9.1): the policy losses never see the group ids (`uid`), and
`loss_agg_mode` is a closed list that `ActorConfig` validates, but advantage estimators are a
registry (`core_algos.register_adv_est`) that the driver calls once per step over the **whole
step batch**, with `index=uid`. So each rule becomes an estimator that computes GRPO advantages
`A_i` (Dr. GRPO's mean baseline when `algorithm.norm_adv_by_std_in_grpo=False`) and the rule's
weights `w_i` with fulcrum-core, and returns the folded advantages

    A'_i = A_i * w_i * T,        T = sum_i L_i over the step batch.

verl's default `actor.loss_agg_mode=token-mean` divides each mini-batch's token sum by its global
token count `T_mini` (`agg_loss`, with `global_batch_info` over data-parallel ranks), so a step with
one mini-batch (`ppo_mini_batch_size` = the train batch) trains on exactly `sum_i w_i sum_t l(A_i)`:
vanilla PPO-clip with dual clip is positively homogeneous in `A` (signs kept), so the clip
fractions are unchanged too. With several mini-batches each update gets `T / T_mini` times its
share of that sum, the same scale as verl's own modes. Micro-batching, dynamic batch sizes and
data-parallel sharding do not change the loss. KL and entropy losses keep `token-mean`, as the spec
prescribes for regularisers.

Limits: use `loss_agg_mode=token-mean` (the default) and `policy_loss.loss_mode=vanilla`; other
policy losses (gspo, clip_cov, kl_cov, ...) aggregate their own way or depend on the magnitude of
`A`. verl logs the folded advantages, so `critic/advantages/*` read `A * w * T`. The advantages
are fulcrum's: a group of one response gets `A = 0`, where verl's `grpo` gives it `A = R`.

verl imports this module in every process at `import verl` through the package's `verl.plugins`
entry point; where plugins are turned off (`VERL_USE_EXTERNAL_PLUGINS=none`), set
`VERL_USE_EXTERNAL_MODULES=fulcrum_ba.verl`.
"""

import torch
from verl.trainer.ppo import core_algos

import fulcrum_ba

# The estimators registered at import: the BA rules and the DAPO paper's per-group token mean,
# which verl's loss_agg_mode has no equivalent of. Every other rule: `register(name, rule)`.
DEFAULT_ESTIMATORS = ("ba", "ba-batch", "token-group")


def make_estimator(rule, ba_count="group", l_norm=None):
    """A verl advantage estimator that trains `rule` under `loss_agg_mode=token-mean`."""
    fulcrum_ba.check_name("rule", rule)
    fulcrum_ba.check_name("ba_count", ba_count)
    if rule == "drgrpo" and l_norm is None:
        raise ValueError(
            "l_norm: drgrpo needs the maximum response length of your config (data.max_response_length)"
        )

    def estimator(token_level_rewards, response_mask, index=None, config=None, **_):
        """Folded advantages `A * w * T`, shape `(bs, response_length)`, twice (advantages, returns)."""
        if index is None:
            raise ValueError(
                "index: the rule needs each response's group id (verl passes data.non_tensor_batch['uid'])"
            )
        scores = token_level_rewards.sum(dim=-1)
        lengths = response_mask.sum(dim=-1)
        by_std = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
        adv = fulcrum_ba.advantages(index, scores, estimator="grpo" if by_std else "mean")
        w = fulcrum_ba.weights(index, adv, lengths, rule=rule, ba_count=ba_count, l_norm=l_norm)
        total_tokens = float(lengths.sum())
        folded = torch.tensor(adv, dtype=torch.float64) * torch.tensor(w, dtype=torch.float64) * total_tokens
        folded = folded.to(device=token_level_rewards.device, dtype=token_level_rewards.dtype)
        out = folded.unsqueeze(-1) * response_mask
        return out, out

    estimator.__name__ = f"fulcrum_{rule.replace('-', '_')}_advantage"
    return estimator


def register(name, rule, ba_count="group", l_norm=None):
    """Registers `rule` as verl advantage estimator `name` (`algorithm.adv_estimator=NAME`)."""
    core_algos.register_adv_est(name)(make_estimator(rule, ba_count=ba_count, l_norm=l_norm))


for _rule in DEFAULT_ESTIMATORS:
    register(_rule, _rule)

__all__ = ["DEFAULT_ESTIMATORS", "make_estimator", "register"]
