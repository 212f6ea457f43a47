//! The one error type of `fulcrum-model`.
//!
//! Each variant names what failed (file, tensor, field) and, where it applies, what was expected
//! and what was found, so that a message read at the command line is enough to act on.

use std::path::PathBuf;

/// Everything that can go wrong while building, loading, running or saving a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    // --- files -------------------------------------------------------------------------------
    /// A file could not be read or written.
    // The cause is part of the message, not a `source`, so that a cause chain does not
    // print it twice.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A JSON file (config.json, tokenizer_config.json, ...) did not parse.
    #[error("{path}: {message}")]
    Json { path: PathBuf, message: String },
    /// A field of a config file is missing or has an unsupported value.
    #[error("{path}: field `{field}`: {message}")]
    Config {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// A GGUF file could not be read or lacks something we need.
    #[error("{path}: gguf: {message}")]
    Gguf { path: PathBuf, message: String },

    // --- weights -----------------------------------------------------------------------------
    /// A tensor the model needs is not in the weight files.
    #[error("{path}: missing tensor `{name}`")]
    MissingTensor { path: PathBuf, name: String },
    /// A tensor in the weight files is not used by the model (and not on the ignore list).
    #[error("{path}: unexpected tensor `{name}` (not a parameter of this model)")]
    UnusedTensor { path: PathBuf, name: String },
    /// A tensor has the wrong shape.
    #[error("{path}: tensor `{name}`: expected shape {expected:?}, got {got:?}")]
    Shape {
        path: PathBuf,
        name: String,
        expected: Vec<i64>,
        got: Vec<i64>,
    },

    // --- tokenizer and chat template -----------------------------------------------------------
    /// The tokenizer failed to load, encode or decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The model's chat template is missing or is not one fulcrum can render.
    #[error("chat template: {0}")]
    ChatTemplate(String),

    // --- running -------------------------------------------------------------------------------
    /// A request to the model is inconsistent (empty prompt, too long, bad sampling settings).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The model's logits are NaN or infinite (a diverged update, an overflow): nothing can be
    /// sampled from them.
    #[error(
        "the model produced non-finite logits while sampling (a diverged update or an overflow)"
    )]
    NonFiniteLogits,
    /// The requested device is not available.
    #[error("device `{requested}`: {message}")]
    Device { requested: String, message: String },
    /// A libtorch operation failed.
    #[error("libtorch: {context}: {error}")]
    Torch {
        context: String,
        error: tch::TchError,
    },
}

/// `Result` with [`ModelError`].
pub type Result<T> = std::result::Result<T, ModelError>;

impl ModelError {
    pub(crate) fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        ModelError::Io {
            path: path.into(),
            error,
        }
    }
}

/// Attach a context string to a fallible libtorch call.
pub(crate) trait TorchContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> TorchContext<T> for std::result::Result<T, tch::TchError> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|error| ModelError::Torch {
            context: context(),
            error,
        })
    }
}
