//! The outer loop of a training run (nanoGPT's "once in a while" `if`s): set up the run
//! directory, warm up with SFT (cached), then GRPO steps with evaluation, samples and
//! checkpoints on schedule; resume from the latest checkpoint of a run directory.
//!
//! Everything random is derived from `(seed, step)` (prompts, sampling), so a run resumed from a
//! checkpoint draws what the uninterrupted run drew, and its files end identical.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fulcrum_model::optim::{AdamW, AdamWConfig, LrSchedule};
use fulcrum_model::{DeviceChoice, Model};
use fulcrum_tasks::code::{sandbox_for_tasks, SandboxChoice};
use fulcrum_tasks::{create_task, Task};
use serde_json::{json, Value};
use tch::Device;

use crate::checkpoint;
use crate::config::Config;
use crate::data::{mix, DataPosition, DataStream};
use crate::error::TrainError;
use crate::eval::{evaluate, EvalResult, EvalSettings};
use crate::metrics::{truncate_after, JsonlWriter};
use crate::sft::run_sft;
use crate::step::{grpo_step, Policy};

/// What the loop reports as it goes (the CLI draws progress bars from these).
pub enum Event<'a> {
    Sft {
        step: u64,
        total: u64,
        loss: f64,
    },
    SftCached {
        path: &'a Path,
    },
    Eval {
        step: u64,
        result: &'a EvalResult,
    },
    Step {
        step: u64,
        total: u64,
        metrics: &'a serde_json::Map<String, Value>,
    },
    Checkpoint {
        path: &'a Path,
    },
}

/// The end of a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub run_dir: PathBuf,
    pub rule: String,
    pub seed: u64,
    pub sft_accuracy: Option<f64>,
    pub final_accuracy: f64,
    pub steps: u64,
    pub wall_seconds: f64,
    pub sample_tokens_per_s: f64,
}

/// Sets libtorch's thread count from the config (0: one per core) and returns it.
pub fn apply_threads(cfg: &Config) -> usize {
    let n = if cfg.threads > 0 {
        cfg.threads
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    };
    tch::set_num_threads(n as i32);
    n
}

fn device_of(cfg: &Config) -> Result<Device, TrainError> {
    apply_threads(cfg);
    let choice: DeviceChoice = cfg.device.parse().map_err(|e| TrainError::ConfigKey {
        file: "config".into(),
        key: "device".into(),
        message: format!("{e}"),
    })?;
    choice.resolve().map_err(TrainError::model)
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The first free run directory: `runs/<name>`, then `runs/<name>-2`, ... (an explicit
/// `run_dir` is used as given and must not already hold a run).
pub fn choose_run_dir(cfg: &Config) -> Result<PathBuf, TrainError> {
    if let Some(d) = &cfg.run_dir {
        if d.join("metrics.jsonl").exists() {
            return Err(TrainError::Data(format!(
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

/// The SFT cache entry for this (model, task, SFT settings, seed): a checkpoint directory under
/// `runs/sft-cache/`, shared by every run that would compute the same warm-up.
pub fn sft_cache_dir(cfg: &Config, run_dir: &Path) -> PathBuf {
    let key = json!({"model": cfg.model, "task": cfg.task, "sft": cfg.sft, "seed": cfg.seed,
                     "optim": [cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay, cfg.optim.grad_clip]});
    let digest = sha_hex(key.to_string().as_bytes());
    // Beside the run directory, so that the runs of one comparison (or of `runs/`) share it.
    let parent = run_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    parent.join("sft-cache").join(format!(
        "{}-seed{}-{}",
        cfg.task.name,
        cfg.seed,
        &digest[..12]
    ))
}

fn sha_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn eval_settings(cfg: &Config) -> EvalSettings {
    EvalSettings {
        prompts: cfg.eval.prompts,
        k: cfg.eval.k,
        temperature: cfg.eval.temperature,
        max_new_tokens: cfg.rollout.max_response_len,
        max_prompt_len: cfg.rollout.max_prompt_len,
        seed: mix(cfg.seed, 0xe7a1),
    }
}

/// Loads the starting policy: the SFT-warmed model (from the cache, or trained now), else the
/// configured model. Returns it with the held-out accuracy after SFT and where it lives.
fn starting_policy(
    cfg: &Config,
    run_dir: &Path,
    task: &dyn Task,
    eval_task: &dyn Task,
    device: Device,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<(Model, Option<f64>, Option<PathBuf>), TrainError> {
    let load = |spec: &str| Model::load(spec, device).map_err(TrainError::model);
    if cfg.sft.steps == 0 {
        let mut model = if cfg.model.path == "tiny" {
            Model::tiny(device, cfg.seed).map_err(TrainError::model)?
        } else {
            load(&cfg.model.path)?
        };
        attach_lora(cfg, &mut model)?;
        return Ok((model, None, None));
    }
    let cache = sft_cache_dir(cfg, run_dir);
    if let Ok(manifest) = checkpoint::verify(&cache) {
        on(Event::SftCached { path: &cache });
        let model = load(&cache.to_string_lossy())?;
        let acc = manifest.meta.get("sft_accuracy").and_then(Value::as_f64);
        return Ok((model, acc, Some(cache)));
    }
    let mut model = if cfg.model.path == "tiny" {
        Model::tiny(device, cfg.seed).map_err(TrainError::model)?
    } else {
        load(&cfg.model.path)?
    };
    attach_lora(cfg, &mut model)?;
    let total = cfg.sft.steps;
    run_sft(&mut model, task, cfg, |p| {
        on(Event::Sft {
            step: p.step,
            total,
            loss: p.loss,
        })
    })?;
    let result = evaluate(&model, eval_task, &eval_settings(cfg))?;
    checkpoint::write(
        &cache,
        json!({"sft_accuracy": result.accuracy, "sft": cfg.sft}),
        |dir| model.save(dir).map_err(TrainError::model),
    )?;
    Ok((model, Some(result.accuracy), Some(cache)))
}

/// Attaches the configured LoRA adapters (a model loaded from a folder saved with adapters
/// already has them).
fn attach_lora(cfg: &Config, model: &mut Model) -> Result<(), TrainError> {
    if let (Some(lora), None) = (&cfg.model.lora, model.lora()) {
        model.attach_lora(lora).map_err(TrainError::model)?;
    }
    Ok(())
}

/// The held-out task: `eval.task` when set, else none (the training task's test split is used).
fn eval_task_of(cfg: &Config) -> Result<Option<Box<dyn Task>>, TrainError> {
    cfg.eval
        .task
        .as_ref()
        .map(|t| create_task(t).map_err(TrainError::data))
        .transpose()
}

/// Saves model, optimizer and loop state as a checkpoint directory (fulcrum-model's layout,
/// inside the checksummed, atomically renamed directory of [`checkpoint::write`]).
fn save_checkpoint(
    dest: &Path,
    policy: &Policy,
    step: u64,
    pos: DataPosition,
    sft_accuracy: Option<f64>,
) -> Result<(), TrainError> {
    let meta = json!({"step": step, "data": pos, "sft_accuracy": sft_accuracy});
    checkpoint::write(dest, meta.clone(), |dir| {
        fulcrum_model::checkpoint::save_checkpoint(dir, &policy.model, &policy.opt, meta.clone())
            .map_err(TrainError::model)
    })?;
    Ok(())
}

fn schedule(cfg: &Config) -> LrSchedule {
    let o = &cfg.optim;
    match o.schedule.as_str() {
        "cosine" => LrSchedule::Cosine {
            peak: o.lr,
            min: o.lr * o.min_lr_ratio,
            warmup: o.warmup_steps,
            total: cfg.steps,
        },
        _ => LrSchedule::Constant {
            peak: o.lr,
            warmup: o.warmup_steps,
        },
    }
}

/// A fresh AdamW over `model` with the config's hyper-parameters (RL and SFT alike).
pub fn new_optimizer(cfg: &Config, model: &Model) -> AdamW {
    AdamW::new(
        model.var_store(),
        AdamWConfig {
            beta1: cfg.optim.beta1,
            beta2: cfg.optim.beta2,
            eps: cfg.optim.eps,
            weight_decay: cfg.optim.weight_decay,
        },
    )
}

/// Starts a new run from `cfg`.
pub fn train(cfg: &Config, on: &mut dyn FnMut(Event<'_>)) -> Result<Summary, TrainError> {
    let t0 = Instant::now();
    let device = device_of(cfg)?;
    let task = create_task(&cfg.task).map_err(TrainError::data)?;
    let eval_task = eval_task_of(cfg)?;
    let eval_task = eval_task.as_deref().unwrap_or(task.as_ref());
    // Code rewards: the sandbox is chosen (and printed) now, and recorded in config.toml.
    let sandbox = sandbox_for_tasks(cfg.sandbox, &[task.as_ref(), eval_task], cfg.seed)
        .map_err(TrainError::data)?;
    let run_dir = choose_run_dir(cfg)?;
    fs::create_dir_all(&run_dir).map_err(io_err(&run_dir))?;
    let mut resolved = cfg.clone();
    resolved.run_dir = Some(run_dir.clone());
    if let Some(mode) = sandbox {
        resolved.sandbox = SandboxChoice::Mode(mode);
    }
    let cfg_path = run_dir.join("config.toml");
    fs::write(&cfg_path, resolved.to_toml()).map_err(io_err(&cfg_path))?;
    start_fresh(
        &resolved,
        task.as_ref(),
        eval_task,
        device,
        &run_dir,
        t0,
        on,
    )
}

/// Step 0 of a run whose directory and config.toml exist: warm-up (cached), then the RL loop.
fn start_fresh(
    cfg: &Config,
    task: &dyn Task,
    eval_task: &dyn Task,
    device: Device,
    run_dir: &Path,
    t0: Instant,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<Summary, TrainError> {
    let (model, sft_accuracy, start_dir) =
        starting_policy(cfg, run_dir, task, eval_task, device, on)?;
    if let Some(acc) = sft_accuracy {
        let mut w = JsonlWriter::append(&run_dir.join("eval.jsonl"))?;
        w.write(&json!({"step": 0, "accuracy": acc, "phase": "sft"}))?;
    }
    if cfg.eval.at_start {
        let result = evaluate(&model, eval_task, &eval_settings(cfg))?;
        let mut rec = serde_json::to_value(&result).map_err(TrainError::data)?;
        rec["step"] = json!(0);
        rec["phase"] = json!("start");
        if let Some(o) = rec.as_object_mut() {
            o.remove("tokens_per_s");
        }
        JsonlWriter::append(&run_dir.join("eval.jsonl"))?.write(&rec)?;
        on(Event::Eval {
            step: 0,
            result: &result,
        });
    }
    let reference = reference_model(cfg, start_dir.as_deref(), device)?;
    let opt = new_optimizer(cfg, &model);
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
    rl_loop(
        cfg,
        (task, eval_task),
        policy,
        data,
        0,
        sft_accuracy,
        run_dir,
        t0,
        on,
    )
}

/// The frozen reference for the KL term: the starting policy, loaded again.
fn reference_model(
    cfg: &Config,
    start_dir: Option<&Path>,
    device: Device,
) -> Result<Option<Model>, TrainError> {
    if cfg.ppo.kl_coef == 0.0 {
        return Ok(None);
    }
    let spec = match start_dir {
        Some(d) => d.to_string_lossy().into_owned(),
        None if cfg.model.path == "tiny" => {
            return Ok(Some(
                Model::tiny(device, cfg.seed).map_err(TrainError::model)?,
            ));
        }
        None => cfg.model.path.clone(),
    };
    Ok(Some(Model::load(&spec, device).map_err(TrainError::model)?))
}

/// Continues the run in `run_dir` from its latest checkpoint.
pub fn resume(run_dir: &Path, on: &mut dyn FnMut(Event<'_>)) -> Result<Summary, TrainError> {
    let t0 = Instant::now();
    let cfg = Config::load(Some(&run_dir.join("config.toml")), &[])?;
    let device = device_of(&cfg)?;
    let task = create_task(&cfg.task).map_err(TrainError::data)?;
    let eval_task = eval_task_of(&cfg)?;
    let eval_task = eval_task.as_deref().unwrap_or(task.as_ref());
    sandbox_for_tasks(cfg.sandbox, &[task.as_ref(), eval_task], cfg.seed)
        .map_err(TrainError::data)?;
    let ckpts = run_dir.join("checkpoints");
    checkpoint::clean_leftovers(&ckpts)?;
    let Some((step, dir)) = checkpoint::list_steps(&ckpts)?.pop() else {
        // Killed before its first checkpoint: the run starts again from step 0, as it would
        // have gone (everything random derives from the seed and the step).
        for f in ["metrics.jsonl", "samples.jsonl", "eval.jsonl"] {
            let p = run_dir.join(f);
            if p.exists() {
                fs::remove_file(&p).map_err(io_err(&p))?;
            }
        }
        return start_fresh(&cfg, task.as_ref(), eval_task, device, run_dir, t0, on);
    };
    let manifest = checkpoint::verify(&dir)?;
    let pos: DataPosition = serde_json::from_value(manifest.meta["data"].clone()).map_err(|e| {
        TrainError::Checkpoint {
            path: dir.clone(),
            message: format!("manifest meta.data: {e}"),
        }
    })?;
    let sft_accuracy = manifest.meta["sft_accuracy"].as_f64();
    let model = Model::load(&dir.to_string_lossy(), device).map_err(TrainError::model)?;
    let mut opt = new_optimizer(&cfg, &model);
    fulcrum_model::checkpoint::load_optimizer(&dir, &mut opt).map_err(|e| {
        TrainError::Checkpoint {
            path: dir.clone(),
            message: e.to_string(),
        }
    })?;
    let start_dir = (cfg.sft.steps > 0).then(|| sft_cache_dir(&cfg, run_dir));
    let reference = reference_model(&cfg, start_dir.as_deref(), device)?;
    for f in ["metrics.jsonl", "samples.jsonl", "eval.jsonl"] {
        truncate_after(&run_dir.join(f), "step", step)?;
    }
    let policy = Policy {
        model,
        opt,
        reference,
    };
    rl_loop(
        &cfg,
        (task.as_ref(), eval_task),
        policy,
        DataStream::new(cfg.seed, pos),
        step,
        sft_accuracy,
        run_dir,
        t0,
        on,
    )
}

#[allow(clippy::too_many_arguments)]
fn rl_loop(
    cfg: &Config,
    (task, eval_task): (&dyn Task, &dyn Task),
    mut policy: Policy,
    mut data: DataStream,
    start: u64,
    sft_accuracy: Option<f64>,
    run_dir: &Path,
    t0: Instant,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<Summary, TrainError> {
    let mut metrics = JsonlWriter::append(&run_dir.join("metrics.jsonl"))?;
    let mut samples = JsonlWriter::append(&run_dir.join("samples.jsonl"))?;
    let mut evals = JsonlWriter::append(&run_dir.join("eval.jsonl"))?;
    let lr = schedule(cfg);
    let es = eval_settings(cfg);
    let (mut sample_tokens, mut sample_secs) = (0.0, 0.0);
    let mut last_eval: Option<EvalResult> = None;
    for step in start + 1..=cfg.steps {
        let report = grpo_step(&mut policy, task, cfg, step, &mut data, lr.lr(step - 1))?;
        sample_tokens += report.metrics["sample/tokens"].as_f64().unwrap_or(0.0);
        sample_secs += report.metrics["time/sample"].as_f64().unwrap_or(0.0);
        metrics.write(&report.metrics)?;
        for s in &report.samples {
            samples.write(s)?;
        }
        let map: serde_json::Map<String, Value> = report.metrics.into_iter().collect();
        on(Event::Step {
            step,
            total: cfg.steps,
            metrics: &map,
        });

        if (cfg.eval_every > 0 && step % cfg.eval_every == 0) || step == cfg.steps {
            let result = evaluate(&policy.model, eval_task, &es)?;
            let mut rec = serde_json::to_value(&result).map_err(TrainError::data)?;
            rec["step"] = json!(step);
            // Wall-clock rates vary between runs; the eval file holds only what is reproducible.
            if let Some(o) = rec.as_object_mut() {
                o.remove("tokens_per_s");
            }
            evals.write(&rec)?;
            on(Event::Eval {
                step,
                result: &result,
            });
            last_eval = Some(result);
        }
        if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) || step == cfg.steps {
            let dest = run_dir.join("checkpoints").join(format!("step-{step}"));
            save_checkpoint(&dest, &policy, step, data.position(), sft_accuracy)?;
            on(Event::Checkpoint { path: &dest });
        }
    }
    let final_dir = run_dir.join("checkpoints").join("final");
    save_checkpoint(
        &final_dir,
        &policy,
        cfg.steps,
        data.position(),
        sft_accuracy,
    )?;
    let final_accuracy = match last_eval {
        Some(r) => r.accuracy,
        None => evaluate(&policy.model, eval_task, &es)?.accuracy,
    };
    let summary = Summary {
        run_dir: run_dir.to_path_buf(),
        rule: cfg.rule.name().to_string(),
        seed: cfg.seed,
        sft_accuracy,
        final_accuracy,
        steps: cfg.steps,
        wall_seconds: t0.elapsed().as_secs_f64(),
        sample_tokens_per_s: sample_tokens / sample_secs.max(1e-9),
    };
    let path = run_dir.join("summary.json");
    let text = serde_json::to_string_pretty(&summary).map_err(TrainError::data)?;
    fs::write(&path, text + "\n").map_err(io_err(&path))?;
    Ok(summary)
}

/// Runs (or reuses) the SFT warm-up alone; returns where the warmed model is and its held-out
/// accuracy.
pub fn warm_up(
    cfg: &Config,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<(PathBuf, Option<f64>), TrainError> {
    let device = device_of(cfg)?;
    let task = create_task(&cfg.task).map_err(TrainError::data)?;
    let run_dir = choose_run_dir(cfg)?;
    let eval_task = eval_task_of(cfg)?;
    let eval_task = eval_task.as_deref().unwrap_or(task.as_ref());
    let (_, accuracy, dir) = starting_policy(cfg, &run_dir, task.as_ref(), eval_task, device, on)?;
    let dir = dir.ok_or_else(|| TrainError::Data("sft.steps is 0: no warm-up".into()))?;
    Ok((dir, accuracy))
}
