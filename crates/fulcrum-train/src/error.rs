//! The error type of fulcrum-train: what failed, where (file, key, line), and why.

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
    /// The model failed (loading, sampling, a tensor op).
    #[error("{0}")]
    Model(String),
    /// A task or dataset problem (bad prompt, unknown task, unreadable file).
    #[error("{0}")]
    Data(String),
    /// Any other I/O failure, with the path it concerned.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl TrainError {
    pub(crate) fn model(e: impl std::fmt::Display) -> TrainError {
        TrainError::Model(e.to_string())
    }

    pub(crate) fn data(e: impl std::fmt::Display) -> TrainError {
        TrainError::Data(e.to_string())
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TrainError {
        let path = path.into();
        move |source| TrainError::Io { path, source }
    }
}
