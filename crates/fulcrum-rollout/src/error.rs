//! What can go wrong talking to an engine, split by what the pool does about it: a transient
//! failure (unreachable, timed out, a 5xx, a reply that does not parse) moves the request to
//! another engine; a rejection (4xx: the request itself is wrong, e.g. a prompt past the
//! engine's context) fails the step with the engine's own message, since no engine would take it.
//! An interrupt (the pool's [`crate::Cancel`], the trainer's SIGINT/SIGTERM flag) ends the wait
//! with [`EngineError::Interrupted`], which is neither: the caller stops.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error("{url}: cannot connect: {cause}")]
    Unreachable { url: String, cause: String },
    #[error("{url}: no answer within {secs} s")]
    Timeout { url: String, secs: f64 },
    #[error("{url}: HTTP {status}: {message}")]
    Server {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url}: the engine refused the request (HTTP {status}): {message}")]
    Rejected {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url}: unexpected reply: {what}")]
    Malformed { url: String, what: String },
    #[error("{url}: {what}")]
    Unsupported { url: String, what: String },
    #[error("no rollout engine is left: {0}")]
    NoEngineLeft(String),
    #[error("{0}")]
    Config(String),
    /// The wait was given up because a stop was asked for (the pool's cancel), not because
    /// anything failed; the request may still be running on the engine.
    #[error("stopped while waiting on {waiting_on}")]
    Interrupted { waiting_on: String },
}

impl EngineError {
    /// Whether another engine (or a later try) may succeed where this failed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            EngineError::Unreachable { .. }
                | EngineError::Timeout { .. }
                | EngineError::Server { .. }
                | EngineError::Malformed { .. }
        )
    }
}

pub type Result<T> = std::result::Result<T, EngineError>;
