//! A training run: [`Run::create`] sets up a new run directory, [`Run::open`] an existing one
//! for resume; [`Run::train`] warms up with SFT (cached, `warmup.rs`), then runs the GRPO loop
//! (`rl_loop.rs`) from step 0 or from the latest checkpoint (`resume.rs`: what a checkpoint
//! records, and the same-run check). `run_dir.rs` holds what the directory is made of.
//!
//! A `Run` resolves everything once: the device and thread count (an automatic choice,
//! `device = "auto"` or `threads = 0`, is said on stderr and recorded *resolved* in the run's
//! `config.toml`), the model spec, the task and the evaluation task. Everything random is derived
//! from `(seed, step)`, so a run resumed from a checkpoint draws what the uninterrupted run drew,
//! and its files end identical.
//!
//! In a data-parallel job ([`Run::create_on`], [`Run::on_ranks`]) every rank runs this loop;
//! rank 0 alone chooses the run directory, runs the SFT warm-up (the others then load it from
//! its cache), evaluates, and writes metrics, samples, evaluations and checkpoints; the stop
//! after a signal is decided together, so all ranks leave at the same step.

mod resume;
mod rl_loop;
mod run_dir;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fulcrum_model::{DeviceChoice, ModelSpec, Runtime};
use fulcrum_tasks::{create_task, sandbox_for_tasks, SandboxChoice, Task};
use tch::Device;

use crate::checkpoint::{self, Manifest};
use crate::config::Config;
use crate::data::{DataPosition, DataStream};
use crate::error::TrainError;
use crate::eval::evaluate_configured;
use crate::event::Event;
use crate::metrics::{Dashboards, JsonlWriter};
use crate::owned_dir::{check_kind, DirKind, OwnedDir};
use crate::policy::{rl_optimizer, Policy};
use crate::ranks::Ranks;
use crate::warmup::{reference_model, sft_cache_dir, starting_policy};
use resume::CheckpointMeta;
use rl_loop::{rl_loop, LoopStart, RunParts};
use run_dir::{
    check_records, claim_run_dir, cut_streams, discard_run, owned_streams, record_eval,
    recorded_steps, remove_streams,
};

pub use resume::BUILD;
pub use run_dir::{choose_run_dir, RunSummary};

/// A run: its resolved config, its directory, and what the config names, built once.
pub struct Run {
    cfg: Config,
    dir: PathBuf,
    device: Device,
    model: ModelSpec,
    task: Box<dyn Task>,
    eval_task: Option<Box<dyn Task>>,
    /// Made by [`Run::create`]: starts at step 0 whatever the directory holds.
    fresh: bool,
    /// Resume even when the config or the binary differs from the checkpoint's.
    force: bool,
    /// Start the run in this directory again from step 0, discarding its records
    /// (`--restart`): the only way a resume discards recorded steps.
    restart: bool,
    /// Resume from this checkpoint (`step-N`, or `N`) instead of the newest, discarding what
    /// was recorded after it (`--from-checkpoint`).
    from_checkpoint: Option<String>,
    /// The directory, locked for this process (rank 0 of a job), once training starts.
    hold: Option<OwnedDir>,
    /// The processes of the job (one, unless made with [`Run::create_on`] / [`Run::on_ranks`]).
    ranks: Ranks,
}

impl Run {
    /// A new run from `cfg`: resolves device, threads, model and tasks, picks the run directory
    /// (see [`choose_run_dir`]), and writes the resolved config there as `config.toml`.
    pub fn create(cfg: &Config) -> Result<Run, TrainError> {
        // Everything that can refuse the run (its config, model, data, sandbox) is checked
        // before the directory is made: a refused run leaves nothing behind.
        let mut run = Run::resolve(cfg, choose_run_dir(cfg)?)?;
        let hold = claim_run_dir(cfg)?;
        // Taken atomically: another run started at the same time may have got the name seen
        // above.
        run.dir = hold.path().to_path_buf();
        run.cfg.run_dir = Some(run.dir.clone());
        run.fresh = true;
        run.hold = Some(hold);
        let path = run.dir.join("config.toml");
        fs::write(&path, run.cfg.to_toml()).map_err(TrainError::io(&path))?;
        Ok(run)
    }

    /// A new run as one rank of a data-parallel job: rank 0 chooses and creates the run
    /// directory and tells the others.
    pub fn create_on(cfg: &Config, mut ranks: Ranks) -> Result<Run, TrainError> {
        if ranks.world() == 1 {
            return Ok(Run::create(cfg)?.on_ranks(ranks));
        }
        check_data_parallel(cfg)?;
        let mine = if ranks.is_main() {
            Some(Run::create(cfg)?)
        } else {
            None
        };
        let path = mine.as_ref().map(|r| r.dir.to_string_lossy().into_owned());
        let gathered = match ranks.group() {
            Some(g) => g.all_gather_bytes(path.unwrap_or_default().as_bytes())?,
            None => Vec::new(),
        };
        let dir = PathBuf::from(String::from_utf8_lossy(&gathered[0]).into_owned());
        let mut run = match mine {
            Some(r) => r,
            None => Run::resolve(cfg, dir)?,
        };
        run.fresh = true;
        Ok(run.on_ranks(ranks))
    }

    /// Runs this run as one rank of `ranks` (for resume: every rank opens the same directory).
    pub fn on_ranks(mut self, ranks: Ranks) -> Self {
        // On GPUs each rank trains on its own (`cuda:LOCAL_RANK`, as it joined).
        if let Some(d @ Device::Cuda(_)) = ranks.device() {
            self.device = d;
        }
        self.ranks = ranks;
        self
    }

    /// The run in `dir`, from its `config.toml`, for resume.
    pub fn open(dir: &Path) -> Result<Run, TrainError> {
        if !dir.is_dir() {
            return Err(TrainError::NotARunDir {
                dir: dir.to_path_buf(),
                why: "there is no such directory",
            });
        }
        check_kind(dir, DirKind::Run)?;
        let cfg = Config::load(Some(&dir.join("config.toml")), &[])?;
        Run::resolve(&cfg, dir.to_path_buf())
    }

    /// Resolves what `cfg` names, for a run in `dir` (nothing is written).
    fn resolve(cfg: &Config, dir: PathBuf) -> Result<Run, TrainError> {
        let (mut cfg, device) = resolve_runtime(cfg)?;
        cfg.run_dir = Some(dir.clone());
        let model = ModelSpec::parse(&cfg.model.path)?;
        let task = create_task(&cfg.task)?;
        let eval_task = cfg.eval.task.as_ref().map(create_task).transpose()?;
        crate::lengths::check_prompt_lengths(&cfg, &model, task.as_ref(), eval_task.as_deref())?;
        // Code rewards: the sandbox is chosen (and printed) now, refused when none contains
        // programs, and recorded in config.toml.
        let eval = eval_task.as_deref().unwrap_or(task.as_ref());
        if let Some(mode) = sandbox_for_tasks(cfg.sandbox, &[task.as_ref(), eval], cfg.seed)? {
            cfg.sandbox = SandboxChoice::Mode(mode);
        }
        Ok(Run {
            cfg,
            dir,
            device,
            model,
            task,
            eval_task,
            fresh: false,
            force: false,
            restart: false,
            from_checkpoint: None,
            hold: None,
            ranks: Ranks::single(),
        })
    }

    /// Resume even if the run's config or this binary differs from what wrote its latest
    /// checkpoint (the differences are still said on stderr).
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Start again from step 0 in this run's directory, discarding its records and
    /// checkpoints, instead of resuming.
    pub fn restart(mut self, restart: bool) -> Self {
        self.restart = restart;
        self
    }

    /// Resume from the checkpoint `name` (`step-N` or `N`) instead of the newest; what was
    /// recorded after it is discarded.
    pub fn from_checkpoint(mut self, name: Option<String>) -> Self {
        self.from_checkpoint = name;
        self
    }

    /// The resolved config.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the GRPO loop reads of this run.
    fn parts(&self) -> RunParts<'_> {
        RunParts {
            cfg: &self.cfg,
            dir: &self.dir,
            model: &self.model,
            task: self.task.as_ref(),
            eval_task: self.eval_task.as_deref().unwrap_or(self.task.as_ref()),
        }
    }

    /// Trains to `steps`: from step 0 in a new run, else from the latest checkpoint (a run
    /// killed before its first checkpoint starts again from step 0, as it would have gone).
    pub fn train(&mut self, on: &mut dyn FnMut(Event<'_>)) -> Result<RunSummary, TrainError> {
        // The loop borrows the run's parts and the ranks apart: the ranks are taken out for it.
        let mut ranks = std::mem::replace(&mut self.ranks, Ranks::single());
        let summary = self
            .hold_dir(&ranks)
            .and_then(|()| self.train_on(&mut ranks, on));
        self.ranks = ranks;
        summary
    }

    /// Locks the run directory for this process (rank 0 writes it; the other ranks of a job are
    /// the same run).
    fn hold_dir(&mut self, ranks: &Ranks) -> Result<(), TrainError> {
        if self.hold.is_none() && ranks.is_main() {
            self.hold = Some(OwnedDir::claim(&self.dir, DirKind::Run)?);
        }
        Ok(())
    }

    fn train_on(
        &self,
        ranks: &mut Ranks,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<RunSummary, TrainError> {
        let t0 = Instant::now();
        if ranks.world() > 1 {
            check_data_parallel(&self.cfg)?;
        }
        if self.fresh {
            return self.start_fresh(ranks, t0, on);
        }
        if self.restart {
            // Asked for: the run starts again, and nothing of the old one is kept.
            if ranks.is_main() {
                discard_run(&self.dir)?;
            }
            return self.start_fresh(ranks, t0, on);
        }
        match self.checkpoint_to_resume()? {
            Some((step, dir, manifest)) => self.resume_from(ranks, step, &dir, manifest, t0, on),
            None => {
                // No checkpoint. A run that stopped before its first one was complete (in the
                // warm-up, or between its first checkpoint step's record and its checkpoint)
                // starts again, redoing what it recorded exactly. But if a checkpoint was due
                // at an earlier recorded step, it was written and is gone: the records are not
                // discarded unasked.
                let recorded = recorded_steps(&self.dir)?;
                let every = self.cfg.checkpoint_every;
                if (1..recorded).any(|s| every > 0 && s.is_multiple_of(every)) {
                    return Err(TrainError::NoCheckpoint {
                        dir: self.dir.clone(),
                        recorded,
                    });
                }
                if recorded > 0 && ranks.is_main() {
                    eprintln!(
                        "fulcrum: {}: the run stopped before its first checkpoint: it starts \
                         again from step 0 and redoes its {recorded} recorded step(s)",
                        self.dir.display()
                    );
                }
                remove_streams(&self.dir, owned_streams(ranks.is_main()))?;
                self.start_fresh(ranks, t0, on)
            }
        }
    }

    /// The checkpoint a resume continues from, verified: `--from-checkpoint`'s, else the newest.
    /// A newest one that fails verification is refused, naming it and the previous intact one.
    fn checkpoint_to_resume(&self) -> Result<Option<(u64, PathBuf, Manifest)>, TrainError> {
        let ckpts = self.dir.join("checkpoints");
        checkpoint::clean_leftovers(&ckpts)?;
        let steps = checkpoint::list_steps(&ckpts)?;
        if let Some(name) = &self.from_checkpoint {
            let wanted = name.strip_prefix("step-").unwrap_or(name);
            let (step, path) = steps
                .iter()
                .find(|(s, _)| s.to_string() == wanted)
                .ok_or_else(|| TrainError::NoSuchCheckpoint {
                    dir: ckpts.clone(),
                    name: name.clone(),
                    have: steps
                        .iter()
                        .map(|(s, _)| format!("step-{s}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            let manifest = checkpoint::verify(path)?;
            return Ok(Some((*step, path.clone(), manifest)));
        }
        let Some((step, path)) = steps.last() else {
            return Ok(None);
        };
        match checkpoint::verify(path) {
            Ok(manifest) => Ok(Some((*step, path.clone(), manifest))),
            Err(cause) => {
                let previous = steps
                    .iter()
                    .rev()
                    .skip(1)
                    .find(|(_, p)| checkpoint::verify(p).is_ok())
                    .map(|(s, _)| format!("step-{s}"));
                Err(TrainError::CorruptCheckpoint {
                    run: self.dir.clone(),
                    path: path.clone(),
                    cause: Box::new(cause),
                    previous,
                })
            }
        }
    }

    /// Step 0: warm-up (cached), the optional start evaluation, then the RL loop.
    fn start_fresh(
        &self,
        ranks: &mut Ranks,
        t0: Instant,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<RunSummary, TrainError> {
        let cfg = &self.cfg;
        let run = self.parts();
        let tasks = (run.task, run.eval_task);
        let main = ranks.is_main();
        let mut dashboards = match main {
            true => Some(Dashboards::open(cfg, &self.dir, 0)?),
            false => None,
        };
        // Rank 0 warms up (or finds the cache); the others then load the cache it wrote.
        let mut quiet = |_: Event<'_>| {};
        let on_start: &mut dyn FnMut(Event<'_>) = if main { &mut *on } else { &mut quiet };
        let start = after_main(ranks, || {
            starting_policy(cfg, &self.model, &self.dir, tasks, self.device, on_start)
        })
        .map_err(|e| match e {
            TrainError::Interrupted { phase, step, .. } => TrainError::Interrupted {
                phase,
                step,
                hint: format!(
                    "the warm-up was not finished, nothing of it is kept; `fulcrum train \
                     --resume {}` starts this run again from the beginning",
                    self.dir.display()
                ),
            },
            other => other,
        })?;
        if let (Some(acc), true) = (start.sft_accuracy, main) {
            let rec = serde_json::json!({"step": 0, "accuracy": acc, "phase": "sft"});
            JsonlWriter::append(&self.dir.join("eval.jsonl"))?.write(&rec)?;
            if let Some(d) = dashboards.as_mut() {
                d.eval(&rec);
            }
        }
        if cfg.eval.at_start && main {
            let result = evaluate_configured(&start.model, run.eval_task, cfg)?;
            let rec = record_eval(&self.dir, 0, Some("start"), &result)?;
            if let Some(d) = dashboards.as_mut() {
                d.eval(&rec);
            }
            on(Event::Eval {
                step: 0,
                result: &result,
            });
        }
        let reference = reference_model(cfg, &self.model, start.dir.as_deref(), self.device)?;
        let mut model = start.model;
        let opt = rl_optimizer(
            &cfg.optim,
            cfg.model.dtype,
            cfg.dist.zero1,
            &mut model,
            ranks,
        );
        let start = LoopStart {
            policy: Policy {
                model,
                opt,
                reference,
            },
            data: DataStream::new(
                cfg.seed,
                DataPosition {
                    chunk: 0,
                    offset: 0,
                },
            ),
            step: 0,
            sft_accuracy: start.sft_accuracy,
            t0,
            dashboards,
        };
        rl_loop(&run, ranks, start, on)
    }

    /// Continues from the checkpoint `dir` of step `step`.
    fn resume_from(
        &self,
        ranks: &mut Ranks,
        step: u64,
        dir: &Path,
        manifest: Manifest,
        t0: Instant,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<RunSummary, TrainError> {
        let cfg = &self.cfg;
        let meta = CheckpointMeta::from_json(dir, &manifest.meta)?;
        meta.check_same_run(dir, cfg, self.force)?;
        // Every step up to the checkpoint must be on record before anything is cut.
        check_records(&self.dir, step)?;
        let dashboards = match ranks.is_main() {
            true => Some(Dashboards::open(cfg, &self.dir, step)?),
            false => None,
        };
        let (model, opt) = checkpoint::load_policy(dir, cfg, self.device, ranks)?;
        let start_dir = (cfg.sft.steps > 0).then(|| sft_cache_dir(cfg, &self.dir));
        let reference = reference_model(cfg, &self.model, start_dir.as_deref(), self.device)?;
        cut_streams(&self.dir, owned_streams(ranks.is_main()), step)?;
        let start = LoopStart {
            policy: Policy {
                model,
                opt,
                reference,
            },
            data: DataStream::new(cfg.seed, meta.data),
            step,
            sft_accuracy: meta.sft_accuracy,
            t0,
            dashboards,
        };
        rl_loop(&self.parts(), ranks, start, on)
    }

    /// Runs (or reuses) the SFT warm-up alone; returns where the warmed model is and its
    /// held-out accuracy.
    pub fn warm_up(
        cfg: &Config,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<(PathBuf, Option<f64>), TrainError> {
        let run = Run::resolve(cfg, choose_run_dir(cfg)?)?;
        let parts = run.parts();
        let tasks = (parts.task, parts.eval_task);
        let start = starting_policy(&run.cfg, &run.model, &run.dir, tasks, run.device, on)?;
        let dir = start.dir.ok_or(TrainError::NoWarmUp)?;
        Ok((dir, start.sft_accuracy))
    }
}

/// Runs `f` on rank 0 first, then (after a barrier) on the other ranks: for work whose result
/// rank 0 leaves on disk for them (the SFT warm-up and its cache).
fn after_main<T>(
    ranks: &mut Ranks,
    f: impl FnOnce() -> Result<T, TrainError>,
) -> Result<T, TrainError> {
    if ranks.world() == 1 {
        return f();
    }
    if ranks.is_main() {
        let out = f();
        ranks.barrier()?;
        out
    } else {
        ranks.barrier()?;
        f()
    }
}

/// Starts a new run from `cfg` ([`Run::create`], then [`Run::train`]).
pub fn train(cfg: &Config, on: &mut dyn FnMut(Event<'_>)) -> Result<RunSummary, TrainError> {
    Run::create(cfg)?.train(on)
}

/// Continues the run in `run_dir` from its latest checkpoint ([`Run::open`], then
/// [`Run::train`]).
pub fn resume(run_dir: &Path, on: &mut dyn FnMut(Event<'_>)) -> Result<RunSummary, TrainError> {
    Run::open(run_dir)?.train(on)
}

/// Runs (or reuses) the SFT warm-up of `cfg` alone ([`Run::warm_up`]).
pub fn warm_up(
    cfg: &Config,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<(PathBuf, Option<f64>), TrainError> {
    Run::warm_up(cfg, on)
}

/// Resolves the automatic runtime choices of `cfg` (`threads = 0`, `device = "auto"`), sets
/// libtorch's thread count, and returns the config with the resolved values and the device.
pub fn resolve_runtime(cfg: &Config) -> Result<(Config, Device), TrainError> {
    let rt = Runtime::resolve(cfg.device, cfg.threads)?;
    let mut resolved = cfg.clone();
    resolved.threads = rt.threads;
    resolved.device = DeviceChoice::of(rt.device);
    Ok((resolved, rt.device))
}

/// What a data-parallel job does not support yet, refused before it starts.
fn check_data_parallel(cfg: &Config) -> Result<(), TrainError> {
    if cfg.model.dtype == fulcrum_model::Dtype::Bf16Pure && cfg.dist.zero1 {
        // ZeRO-1's slices are fp32 masters by construction: it cannot train pure bf16.
        return Err(TrainError::DataParallelUnsupported(
            "model.dtype = \"bf16-pure\" with dist.zero1 = true and several ranks: ZeRO-1 \
             keeps fp32 master weights (that is model.dtype = \"bf16\"); set dist.zero1 = false \
             for pure bf16 parameters"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_parallel_refuses_what_it_cannot_do_and_says_what_to_set() {
        assert!(check_data_parallel(&Config::default()).is_ok());
        let mut pure = Config::default();
        pure.model.dtype = fulcrum_model::Dtype::Bf16Pure;
        let e = check_data_parallel(&pure).unwrap_err().to_string();
        assert!(e.contains("dist.zero1 = false"), "{e}");
        pure.dist.zero1 = false;
        assert!(check_data_parallel(&pure).is_ok());
        // Engine rollouts run with ranks: rank 0 drives the servers.
        let mut remote = Config::default();
        remote.rollout.engine = fulcrum_rollout::EngineKind::Llamacpp;
        assert!(check_data_parallel(&remote).is_ok());
    }

    #[test]
    fn a_new_run_records_its_automatic_choices_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            threads: 0,
            run_dir: Some(dir.path().join("r")),
            ..Config::default()
        };
        let run = Run::create(&cfg).unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(run.config().threads, cores);
        let written = Config::load(Some(&dir.path().join("r/config.toml")), &[]).unwrap();
        assert_eq!(written.threads, cores);
        assert_eq!(written.device, DeviceChoice::Cpu);
        assert_eq!(
            written.run_dir.as_deref(),
            Some(dir.path().join("r").as_path())
        );
        // The same directory cannot be created twice once it holds a run.
        std::fs::write(dir.path().join("r/metrics.jsonl"), "").unwrap();
        assert!(Run::create(&cfg).is_err());
        assert_eq!(
            Run::open(&dir.path().join("r")).unwrap().config().threads,
            cores
        );
    }
}
