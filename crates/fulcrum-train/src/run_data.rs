//! Reading a run directory back, typed: its resolved config, every step's [`StepMetrics`], the
//! held-out evaluations and the summary. `compare` and `report` read runs through this; nothing
//! is computed here beyond picking values out of the files.

use std::fs;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::config::Config;
use crate::error::TrainError;
use crate::metrics::StepMetrics;
use crate::run::RunSummary;

/// A run directory's files, parsed.
pub struct RunData {
    pub dir: PathBuf,
    pub config: Config,
    /// `metrics.jsonl`, one line per step, in step order.
    pub steps: Vec<StepMetrics>,
    /// `(step, held-out accuracy)`, step 0 being the SFT warm-up when there is one.
    pub evals: Vec<(u64, f64)>,
    /// Every line of `eval.jsonl` with the measures besides avg@k (absent in older runs and in
    /// the warm-up's line).
    pub eval_points: Vec<EvalPoint>,
    /// `summary.json` when the run finished.
    pub summary: Option<RunSummary>,
}

/// One line of `eval.jsonl`, as far as a run's reader needs it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct EvalPoint {
    pub step: u64,
    /// avg@k.
    pub accuracy: f64,
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub pass_at_k: Option<f64>,
    #[serde(default)]
    pub truncated: Option<f64>,
    #[serde(default)]
    pub greedy_accuracy: Option<f64>,
    #[serde(default)]
    pub greedy_truncated: Option<f64>,
}

/// Every non-blank line of a JSONL file (none if it does not exist); a bad line is an error
/// naming the file and line.
fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, TrainError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = fs::read_to_string(path).map_err(TrainError::io(path))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(line).map_err(|e| TrainError::RunFile {
            path: path.to_path_buf(),
            line: i + 1,
            message: e.to_string(),
        })?);
    }
    Ok(out)
}

impl RunData {
    /// Reads `dir`, which must hold a `config.toml`.
    pub fn load(dir: &Path) -> Result<Self, TrainError> {
        let cfg_path = dir.join("config.toml");
        if !cfg_path.is_file() {
            return Err(TrainError::NotARunDir {
                dir: dir.to_path_buf(),
                why: "it has no config.toml",
            });
        }
        let config = Config::load(Some(&cfg_path), &[])?;
        let steps = read_jsonl(&dir.join("metrics.jsonl"))?;
        let eval_points = read_jsonl::<EvalPoint>(&dir.join("eval.jsonl"))?;
        let evals = eval_points.iter().map(|e| (e.step, e.accuracy)).collect();
        let sp = dir.join("summary.json");
        let summary = if sp.exists() {
            let text = fs::read_to_string(&sp).map_err(TrainError::io(&sp))?;
            Some(
                serde_json::from_str(&text).map_err(|e| TrainError::RunFile {
                    path: sp.clone(),
                    line: e.line(),
                    message: e.to_string(),
                })?,
            )
        } else {
            None
        };
        Ok(RunData {
            dir: dir.to_path_buf(),
            config,
            steps,
            evals,
            eval_points,
            summary,
        })
    }

    /// The rule's spec name (`token`, `ba`, ...).
    pub fn rule(&self) -> &'static str {
        self.config.rule.name()
    }

    /// `(step, value)` for every step where `value` gives a finite number.
    pub fn series(&self, value: impl Fn(&StepMetrics) -> Option<f64>) -> Vec<(f64, f64)> {
        self.steps
            .iter()
            .filter_map(|m| {
                let v = value(m)?;
                v.is_finite().then_some((m.step as f64, v))
            })
            .collect()
    }

    /// The finite values alone.
    pub fn values(&self, value: impl Fn(&StepMetrics) -> Option<f64>) -> Vec<f64> {
        self.series(value).into_iter().map(|(_, v)| v).collect()
    }

    /// Steps whose update was skipped (non-finite loss or gradient).
    pub fn skipped_steps(&self) -> usize {
        self.steps.iter().filter(|m| m.skipped).count()
    }

    /// The held-out accuracy after RL: the last evaluation after step 0.
    pub fn final_accuracy(&self) -> Option<f64> {
        self.evals.iter().rev().find(|(s, _)| *s > 0).map(|e| e.1)
    }

    /// The last evaluation after step 0, every measure of it.
    pub fn final_eval(&self) -> Option<&EvalPoint> {
        self.eval_points.iter().rev().find(|e| e.step > 0)
    }

    /// The held-out accuracy of the warm-up (step 0), when there was one.
    pub fn sft_accuracy(&self) -> Option<f64> {
        self.evals.iter().find(|(s, _)| *s == 0).map(|e| e.1)
    }
}
