//! What a run records, typed: [`StepMetrics`] is one line of `metrics.jsonl`, written by the
//! step and read back by `train`, `compare` and `report` through [`crate::RunData`]; the JSONL
//! streams themselves are in `jsonl.rs`.
//!
//! The serde names are the file's keys (`reward/mean`, `mass_ratio/ba`, ...). A line is written
//! through `serde_json::Value`, whose map is ordered by key, so a line's keys come out sorted;
//! a value that is not finite is written as `null` and read back as NaN (or `None` where the
//! field is optional).

mod dashboards;
mod jsonl;
mod wandb;

use std::collections::BTreeMap;

use fulcrum_core::{Rule, RuleMass};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use dashboards::{set_chart_drawer, Dashboards, LengthsBySign};
pub use jsonl::{truncate_after, JsonlWriter};

/// One GRPO step's metrics line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepMetrics {
    pub step: u64,
    /// Mean shaped reward over the step's responses.
    #[serde(rename = "reward/mean", deserialize_with = "nan_if_null")]
    pub reward_mean: f64,
    /// Fraction of responses the verifier judged correct.
    #[serde(rename = "acc/train", deserialize_with = "nan_if_null")]
    pub acc_train: f64,
    /// Fraction of responses cut at `max_response_len`.
    #[serde(rename = "len/truncated_frac", deserialize_with = "nan_if_null")]
    pub len_truncated_frac: f64,
    /// The spec's length diagnostics over the loss-masked lengths.
    #[serde(rename = "len/mean", deserialize_with = "nan_if_null")]
    pub len_mean: f64,
    #[serde(rename = "len/cv")]
    pub len_cv: Option<f64>,
    #[serde(rename = "len/pos_mean")]
    pub len_pos_mean: Option<f64>,
    #[serde(rename = "len/neg_mean")]
    pub len_neg_mean: Option<f64>,
    #[serde(rename = "len/gap")]
    pub len_gap: Option<f64>,
    #[serde(rename = "len/gap_rel")]
    pub len_gap_rel: Option<f64>,
    /// Length CV within each side (`A > 0`, `A < 0`) of each group, averaged over the sides of
    /// two or more responses: the within-side variation that separates `ba` from `token-group`.
    #[serde(rename = "len/cv_side")]
    pub len_cv_side: Option<f64>,
    /// Fractions of groups with mixed, all-correct and all-wrong rewards.
    #[serde(rename = "groups/mixed", deserialize_with = "nan_if_null")]
    pub groups_mixed: f64,
    #[serde(rename = "groups/all_correct", deserialize_with = "nan_if_null")]
    pub groups_all_correct: f64,
    #[serde(rename = "groups/all_wrong", deserialize_with = "nan_if_null")]
    pub groups_all_wrong: f64,
    /// Every rule's masses on this batch (`mass_pos/<rule>`, ...), whichever rule trained, and
    /// the cosine of each rule's update weights with the trained rule's (`update_cos/<rule>`).
    #[serde(flatten)]
    pub rules: RuleMasses,
    /// The loss as back-propagated (policy + regularisers), summed over the step's updates.
    #[serde(rename = "loss/total", deserialize_with = "nan_if_null")]
    pub loss_total: f64,
    #[serde(rename = "loss/policy", deserialize_with = "nan_if_null")]
    pub loss_policy: f64,
    /// Fractions of response tokens clipped low, high, either, and dual-clipped.
    #[serde(rename = "clip/frac_low", deserialize_with = "nan_if_null")]
    pub clip_frac_low: f64,
    #[serde(rename = "clip/frac_high", deserialize_with = "nan_if_null")]
    pub clip_frac_high: f64,
    #[serde(rename = "clip/frac", deserialize_with = "nan_if_null")]
    pub clip_frac: f64,
    #[serde(rename = "clip/dual_frac", deserialize_with = "nan_if_null")]
    pub clip_dual_frac: f64,
    /// Fraction of loss tokens chosen by Clip-Cov / KL-Cov (0 for the other losses).
    #[serde(rename = "clip/cov_selected_frac", deserialize_with = "nan_if_null")]
    pub clip_cov_selected_frac: f64,
    /// Token-mean k3 KL between the sampling policy and the current one.
    #[serde(rename = "kl/sampling", deserialize_with = "nan_if_null")]
    pub kl_sampling: f64,
    /// Token-mean KL estimate to the reference (0 when KL is off).
    #[serde(rename = "kl/reference", deserialize_with = "nan_if_null")]
    pub kl_reference: f64,
    #[serde(rename = "entropy/mean", deserialize_with = "nan_if_null")]
    pub entropy_mean: f64,
    /// The largest gradient norm (before clipping) of the step's optimizer steps.
    #[serde(rename = "grad/norm", deserialize_with = "nan_if_null")]
    pub grad_norm: f64,
    /// Whether any update of the step was skipped (non-finite loss or gradient), or the whole
    /// step (see `skip_reason`).
    pub skipped: bool,
    /// Why the whole step was skipped (e.g. non-finite logits while sampling); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    #[serde(rename = "opt/steps")]
    pub opt_steps: u64,
    #[serde(rename = "opt/lr", deserialize_with = "nan_if_null")]
    pub opt_lr: f64,
    #[serde(rename = "sample/groups_drawn")]
    pub groups_drawn: u64,
    #[serde(rename = "sample/groups_dropped")]
    pub groups_dropped: u64,
    /// Sampled response tokens (stop tokens included).
    #[serde(rename = "sample/tokens")]
    pub sample_tokens: i64,
    /// Seconds spent sampling, scoring, training and in the whole step (not reproducible).
    #[serde(rename = "time/sample", deserialize_with = "nan_if_null")]
    pub time_sample: f64,
    #[serde(rename = "time/score", deserialize_with = "nan_if_null")]
    pub time_score: f64,
    #[serde(rename = "time/train", deserialize_with = "nan_if_null")]
    pub time_train: f64,
    /// Seconds spent on the trainer's log-probabilities of engine rollouts, which become their
    /// old log-probabilities (0 with the native sampler, which keeps its own while sampling).
    #[serde(
        rename = "time/old_logprobs",
        default,
        deserialize_with = "nan_if_null"
    )]
    pub time_old_logprobs: f64,
    #[serde(rename = "time/step", deserialize_with = "nan_if_null")]
    pub time_step: f64,
    /// Seconds spent bringing the rollout engines to the policy's weights before sampling
    /// (writing the files and the engines' reload; 0 with the native sampler).
    #[serde(rename = "time/weight_push", deserialize_with = "nan_if_null")]
    pub time_weight_push: f64,
    /// Token-mean k3 estimate of KL(engine || trainer) on engine rollouts (0 with the native
    /// sampler, whose log-probabilities are the trainer's).
    #[serde(rename = "kl/engine", deserialize_with = "nan_if_null")]
    pub kl_engine: f64,
    /// Responses sampled by other weights than the version the step expected.
    #[serde(rename = "rollout/stale")]
    pub rollout_stale: u64,
    /// How many versions behind the trained policy the responses trained on were sampled, on
    /// average and at most (`rollout.max_staleness` bounds it; 0 with the native sampler).
    #[serde(rename = "rollout/staleness_mean", deserialize_with = "nan_if_null")]
    pub rollout_staleness_mean: f64,
    #[serde(rename = "rollout/staleness_max")]
    pub rollout_staleness_max: u64,
    /// Responses dropped for being sampled more than `rollout.max_staleness` versions behind.
    #[serde(rename = "rollout/dropped_stale")]
    pub rollout_dropped_stale: u64,
    /// Fraction of response tokens whose importance weight `rollout.is_cap` cut (0 when off).
    #[serde(rename = "rollout/is_capped_frac", deserialize_with = "nan_if_null")]
    pub rollout_is_capped_frac: f64,
    /// Tool calls per response (`task.tools`; 0 without tools).
    #[serde(rename = "tool/calls_mean", default, deserialize_with = "nan_if_null")]
    pub tool_calls_mean: f64,
    /// Calls answered with an error (malformed, crashed, refused, killed) and those that ran
    /// past `task.tool_timeout_s`, over the step's draws.
    #[serde(rename = "tool/errors", default)]
    pub tool_errors: u64,
    #[serde(rename = "tool/timeouts", default)]
    pub tool_timeouts: u64,
    /// Model turns per response (calls + 1).
    #[serde(rename = "turns/mean", default, deserialize_with = "nan_if_null")]
    pub turns_mean: f64,
    /// Mean tokens per response written by the model (what every rule's length counts) and by
    /// the tools (context, with no loss).
    #[serde(rename = "len/model_tokens", default, deserialize_with = "nan_if_null")]
    pub len_model_tokens: f64,
    #[serde(rename = "len/tool_tokens", default, deserialize_with = "nan_if_null")]
    pub len_tool_tokens: f64,
}

impl StepMetrics {
    /// The line of a step that was skipped as a whole, before any response was scored: its
    /// measurements are NaN (`null` in the file), `skipped` is true, and the reason is said.
    pub fn skipped_step(step: u64, lr: f64, reason: String) -> StepMetrics {
        let nan = f64::NAN;
        StepMetrics {
            step,
            reward_mean: nan,
            acc_train: nan,
            len_truncated_frac: nan,
            len_mean: nan,
            groups_mixed: nan,
            groups_all_correct: nan,
            groups_all_wrong: nan,
            loss_total: nan,
            loss_policy: nan,
            clip_frac_low: nan,
            clip_frac_high: nan,
            clip_frac: nan,
            clip_dual_frac: nan,
            clip_cov_selected_frac: nan,
            kl_sampling: nan,
            kl_reference: nan,
            entropy_mean: nan,
            grad_norm: nan,
            skipped: true,
            skip_reason: Some(reason),
            opt_lr: lr,
            ..StepMetrics::default()
        }
    }

    /// Sampling throughput of this step, tokens per second.
    pub fn sample_tokens_per_s(&self) -> f64 {
        self.sample_tokens as f64 / self.time_sample.max(1e-9)
    }

    /// The masses of `rule` on this step's batch (all NaN / `None` if the line lacks them).
    pub fn mass(&self, rule: Rule) -> RuleMass {
        self.rules.mass.get(&rule).cloned().unwrap_or(RuleMass {
            mass_pos: f64::NAN,
            mass_neg: f64::NAN,
            mass_ratio: None,
            len_weight_corr: None,
        })
    }
}

/// Every rule's [`RuleMass`], written as the keys `mass_pos/<rule>`, `mass_neg/<rule>`,
/// `mass_ratio/<rule>` and `len_weight_corr/<rule>`, and the manipulation check
/// `update_cos/<rule>`: the cosine between that rule's effective update weights
/// `w_i * L_i * |A_i|` and the trained rule's on this batch (1 for the trained rule itself;
/// `None` when either has no mass), which says how different the rules' updates really were;
/// and `trunc_share/<rule>`: the share of that rule's update mass on truncated responses, the
/// prediction that the decay of `len/truncated_frac` under each rule is read against.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleMasses {
    pub mass: BTreeMap<Rule, RuleMass>,
    pub update_cos: BTreeMap<Rule, Option<f64>>,
    pub trunc_share: BTreeMap<Rule, Option<f64>>,
}

impl RuleMasses {
    /// The cosine of `rule`'s update weights with the trained rule's (`None`: not recorded or
    /// undefined).
    pub fn update_cos(&self, rule: Rule) -> Option<f64> {
        self.update_cos.get(&rule).copied().flatten()
    }
}

const MASS_KEYS: [&str; 6] = [
    "mass_pos",
    "mass_neg",
    "mass_ratio",
    "len_weight_corr",
    "update_cos",
    "trunc_share",
];

impl Serialize for RuleMasses {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.mass.len() * MASS_KEYS.len()))?;
        for (rule, m) in &self.mass {
            let name = rule.name();
            map.serialize_entry(&format!("mass_pos/{name}"), &m.mass_pos)?;
            map.serialize_entry(&format!("mass_neg/{name}"), &m.mass_neg)?;
            map.serialize_entry(&format!("mass_ratio/{name}"), &m.mass_ratio)?;
            map.serialize_entry(&format!("len_weight_corr/{name}"), &m.len_weight_corr)?;
        }
        for (rule, c) in &self.update_cos {
            map.serialize_entry(&format!("update_cos/{}", rule.name()), c)?;
        }
        for (rule, t) in &self.trunc_share {
            map.serialize_entry(&format!("trunc_share/{}", rule.name()), t)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for RuleMasses {
    /// Takes the `<mass key>/<rule>` entries of the line (the other keys of the line reach
    /// here too, through `flatten`, and are left alone).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let rest = BTreeMap::<String, serde_json::Value>::deserialize(d)?;
        let mut out = RuleMasses::default();
        for (key, value) in rest {
            let Some((kind, rule)) = key.split_once('/') else {
                continue;
            };
            if !MASS_KEYS.contains(&kind) {
                continue;
            }
            let rule: Rule = rule.parse().map_err(serde::de::Error::custom)?;
            let x = value.as_f64();
            match kind {
                "update_cos" => {
                    out.update_cos.insert(rule, x);
                    continue;
                }
                "trunc_share" => {
                    out.trunc_share.insert(rule, x);
                    continue;
                }
                _ => {}
            }
            let m = out.mass.entry(rule).or_default();
            match kind {
                "mass_pos" => m.mass_pos = x.unwrap_or(f64::NAN),
                "mass_neg" => m.mass_neg = x.unwrap_or(f64::NAN),
                "mass_ratio" => m.mass_ratio = x,
                _ => m.len_weight_corr = x,
            }
        }
        Ok(out)
    }
}

/// `null` (how JSON writes a non-finite number) reads back as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_round_trips_with_sorted_keys_and_per_rule_masses() {
        let mut m = StepMetrics {
            step: 3,
            reward_mean: 0.5,
            len_cv: Some(0.25),
            loss_total: f64::NAN,
            ..StepMetrics::default()
        };
        m.rules.update_cos.insert(Rule::Seq, Some(0.75));
        m.rules.trunc_share.insert(Rule::Token, Some(0.25));
        m.rules.mass.insert(
            Rule::BaBatch,
            RuleMass {
                mass_pos: 0.6,
                mass_neg: 0.4,
                mass_ratio: Some(1.5),
                len_weight_corr: None,
            },
        );
        let line = serde_json::to_string(&serde_json::to_value(&m).unwrap()).unwrap();
        assert!(line.contains("\"mass_ratio/ba-batch\":1.5"), "{line}");
        assert!(line.contains("\"loss/total\":null"), "{line}");
        assert!(line.contains("\"len/gap\":null"), "{line}");
        let keys: Vec<String> =
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&line)
                .unwrap()
                .keys()
                .cloned()
                .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        let back: StepMetrics = serde_json::from_str(&line).unwrap();
        assert!(back.loss_total.is_nan());
        assert_eq!(back.mass(Rule::BaBatch).mass_ratio, Some(1.5));
        assert_eq!(back.len_cv, Some(0.25));
        assert_eq!(back.rules.update_cos(Rule::Seq), Some(0.75));
        assert_eq!(back.rules.update_cos(Rule::Ba), None);
        assert!(line.contains("\"update_cos/seq\":0.75"), "{line}");
        assert_eq!(back.rules.trunc_share.get(&Rule::Token), Some(&Some(0.25)));
        assert!(line.contains("\"trunc_share/token\":0.25"), "{line}");
        assert!(back.mass(Rule::Token).mass_pos.is_nan());
    }
}
