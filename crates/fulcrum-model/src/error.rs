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
    /// A checkpoint folder (one with a `manifest.json`) whose files do not match their
    /// manifest: missing, truncated, corrupt, unlisted, or of another format version.
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
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
    /// A hyper-parameter of a model (a field of `config.json`, a GGUF metadata key) that is
    /// missing, of the wrong type, out of range or inconsistent with another: found before
    /// any tensor is made.
    #[error("{path}: field `{field}`: {problem}")]
    HyperParameter {
        path: PathBuf,
        field: String,
        problem: HyperProblem,
    },
    /// A hyper-parameter that the weight files contradict (an embedding with other rows than
    /// the vocabulary, fewer layers than the config counts): found from the files' headers,
    /// before any tensor is read.
    #[error("{config}: field `{field}` = {value}, but {weights} {found}")]
    WeightsDisagree {
        config: PathBuf,
        field: String,
        value: i64,
        weights: PathBuf,
        found: String,
    },
    /// A safetensors file whose header is malformed or names data outside the file.
    #[error("{path}: safetensors header: {message}")]
    Header { path: PathBuf, message: String },

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

/// What is wrong with one hyper-parameter ([`ModelError::HyperParameter`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HyperProblem {
    /// A required field is absent.
    #[error("is missing")]
    Missing,
    /// The value is not of the field's type (a string, a fraction where an integer belongs).
    #[error("expected {expected}, got {got}")]
    WrongType { expected: &'static str, got: String },
    /// Below the smallest meaningful value (zero heads, a negative size).
    #[error("must be at least {min}, got {value}")]
    TooSmall { value: String, min: String },
    /// Above the bound of [`crate::limits::model`]: no real model comes near it.
    #[error("{value} is more than {limit}, the most fulcrum accepts ({why})")]
    TooLarge {
        value: String,
        limit: String,
        why: &'static str,
    },
    /// A float that must be finite and positive is not (`rope_theta`, `rms_norm_eps`).
    #[error("must be finite and > 0, got {value}")]
    NotPositiveFinite { value: String },
    /// The value does not fit the others (kv heads that do not divide the heads, ...).
    #[error("{0}")]
    Inconsistent(String),
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
