//! `fulcrum-tasks`: everything that turns a prompt and a response into a reward, and everything
//! that reads the prompts people train and evaluate on.
//!
//! The public surface is the types re-exported here plus three modules a user reaches into:
//!
//! - [`Task`] (`task.rs`): the interface ([`Task::examples`], [`Task::score`]), with
//!   [`Example`], [`Score`] and [`Split`];
//! - [`create_task`] and [`TaskConfig`] (`create.rs`): the one factory, which knows every
//!   implementation: a synthetic [`Family`] (`synthetic/`, four generated families for the CPU
//!   lab, deterministic by seed, with difficulty, length and mistake-rate knobs, on the
//!   [`CharVocab`] of `vocab.rs`), the [`JsonlTask`] on a user's file (`jsonl_task.rs`), or a
//!   benchmark of [`data::registry`];
//! - [`Verifier`], [`RewardMode`], [`score_response`] and the batch scorer [`score_requests`]
//!   (`verify/`): the verifiers (`math`, `exact`, `code`) behind one function;
//! - [`math`]: the math answer checker (extraction, normalisation, equivalence);
//! - [`code`]: Python code extraction, the test harness and the runner that scores programs
//!   in the sandbox; [`sandbox_for_tasks`] (`create.rs`) chooses the sandbox of a run;
//! - [`sandbox`]: running one untrusted program (bubblewrap, or the built-in `namespaces` /
//!   `landlock` modes; `docs/code-sandbox.md` says what each guarantees), knowing nothing of
//!   tasks;
//! - [`data`]: dataset readers (JSONL, JSONL.gz, JSON arrays, parquet), record formats,
//!   deduplication, the benchmark registry;
//! - [`TaskError`] (`error.rs`): the one error type, naming file, line and field.
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
pub mod math;
pub mod sandbox;
pub mod tools;

mod create;
mod error;
mod jsonl_task;
mod synthetic;
mod task;
mod verify;
mod vocab;

pub use create::{
    create_task, expand_data_file, is_data_file, sandbox_for_tasks, TaskConfig, TASK_NAMES,
};
pub use error::{Result, TaskError};
pub use jsonl_task::JsonlTask;
pub use sandbox::SandboxChoice;
pub use synthetic::{Family, SyntheticTask, VerboseLevels};
pub use task::{Example, Split, Task};
pub use verify::{
    parse_request, parse_requests, score_requests, score_response, RewardMode, Score, ScoreRequest,
    Verifier,
};
pub use vocab::CharVocab;
