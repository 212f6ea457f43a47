//! What a report draws: the runs of a run directory or of a comparison directory (finished
//! runs only), by task and rule, with the comparison's summary over them.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use fulcrum_train::RunData;
use serde_json::Value;

use crate::cmd::compare::grid;
use crate::results::arm::Arm;
use crate::results::summary::{self, ComparisonSummary, Thresholds};

/// The runs to draw, by task, and their summary.
pub(super) struct Source {
    /// Comparison runs started but not finished (left out of charts and table).
    pub unfinished: Vec<String>,
    /// A comparison (several rules per task) or one run.
    pub is_compare: bool,
    pub tasks: Vec<String>,
    /// The arms drawn: rules, or `rule+loss` in a comparison over losses.
    pub rules: Vec<String>,
    /// `(task, arm, run)`.
    pub runs: Vec<(String, String, RunData)>,
    pub summary: ComparisonSummary,
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
    pub fn load(dir: &Path) -> Result<Self> {
        let manifest = dir.join("compare.json");
        let kind = fulcrum_train::dir_kind(dir)
            .with_context(|| format!("{} is not a directory fulcrum wrote", dir.display()))?;
        if kind != Some(fulcrum_train::DirKind::Compare) {
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
                rules: vec![rule.clone()],
                runs: vec![(task, rule, run)],
                summary: s,
            });
        }
        let text = fs::read_to_string(&manifest)
            .with_context(|| format!("reading {}", manifest.display()))?;
        let m: Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not JSON", manifest.display()))?;
        let tasks = strings(&m, "tasks", &manifest)?;
        let rules = strings(&m, "rules", &manifest)?;
        // A comparison over losses (`--losses`): every rule under every loss.
        let losses = match m.get("losses") {
            None => Vec::new(),
            Some(_) => strings(&m, "losses", &manifest)?,
        };
        let losses: Vec<Option<&str>> = if losses.is_empty() {
            vec![None]
        } else {
            losses.iter().map(|l| Some(l.as_str())).collect()
        };
        let arms: Vec<Arm<'_>> = losses
            .iter()
            .flat_map(|&loss| rules.iter().map(move |rule| Arm { rule, loss }))
            .collect();
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
            for arm in &arms {
                for seed in &seeds {
                    let d = grid::task_dir(dir, task).join(arm.run_dir_name(*seed));
                    // Only finished runs: a run cut short would be compared over fewer steps.
                    if d.join("metrics.jsonl").exists() && !d.join("summary.json").exists() {
                        unfinished.push(d.display().to_string());
                    } else if d.join("summary.json").exists() {
                        let run = RunData::load(&d)
                            .with_context(|| format!("reading the run {}", d.display()))?;
                        let mut st = summary::run_stats(task, &run, &th);
                        st.rule = arm.label();
                        stats.push(st);
                        runs.push((task.clone(), arm.label(), run));
                    }
                }
            }
        }
        if runs.is_empty() {
            anyhow::bail!("{}: the comparison has no finished runs yet", dir.display());
        }
        let rules: Vec<String> = arms.iter().map(Arm::label).collect();
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

    pub fn runs_of<'a>(
        &'a self,
        task: &'a str,
        rule: &'a str,
    ) -> impl Iterator<Item = &'a RunData> + 'a {
        self.runs
            .iter()
            .filter(move |(t, arm, _)| t == task && arm == rule)
            .map(|(_, _, r)| r)
    }
}

fn run_task_spec(run: &RunData) -> String {
    let t = &run.config.task;
    format!(
        "{}:difficulty={},length={},mistake_rate={}",
        t.name, t.difficulty, t.length, t.mistake_rate
    )
}
