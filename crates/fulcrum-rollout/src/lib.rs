//! Rollouts on inference engines: the HTTP clients of vLLM, SGLang and llama.cpp's server, a
//! pool that spreads groups over several engines and survives the ones that fail, and the disk
//! weight push that keeps them on the trainer's weights.
//!
//! Token ids travel both ways, so nothing is re-tokenised: a request is one prompt's ids and
//! `n = G`; each completion comes back as its token ids (a stop token that ended it included,
//! as the native sampler does), the engine's log-probability of each, and why it ended. The
//! engine's log-probabilities only measure engine/trainer mismatch and feed the importance
//! correction; the trainer recomputes the old log-probabilities itself.
//!
//! - `request.rs`: what is asked and what comes back, engine-neutral.
//! - [`engines`]: one module per engine: its request builder, its response parser (both pure,
//!   tested on recorded responses) and its weight reload.
//! - `pool.rs`: several engines at once, retries, dropping engines that stay down, and giving
//!   up a wait when told to stop ([`Cancel`]).
//! - `http.rs`: the blocking HTTP client with timeouts that every engine uses.
//!
//! Nothing here blocks without a limit: every request has a connect and a total timeout, and a
//! probe (`/health`, `/props`) a short one of its own, [`PROBE_TIMEOUT`]. With a [`Cancel`] in
//! [`PoolOptions`], the pool's waits (generations, weight pushes, their retries) also end within
//! [`CANCEL_POLL`] of a stop being asked for, with [`EngineError::Interrupted`].

mod cancel;
pub mod engines;
mod error;
mod http;
mod pool;
mod request;

pub use cancel::{Cancel, CANCEL_POLL};
pub use engines::{connect, EngineClient, EngineKind};
pub use error::EngineError;
pub use http::{Http, PROBE_TIMEOUT};
pub use pool::{EnginePool, PoolOptions};
pub use request::{
    EngineCompletion, FinishReason, GenerateRequest, SamplingParams, WeightFiles, WeightFormat,
    ADAPTER_NAME,
};
