//! The one error type of `fulcrum-tasks`.
//!
//! Every variant names where the problem is: the file, the line (or parquet row) and the field,
//! so that `fulcrum` can print `path:line: field: problem` as the style brief asks. A verifier
//! failure is *not* an error: it is a zero reward with a reason (see `Score`).

use std::path::PathBuf;

/// Everything that can go wrong while building tasks, reading datasets or running the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    // --- reading files ---
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// One record of a dataset is unusable (bad JSON, missing or empty field, wrong type).
    #[error("{path}:{line}: {field}: {problem}")]
    Record {
        path: PathBuf,
        /// 1-based line of a JSONL file, element index (1-based) of a JSON array, or parquet row.
        line: usize,
        field: String,
        problem: String,
    },
    /// The whole file is unusable (not JSON, not parquet, wrong schema).
    #[error("{path}: {problem}")]
    Format { path: PathBuf, problem: String },

    // --- names and settings ---
    /// A name that is not one of a closed set (task, family, verifier, format, reward mode),
    /// with every valid name and the nearest one (from fulcrum-core's names).
    #[error(transparent)]
    Core(#[from] fulcrum_core::CoreError),
    /// A task setting that is out of range or malformed.
    #[error("task setting {key}: {problem}")]
    Setting { key: String, problem: String },

    // --- sandbox ---
    /// The sandbox itself could not start (not a failure of the program inside it).
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::StartError),
    /// No sandbox that contains programs works here, or the one asked for does not.
    #[error(transparent)]
    SandboxChoice(#[from] crate::sandbox::SandboxError),
}

/// Result alias for this crate.
pub type Result<T, E = TaskError> = std::result::Result<T, E>;

impl TaskError {
    /// Shorthand for a record error.
    pub fn record(
        path: impl Into<PathBuf>,
        line: usize,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        TaskError::Record {
            path: path.into(),
            line,
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// Shorthand for an I/O error on a path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TaskError::Io {
            path: path.into(),
            source,
        }
    }
}
