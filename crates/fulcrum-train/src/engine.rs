//! Where rollouts are sampled: the trainer's own KV-cache sampler, or inference-engine
//! servers (`fulcrum-rollout`) kept on the policy's weights by a push before every step. Every
//! difference between the two lives here ([`RolloutEngine`]): sampling, sampling ahead, the
//! weight push, and the check of engine rollouts before the update (`offpolicy.rs`).
//!
//! Weight versions: version `v` is the policy after `v` GRPO steps, so step `s` (1-based)
//! samples from version `s - 1`. Before sampling, [`RolloutEngine::sync`] writes the policy to
//! disk (a GGUF file for llama.cpp, an HF folder for vLLM and SGLang, under `rollout.push_dir`)
//! and has every engine load it; the first step of a run (fresh or resumed) pushes too, since an
//! SFT warm-up or a checkpoint has already moved the policy off the engine's file. A rollout
//! whose engine reports (or was last pushed) another version is stale, and counted.
//!
//! With `rollout.overlap`, the first draw of step `s + 1` is sent to the engines right after
//! step `s` has drawn its own, and samples while step `s` updates: it comes from version
//! `s - 1` while step `s + 1` trains version `s` (one step off-policy, as verl's one-step-off
//! and AReaL do), so its responses count as stale and the importance correction (`is_cap`) is
//! required. The pool works in a background thread meanwhile; anything that needs it (the next
//! push, a synchronous draw) first waits for that thread. A checkpoint records the prompt stream
//! from before the in-flight prompts, so a resumed run draws them again (and samples its first
//! step on-policy).
//!
//! Interrupts: the pool is given the trainer's stop flag ([`crate::stop_requested`]) as its
//! cancel, so a SIGINT/SIGTERM ends any wait on the engines (a generation, a weight push, their
//! retries, a background draw being joined) within a fraction of a second, however long the
//! engines would have taken: the step in progress is abandoned with [`TrainError::Stopped`],
//! and the run loop checkpoints the last finished step.
//!
//! The push is the disk transport; an NCCL broadcast (vLLM's and SGLang's distributed update
//! paths) would replace [`RemoteEngine::write_weights`] and the engines' `load_weights` with a
//! broadcast of the same tensors, and keep the versioning here.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fulcrum_core::rng::mix;
use fulcrum_model::save_gguf::GgufTemplate;
use fulcrum_model::{Completion, Finish, Model, ModelSpec, SampleRequest, Sampling};
use fulcrum_rollout::{
    connect, Cancel, EngineCompletion, EngineError, EngineKind, EnginePool, FinishReason,
    GenerateRequest, PoolOptions, SamplingParams, WeightFiles, WeightFormat,
};
use fulcrum_tasks::Example;

use crate::config::{ForwardSettings, RolloutConfig};
use crate::data::DataPosition;
use crate::error::TrainError;
use crate::offpolicy::{check_engine_rollouts, EngineCheck};
use crate::rollout::{EngineSample, Rollout, SampleSettings};

/// Completed groups, one list per request.
type Groups = Vec<Vec<EngineCompletion>>;

/// Completions in prompt order (stop token included), with what the engine said of each
/// (`None` for the native sampler, whose log-probabilities are the trainer's).
#[derive(Debug)]
pub struct Sampled {
    pub completions: Vec<Completion>,
    pub engine_side: Vec<Option<EngineSample>>,
}

/// A draw sampled ahead (`rollout.overlap`), for the step it was taken for.
pub struct Prefetched {
    pub examples: Vec<Example>,
    pub prompts: Vec<Vec<i64>>,
    pub sampled: Sampled,
}

/// A draw sampled ahead as the engines returned it.
struct RawPrefetched {
    step: u64,
    examples: Vec<Example>,
    prompts: Vec<Vec<i64>>,
    groups: Groups,
}

/// A draw being sampled in the background; the thread owns the pool until it is joined.
struct InFlight {
    step: u64,
    examples: Vec<Example>,
    prompts: Vec<Vec<i64>>,
    /// The prompt stream before these prompts were taken.
    resume_at: DataPosition,
    handle: JoinHandle<(EnginePool, Result<Groups, EngineError>)>,
}

/// The rollout engine of a run.
pub enum RolloutEngine {
    /// The trainer's own sampler: sampling log-probabilities are the trainer's.
    Native,
    /// Engine servers.
    Remote(Box<RemoteEngine>),
}

/// Engine servers, the files pushed to them, and the version they hold.
pub struct RemoteEngine {
    kind: EngineKind,
    /// `None` while a background draw owns it.
    pool: Option<EnginePool>,
    in_flight: Option<InFlight>,
    ready: Option<(RawPrefetched, DataPosition)>,
    push_dir: PathBuf,
    push_dtype: fulcrum_model::GgufDtype,
    /// The policy's own GGUF file, the first choice of template for a GGUF push.
    model_gguf: Option<PathBuf>,
    template: Option<GgufTemplate>,
    /// The version every live engine holds.
    version: Option<u64>,
    /// Files of the version the engines hold (removed once the next one is loaded).
    current_files: Option<PathBuf>,
}

impl RolloutEngine {
    /// The engine `cfg.rollout` names; engine servers are asked whether they are up (a probe
    /// of a few seconds, [`fulcrum_rollout::PROBE_TIMEOUT`]: one that does not answer is dropped
    /// with a warning naming it; none up is an error). Every later wait on them ends soon after
    /// a SIGINT/SIGTERM ([`crate::stop_requested`]).
    pub fn open(r: &RolloutConfig, run_dir: &Path, spec: &ModelSpec) -> Result<Self, TrainError> {
        if r.engine == EngineKind::Native {
            return Ok(RolloutEngine::Native);
        }
        let timeout = Duration::from_secs_f64(r.engine_timeout_s);
        let clients = r
            .engine_urls
            .iter()
            .map(|u| connect(r.engine, u, timeout))
            .collect::<Result<Vec<_>, _>>()?;
        let opts = PoolOptions {
            requests_per_engine: r.engine_requests,
            max_failures: r.engine_max_failures,
            cancel: Some(Cancel::new(crate::interrupt::stop_requested)),
            ..PoolOptions::default()
        };
        let mut pool = EnginePool::new(clients, opts)?;
        let health = pool.check_health();
        for w in pool.take_warnings() {
            eprintln!("fulcrum: {w}");
        }
        health?;
        let push_dir = r
            .push_dir
            .clone()
            .unwrap_or_else(|| run_dir.join("engine-weights"));
        let push_dir = std::path::absolute(&push_dir).map_err(TrainError::io(&push_dir))?;
        std::fs::create_dir_all(&push_dir).map_err(TrainError::io(&push_dir))?;
        let model_gguf = match spec {
            ModelSpec::Gguf(p) => Some(p.clone()),
            _ => None,
        };
        Ok(RolloutEngine::Remote(Box::new(RemoteEngine {
            kind: r.engine,
            pool: Some(pool),
            in_flight: None,
            ready: None,
            push_dir,
            push_dtype: r.push_dtype,
            model_gguf,
            template: None,
            version: None,
            current_files: None,
        })))
    }

    /// Brings the engines to weight version `version` (the policy after that many steps);
    /// returns the seconds spent (0 when nothing was pushed).
    pub fn sync(&mut self, model: &Model, version: u64) -> Result<f64, TrainError> {
        match self {
            RolloutEngine::Native => Ok(0.0),
            RolloutEngine::Remote(r) => r.sync(model, version),
        }
    }

    /// Samples `s.samples_per_prompt` responses to each of `prompts`: on the trainer's own
    /// sampler, or one request per prompt (a whole group, seeded by the group) on the engines.
    pub fn sample(
        &mut self,
        model: &Model,
        prompts: &[Vec<i64>],
        s: &SampleSettings,
    ) -> Result<Sampled, TrainError> {
        match self {
            RolloutEngine::Native => {
                let req = SampleRequest {
                    first_prompt: s.first_prompt,
                    prompts: prompts.to_vec(),
                    samples_per_prompt: s.samples_per_prompt,
                    max_new_tokens: s.max_new_tokens,
                    sampling: s.sampling,
                    seed: s.seed,
                    stop_token_ids: model.stop_token_ids(),
                    stop_strings: vec![],
                };
                let tok = model.tokenizer()?;
                let completions = fulcrum_model::generate(model.net(), &req, Some(tok))?;
                let engine_side = vec![None; completions.len()];
                Ok(Sampled {
                    completions,
                    engine_side,
                })
            }
            RolloutEngine::Remote(remote) => {
                let reqs = RemoteEngine::requests(model, prompts, s);
                let groups = remote.generate(&reqs)?;
                RemoteEngine::completions(model, groups)
            }
        }
    }

    /// Whether this engine can sample a draw ahead while the trainer updates
    /// ([`RolloutEngine::sample_ahead`]); the native sampler shares the trainer's cores and
    /// cannot.
    pub fn samples_ahead(&self) -> bool {
        matches!(self, RolloutEngine::Remote(_))
    }

    /// Starts sampling step `step`'s first draw (`examples`, encoded as `prompts`) in the
    /// background (`rollout.overlap`); `resume_at` is the prompt stream before these examples.
    pub fn sample_ahead(
        &mut self,
        model: &Model,
        step: u64,
        examples: Vec<Example>,
        prompts: Vec<Vec<i64>>,
        s: &SampleSettings,
        resume_at: DataPosition,
    ) -> Result<(), TrainError> {
        match self {
            RolloutEngine::Native => Ok(()),
            RolloutEngine::Remote(remote) => {
                let reqs = RemoteEngine::requests(model, &prompts, s);
                remote.start_prefetch(step, examples, prompts, reqs, resume_at)
            }
        }
    }

    /// The draw sampled ahead for `step`, if there is one.
    pub fn take_prefetched(
        &mut self,
        model: &Model,
        step: u64,
    ) -> Result<Option<Prefetched>, TrainError> {
        let RolloutEngine::Remote(remote) = self else {
            return Ok(None);
        };
        let Some(p) = remote.take_prefetched(step)? else {
            return Ok(None);
        };
        Ok(Some(Prefetched {
            examples: p.examples,
            prompts: p.prompts,
            sampled: RemoteEngine::completions(model, p.groups)?,
        }))
    }

    /// Before the update: engine rollouts get the trainer's own old log-probabilities, and the
    /// engine/trainer mismatch is measured (`offpolicy.rs`); native rollouts need neither.
    pub fn check_rollouts(
        &self,
        model: &Model,
        rollouts: &mut [Rollout],
        fwd: &ForwardSettings,
        is_cap: Option<f64>,
    ) -> Result<EngineCheck, TrainError> {
        match self {
            RolloutEngine::Native => Ok(EngineCheck::default()),
            RolloutEngine::Remote(r) => {
                check_engine_rollouts(model, rollouts, fwd, is_cap, r.version())
            }
        }
    }

    /// Warnings to show since the last call (engines dropped, requests retried); those of a
    /// draw still in flight come after it is joined.
    pub fn take_warnings(&mut self) -> Vec<String> {
        match self {
            RolloutEngine::Remote(r) => match &mut r.pool {
                Some(pool) => pool.take_warnings(),
                None => Vec::new(),
            },
            RolloutEngine::Native => Vec::new(),
        }
    }

    /// Waits for a draw sampling in the background (`rollout.overlap`), keeping its result
    /// for the step it belongs to; returns the seconds waited.
    pub fn collect_prefetch(&mut self) -> Result<f64, TrainError> {
        match self {
            RolloutEngine::Native => Ok(0.0),
            RolloutEngine::Remote(r) => {
                let t0 = Instant::now();
                r.join_in_flight()?;
                Ok(t0.elapsed().as_secs_f64())
            }
        }
    }

    /// Where a checkpoint written now should resume the prompt stream: before prompts taken
    /// for a draw not yet trained on (`rollout.overlap`); `None`: the stream's own position.
    pub fn resume_position(&self) -> Option<DataPosition> {
        match self {
            RolloutEngine::Native => None,
            RolloutEngine::Remote(r) => r
                .in_flight
                .as_ref()
                .map(|f| f.resume_at)
                .or(r.ready.as_ref().map(|(_, at)| *at)),
        }
    }
}

impl RemoteEngine {
    /// The version every live engine holds.
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// The pool, once any background draw has finished with it.
    fn pool(&mut self) -> Result<&mut EnginePool, TrainError> {
        self.join_in_flight()?;
        self.pool.as_mut().ok_or(TrainError::DrawPanicked)
    }

    fn join_in_flight(&mut self) -> Result<(), TrainError> {
        let Some(f) = self.in_flight.take() else {
            return Ok(());
        };
        let (pool, result) = f.handle.join().map_err(|_| TrainError::DrawPanicked)?;
        self.pool = Some(pool);
        let groups = result.map_err(stopped)?;
        let p = RawPrefetched {
            step: f.step,
            examples: f.examples,
            prompts: f.prompts,
            groups,
        };
        self.ready = Some((p, f.resume_at));
        Ok(())
    }

    /// Completes every request on the engines; results in request order.
    pub fn generate(&mut self, reqs: &[GenerateRequest]) -> Result<Groups, TrainError> {
        self.pool()?.generate(reqs).map_err(stopped)
    }

    /// Starts sampling `reqs` (step `step`'s first draw) in the background.
    fn start_prefetch(
        &mut self,
        step: u64,
        examples: Vec<Example>,
        prompts: Vec<Vec<i64>>,
        reqs: Vec<GenerateRequest>,
        resume_at: DataPosition,
    ) -> Result<(), TrainError> {
        self.pool()?;
        let mut pool = self.pool.take().ok_or(TrainError::DrawPanicked)?;
        let handle = std::thread::spawn(move || {
            let result = pool.generate(&reqs);
            (pool, result)
        });
        self.in_flight = Some(InFlight {
            step,
            examples,
            prompts,
            resume_at,
            handle,
        });
        Ok(())
    }

    /// The draw sampled ahead for `step`, if there is one.
    fn take_prefetched(&mut self, step: u64) -> Result<Option<RawPrefetched>, TrainError> {
        self.join_in_flight()?;
        Ok(match self.ready.take() {
            Some((p, _)) if p.step == step => Some(p),
            _ => None,
        })
    }

    /// One request per prompt (a whole group), seeded by the group, with the same sampling
    /// settings as the native sampler.
    pub fn requests(
        model: &Model,
        prompts: &[Vec<i64>],
        s: &SampleSettings,
    ) -> Vec<GenerateRequest> {
        let sampling = match s.sampling {
            Sampling::Greedy => SamplingParams {
                temperature: 1.0,
                top_k: Some(1),
                top_p: None,
            },
            Sampling::Sample {
                temperature,
                top_k,
                top_p,
            } => SamplingParams {
                temperature,
                top_k,
                top_p,
            },
        };
        let stop = model.stop_token_ids();
        prompts
            .iter()
            .enumerate()
            .map(|(p, ids)| GenerateRequest {
                prompt_ids: ids.clone(),
                n: s.samples_per_prompt,
                max_tokens: s.max_new_tokens,
                sampling,
                seed: mix(s.seed, (s.first_prompt + p) as u64),
                stop_token_ids: stop.clone(),
            })
            .collect()
    }

    /// Engine groups as the native sampler's completions (prompt order, stop token included),
    /// with the engine's side beside them. The completions carry no log-probabilities: the
    /// step fills `old_logprobs` with the trainer's own (offpolicy.rs). Tokens outside the
    /// policy's vocabulary (a server running another model) are refused: the trainer could not
    /// score them.
    pub fn completions(model: &Model, groups: Groups) -> Result<Sampled, TrainError> {
        let vocab = model.config().vocab_size;
        let mut completions = Vec::new();
        let mut side = Vec::new();
        for (p, group) in groups.into_iter().enumerate() {
            for (g, c) in group.into_iter().enumerate() {
                if let Some(t) = c.tokens.iter().find(|&&t| t < 0 || t >= vocab) {
                    return Err(TrainError::ForeignTokens {
                        engine: c.engine,
                        token: *t,
                        vocab,
                    });
                }
                let finish = match (c.finish, c.tokens.last()) {
                    (FinishReason::Stop, Some(&t)) => Finish::StopToken(t),
                    _ => Finish::Length,
                };
                side.push(Some(EngineSample {
                    logprobs: c.logprobs,
                    weight_version: c.weight_version,
                }));
                completions.push(Completion {
                    prompt_index: p,
                    sample_index: g,
                    tokens: c.tokens,
                    logprobs: Vec::new(),
                    finish,
                });
            }
        }
        Ok(Sampled {
            completions,
            engine_side: side,
        })
    }

    fn sync(&mut self, model: &Model, version: u64) -> Result<f64, TrainError> {
        if self.version == Some(version) {
            return Ok(0.0);
        }
        let t0 = Instant::now();
        let files = self.write_weights(model, version)?;
        let pool = self.pool()?;
        let pushed = pool.push_weights(&files, version);
        for w in pool.take_warnings() {
            eprintln!("fulcrum: {w}");
        }
        pushed.map_err(stopped)?;
        self.version = Some(version);
        // The engines now read the new files: the previous version's can go.
        if let Some(old) = self.current_files.replace(files.path.clone()) {
            if old != files.path {
                let _ = if old.is_dir() {
                    std::fs::remove_dir_all(&old)
                } else {
                    std::fs::remove_file(&old)
                };
            }
        }
        Ok(t0.elapsed().as_secs_f64())
    }

    /// Writes the policy (LoRA adapters folded in) where the engines load it from.
    fn write_weights(&mut self, model: &Model, version: u64) -> Result<WeightFiles, TrainError> {
        let format = self.kind.weight_format();
        let path = match format {
            WeightFormat::Gguf => {
                let path = self.push_dir.join(format!("weights-v{version}.gguf"));
                let dtype = self.push_dtype;
                let template = self.gguf_template()?;
                model.save_gguf(template, &path, dtype)?;
                path
            }
            WeightFormat::HfFolder => {
                let path = self.push_dir.join(format!("weights-v{version}"));
                model.save_merged(&path)?;
                path
            }
        };
        Ok(WeightFiles { format, path })
    }

    /// The GGUF whose metadata a push copies: the policy's own file, else the file the server
    /// says it serves (read once: a server that has taken a push serves a pushed file).
    fn gguf_template(&mut self) -> Result<&GgufTemplate, TrainError> {
        if self.template.is_none() {
            let served = self.pool()?.model_path().map(PathBuf::from);
            let path = self
                .model_gguf
                .clone()
                .or(served.filter(|p| p.is_file()))
                .ok_or(TrainError::NoGgufTemplate)?;
            self.template = Some(GgufTemplate::read(&path)?);
        }
        self.template.as_ref().ok_or(TrainError::NoGgufTemplate)
    }
}

/// An engine failure as the trainer reports it: a wait cut short by a signal is
/// [`TrainError::Stopped`] (the run loop checkpoints and says how to resume), anything else as
/// it is.
fn stopped(e: EngineError) -> TrainError {
    match e {
        EngineError::Interrupted { waiting_on } => TrainError::Stopped {
            during: format!("waiting on {waiting_on}"),
        },
        other => TrainError::Engine(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_tokens_outside_the_vocabulary_are_refused() {
        let model = Model::tiny(tch::Device::Cpu, 0).unwrap();
        let c = |t: i64| fulcrum_rollout::EngineCompletion {
            tokens: vec![1, t],
            logprobs: vec![-1.0, -1.0],
            finish: fulcrum_rollout::FinishReason::Length,
            weight_version: None,
            engine: "http://e".into(),
        };
        let done = RemoteEngine::completions(&model, vec![vec![c(2)]]).unwrap();
        assert_eq!(done.completions[0].tokens, vec![1, 2]);
        let side = &done.engine_side[0];
        assert_eq!(side.as_ref().map(|e| e.logprobs.len()), Some(2));
        let e = RemoteEngine::completions(&model, vec![vec![c(2), c(1 << 20)]]).unwrap_err();
        assert!(e.to_string().contains("http://e") && e.to_string().contains("vocabulary"));
        assert!(RemoteEngine::completions(&model, vec![vec![c(-1)]]).is_err());
    }
}
