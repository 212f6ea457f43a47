//! The diagnostics of `shared/spec/aggregation.md` section "Diagnostics logged at every step":
//! lengths, group mix, and for **every** rule the positive and negative gradient mass.
//!
//! Conventions where the spec leaves a choice (all documented in the README too):
//! - `len_cv` uses the population standard deviation and skips groups whose mean length is 0;
//! - a response is "correct" when its reward is `> 0` (exact for `{0,1}` and `{-1,+1}` rewards);
//!   a group is *mixed* when it holds both a positive and a negative advantage, *all-correct* /
//!   *all-wrong* when it is not mixed and every reward is `> 0` / `<= 0`;
//! - `len_pos_mean` / `len_neg_mean` pool the responses with `A > 0` / `A < 0` of the mixed
//!   groups; `len_gap_rel` divides the gap by the mean length of all responses of those groups;
//! - `len_weight_corr` is taken over the responses that carry gradient (`A != 0`, `L > 0`);
//! - `len_cv_side` is the CV (population std over mean) of the lengths of one side (`A > 0` or
//!   `A < 0`) of one group, averaged over the sides that hold two or more responses;
//! - [`update_cosine`] compares two rules on the effective update weights `w_i L_i |A_i|`, and
//!   [`mass_share`] says how much of a rule's update mass falls on chosen responses.
//!
//! Undefined values (no mixed group, no negative mass, ...) are `None`, `null` in JSON.

use serde::Serialize;

use crate::error::{check_finite, check_len};
use crate::stats::{mean, pearson};
use crate::{CoreError, Rule, RuleParams, StepBatch};

/// Length and group-mix diagnostics of one step batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LengthDiagnostics {
    /// Mean response length over the batch.
    pub len_mean: f64,
    /// Within-group `std(L)/mean(L)`, averaged over groups of two or more.
    pub len_cv: Option<f64>,
    /// Within-side `std(L)/mean(L)` (the responses of one group with `A > 0`, or with
    /// `A < 0`), averaged over the sides of two or more responses.
    pub len_cv_side: Option<f64>,
    /// `Lbar+`: mean length of the positive-advantage responses of mixed groups.
    pub len_pos_mean: Option<f64>,
    /// `Lbar-`: mean length of the negative-advantage responses of mixed groups.
    pub len_neg_mean: Option<f64>,
    /// `Lbar- - Lbar+`.
    pub len_gap: Option<f64>,
    /// `(Lbar- - Lbar+) / Lbar`.
    pub len_gap_rel: Option<f64>,
    /// Fraction of groups holding both signs of advantage.
    pub frac_mixed: f64,
    /// Fraction of groups, not mixed, whose rewards are all `> 0`.
    pub frac_all_correct: f64,
    /// Fraction of groups, not mixed, whose rewards are all `<= 0`.
    pub frac_all_wrong: f64,
}

/// What one rule does to the batch: how much push each side gets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct RuleMass {
    /// `sum_{A_i > 0} w_i L_i |A_i|`.
    pub mass_pos: f64,
    /// `sum_{A_i < 0} w_i L_i |A_i|`.
    pub mass_neg: f64,
    /// `mass_pos / mass_neg`; `None` when there is no negative mass.
    pub mass_ratio: Option<f64>,
    /// Pearson correlation of `L_i` and `w_i L_i`.
    pub len_weight_corr: Option<f64>,
}

/// One rule's weights with their mass summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleDiagnostics {
    /// The rule (serialised by its spec name).
    pub rule: Rule,
    /// Per-response weights, in input order.
    pub weights: Vec<f64>,
    /// Masses, ratio and correlation.
    #[serde(flatten)]
    pub mass: RuleMass,
}

/// Every diagnostic of the spec for one batch, every rule included.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnostics {
    /// Length and group-mix diagnostics.
    pub lengths: LengthDiagnostics,
    /// One entry per rule, in [`Rule::ALL`] order.
    pub rules: Vec<RuleDiagnostics>,
}

impl Diagnostics {
    /// Computes the length diagnostics and, for every rule, its weights and masses.
    pub fn compute(
        batch: &StepBatch,
        rewards: &[f64],
        params: &RuleParams,
    ) -> Result<Self, CoreError> {
        params.validate()?;
        let lengths = length_diagnostics(batch, rewards)?;
        let rules = Rule::ALL
            .iter()
            .map(|&rule| {
                let weights = rule.weights(batch, params);
                let mass = rule_mass(batch, &weights);
                RuleDiagnostics {
                    rule,
                    weights,
                    mass,
                }
            })
            .collect();
        Ok(Self { lengths, rules })
    }

    /// The entry of one rule.
    pub fn rule(&self, rule: Rule) -> Option<&RuleDiagnostics> {
        self.rules.iter().find(|r| r.rule == rule)
    }
}

/// Positive and negative mass, their ratio, and the length-weight correlation of `weights`.
pub fn rule_mass(batch: &StepBatch, weights: &[f64]) -> RuleMass {
    let (mut mass_pos, mut mass_neg) = (0.0, 0.0);
    let (mut lens, mut totals) = (Vec::new(), Vec::new());
    for ((_, l, a), w) in batch.rows().zip(weights) {
        let m = w * l * a.abs();
        if a > 0.0 {
            mass_pos += m;
        } else if a < 0.0 {
            mass_neg += m;
        }
        if a != 0.0 && l > 0.0 {
            lens.push(l);
            totals.push(w * l);
        }
    }
    RuleMass {
        mass_pos,
        mass_neg,
        mass_ratio: (mass_neg > 0.0).then(|| mass_pos / mass_neg),
        len_weight_corr: pearson(&lens, &totals),
    }
}

/// The cosine between the effective update weights `w_i L_i |A_i|` of two rules' weight
/// vectors on `batch`: how alike the two updates are, whatever their scale (Adam and clipping
/// remove scale). `None` when either vector is all zero.
pub fn update_cosine(batch: &StepBatch, a: &[f64], b: &[f64]) -> Option<f64> {
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (((_, l, adv), wa), wb) in batch.rows().zip(a).zip(b) {
        let (x, y) = (wa * l * adv.abs(), wb * l * adv.abs());
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    (aa > 0.0 && bb > 0.0).then(|| (ab / (aa.sqrt() * bb.sqrt())).min(1.0))
}

/// The share of the effective update mass `Σ w_i L_i |A_i|` that falls on the rows where
/// `selected` holds (e.g. the truncated responses): what a rule spends on them, predicted from
/// its weights alone. `None` when the batch has no mass.
pub fn mass_share(batch: &StepBatch, weights: &[f64], selected: &[bool]) -> Option<f64> {
    let (mut on, mut total) = (0.0, 0.0);
    for (((_, l, a), w), &sel) in batch.rows().zip(weights).zip(selected) {
        let m = w * l * a.abs();
        total += m;
        if sel {
            on += m;
        }
    }
    (total > 0.0).then(|| on / total)
}

/// Population CV of one side's lengths (`None` for fewer than two or a zero mean).
fn side_cv(lengths: &[f64]) -> Option<f64> {
    if lengths.len() < 2 {
        return None;
    }
    let m = mean(lengths)?;
    if m <= 0.0 {
        return None;
    }
    let var = lengths.iter().map(|l| (l - m) * (l - m)).sum::<f64>() / lengths.len() as f64;
    Some(var.sqrt() / m)
}

/// Per-group tallies for the length diagnostics (running sums: no per-group allocation).
#[derive(Default, Clone)]
struct GroupTally {
    n: f64,
    /// Welford's running mean and sum of squared deviations of the lengths.
    mean: f64,
    m2: f64,
    has_pos: bool,
    has_neg: bool,
    all_rewards_pos: bool,
    all_rewards_nonpos: bool,
}

/// The length and group-mix diagnostics; `rewards` are read only to tell correct from wrong.
pub fn length_diagnostics(
    batch: &StepBatch,
    rewards: &[f64],
) -> Result<LengthDiagnostics, CoreError> {
    check_len("rewards", batch.len(), rewards.len())?;
    check_finite("rewards", rewards)?;
    let init = GroupTally {
        all_rewards_pos: true,
        all_rewards_nonpos: true,
        ..GroupTally::default()
    };
    let mut groups = vec![init; batch.n_groups()];
    for ((g, l, a), &r) in batch.rows().zip(rewards) {
        let t = &mut groups[g];
        t.n += 1.0;
        let delta = l - t.mean;
        t.mean += delta / t.n;
        t.m2 += delta * (l - t.mean);
        t.has_pos |= a > 0.0;
        t.has_neg |= a < 0.0;
        t.all_rewards_pos &= r > 0.0;
        t.all_rewards_nonpos &= r <= 0.0;
    }
    let mixed = |t: &GroupTally| t.has_pos && t.has_neg;

    // Population std over mean, for groups of two or more with a positive mean length.
    let cvs: Vec<f64> = groups
        .iter()
        .filter(|t| t.n >= 2.0 && t.mean > 0.0)
        .map(|t| (t.m2 / t.n).max(0.0).sqrt() / t.mean)
        .collect();

    // Each group's two sides, for the within-side CV.
    let mut sides = vec![(Vec::new(), Vec::new()); groups.len()];
    for (g, l, a) in batch.rows() {
        if a > 0.0 {
            sides[g].0.push(l);
        } else if a < 0.0 {
            sides[g].1.push(l);
        }
    }
    let side_cvs: Vec<f64> = sides
        .iter()
        .flat_map(|(p, n)| [side_cv(p), side_cv(n)])
        .flatten()
        .collect();

    let (mut pos, mut neg, mut all_mixed) = (Vec::new(), Vec::new(), Vec::new());
    for (g, l, a) in batch.rows() {
        if mixed(&groups[g]) {
            all_mixed.push(l);
            if a > 0.0 {
                pos.push(l);
            } else if a < 0.0 {
                neg.push(l);
            }
        }
    }
    let (len_pos_mean, len_neg_mean) = (mean(&pos), mean(&neg));
    let len_gap = len_pos_mean.zip(len_neg_mean).map(|(p, n)| n - p);
    let len_gap_rel = len_gap
        .zip(mean(&all_mixed))
        .and_then(|(gap, m)| (m > 0.0).then(|| gap / m));

    let n_groups = groups.len().max(1) as f64;
    let frac = |pred: &dyn Fn(&GroupTally) -> bool| {
        groups.iter().filter(|t| pred(t)).count() as f64 / n_groups
    };
    Ok(LengthDiagnostics {
        len_mean: mean(batch.lengths()).unwrap_or(0.0),
        len_cv: mean(&cvs),
        len_cv_side: mean(&side_cvs),
        len_pos_mean,
        len_neg_mean,
        len_gap,
        len_gap_rel,
        frac_mixed: frac(&|t| mixed(t)),
        frac_all_correct: frac(&|t| !mixed(t) && t.all_rewards_pos),
        frac_all_wrong: frac(&|t| !mixed(t) && t.all_rewards_nonpos),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{advantages, Estimator};

    #[test]
    fn token_rule_couples_mass_to_length() {
        // Wrong answers twice as long as right ones: token gives the negative side 2x the push.
        let groups = [0, 0, 0, 0];
        let rewards = [1.0, 1.0, 0.0, 0.0];
        let lengths = [10, 10, 20, 20];
        let adv = advantages::compute(Estimator::Grpo, &groups, &rewards, &lengths).unwrap();
        let b = StepBatch::new(&groups, &lengths, &adv).unwrap();
        let d = Diagnostics::compute(&b, &rewards, &RuleParams::default()).unwrap();
        let ratio = d.rule(Rule::Token).unwrap().mass.mass_ratio.unwrap();
        assert!((ratio - 0.5).abs() < 1e-12, "{ratio}");
        let ratio = d.rule(Rule::Ba).unwrap().mass.mass_ratio.unwrap();
        assert!((ratio - 1.0).abs() < 1e-12, "{ratio}");
        assert_eq!(d.lengths.len_gap, Some(10.0));
        assert_eq!(d.lengths.len_gap_rel, Some(10.0 / 15.0));
        assert_eq!(d.lengths.frac_mixed, 1.0);
    }

    #[test]
    fn group_mix_fractions() {
        let groups = [0, 0, 1, 1, 2, 2];
        let rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0];
        let lengths = [1, 3, 2, 2, 4, 4];
        let adv = advantages::compute(Estimator::Grpo, &groups, &rewards, &lengths).unwrap();
        let b = StepBatch::new(&groups, &lengths, &adv).unwrap();
        let d = length_diagnostics(&b, &rewards).unwrap();
        assert_eq!(d.frac_mixed, 1.0 / 3.0);
        assert_eq!(d.frac_all_correct, 1.0 / 3.0);
        assert_eq!(d.frac_all_wrong, 1.0 / 3.0);
        // Group 0: lengths 1, 3 (cv 0.5); groups 1, 2 have cv 0.
        assert!((d.len_cv.unwrap() - 0.5 / 3.0).abs() < 1e-12);
        assert_eq!(d.len_pos_mean, Some(1.0));
        assert_eq!(d.len_neg_mean, Some(3.0));
    }

    #[test]
    fn no_mixed_group_leaves_gap_undefined() {
        let b = StepBatch::new(&[0, 0], &[3, 5], &[0.0, 0.0]).unwrap();
        let d = length_diagnostics(&b, &[1.0, 1.0]).unwrap();
        assert_eq!(d.len_gap, None);
        assert_eq!(d.len_gap_rel, None);
        let m = rule_mass(&b, &Rule::Token.weights(&b, &RuleParams::default()));
        assert_eq!(m.mass_ratio, None);
        assert_eq!(m.len_weight_corr, None);
    }

    #[test]
    fn within_side_cv_and_update_cosine() {
        // Group 0: positives 2, 6 (cv 0.5), negatives 4, 4 (cv 0); group 1: one of each side.
        let b = StepBatch::new(
            &[0, 0, 0, 0, 1, 1],
            &[2, 6, 4, 4, 3, 9],
            &[1.0, 1.0, -1.0, -1.0, 1.0, -1.0],
        )
        .unwrap();
        let d = length_diagnostics(&b, &[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]).unwrap();
        assert!(
            (d.len_cv_side.unwrap() - 0.25).abs() < 1e-12,
            "{:?}",
            d.len_cv_side
        );
        let p = RuleParams::default();
        let w = |r: Rule| r.weights(&b, &p);
        let same = update_cosine(&b, &w(Rule::Seq), &w(Rule::Seq)).unwrap();
        assert!((same - 1.0).abs() < 1e-12);
        // Scale does not matter; direction does.
        let doubled: Vec<f64> = w(Rule::Token).iter().map(|x| 2.0 * x).collect();
        let c = update_cosine(&b, &w(Rule::Token), &doubled).unwrap();
        assert!((c - 1.0).abs() < 1e-12);
        let c = update_cosine(&b, &w(Rule::Token), &w(Rule::Seq)).unwrap();
        assert!(c < 0.99 && c > 0.0, "{c}");
        // By hand: token's effective weights are proportional to L, seq's constant.
        let l = [2.0f64, 6.0, 4.0, 4.0, 3.0, 9.0];
        let want =
            l.iter().sum::<f64>() / ((l.iter().map(|x| x * x).sum::<f64>()).sqrt() * 6f64.sqrt());
        assert!((c - want).abs() < 1e-12, "{c} vs {want}");
        assert_eq!(update_cosine(&b, &[0.0; 6], &w(Rule::Seq)), None);
        // Shares of the mass: all of it, none of it, and the two sides adding up to one.
        let tw = w(Rule::Token);
        assert_eq!(mass_share(&b, &tw, &[true; 6]), Some(1.0));
        assert_eq!(mass_share(&b, &tw, &[false; 6]), Some(0.0));
        let first: Vec<bool> = (0..6).map(|i| i < 3).collect();
        let rest: Vec<bool> = first.iter().map(|x| !x).collect();
        let (x, y) = (
            mass_share(&b, &tw, &first).unwrap(),
            mass_share(&b, &tw, &rest).unwrap(),
        );
        assert!((x + y - 1.0).abs() < 1e-12 && x > 0.0 && y > 0.0);
        assert_eq!(mass_share(&b, &[0.0; 6], &first), None);
    }

    #[test]
    fn seq_total_weight_does_not_depend_on_length() {
        let b = StepBatch::new(&[0, 0, 0], &[3, 5, 9], &[1.0, -0.5, -0.5]).unwrap();
        let m = rule_mass(&b, &Rule::Seq.weights(&b, &RuleParams::default()));
        assert_eq!(m.len_weight_corr, Some(0.0));
        let m = rule_mass(&b, &Rule::Token.weights(&b, &RuleParams::default()));
        assert!((m.len_weight_corr.unwrap() - 1.0).abs() < 1e-12);
    }
}
