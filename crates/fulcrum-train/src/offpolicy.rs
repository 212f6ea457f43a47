//! Engine rollouts before the update (design.md step 3a, engines only): the trainer's own old
//! log-probabilities, the engine/trainer mismatch, and truncated importance sampling.
//!
//! An engine samples with its own kernels (and, for llama.cpp, quantised or half-precision
//! weights), so its log-probabilities differ from the trainer's even at the same weights. As
//! verl does, the PPO ratio's denominator is recomputed by the trainer, and the engine's values
//! only measure the difference and weight the loss:
//! - `kl/engine`: the token-mean k3 estimate of KL(engine || trainer) on the engine's tokens,
//!   `exp(d) - 1 - d` with `d = log pi_trainer - log pi_engine`;
//! - with `rollout.is_cap = C`, each token's policy loss is weighted by
//!   `min(pi_trainer / pi_engine, C)` (truncated importance sampling: the tokens were drawn from
//!   the engine's distribution, not the trainer's); `rollout/is_capped_frac` is the fraction of
//!   tokens the cap cut;
//! - `rollout/stale`: responses sampled by weights other than the version the step expects.
//!
//! A token the engine gave no log-probability for (NaN: llama.cpp reports one per complete
//! UTF-8 character) is left out of `kl/engine` and has importance weight 1.

use fulcrum_model::logprobs::EntropyGrad;
use fulcrum_model::Model;

use crate::accumulate::{forward_logprobs, micro_batches, pack_micro_batch};
use crate::config::ForwardSettings;
use crate::error::TrainError;
use crate::packing::{response_values, Item};
use crate::rollout::Rollout;

/// What the engine check measured on a step's rollouts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineCheck {
    pub kl_engine: f64,
    pub stale: u64,
    pub is_capped_frac: f64,
}

/// Replaces each engine rollout's `old_logprobs` by the trainer's (no gradient), then measures
/// the mismatch and sets the importance weights.
pub fn check_engine_rollouts(
    model: &Model,
    rollouts: &mut [Rollout],
    fwd: &ForwardSettings,
    is_cap: Option<f64>,
    expected_version: Option<u64>,
) -> Result<EngineCheck, TrainError> {
    recompute_old_logprobs(model, rollouts, fwd)?;
    Ok(measure(rollouts, is_cap, expected_version))
}

/// The trainer's log-probabilities of every response, in the micro-batches of the update
/// (ordered by length, or with `ppo.share_prompt` one prompt forwarded once per micro-batch).
pub fn recompute_old_logprobs(
    model: &Model,
    rollouts: &mut [Rollout],
    fwd: &ForwardSettings,
) -> Result<(), TrainError> {
    let share = fwd.share_prompt;
    let fresh: Vec<(usize, Vec<f32>)> = {
        let items: Vec<Item<'_>> = rollouts
            .iter()
            .map(|rollout| Item {
                rollout,
                advantage: 0.0,
                weight: 0.0,
                active: true,
                selected: None,
            })
            .collect();
        let order: Vec<usize> = (0..items.len())
            .filter(|&i| !items[i].rollout.response_ids.is_empty())
            .collect();
        let mut fresh = Vec::with_capacity(order.len());
        for chunk in micro_batches(&items, order, fwd.micro_batch_size.max(1), share) {
            let mb: Vec<Item<'_>> = chunk.iter().map(|&i| items[i]).collect();
            let p = pack_micro_batch(&mb, share, model.device());
            let values = tch::no_grad(|| {
                let (out, _head) = forward_logprobs(model, &p, EntropyGrad::No, fwd)?;
                response_values(&p, &mb, &out.logprobs).map_err(|source| TrainError::Tensor {
                    what: "reading recomputed log-probabilities",
                    source,
                })
            })?;
            fresh.extend(chunk.into_iter().zip(values));
        }
        fresh
    };
    for (i, lp) in fresh {
        rollouts[i].old_logprobs = lp;
    }
    Ok(())
}

/// `kl/engine`, stale responses and (with a cap) the importance weights, from rollouts whose
/// `old_logprobs` are the trainer's.
pub fn measure(
    rollouts: &mut [Rollout],
    is_cap: Option<f64>,
    expected: Option<u64>,
) -> EngineCheck {
    let (mut kl, mut tokens, mut capped, mut stale) = (0.0, 0usize, 0usize, 0u64);
    for r in rollouts.iter_mut() {
        let Some(e) = &r.engine else { continue };
        if expected.is_some() && e.weight_version != expected {
            stale += 1;
        }
        let mut weights = Vec::with_capacity(e.logprobs.len());
        for (&trainer, &engine) in r.old_logprobs.iter().zip(&e.logprobs) {
            if engine.is_nan() {
                // The engine gave no log-probability for this token (llama.cpp, inside a
                // character split over tokens): out of the KL, importance weight 1.
                if is_cap.is_some() {
                    weights.push(1.0);
                }
                continue;
            }
            let d = f64::from(trainer) - f64::from(engine);
            kl += d.exp() - 1.0 - d;
            tokens += 1;
            let ratio = d.exp();
            if let Some(cap) = is_cap {
                if ratio > cap {
                    capped += 1;
                }
                weights.push(ratio.min(cap) as f32);
            }
        }
        if is_cap.is_some() {
            r.is_weights = Some(weights);
        }
    }
    let n = tokens.max(1) as f64;
    EngineCheck {
        kl_engine: kl / n,
        stale,
        is_capped_frac: capped as f64 / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packing::test_rollout;
    use crate::rollout::EngineSample;

    #[test]
    fn kl_is_zero_on_agreement_and_weights_are_capped() {
        let mut a = test_rollout(2, 3);
        a.engine = Some(EngineSample {
            logprobs: a.old_logprobs.clone(),
            weight_version: Some(4),
        });
        let mut rs = vec![a.clone()];
        let c = measure(&mut rs, Some(2.0), Some(4));
        assert_eq!(c, EngineCheck::default());
        assert_eq!(rs[0].is_weights.as_deref(), Some(&[1.0f32, 1.0, 1.0][..]));
        // The trainer finds the tokens far likelier than the engine did: ratio e^2 > cap 2.
        let mut b = a.clone();
        b.engine = Some(EngineSample {
            logprobs: a.old_logprobs.iter().map(|x| x - 2.0).collect(),
            weight_version: Some(3),
        });
        let mut rs = vec![b];
        let c = measure(&mut rs, Some(2.0), Some(4));
        assert_eq!(c.stale, 1);
        assert!((c.kl_engine - (2f64.exp() - 3.0)).abs() < 1e-5, "{c:?}");
        assert_eq!(c.is_capped_frac, 1.0);
        assert_eq!(rs[0].is_weights.as_deref(), Some(&[2.0f32, 2.0, 2.0][..]));
        // Off: no weights set.
        let mut rs = vec![a];
        measure(&mut rs, None, Some(4));
        assert!(rs[0].is_weights.is_none());
    }
}
