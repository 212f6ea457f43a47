//! Where rollouts are sampled: the trainer's own KV-cache sampler, or inference-engine servers
//! (`fulcrum-rollout`) kept on the policy's weights by a push before every step. Every difference
//! between the two lives here ([`RolloutEngine`]): sampling, draws requested ahead, the weight
//! push, and the check of engine rollouts before the update (`offpolicy.rs`).
//!
//! Weight versions: version `v` is the policy after `v` GRPO steps, so step `s` (1-based) trains
//! version `s - 1`. Before its draw, [`RolloutEngine::sync`] pushes version `s - 1` (the first
//! step of a run, fresh or resumed, pushes too: an SFT warm-up or a checkpoint has moved the
//! policy off the engine's file).
//!
//! **Many ranks, one place that drives the engines.** In a data-parallel job rank 0 drives the
//! servers ([`remote.rs`](remote)): it pushes once per step, sends whole groups, and its draws are
//! gathered to every rank by the collective the native path uses, so advantages and weights are
//! computed once for the global batch and each rank trains on its share. The other ranks sample
//! nothing ([`RolloutEngine::Elsewhere`]); they take the same prompts from the stream. Rank 0
//! is the natural place: it already writes the run's files, and a push is written from the
//! policy every rank holds whole.
//!
//! **Asynchronous within a bound** (`rollout.max_staleness = k`, `rollout.overlap` is `k = 1`):
//! after a step's first draw the draws of the next `k` steps are queued on the engines
//! ([`ahead.rs`](ahead)) and sample while the trainer updates; a push is queued behind them, so a
//! draw samples on the newest version pushed before it was queued. Every response carries its
//! version; its staleness is the trained version minus its own, never above `k` by construction,
//! and a group older than that (a retry on a server that had not loaded the newest weights) is
//! dropped and counted, never trained on. With `k >= 1` the importance correction is required.
//!
//! Interrupts: the pool is given the trainer's stop flag as its cancel, so a SIGINT/SIGTERM ends
//! any wait on the engines within a fraction of a second with [`TrainError::Stopped`], and the
//! run loop checkpoints the last finished step.

mod ahead;
mod push;
mod remote;
mod turns;

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use fulcrum_model::{Completion, Model, ModelSpec, SampleRequest};
use fulcrum_rollout::{connect, Cancel, EngineKind, EnginePool, PoolOptions};
use fulcrum_tasks::Example;

use crate::config::{ForwardSettings, RolloutConfig};
use crate::data::DataPosition;
use crate::error::TrainError;
use crate::offpolicy::{check_engine_rollouts, EngineCheck};
use crate::ranks::Ranks;
use crate::rollout::{EngineSample, Rollout, SampleSettings};
use crate::tools::{ToolSetup, ToolStats, ToolTurns};
use ahead::{Ahead, AheadQueue};
use push::PushFiles;
use remote::RemoteEngine;
use turns::EngineTools;

/// Completions in prompt order (stop token included), with what the engine said of each
/// (`None` for the native sampler, whose log-probabilities are the trainer's).
#[derive(Debug, Default)]
pub struct Sampled {
    pub completions: Vec<Completion>,
    pub engine_side: Vec<Option<EngineSample>>,
}

/// A step's first draw requested ahead, as it came back (empty on a rank that does not drive
/// the engines: rank 0's rollouts reach it by the gather).
pub struct Prefetched {
    pub examples: Vec<Example>,
    pub prompts: Vec<Vec<i64>>,
    pub sampled: Sampled,
}

/// The rollout engine of a run, as this process sees it.
pub enum RolloutEngine {
    /// The trainer's own sampler: sampling log-probabilities are the trainer's; with tools
    /// (`task.tools`), multi-turn (`tools.rs`).
    Native(Option<Box<ToolSetup>>),
    /// Engine servers, driven by this process; with tools, the calls are answered on the
    /// thread that drives them, between turns (`turns.rs`).
    Remote {
        engines: Box<RemoteEngine>,
        push: PushFiles,
        ahead: AheadQueue,
        staleness: u64,
        tools: Option<Box<ToolSetup>>,
    },
    /// Engine servers driven by rank 0 of this job: this rank samples nothing, writes its
    /// share of an HF push, and keeps the draws requested ahead in step with rank 0.
    Elsewhere {
        push: PushFiles,
        ahead: AheadQueue,
        staleness: u64,
        tools: Option<Box<ToolSetup>>,
    },
}

impl RolloutEngine {
    /// The engine `r` names for `policy` (loaded from `spec`; a LoRA policy pushes its
    /// adapter alone). On the rank that drives them (`drives`), the servers are asked whether
    /// they are up (a probe of a few seconds, [`fulcrum_rollout::PROBE_TIMEOUT`]: one that does
    /// not answer is dropped with a warning naming it; none up is an error), and every later
    /// wait on them ends soon after a SIGINT/SIGTERM ([`crate::stop_requested`]).
    pub fn open(
        r: &RolloutConfig,
        run_dir: &Path,
        (policy, spec): (&Model, &ModelSpec),
        drives: bool,
        tools: Option<ToolSetup>,
    ) -> Result<Self, TrainError> {
        let tools = tools.map(Box::new);
        if r.engine == EngineKind::Native {
            return Ok(RolloutEngine::Native(tools));
        }
        let lora = policy.lora().is_some();
        let staleness = r.staleness();
        let push_dir = r
            .push_dir
            .clone()
            .unwrap_or_else(|| run_dir.join("engine-weights"));
        let push_dir = std::path::absolute(&push_dir).map_err(TrainError::io(&push_dir))?;
        std::fs::create_dir_all(&push_dir).map_err(TrainError::io(&push_dir))?;
        let format = if lora {
            r.engine.adapter_format()
        } else {
            r.engine.weight_format()
        };
        if !drives {
            return Ok(RolloutEngine::Elsewhere {
                push: PushFiles::new(format, push_dir, r.push_dtype, None),
                ahead: AheadQueue::default(),
                staleness,
                tools,
            });
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
        // A GGUF push copies the architecture and tokenizer of a GGUF file of the same model:
        // the policy's own, else the file the servers serve (asked now, before any push).
        let template = match spec {
            ModelSpec::Gguf(p) => Some(p.clone()),
            _ => pool
                .model_path()
                .map(std::path::PathBuf::from)
                .filter(|p| p.is_file()),
        };
        let worker_tools = match &tools {
            Some(setup) => Some(EngineTools::new(policy, setup)?),
            None => None,
        };
        Ok(RolloutEngine::Remote {
            engines: Box::new(RemoteEngine::start(pool, worker_tools)),
            push: PushFiles::new(format, push_dir, r.push_dtype, template),
            ahead: AheadQueue::default(),
            staleness,
            tools,
        })
    }

    /// How many versions ahead of the trainer the engines sample (`rollout.max_staleness`).
    pub fn staleness(&self) -> u64 {
        match self {
            RolloutEngine::Native(_) => 0,
            RolloutEngine::Remote { staleness, .. }
            | RolloutEngine::Elsewhere { staleness, .. } => *staleness,
        }
    }

    /// Brings the engines to weight version `version` (the policy after that many steps), on
    /// every rank of the job: the files are written (an HF folder by all ranks, each its
    /// shards), then their load is queued behind the draws already requested, and waited for
    /// only when nothing is sampled ahead. Returns the seconds spent (0 when nothing was due).
    pub fn sync(
        &mut self,
        model: &Model,
        version: u64,
        ranks: &mut Ranks,
    ) -> Result<f64, TrainError> {
        let t0 = std::time::Instant::now();
        match self {
            RolloutEngine::Native(_) => return Ok(0.0),
            RolloutEngine::Remote {
                engines,
                push,
                staleness,
                ..
            } => {
                if !push.due(version) {
                    return Ok(0.0);
                }
                if let Some(files) = push.write(model, version, ranks)? {
                    engines.load(files, version, *staleness == 0)?;
                }
            }
            RolloutEngine::Elsewhere { push, .. } => {
                if !push.due(version) {
                    return Ok(0.0);
                }
                push.write(model, version, ranks)?;
            }
        }
        Ok(t0.elapsed().as_secs_f64())
    }

    /// Colocation (`rollout.colocate`): after the step's draws, the engines free their
    /// accelerator memory for the update (the next push takes it back), and no rank starts its
    /// update before they have. Returns the seconds it took; nothing without colocation.
    pub fn release_memory(
        &mut self,
        r: &RolloutConfig,
        ranks: &mut Ranks,
    ) -> Result<f64, TrainError> {
        if !r.colocate {
            return Ok(0.0);
        }
        let t0 = std::time::Instant::now();
        if let RolloutEngine::Remote { engines, .. } = self {
            engines.release_memory()?;
        }
        ranks.barrier()?;
        Ok(t0.elapsed().as_secs_f64())
    }

    /// This rank's share of `n` prompts to sample: a contiguous share on every rank with the
    /// native sampler, all of them on the rank that drives the engines (none on the others).
    pub fn share(&self, ranks: &Ranks, n: usize) -> Range<usize> {
        match self {
            RolloutEngine::Native(_) => ranks.share(n),
            RolloutEngine::Remote { .. } => 0..n,
            RolloutEngine::Elsewhere { .. } => n..n,
        }
    }

    /// Samples `s.samples_per_prompt` responses to each of `prompts`: on the trainer's own
    /// sampler, or one request per prompt (a whole group, seeded by the group) on the engines,
    /// now (behind the draws requested ahead).
    pub fn sample(
        &mut self,
        model: &Model,
        prompts: &[Vec<i64>],
        s: &SampleSettings,
    ) -> Result<Sampled, TrainError> {
        if prompts.is_empty() {
            return Ok(Sampled::default());
        }
        match self {
            RolloutEngine::Native(tools) => {
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
                let completions = match tools.as_deref_mut() {
                    None => fulcrum_model::generate(model.net(), &req, Some(tok))?,
                    Some(setup) => {
                        let mut turns =
                            ToolTurns::new(model, &setup.task, &setup.runner, setup.max_turns)?;
                        let out = fulcrum_model::generate_turns(
                            model.net(),
                            &req,
                            Some(tok),
                            &mut turns,
                        )?;
                        setup.stats.add(turns.stats);
                        out
                    }
                };
                let engine_side = vec![None; completions.len()];
                Ok(Sampled {
                    completions,
                    engine_side,
                })
            }
            RolloutEngine::Remote { engines, .. } => {
                let groups = engines.generate(RemoteEngine::requests(model, prompts, s))?;
                RemoteEngine::completions(model, groups)
            }
            // Unreachable: this rank's share of an engine draw is empty.
            RolloutEngine::Elsewhere { .. } => Ok(Sampled::default()),
        }
    }

    /// The last step whose first draw was requested ahead.
    pub fn requested_until(&self) -> Option<u64> {
        match self {
            RolloutEngine::Native(_) => None,
            RolloutEngine::Remote { ahead, .. } | RolloutEngine::Elsewhere { ahead, .. } => {
                ahead.last_step()
            }
        }
    }

    /// Requests step `step`'s first draw (`examples`, encoded as `prompts`) ahead of the
    /// trainer; `resume_at` is the prompt stream before these examples.
    pub fn request_ahead(
        &mut self,
        model: &Model,
        step: u64,
        (examples, prompts): (Vec<Example>, Vec<Vec<i64>>),
        s: &SampleSettings,
        resume_at: DataPosition,
    ) -> Result<(), TrainError> {
        let (ticket, ahead) = match self {
            RolloutEngine::Native(_) => return Ok(()),
            RolloutEngine::Remote { engines, ahead, .. } => (
                Some(engines.request(RemoteEngine::requests(model, &prompts, s))?),
                ahead,
            ),
            RolloutEngine::Elsewhere { ahead, .. } => (None, ahead),
        };
        ahead.push(Ahead {
            step,
            examples,
            prompts,
            resume_at,
            ticket,
        });
        Ok(())
    }

    /// The first draw of `step` requested ahead, if there is one, once it is done.
    pub fn take_ahead(
        &mut self,
        model: &Model,
        step: u64,
    ) -> Result<Option<Prefetched>, TrainError> {
        let (a, engines) = match self {
            RolloutEngine::Native(_) => return Ok(None),
            RolloutEngine::Remote { engines, ahead, .. } => (ahead.take(step), Some(engines)),
            RolloutEngine::Elsewhere { ahead, .. } => (ahead.take(step), None),
        };
        let Some(a) = a else { return Ok(None) };
        let sampled = match (engines, a.ticket) {
            (Some(engines), Some(ticket)) => {
                RemoteEngine::completions(model, engines.collect(ticket)?)?
            }
            _ => Sampled::default(),
        };
        Ok(Some(Prefetched {
            examples: a.examples,
            prompts: a.prompts,
            sampled,
        }))
    }

    /// Before the update: engine rollouts get the trainer's own old log-probabilities, and the
    /// engine/trainer mismatch is measured against the version the step trains (`offpolicy.rs`);
    /// native rollouts need neither.
    pub fn check_rollouts(
        &self,
        model: &Model,
        rollouts: &mut [Rollout],
        fwd: &ForwardSettings,
        is_cap: Option<f64>,
        trained_version: u64,
    ) -> Result<EngineCheck, TrainError> {
        match self {
            RolloutEngine::Native(_) => Ok(EngineCheck::default()),
            _ => check_engine_rollouts(model, rollouts, fwd, is_cap, Some(trained_version)),
        }
    }

    /// The run's tools (`task.tools`; the same on every rank).
    fn tools(&self) -> Option<&ToolSetup> {
        match self {
            RolloutEngine::Native(tools)
            | RolloutEngine::Remote { tools, .. }
            | RolloutEngine::Elsewhere { tools, .. } => tools.as_deref(),
        }
    }

    /// The system prompt that declares the tools to the model, when it has tools.
    pub fn system_prompt(&self) -> Option<String> {
        self.tools().map(ToolSetup::system_prompt)
    }

    /// Whether responses may call tools (`task.tools`; the same on every rank).
    pub fn has_tools(&self) -> bool {
        self.tools().is_some()
    }

    /// What the tools did since the last call (on this rank: with engines, on the rank that
    /// drives them, in the draws it collected).
    pub fn take_tool_stats(&mut self) -> ToolStats {
        match self {
            RolloutEngine::Native(Some(setup)) => std::mem::take(&mut setup.stats),
            RolloutEngine::Remote { engines, .. } => engines.take_tool_stats(),
            _ => ToolStats::default(),
        }
    }

    /// Warnings to show since the last call (engines dropped, requests retried).
    pub fn take_warnings(&mut self) -> Vec<String> {
        match self {
            RolloutEngine::Remote { engines, .. } => engines.take_warnings(),
            _ => Vec::new(),
        }
    }

    /// Seconds the engines took to load the last version whose load has finished (with draws
    /// sampled ahead, a push is not waited for: this is its cost on the engines' side).
    pub fn last_load_secs(&self) -> f64 {
        match self {
            RolloutEngine::Remote { engines, .. } => engines.last_load_secs(),
            _ => 0.0,
        }
    }

    /// Where a checkpoint written now should resume the prompt stream: before prompts taken
    /// for a draw not yet trained on; `None`: the stream's own position.
    pub fn resume_position(&self) -> Option<DataPosition> {
        match self {
            RolloutEngine::Native(_) => None,
            RolloutEngine::Remote { ahead, .. } | RolloutEngine::Elsewhere { ahead, .. } => {
                ahead.resume_position()
            }
        }
    }
}
