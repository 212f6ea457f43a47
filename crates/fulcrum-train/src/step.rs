//! One GRPO step, top to bottom, in the order of design.md's diagram.
//!
//! Included: dynamic sampling (DAPO), soft overlong punishment and overlong filtering, any
//! advantage estimator and aggregation rule of the spec, PPO epochs over mini-batches of whole
//! groups split into micro-batches, the asymmetric and dual clip, optional KL to a frozen
//! reference (`k1`/`k3`) and entropy bonus (both token-mean over the step's response tokens,
//! whatever the rule), the non-finite guard, gradient clipping and AdamW.
//! Left out: value functions, reward models, sequence packing across responses.
//!
//! With several mini-batches, the weights of the whole step batch are multiplied by the number
//! of mini-batches, so each optimizer step sees a loss of the usual scale while the relative
//! weights stay those of the whole batch.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use fulcrum_core::{advantages, Diagnostics, RuleParams, StepBatch};
use fulcrum_model::optim::{clip_grad_norm, grads_are_finite, AdamW};
use fulcrum_model::{Model, Sampling};
use fulcrum_tasks::Task;
use serde_json::{json, Value};

use crate::config::Config;
use crate::data::{mix, DataStream};
use crate::error::TrainError;
use crate::minibatch::{backward_micro_batches, MicroStats};
use crate::packing::Item;
use crate::rollout::{sample_and_score, Rollout, SampleSettings};

/// What a step leaves behind: its metrics line and a few samples.
pub struct StepReport {
    pub metrics: BTreeMap<String, Value>,
    pub samples: Vec<Value>,
}

/// The policy being trained, its optimizer, and the frozen reference (when KL is on).
pub struct Policy {
    pub model: Model,
    pub opt: AdamW,
    pub reference: Option<Model>,
}

pub fn grpo_step(
    policy: &mut Policy,
    task: &dyn Task,
    cfg: &Config,
    step: u64,
    data: &mut DataStream,
    lr: f64,
) -> Result<StepReport, TrainError> {
    let r = &cfg.rollout;
    let t_start = Instant::now();
    let mut t_score = 0.0;

    // 1-3. Sample G responses per prompt and score them; with dynamic sampling keep drawing
    // until enough groups have unequal rewards (or the cap is reached).
    let sampling = Sampling::Sample {
        temperature: r.temperature,
        top_k: (r.top_k > 0).then_some(r.top_k as i64),
        top_p: (r.top_p < 1.0).then_some(r.top_p),
    };
    let max_draws = if r.dynamic_sampling {
        r.dynamic_sampling_max_draws
    } else {
        1
    };
    let mut rollouts: Vec<Rollout> = Vec::new();
    let (mut draws, mut groups_drawn, mut groups_dropped) = (0, 0, 0);
    while draws < max_draws {
        let examples = data.take(task, r.prompts_per_step)?;
        let settings = SampleSettings {
            samples_per_prompt: r.group_size,
            max_new_tokens: r.max_response_len,
            sampling,
            seed: mix(mix(cfg.seed, step), draws as u64),
            max_prompt_len: r.max_prompt_len,
        };
        let (mut drawn, score_secs) =
            sample_and_score(&policy.model, task, &examples, &settings, groups_drawn)?;
        t_score += score_secs;
        groups_drawn += examples.len();
        draws += 1;
        if r.dynamic_sampling {
            let before = drawn.len();
            // One pass: each group's reward range, then keep the groups whose rewards differ.
            let mut range: HashMap<usize, (f64, f64)> = HashMap::new();
            for x in &drawn {
                let e = range.entry(x.group).or_insert((x.reward, x.reward));
                *e = (e.0.min(x.reward), e.1.max(x.reward));
            }
            drawn.retain(|x| range.get(&x.group).is_some_and(|(lo, hi)| lo < hi));
            groups_dropped += (before - drawn.len()) / r.group_size;
        }
        rollouts.extend(drawn);
        let kept_groups = rollouts.len() / r.group_size;
        if !r.dynamic_sampling || kept_groups >= r.prompts_per_step {
            break;
        }
    }
    if r.dynamic_sampling {
        rollouts.truncate(r.prompts_per_step * r.group_size);
    }
    let t_sampled = t_start.elapsed().as_secs_f64();

    // 3b. Reward shaping: DAPO's soft overlong punishment.
    let rewards: Vec<f64> = rollouts
        .iter()
        .map(|x| x.reward - overlong_penalty(cfg, x))
        .collect();
    let groups: Vec<usize> = rollouts.iter().map(|x| x.group).collect();
    let lengths: Vec<i64> = rollouts
        .iter()
        .map(|x| x.response_ids.len() as i64)
        .collect();
    // Overlong filtering: a truncated response keeps its place in the group's baseline but has
    // no loss-masked tokens, so every rule gives it weight 0.
    let loss_lengths: Vec<i64> = rollouts
        .iter()
        .zip(&lengths)
        .map(|(x, &l)| {
            if r.overlong_filter && x.truncated {
                0
            } else {
                l
            }
        })
        .collect();

    // 4. Advantages per group.
    let adv = advantages::compute(cfg.advantage, &groups, &rewards, &lengths)
        .map_err(TrainError::data)?;

    // 5. Aggregation weights for the whole step batch, once (and every rule's diagnostics).
    let batch = StepBatch::new(&groups, &loss_lengths, &adv).map_err(TrainError::data)?;
    let params = RuleParams {
        ba_count: cfg.ba_count,
        l_norm: cfg.l_norm(),
    };
    let diag = Diagnostics::compute(&batch, &rewards, &params).map_err(TrainError::data)?;
    let group_ids: Vec<usize> = dedup_in_order(&groups);
    let n_mini = cfg.ppo.mini_batches.min(group_ids.len()).max(1);
    let weights: Vec<f64> = cfg
        .rule
        .weights(&batch, &params)
        .iter()
        .map(|w| w * n_mini as f64)
        .collect();
    let active_tokens: i64 = loss_lengths.iter().sum();
    let reg_weight = if active_tokens > 0 {
        n_mini as f64 / active_tokens as f64
    } else {
        0.0
    };
    let items: Vec<Item<'_>> = rollouts
        .iter()
        .enumerate()
        .map(|(i, x)| Item {
            rollout: x,
            advantage: adv[i],
            weight: weights[i],
            active: loss_lengths[i] > 0,
        })
        .collect();

    // 6-8. PPO epochs over mini-batches of whole groups: micro-batch forward/backward, the
    // non-finite guard, clipping and the optimizer step.
    let t_train0 = Instant::now();
    let mut stats = MicroStats::default();
    let (mut skipped, mut grad_norm_max, mut opt_steps) = (0u64, 0f64, 0u64);
    for _epoch in 0..cfg.ppo.epochs {
        for chunk in group_ids.chunks(group_ids.len().div_ceil(n_mini).max(1)) {
            let mini: Vec<Item<'_>> = items
                .iter()
                .filter(|it| chunk.contains(&it.rollout.group))
                .copied()
                .collect();
            let (s, outcome) = guarded_update(policy, &mini, reg_weight, cfg, lr)?;
            match outcome {
                Update::Skipped => skipped += 1,
                Update::Applied { grad_norm } => {
                    grad_norm_max = grad_norm_max.max(grad_norm);
                    opt_steps += 1;
                }
            }
            stats.add(&s);
        }
    }
    let t_train = t_train0.elapsed().as_secs_f64();

    // 9. Metrics: rewards, lengths, every rule's diagnostics, the optimisation, timings.
    let mut m = BTreeMap::new();
    let n = rollouts.len().max(1) as f64;
    m.insert("step".into(), json!(step));
    m.insert("reward/mean".into(), json!(rewards.iter().sum::<f64>() / n));
    m.insert(
        "acc/train".into(),
        json!(rollouts.iter().filter(|x| x.correct).count() as f64 / n),
    );
    m.insert(
        "len/truncated_frac".into(),
        json!(rollouts.iter().filter(|x| x.truncated).count() as f64 / n),
    );
    for (k, v) in serde_json::to_value(&diag.lengths)
        .map_err(TrainError::data)?
        .as_object()
        .into_iter()
        .flatten()
    {
        let key = match k.as_str() {
            "len_mean" => "len/mean".to_string(),
            "len_cv" => "len/cv".to_string(),
            "len_pos_mean" => "len/pos_mean".to_string(),
            "len_neg_mean" => "len/neg_mean".to_string(),
            "len_gap" => "len/gap".to_string(),
            "len_gap_rel" => "len/gap_rel".to_string(),
            other => format!("groups/{}", other.trim_start_matches("frac_")),
        };
        m.insert(key, v.clone());
    }
    for rd in &diag.rules {
        let name = rd.rule.name();
        m.insert(format!("mass_pos/{name}"), json!(rd.mass.mass_pos));
        m.insert(format!("mass_neg/{name}"), json!(rd.mass.mass_neg));
        m.insert(format!("mass_ratio/{name}"), json!(rd.mass.mass_ratio));
        m.insert(
            format!("len_weight_corr/{name}"),
            json!(rd.mass.len_weight_corr),
        );
    }
    let tokens = stats.tokens.max(1) as f64;
    m.insert("loss/total".into(), json!(stats.loss));
    m.insert("loss/policy".into(), json!(stats.policy_loss));
    m.insert("clip/frac_low".into(), json!(stats.clipped[0] / tokens));
    m.insert("clip/frac_high".into(), json!(stats.clipped[1] / tokens));
    m.insert(
        "clip/frac".into(),
        json!((stats.clipped[0] + stats.clipped[1]) / tokens),
    );
    m.insert("clip/dual_frac".into(), json!(stats.clipped[2] / tokens));
    m.insert("kl/sampling".into(), json!(stats.kl_sampling_sum / tokens));
    m.insert("kl/reference".into(), json!(stats.kl_ref_sum / tokens));
    m.insert("entropy/mean".into(), json!(stats.entropy_sum / tokens));
    m.insert("grad/norm".into(), json!(grad_norm_max));
    m.insert("skipped".into(), json!(skipped > 0));
    m.insert("opt/steps".into(), json!(opt_steps));
    m.insert("opt/lr".into(), json!(lr));
    m.insert("sample/groups_drawn".into(), json!(groups_drawn));
    m.insert("sample/groups_dropped".into(), json!(groups_dropped));
    m.insert("sample/tokens".into(), json!(lengths.iter().sum::<i64>()));
    m.insert("time/sample".into(), json!(t_sampled - t_score));
    m.insert("time/score".into(), json!(t_score));
    m.insert("time/train".into(), json!(t_train));
    m.insert("time/step".into(), json!(t_start.elapsed().as_secs_f64()));

    let samples = rollouts
        .iter()
        .step_by(r.group_size.max(1))
        .take(2)
        .map(|x| json!({"step": step, "group": x.group, "reward": x.reward, "reason": x.reason, "response": x.text}))
        .collect();
    Ok(StepReport {
        metrics: m,
        samples,
    })
}

/// What happened to one optimizer step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Update {
    /// Gradients were finite: clipped and applied.
    Applied { grad_norm: f64 },
    /// The loss or a gradient was not finite: nothing was changed.
    Skipped,
}

/// Steps 6-8 for one mini-batch: zero the gradients, forward/backward over its micro-batches,
/// then either skip (non-finite loss or gradient: weights and optimizer state untouched) or
/// clip and take the AdamW step.
pub fn guarded_update(
    policy: &mut Policy,
    mini: &[Item<'_>],
    reg_weight: f64,
    cfg: &Config,
    lr: f64,
) -> Result<(MicroStats, Update), TrainError> {
    policy.opt.zero_grad();
    let s = backward_micro_batches(policy, mini, reg_weight, cfg)?;
    let vs = policy.model.var_store();
    if !s.loss.is_finite() || !grads_are_finite(vs) {
        policy.opt.zero_grad();
        return Ok((s, Update::Skipped));
    }
    let grad_norm = if cfg.optim.grad_clip > 0.0 {
        clip_grad_norm(vs, cfg.optim.grad_clip)
    } else {
        fulcrum_model::optim::grad_norm(vs)
    };
    policy.opt.step(lr);
    policy.opt.zero_grad();
    Ok((s, Update::Applied { grad_norm }))
}

/// DAPO's soft overlong punishment: a linear penalty over the last `overlong_buffer` tokens
/// before `max_response_len`, up to `overlong_penalty`.
fn overlong_penalty(cfg: &Config, x: &Rollout) -> f64 {
    let r = &cfg.rollout;
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

/// The distinct group ids in order of first appearance.
fn dedup_in_order(groups: &[usize]) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    groups.iter().copied().filter(|g| seen.insert(*g)).collect()
}
