//! The model's and the optimizer's files of a checkpoint, and nothing else.
//!
//! A checkpoint folder holds the model exactly as [`Model::save`] writes it (so it loads
//! anywhere an HF folder does) plus [`OPTIMIZER_FILE`], the AdamW moments named
//! `exp_avg.<param>` and `exp_avg_sq.<param>`. Where the folder goes, how it is made atomic,
//! its format version and the metadata beside it (the optimizer's step, the trainer's state)
//! belong to the trainer (`fulcrum-train`'s `checkpoint.rs`): one layer renames and versions.

use std::path::Path;

use tch::{Device, Tensor};

use crate::error::{Result, TorchContext};
use crate::model::{save_named, Model};
use crate::optim::AdamW;

/// The optimizer state's file inside a checkpoint folder.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";

/// Writes the model and the optimizer's moments into `dir` (created if needed); returns the
/// optimizer's step count, which the caller records with its metadata.
pub fn save_model_and_optimizer(dir: &Path, model: &Model, opt: &AdamW) -> Result<i64> {
    model.save(dir)?;
    let (state, step) = opt.state();
    save_named(&state, &dir.join(OPTIMIZER_FILE))?;
    Ok(step)
}

/// Loads the model of a checkpoint (or any HF folder) onto `device`.
pub fn load_model(dir: &Path, device: Device) -> Result<Model> {
    Model::load_hf(dir, device)
}

/// Restores the optimizer's moments of a checkpoint into `opt` (built for the loaded model),
/// at optimizer step `step`.
pub fn load_optimizer(dir: &Path, opt: &mut AdamW, step: i64) -> Result<()> {
    let path = dir.join(OPTIMIZER_FILE);
    let named = Tensor::read_safetensors(&path).ctx(|| format!("reading {}", path.display()))?;
    let device = opt.device();
    let named = named
        .into_iter()
        .map(|(n, t)| (n, t.to_device(device)))
        .collect();
    opt.load_state(named, step, &path)
}
