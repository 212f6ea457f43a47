//! Clip-Cov's and KL-Cov's choice of tokens (Cui et al. 2025, arXiv:2505.22617; verl
//! `compute_policy_loss_clip_cov` / `_kl_cov`): the centred covariance of log-probability and
//! advantage over the batch's loss tokens, and the tokens it picks. `policy_loss.rs` applies
//! the choice; the trainer makes it once per step (see there why).

use crate::policy_loss::{LossParams, PolicyLoss};
use crate::SplitMix64;

/// One response's part in [`cov_selection`]: its log-probabilities on its loss tokens and its
/// advantage.
#[derive(Debug, Clone, Copy)]
pub struct CovInput<'a> {
    pub logp: &'a [f64],
    pub adv: f64,
}

/// The tokens Clip-Cov or KL-Cov treat differently, per response, from the centred covariance
/// `cov_t = (A_t - mean A) (logp_t - mean logp)` over every loss token of the batch:
/// - `clip-cov`: `max(1, floor(clip_cov_frac * N))` tokens drawn at random (from `rng`) among
///   those with `clip_cov_lb < cov_t < clip_cov_ub`;
/// - `kl-cov`: the `max(1, floor(kl_cov_frac * N))` largest, ties broken by position;
/// - any other loss: none.
pub fn cov_selection(
    loss: PolicyLoss,
    responses: &[CovInput<'_>],
    p: &LossParams,
    rng: &mut SplitMix64,
) -> Vec<Vec<bool>> {
    let mut out: Vec<Vec<bool>> = responses
        .iter()
        .map(|r| vec![false; r.logp.len()])
        .collect();
    let n: usize = responses.iter().map(|r| r.logp.len()).sum();
    if !loss.uses_cov_selection() || n == 0 {
        return out;
    }
    let mean_adv = responses
        .iter()
        .map(|r| r.adv * r.logp.len() as f64)
        .sum::<f64>()
        / n as f64;
    let mean_logp = responses.iter().flat_map(|r| r.logp.iter()).sum::<f64>() / n as f64;
    // (covariance, response, token), in batch order.
    let cov: Vec<(f64, usize, usize)> = responses
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.logp
                .iter()
                .enumerate()
                .map(move |(t, &lp)| ((r.adv - mean_adv) * (lp - mean_logp), i, t))
        })
        .collect();
    let chosen: Vec<(usize, usize)> = if loss == PolicyLoss::ClipCov {
        let k = ((p.clip_cov_frac * n as f64).floor() as usize).max(1);
        let mut pool: Vec<(usize, usize)> = cov
            .iter()
            .filter(|(c, _, _)| *c > p.clip_cov_lb && *c < p.clip_cov_ub)
            .map(|&(_, i, t)| (i, t))
            .collect();
        rng.shuffle(&mut pool);
        pool.truncate(k);
        pool
    } else {
        let k = ((p.kl_cov_frac * n as f64).floor() as usize).max(1);
        let mut order = cov;
        order.sort_by(|a, b| b.0.total_cmp(&a.0));
        order.into_iter().take(k).map(|(_, i, t)| (i, t)).collect()
    };
    for (i, t) in chosen {
        out[i][t] = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_cov_picks_the_largest_covariances_and_clip_cov_a_bounded_random_set() {
        let p = LossParams {
            kl_cov_frac: 0.25,
            clip_cov_frac: 0.25,
            clip_cov_lb: 0.0,
            clip_cov_ub: 1.0,
            ..LossParams::default()
        };
        let (a, b) = ([-0.1, -3.0, -0.5, -1.0], [-0.2, -2.0, -0.4, -4.0]);
        let rs = [
            CovInput { logp: &a, adv: 1.0 },
            CovInput {
                logp: &b,
                adv: -1.0,
            },
        ];
        let mut rng = SplitMix64::seeded(0);
        let kl = cov_selection(PolicyLoss::KlCov, &rs, &p, &mut rng);
        // Mean A 0, mean logp -1.4: covariances a: 1.3 -1.6 0.9 0.4, b: -1.2 0.6 -1.0 2.6.
        assert_eq!(
            kl,
            [
                vec![true, false, false, false],
                vec![false, false, false, true]
            ]
        );
        let cc = cov_selection(PolicyLoss::ClipCov, &rs, &p, &mut rng);
        let picked: Vec<(usize, usize)> = (0..2)
            .flat_map(|i| (0..4).map(move |t| (i, t)))
            .filter(|&(i, t)| cc[i][t])
            .collect();
        assert_eq!(picked.len(), 2);
        for (i, t) in picked {
            let lp = if i == 0 { a[t] } else { b[t] };
            let adv = if i == 0 { 1.0 } else { -1.0 };
            let c = adv * (lp + 1.4);
            assert!(c > 0.0 && c < 1.0, "({i}, {t}): cov {c}");
        }
        let none = cov_selection(PolicyLoss::Ppo, &rs, &p, &mut rng);
        assert!(none.iter().flatten().all(|s| !s));
    }
}
