//! One GRPO step, top to bottom, in the order of design.md's diagram.
//!
//! Included: dynamic sampling (DAPO), soft overlong punishment and overlong filtering, any
//! advantage estimator and aggregation rule of the spec, PPO epochs over mini-batches of whole
//! groups split into micro-batches, the asymmetric and dual clip, optional KL to a frozen
//! reference (`k1`/`k3`) and entropy bonus (both token-mean over the step's response tokens,
//! whatever the rule), the non-finite guard, gradient clipping and AdamW.
//! Left out: value functions, reward models, sequence packing across responses.

use std::time::Instant;

use fulcrum_core::cov_selection::{self, CovInput};
use fulcrum_core::diagnostics::{mass_share, update_cosine};
use fulcrum_core::{advantages, Diagnostics, RuleParams, SplitMix64, StepBatch};
use fulcrum_model::optim::Update;
use fulcrum_tasks::Task;
use serde_json::{json, Value};

use crate::accumulate::{backward_micro_batches, MicroStats};
use crate::config::{Config, PpoConfig, RolloutConfig};
use crate::data::DataStream;
use crate::draw::{draw_groups, Drawn, StepOf};
use crate::engine::RolloutEngine;
use crate::error::TrainError;
use crate::metrics::{LengthsBySign, RuleMasses, StepMetrics};
use crate::offpolicy::EngineCheck;
use crate::plan::UpdatePlan;
use crate::policy::{guarded_update, Policy};
use crate::ranks::Ranks;
use crate::rollout::Rollout;

/// What a step leaves behind: its metrics line, a few samples, and its response lengths by
/// advantage sign (the dashboards' histograms).
pub struct StepReport {
    pub metrics: StepMetrics,
    pub samples: Vec<Value>,
    pub lengths: LengthsBySign,
}

/// One GRPO step at learning rate `lr`, sampling on `engine`, as one rank of `ranks` (each
/// rank samples and back-propagates its share; every number of the step is global).
#[allow(clippy::too_many_arguments)]
pub fn grpo_step(
    engine: &mut RolloutEngine,
    policy: &mut Policy,
    ranks: &mut Ranks,
    task: &dyn Task,
    cfg: &Config,
    step: u64,
    data: &mut DataStream,
    lr: f64,
) -> Result<StepReport, TrainError> {
    let t_start = Instant::now();

    // 0. Engines are brought to the policy after `step - 1` steps (a weight push when they do
    // not hold it; behind the draws requested ahead, `rollout.max_staleness`).
    let push_secs = engine.sync(&policy.model, step - 1, ranks)?;
    let t_pushed = t_start.elapsed().as_secs_f64();

    // 1-3. Sample G responses per prompt and score them (dynamic sampling draws more).
    let at = StepOf {
        seed: cfg.seed,
        step,
        steps: cfg.steps,
    };
    let mut drawn = draw_groups(engine, &policy.model, task, &cfg.rollout, at, data, ranks)?;
    let t_sampled = t_start.elapsed().as_secs_f64() - t_pushed;
    // Colocated engines free the accelerator for the update (counted with the push).
    let push_secs = push_secs + engine.release_memory(&cfg.rollout, ranks)?;

    // 3a. Engine rollouts: the trainer's own old log-probabilities, the engine/trainer
    // mismatch and the truncated importance weights (offpolicy.rs).
    let t_check = Instant::now();
    let fwd = cfg.forward();
    let (is_cap, trained) = (cfg.rollout.is_cap, step - 1);
    let check = engine.check_rollouts(&policy.model, &mut drawn.rollouts, &fwd, is_cap, trained)?;
    let check_secs = t_check.elapsed().as_secs_f64();
    let rollouts = &drawn.rollouts;

    // 3b. Reward shaping (DAPO's soft overlong punishment) and overlong filtering: a truncated
    // response keeps its place in the group's baseline but has no loss-masked tokens, so every
    // rule gives it weight 0.
    let rewards: Vec<f64> = rollouts
        .iter()
        .map(|x| x.reward - overlong_penalty(&cfg.rollout, x))
        .collect();
    let groups: Vec<usize> = rollouts.iter().map(|x| x.group).collect();
    let (lengths, loss_lengths) = rule_lengths(rollouts, cfg.rollout.overlong_filter);

    // 4. Advantages per group.
    let adv = advantages::compute(cfg.advantage, &groups, &rewards, &lengths)?;

    // 5. Aggregation weights for the whole step batch, once (and every rule's diagnostics).
    let batch = StepBatch::new(&groups, &loss_lengths, &adv)?;
    let params = RuleParams {
        ba_count: cfg.ba_count,
        l_norm: cfg.l_norm(),
        ba_pos_scale: cfg.ba_pos_scale,
    };
    let diag = Diagnostics::compute(&batch, &rewards, &params)?;
    let weights = cfg.rule.weights(&batch, &params);
    // 5a. The tokens Clip-Cov / KL-Cov treat differently, chosen once for the step.
    let selection = cov_selection(&cfg.ppo, cfg.seed, step, rollouts, &adv, &loss_lengths);
    let plan = UpdatePlan::new(
        rollouts,
        &adv,
        &weights,
        &loss_lengths,
        &selection,
        cfg.ppo.mini_batches,
    );

    // 6-8. PPO epochs over the plan's mini-batches: 6. forward/backward over micro-batches,
    // 7. the non-finite guard and gradient clipping, 8. the optimizer step.
    let t_train0 = Instant::now();
    let (mut stats, mut opt) = (MicroStats::default(), OptSummary::new(lr));
    let Policy {
        model,
        opt: adamw,
        reference,
    } = policy;
    for _epoch in 0..cfg.ppo.epochs {
        for k in 0..plan.mini_batches.len() {
            // This rank's share of the mini-batch's groups (all of them in one process).
            let groups = &plan.mini_batches[k];
            let mini = plan.items_of(&groups[ranks.share(groups.len())]);
            let (s, update) = guarded_update(model, adamw, ranks, cfg.optim.grad_clip, lr, || {
                let reg = plan.reg_weight;
                let s =
                    backward_micro_batches(model, reference.as_ref(), &mini, reg, &fwd, &cfg.ppo)?;
                let loss = s.loss;
                Ok((s, loss))
            })?;
            opt.add(update);
            stats.add(&s);
        }
    }
    let stats = stats.summed(ranks)?;
    let times = Timings {
        sample: t_sampled - drawn.score_secs,
        score: drawn.score_secs,
        old_logprobs: check_secs,
        train: t_train0.elapsed().as_secs_f64(),
        weight_push: push_secs,
        step: t_start.elapsed().as_secs_f64(),
    };

    // 9. Metrics: rewards, lengths, every rule's diagnostics, the optimisation, timings.
    let metrics = step_metrics(
        step, &drawn, &rewards, &batch, &weights, &diag, &stats, &opt, &times, &check,
    );
    let samples = rollouts
        .iter()
        .step_by(cfg.rollout.group_size.max(1))
        .take(2)
        .map(|x| {
            let mut j = json!({"step": step, "group": x.group, "reward": x.reward, "reason": x.reason, "response": x.text});
            if let Some(t) = turns(&policy.model, x) {
                j["turns"] = t;
            }
            j
        })
        .collect();
    let mut by_sign = LengthsBySign::default();
    for (&len, &a) in lengths.iter().zip(&adv) {
        if a > 0.0 {
            by_sign.positive.push(len as f64);
        } else if a < 0.0 {
            by_sign.negative.push(len as f64);
        }
    }
    Ok(StepReport {
        metrics,
        samples,
        lengths: by_sign,
    })
}

/// Each response's length as the rules see it, and the loss-masked one (0 for a truncated
/// response under `overlong_filter`). A length counts the model's own tokens only: a tool's
/// answers are context, so a multi-turn response weighs as its model tokens do under every rule.
fn rule_lengths(rollouts: &[Rollout], overlong_filter: bool) -> (Vec<i64>, Vec<i64>) {
    let lengths: Vec<i64> = rollouts.iter().map(|x| x.model_len() as i64).collect();
    let loss = rollouts
        .iter()
        .zip(&lengths)
        .map(|(x, &l)| if overlong_filter && x.truncated { 0 } else { l })
        .collect();
    (lengths, loss)
}

/// A multi-turn response as its turns: the model's and the tools' runs of tokens, each with
/// its text and token count (a tool's tokens are masked from the loss); `None` without tools.
fn turns(model: &fulcrum_model::Model, x: &Rollout) -> Option<serde_json::Value> {
    if !x.tool_mask.contains(&true) {
        return None;
    }
    let tok = model.tokenizer().ok()?;
    let mut out = Vec::new();
    let mut start = 0;
    while start < x.response_ids.len() {
        let tool = x.is_tool(start);
        let end = (start..x.response_ids.len())
            .find(|&j| x.is_tool(j) != tool)
            .unwrap_or(x.response_ids.len());
        let text = tok.decode(&x.response_ids[start..end], false).ok()?;
        let role = if tool { "tool" } else { "model" };
        out.push(json!({"role": role, "text": text, "tokens": end - start, "masked": tool}));
        start = end;
    }
    Some(serde_json::Value::Array(out))
}

/// Wall-clock seconds of the step's phases (recorded, never reproducible).
struct Timings {
    sample: f64,
    score: f64,
    old_logprobs: f64,
    train: f64,
    weight_push: f64,
    step: f64,
}

/// The step's metrics line.
#[allow(clippy::too_many_arguments)]
fn step_metrics(
    step: u64,
    drawn: &Drawn,
    rewards: &[f64],
    batch: &StepBatch,
    weights: &[f64],
    diag: &Diagnostics,
    stats: &MicroStats,
    opt: &OptSummary,
    times: &Timings,
    check: &EngineCheck,
) -> StepMetrics {
    let rollouts = &drawn.rollouts;
    let n = rollouts.len().max(1) as f64;
    let tokens = stats.tokens.max(1) as f64;
    let l = &diag.lengths;
    StepMetrics {
        step,
        reward_mean: rewards.iter().sum::<f64>() / n,
        acc_train: rollouts.iter().filter(|x| x.correct).count() as f64 / n,
        len_truncated_frac: rollouts.iter().filter(|x| x.truncated).count() as f64 / n,
        len_mean: l.len_mean,
        len_cv: l.len_cv,
        len_pos_mean: l.len_pos_mean,
        len_neg_mean: l.len_neg_mean,
        len_gap: l.len_gap,
        len_gap_rel: l.len_gap_rel,
        len_cv_side: l.len_cv_side,
        groups_mixed: l.frac_mixed,
        groups_all_correct: l.frac_all_correct,
        groups_all_wrong: l.frac_all_wrong,
        rules: RuleMasses {
            mass: diag
                .rules
                .iter()
                .map(|d| (d.rule, d.mass.clone()))
                .collect(),
            update_cos: diag
                .rules
                .iter()
                .map(|d| (d.rule, update_cosine(batch, &d.weights, weights)))
                .collect(),
            trunc_share: {
                let cut: Vec<bool> = rollouts.iter().map(|x| x.truncated).collect();
                diag.rules
                    .iter()
                    .map(|d| (d.rule, mass_share(batch, &d.weights, &cut)))
                    .collect()
            },
        },
        loss_total: stats.loss,
        loss_policy: stats.policy_loss,
        clip_frac_low: stats.clipped[0] / tokens,
        clip_frac_high: stats.clipped[1] / tokens,
        clip_frac: (stats.clipped[0] + stats.clipped[1]) / tokens,
        clip_dual_frac: stats.clipped[2] / tokens,
        clip_cov_selected_frac: stats.clipped[3] / tokens,
        kl_sampling: stats.kl_sampling_sum / tokens,
        kl_reference: stats.kl_ref_sum / tokens,
        entropy_mean: stats.entropy_sum / tokens,
        grad_norm: opt.grad_norm_max,
        skipped: opt.skipped > 0,
        skip_reason: None,
        opt_steps: opt.applied,
        opt_lr: opt.lr,
        groups_drawn: drawn.groups_drawn as u64,
        groups_dropped: drawn.groups_dropped as u64,
        sample_tokens: rollouts.iter().map(|x| x.response_ids.len() as i64).sum(),
        time_sample: times.sample,
        time_score: times.score,
        time_train: times.train,
        time_old_logprobs: times.old_logprobs,
        time_step: times.step,
        time_weight_push: times.weight_push,
        kl_engine: check.kl_engine,
        rollout_stale: check.stale,
        rollout_staleness_mean: drawn.staleness_sum as f64 / n,
        rollout_staleness_max: drawn.staleness_max,
        rollout_dropped_stale: drawn.dropped_stale,
        rollout_is_capped_frac: check.is_capped_frac,
        tool_calls_mean: rollouts.iter().map(|x| x.tool_calls() as f64).sum::<f64>() / n,
        tool_errors: drawn.tool.errors as u64,
        tool_timeouts: drawn.tool.timeouts as u64,
        turns_mean: rollouts
            .iter()
            .map(|x| 1.0 + x.tool_calls() as f64)
            .sum::<f64>()
            / n,
        len_model_tokens: rollouts.iter().map(|x| x.model_len() as f64).sum::<f64>() / n,
        len_tool_tokens: rollouts
            .iter()
            .map(|x| (x.response_ids.len() - x.model_len()) as f64)
            .sum::<f64>()
            / n,
    }
}

/// The optimizer steps of one GRPO step: its rate, applied, skipped, the largest gradient norm.
#[derive(Debug)]
struct OptSummary {
    lr: f64,
    applied: u64,
    skipped: u64,
    grad_norm_max: f64,
}

impl OptSummary {
    fn new(lr: f64) -> Self {
        OptSummary {
            lr,
            applied: 0,
            skipped: 0,
            grad_norm_max: 0.0,
        }
    }

    fn add(&mut self, u: Update) {
        match u {
            Update::Skipped => self.skipped += 1,
            Update::Applied { grad_norm } => {
                self.grad_norm_max = self.grad_norm_max.max(grad_norm);
                self.applied += 1;
            }
        }
    }
}

/// The step's Clip-Cov / KL-Cov token choice (`fulcrum_core::cov_selection`) from
/// the sampling-time log-probabilities of every loss token, so that it is the same whatever the
/// micro-batch size and rank count; empty for the other losses. A tool's tokens are no loss
/// tokens: the covariance is taken over the model's own tokens, and the choice is given back
/// at their places in the response (a tool token is never chosen).
fn cov_selection(
    ppo: &PpoConfig,
    seed: u64,
    step: u64,
    rollouts: &[Rollout],
    adv: &[f64],
    loss_lengths: &[i64],
) -> Vec<Vec<bool>> {
    if !ppo.loss.uses_cov_selection() {
        return Vec::new();
    }
    let logp: Vec<Vec<f64>> = rollouts
        .iter()
        .zip(loss_lengths)
        .map(|(x, &l)| {
            let own = (0..x.old_logprobs.len()).filter(|&j| !x.is_tool(j));
            own.take(l.max(0) as usize)
                .map(|j| f64::from(x.old_logprobs[j]))
                .collect()
        })
        .collect();
    let inputs: Vec<CovInput<'_>> = logp
        .iter()
        .zip(adv)
        .map(|(logp, &adv)| CovInput { logp, adv })
        .collect();
    let mut rng = SplitMix64::derive(seed, "cov-selection", step);
    let chosen = cov_selection::cov_selection(ppo.loss, &inputs, &ppo.params, &mut rng);
    chosen
        .into_iter()
        .zip(rollouts)
        .map(|(own, x)| {
            if x.tool_mask.is_empty() {
                return own;
            }
            let mut own = own.into_iter();
            (0..x.response_ids.len())
                .map(|j| !x.is_tool(j) && own.next().unwrap_or(false))
                .collect()
        })
        .collect()
}

/// DAPO's soft overlong punishment: a linear penalty over the last `overlong_buffer` tokens
/// before `max_response_len`, up to `overlong_penalty`.
fn overlong_penalty(r: &RolloutConfig, x: &Rollout) -> f64 {
    if r.overlong_buffer == 0 {
        return 0.0;
    }
    let start = r.max_response_len - r.overlong_buffer;
    let len = x.response_ids.len();
    if len <= start {
        0.0
    } else {
        r.overlong_penalty * ((len - start) as f64 / r.overlong_buffer as f64).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packing::test_rollout;
    use fulcrum_core::{PolicyLoss, Rule};

    #[test]
    fn every_rule_weighs_a_multi_turn_response_by_its_model_tokens() {
        // One group: a right answer of 3 model tokens around a 2-token tool answer, a wrong one
        // of 1 model token after a 4-token answer. Both are 5 tokens long in the sequence.
        let mut right = test_rollout(2, 5);
        right.tool_mask = vec![false, true, true, false, false];
        let mut wrong = test_rollout(2, 5);
        wrong.tool_mask = vec![true, true, true, true, false];
        let batch_of = |lengths: &[i64]| StepBatch::new(&[0, 0], lengths, &[1.0, -1.0]).unwrap();
        let (lengths, loss) = rule_lengths(&[right, wrong], false);
        assert_eq!((lengths.clone(), loss.clone()), (vec![3, 1], vec![3, 1]));
        let params = RuleParams {
            ba_count: Default::default(),
            l_norm: 64.0,
            ba_pos_scale: 1.0,
        };
        let ours = batch_of(&loss);
        // By hand: token divides by the 4 model tokens; seq gives 1/(2 |o|).
        assert_eq!(Rule::Token.weights(&ours, &params), vec![0.25, 0.25]);
        let seq = Rule::Seq.weights(&ours, &params);
        assert!(
            (seq[0] - 1.0 / 6.0).abs() < 1e-12 && (seq[1] - 0.5).abs() < 1e-12,
            "{seq:?}"
        );
        // Every rule is the rule on the model-token lengths, never on the 5-token sequences.
        for &rule in Rule::ALL {
            assert_eq!(
                rule.weights(&ours, &params),
                rule.weights(&batch_of(&[3, 1]), &params),
                "{rule}"
            );
            if matches!(rule, Rule::Token | Rule::Seq | Rule::Ba) {
                assert_ne!(
                    rule.weights(&ours, &params),
                    rule.weights(&batch_of(&[5, 5]), &params),
                    "{rule}"
                );
            }
        }
    }

    #[test]
    fn clip_cov_and_kl_cov_choose_among_the_model_tokens_only() {
        // Two responses with tool answers in their middles, and the same two with the tool
        // tokens taken out: the choice is the same, at the model tokens' places.
        let mut a = test_rollout(2, 6);
        a.tool_mask = vec![false, true, true, false, false, false];
        a.old_logprobs = vec![-0.1, 0.0, 0.0, -2.0, -0.3, -1.5];
        let mut b = test_rollout(2, 5);
        b.tool_mask = vec![false, false, true, true, false];
        b.old_logprobs = vec![-1.2, -0.05, 0.0, 0.0, -0.7];
        let own = |x: &Rollout| {
            let mut y = x.clone();
            let keep: Vec<usize> = (0..x.response_ids.len())
                .filter(|&j| !x.is_tool(j))
                .collect();
            y.response_ids = keep.iter().map(|&j| x.response_ids[j]).collect();
            y.old_logprobs = keep.iter().map(|&j| x.old_logprobs[j]).collect();
            y.tool_mask = Vec::new();
            y
        };
        let adv = [1.0, -1.0];
        for loss in [PolicyLoss::ClipCov, PolicyLoss::KlCov] {
            let mut ppo = PpoConfig {
                loss,
                ..PpoConfig::default()
            };
            ppo.params.kl_cov_frac = 0.5;
            ppo.params.clip_cov_frac = 0.5;
            ppo.params.clip_cov_lb = -10.0;
            ppo.params.clip_cov_ub = 10.0;
            let multi = [a.clone(), b.clone()];
            let (_, loss_lengths) = rule_lengths(&multi, false);
            let got = cov_selection(&ppo, 3, 1, &multi, &adv, &loss_lengths);
            let plain = [own(&a), own(&b)];
            let want = cov_selection(&ppo, 3, 1, &plain, &adv, &[4, 3]);
            for (x, (g, w)) in multi.iter().zip(got.iter().zip(&want)) {
                assert_eq!(g.len(), x.response_ids.len(), "{loss}");
                let at_model: Vec<bool> = (0..g.len())
                    .filter(|&j| !x.is_tool(j))
                    .map(|j| g[j])
                    .collect();
                assert_eq!(&at_model, w, "{loss}");
                assert!((0..g.len()).all(|j| !(x.is_tool(j) && g[j])), "{loss}");
            }
            assert!(got.iter().flatten().any(|&c| c), "{loss} chose something");
        }
    }
}
