//! The charts of one task: reward, held-out accuracy (and each rule's accuracy minus `ba`'s,
//! paired by seed), response lengths by sign, the +/- gap, every rule's mass ratio, entropy,
//! gradient norm and clip fraction, and where anything was cut, the truncated fraction next to
//! each rule's predicted share of its update on truncated responses. Each rule is drawn as its
//! runs' mean with a min-max band.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use fulcrum_core::Rule;
use fulcrum_train::{RunData, StepMetrics};

use super::charts::{self, Dash, Series};
use super::source::Source;
use crate::cmd::compare::grid;
use crate::results::arm::Arm;

/// What a chart reads from one run of a rule: `(step, value)` points.
type Curve<'a> = dyn Fn(&str, &RunData) -> Vec<(f64, f64)> + 'a;

/// One value of a step's metrics line (`None`: not measured at that step).
type Metric = fn(&StepMetrics) -> Option<f64>;

/// `(x, low, high)` of a shaded band.
type Band = (f64, f64, f64);

/// Mean over runs at each step, with the min-max band when there are several runs.
fn over_seeds<'a>(
    runs: impl Iterator<Item = &'a RunData>,
    f: impl Fn(&RunData) -> Vec<(f64, f64)>,
) -> (Vec<(f64, f64)>, Vec<Band>) {
    mean_and_band(runs.map(f).collect())
}

/// Mean over curves at each x, with the min-max band when there are several curves.
fn mean_and_band(curves: Vec<Vec<(f64, f64)>>) -> (Vec<(f64, f64)>, Vec<Band>) {
    let mut by_step: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    let n = curves.len();
    for curve in curves {
        for (x, y) in curve {
            by_step.entry(x.round() as i64).or_default().push(y);
        }
    }
    let mean = by_step
        .iter()
        .map(|(x, v)| (*x as f64, v.iter().sum::<f64>() / v.len() as f64))
        .collect();
    let band = if n > 1 {
        by_step
            .iter()
            .map(|(x, v)| {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (*x as f64, lo, hi)
            })
            .collect()
    } else {
        Vec::new()
    };
    (mean, band)
}

fn evals(r: &RunData) -> Vec<(f64, f64)> {
    r.evals.iter().map(|(s, a)| (*s as f64, *a)).collect()
}

/// Held-out accuracy of each rule minus the reference rule's (`ba` when compared, else the
/// first), paired by seed at each evaluation: seed-to-seed variation of the shared warm-up,
/// which dominates the plain accuracy bands, cancels.
fn paired_accuracy(src: &Source, task: &str) -> Option<(String, Vec<Series>)> {
    let reference = ["ba", "ba+ppo"]
        .into_iter()
        .find(|r| src.rules.iter().any(|x| x == r))
        .or_else(|| src.rules.first().map(String::as_str))?;
    let series: Vec<Series> = src
        .rules
        .iter()
        .filter(|r| r.as_str() != reference)
        .map(|rule| {
            let curves = src
                .runs_of(task, rule)
                .filter_map(|run| {
                    let base = src
                        .runs_of(task, reference)
                        .find(|b| b.config.seed == run.config.seed)?;
                    let at: BTreeMap<u64, f64> = base.evals.iter().copied().collect();
                    Some(
                        run.evals
                            .iter()
                            .filter_map(|(s, a)| Some((*s as f64, a - at.get(s)?)))
                            .collect(),
                    )
                })
                .collect();
            let (points, band) = mean_and_band(curves);
            Series {
                label: format!("{rule} − {reference}"),
                color: charts::rule_color(rule),
                dash: Dash::Solid,
                points,
                band,
            }
        })
        .collect();
    (!series.is_empty()).then(|| (reference.to_string(), series))
}

/// One chart per quantity for `task`; returns `(title, png path)` of those drawn.
pub(super) fn task_charts(src: &Source, task: &str, out: &Path) -> Result<Vec<(String, PathBuf)>> {
    let label = grid::task_label(task);
    let mut drawn = Vec::new();
    let band_note = if src.is_compare {
        " (mean over seeds, band: min-max)"
    } else {
        ""
    };
    let mut chart = |name: &str, title: String, y: &str, series: Vec<Series>| -> Result<()> {
        let path = out.join(format!("{label}-{name}.png"));
        if charts::lines(&path, &title, "GRPO step", y, &series)? {
            drawn.push((title, path));
        }
        Ok(())
    };
    // One solid line per rule (its runs' mean, with the band over seeds) of what `values` reads.
    let per_rule_of = |values: &Curve<'_>| -> Vec<Series> {
        src.rules
            .iter()
            .map(|rule| {
                let (points, band) = over_seeds(src.runs_of(task, rule), |r| values(rule, r));
                Series::solid(rule, points, band)
            })
            .collect()
    };
    let per_rule = |value: Metric| per_rule_of(&|_, r| r.series(value));
    // The same, of what `value` reads for each line's own rule (an arm of a loss grid,
    // `rule+loss`, reads its rule's).
    let per_own_rule = |value: fn(&StepMetrics, Rule) -> Option<f64>| {
        per_rule_of(&|name, r| {
            let rule: Option<Rule> = Arm::parse(name).rule.parse().ok();
            rule.map_or_else(Vec::new, |rule| r.series(|m| value(m, rule)))
        })
    };
    chart(
        "reward",
        format!("Mean reward per step{band_note}"),
        "reward",
        per_rule(|m| Some(m.reward_mean)),
    )?;
    chart(
        "accuracy",
        format!("Held-out accuracy (step 0: start of RL){band_note}"),
        "accuracy",
        per_rule_of(&|_, r| evals(r)),
    )?;
    if src.is_compare {
        if let Some((reference, diffs)) = paired_accuracy(src, task) {
            chart(
                "accuracy-diff",
                format!("Held-out accuracy minus {reference}'s, same seed (mean, band: min-max)"),
                "accuracy difference",
                diffs,
            )?;
        }
    }
    let mut len = Vec::new();
    for rule in &src.rules {
        let sides: [(Metric, &str, Dash); 3] = [
            (|m| m.len_pos_mean, "+ (A>0)", Dash::Solid),
            (|m| m.len_neg_mean, "- (A<0)", Dash::Dashed),
            (|m| Some(m.len_mean), "all", Dash::Thin),
        ];
        for (value, side, dash) in sides {
            let (points, _) = over_seeds(src.runs_of(task, rule), |r| r.series(value));
            len.push(Series {
                label: format!("{rule} {side}"),
                color: charts::rule_color(rule),
                dash,
                points,
                band: Vec::new(),
            });
        }
    }
    chart(
        "length",
        "Response length: positive, negative, all (mean over seeds)".into(),
        "tokens",
        len,
    )?;
    chart(
        "gap",
        format!("± length gap L- − L+ (mixed groups){band_note}"),
        "tokens",
        per_rule(|m| m.len_gap),
    )?;
    let mass: Vec<Series> = if src.is_compare {
        per_own_rule(|m, rule| m.mass(rule).mass_ratio)
    } else {
        // One run: what every rule would have done with its batches.
        Rule::ALL
            .iter()
            .map(|&rule| {
                let (points, _) = over_seeds(src.runs.iter().map(|r| &r.2), |r| {
                    r.series(|m| m.mass(rule).mass_ratio)
                });
                Series::solid(rule.name(), points, Vec::new())
            })
            .collect()
    };
    let mass_title = if src.is_compare {
        "Mass ratio +/- of each rule in its own runs"
    } else {
        "Mass ratio +/- every rule gives this run's batches"
    };
    chart(
        "mass-ratio",
        mass_title.into(),
        "positive / negative mass",
        mass,
    )?;
    chart(
        "entropy",
        format!("Policy entropy{band_note}"),
        "nats per token",
        per_rule(|m| Some(m.entropy_mean)),
    )?;
    chart(
        "grad-norm",
        format!("Gradient norm before clipping{band_note}"),
        "L2 norm",
        per_rule(|m| Some(m.grad_norm)),
    )?;
    chart(
        "clip-frac",
        format!("Clipped token fraction{band_note}"),
        "fraction",
        per_rule(|m| Some(m.clip_frac)),
    )?;
    // Truncation, where anything was cut: the measured fraction next to what the weights predict
    // (the share of each rule's own update mass on truncated responses).
    let truncates = src
        .rules
        .iter()
        .flat_map(|rule| src.runs_of(task, rule))
        .any(|r| r.steps.iter().any(|m| m.len_truncated_frac > 0.0));
    if truncates {
        chart(
            "truncated",
            format!("Responses cut at the length limit{band_note}"),
            "fraction",
            per_rule(|m| Some(m.len_truncated_frac)),
        )?;
        chart(
            "trunc-share",
            format!("Update mass on truncated responses{band_note}"),
            "share of the rule's own update",
            per_own_rule(|m, rule| m.rules.trunc_share.get(&rule).copied().flatten()),
        )?;
    }
    Ok(drawn)
}
