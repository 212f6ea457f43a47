//! The error type of fulcrum-train: what failed, where (file, key, line), and why.
//!
//! Failures of the layers below (the model, a task, the core maths) are wrapped whole, not
//! flattened to strings, so that `{:#}` at the CLI shows the full chain with every cause.

use std::path::PathBuf;

use thiserror::Error;

/// Everything in a config, a run directory or a checkpoint that can be wrong.
#[derive(Debug, Error)]
pub enum TrainError {
    /// A config file that is not valid TOML (`toml` names line and column).
    #[error("{file}: {message}")]
    ConfigSyntax { file: String, message: String },
    /// A key that is unknown, of the wrong type or out of range.
    #[error("{file}: {key}: {message}")]
    ConfigKey {
        file: String,
        key: String,
        message: String,
    },
    /// A `--set key=value` that is not of that form.
    #[error("--set {given:?}: {message}")]
    BadOverride { given: String, message: String },
    /// A checkpoint that is missing, truncated, corrupt or of another format.
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    /// A run-directory file (`metrics.jsonl`, `eval.jsonl`, `summary.json`) that is unusable.
    #[error("{path}:{line}: {message}")]
    RunFile {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The model failed (loading, sampling, a tensor op).
    #[error(transparent)]
    Model(#[from] fulcrum_model::ModelError),
    /// A task or dataset failed (bad record, unknown task, unreadable file, sandbox).
    #[error(transparent)]
    Task(#[from] fulcrum_tasks::TaskError),
    /// The step's numbers were refused by the core maths (lengths, non-finite values).
    #[error(transparent)]
    Core(#[from] fulcrum_core::CoreError),
    /// The rollout engines failed (none left, a request they refused, a weight push).
    #[error(transparent)]
    Engine(#[from] fulcrum_rollout::EngineError),
    /// A collective of a data-parallel job failed (a rank died, hung past `dist.timeout_s`, or
    /// could not join).
    #[error(transparent)]
    Dist(#[from] fulcrum_dist::DistError),
    /// The launcher's environment (`RANK`, `WORLD_SIZE`, ...) is malformed.
    #[error(transparent)]
    Launch(#[from] fulcrum_dist::LaunchError),
    /// A problem of the run itself (a prompt too long, a task without demonstrations, a run
    /// directory already in use).
    #[error("{0}")]
    Run(String),
    /// Stopped by SIGINT or SIGTERM after `step` (the checkpoint of that step is written).
    #[error("interrupted after {phase} step {step}: {hint}")]
    Interrupted {
        phase: &'static str,
        step: u64,
        hint: String,
    },
    /// A resume that would not continue the same run: the config or the binary differs from
    /// the checkpoint's (`--force` resumes anyway).
    #[error("{path}: {message}\n(resume with --force to continue anyway)")]
    ResumeMismatch { path: PathBuf, message: String },
    /// Any other I/O failure, with the path it concerned.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl TrainError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TrainError {
        let path = path.into();
        move |source| TrainError::Io { path, source }
    }
}
