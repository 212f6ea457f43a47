//! Engine servers driven from one place: a worker thread owns the pool (`fulcrum-rollout`) and
//! takes jobs in the order they were given: draws (one request per group) and weight pushes.
//! Order is what keeps versions exact: a draw queued after the push of version `v` samples on
//! `v`, one queued before it on the version before. The trainer queues draws ahead of itself
//! (`rollout.max_staleness`) and waits only for the one it trains on.
//!
//! A push's files are written by the trainer ([`super::push`]); their load is queued here, and
//! the files of a version are removed once a later version is loaded everywhere. The NCCL broadcast of vLLM's
//! and SGLang's distributed update paths would replace the file write and the engines' load with
//! a broadcast of the same tensors, keeping the versioning here.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Instant;

use fulcrum_core::rng::mix;
use fulcrum_model::{Completion, Finish, Model, Sampling};
use fulcrum_rollout::{
    EngineCompletion, EngineError, EnginePool, FinishReason, GenerateRequest, SamplingParams,
    WeightFiles, ADAPTER_NAME,
};

use super::turns::{self, EngineTools};
use super::Sampled;
use crate::error::TrainError;
use crate::rollout::{EngineSample, SampleSettings};
use crate::tools::ToolStats;

/// One response of a draw: what the engines wrote and, in a multi-turn response, which of its
/// tokens a tool wrote (empty: none did).
#[derive(Debug, Clone)]
pub(super) struct Response {
    pub completion: EngineCompletion,
    pub tool: Vec<bool>,
}

/// Completed groups, one list per request.
pub(super) type Groups = Vec<Vec<Response>>;

/// A job of the worker.
enum Job {
    Draw {
        id: u64,
        reqs: Vec<GenerateRequest>,
    },
    Push {
        id: u64,
        files: WeightFiles,
        version: u64,
        /// The engines' memory was released (colocation): they take it back around the load.
        released: bool,
    },
    Release {
        id: u64,
    },
}

/// What the worker did with a job.
enum Outcome {
    /// The groups and what their tools did.
    Drawn(Result<(Groups, ToolStats), TrainError>),
    Pushed {
        version: u64,
        result: Result<(), EngineError>,
    },
    Released(Result<(), EngineError>),
}

struct Done {
    id: u64,
    outcome: Outcome,
    warnings: Vec<String>,
    secs: f64,
}

/// The engine servers of a run, their worker and the files pushed to them.
pub struct RemoteEngine {
    jobs: Sender<Job>,
    done: Receiver<Done>,
    _worker: JoinHandle<()>,
    next_id: u64,
    /// Results that came back before they were asked for.
    arrived: BTreeMap<u64, Done>,
    warnings: Vec<String>,
    /// Files of pushed versions, oldest first; removed once a later one is loaded.
    files: VecDeque<(u64, PathBuf)>,
    /// Seconds the last finished push took on the engines.
    last_load_secs: f64,
    /// The engines' memory is released for the trainer's update (`rollout.colocate`).
    released: bool,
    /// What the tools did in the draws collected since the last call.
    tool_stats: ToolStats,
}

impl RemoteEngine {
    /// Starts the worker on `pool` (already health-checked); with `tools`, its draws are
    /// multi-turn (`turns.rs`).
    pub(super) fn start(pool: EnginePool, tools: Option<EngineTools>) -> RemoteEngine {
        let (jobs, inbox) = channel::<Job>();
        let (outbox, done) = channel::<Done>();
        let worker = std::thread::Builder::new()
            .name("fulcrum-engines".into())
            .spawn(move || work(pool, tools, inbox, outbox));
        // A worker that cannot start leaves `done` without a sender: the first wait says so.
        let worker = worker.unwrap_or_else(|_| std::thread::spawn(|| {}));
        RemoteEngine {
            jobs,
            done,
            _worker: worker,
            next_id: 0,
            arrived: BTreeMap::new(),
            warnings: Vec::new(),
            files: VecDeque::new(),
            last_load_secs: 0.0,
            released: false,
            tool_stats: ToolStats::default(),
        }
    }

    /// What the tools did in the draws collected since the last call.
    pub(super) fn take_tool_stats(&mut self) -> ToolStats {
        std::mem::take(&mut self.tool_stats)
    }

    /// Warnings since the last call (engines dropped, requests retried).
    pub(super) fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    fn submit(&mut self, job: impl FnOnce(u64) -> Job) -> Result<u64, TrainError> {
        let id = self.next_id;
        self.next_id += 1;
        self.jobs
            .send(job(id))
            .map_err(|_| TrainError::DrawPanicked)?;
        Ok(id)
    }

    /// Queues a draw of `reqs`; returns its ticket for [`RemoteEngine::collect`].
    pub(super) fn request(&mut self, reqs: Vec<GenerateRequest>) -> Result<u64, TrainError> {
        self.submit(|id| Job::Draw { id, reqs })
    }

    /// The groups of the draw `ticket`, once done.
    pub(super) fn collect(&mut self, ticket: u64) -> Result<Groups, TrainError> {
        match self.wait(ticket)?.outcome {
            Outcome::Drawn(drawn) => {
                let (groups, stats) = drawn?;
                self.tool_stats.add(stats);
                Ok(groups)
            }
            _ => Err(TrainError::DrawPanicked),
        }
    }

    /// Colocation: has every engine free its memory for the trainer's update, and waits for
    /// it; the next push takes it back.
    pub(super) fn release_memory(&mut self) -> Result<(), TrainError> {
        let ticket = self.submit(|id| Job::Release { id })?;
        match self.wait(ticket)?.outcome {
            Outcome::Released(r) => r.map_err(stopped)?,
            _ => return Err(TrainError::DrawPanicked),
        }
        self.released = true;
        Ok(())
    }

    /// Completes `reqs` now (after every job queued before them).
    pub(super) fn generate(&mut self, reqs: Vec<GenerateRequest>) -> Result<Groups, TrainError> {
        let ticket = self.request(reqs)?;
        self.collect(ticket)
    }

    /// Queues the load of `files` (weight version `version`) on every engine, behind the jobs
    /// queued before it; with `wait`, waits for it.
    pub(super) fn load(
        &mut self,
        files: WeightFiles,
        version: u64,
        wait: bool,
    ) -> Result<(), TrainError> {
        self.files.push_back((version, files.path.clone()));
        let released = std::mem::take(&mut self.released);
        let ticket = self.submit(|id| Job::Push {
            id,
            files,
            version,
            released,
        })?;
        if wait {
            self.wait(ticket)?;
        }
        Ok(())
    }

    /// Seconds the engines took to load the last version whose load has finished.
    pub(super) fn last_load_secs(&self) -> f64 {
        self.last_load_secs
    }

    /// Waits for job `id`; results of other jobs that come first are kept for their turn, and a
    /// push that failed is an error at once (its engines are gone).
    fn wait(&mut self, id: u64) -> Result<Done, TrainError> {
        loop {
            if let Some(done) = self.arrived.remove(&id) {
                return Ok(done);
            }
            let mut done = self.done.recv().map_err(|_| TrainError::DrawPanicked)?;
            self.warnings.append(&mut done.warnings);
            if let Outcome::Pushed { version, result } = done.outcome {
                result.map_err(stopped)?;
                self.loaded(version, done.secs);
                done.outcome = Outcome::Pushed {
                    version,
                    result: Ok(()),
                };
            }
            self.arrived.insert(done.id, done);
        }
    }

    /// Version `version` is loaded everywhere: the files of earlier versions can go.
    fn loaded(&mut self, version: u64, secs: f64) {
        self.last_load_secs = secs;
        while let Some((v, path)) = self.files.front() {
            if *v >= version {
                break;
            }
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            };
            self.files.pop_front();
        }
    }

    /// One request per prompt (a whole group), seeded by the group, with the same sampling
    /// settings as the native sampler.
    pub(super) fn requests(
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
                adapter: model.lora().map(|_| ADAPTER_NAME.to_string()),
            })
            .collect()
    }

    /// Engine groups as the native sampler's completions (prompt order, stop token included),
    /// with the engine's side beside them. The completions carry no log-probabilities: the
    /// step fills `old_logprobs` with the trainer's own (offpolicy.rs). Tokens outside the
    /// policy's vocabulary (a server running another model) are refused: the trainer could not
    /// score them.
    pub(super) fn completions(model: &Model, groups: Groups) -> Result<Sampled, TrainError> {
        let vocab = model.config().vocab_size;
        let mut completions = Vec::new();
        let mut side = Vec::new();
        for (p, group) in groups.into_iter().enumerate() {
            for (
                g,
                Response {
                    completion: c,
                    tool,
                },
            ) in group.into_iter().enumerate()
            {
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
                    tool,
                    finish,
                });
            }
        }
        Ok(Sampled {
            completions,
            engine_side: side,
        })
    }
}

/// The worker: runs each job on the pool in order, and says how it went.
fn work(mut pool: EnginePool, tools: Option<EngineTools>, jobs: Receiver<Job>, done: Sender<Done>) {
    for job in jobs {
        let t0 = Instant::now();
        let (id, outcome) = match job {
            Job::Draw { id, reqs } => (id, Outcome::Drawn(draw(&mut pool, &reqs, &tools))),
            Job::Push {
                id,
                files,
                version,
                released,
            } => {
                let result = if released {
                    pool.push_weights_released(&files, version)
                } else {
                    pool.push_weights(&files, version)
                };
                (id, Outcome::Pushed { version, result })
            }
            Job::Release { id } => (id, Outcome::Released(pool.release_memory())),
        };
        let reply = Done {
            id,
            outcome,
            warnings: pool.take_warnings(),
            secs: t0.elapsed().as_secs_f64(),
        };
        if done.send(reply).is_err() {
            return; // the trainer is gone
        }
    }
}

/// One draw: a request per group, and with tools the turns after it (`turns.rs`).
fn draw(
    pool: &mut EnginePool,
    reqs: &[GenerateRequest],
    tools: &Option<EngineTools>,
) -> Result<(Groups, ToolStats), TrainError> {
    if let Some(tools) = tools {
        return turns::draw(pool, reqs, tools);
    }
    let groups = pool.generate(reqs).map_err(stopped)?;
    let groups = groups
        .into_iter()
        .map(|g| {
            g.into_iter()
                .map(|completion| Response {
                    completion,
                    tool: Vec::new(),
                })
                .collect()
        })
        .collect();
    Ok((groups, ToolStats::default()))
}

/// An engine failure as the trainer reports it: a wait cut short by a signal is
/// [`TrainError::Stopped`] (the run loop checkpoints and says how to resume), anything else as
/// it is.
pub(super) fn stopped(e: EngineError) -> TrainError {
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
        let c = |t: i64| Response {
            completion: fulcrum_rollout::EngineCompletion {
                tokens: vec![1, t],
                logprobs: vec![-1.0, -1.0],
                finish: fulcrum_rollout::FinishReason::Length,
                weight_version: None,
                engine: "http://e".into(),
            },
            tool: Vec::new(),
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
