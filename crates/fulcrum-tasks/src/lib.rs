//! `fulcrum-tasks`: everything that turns a prompt and a response into a reward, and everything
//! that reads the prompts people train and evaluate on.
//!
//! - [`task`]: the [`Task`] trait ([`Task::examples`], [`Task::score`]), [`TaskConfig`] and
//!   [`create_task`], which builds a task by name (a synthetic family, `jsonl`, or a benchmark).
//! - [`synthetic`]: four generated families for the CPU lab, deterministic by seed, with
//!   difficulty, length and mistake-rate knobs; [`vocab`] is their character vocabulary.
//! - [`math`]: the math answer checker (extraction, normalisation, equivalence).
//! - [`code`]: Python code extraction and the sandboxed runner (bubblewrap or rlimits-only).
//! - [`verify`]: the verifiers (`math`, `exact`, `code`) and reward modes behind one function.
//! - [`data`]: dataset readers (JSONL, JSONL.gz, JSON arrays, parquet), deduplication, the
//!   benchmark registry.
//!
//! ```
//! use fulcrum_tasks::{create_task, Split, TaskConfig};
//! let task = create_task(&"arithmetic:difficulty=2".parse::<TaskConfig>()?)?;
//! let ex = &task.examples(Split::Train, 0, 1)?[0];
//! let score = task.score(ex, &format!("Answer: {}", ex.answer));
//! assert_eq!(score.reward, 1.0);
//! # Ok::<(), fulcrum_tasks::TaskError>(())
//! ```

pub mod code;
pub mod data;
pub mod error;
pub mod jsonl_task;
pub mod math;
pub mod rng;
pub mod score_file;
pub mod synthetic;
pub mod task;
pub mod verify;
pub mod vocab;

pub use error::{Result, TaskError};
pub use task::{create_task, Example, Score, Split, Task, TaskConfig};
pub use verify::{score_response, RewardMode, Verifier};
pub use vocab::CharVocab;
