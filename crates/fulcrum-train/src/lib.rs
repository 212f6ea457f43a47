//! fulcrum-train: the GRPO trainer around `fulcrum-core`.
//!
//! The public surface is what a user of the trainer needs: [`Config`] (every key, TOML,
//! `--set`), [`Run`] (create, open, train, warm up) with its [`Event`]s and [`RunSummary`], the
//! typed [`StepMetrics`] and [`RunData`] to read a run back, [`evaluate`], and [`TrainError`].
//! The step itself is public too, for benchmarks and tests of its guarantees.
//!
//! Modules, in the order of one step (design.md):
//! - `config/`: the one `Config` (`mod.rs`: keys and defaults; `load.rs`: file, overrides,
//!   TOML; `validate.rs`: ranges);
//! - `run/`: the outer loop ([`Run`]; `rl_loop.rs` its stages, `resume.rs` what a checkpoint
//!   records, `run_dir.rs` the directory's files), with `event.rs` (what it reports) and
//!   `interrupt.rs` (SIGINT/SIGTERM: checkpoint and stop between steps); `warmup.rs`: the
//!   starting policy and the SFT cache; `sft.rs`: the SFT loop; `data.rs`: the resumable
//!   prompt stream;
//! - [`step`]: one GRPO step, top to bottom; `draw.rs`: the step's drawing of groups (dynamic
//!   sampling); [`engine`]: where responses are sampled (the native sampler or engine
//!   servers: sampling, sampling ahead, the weight push); `score.rs`: prompts to scored
//!   rollouts; [`rollout`]: the rollout data types; [`offpolicy`]: engine rollouts before the
//!   update; `plan.rs`: the update plan (items, mini-batches); [`packing`]: rollouts to tensors;
//!   `loss.rs`: the policy loss and KL estimators; [`accumulate`]: gradient accumulation over
//!   micro-batches; [`policy`]: the policy, its optimizer and the guarded update; [`ranks`]:
//!   the processes of a data-parallel job (shares, gathers, the gradient all-reduce); `zero.rs`:
//!   ZeRO-1, AdamW sharded across ranks;
//! - `eval.rs`: held-out evaluation; `checkpoint.rs`: atomic, checksummed checkpoint directories;
//!   `export.rs`: the final checkpoint's HF folder, PEFT adapter and GGUF file;
//!   `metrics/`: [`StepMetrics`] and the JSONL streams; `run_data.rs`: [`RunData`].

pub mod accumulate;
mod checkpoint;
mod config;
mod data;
mod draw;
pub mod engine;
mod error;
mod eval;
mod event;
mod export;
mod interrupt;
mod lengths;
mod loss;
mod metrics;
pub mod offpolicy;
mod owned_dir;
pub mod packing;
mod plan;
pub mod policy;
pub mod ranks;
pub mod rollout;
mod run;
mod run_data;
mod score;
mod sft;
pub mod step;
pub mod tools;
mod warmup;
mod zero;

pub use config::{
    apply_override, Config, DistConfig, EvalConfig, ForwardSettings, ModelConfig, OptimConfig,
    PpoConfig, RolloutConfig, ScheduleKind, SftConfig,
};
pub use data::{DataPosition, DataStream};
pub use error::TrainError;
pub use eval::{
    evaluate, evaluate_configured, evaluate_with_samples, measure_problems, sample_problems,
    EvalResult, EvalSample, EvalSettings, ProblemMeasures, ProblemSampling, EVAL_CHUNK,
};
pub use event::Event;
pub use interrupt::{install_signal_handlers, request_stop, stop_requested, INTERRUPTED_EXIT};
pub use metrics::{set_chart_drawer, truncate_after, JsonlWriter, RuleMasses, StepMetrics};
pub use owned_dir::{check_kind, dir_kind, DirKind, OwnedDir};
pub use run::{choose_run_dir, resolve_runtime, resume, train, warm_up, Run, RunSummary, BUILD};
pub use run_data::{EvalPoint, RunData};
pub use score::encode_prompts;
pub use warmup::sft_cache_dir;
