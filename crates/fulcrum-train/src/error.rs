//! The error type of fulcrum-train: what failed, where (file, key, line), and why.
//!
//! Failures of the layers below (the model, a task, the core maths) are wrapped whole, not
//! flattened to strings, so that `{:#}` at the CLI shows the full chain with every cause.

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
    /// The W&B sidecar could not start (`logging.wandb`): no `wandb` package, no login, a
    /// failed `wandb.init`.
    #[error("logging.wandb: {message}")]
    Wandb { message: String },
    /// A `--set key=value` that is not of that form.
    #[error("--set {given:?}: {message}")]
    BadOverride { given: String, message: String },
    /// A checkpoint that is missing, truncated, corrupt or of another format.
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    /// A run-directory file (`metrics.jsonl`, `eval.jsonl`, `summary.json`) that is unusable.
    #[error("{path}:{line}: {message}")]
    RunFile {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The model failed (loading, sampling, a tensor op).
    #[error(transparent)]
    Model(#[from] fulcrum_model::ModelError),
    /// A task or dataset failed (bad record, unknown task, unreadable file, sandbox).
    #[error(transparent)]
    Task(#[from] fulcrum_tasks::TaskError),
    /// The step's numbers were refused by the core maths (lengths, non-finite values).
    #[error(transparent)]
    Core(#[from] fulcrum_core::CoreError),
    /// The rollout engines failed (none left, a request they refused, a weight push).
    #[error(transparent)]
    Engine(#[from] fulcrum_rollout::EngineError),
    /// A collective of a data-parallel job failed (a rank died, hung past `dist.timeout_s`, or
    /// could not join).
    #[error(transparent)]
    Dist(#[from] fulcrum_dist::DistError),
    /// The launcher's environment (`RANK`, `WORLD_SIZE`, ...) is malformed.
    #[error(transparent)]
    Launch(#[from] fulcrum_dist::LaunchError),
    /// A task with no examples of the split a phase draws from.
    #[error("task {task} has no {split} examples")]
    NoExamples { task: String, split: &'static str },
    /// An example without the demonstration the SFT warm-up trains on.
    #[error("example {example} of task {task} has no demonstration for SFT")]
    NoDemonstration { task: String, example: String },
    /// A prompt longer than `rollout.max_prompt_len` tokens.
    #[error("prompt {example} has {tokens} tokens, more than rollout.max_prompt_len = {limit}")]
    PromptTooLong {
        example: String,
        tokens: usize,
        limit: usize,
    },
    /// A model whose tokenizer declares no end-of-sequence token (SFT needs one).
    #[error("the model has no end-of-sequence token")]
    NoStopToken,
    /// An engine returned token ids outside the policy's vocabulary: it serves another model.
    #[error(
        "{engine}: returned token id {token}, outside the policy's vocabulary of {vocab}: does \
         the server run the policy's model?"
    )]
    ForeignTokens {
        engine: String,
        token: i64,
        vocab: i64,
    },
    /// The background draw of `rollout.overlap` panicked, taking the engine pool with it.
    #[error("the background rollout draw panicked: the rollout engines are lost")]
    DrawPanicked,
    /// A weight push to llama.cpp with no GGUF file of the same model to copy its metadata from.
    #[error(
        "a weight push to llama.cpp copies the architecture and tokenizer of a GGUF file of \
         the same model: load the policy from a .gguf file, or run the server on this machine \
         (its /props names the file it serves)"
    )]
    NoGgufTemplate,
    /// What one rank sent the others could not be encoded or decoded.
    #[error("exchanging {what} between ranks: {message}")]
    Exchange { what: String, message: String },
    /// Inputs of an evaluation measure that do not fit it (no responses, unequal counts, a k
    /// outside 1..=n).
    #[error("{0}")]
    Measure(String),
    /// A directory that is not a run directory.
    #[error("{dir} is not a run directory: {why}")]
    NotARunDir { dir: PathBuf, why: &'static str },
    /// A new run asked for a directory that already holds one.
    #[error(
        "{dir} already holds a run: resume it with `fulcrum train --resume {dir}`, or choose \
         another --run-dir"
    )]
    RunDirInUse { dir: PathBuf },
    /// Another process holds the directory (its lock, `owned_dir.rs`).
    #[error(
        "{} is in use by another fulcrum process (PID {holder}): two processes writing one \
         directory would interleave its records; wait for that one to end, or stop it",
        dir.display()
    )]
    DirInUse { dir: PathBuf, holder: String },
    /// A directory of another kind than the command writes (a comparison given as a run, or
    /// the reverse).
    #[error(
        "{} is a {}, not a {}: choose another directory",
        dir.display(),
        is.describe(),
        want.describe()
    )]
    WrongDirKind {
        dir: PathBuf,
        is: crate::owned_dir::DirKind,
        want: crate::owned_dir::DirKind,
    },
    /// A resume with no checkpoint to continue from, in a run that has recorded steps.
    #[error(
        "{} has {recorded} recorded step(s) but no checkpoint to resume from (checkpoints/ \
         holds none, though one was written at an earlier step): resuming would discard them. `fulcrum train --resume {} --restart` starts \
         the run again from step 0, discarding its records",
        dir.display(),
        dir.display()
    )]
    NoCheckpoint { dir: PathBuf, recorded: u64 },
    /// `--from-checkpoint` names a checkpoint the run does not have.
    #[error("{}: no checkpoint {name}; there are: {have}", dir.display())]
    NoSuchCheckpoint {
        dir: PathBuf,
        name: String,
        have: String,
    },
    /// The newest checkpoint fails verification; the previous intact one, if any, is offered.
    #[error(
        "the newest checkpoint {} is unusable: {cause}. {}",
        path.display(),
        match previous {
            Some(p) => format!(
                "The previous intact checkpoint is {p}: `fulcrum train --resume {} \
                 --from-checkpoint {p}` continues from it, discarding what was recorded after it",
                run.display()
            ),
            None => format!(
                "There is no earlier intact checkpoint: `fulcrum train --resume {} --restart` \
                 starts the run again from step 0",
                run.display()
            ),
        }
    )]
    CorruptCheckpoint {
        run: PathBuf,
        path: PathBuf,
        cause: Box<TrainError>,
        previous: Option<String>,
    },
    /// The run's records do not reach the checkpoint a resume would continue from.
    #[error(
        "{}: {why}, but the checkpoint to resume from is at step {step}: the records of the \
         steps before it are lost. Restore the file, or `--restart` starts the run again from \
         step 0",
        path.display()
    )]
    RecordsLost {
        path: PathBuf,
        step: u64,
        why: String,
    },
    /// A non-empty directory that fulcrum did not write.
    #[error(
        "{} holds files fulcrum did not write: choose a new or empty directory",
        dir.display()
    )]
    NotOurs { dir: PathBuf },
    /// What a data-parallel job cannot do, with the setting that avoids it.
    #[error("{0}")]
    DataParallelUnsupported(String),
    /// Too many steps in a row were skipped for non-finite numbers: the policy has diverged.
    #[error(
        "stopped at step {step}: {in_a_row} steps in a row were skipped (non-finite logits, \
         loss or gradient; max_consecutive_skips = {limit}); the weights were never updated with \
         them, and the checkpoints under {checkpoints} hold the last good policy"
    )]
    TooManySkips {
        step: u64,
        in_a_row: u64,
        limit: u64,
        checkpoints: PathBuf,
    },
    /// `fulcrum sft` (a warm-up alone) on a config whose `sft.steps` is 0.
    #[error("sft.steps is 0: no warm-up")]
    NoWarmUp,
    /// The signal handlers could not be installed.
    #[error("installing the handler of signal {signal}: {source}")]
    Signals {
        signal: i32,
        #[source]
        source: std::io::Error,
    },
    /// A record the trainer writes could not be encoded as JSON.
    #[error("encoding {what} as JSON: {source}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// A tensor operation failed outside the model (reading values back from a forward).
    #[error("{what}: {source}")]
    Tensor {
        what: &'static str,
        #[source]
        source: tch::TchError,
    },
    /// Stopped by SIGINT or SIGTERM after `step` (the checkpoint of that step is written).
    #[error("interrupted after {phase} step {step}: {hint}")]
    Interrupted {
        phase: &'static str,
        step: u64,
        hint: String,
    },
    /// A wait (on the engines, an evaluation) cut short by SIGINT/SIGTERM: the run loop turns
    /// it into [`TrainError::Interrupted`] after checkpointing the last finished step.
    #[error("stopped by a signal while {during}")]
    Stopped { during: String },
    /// A resume that would not continue the same run: the config or the binary differs from
    /// the checkpoint's (`--force` resumes anyway).
    #[error("{path}: {message}\n(resume with --force to continue anyway)")]
    ResumeMismatch { path: PathBuf, message: String },
    /// Any other I/O failure, with the path it concerned.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl TrainError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TrainError {
        let path = path.into();
        move |source| TrainError::Io { path, source }
    }
}
