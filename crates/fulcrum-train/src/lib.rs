//! fulcrum-train: the GRPO trainer around `fulcrum-core`.
//!
//! - [`config`]: the one `Config` (TOML, every key documented, unknown keys an error, `--set`
//!   overrides), validated data with no I/O beyond reading the file;
//! - [`checkpoint`]: checkpoint directories written to a temporary name and renamed, with a
//!   manifest of sha256 checksums, refused when truncated or corrupt;
//! - [`metrics`]: the run directory's JSONL streams (`metrics.jsonl`, `samples.jsonl`,
//!   `eval.jsonl`), appended line by line and cut back to a checkpoint on resume.

pub mod checkpoint;
pub mod config;
mod error;
pub mod metrics;

pub use config::Config;
pub use error::TrainError;
pub mod data;
pub mod eval;
pub mod minibatch;
pub mod packing;
pub mod rollout;
pub mod run;
pub mod sft;
pub mod step;
