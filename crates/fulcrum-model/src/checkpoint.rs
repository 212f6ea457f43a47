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

/// The fp32 master weights (mixed precision) beside a model saved in bf16: resume continues
/// from them, while the folder still loads anywhere as the bf16 model.
pub const MASTER_FILE: &str = "master_weights.safetensors";

/// Writes the model and the optimizer's moments into `dir` (created if needed); returns the
/// optimizer's step count, which the caller records with its metadata.
pub fn save_model_and_optimizer(dir: &Path, model: &Model, opt: &AdamW) -> Result<i64> {
    let (state, step) = opt.state();
    save_checkpoint_files(dir, model, &state, opt.master_weights().as_deref())?;
    Ok(step)
}

/// Writes the model, AdamW-named optimizer moments `state` and, when given, fp32 `masters`
/// ([`MASTER_FILE`]) into `dir`: the files of [`save_model_and_optimizer`], from state that
/// may have been gathered from the ranks of a sharded optimizer.
pub fn save_checkpoint_files(
    dir: &Path,
    model: &Model,
    state: &[(String, Tensor)],
    masters: Option<&[(String, Tensor)]>,
) -> Result<()> {
    model.save(dir)?;
    save_named(state, &dir.join(OPTIMIZER_FILE))?;
    if let Some(m) = masters {
        save_named(m, &dir.join(MASTER_FILE))?;
    }
    Ok(())
}

/// The named tensors of a checkpoint file, on `device`.
pub fn read_named(path: &Path, device: Device) -> Result<Vec<(String, Tensor)>> {
    let named = Tensor::read_safetensors(path).ctx(|| format!("reading {}", path.display()))?;
    Ok(named
        .into_iter()
        .map(|(n, t)| (n, t.to_device(device)))
        .collect())
}

/// Loads the model of a checkpoint (or any HF folder) onto `device`.
pub fn load_model(dir: &Path, device: Device) -> Result<Model> {
    Model::load_hf(dir, device)
}

/// Restores the optimizer's moments of a checkpoint into `opt` (built for the loaded model),
/// at optimizer step `step`.
pub fn load_optimizer(dir: &Path, opt: &mut AdamW, step: i64) -> Result<()> {
    let path = dir.join(OPTIMIZER_FILE);
    let named = read_named(&path, opt.device())?;
    opt.load_state(named, step, &path)?;
    let masters = dir.join(MASTER_FILE);
    if opt.master_weights().is_some() && masters.exists() {
        opt.load_master_weights(read_named(&masters, opt.device())?, &masters)?;
    }
    Ok(())
}
