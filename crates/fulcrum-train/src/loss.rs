//! The policy loss on packed tensors: the spec's per-token PPO loss with asymmetric and dual
//! clip (the same formula as `fulcrum_core::ppo_loss::token_loss`, tested against it), the rest
//! of the policy-loss family (`fulcrum_core::policy_loss`, values and gradients tested against
//! it), and the per-token KL estimators.

use fulcrum_core::{ClipParams, KlEstimator, LossParams, PolicyLoss};
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

/// Token counts of a micro-batch's loss: clipped low, clipped high, dual-clipped, and chosen by
/// the Clip-Cov / KL-Cov selection.
pub type LossCounts = [f64; 4];

/// The per-token loss of `loss` (`[B, T-1]`, to be weighted by the rule) and its counts. Each
/// loss is the formula of `fulcrum_core::policy_loss` written for autograd; `ppo` is
/// [`ppo_token_loss`] unchanged.
pub fn policy_token_loss(
    loss: PolicyLoss,
    logprobs: &Tensor,
    p: &Packed,
    params: &LossParams,
) -> (Tensor, LossCounts) {
    let a = &p.advantages;
    let m = &p.mask;
    let count =
        |t: &Tensor| tch::no_grad(|| t.logical_and(&m.gt(0.0)).sum(Kind::Float).double_value(&[]));
    // The Clip-Cov / KL-Cov choice (none chosen when the micro-batch has no selection).
    let selected = || {
        let s = p
            .selected
            .as_ref()
            .map_or_else(|| m.zeros_like(), Tensor::shallow_clone);
        let n = count(&s.gt(0.0));
        (s, n)
    };
    // The log-ratio, for the losses that read it (PPO's path computes its own ratio).
    let d = || logprobs - &p.old_logprobs;
    match loss {
        PolicyLoss::Ppo => {
            let (l, [low, high, dual]) = ppo_token_loss(logprobs, p, &params.clip());
            (l, [low, high, dual, 0.0])
        }
        PolicyLoss::Gspo => {
            // GSPO-token: the value of the sequence ratio, the gradient of each token's own.
            let seq = row_mean(&d(), m);
            let log_s = (logprobs - logprobs.detach() + seq.detach().unsqueeze(1)).clamp_max(10.0);
            let s = log_s.exp();
            let (lo, hi) = (1.0 - params.gspo_eps_low, 1.0 + params.gspo_eps_high);
            let l = (-a * &s).maximum(&(-a * s.clamp(lo, hi)));
            let low = a.lt(0.0).logical_and(&s.lt(lo));
            let high = a.gt(0.0).logical_and(&s.gt(hi));
            (l, [count(&low), count(&high), 0.0, 0.0])
        }
        PolicyLoss::Cispo => {
            let r = d().exp();
            let (lo, hi) = (1.0 - params.cispo_eps_low, 1.0 + params.cispo_eps_high);
            let w = r.clamp(lo, hi).detach();
            let l = -(w * a * logprobs);
            (l, [count(&r.lt(lo)), count(&r.gt(hi)), 0.0, 0.0])
        }
        PolicyLoss::Sapo => {
            let r = d().exp();
            let tau = a
                .full_like(params.sapo_tau_pos)
                .where_self(&a.gt(0.0), &a.full_like(params.sapo_tau_neg));
            let gate = (&tau * (r - 1.0)).sigmoid() * 4.0 / &tau;
            (-a * gate, [0.0; 4])
        }
        PolicyLoss::Gmpo => {
            let d = d();
            let sign = a.sign();
            let clipped = d.clamp(-params.gmpo_clip_low, params.gmpo_clip_high);
            let kept = (&sign * &d).minimum(&(&sign * &clipped)) * &sign;
            let ratio = row_mean(&kept, m).exp();
            let adv = row_mean(a, m);
            let l = (-adv * ratio).unsqueeze(1).expand_as(&d) * m;
            let was_clipped = (&sign * &clipped).lt_tensor(&(&sign * &d));
            let high = was_clipped.logical_and(&d.gt(0.0));
            let low = was_clipped.logical_and(&d.lt(0.0));
            (l, [count(&low), count(&high), 0.0, 0.0])
        }
        PolicyLoss::ClipCov => {
            let clip = ClipParams {
                dual_clip_c: f64::INFINITY,
                ..params.clip()
            };
            let (l, [low, high, _]) = ppo_token_loss(logprobs, p, &clip);
            let (selected, n) = selected();
            (l * (1.0 - selected), [low, high, 0.0, n])
        }
        PolicyLoss::KlCov => {
            let (selected, n) = selected();
            let d = d();
            let l = -a * d.exp() + d.abs() * selected * params.kl_cov_coef;
            (l, [0.0, 0.0, 0.0, n])
        }
    }
}

/// Each row's mean of `x` over its loss positions (`[B]`; 0 for a row without any).
fn row_mean(x: &Tensor, mask: &Tensor) -> Tensor {
    let n = mask.sum_dim_intlist(1, false, Kind::Float).clamp_min(1.0);
    (x * mask).sum_dim_intlist(1, false, Kind::Float) / n
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
                selected: None,
            },
            Item {
                rollout: &b,
                advantage: -1.3,
                weight: 1.0,
                active: true,
                selected: None,
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

    /// Every loss of the family on random log-probabilities: the tensor values equal the core
    /// formula's token values, and autograd's gradient of `sum_t l_t` equals the core's `g_t`.
    #[test]
    fn every_loss_matches_its_core_formula_in_value_and_gradient() {
        use fulcrum_core::policy_loss::response_terms;
        let lens = [5usize, 3, 7];
        let advs = [0.8, -1.3, 0.4];
        let rollouts: Vec<_> = lens.iter().map(|&n| rollout(2, n)).collect();
        let selection: Vec<Vec<bool>> = lens
            .iter()
            .map(|&n| (0..n).map(|t| t % 3 == 1).collect())
            .collect();
        for loss in PolicyLoss::ALL.iter().copied() {
            for seed in 0..4u64 {
                let mut rng = fulcrum_core::SplitMix64::seeded(seed);
                let items: Vec<Item> = rollouts
                    .iter()
                    .zip(&advs)
                    .zip(&selection)
                    .map(|((r, &advantage), sel)| Item {
                        rollout: r,
                        advantage,
                        weight: 1.0,
                        active: true,
                        selected: loss.uses_cov_selection().then_some(sel.as_slice()),
                    })
                    .collect();
                let p = pack(&items, Device::Cpu);
                let old: Vec<f32> = Vec::try_from(p.old_logprobs.flatten(0, -1)).unwrap();
                let mask: Vec<f32> = Vec::try_from(p.mask.flatten(0, -1)).unwrap();
                // Shifts wide enough to reach every clip of the defaults (and GSPO's narrow one
                // only sometimes: its ratio is a mean).
                let new: Vec<f32> = old
                    .iter()
                    .map(|&o| o + (rng.uniform() as f32 - 0.5) * 1.6)
                    .collect();
                let width = p.mask.size()[1];
                let lp = Tensor::from_slice(&new)
                    .view([3, width])
                    .set_requires_grad(true);
                let params = LossParams {
                    clip_cov_frac: 0.2,
                    ..LossParams::default()
                };
                let (l, _) = policy_token_loss(loss, &lp, &p, &params);
                (&l * &p.weights).sum(Kind::Float).backward();
                let vals: Vec<f32> = Vec::try_from(l.detach().flatten(0, -1)).unwrap();
                let grads: Vec<f32> = Vec::try_from(lp.grad().flatten(0, -1)).unwrap();
                for (row, &n) in lens.iter().enumerate() {
                    let pos: Vec<usize> = (0..width as usize)
                        .map(|j| row * width as usize + j)
                        .filter(|&k| mask[k] > 0.0)
                        .collect();
                    assert_eq!(pos.len(), n);
                    let nw: Vec<f64> = pos.iter().map(|&k| new[k] as f64).collect();
                    let ol: Vec<f64> = pos.iter().map(|&k| old[k] as f64).collect();
                    let want = response_terms(loss, &nw, &ol, advs[row], &selection[row], &params)
                        .unwrap();
                    for (t, &k) in pos.iter().enumerate() {
                        let tol = 1e-4 * (1.0 + want[t].loss.abs());
                        assert!(
                            (vals[k] as f64 - want[t].loss).abs() < tol,
                            "{loss} seed {seed} row {row} token {t}: value {} vs {}",
                            vals[k],
                            want[t].loss
                        );
                        assert!(
                            (grads[k] as f64 - want[t].grad).abs()
                                < 1e-4 * (1.0 + want[t].grad.abs()),
                            "{loss} seed {seed} row {row} token {t}: gradient {} vs {}",
                            grads[k],
                            want[t].grad
                        );
                    }
                }
            }
        }
    }
}
