//! The final policy as files others open (`[export]`, docs/training.md "The final policy as files
//! others open"): inside `checkpoints/final/`, beside the checkpoint's own files,
//!
//! - `hf/` (`export.hf`, default on): a plain HF folder, LoRA adapters folded in, as
//!   `model-0000K-of-0000N.safetensors` shards of at most [`MAX_SHARD_BYTES`] with
//!   `model.safetensors.index.json`, `config.json`, `generation_config.json`, `tokenizer.json`
//!   and a complete `tokenizer_config.json` with the chat template (`fulcrum_model::hf_meta`);
//! - `adapter/` (with `export.hf`, LoRA runs only): the adapters alone in PEFT's format
//!   (`adapter_config.json`, `adapter_model.safetensors`), for PEFT and vLLM on the base model;
//! - `model.gguf` (`export.gguf`, default off): a GGUF file for llama.cpp, adapters folded in,
//!   matrices in `rollout.push_dtype`; its metadata copied from the run's model file when that
//!   is a GGUF, else made from the model (`GgufTemplate::for_model`).
//!
//! They are written by rank 0 into the checkpoint's temporary folder (every rank holds the same
//! weights) and listed in its manifest, so `final/` appears with them or not at all. A run of
//! the built-in `tiny` model exports nothing: no tool outside fulcrum knows its tokenizer.
//! Any other checkpoint (`step-N`, an SFT cache entry) becomes the same files with
//! `fulcrum convert`.

use std::path::{Path, PathBuf};

use fulcrum_model::save_gguf::GgufTemplate;
use fulcrum_model::{GgufDtype, Model, ModelSpec};

use crate::checkpoint::save_policy_with;
use crate::config::Config;
use crate::error::TrainError;
use crate::policy::Policy;
use crate::ranks::Ranks;

/// The HF folder inside a final checkpoint.
pub const HF_DIR: &str = "hf";
/// The PEFT adapter folder inside a LoRA run's final checkpoint.
pub const ADAPTER_DIR: &str = "adapter";
/// The GGUF file inside a final checkpoint.
pub const GGUF_FILE: &str = "model.gguf";
/// The largest shard of `hf/`: what transformers' `save_pretrained` long wrote and every loader
/// reads; a model under it is one shard.
pub const MAX_SHARD_BYTES: u64 = 5_000_000_000;

/// Where a GGUF export's metadata comes from.
#[derive(Debug, Clone, PartialEq)]
enum GgufSource {
    /// The run's model file: every key of it kept, the tensors replaced.
    Template(PathBuf),
    /// Made from the model's config, tokenizer and declared tokens.
    Made,
}

/// Which exports a run's final checkpoint gets, decided from its config and model.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportPlan {
    hf: bool,
    gguf: Option<(GgufDtype, GgufSource)>,
    /// The HF folder the run started from, named in the PEFT adapter's config as its base.
    base: Option<PathBuf>,
}

impl ExportPlan {
    /// The exports of a run of `cfg` on the model `spec` names (none for `tiny`).
    pub fn of(cfg: &Config, spec: &ModelSpec) -> ExportPlan {
        let (hf, gguf) = (cfg.export.hf, cfg.export.gguf);
        let dtype = cfg.rollout.push_dtype;
        match spec {
            ModelSpec::Tiny => ExportPlan {
                hf: false,
                gguf: None,
                base: None,
            },
            ModelSpec::Gguf(p) => ExportPlan {
                hf,
                gguf: gguf.then(|| (dtype, GgufSource::Template(p.clone()))),
                base: None,
            },
            ModelSpec::Hf(p) => ExportPlan {
                hf,
                gguf: gguf.then_some((dtype, GgufSource::Made)),
                // A folder with fulcrum's own adapter files (a LoRA checkpoint) is no base that
                // transformers opens: the adapter then names none.
                base: (!p.join(fulcrum_model::lora::ADAPTER_CONFIG).exists())
                    .then(|| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())),
            },
            ModelSpec::RunDir(_) => ExportPlan {
                hf,
                gguf: gguf.then_some((dtype, GgufSource::Made)),
                base: None,
            },
        }
    }

    /// Writes the exports of `model` into the checkpoint folder `dir` (see the module).
    pub fn write(&self, model: &Model, dir: &Path) -> Result<(), TrainError> {
        if self.hf {
            let weights: u64 = model
                .var_store()
                .variables()
                .iter()
                .filter(|(n, _)| !fulcrum_model::lora::is_adapter_name(n))
                .map(|(_, t)| fulcrum_model::shards::tensor_bytes(t))
                .sum();
            let shards = weights.div_ceil(MAX_SHARD_BYTES).max(1) as usize;
            let all: Vec<usize> = (0..shards).collect();
            model.save_merged_shards(&dir.join(HF_DIR), shards, &all, true)?;
            if model.lora().is_some() {
                let adapter = dir.join(ADAPTER_DIR);
                model.save_peft_adapter(&adapter)?;
                if let Some(base) = &self.base {
                    name_base(&adapter, base)?;
                }
            }
        }
        if let Some((dtype, source)) = &self.gguf {
            let out = dir.join(GGUF_FILE);
            let template = match source {
                GgufSource::Template(p) => GgufTemplate::read(p)?,
                GgufSource::Made => GgufTemplate::for_model(model, &out)?,
            };
            model.save_gguf(&template, &out, *dtype)?;
        }
        Ok(())
    }
}

/// Names `base` in a PEFT adapter's `adapter_config.json` (`base_model_name_or_path`), so that
/// `AutoPeftModelForCausalLM` finds the model the adapter was trained on.
fn name_base(adapter: &Path, base: &Path) -> Result<(), TrainError> {
    let path = adapter.join(fulcrum_model::lora::ADAPTER_CONFIG);
    let text = std::fs::read_to_string(&path).map_err(TrainError::io(&path))?;
    let mut cfg: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        TrainError::Model(fulcrum_model::ModelError::Json {
            path: path.clone(),
            message: e.to_string(),
        })
    })?;
    cfg["base_model_name_or_path"] = serde_json::json!(base.display().to_string());
    let text = serde_json::to_string_pretty(&cfg).map_err(|e| {
        TrainError::Model(fulcrum_model::ModelError::Json {
            path: path.clone(),
            message: e.to_string(),
        })
    })?;
    std::fs::write(&path, text).map_err(TrainError::io(&path))
}

/// Saves the final checkpoint `dest` ([`crate::checkpoint::save_policy`]) with the exports of
/// `plan` inside it. Every rank calls it; rank 0 writes.
pub fn save_final(
    dest: &Path,
    policy: &Policy,
    ranks: &mut Ranks,
    meta: serde_json::Value,
    plan: &ExportPlan,
) -> Result<(), TrainError> {
    save_policy_with(dest, policy, ranks, meta, |dir| {
        plan.write(&policy.model, dir)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_follows_the_config_and_the_model_source() {
        let mut cfg = Config::default();
        let gguf = ModelSpec::Gguf(PathBuf::from("m.gguf"));
        let plan = ExportPlan::of(&cfg, &gguf);
        assert!(plan.hf && plan.gguf.is_none());
        cfg.export.gguf = true;
        let plan = ExportPlan::of(&cfg, &gguf);
        assert_eq!(
            plan.gguf,
            Some((
                cfg.rollout.push_dtype,
                GgufSource::Template(PathBuf::from("m.gguf"))
            ))
        );
        let plan = ExportPlan::of(&cfg, &ModelSpec::Hf(PathBuf::from("no-such-folder")));
        assert_eq!(plan.gguf, Some((cfg.rollout.push_dtype, GgufSource::Made)));
        assert_eq!(plan.base, Some(PathBuf::from("no-such-folder")));
        let nothing = |p: ExportPlan| !p.hf && p.gguf.is_none();
        assert!(nothing(ExportPlan::of(&cfg, &ModelSpec::Tiny)));
        cfg.export.hf = false;
        cfg.export.gguf = false;
        assert!(nothing(ExportPlan::of(&cfg, &gguf)));
    }
}
