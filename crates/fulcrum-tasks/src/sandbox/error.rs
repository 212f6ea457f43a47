//! Why a program could not be run at all: the sandbox itself did not start (not a failure of
//! the program inside it, which is a [`super::RunOutput`]).

use std::path::PathBuf;

/// The sandbox could not start a program.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A step of the sandbox's setup failed (a seccomp filter, a Landlock ruleset, a mount
    /// plan, a process it could not start).
    #[error("sandbox: {0}")]
    Setup(String),
    /// A file or directory of the run could not be made or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl StartError {
    /// Shorthand for an I/O error on a path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StartError::Io {
            path: path.into(),
            source,
        }
    }
}
