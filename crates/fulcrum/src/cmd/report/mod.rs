//! `fulcrum report DIR`: charts (PNG) and one self-contained HTML page (images embedded as
//! base64, no network) for a run directory or a `fulcrum compare` directory.
//!
//! Per task: reward and held-out accuracy over steps (per rule, the mean over seeds with a
//! min-max band) and, in a comparison, each rule's accuracy minus `ba`'s paired by seed;
//! response length (positive, negative, all), the +/- length gap, the mass ratio
//! of each rule, entropy, gradient norm and clip fraction; for a comparison of several tasks
//! with `token` and `seq`, the accuracy difference `token - seq` against the measured length CV
//! and +/- gap with the fitted line; and the summary table of `compare`.

mod charts;
mod font;
mod html;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use fulcrum_core::Rule;
use serde_json::Value;

use super::compare::grid;
use super::compare::run_data::RunData;
use super::compare::summary::{self, Summary, Thresholds};
use charts::{Dash, Series};

/// Flags of `fulcrum report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run directory (`fulcrum train`) or a comparison directory (`fulcrum compare --out`).
    pub dir: PathBuf,
    /// Where to write the charts and `index.html` [default: DIR/report].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// TrueType/OpenType font for the charts [default: DejaVu Sans, Liberation Sans or Noto
    /// Sans from the Debian font packages].
    #[arg(long)]
    pub font: Option<PathBuf>,
}

/// The runs to draw, by task, and their summary.
struct Source {
    /// Comparison runs started but not finished (left out of charts and table).
    unfinished: Vec<String>,
    /// A comparison (several rules per task) or one run.
    is_compare: bool,
    tasks: Vec<String>,
    rules: Vec<String>,
    runs: Vec<(String, RunData)>,
    summary: Summary,
}

fn strings(v: &Value, key: &str, file: &Path) -> Result<Vec<String>> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .with_context(|| format!("{}: {key}: missing or not a list", file.display()))
}

impl Source {
    fn load(dir: &Path) -> Result<Self> {
        let manifest = dir.join("compare.json");
        if !manifest.exists() {
            let run = RunData::load(dir).with_context(|| {
                format!(
                    "{} is neither a run directory nor a comparison (no compare.json)",
                    dir.display()
                )
            })?;
            let task = run_task_spec(&run);
            let stats = summary::run_stats(&task, &run, &Thresholds::default());
            let rule = run.rule().to_string();
            let s = summary::summarise(
                std::slice::from_ref(&task),
                std::slice::from_ref(&rule),
                &[run.config.seed],
                vec![stats],
                Thresholds::default(),
            );
            return Ok(Source {
                unfinished: Vec::new(),
                is_compare: false,
                tasks: vec![task.clone()],
                rules: vec![rule],
                runs: vec![(task, run)],
                summary: s,
            });
        }
        let text = fs::read_to_string(&manifest)
            .with_context(|| format!("reading {}", manifest.display()))?;
        let m: Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not JSON", manifest.display()))?;
        let tasks = strings(&m, "tasks", &manifest)?;
        let rules = strings(&m, "rules", &manifest)?;
        let seeds: Vec<u64> = m
            .get("seeds")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .with_context(|| format!("{}: seeds: missing or not a list", manifest.display()))?;
        // The thresholds the comparison used, so that the page shows the same table.
        let th = fs::read_to_string(dir.join("summary.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| serde_json::from_value::<Thresholds>(v.get("thresholds")?.clone()).ok())
            .unwrap_or_default();
        let mut runs = Vec::new();
        let mut stats = Vec::new();
        let mut unfinished = Vec::new();
        for task in &tasks {
            for rule in &rules {
                for seed in &seeds {
                    let d = grid::task_dir(dir, task).join(format!("{rule}-seed{seed}"));
                    // Only finished runs: a run cut short would be compared over fewer steps.
                    if d.join("metrics.jsonl").exists() && !d.join("summary.json").exists() {
                        unfinished.push(d.display().to_string());
                    } else if d.join("summary.json").exists() {
                        let run = RunData::load(&d)?;
                        stats.push(summary::run_stats(task, &run, &th));
                        runs.push((task.clone(), run));
                    }
                }
            }
        }
        if runs.is_empty() {
            anyhow::bail!("{}: the comparison has no finished runs yet", dir.display());
        }
        let s = summary::summarise(&tasks, &rules, &seeds, stats, th);
        Ok(Source {
            unfinished,
            is_compare: true,
            tasks,
            rules,
            runs,
            summary: s,
        })
    }

    fn runs_of<'a>(
        &'a self,
        task: &'a str,
        rule: &'a str,
    ) -> impl Iterator<Item = &'a RunData> + 'a {
        self.runs
            .iter()
            .filter(move |(t, r)| t == task && r.rule() == rule)
            .map(|(_, r)| r)
    }
}

fn run_task_spec(run: &RunData) -> String {
    let t = &run.config.task;
    format!(
        "{}:difficulty={},length={},mistake_rate={}",
        t.name, t.difficulty, t.length, t.mistake_rate
    )
}

/// What a chart reads from one run of a rule: `(step, value)` points.
type Curve<'a> = dyn Fn(&str, &RunData) -> Vec<(f64, f64)> + 'a;

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
    let reference = if src.rules.iter().any(|r| r == "ba") {
        "ba"
    } else {
        src.rules.first()?.as_str()
    };
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
fn task_charts(src: &Source, task: &str, out: &Path) -> Result<Vec<(String, PathBuf)>> {
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
    let per_rule = |key: &str| per_rule_of(&|_, r| r.series(key));
    chart(
        "reward",
        format!("Mean reward per step{band_note}"),
        "reward",
        per_rule("reward/mean"),
    )?;
    chart(
        "accuracy",
        format!("Held-out accuracy (step 0: after SFT){band_note}"),
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
        for (key, side, dash) in [
            ("len/pos_mean", "+ (A>0)", Dash::Solid),
            ("len/neg_mean", "- (A<0)", Dash::Dashed),
            ("len/mean", "all", Dash::Thin),
        ] {
            let (points, _) = over_seeds(src.runs_of(task, rule), |r| r.series(key));
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
        per_rule("len/gap"),
    )?;
    let mass: Vec<Series> = if src.is_compare {
        per_rule_of(&|rule, r| r.series(&format!("mass_ratio/{rule}")))
    } else {
        // One run: what every rule would have done with its batches.
        Rule::ALL
            .iter()
            .map(|rule| {
                let key = format!("mass_ratio/{}", rule.name());
                let (points, _) = over_seeds(src.runs.iter().map(|r| &r.1), |r| r.series(&key));
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
        per_rule("entropy/mean"),
    )?;
    chart(
        "grad-norm",
        format!("Gradient norm before clipping{band_note}"),
        "L2 norm",
        per_rule("grad/norm"),
    )?;
    chart(
        "clip-frac",
        format!("Clipped token fraction{band_note}"),
        "fraction",
        per_rule("clip/frac"),
    )?;
    Ok(drawn)
}

/// `token - seq` against each length diagnostic, one point per task.
fn study_charts(s: &Summary, out: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut drawn = Vec::new();
    for (x, x_label, file) in [
        (
            "len_cv",
            "within-group length CV (mean over steps and runs)",
            "study-cv.png",
        ),
        (
            "len_gap_rel",
            "relative ± length gap (L- − L+) / L (mean over steps and runs)",
            "study-gap.png",
        ),
    ] {
        let points: Vec<charts::Point> = s
            .contrasts
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let d = c.final_accuracy_diff.get("token-seq")?;
                let xv = if x == "len_cv" {
                    c.length.len_cv?
                } else {
                    c.length.len_gap_rel?
                };
                Some(charts::Point {
                    label: format!(" S{}", i + 1),
                    x: xv,
                    y: d.mean,
                    err: d.ci95,
                })
            })
            .collect();
        if points.len() < 2 {
            continue;
        }
        let fit = s
            .relations
            .iter()
            .find(|r| r.x == [x])
            .map(|r| (r.fit.intercept, r.fit.slopes[0], r.fit.r2));
        let title = format!(
            "Final accuracy token − seq vs {}",
            if x == "len_cv" { "length CV" } else { "± gap" }
        );
        let path = out.join(file);
        if charts::scatter(
            &path,
            &title,
            x_label,
            "token − seq (held-out accuracy)",
            &points,
            fit,
        )? {
            drawn.push((title, path));
        }
    }
    Ok(drawn)
}

pub fn run(args: Args) -> Result<ExitCode> {
    font::register(args.font.as_deref())?;
    let src = Source::load(&args.dir)?;
    let out = args.out.clone().unwrap_or_else(|| args.dir.join("report"));
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut sections: Vec<html::Section> = Vec::new();
    if src.is_compare {
        let study = study_charts(&src.summary, &out)?;
        if !study.is_empty() {
            let legend = src
                .summary
                .tasks
                .iter()
                .enumerate()
                .map(|(i, t)| format!("S{} = {t}", i + 1))
                .collect();
            sections.push(html::Section {
                heading: "token − seq against the length diagnostics".into(),
                notes: legend,
                images: study,
            });
        }
    }
    if !src.unfinished.is_empty() {
        sections.push(html::Section {
            heading: "Unfinished runs (left out)".into(),
            notes: src.unfinished.clone(),
            images: Vec::new(),
        });
    }
    for task in src
        .tasks
        .iter()
        .filter(|t| src.runs.iter().any(|(rt, _)| rt == *t))
    {
        let images = task_charts(&src, task, &out)?;
        sections.push(html::Section {
            heading: format!("Task {task}"),
            notes: Vec::new(),
            images,
        });
    }
    let table = summary::table(&src.summary);
    // The table as the page shows it (for a partly run comparison, over the finished runs).
    let md = out.join("summary.md");
    fs::write(&md, &table).with_context(|| format!("writing {}", md.display()))?;
    let page = html::page(&args.dir, &table, &sections)?;
    let index = out.join("index.html");
    fs::write(&index, page).with_context(|| format!("writing {}", index.display()))?;
    println!("{}", index.display());
    Ok(ExitCode::SUCCESS)
}
