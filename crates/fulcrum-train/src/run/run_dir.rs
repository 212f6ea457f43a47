//! The run directory: where a new run goes, the files only rank 0 writes in it (the streams,
//! the evaluations, `summary.json`), and [`RunSummary`], the end of a run.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::config::Config;
use crate::error::TrainError;
use crate::eval::EvalResult;
use crate::metrics::{truncate_after, JsonlWriter};

/// The end of a run (`summary.json`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunSummary {
    pub run_dir: PathBuf,
    pub rule: String,
    /// The policy loss (`ppo.loss`); runs from before it existed read as `ppo`.
    #[serde(default = "default_loss")]
    pub loss: String,
    pub seed: u64,
    pub sft_accuracy: Option<f64>,
    pub final_accuracy: f64,
    pub steps: u64,
    pub wall_seconds: f64,
    pub sample_tokens_per_s: f64,
}

fn default_loss() -> String {
    fulcrum_core::PolicyLoss::Ppo.name().to_string()
}

/// The step-keyed streams of a run directory, each cut back to a checkpoint on resume.
const STREAMS: [&str; 3] = ["metrics.jsonl", "samples.jsonl", "eval.jsonl"];

/// The streams a process writes: all of them on rank 0, none on the other ranks of a job.
pub fn owned_streams(is_main: bool) -> &'static [&'static str] {
    if is_main {
        &STREAMS
    } else {
        &[]
    }
}

/// Removes the streams `owned` of `dir` (a run that starts again from step 0).
pub fn remove_streams(dir: &Path, owned: &[&str]) -> Result<(), TrainError> {
    for f in owned {
        let p = dir.join(f);
        if p.exists() {
            fs::remove_file(&p).map_err(TrainError::io(&p))?;
        }
    }
    Ok(())
}

/// Cuts the streams `owned` of `dir` back to step `step` (what a resume from that step's
/// checkpoint continues); a torn last line is dropped, and said.
pub fn cut_streams(dir: &Path, owned: &[&str], step: u64) -> Result<(), TrainError> {
    for f in owned {
        let path = dir.join(f);
        let torn = truncate_after(&path, "step", step)?;
        if torn > 0 {
            // A write cut short (a crash, a full disk): repaired, and said.
            eprintln!(
                "fulcrum: {}: dropped {torn} unfinished line(s) left by an interrupted write",
                path.display()
            );
        }
    }
    Ok(())
}

/// Appends one evaluation to `dir/eval.jsonl`: the result at `step` (with its `phase` when it is
/// not a training step), without the wall-clock rate, which is not reproducible.
pub fn record_eval(
    dir: &Path,
    step: u64,
    phase: Option<&str>,
    result: &EvalResult,
) -> Result<(), TrainError> {
    let mut rec = serde_json::to_value(result).map_err(|source| TrainError::Encode {
        what: format!("the evaluation at step {step}"),
        source,
    })?;
    rec["step"] = json!(step);
    if let Some(p) = phase {
        rec["phase"] = json!(p);
    }
    if let Some(o) = rec.as_object_mut() {
        o.remove("tokens_per_s");
    }
    JsonlWriter::append(&dir.join("eval.jsonl"))?.write(&rec)
}

/// Writes `summary.json` into `dir`.
pub fn write_summary(dir: &Path, summary: &RunSummary) -> Result<(), TrainError> {
    let path = dir.join("summary.json");
    let text = serde_json::to_string_pretty(summary).map_err(|source| TrainError::Encode {
        what: "summary.json".into(),
        source,
    })?;
    fs::write(&path, text + "\n").map_err(TrainError::io(&path))
}

/// The first free run directory: `runs/<name>`, then `runs/<name>-2`, ... (an explicit
/// `run_dir` is used as given and must not already hold a run).
pub fn choose_run_dir(cfg: &Config) -> Result<PathBuf, TrainError> {
    if let Some(d) = &cfg.run_dir {
        if d.join("metrics.jsonl").exists() {
            return Err(TrainError::RunDirInUse { dir: d.clone() });
        }
        return Ok(d.clone());
    }
    let base = Path::new("runs").join(&cfg.run_name);
    let mut k = 1;
    loop {
        let d = if k == 1 {
            base.clone()
        } else {
            PathBuf::from(format!("{}-{k}", base.display()))
        };
        if !d.exists() {
            return Ok(d);
        }
        k += 1;
    }
}
