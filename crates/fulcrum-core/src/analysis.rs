//! [`AnalysisReport`]: the document that `fulcrum analyze --json` prints and that the Python
//! package's `fulcrum_ba.analyze` returns, assembled in one place so both give the same object.
//!
//! It holds the advantages, every rule's weights and masses, and the length diagnostics of one
//! batch ([`Diagnostics`]). Keys serialise in alphabetical order at every level (top level,
//! rule names, fields), which is the order the CLI has always printed.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::diagnostics::{Diagnostics, LengthDiagnostics, RuleDiagnostics};

/// `{advantages, diagnostics, rules: {NAME: {...}}}`; undefined values serialise as `null`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalysisReport {
    /// `A_i` in input order.
    pub advantages: Vec<f64>,
    /// The length and group-mix diagnostics.
    pub diagnostics: LengthReport,
    /// One entry per rule, keyed by its spec name.
    pub rules: BTreeMap<&'static str, RuleReport>,
}

/// One rule's weights and masses (fields in alphabetical order).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleReport {
    /// Pearson correlation of `L_i` and `w_i L_i`.
    pub len_weight_corr: Option<f64>,
    /// `sum_{A_i < 0} w_i L_i |A_i|`.
    pub mass_neg: f64,
    /// `sum_{A_i > 0} w_i L_i |A_i|`.
    pub mass_pos: f64,
    /// `mass_pos / mass_neg`.
    pub mass_ratio: Option<f64>,
    /// `w_i` in input order.
    pub weights: Vec<f64>,
}

/// [`LengthDiagnostics`] with its fields in alphabetical order, as the report prints them (all
/// but the trainer-only `len_cv_side`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LengthReport {
    pub frac_all_correct: f64,
    pub frac_all_wrong: f64,
    pub frac_mixed: f64,
    pub len_cv: Option<f64>,
    pub len_gap: Option<f64>,
    pub len_gap_rel: Option<f64>,
    pub len_mean: f64,
    pub len_neg_mean: Option<f64>,
    pub len_pos_mean: Option<f64>,
}

impl From<&LengthDiagnostics> for LengthReport {
    fn from(d: &LengthDiagnostics) -> Self {
        // Exhaustive: a new diagnostic does not compile until the report carries it.
        let LengthDiagnostics {
            len_mean,
            len_cv,
            // Not in the report: `analyze --json` keeps its documented nine keys (the README,
            // `fulcrum_ba.analyze`); the trainer logs it as `len/cv_side`.
            len_cv_side: _,
            len_pos_mean,
            len_neg_mean,
            len_gap,
            len_gap_rel,
            frac_mixed,
            frac_all_correct,
            frac_all_wrong,
        } = *d;
        Self {
            frac_all_correct,
            frac_all_wrong,
            frac_mixed,
            len_cv,
            len_gap,
            len_gap_rel,
            len_mean,
            len_neg_mean,
            len_pos_mean,
        }
    }
}

impl From<&RuleDiagnostics> for RuleReport {
    fn from(r: &RuleDiagnostics) -> Self {
        Self {
            len_weight_corr: r.mass.len_weight_corr,
            mass_neg: r.mass.mass_neg,
            mass_pos: r.mass.mass_pos,
            mass_ratio: r.mass.mass_ratio,
            weights: r.weights.clone(),
        }
    }
}

impl AnalysisReport {
    /// The report of a batch whose advantages are `advantages` and diagnostics `diag`.
    pub fn new(advantages: &[f64], diag: &Diagnostics) -> Self {
        Self {
            advantages: advantages.to_vec(),
            diagnostics: LengthReport::from(&diag.lengths),
            rules: diag
                .rules
                .iter()
                .map(|r| (r.rule.name(), RuleReport::from(r)))
                .collect(),
        }
    }
}

/// `drgrpo`'s `L_norm` when an analysis is given none: the longest response of the batch (at
/// least 1). Training takes it from the config's maximum response length instead.
pub fn default_l_norm(lengths: &[i64]) -> f64 {
    lengths.iter().copied().max().unwrap_or(0).max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{advantages, Estimator, RuleParams, StepBatch};

    #[test]
    fn keys_serialise_in_alphabetical_order() {
        let groups = [0, 0, 1, 1];
        let rewards = [1.0, 0.0, 1.0, 1.0];
        let lengths = [3, 5, 2, 2];
        let adv = advantages::compute(Estimator::Grpo, &groups, &rewards, &lengths).unwrap();
        let batch = StepBatch::new(&groups, &lengths, &adv).unwrap();
        let diag = Diagnostics::compute(&batch, &rewards, &RuleParams::default()).unwrap();
        let text = serde_json::to_string(&AnalysisReport::new(&adv, &diag)).unwrap();
        let order = |keys: &[&str]| {
            let at: Vec<usize> = keys
                .iter()
                .map(|k| text.find(&format!("\"{k}\":")).expect(k))
                .collect();
            assert!(at.windows(2).all(|w| w[0] < w[1]), "{keys:?} in {text}");
        };
        order(&["advantages", "diagnostics", "rules"]);
        order(&["frac_all_correct", "len_cv", "len_mean", "len_pos_mean"]);
        order(&[
            "ba",
            "ba-batch",
            "drgrpo",
            "seq",
            "seq-sum",
            "token",
            "token-group",
        ]);
        assert!(text.contains("\"len_gap\":2.0"), "{text}");
        assert!(text.contains("\"token\":{\"len_weight_corr\":1.0,\"mass_neg\":"));
    }
}
