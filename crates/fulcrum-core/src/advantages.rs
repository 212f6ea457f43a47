//! Group-relative advantage estimators, `shared/spec/aggregation.md` section "Advantages".
//!
//! Each estimator maps the rewards of one group to one scalar advantage per response, which is
//! broadcast to all of that response's tokens. A group of one response, or one whose rewards are
//! all equal, gets `A_i = 0` exactly (tested for, not left to floating-point cancellation).

use crate::batch::dense_group_index;
use crate::error::{check_finite, check_len, check_lengths};
use crate::CoreError;
use std::hash::Hash;

/// `eps` in the `grpo` denominator.
pub const GRPO_EPS: f64 = 1e-6;

crate::closed_set! {
    /// An advantage estimator, spelled as in the spec.
    #[derive(Default)]
    pub enum Estimator("advantage estimator") {
        /// `grpo` (default): `(R_i - mean_g R) / (std_g R + eps)`, std with Bessel's correction.
        #[default]
        Grpo = "grpo",
        /// `mean`: `R_i - mean_g R` (Dr. GRPO).
        Mean = "mean",
        /// `rloo`: `R_i - mean_{j != i} R_j` (leave-one-out baseline).
        Rloo = "rloo",
        /// `opo`: `R_i - sum_j L_j R_j / sum_j L_j` (length-weighted baseline).
        Opo = "opo",
    }
}

impl Estimator {
    /// Advantages of one group's responses (`rewards[k]`, `lengths[k]` of its `k`-th member).
    fn group(self, rewards: &[f64], lengths: &[f64]) -> Vec<f64> {
        let n = rewards.len();
        let all_equal = rewards.iter().all(|r| *r == rewards[0]);
        if n < 2 || all_equal {
            return vec![0.0; n];
        }
        let mean = rewards.iter().sum::<f64>() / n as f64;
        match self {
            Estimator::Grpo => {
                let var = rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
                let std = var.sqrt();
                rewards
                    .iter()
                    .map(|r| (r - mean) / (std + GRPO_EPS))
                    .collect()
            }
            Estimator::Mean => rewards.iter().map(|r| r - mean).collect(),
            Estimator::Rloo => {
                let sum: f64 = rewards.iter().sum();
                let others = (n - 1) as f64;
                rewards.iter().map(|r| r - (sum - r) / others).collect()
            }
            Estimator::Opo => {
                let total_len: f64 = lengths.iter().sum();
                // All responses empty: no length to weight by, so the baseline is the plain mean.
                let baseline = if total_len > 0.0 {
                    rewards.iter().zip(lengths).map(|(r, l)| r * l).sum::<f64>() / total_len
                } else {
                    mean
                };
                rewards.iter().map(|r| r - baseline).collect()
            }
        }
    }
}

/// Computes the advantages of a whole batch, group by group, returned in input order.
///
/// `lengths` are only read by `opo`, but are validated for every estimator so that a bad batch
/// fails here rather than later. Errors: mismatched inputs, a non-finite reward, a negative
/// length.
pub fn compute<G: Hash + Eq>(
    estimator: Estimator,
    groups: &[G],
    rewards: &[f64],
    lengths: &[i64],
) -> Result<Vec<f64>, CoreError> {
    check_len("rewards", groups.len(), rewards.len())?;
    check_len("lengths", groups.len(), lengths.len())?;
    check_finite("rewards", rewards)?;
    check_lengths(lengths)?;
    let (dense, n_groups) = dense_group_index(groups);
    // Counting sort of the responses by group: one flat index array, no per-group allocation.
    let mut start = vec![0usize; n_groups + 1];
    for &g in &dense {
        start[g + 1] += 1;
    }
    for g in 0..n_groups {
        start[g + 1] += start[g];
    }
    let mut order = vec![0usize; dense.len()];
    let mut next = start.clone();
    for (i, &g) in dense.iter().enumerate() {
        order[next[g]] = i;
        next[g] += 1;
    }
    let mut out = vec![0.0; groups.len()];
    let (mut r, mut l) = (Vec::new(), Vec::new());
    for g in 0..n_groups {
        let idx = &order[start[g]..start[g + 1]];
        r.clear();
        l.clear();
        r.extend(idx.iter().map(|&i| rewards[i]));
        l.extend(idx.iter().map(|&i| lengths[i] as f64));
        for (&i, a) in idx.iter().zip(estimator.group(&r, &l)) {
            out[i] = a;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singleton_and_all_equal_groups_get_exact_zero() {
        for &e in Estimator::ALL {
            // 0.1 * 3 is not exactly 0.3: a naive (R - mean) / (std + eps) would blow this up.
            let a = compute(e, &[0, 0, 0, 1], &[0.1, 0.1, 0.1, 5.0], &[3, 4, 5, 6]).unwrap();
            assert_eq!(a, vec![0.0; 4], "{e}");
        }
    }

    #[test]
    fn rejects_nan_reward() {
        let err = compute(Estimator::Grpo, &[0, 0], &[1.0, f64::NAN], &[1, 1]).unwrap_err();
        assert!(matches!(
            err,
            CoreError::NonFinite {
                field: "rewards",
                index: 1,
                ..
            }
        ));
    }

    #[test]
    fn rloo_uses_leave_one_out_mean() {
        let a = compute(Estimator::Rloo, &[0, 0, 0], &[1.0, 0.0, 0.0], &[1, 1, 1]).unwrap();
        assert_eq!(a, vec![1.0, -0.5, -0.5]);
    }

    #[test]
    fn opo_with_all_empty_responses_falls_back_to_the_mean() {
        let a = compute(Estimator::Opo, &[0, 0], &[1.0, 0.0], &[0, 0]).unwrap();
        assert_eq!(a, vec![0.5, -0.5]);
    }

    #[test]
    fn groups_need_not_be_adjacent() {
        let a = compute(
            Estimator::Mean,
            &[7, 3, 7, 3],
            &[1.0, 0.0, 0.0, 1.0],
            &[1; 4],
        )
        .unwrap();
        assert_eq!(a, vec![0.5, -0.5, -0.5, 0.5]);
    }
}
