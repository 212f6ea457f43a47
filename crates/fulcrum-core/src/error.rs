//! The one error type of fulcrum-core: what was wrong, where (field and index), and the value.

use thiserror::Error;

/// Everything that can be wrong with the inputs of the core functions. Nothing in this crate
/// panics on bad input; it returns one of these.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CoreError {
    /// Two inputs that must describe the same responses have different lengths.
    #[error("{field}: expected {expected} entries (one per response), got {got}")]
    LengthMismatch {
        field: &'static str,
        expected: usize,
        got: usize,
    },
    /// A reward, advantage or log-probability is NaN or infinite.
    #[error("{field}[{index}]: value {value} is not finite")]
    NonFinite {
        field: &'static str,
        index: usize,
        value: f64,
    },
    /// A response length below zero.
    #[error("lengths[{index}]: negative length {value}")]
    NegativeLength { index: usize, value: i64 },
    /// A setting out of its range (for example `l_norm <= 0` or `eps_low >= 1`).
    #[error("{name}: {why}")]
    InvalidParam { name: &'static str, why: String },
    /// A name (rule, estimator, BA count) that is not one of the spec's.
    #[error("unknown {kind} \"{got}\"\nvalid {kind}s: {valid}{}", suggestion.as_ref().map(|s| format!(" (did you mean {s}?)")).unwrap_or_default())]
    UnknownName {
        kind: &'static str,
        got: String,
        valid: String,
        suggestion: Option<String>,
    },
}

pub(crate) fn check_len(field: &'static str, expected: usize, got: usize) -> Result<(), CoreError> {
    if expected == got {
        Ok(())
    } else {
        Err(CoreError::LengthMismatch {
            field,
            expected,
            got,
        })
    }
}

pub(crate) fn check_finite(field: &'static str, values: &[f64]) -> Result<(), CoreError> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(index) => Err(CoreError::NonFinite {
            field,
            index,
            value: values[index],
        }),
    }
}

pub(crate) fn check_lengths(lengths: &[i64]) -> Result<(), CoreError> {
    match lengths.iter().position(|l| *l < 0) {
        None => Ok(()),
        Some(index) => Err(CoreError::NegativeLength {
            index,
            value: lengths[index],
        }),
    }
}
