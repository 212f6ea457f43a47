//! The aggregation rules of `shared/spec/aggregation.md`, section "The rules".
//!
//! Every rule is linear in the token losses, `J = sum_i w_i * sum_t l_{i,t}`, and is given here
//! as the function that returns the per-response weights `w_i >= 0` of the **whole step batch**.
//! Weights depend only on lengths, advantage signs and group membership, never on loss values,
//! so they are computed once per optimizer step and any micro-batch split gives the same loss.
//!
//! A response with `L_i = 0` always gets `w_i = 0`; no rule divides by zero.

use crate::{CoreError, StepBatch};

crate::closed_set! {
    /// An aggregation rule, spelled as in the spec everywhere (config, CLI, metrics, plots).
    pub enum Rule("rule") {
        /// `token`: verl `token-mean`, TRL `dapo`.
        Token = "token",
        /// `token-group`: the DAPO paper's per-group token mean.
        TokenGroup = "token-group",
        /// `seq`: GRPO, verl `seq-mean-token-mean`, TRL `grpo`.
        Seq = "seq",
        /// `seq-sum`: verl `seq-mean-token-sum`.
        SeqSum = "seq-sum",
        /// `drgrpo`: Dr. GRPO, verl `seq-mean-token-sum-norm`, TRL `dr_grpo`.
        DrGrpo = "drgrpo",
        /// `ba`: Balanced Aggregation within each group (the default rule).
        Ba = "ba",
        /// `ba-batch`: Balanced Aggregation over the whole batch.
        BaBatch = "ba-batch",
    }
}

impl Rule {
    /// Per-response weights of this rule for the whole step batch.
    pub fn weights(self, batch: &StepBatch, params: &RuleParams) -> Vec<f64> {
        match self {
            Rule::Token => token(batch),
            Rule::TokenGroup => token_group(batch),
            Rule::Seq => seq(batch),
            Rule::SeqSum => seq_sum(batch),
            Rule::DrGrpo => drgrpo(batch, params.l_norm),
            Rule::Ba => ba(batch, params.ba_count, params.ba_pos_scale),
            Rule::BaBatch => ba_batch(batch, params.ba_count, params.ba_pos_scale),
        }
    }
}

crate::closed_set! {
    /// BA's `W_g`: the count that the two subset weights divide by.
    #[derive(Default)]
    pub enum BaCount("ba count") {
        /// `group` (default): `W_g = G_g`, the responses of the group with `L_i > 0`.
        #[default]
        Group = "group",
        /// `signed`: `W_g = n+_g + n-_g`, only the responses with a non-zero advantage.
        Signed = "signed",
    }
}

/// The settings some rules need. `l_norm` is always explicit: never the padded width.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleParams {
    /// BA's `W_g` setting (`ba`, `ba-batch`).
    pub ba_count: BaCount,
    /// `drgrpo`'s constant `L_norm` (the config's max response length).
    pub l_norm: f64,
    /// `lambda`, a factor on BA's positive-side weights (`ba`, `ba-batch`; 1 = BA as published).
    /// BA gives the two sides of a group equal per-response push; `lambda` sets their ratio, so
    /// the side-length coupling of `token` (ratio `Lbar+ / Lbar-`) can be emulated at any value
    /// with no length confound: a dose-response test of the mechanism.
    pub ba_pos_scale: f64,
}

impl Default for RuleParams {
    fn default() -> Self {
        Self {
            ba_count: BaCount::Group,
            l_norm: 1024.0,
            ba_pos_scale: 1.0,
        }
    }
}

impl RuleParams {
    /// Checks the ranges: `l_norm` and `ba_pos_scale` finite and > 0.
    pub fn validate(&self) -> Result<(), CoreError> {
        for (name, x) in [("l_norm", self.l_norm), ("ba_pos_scale", self.ba_pos_scale)] {
            if !(x.is_finite() && x > 0.0) {
                return Err(CoreError::InvalidParam {
                    name,
                    why: format!("must be a finite number > 0, got {x}"),
                });
            }
        }
        Ok(())
    }
}

/// `1 / x` for `x > 0`, else 0: a response that has no tokens, or a term whose subset is empty,
/// contributes nothing.
fn inv(x: f64) -> f64 {
    if x > 0.0 {
        1.0 / x
    } else {
        0.0
    }
}

/// Weight `w` for every response with `L_i > 0`, `0` for the rest.
fn constant_weight(batch: &StepBatch, w: f64) -> Vec<f64> {
    batch
        .lengths()
        .iter()
        .map(|&l| if l > 0.0 { w } else { 0.0 })
        .collect()
}

/// `token`: `w_i = 1 / sum_{j in B} L_j`.
///
/// One mean over all tokens of the batch, so the side that writes more tokens gets more push.
pub fn token(batch: &StepBatch) -> Vec<f64> {
    constant_weight(batch, inv(batch.total_tokens()))
}

/// `token-group`: `w_i = 1 / (M * sum_{j in g(i)} L_j)`.
///
/// A token mean inside each group, then a plain mean over the `M` groups.
pub fn token_group(batch: &StepBatch) -> Vec<f64> {
    let mut group_tokens = vec![0.0; batch.n_groups()];
    for (g, l, _) in batch.rows() {
        group_tokens[g] += l;
    }
    let m = batch.n_groups() as f64;
    batch
        .rows()
        .map(|(g, l, _)| {
            if l > 0.0 {
                inv(m * group_tokens[g])
            } else {
                0.0
            }
        })
        .collect()
}

/// `seq`: `w_i = 1 / (S * L_i)`, `S` = responses with `L_i > 0`.
///
/// A token mean inside each response, then a mean over responses: every token of a long
/// response weighs less.
pub fn seq(batch: &StepBatch) -> Vec<f64> {
    let s = batch.n_nonempty() as f64;
    batch.lengths().iter().map(|&l| inv(s * l)).collect()
}

/// `seq-sum`: `w_i = 1 / S`.
///
/// A token sum inside each response, then a mean over responses.
pub fn seq_sum(batch: &StepBatch) -> Vec<f64> {
    constant_weight(batch, inv(batch.n_nonempty() as f64))
}

/// `drgrpo`: `w_i = 1 / (S * L_norm)`, `L_norm` a constant (the config's max response length).
///
/// Callers validate `l_norm > 0` ([`RuleParams::validate`]); a non-positive one gives zero
/// weights rather than a division by zero.
pub fn drgrpo(batch: &StepBatch, l_norm: f64) -> Vec<f64> {
    constant_weight(batch, inv(batch.n_nonempty() as f64 * l_norm))
}

/// Token count and response count of one advantage-sign subset (`P_g` or `N_g`).
#[derive(Debug, Clone, Copy, Default)]
struct Subset {
    tokens: f64,
    count: f64,
}

impl Subset {
    fn add(&mut self, l: f64) {
        self.tokens += l;
        self.count += 1.0;
    }
    /// `Lbar = T / n`, the subset's mean length (0 when empty).
    fn mean_len(&self) -> f64 {
        if self.count > 0.0 {
            self.tokens / self.count
        } else {
            0.0
        }
    }
}

/// The per-scope sums BA needs: `P`, `N` and the count of responses with `L_i > 0`.
#[derive(Debug, Clone, Copy, Default)]
struct BaScope {
    pos: Subset,
    neg: Subset,
    nonempty: f64,
}

impl BaScope {
    fn add(&mut self, l: f64, a: f64) {
        if l <= 0.0 {
            return;
        }
        self.nonempty += 1.0;
        if a > 0.0 {
            self.pos.add(l);
        } else if a < 0.0 {
            self.neg.add(l);
        }
    }

    /// `W` under the chosen count setting.
    fn w(&self, count: BaCount) -> f64 {
        match count {
            BaCount::Group => self.nonempty,
            BaCount::Signed => self.pos.count + self.neg.count,
        }
    }

    /// `1 / (scale * W * Lbar±)` for the subset response `(l, a)` falls in, times `pos_scale`
    /// on the positive side; 0 when `A = 0`.
    fn weight(&self, l: f64, a: f64, count: BaCount, scale: f64, pos_scale: f64) -> f64 {
        if l <= 0.0 {
            return 0.0;
        }
        let (subset, factor) = if a > 0.0 {
            (&self.pos, pos_scale)
        } else if a < 0.0 {
            (&self.neg, 1.0)
        } else {
            return 0.0;
        };
        factor * inv(scale * self.w(count) * subset.mean_len())
    }
}

/// `ba`, Balanced Aggregation: tokens are averaged within the positive subset `P_g` and the
/// negative subset `N_g` of each group, and the two means combined with count weights:
///
/// ```text
/// J_g = (n+_g / W_g) * (1/T+_g) * sum_{P_g} sum_t l  +  (n-_g / W_g) * (1/T-_g) * sum_{N_g} sum_t l
/// J   = (1/M) * sum_g J_g
/// ```
///
/// so `w_i = 1 / (M * W_g * Lbar±_g)` for `i` in `P_g` / `N_g`, and 0 when `A_i = 0`; the
/// positive side's weights are multiplied by `pos_scale` (`lambda`, 1 as published), which makes
/// the group's positive:negative mass ratio `lambda` when the advantages are balanced.
pub fn ba(batch: &StepBatch, count: BaCount, pos_scale: f64) -> Vec<f64> {
    let mut scopes = vec![BaScope::default(); batch.n_groups()];
    for (g, l, a) in batch.rows() {
        scopes[g].add(l, a);
    }
    let m = batch.n_groups() as f64;
    batch
        .rows()
        .map(|(g, l, a)| scopes[g].weight(l, a, count, m, pos_scale))
        .collect()
}

/// `ba-batch`: the BA formula applied once to the whole batch (`P`, `N` pooled over all groups,
/// `W = S` or `n+ + n-`, and no `1/M`): `w_i = 1 / (W * Lbar±)`, `pos_scale` as in [`ba`].
pub fn ba_batch(batch: &StepBatch, count: BaCount, pos_scale: f64) -> Vec<f64> {
    let mut scope = BaScope::default();
    for (_, l, a) in batch.rows() {
        scope.add(l, a);
    }
    batch
        .rows()
        .map(|(_, l, a)| scope.weight(l, a, count, 1.0, pos_scale))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(groups: &[u32], lengths: &[i64], adv: &[f64]) -> StepBatch {
        StepBatch::new(groups, lengths, adv).unwrap()
    }

    #[test]
    fn rule_names_round_trip() {
        for &r in Rule::ALL {
            assert_eq!(r.name().parse::<Rule>(), Ok(r));
        }
        assert!("ba_batch".parse::<Rule>().is_err());
    }

    #[test]
    fn zero_length_response_gets_zero_weight_under_every_rule() {
        let b = batch(&[0, 0, 0], &[0, 4, 6], &[1.0, 1.0, -2.0]);
        for &r in Rule::ALL {
            let w = r.weights(&b, &RuleParams::default());
            assert_eq!(w[0], 0.0, "{r}");
            assert!(w.iter().all(|x| x.is_finite()), "{r}");
        }
    }

    #[test]
    fn all_empty_batch_has_zero_weights_not_nan() {
        let b = batch(&[0, 1], &[0, 0], &[1.0, -1.0]);
        for &r in Rule::ALL {
            assert_eq!(r.weights(&b, &RuleParams::default()), vec![0.0, 0.0], "{r}");
        }
    }

    #[test]
    fn ba_drops_the_empty_subset_term() {
        // Only positive responses: the negative term is dropped, no NaN.
        let b = batch(&[0, 0, 0], &[2, 4, 6], &[1.0, 1.0, 0.0]);
        let w = ba(&b, BaCount::Group, 1.0);
        assert_eq!(w, vec![1.0 / (3.0 * 3.0), 1.0 / (3.0 * 3.0), 0.0]);
        let w = ba(&b, BaCount::Signed, 1.0);
        assert_eq!(w, vec![1.0 / (2.0 * 3.0), 1.0 / (2.0 * 3.0), 0.0]);
    }

    #[test]
    fn invalid_l_norm_or_pos_scale_is_an_error() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let p = RuleParams {
                l_norm: bad,
                ..RuleParams::default()
            };
            assert!(p.validate().is_err(), "{bad}");
            let p = RuleParams {
                ba_pos_scale: bad,
                ..RuleParams::default()
            };
            let err = p.validate().map_err(|e| e.to_string()).err();
            assert!(err.is_some_and(|e| e.contains("ba_pos_scale")), "{bad}");
        }
    }

    #[test]
    fn ba_pos_scale_sets_the_side_mass_ratio_and_nothing_else() {
        // Lengths differ within and across sides; GRPO-style balanced advantages.
        let b = batch(
            &[0, 0, 0, 0, 1, 1, 1],
            &[3, 9, 20, 40, 5, 6, 7],
            &[1.0, 1.0, -1.0, -1.0, 2.0, -1.0, -1.0],
        );
        let plain = ba(&b, BaCount::Group, 1.0);
        for lambda in [1.0 / 3.0, 0.5, 2.0, 3.0] {
            let scaled = ba(&b, BaCount::Group, lambda);
            for (i, (&w, &w0)) in scaled.iter().zip(&plain).enumerate() {
                let want = if b.advantages()[i] > 0.0 {
                    lambda * w0
                } else {
                    w0
                };
                assert!((w - want).abs() < 1e-15, "{lambda} row {i}");
            }
            // Group 0 (|A| equal on both sides): token mass ratio P/N is exactly lambda.
            let mass = |sign: f64| -> f64 {
                (0..4)
                    .filter(|&i| b.advantages()[i] * sign > 0.0)
                    .map(|i| scaled[i] * b.lengths()[i] * b.advantages()[i].abs())
                    .sum()
            };
            assert!((mass(1.0) / mass(-1.0) - lambda).abs() < 1e-12, "{lambda}");
            let batch_scaled = ba_batch(&b, BaCount::Signed, lambda);
            let batch_plain = ba_batch(&b, BaCount::Signed, 1.0);
            assert!((batch_scaled[0] / batch_plain[0] - lambda).abs() < 1e-12);
            assert_eq!(batch_scaled[2], batch_plain[2]);
        }
    }
}
