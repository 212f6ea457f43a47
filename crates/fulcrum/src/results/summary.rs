//! What a comparison concludes from its runs: per run, the end point (final held-out accuracy,
//! the area under the accuracy curve), stability (reward spread over the last steps, steps lost
//! to collapse, skipped steps, gradient-norm spikes) and the length diagnostics; per task and
//! rule, their mean and 95% confidence interval over seeds; per task, the paired (same seed,
//! same warm-up) accuracy differences between rules; and across tasks, the linear relation of
//! `token - seq` to the measured length variation and +/- length gap.
//!
//! Definitions (also in the README): a step is *lost to collapse* when its entropy is below
//! [`Thresholds::entropy_floor`] times the run's first-step entropy, when its mean response
//! length is above [`Thresholds::len_blowup`] or below [`Thresholds::len_floor`] times the
//! first-step mean length, or when the latest held-out accuracy is more than
//! [`Thresholds::acc_margin`] below the best one so far. A gradient-norm spike is a step whose
//! norm (before clipping) exceeds [`Thresholds::spike_factor`] times the run's median.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use fulcrum_train::{RunData, StepMetrics};

use super::arm::Arm;
use super::stats::{self, Fit, MeanCi};

/// The cut-offs of the stability measures (every default in one place).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Thresholds {
    /// Fraction of the steps, at the end, over which the reward spread is taken.
    pub last_frac: f64,
    pub entropy_floor: f64,
    pub len_blowup: f64,
    pub len_floor: f64,
    pub acc_margin: f64,
    pub spike_factor: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            last_frac: 0.25,
            entropy_floor: 0.1,
            len_blowup: 2.0,
            len_floor: 0.2,
            acc_margin: 0.1,
            spike_factor: 5.0,
        }
    }
}

/// The measures of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunStats {
    pub task: String,
    /// The arm: the rule, or `rule+loss` in a comparison over losses.
    pub rule: String,
    /// The run's policy loss (`ppo.loss`).
    pub loss: String,
    pub seed: u64,
    pub dir: String,
    pub steps: usize,
    pub sft_accuracy: Option<f64>,
    pub final_accuracy: Option<f64>,
    /// The last evaluation's pass@k, greedy accuracy (`eval.greedy_prompts`) and truncated
    /// fraction (of the sampled responses).
    pub final_pass_at_k: Option<f64>,
    pub final_greedy_accuracy: Option<f64>,
    pub final_truncated: Option<f64>,
    /// Mean held-out accuracy over the run (area under the curve from step 0 / steps).
    pub accuracy_auc: Option<f64>,
    /// Sample std of `reward/mean` over the last steps.
    pub reward_spread: Option<f64>,
    pub collapse_steps: usize,
    pub entropy_collapse_steps: usize,
    pub length_collapse_steps: usize,
    pub accuracy_drop_steps: usize,
    pub skipped_steps: usize,
    pub grad_spikes: usize,
    /// Means over the run's steps.
    #[serde(flatten)]
    pub length: LengthProfile,
    /// The +/- mass ratio of the run's own rule, mean over steps.
    pub mass_ratio: Option<f64>,
    pub wall_seconds: Option<f64>,
}

pub fn run_stats(task: &str, run: &RunData, th: &Thresholds) -> RunStats {
    let first = |f: fn(&StepMetrics) -> Option<f64>| run.series(f).first().map(|p| p.1);
    let n = run.steps.len();

    // Collapse, step by step.
    let entropy = |m: &StepMetrics| finite(m.entropy_mean);
    let length = |m: &StepMetrics| finite(m.len_mean);
    let (ent0, len0) = (first(entropy), first(length));
    let (mut ent_c, mut len_c, mut acc_c, mut any_c) = (0, 0, 0, 0);
    let (mut best, mut current) = (f64::NEG_INFINITY, None::<f64>);
    let mut evals = run.evals.iter().peekable();
    for m in &run.steps {
        // The held-out accuracy in force at this step: the latest evaluation before it.
        while let Some((s, a)) = evals.peek() {
            if *s >= m.step {
                break;
            }
            best = best.max(*a);
            current = Some(*a);
            evals.next();
        }
        let e = matches!((entropy(m), ent0), (Some(e), Some(e0)) if e < th.entropy_floor * e0);
        let l = matches!((length(m), len0),
            (Some(l), Some(l0)) if l > th.len_blowup * l0 || l < th.len_floor * l0);
        let a = current.is_some_and(|c| c < best - th.acc_margin);
        ent_c += e as usize;
        len_c += l as usize;
        acc_c += a as usize;
        any_c += (e || l || a) as usize;
    }

    let rewards = run.values(|m| Some(m.reward_mean));
    let window = ((rewards.len() as f64 * th.last_frac).ceil() as usize).max(2);
    let reward_spread = stats::std_sample(&rewards[rewards.len().saturating_sub(window)..]);
    let grads = run.values(|m| Some(m.grad_norm));
    // A run whose median gradient is 0 (mostly unmixed groups) has no scale to spike against.
    let grad_spikes = stats::median(&grads).filter(|m| *m > 0.0).map_or(0, |med| {
        grads.iter().filter(|g| **g > th.spike_factor * med).count()
    });
    let auc_points: Vec<(f64, f64)> = run.evals.iter().map(|(s, a)| (*s as f64, *a)).collect();
    let mean_of = |f: &dyn Fn(&StepMetrics) -> Option<f64>| stats::mean(&run.values(f));
    let rule = run.config.rule;
    RunStats {
        task: task.to_string(),
        rule: run.rule().to_string(),
        loss: run.config.ppo.loss.name().to_string(),
        seed: run.config.seed,
        dir: run.dir.display().to_string(),
        steps: n,
        sft_accuracy: run.sft_accuracy(),
        final_accuracy: run.final_accuracy(),
        final_pass_at_k: run.final_eval().and_then(|e| e.pass_at_k),
        final_greedy_accuracy: run.final_eval().and_then(|e| e.greedy_accuracy),
        final_truncated: run.final_eval().and_then(|e| e.truncated),
        accuracy_auc: stats::normalised_area(&auc_points),
        reward_spread,
        collapse_steps: any_c,
        entropy_collapse_steps: ent_c,
        length_collapse_steps: len_c,
        accuracy_drop_steps: acc_c,
        skipped_steps: run.skipped_steps(),
        grad_spikes,
        length: LengthProfile {
            len_cv: mean_of(&|m| m.len_cv),
            len_gap: mean_of(&|m| m.len_gap),
            len_gap_rel: mean_of(&|m| m.len_gap_rel),
            len_cv_side: mean_of(&|m| m.len_cv_side),
            truncated_frac: mean_of(&|m| finite(m.len_truncated_frac)),
        },
        mass_ratio: mean_of(&|m| m.mass(rule).mass_ratio),
        wall_seconds: run.summary.as_ref().map(|s| s.wall_seconds),
    }
}

/// `Some(x)` when `x` is finite (a metric written as `null` reads back as NaN).
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The length profile of the sampled groups: within-group length CV, and the ± gap
/// `L- − L+` in tokens and relative to the mean length.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LengthProfile {
    pub len_cv: Option<f64>,
    pub len_gap: Option<f64>,
    pub len_gap_rel: Option<f64>,
    /// Within-side length CV (`len/cv_side`) and the fraction of responses cut at the limit.
    pub len_cv_side: Option<f64>,
    pub truncated_frac: Option<f64>,
}

impl LengthProfile {
    /// Each measure's mean over `runs` (those that have it).
    fn mean_over(runs: &[&RunStats]) -> Self {
        LengthProfile {
            len_cv: stats::mean(&opt_vals(runs, |r| r.length.len_cv)),
            len_gap: stats::mean(&opt_vals(runs, |r| r.length.len_gap)),
            len_gap_rel: stats::mean(&opt_vals(runs, |r| r.length.len_gap_rel)),
            len_cv_side: stats::mean(&opt_vals(runs, |r| r.length.len_cv_side)),
            truncated_frac: stats::mean(&opt_vals(runs, |r| r.length.truncated_frac)),
        }
    }
}

/// One task and rule over its seeds.
#[derive(Debug, Clone, Serialize)]
pub struct GroupStats {
    pub task: String,
    pub rule: String,
    pub seeds: usize,
    pub final_accuracy: Option<MeanCi>,
    pub accuracy_auc: Option<MeanCi>,
    pub reward_spread: Option<MeanCi>,
    /// Totals over the seeds.
    pub collapse_steps: usize,
    pub skipped_steps: usize,
    pub grad_spikes: usize,
    #[serde(flatten)]
    pub length: LengthProfile,
    pub mass_ratio: Option<f64>,
}

/// Per task: its length profile measured over all its runs, and paired accuracy differences.
#[derive(Debug, Clone, Serialize)]
pub struct Contrast {
    pub task: String,
    #[serde(flatten)]
    pub length: LengthProfile,
    /// `"a-b"` (e.g. `token-seq`): final accuracy of `a` minus `b`, paired by seed.
    pub final_accuracy_diff: BTreeMap<String, MeanCi>,
}

/// A rule pair over the whole grid: paired differences pooled over tasks and seeds.
#[derive(Debug, Clone, Serialize)]
pub struct Pooled {
    /// `"a-b"`.
    pub pair: String,
    /// `a` and `b` (a name may hold a `-` itself: `ba+clip-cov`).
    pub first: String,
    pub second: String,
    pub final_accuracy: MeanCi,
    pub accuracy_auc: Option<MeanCi>,
    /// Tasks with paired runs, and those where `a`'s mean final accuracy was above / below `b`'s.
    pub tasks: usize,
    pub tasks_won: usize,
    pub tasks_lost: usize,
}

/// A fitted relation across tasks.
#[derive(Debug, Clone, Serialize)]
pub struct Relation {
    pub y: String,
    pub x: Vec<String>,
    pub fit: Fit,
}

#[derive(Debug, Clone, Serialize)]
pub struct ComparisonSummary {
    pub rules: Vec<String>,
    pub tasks: Vec<String>,
    pub seeds: Vec<u64>,
    pub thresholds: Thresholds,
    pub runs: Vec<RunStats>,
    pub groups: Vec<GroupStats>,
    pub contrasts: Vec<Contrast>,
    pub pooled: Vec<Pooled>,
    pub relations: Vec<Relation>,
}

fn opt_vals<T>(rs: &[&RunStats], f: impl Fn(&RunStats) -> Option<T>) -> Vec<T> {
    rs.iter().filter_map(|r| f(r)).collect()
}

/// Summarises the runs (already measured) of a grid.
pub fn summarise(
    tasks: &[String],
    rules: &[String],
    seeds: &[u64],
    runs: Vec<RunStats>,
    th: Thresholds,
) -> ComparisonSummary {
    let mut groups = Vec::new();
    let mut contrasts = Vec::new();
    for task in tasks {
        for rule in rules {
            let rs: Vec<&RunStats> = runs
                .iter()
                .filter(|r| &r.task == task && &r.rule == rule)
                .collect();
            if rs.is_empty() {
                continue;
            }
            groups.push(GroupStats {
                task: task.clone(),
                rule: rule.clone(),
                seeds: rs.len(),
                final_accuracy: stats::mean_ci(&opt_vals(&rs, |r| r.final_accuracy)),
                accuracy_auc: stats::mean_ci(&opt_vals(&rs, |r| r.accuracy_auc)),
                reward_spread: stats::mean_ci(&opt_vals(&rs, |r| r.reward_spread)),
                collapse_steps: rs.iter().map(|r| r.collapse_steps).sum(),
                skipped_steps: rs.iter().map(|r| r.skipped_steps).sum(),
                grad_spikes: rs.iter().map(|r| r.grad_spikes).sum(),
                length: LengthProfile::mean_over(&rs),
                mass_ratio: stats::mean(&opt_vals(&rs, |r| r.mass_ratio)),
            });
        }
        let all: Vec<&RunStats> = runs.iter().filter(|r| &r.task == task).collect();
        let mut diffs = BTreeMap::new();
        for (a, b) in contrast_pairs(rules) {
            let d = paired(&all, seeds, &a, &b, |r| r.final_accuracy);
            if let Some(m) = stats::mean_ci(&d) {
                diffs.insert(format!("{a}-{b}"), m);
            }
        }
        contrasts.push(Contrast {
            task: task.clone(),
            length: LengthProfile::mean_over(&all),
            final_accuracy_diff: diffs,
        });
    }
    let relations = relations(&contrasts);
    let pooled = pooled(&runs, tasks, rules, seeds);
    ComparisonSummary {
        rules: rules.to_vec(),
        tasks: tasks.to_vec(),
        seeds: seeds.to_vec(),
        thresholds: th,
        runs,
        groups,
        contrasts,
        pooled,
        relations,
    }
}

/// The pairs compared: `token - seq` (claim b), and `ba` against every other rule (claim a).
/// In a grid over policy losses (arms spelled `rule+loss`) the same pairs within each loss,
/// and then each loss against `ppo` under the same rule.
pub fn contrast_pairs(arms: &[String]) -> Vec<(String, String)> {
    let has = |r: &str| arms.iter().any(|x| x == r);
    let mut losses: Vec<Option<&str>> = Vec::new();
    for a in arms {
        let l = Arm::parse(a).loss;
        if !losses.contains(&l) {
            losses.push(l);
        }
    }
    let label = |rule, loss| Arm { rule, loss }.label();
    let mut out = Vec::new();
    for &loss in &losses {
        let (token, seq, ba) = (label("token", loss), label("seq", loss), label("ba", loss));
        if has(&token) && has(&seq) {
            out.push((token, seq));
        }
        if has(&ba) {
            for a in arms
                .iter()
                .filter(|a| **a != ba && Arm::parse(a).loss == loss)
            {
                out.push((ba.clone(), a.clone()));
            }
        }
    }
    for a in arms {
        let arm = Arm::parse(a);
        let ppo = label(arm.rule, Some("ppo"));
        if arm.loss.is_some_and(|l| l != "ppo") && has(&ppo) {
            out.push((a.clone(), ppo));
        }
    }
    out
}

/// `f(a) - f(b)` for every seed where both runs have a value (same seed: same warm-up).
fn paired(
    runs: &[&RunStats],
    seeds: &[u64],
    a: &str,
    b: &str,
    f: impl Fn(&RunStats) -> Option<f64>,
) -> Vec<f64> {
    let at = |rule: &str, seed: u64| {
        runs.iter()
            .find(|r| r.rule == rule && r.seed == seed)
            .and_then(|r| f(r))
    };
    seeds
        .iter()
        .filter_map(|s| Some(at(a, *s)? - at(b, *s)?))
        .collect()
}

/// Over every task and seed, the paired differences of a rule pair: final accuracy and the area
/// under the accuracy curve, with the number of tasks each rule won on average.
fn pooled(runs: &[RunStats], tasks: &[String], rules: &[String], seeds: &[u64]) -> Vec<Pooled> {
    let mut out = Vec::new();
    for (a, b) in contrast_pairs(rules) {
        let (mut fin, mut auc) = (Vec::new(), Vec::new());
        let (mut won, mut lost, mut n) = (0, 0, 0);
        for task in tasks {
            let rs: Vec<&RunStats> = runs.iter().filter(|r| &r.task == task).collect();
            let d = paired(&rs, seeds, &a, &b, |r| r.final_accuracy);
            if let Some(m) = stats::mean(&d) {
                n += 1;
                won += (m > 0.0) as usize;
                lost += (m < 0.0) as usize;
            }
            fin.extend(d);
            auc.extend(paired(&rs, seeds, &a, &b, |r| r.accuracy_auc));
        }
        if let Some(final_accuracy) = stats::mean_ci(&fin) {
            out.push(Pooled {
                pair: format!("{a}-{b}"),
                first: a.clone(),
                second: b.clone(),
                final_accuracy,
                accuracy_auc: stats::mean_ci(&auc),
                tasks: n,
                tasks_won: won,
                tasks_lost: lost,
            });
        }
    }
    out
}

/// `token - seq` against the length CV, the relative +/- gap, and both (needs more tasks than
/// coefficients; the fits are over the tasks where every quantity is defined).
fn relations(contrasts: &[Contrast]) -> Vec<Relation> {
    let pts: Vec<(f64, f64, f64, f64)> = contrasts
        .iter()
        .filter_map(|c| {
            Some((
                c.length.len_cv?,
                c.length.len_gap_rel?,
                c.final_accuracy_diff.get("token-seq")?.mean,
                c.length.len_gap?,
            ))
        })
        .collect();
    let gap_abs: Vec<f64> = pts.iter().map(|p| p.3).collect();
    let cv: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let gap: Vec<f64> = pts.iter().map(|p| p.1).collect();
    let y: Vec<f64> = pts.iter().map(|p| p.2).collect();
    let mut out = Vec::new();
    let mut add = |x: Vec<&str>, xs: &[&[f64]]| {
        if let Some(fit) = stats::ols(xs, &y) {
            out.push(Relation {
                y: "token-seq".into(),
                x: x.into_iter().map(String::from).collect(),
                fit,
            });
        }
    };
    add(vec!["len_cv"], &[&cv]);
    add(vec!["len_gap_rel"], &[&gap]);
    add(vec!["len_gap"], &[&gap_abs]);
    add(vec!["len_cv", "len_gap_rel"], &[&cv, &gap]);
    out
}

fn pm(m: &Option<MeanCi>, digits: usize) -> String {
    match m {
        None => "-".into(),
        Some(MeanCi {
            mean,
            ci95: Some(c),
            ..
        }) => format!("{mean:.digits$} ± {c:.digits$}"),
        Some(MeanCi { mean, .. }) => format!("{mean:.digits$}"),
    }
}

fn num(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The summary as Markdown tables (also printed by `compare`).
pub fn table(s: &ComparisonSummary) -> String {
    let mut out = String::new();
    out.push_str("| task | rule | seeds | final acc (95% CI) | acc AUC | reward sd (last) | collapse steps | skipped | grad spikes | len CV | ± gap (L- − L+) | rel. gap | mass ratio +/- |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for g in &s.groups {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            g.task,
            g.rule,
            g.seeds,
            pm(&g.final_accuracy, 3),
            pm(&g.accuracy_auc, 3),
            pm(&g.reward_spread, 3),
            g.collapse_steps,
            g.skipped_steps,
            g.grad_spikes,
            num(g.length.len_cv, 3),
            num(g.length.len_gap, 2),
            num(g.length.len_gap_rel, 3),
            num(g.mass_ratio, 2),
        ));
    }
    let pairs = contrast_pairs(&s.rules);
    if s.contrasts
        .iter()
        .any(|c| !c.final_accuracy_diff.is_empty())
    {
        out.push_str(
            "\nPaired final-accuracy differences (same seed, same warm-up), mean ± 95% CI:\n\n",
        );
        out.push_str("| task | len CV | ± gap | rel. gap |");
        for (a, b) in &pairs {
            out.push_str(&format!(" {a} − {b} |"));
        }
        out.push_str(&format!(
            "\n|---|---|---|---|{}\n",
            "---|".repeat(pairs.len())
        ));
        for c in &s.contrasts {
            out.push_str(&format!(
                "| {} | {} | {} | {} |",
                c.task,
                num(c.length.len_cv, 3),
                num(c.length.len_gap, 2),
                num(c.length.len_gap_rel, 3),
            ));
            for (a, b) in &pairs {
                let d = c.final_accuracy_diff.get(&format!("{a}-{b}")).copied();
                out.push_str(&format!(" {} |", pm(&d, 3)));
            }
            out.push('\n');
        }
    }
    if !s.pooled.is_empty() {
        out.push_str("\nPooled over all tasks and seeds (paired), mean ± 95% CI:\n\n");
        out.push_str("| pair | final acc diff | acc AUC diff | pairs | tasks won / lost / all |\n");
        out.push_str("|---|---|---|---|---|\n");
        for p in &s.pooled {
            out.push_str(&format!(
                "| {} − {} | {} | {} | {} | {} / {} / {} |\n",
                p.first,
                p.second,
                pm(&Some(p.final_accuracy), 3),
                pm(&p.accuracy_auc, 3),
                p.final_accuracy.n,
                p.tasks_won,
                p.tasks_lost,
                p.tasks
            ));
        }
    }
    if !s.relations.is_empty() {
        out.push_str("\nLinear fits across tasks (least squares):\n\n");
        for r in &s.relations {
            let terms: Vec<String> = r
                .fit
                .slopes
                .iter()
                .zip(&r.fit.slope_ci95)
                .zip(&r.x)
                .map(|((b, ci), x)| match ci {
                    Some(ci) => format!("{b:+.3} (± {ci:.3}) * {x}"),
                    None => format!("{b:+.3} * {x}"),
                })
                .collect();
            out.push_str(&format!(
                "- {} = {:.3} {}  (R² = {:.2}, n = {})\n",
                r.y,
                r.fit.intercept,
                terms.join(" "),
                r.fit.r2,
                r.fit.n
            ));
        }
    }
    out
}
