//! The run directory: where a new run goes, the files only rank 0 writes in it (the streams,
//! the evaluations, `summary.json`), and [`RunSummary`], the end of a run.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::config::Config;
use crate::error::TrainError;
use crate::eval::EvalResult;
use crate::metrics::{truncate_after, JsonlWriter};
use crate::owned_dir::{DirKind, OwnedDir};

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
/// not a training step), without the wall-clock rate, which is not reproducible. Returns the
/// record written.
pub fn record_eval(
    dir: &Path,
    step: u64,
    phase: Option<&str>,
    result: &EvalResult,
) -> Result<Value, TrainError> {
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
    JsonlWriter::append(&dir.join("eval.jsonl"))?.write(&rec)?;
    Ok(rec)
}

/// Whether `dir/eval.jsonl` records the held-out evaluation of training step `step`.
pub fn has_eval(dir: &Path, step: u64) -> Result<bool, TrainError> {
    let path = dir.join("eval.jsonl");
    let text = match fs::read_to_string(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(TrainError::io(&path)(e)),
        Ok(t) => t,
    };
    Ok(text.lines().any(|l| {
        serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| {
            v.get("step").and_then(serde_json::Value::as_u64) == Some(step)
                && v.get("phase").is_none()
        })
    }))
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
/// `run_dir` is used as given and must not already hold a run). Nothing is created: see
/// [`claim_run_dir`].
pub fn choose_run_dir(cfg: &Config) -> Result<PathBuf, TrainError> {
    if let Some(d) = &cfg.run_dir {
        if d.join("metrics.jsonl").exists() {
            return Err(TrainError::RunDirInUse { dir: d.clone() });
        }
        return Ok(d.clone());
    }
    let base = runs_dir(cfg)?;
    let mut k = 1;
    loop {
        let d = numbered(&base, k);
        if !d.exists() {
            return Ok(d);
        }
        k += 1;
    }
}

/// The directory of a new run, created and held by this process: `run_dir` when given (refused
/// when it holds a run, is of another kind, or another process holds it), else the first free
/// `runs/<name>[-N]`, taken atomically (two runs started together get two directories).
pub fn claim_run_dir(cfg: &Config) -> Result<OwnedDir, TrainError> {
    if let Some(d) = &cfg.run_dir {
        let hold = OwnedDir::claim(d, DirKind::Run)?;
        // Checked under the lock: a run started beside this one has written its first step.
        if d.join("metrics.jsonl").exists() {
            return Err(TrainError::RunDirInUse { dir: d.clone() });
        }
        return Ok(hold);
    }
    let base = runs_dir(cfg)?;
    if let Some(parent) = base.parent() {
        fs::create_dir_all(parent).map_err(TrainError::io(parent))?;
    }
    let mut k = 1;
    loop {
        let d = numbered(&base, k);
        // `create_dir` fails when the name is taken, so of two runs only one gets it.
        match fs::create_dir(&d) {
            Ok(()) => return OwnedDir::claim(&d, DirKind::Run),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => k += 1,
            Err(e) => return Err(TrainError::io(&d)(e)),
        }
    }
}

/// `runs/<run_name>`; a name that is empty or leaves `runs/` (a path, `..`) is refused.
fn runs_dir(cfg: &Config) -> Result<PathBuf, TrainError> {
    let name = cfg.run_name.as_str();
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && name.trim() == name;
    if !plain {
        return Err(TrainError::ConfigKey {
            file: "(config)".into(),
            key: "run_name".into(),
            message: format!(
                "{name:?} is not a plain name: runs go to runs/<run_name>, so it must be \
                 non-empty, without '/', and not '.' or '..' (use --run-dir for another place)"
            ),
        });
    }
    Ok(Path::new("runs").join(name))
}

/// `base`, then `base-2`, `base-3`, ...
fn numbered(base: &Path, k: u64) -> PathBuf {
    if k == 1 {
        base.to_path_buf()
    } else {
        PathBuf::from(format!("{}-{k}", base.display()))
    }
}

/// The steps recorded in `dir/metrics.jsonl` (complete lines; 0 when there is none).
pub fn recorded_steps(dir: &Path) -> Result<u64, TrainError> {
    let path = dir.join("metrics.jsonl");
    match fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(TrainError::io(&path)(e)),
        Ok(bytes) => Ok(bytes.iter().filter(|&&b| b == b'\n').count() as u64),
    }
}

/// Refuses a resume from the checkpoint of step `step` unless `dir/metrics.jsonl` records
/// every step up to it: a deleted or damaged file is never silently replaced. A last line cut
/// short by a crash is fine (the resume drops it); a line that is not JSON before the end is
/// damage, named by its line.
pub fn check_records(dir: &Path, step: u64) -> Result<(), TrainError> {
    if step == 0 {
        return Ok(());
    }
    let path = dir.join("metrics.jsonl");
    let lost = |why: String| TrainError::RecordsLost {
        path: path.clone(),
        step,
        why,
    };
    let bytes = match fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(lost("the file is missing".into()))
        }
        Err(e) => return Err(TrainError::io(&path)(e)),
        Ok(b) => b,
    };
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let mut seen = std::collections::BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        let last = i + 1 == lines.len() || (i + 2 == lines.len() && lines[i + 1].is_empty());
        if line.is_empty() && i + 1 == lines.len() {
            continue;
        }
        match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(v) => {
                if let Some(s) = v.get("step").and_then(serde_json::Value::as_u64) {
                    seen.insert(s);
                }
            }
            // A torn last line: the resume drops it.
            Err(_) if last => {}
            Err(e) => {
                return Err(TrainError::RunFile {
                    path: path.clone(),
                    line: i + 1,
                    message: format!(
                        "not a metrics record ({e}): the file is damaged; restore it, or \
                         `fulcrum train --resume {} --restart` starts the run again from step 0",
                        dir.display()
                    ),
                })
            }
        }
    }
    match (1..=step).find(|s| !seen.contains(s)) {
        None => Ok(()),
        Some(missing) => Err(lost(format!(
            "it has no record of step {missing} (it records {} steps)",
            seen.len()
        ))),
    }
}

/// Removes everything a run wrote into `dir` but its config, marker and lock (`--restart`):
/// the streams, `summary.json` and the checkpoints.
pub fn discard_run(dir: &Path) -> Result<(), TrainError> {
    remove_streams(dir, &STREAMS)?;
    let summary = dir.join("summary.json");
    if summary.exists() {
        fs::remove_file(&summary).map_err(TrainError::io(&summary))?;
    }
    let ckpts = dir.join("checkpoints");
    if ckpts.exists() {
        fs::remove_dir_all(&ckpts).map_err(TrainError::io(&ckpts))?;
    }
    Ok(())
}
