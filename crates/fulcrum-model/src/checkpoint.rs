//! Checkpoints: the model as a valid HF folder plus the optimizer state, written atomically.
//!
//! A checkpoint folder holds `config.json`, `model.safetensors`, `tokenizer.json` (and
//! `tokenizer_config.json`) exactly as `Model::save` writes them, so it loads anywhere an HF
//! folder does; plus `optimizer.safetensors` (AdamW moments, named `exp_avg.<param>` and
//! `exp_avg_sq.<param>`) and `checkpoint.json` (format version, optimizer step, and a JSON value
//! the trainer owns: RNG state, data position, ...). Everything is written under
//! `<dir>.partial` and renamed at the end, so a crash never leaves a half checkpoint.

use std::path::{Path, PathBuf};

use serde_json::json;
use tch::{Device, Tensor};

use crate::error::{ModelError, Result, TorchContext};
use crate::model::{save_named, Model};
use crate::optim::AdamW;

/// Version of the checkpoint layout; a different version is refused on load.
pub const FORMAT_VERSION: u64 = 1;

const OPTIMIZER_FILE: &str = "optimizer.safetensors";
const META_FILE: &str = "checkpoint.json";

fn partial_path(dir: &Path) -> PathBuf {
    let mut name = dir
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".partial");
    dir.with_file_name(name)
}

/// Write a checkpoint to `dir`, which must not exist yet.
pub fn save_checkpoint(
    dir: &Path,
    model: &Model,
    opt: &AdamW,
    trainer_state: serde_json::Value,
) -> Result<()> {
    if dir.exists() {
        return Err(ModelError::io(
            dir,
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "checkpoint folder already exists",
            ),
        ));
    }
    let tmp = partial_path(dir);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| ModelError::io(&tmp, e))?;
    }
    model.save(&tmp)?;
    let (state, step) = opt.state();
    save_named(&state, &tmp.join(OPTIMIZER_FILE))?;
    let meta = json!({
        "format_version": FORMAT_VERSION,
        "optimizer_step": step,
        "adamw": {
            "beta1": opt.config.beta1,
            "beta2": opt.config.beta2,
            "eps": opt.config.eps,
            "weight_decay": opt.config.weight_decay,
        },
        "trainer": trainer_state,
    });
    let meta_path = tmp.join(META_FILE);
    std::fs::write(&meta_path, meta.to_string()).map_err(|e| ModelError::io(&meta_path, e))?;
    std::fs::rename(&tmp, dir).map_err(|e| ModelError::io(dir, e))
}

/// Load the model of a checkpoint (or any HF folder) onto `device`.
pub fn load_model(dir: &Path, device: Device) -> Result<Model> {
    Model::load_hf(dir, device)
}

/// Restore the optimizer state of a checkpoint into `opt` (built for the loaded model) and
/// return the trainer's JSON state.
pub fn load_optimizer(dir: &Path, opt: &mut AdamW) -> Result<serde_json::Value> {
    let meta_path = dir.join(META_FILE);
    let text = std::fs::read_to_string(&meta_path).map_err(|e| ModelError::io(&meta_path, e))?;
    let meta: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Json {
        path: meta_path.clone(),
        message: e.to_string(),
    })?;
    let field = |name: &str, message: String| ModelError::Config {
        path: meta_path.clone(),
        field: name.into(),
        message,
    };
    let version = meta.get("format_version").and_then(|v| v.as_u64());
    if version != Some(FORMAT_VERSION) {
        return Err(field(
            "format_version",
            format!("expected {FORMAT_VERSION}, got {version:?} (convert the checkpoint first)"),
        ));
    }
    let step = meta
        .get("optimizer_step")
        .and_then(|v| v.as_i64())
        .ok_or_else(|| field("optimizer_step", "missing or not an integer".into()))?;
    let path = dir.join(OPTIMIZER_FILE);
    let named = Tensor::read_safetensors(&path).ctx(|| format!("reading {}", path.display()))?;
    let device = opt.device();
    let named = named
        .into_iter()
        .map(|(n, t)| (n, t.to_device(device)))
        .collect();
    opt.load_state(named, step, &path)?;
    Ok(meta
        .get("trainer")
        .cloned()
        .unwrap_or(serde_json::Value::Null))
}
