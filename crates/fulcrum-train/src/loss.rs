//! The policy loss on packed tensors: the spec's per-token PPO loss with asymmetric and dual
//! clip (the same formula as `fulcrum_core::ppo_loss::token_loss`, tested against it), and the
//! per-token KL estimators.

use fulcrum_core::{ClipParams, KlEstimator};
use tch::{Kind, Tensor};

use crate::packing::Packed;

/// The per-token PPO loss of the spec on tensors (the same formula as
/// `fulcrum_core::ppo_loss::token_loss`, tested against it):
///
/// `l = max(-A r, -A clip(r, 1-eps_low, 1+eps_high))`, and `min(l, -A c)` where `A < 0`.
///
/// Returns the per-token loss and the counts of tokens (within `mask`) clipped low, clipped
/// high and dual-clipped.
pub fn ppo_token_loss(logprobs: &Tensor, p: &Packed, clip: &ClipParams) -> (Tensor, [f64; 3]) {
    let ratio = (logprobs - &p.old_logprobs).exp();
    let a = &p.advantages;
    let clipped = ratio.clamp(1.0 - clip.eps_low, 1.0 + clip.eps_high);
    let unclipped_loss = -a * &ratio;
    let clipped_loss = -a * &clipped;
    let loss = unclipped_loss.maximum(&clipped_loss);
    let neg = a.lt(0.0);
    let cap = -a * clip.dual_clip_c;
    let dual = neg.logical_and(&loss.gt_tensor(&cap));
    let loss = loss.where_self(&dual.logical_not(), &cap);
    let counts = tch::no_grad(|| {
        let m = p.mask.gt(0.0);
        let high = a
            .gt(0.0)
            .logical_and(&ratio.gt(1.0 + clip.eps_high))
            .logical_and(&m);
        let low = neg
            .logical_and(&ratio.lt(1.0 - clip.eps_low))
            .logical_and(&m);
        let dual = dual.logical_and(&m);
        let count = |t: &Tensor| t.sum(Kind::Float).double_value(&[]);
        [count(&low), count(&high), count(&dual)]
    });
    (loss, counts)
}

/// The per-token KL estimate between the current policy (`logp`) and another (`logp_ref`):
/// `k1 = logp - logp_ref` or `k3 = exp(logp_ref - logp) - (logp_ref - logp) - 1`.
pub fn kl_estimate(logp: &Tensor, logp_ref: &Tensor, estimator: KlEstimator) -> Tensor {
    let d = logp_ref - logp;
    match estimator {
        KlEstimator::K1 => -d,
        KlEstimator::K3 => d.exp() - &d - 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packing::{pack, test_rollout as rollout, Item};
    use fulcrum_core::ppo_loss;
    use tch::Device;

    #[test]
    fn tensor_loss_matches_the_core_formula() {
        let clip = ClipParams {
            eps_low: 0.2,
            eps_high: 0.28,
            dual_clip_c: 3.0,
        };
        let a = rollout(1, 6);
        let b = rollout(1, 6);
        let items = [
            Item {
                rollout: &a,
                advantage: 0.8,
                weight: 1.0,
                active: true,
            },
            Item {
                rollout: &b,
                advantage: -1.3,
                weight: 1.0,
                active: true,
            },
        ];
        let p = pack(&items, Device::Cpu);
        let shifts = [-2.0f32, -0.4, -0.1, 0.0, 0.2, 0.5, 1.5];
        let mut new = Vec::<f32>::try_from(p.old_logprobs.flatten(0, -1)).unwrap();
        for (k, v) in new.iter_mut().enumerate() {
            *v += shifts[k % shifts.len()];
        }
        let lp = Tensor::from_slice(&new).view([2, 6]);
        let (loss, counts) = ppo_token_loss(&lp, &p, &clip);
        let got: Vec<f32> = Vec::try_from(loss.flatten(0, -1)).unwrap();
        let old: Vec<f32> = Vec::try_from(p.old_logprobs.flatten(0, -1)).unwrap();
        let mut regions = [0.0; 3];
        for k in 0..12 {
            let adv = if k < 6 { 0.8 } else { -1.3 };
            let want = ppo_loss::token_loss(new[k] as f64, old[k] as f64, adv, &clip);
            assert!(
                (got[k] as f64 - want.loss).abs() < 1e-5,
                "{k}: {} vs {}",
                got[k],
                want.loss
            );
            match want.region {
                ppo_loss::ClipRegion::ClippedLow => regions[0] += 1.0,
                ppo_loss::ClipRegion::ClippedHigh => regions[1] += 1.0,
                ppo_loss::ClipRegion::DualClipped => regions[2] += 1.0,
                ppo_loss::ClipRegion::Unclipped => {}
            }
        }
        assert_eq!(counts, regions);
        assert!(
            regions.iter().all(|&c| c > 0.0),
            "the test must exercise every region: {regions:?}"
        );
    }
}
