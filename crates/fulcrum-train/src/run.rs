//! A training run (nanoGPT's outer loop with its "once in a while" `if`s): [`Run::create`] sets
//! up a new run directory, [`Run::open`] an existing one for resume; [`Run::train`] warms up with
//! SFT (cached, `warmup.rs`), then takes GRPO steps with evaluation, samples and checkpoints on
//! schedule, from step 0 or from the latest checkpoint.
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

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fulcrum_model::{DeviceChoice, ModelSpec, Runtime};
use fulcrum_tasks::code::{sandbox_for_tasks, SandboxChoice};
use fulcrum_tasks::{create_task, Task};
use serde_json::json;
use tch::Device;

use crate::checkpoint;
use crate::config::Config;
use crate::data::{DataPosition, DataStream};
use crate::engine::RolloutEngine;
use crate::error::TrainError;
use crate::eval::{evaluate, evaluate_configured, EvalResult, EvalSettings};
use crate::event::Event;
use crate::interrupt::stop_requested;
use crate::metrics::StepMetrics;
use crate::metrics::{truncate_after, JsonlWriter};
use crate::policy::{rl_optimizer, rl_schedule, Policy};
use crate::ranks::Ranks;
use crate::step::{grpo_step, StepReport};
use crate::warmup::{reference_model, sft_cache_dir, starting_policy};

/// The end of a run (`summary.json`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunSummary {
    pub run_dir: PathBuf,
    pub rule: String,
    /// The policy loss (`ppo.loss`); runs from before it existed read as `ppo`.
    #[serde(default = "default_loss")]
    pub loss: String,
    pub seed: u64,
    pub sft_accuracy: Option<f64>,
    pub final_accuracy: f64,
    pub steps: u64,
    pub wall_seconds: f64,
    pub sample_tokens_per_s: f64,
}

fn default_loss() -> String {
    fulcrum_core::PolicyLoss::Ppo.name().to_string()
}

/// The three streams of a run directory; all are cut back to a checkpoint on resume.
const STREAMS: [&str; 3] = ["metrics.jsonl", "samples.jsonl", "eval.jsonl"];

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
    /// The processes of the job (one, unless made with [`Run::create_on`] / [`Run::on_ranks`]).
    ranks: RefCell<Ranks>,
}

/// The build that writes a checkpoint: the package version and the git commit.
pub const BUILD: &str = env!("FULCRUM_BUILD");

impl Run {
    /// A new run from `cfg`: resolves device, threads, model and tasks, picks the run directory
    /// (see [`choose_run_dir`]), and writes the resolved config there as `config.toml`.
    pub fn create(cfg: &Config) -> Result<Run, TrainError> {
        let dir = choose_run_dir(cfg)?;
        let mut run = Run::resolve(cfg, dir)?;
        run.fresh = true;
        fs::create_dir_all(&run.dir).map_err(TrainError::io(&run.dir))?;
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
        self.ranks = RefCell::new(ranks);
        self
    }

    /// The run in `dir`, from its `config.toml`, for resume.
    pub fn open(dir: &Path) -> Result<Run, TrainError> {
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
            ranks: RefCell::new(Ranks::single()),
        })
    }

    /// Resume even if the run's config or this binary differs from what wrote its latest
    /// checkpoint (the differences are still said on stderr).
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
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

    /// The held-out task: `eval.task` when set, else the training task (its test split).
    fn eval_task(&self) -> &dyn Task {
        self.eval_task.as_deref().unwrap_or(self.task.as_ref())
    }

    /// Trains to `steps`: from step 0 in a new run, else from the latest checkpoint (a run
    /// killed before its first checkpoint starts again from step 0, as it would have gone).
    pub fn train(&self, on: &mut dyn FnMut(Event<'_>)) -> Result<RunSummary, TrainError> {
        let t0 = Instant::now();
        if self.ranks.borrow().world() > 1 {
            check_data_parallel(&self.cfg)?;
        }
        if self.fresh {
            return self.start_fresh(t0, on);
        }
        let ckpts = self.dir.join("checkpoints");
        checkpoint::clean_leftovers(&ckpts)?;
        match checkpoint::list_steps(&ckpts)?.pop() {
            Some((step, dir)) => self.resume_from(step, &dir, t0, on),
            None => {
                // Rank 0 owns the streams (the other ranks write nothing).
                let streams: &[&str] = if self.ranks.borrow().is_main() {
                    &STREAMS
                } else {
                    &[]
                };
                for f in streams {
                    let p = self.dir.join(f);
                    if p.exists() {
                        fs::remove_file(&p).map_err(TrainError::io(&p))?;
                    }
                }
                self.start_fresh(t0, on)
            }
        }
    }

    /// Step 0: warm-up (cached), the optional start evaluation, then the RL loop.
    fn start_fresh(
        &self,
        t0: Instant,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<RunSummary, TrainError> {
        let cfg = &self.cfg;
        let tasks = (self.task.as_ref(), self.eval_task());
        let main = self.ranks.borrow().is_main();
        // Rank 0 warms up (or finds the cache); the others then load the cache it wrote.
        let mut quiet = |_: Event<'_>| {};
        let on_start: &mut dyn FnMut(Event<'_>) = if main { &mut *on } else { &mut quiet };
        let start = self
            .after_main(|| {
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
            let mut w = JsonlWriter::append(&self.dir.join("eval.jsonl"))?;
            w.write(&json!({"step": 0, "accuracy": acc, "phase": "sft"}))?;
        }
        if cfg.eval.at_start && main {
            let result = evaluate_configured(&start.model, self.eval_task(), cfg)?;
            self.record_eval(0, Some("start"), &result)?;
            on(Event::Eval {
                step: 0,
                result: &result,
            });
        }
        let reference = reference_model(cfg, &self.model, start.dir.as_deref(), self.device)?;
        let mut model = start.model;
        let opt = rl_optimizer(cfg, &mut model, &self.ranks.borrow());
        let policy = Policy {
            model,
            opt,
            reference,
        };
        let data = DataStream::new(
            cfg.seed,
            DataPosition {
                chunk: 0,
                offset: 0,
            },
        );
        self.rl_loop(policy, data, 0, start.sft_accuracy, t0, on)
    }

    /// Continues from the checkpoint `dir` of step `step`.
    fn resume_from(
        &self,
        step: u64,
        dir: &Path,
        t0: Instant,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<RunSummary, TrainError> {
        let cfg = &self.cfg;
        let manifest = checkpoint::verify(dir)?;
        self.check_same_run(dir, &manifest.meta)?;
        let pos: DataPosition =
            serde_json::from_value(manifest.meta["data"].clone()).map_err(|e| {
                TrainError::Checkpoint {
                    path: dir.to_path_buf(),
                    message: format!("manifest meta.data: {e}"),
                }
            })?;
        let sft_accuracy = manifest.meta["sft_accuracy"].as_f64();
        let (model, opt) = checkpoint::load_policy(dir, cfg, self.device, &self.ranks.borrow())?;
        let start_dir = (cfg.sft.steps > 0).then(|| sft_cache_dir(cfg, &self.dir));
        let reference = reference_model(cfg, &self.model, start_dir.as_deref(), self.device)?;
        let streams: &[&str] = if self.ranks.borrow().is_main() {
            &STREAMS
        } else {
            &[]
        };
        for f in streams {
            let path = self.dir.join(f);
            let torn = truncate_after(&path, "step", step)?;
            if torn > 0 {
                // A write cut short (a crash, a full disk): repaired, and said.
                eprintln!(
                    "fulcrum: {}: dropped {torn} unfinished line(s) left by an interrupted write",
                    path.display()
                );
            }
        }
        let policy = Policy {
            model,
            opt,
            reference,
        };
        let data = DataStream::new(cfg.seed, pos);
        self.rl_loop(policy, data, step, sft_accuracy, t0, on)
    }

    /// Steps `start + 1 ..= steps`, then the final checkpoint and `summary.json`.
    fn rl_loop(
        &self,
        mut policy: Policy,
        mut data: DataStream,
        start: u64,
        sft_accuracy: Option<f64>,
        t0: Instant,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<RunSummary, TrainError> {
        let (cfg, dir) = (&self.cfg, &self.dir);
        let ranks = &mut *self.ranks.borrow_mut();
        let main = ranks.is_main();
        let mut quiet = |_: Event<'_>| {};
        let on: &mut dyn FnMut(Event<'_>) = if main { on } else { &mut quiet };
        // Rank 0 writes the run's streams; the other ranks write nothing.
        let mut metrics = main
            .then(|| JsonlWriter::append(&dir.join("metrics.jsonl")))
            .transpose()?;
        let mut samples = main
            .then(|| JsonlWriter::append(&dir.join("samples.jsonl")))
            .transpose()?;
        let lr = rl_schedule(cfg);
        let es = EvalSettings::of(cfg);
        let (mut sample_tokens, mut sample_secs) = (0.0, 0.0);
        let mut skips = SkipGuard::new(cfg.max_consecutive_skips);
        let mut last_eval: Option<EvalResult> = None;
        let fingerprint = config_fingerprint(cfg);
        let mut engine = RolloutEngine::open(cfg, dir, &self.model)?;
        // A draw sampling ahead (`rollout.overlap`) has taken prompts not yet trained on: a
        // checkpoint resumes the stream before them.
        let checkpoint_meta = |step: u64, data: &DataStream, engine: &RolloutEngine| {
            let at = engine.resume_position().unwrap_or(data.position());
            json!({"step": step, "data": at, "sft_accuracy": sft_accuracy,
                   "config": fingerprint, "build": BUILD})
        };
        for step in start + 1..=cfg.steps {
            let rate = lr.lr(step - 1);
            let report = match grpo_step(
                &mut engine,
                &mut policy,
                ranks,
                self.task.as_ref(),
                cfg,
                step,
                &mut data,
                rate,
            ) {
                Ok(r) => r,
                // Nothing could be sampled: the step is skipped as a whole, with its reason.
                Err(TrainError::Model(e @ fulcrum_model::ModelError::NonFiniteLogits)) => {
                    eprintln!("fulcrum: step {step} skipped: {e}");
                    StepReport {
                        metrics: StepMetrics::skipped_step(step, rate, e.to_string()),
                        samples: Vec::new(),
                    }
                }
                Err(e) => return Err(e),
            };
            for w in engine.take_warnings() {
                eprintln!("fulcrum: step {step}: {w}");
            }
            skips.record(step, report.metrics.skipped, dir)?;
            sample_tokens += report.metrics.sample_tokens as f64;
            sample_secs += report.metrics.time_sample;
            let line = serde_json::to_value(&report.metrics)
                .map_err(|e| TrainError::Run(format!("metrics of step {step}: {e}")))?;
            if let (Some(m), Some(s)) = (metrics.as_mut(), samples.as_mut()) {
                m.write(&line)?;
                for x in &report.samples {
                    s.write(x)?;
                }
            }
            on(Event::Step {
                step,
                total: cfg.steps,
                metrics: &report.metrics,
            });
            if main && ((cfg.eval_every > 0 && step % cfg.eval_every == 0) || step == cfg.steps) {
                let result = evaluate_configured(&policy.model, self.eval_task(), cfg)?;
                self.record_eval(step, None, &result)?;
                on(Event::Eval {
                    step,
                    result: &result,
                });
                last_eval = Some(result);
            }
            let checkpoint_due =
                (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) || step == cfg.steps;
            // A signal may reach the ranks at different steps: they stop together.
            let stop = ranks.sum(&[f64::from(u8::from(stop_requested()))])?[0] > 0.0;
            let interrupted = stop && step < cfg.steps;
            // Decided from the schedule and the signal, not from the disk: only rank 0 writes,
            // and every rank must take part in saving a sharded optimizer.
            if !(checkpoint_due || interrupted) {
                continue;
            }
            let meta = checkpoint_meta(step, &data, &engine);
            let dest = checkpoint::save_step(
                &dir.join("checkpoints"),
                step,
                &policy,
                ranks,
                meta,
                cfg.checkpoint_keep,
            )?;
            on(Event::Checkpoint { path: &dest });
            if interrupted {
                return Err(TrainError::Interrupted {
                    phase: "GRPO",
                    step,
                    hint: format!(
                        "checkpoint {} written; continue with `fulcrum train --resume {}`",
                        dest.display(),
                        dir.display()
                    ),
                });
            }
        }
        let final_dir = dir.join("checkpoints").join("final");
        let meta = checkpoint_meta(cfg.steps, &data, &engine);
        checkpoint::save_policy(&final_dir, &policy, ranks, meta)?;
        // Rank 0 evaluates; every rank reports its accuracy (the others add 0).
        let final_accuracy = match (last_eval, main) {
            (_, false) => 0.0,
            (Some(r), true) => r.accuracy,
            (None, true) => evaluate(&policy.model, self.eval_task(), &es)?.accuracy,
        };
        let final_accuracy = ranks.sum(&[final_accuracy])?[0];
        let summary = RunSummary {
            run_dir: dir.to_path_buf(),
            rule: cfg.rule.name().to_string(),
            loss: cfg.ppo.loss.name().to_string(),
            seed: cfg.seed,
            sft_accuracy,
            final_accuracy,
            steps: cfg.steps,
            wall_seconds: t0.elapsed().as_secs_f64(),
            sample_tokens_per_s: sample_tokens / sample_secs.max(1e-9),
        };
        if main {
            let path = dir.join("summary.json");
            let text = serde_json::to_string_pretty(&summary)
                .map_err(|e| TrainError::Run(format!("summary: {e}")))?;
            fs::write(&path, text + "\n").map_err(TrainError::io(&path))?;
        }
        ranks.barrier()?;
        Ok(summary)
    }

    /// Runs `f` on rank 0 first, then (after a barrier) on the other ranks: for work whose
    /// result rank 0 leaves on disk for them (the SFT warm-up and its cache).
    fn after_main<T>(&self, f: impl FnOnce() -> Result<T, TrainError>) -> Result<T, TrainError> {
        let world = self.ranks.borrow().world();
        if world == 1 {
            return f();
        }
        if self.ranks.borrow().is_main() {
            let out = f();
            self.ranks.borrow_mut().barrier()?;
            out
        } else {
            self.ranks.borrow_mut().barrier()?;
            f()
        }
    }

    /// Refuses (unless forced) to resume from a checkpoint written under another config or by
    /// another build; names the keys that differ. Checkpoints from before these were recorded
    /// carry neither and are taken as they are.
    fn check_same_run(&self, dir: &Path, meta: &serde_json::Value) -> Result<(), TrainError> {
        let mut problems = Vec::new();
        if let Some(old) = meta.get("config").and_then(|v| v.as_str()) {
            let keys = differing_keys(old, &config_fingerprint(&self.cfg));
            if !keys.is_empty() {
                problems.push(format!(
                    "the run's config.toml differs from the one this checkpoint was written \
                     with, in {}",
                    keys.join(", ")
                ));
            }
        }
        if let Some(old) = meta.get("build").and_then(|v| v.as_str()) {
            if old != BUILD {
                problems.push(format!(
                    "the checkpoint was written by fulcrum {old}, this is fulcrum {BUILD}"
                ));
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        let message = problems.join("; ");
        if self.force {
            eprintln!("fulcrum: resuming anyway (--force): {message}");
            return Ok(());
        }
        Err(TrainError::ResumeMismatch {
            path: dir.to_path_buf(),
            message,
        })
    }

    /// Appends one evaluation to `eval.jsonl`: the result at `step` (with its `phase` when it is
    /// not a training step), without the wall-clock rate, which is not reproducible.
    fn record_eval(
        &self,
        step: u64,
        phase: Option<&str>,
        result: &EvalResult,
    ) -> Result<(), TrainError> {
        let mut rec = serde_json::to_value(result)
            .map_err(|e| TrainError::Run(format!("evaluation at step {step}: {e}")))?;
        rec["step"] = json!(step);
        if let Some(p) = phase {
            rec["phase"] = json!(p);
        }
        if let Some(o) = rec.as_object_mut() {
            o.remove("tokens_per_s");
        }
        JsonlWriter::append(&self.dir.join("eval.jsonl"))?.write(&rec)
    }

    /// Runs (or reuses) the SFT warm-up alone; returns where the warmed model is and its
    /// held-out accuracy.
    pub fn warm_up(
        cfg: &Config,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<(PathBuf, Option<f64>), TrainError> {
        let run = Run::resolve(cfg, choose_run_dir(cfg)?)?;
        let tasks = (run.task.as_ref(), run.eval_task());
        let start = starting_policy(&run.cfg, &run.model, &run.dir, tasks, run.device, on)?;
        let dir = start
            .dir
            .ok_or_else(|| TrainError::Run("sft.steps is 0: no warm-up".into()))?;
        Ok((dir, start.sft_accuracy))
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
        return Err(TrainError::Run(
            "model.dtype = \"bf16-pure\" with dist.zero1 = true and several ranks: ZeRO-1 \
             keeps fp32 master weights (that is model.dtype = \"bf16\"); set dist.zero1 = false \
             for pure bf16 parameters"
                .into(),
        ));
    }
    if cfg.rollout.engine != fulcrum_rollout::EngineKind::Native {
        return Err(TrainError::Run(format!(
            "rollout.engine = \"{}\" with several ranks: each rank would push its own weights \
             to the servers; run engine rollouts in one process (the engines scale the sampling)",
            cfg.rollout.engine
        )));
    }
    Ok(())
}

/// Counts the steps skipped in a row (non-finite logits, loss or gradient) and stops the run
/// once there are `limit` of them (0: never): a policy that keeps producing non-finite numbers
/// has diverged, and more steps would only repeat the failure.
struct SkipGuard {
    limit: u64,
    in_a_row: u64,
}

impl SkipGuard {
    fn new(limit: u64) -> Self {
        SkipGuard { limit, in_a_row: 0 }
    }

    fn record(&mut self, step: u64, skipped: bool, run_dir: &Path) -> Result<(), TrainError> {
        self.in_a_row = if skipped { self.in_a_row + 1 } else { 0 };
        if self.limit > 0 && self.in_a_row >= self.limit {
            return Err(TrainError::Run(format!(
                "stopped at step {step}: {} steps in a row were skipped (non-finite logits, loss \
                 or gradient; max_consecutive_skips = {}); the weights were never updated with \
                 them, and the checkpoints under {} hold the last good policy",
                self.in_a_row,
                self.limit,
                run_dir.join("checkpoints").display()
            )));
        }
        Ok(())
    }
}

/// The config as a checkpoint records it: its TOML without where the run lives (`run_dir`,
/// `run_name`), which may be spelled differently on resume.
fn config_fingerprint(cfg: &Config) -> String {
    let mut c = cfg.clone();
    c.run_dir = None;
    c.run_name = String::new();
    c.to_toml()
}

/// The dotted keys whose values differ between two TOML documents (a key present in one only
/// counts).
fn differing_keys(a: &str, b: &str) -> Vec<String> {
    fn flatten(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, String>) {
        for (k, v) in t {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(inner) => flatten(&key, inner, out),
                other => {
                    out.insert(key, other.to_string());
                }
            }
        }
    }
    let parse = |s: &str| {
        let mut out = BTreeMap::new();
        if let Ok(t) = s.parse::<toml::Table>() {
            flatten("", &t, &mut out);
        }
        out
    };
    let (a, b) = (parse(a), parse(b));
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The first free run directory: `runs/<name>`, then `runs/<name>-2`, ... (an explicit
/// `run_dir` is used as given and must not already hold a run).
pub fn choose_run_dir(cfg: &Config) -> Result<PathBuf, TrainError> {
    if let Some(d) = &cfg.run_dir {
        if d.join("metrics.jsonl").exists() {
            return Err(TrainError::Run(format!(
                "{} already holds a run: resume it with `fulcrum train --resume {}`, or choose another --run-dir",
                d.display(),
                d.display()
            )));
        }
        return Ok(d.clone());
    }
    let base = Path::new("runs").join(&cfg.run_name);
    let mut k = 1;
    loop {
        let d = if k == 1 {
            base.clone()
        } else {
            PathBuf::from(format!("{}-{k}", base.display()))
        };
        if !d.exists() {
            return Ok(d);
        }
        k += 1;
    }
}

/// Runs (or reuses) the SFT warm-up of `cfg` alone ([`Run::warm_up`]).
pub fn warm_up(
    cfg: &Config,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<(PathBuf, Option<f64>), TrainError> {
    Run::warm_up(cfg, on)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_stops_after_the_configured_number_of_skips_in_a_row() {
        let dir = Path::new("r");
        let mut g = SkipGuard::new(3);
        for (step, skipped) in [(1, true), (2, true), (3, false), (4, true), (5, true)] {
            g.record(step, skipped, dir).unwrap();
        }
        let err = g.record(6, true, dir).unwrap_err().to_string();
        assert!(
            err.contains("stopped at step 6") && err.contains("3 steps in a row"),
            "{err}"
        );
        let mut never = SkipGuard::new(0);
        for step in 1..100 {
            never.record(step, true, dir).unwrap();
        }
    }

    #[test]
    fn data_parallel_refuses_what_it_cannot_do_and_says_what_to_set() {
        assert!(check_data_parallel(&Config::default()).is_ok());
        let mut pure = Config::default();
        pure.model.dtype = fulcrum_model::Dtype::Bf16Pure;
        let e = check_data_parallel(&pure).unwrap_err().to_string();
        assert!(e.contains("dist.zero1 = false"), "{e}");
        pure.dist.zero1 = false;
        assert!(check_data_parallel(&pure).is_ok());
        let mut remote = Config::default();
        remote.rollout.engine = fulcrum_rollout::EngineKind::Llamacpp;
        let e = check_data_parallel(&remote).unwrap_err().to_string();
        assert!(e.contains("rollout.engine"), "{e}");
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
