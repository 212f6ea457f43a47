//! The starting policy of a run: the configured model, or its SFT warm-up, trained once and
//! cached in `sft-cache/` beside the run directory so that every run computing the same warm-up
//! (same model, task, SFT and optimizer settings, seed) shares it.
//!
//! A cache entry is a checkpoint: it is used only when it verifies against its manifest
//! (`checkpoint::verify`, the check every load of a checkpoint makes), and trained again
//! otherwise. Before any step, every prompt of the run's tasks, and every demonstration the
//! warm-up trains on, must encode with the model's tokenizer ([`check_vocabulary`]).

use std::path::{Path, PathBuf};

use fulcrum_model::{Model, ModelSpec};
use fulcrum_tasks::Task;
use serde_json::{json, Value};
use tch::Device;

use crate::checkpoint;
use crate::config::Config;
use crate::error::TrainError;
use crate::eval::{evaluate, EvalSettings};
use crate::event::Event;
use crate::sft::run_sft;

/// Where a run starts: the model, its held-out accuracy after SFT, and the folder it was
/// loaded from (the SFT cache entry) when there was a warm-up.
pub struct Start {
    pub model: Model,
    pub sft_accuracy: Option<f64>,
    pub dir: Option<PathBuf>,
}

/// The SFT cache entry for this (model, task, SFT settings, seed): a checkpoint directory under
/// `sft-cache/` beside the run directory.
pub fn sft_cache_dir(cfg: &Config, run_dir: &Path) -> PathBuf {
    // The warm-up always trains in f32 (`model.dtype` is the RL precision), so runs that differ
    // only in it share one warm-up.
    let model = crate::ModelConfig {
        dtype: fulcrum_model::Dtype::F32,
        ..cfg.model.clone()
    };
    let key = json!({"model": model, "task": cfg.task, "sft": cfg.sft, "seed": cfg.sft_seed(),
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
        cfg.sft_seed(),
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

/// The configured model with its LoRA adapters (the built-in model seeded by the run's seed).
pub fn configured_model(
    cfg: &Config,
    spec: &ModelSpec,
    device: Device,
) -> Result<Model, TrainError> {
    let mut model = spec.load(device, cfg.seed)?;
    // A model loaded from a folder saved with adapters already has them.
    if let (Some(lora), None) = (&cfg.model.lora, model.lora()) {
        model.attach_lora(lora)?;
    }
    Ok(model)
}

/// Every prompt of `task` and `eval_task`, and with `demonstrations` every demonstration of
/// `task` (what the SFT warm-up trains on), must encode with `model`'s tokenizer: a character
/// it lacks (the built-in model knows newline and printable ASCII) is an error naming the
/// file, line, field and character, before any step rather than as a tokenizer error mid-run.
pub fn check_vocabulary(
    model: &Model,
    (task, eval_task): (&dyn Task, &dyn Task),
    demonstrations: bool,
) -> Result<(), TrainError> {
    let Ok(tokenizer) = model.tokenizer() else {
        return Ok(());
    };
    let unknown = |text: &str| tokenizer.unknown_char(text);
    task.check_text(&unknown, demonstrations)?;
    eval_task.check_text(&unknown, false)?;
    Ok(())
}

/// Loads the starting policy: the SFT-warmed model (from the cache, or trained now and
/// cached), else the configured model; the tasks' text checked against its vocabulary.
pub fn starting_policy(
    cfg: &Config,
    spec: &ModelSpec,
    run_dir: &Path,
    (task, eval_task): (&dyn Task, &dyn Task),
    device: Device,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<Start, TrainError> {
    let tasks = (task, eval_task);
    if cfg.sft.steps == 0 {
        let model = configured_model(cfg, spec, device)?;
        check_vocabulary(&model, tasks, false)?;
        return Ok(Start {
            model,
            sft_accuracy: None,
            dir: None,
        });
    }
    let cache = sft_cache_dir(cfg, run_dir);
    // A damaged entry (a file missing, truncated or corrupt) is trained again and replaced.
    if let Ok(manifest) = checkpoint::verify(&cache) {
        let model = Model::load_hf(&cache, device)?;
        check_vocabulary(&model, tasks, false)?;
        on(Event::SftCached { path: &cache });
        return Ok(Start {
            model,
            sft_accuracy: manifest.meta.get("sft_accuracy").and_then(Value::as_f64),
            dir: Some(cache),
        });
    }
    // The warm-up starts from the model of its own seed.
    let warm = Config {
        seed: cfg.sft_seed(),
        ..cfg.clone()
    };
    let mut model = configured_model(&warm, spec, device)?;
    check_vocabulary(&model, tasks, true)?;
    let total = cfg.sft.steps;
    let skipped = run_sft(&mut model, task, cfg, |p| {
        on(Event::Sft {
            step: p.step,
            total,
            loss: p.loss,
            skipped: p.skipped,
        })
    })?;
    let result = evaluate(&model, eval_task, &EvalSettings::of(&warm))?;
    checkpoint::write(
        &cache,
        json!({"sft_accuracy": result.accuracy, "sft": cfg.sft, "sft_skipped_steps": skipped}),
        |dir| Ok(model.save(dir)?),
    )?;
    Ok(Start {
        model,
        sft_accuracy: Some(result.accuracy),
        dir: Some(cache),
    })
}

/// The frozen reference for the KL term: the starting policy, loaded again (`None` when KL is
/// off).
pub fn reference_model(
    cfg: &Config,
    spec: &ModelSpec,
    start_dir: Option<&Path>,
    device: Device,
) -> Result<Option<Model>, TrainError> {
    if cfg.ppo.kl_coef == 0.0 {
        return Ok(None);
    }
    Ok(Some(match start_dir {
        Some(d) => Model::load_hf(d, device)?,
        None => spec.load(device, cfg.seed)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sft_seed_shares_one_warm_up_across_run_seeds() {
        let with = |seed: u64, sft_seed: Option<u64>| {
            let mut c = Config {
                seed,
                ..Config::default()
            };
            c.sft.seed = sft_seed;
            sft_cache_dir(&c, Path::new("runs/x/ba-seed1"))
        };
        // Without it each seed warms up on its own; with it, every seed shares one entry.
        assert_ne!(with(1, None), with(2, None));
        assert_eq!(with(1, Some(7)), with(2, Some(7)));
        assert_ne!(with(1, Some(7)), with(1, Some(8)));
        let name = with(1, Some(7));
        let name = name.file_name().map(|n| n.to_string_lossy().into_owned());
        assert!(name.is_some_and(|n| n.starts_with("arithmetic-seed7-")));
        // A run whose seed equals the sft seed is the same warm-up as without sft.seed (the
        // key differs only by the recorded setting).
        assert_eq!(with(7, None).parent(), with(7, Some(7)).parent());
    }

    #[test]
    fn a_prompt_the_model_cannot_encode_is_named_by_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train.jsonl");
        std::fs::write(
            &path,
            "{\"prompt\": \"Q: 1+2\", \"answer\": \"3\"}\n{\"prompt\": \"Q: 1\u{d7}2\", \"answer\": \"2\"}\n",
        )
        .unwrap();
        let task = fulcrum_tasks::create_task(&fulcrum_tasks::TaskConfig {
            name: "jsonl".into(),
            path: Some(path.clone()),
            ..Default::default()
        })
        .unwrap();
        let arithmetic = fulcrum_tasks::create_task(&Default::default()).unwrap();
        let tiny = Model::tiny(Device::Cpu, 0).unwrap();
        check_vocabulary(&tiny, (arithmetic.as_ref(), arithmetic.as_ref()), true).unwrap();
        let e = check_vocabulary(&tiny, (arithmetic.as_ref(), task.as_ref()), true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{}:2: prompt:", path.display())) && e.contains("U+00D7"),
            "{e}"
        );
    }
}
