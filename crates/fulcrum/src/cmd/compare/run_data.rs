//! One finished (or partly finished) run directory as `compare` and `report` read it: its resolved
//! config, the per-step metrics and the held-out evaluations. Nothing is computed here beyond
//! picking values out of the files.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use fulcrum_train::Config;
use serde_json::{Map, Value};

/// A run directory's files, parsed.
pub struct RunData {
    pub dir: PathBuf,
    pub config: Config,
    /// `metrics.jsonl`, one object per step, in step order.
    pub steps: Vec<Map<String, Value>>,
    /// `(step, held-out accuracy)`, step 0 being the SFT warm-up when there is one.
    pub evals: Vec<(u64, f64)>,
    /// `summary.json` when the run finished.
    pub summary: Option<Value>,
}

fn read_jsonl(path: &Path) -> Result<Vec<Map<String, Value>>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        match v {
            Value::Object(m) => out.push(m),
            _ => bail!("{}:{}: not a JSON object", path.display(), i + 1),
        }
    }
    Ok(out)
}

impl RunData {
    /// Reads `dir` (which must hold a `config.toml`).
    pub fn load(dir: &Path) -> Result<Self> {
        let cfg_path = dir.join("config.toml");
        if !cfg_path.is_file() {
            bail!(
                "{} is not a run directory: it has no config.toml",
                dir.display()
            );
        }
        let config = Config::load(Some(&cfg_path), &[])
            .with_context(|| format!("{}: reading the run's config", dir.display()))?;
        let steps = read_jsonl(&dir.join("metrics.jsonl"))?;
        let eval_path = dir.join("eval.jsonl");
        let mut evals = Vec::new();
        for (i, m) in read_jsonl(&eval_path)?.iter().enumerate() {
            let field = |k: &str| {
                m.get(k).and_then(Value::as_f64).with_context(|| {
                    format!(
                        "{}:{}: {k}: missing or not a number",
                        eval_path.display(),
                        i + 1
                    )
                })
            };
            evals.push((field("step")? as u64, field("accuracy")?));
        }
        let sp = dir.join("summary.json");
        let summary = if sp.exists() {
            let text =
                fs::read_to_string(&sp).with_context(|| format!("reading {}", sp.display()))?;
            Some(
                serde_json::from_str(&text)
                    .with_context(|| format!("{}: not JSON", sp.display()))?,
            )
        } else {
            None
        };
        Ok(RunData {
            dir: dir.to_path_buf(),
            config,
            steps,
            evals,
            summary,
        })
    }

    /// The rule's spec name (`token`, `ba`, ...).
    pub fn rule(&self) -> &'static str {
        self.config.rule.name()
    }

    /// `(step, value)` for every step where `key` is a finite number (JSON `null` is skipped).
    pub fn series(&self, key: &str) -> Vec<(f64, f64)> {
        self.steps
            .iter()
            .filter_map(|m| {
                let step = m.get("step").and_then(Value::as_f64)?;
                let v = m.get(key).and_then(Value::as_f64)?;
                v.is_finite().then_some((step, v))
            })
            .collect()
    }

    /// The values of `key` alone (finite ones).
    pub fn values(&self, key: &str) -> Vec<f64> {
        self.series(key).into_iter().map(|(_, v)| v).collect()
    }

    /// Steps whose update was skipped (non-finite loss or gradient).
    pub fn skipped_steps(&self) -> usize {
        self.steps
            .iter()
            .filter(|m| m.get("skipped").and_then(Value::as_bool) == Some(true))
            .count()
    }

    /// The held-out accuracy after RL: the last evaluation after step 0.
    pub fn final_accuracy(&self) -> Option<f64> {
        self.evals.iter().rev().find(|(s, _)| *s > 0).map(|e| e.1)
    }

    /// The held-out accuracy of the warm-up (step 0), when there was one.
    pub fn sft_accuracy(&self) -> Option<f64> {
        self.evals.iter().find(|(s, _)| *s == 0).map(|e| e.1)
    }
}
