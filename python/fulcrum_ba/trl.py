"""fulcrum_ba.trl: TRL's `GRPOTrainer` (trl 1.16) with every fulcrum rule as `loss_type`.

    from fulcrum_ba.trl import GRPOTrainer
    args = GRPOConfig(..., loss_type="ba")       # or token, token-group, seq, seq-sum, drgrpo, ba-batch

How (read against trl 1.16.0's `grpo_trainer.py`): `loss_type` is an if/elif chain inside
`_compute_loss` with no hook, and `_prepare_inputs` calls `_generate_and_score_completions` once per
*generation batch* (`per_device_train_batch_size * steps_per_generation` rows per process), then
shuffles it and splits it into the gradient-accumulation steps. This subclass overrides only
`_generate_and_score_completions`: after TRL has scored the batch it gathers every process's
lengths and advantages, computes the rule's weights `w_i` once for the whole generation batch
(fulcrum-core, groups = blocks of `num_generations`), and folds them into the advantages,

    A'_i = A_i * w_i * N,        N = num_items_in_batch (the batch's loss-token count),

then trains with TRL's own `dapo` normalisation, which divides each micro-batch's token sum by
`N / num_processes` (times `gradient_accumulation_steps / steps_per_generation`). Summed over the
accumulation steps and averaged over processes that is `sum_i w_i sum_t l(A_i)`: the PPO-clip
token loss (TRL's two-sided `delta` clip included) is positively homogeneous in `A`
(`l(cA) = c l(A)` for `c > 0`, signs kept), so the fold is exact, and the update does not depend
on `gradient_accumulation_steps`, `per_device_train_batch_size` or the number of processes. The KL
term (`beta`) and the entropy bonus keep TRL's token-mean, which is what the spec prescribes for
regularisers. With `steps_per_generation > gradient_accumulation_steps` one generation batch feeds
several optimizer steps; each then takes its share of `J` scaled up to the whole batch, as TRL's
`dapo` does.

At every generation batch the spec's diagnostics go into TRL's metrics under fulcrum's names:
`mass_ratio/RULE` and `len_weight_corr/RULE` for every rule, `len/mean`, `len/cv`, `len/pos_mean`,
`len/neg_mean`, `len/gap`, `len/gap_rel`, `groups/mixed`, `groups/all_correct`, `groups/all_wrong`.
A TRL `loss_type` (`dapo`, `grpo`, ...) passes through unchanged, still with these diagnostics.

Rewards TRL accepts never stop training here. The diagnostics read a reward only for its side
(correct: `> 0`); TRL's advantages are always finite (its `nan_to_num`), so the weights and the fold
never see a reward. An `inf` reward counts by its sign (TRL itself gives its group advantage 0). An
unscored completion (combined reward NaN, as when every reward function returned None; TRL leaves
it out of its baseline and gives it advantage 0) is left out of the group counts: `groups/*` are
fractions of the groups with at least one scored completion, each judged on its scored ones
(undefined, NaN, which TRL's log leaves out of its average, when no completion is scored).
"""

import torch
import trl

import fulcrum_ba

# trl 1.16.0's own loss types (the if/elif chain of GRPOTrainer._compute_loss).
TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
# The TRL loss whose normalisation the folded advantages are made for (see the module doc).
_CARRIER_LOSS = "dapo"

_GROUP_MIX_KEYS = ("frac_mixed", "frac_all_correct", "frac_all_wrong")

_LENGTH_KEYS = {
    "len_mean": "len/mean",
    "len_cv": "len/cv",
    "len_pos_mean": "len/pos_mean",
    "len_neg_mean": "len/neg_mean",
    "len_gap": "len/gap",
    "len_gap_rel": "len/gap_rel",
    "frac_mixed": "groups/mixed",
    "frac_all_correct": "groups/all_correct",
    "frac_all_wrong": "groups/all_wrong",
}


def _check_loss_type(loss_type):
    if loss_type not in fulcrum_ba.RULES and loss_type not in TRL_LOSS_TYPES:
        raise ValueError(
            f'loss_type: unknown loss type "{loss_type}"\nvalid loss types: fulcrum rules '
            f"{', '.join(fulcrum_ba.RULES)}; TRL's {', '.join(TRL_LOSS_TYPES)}"
        )


def _metric(x):
    return float("nan") if x is None else float(x)


def _scored_group_mix(groups, rewards, lengths, advantages, scored):
    """`frac_mixed`, `frac_all_correct`, `frac_all_wrong` of the scored completions only: the
    groups with at least one, each judged on those (None when no completion is scored)."""
    keep = [i for i, ok in enumerate(scored) if ok]
    if not keep:
        return dict.fromkeys(_GROUP_MIX_KEYS)
    report = fulcrum_ba.analyze(
        [groups[i] for i in keep],
        [rewards[i] for i in keep],
        [lengths[i] for i in keep],
        advantages=[advantages[i] for i in keep],
    )
    return {key: report["diagnostics"][key] for key in _GROUP_MIX_KEYS}


class GRPOTrainer(trl.GRPOTrainer):
    """`trl.GRPOTrainer` whose `args.loss_type` may also be any rule of `fulcrum_ba.RULES`.

    Extra keyword argument: `ba_count` (`"group"` or `"signed"`), BA's `W_g`. `drgrpo` uses
    `args.max_completion_length` as its `L_norm`.
    """

    def __init__(self, *args, ba_count="group", **kwargs):
        fulcrum_ba.check_name("ba_count", ba_count)
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if config is not None:  # fail before TRL loads the model
            _check_loss_type(config.loss_type)
        super().__init__(*args, **kwargs)
        loss_type = self.loss_type
        _check_loss_type(loss_type)
        self.fulcrum_rule = loss_type if loss_type in fulcrum_ba.RULES else None
        self.fulcrum_ba_count = ba_count
        if self.fulcrum_rule is not None:
            self.loss_type = _CARRIER_LOSS
        self._fulcrum_rewards_per_func = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL returns the rewards of every process (gathered); kept for the group-mix diagnostics.
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._fulcrum_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        mask = out["completion_mask"]
        if "tool_mask" in out:
            mask = mask * out["tool_mask"]
        lengths = self.accelerator.gather(mask.sum(dim=1)).tolist()
        advantages = out["advantages"]
        if advantages.dim() != 1:
            raise ValueError(
                "advantages: fulcrum rules need one advantage per completion, got per-token advantages"
            )
        all_advantages = self.accelerator.gather(advantages).tolist()
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        groups = [i // num_generations for i in range(len(all_advantages))]
        rewards, scored = self._combined_rewards(len(all_advantages))
        report = fulcrum_ba.analyze(
            groups,
            rewards,
            lengths,
            advantages=all_advantages,
            ba_count=self.fulcrum_ba_count,
            l_norm=float(self.max_completion_length),
        )
        if not all(scored):
            report["diagnostics"].update(_scored_group_mix(groups, rewards, lengths, all_advantages, scored))
        self._log_diagnostics(mode, report)
        if self.fulcrum_rule is not None:
            local = slice(
                self.accelerator.process_index * len(advantages),
                (self.accelerator.process_index + 1) * len(advantages),
            )
            w = torch.tensor(report["rules"][self.fulcrum_rule]["weights"][local], dtype=torch.float64)
            n_tokens = float(out["num_items_in_batch"])
            scale = (w * n_tokens).to(device=advantages.device, dtype=advantages.dtype)
            out["advantages"] = advantages * scale
        return out

    def _combined_rewards(self, n):
        """`(rewards, scored)`: the scalar reward per completion as TRL combines it (weighted
        nansum, NaN where every reward function returned None), made finite for fulcrum-core, and
        whether it is scored. Only the side of a reward is read (`> 0`), so `+-inf` become the
        largest finite floats and an unscored reward a placeholder 0 that `_scored_group_mix`
        leaves out."""
        per_func = self._fulcrum_rewards_per_func
        if per_func is None or per_func.shape[0] != n:
            raise ValueError(
                f"rewards: expected {n} gathered rewards from TRL, got {None if per_func is None else per_func.shape[0]}"
            )
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        rewards = (per_func * weights).nansum(dim=1)  # in TRL's dtype, so NaN where TRL's is
        rewards[torch.isnan(per_func).all(dim=1)] = float("nan")
        scored = ~torch.isnan(rewards)
        return torch.nan_to_num(rewards.double(), nan=0.0).tolist(), scored.tolist()

    def _log_diagnostics(self, mode, report):
        metrics = self._metrics[mode]
        for key, name in _LENGTH_KEYS.items():
            metrics[name].append(_metric(report["diagnostics"][key]))
        for rule in fulcrum_ba.RULES:
            entry = report["rules"][rule]
            metrics[f"mass_ratio/{rule}"].append(_metric(entry["mass_ratio"]))
            metrics[f"len_weight_corr/{rule}"].append(_metric(entry["len_weight_corr"]))


__all__ = ["GRPOTrainer", "TRL_LOSS_TYPES"]
