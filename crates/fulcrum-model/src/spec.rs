//! What a user names as a model (`model.path`, `--model`), parsed once: the built-in `tiny`, an
//! HF folder, a `.gguf` file, or a fulcrum run directory (meaning its final checkpoint).
//!
//! Every folder is opened through `Model::load_hf`, which verifies a checkpoint folder (one with
//! a `manifest.json`: a run's `checkpoints/final` or `step-N`, an SFT cache entry) against its
//! manifest before reading it; a run's final checkpoint must have one.

use std::path::{Path, PathBuf};

use tch::Device;

use crate::checkpoint::MANIFEST;
use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::model::Model;
use crate::prompt::PromptEncoder;
use crate::tokenizer::Tokenizer;

/// A model source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// The built-in character-level model, randomly initialised from a seed.
    Tiny,
    /// A Hugging Face model folder (`config.json`, `model.safetensors`, tokenizer files).
    Hf(PathBuf),
    /// A GGUF file, dequantised on load.
    Gguf(PathBuf),
    /// A fulcrum run directory: its `checkpoints/final` folder.
    RunDir(PathBuf),
}

impl ModelSpec {
    /// Reads a spec: `tiny`, a run directory (one with `checkpoints/final`), an HF folder, or a
    /// `.gguf` file. A path that does not exist, or a file of another kind, is an error.
    pub fn parse(spec: &str) -> Result<ModelSpec> {
        if spec == "tiny" {
            return Ok(ModelSpec::Tiny);
        }
        let path = Path::new(spec);
        if path.join("checkpoints").join("final").is_dir() {
            Ok(ModelSpec::RunDir(path.to_path_buf()))
        } else if path.join("checkpoints").is_dir() && path.join("config.toml").is_file() {
            Err(ModelError::Invalid(format!(
                "{spec}: a run directory without a final checkpoint (the run did not finish: \
                 resume it with `fulcrum train --resume {spec}`, or name one of its \
                 checkpoints/step-N folders)"
            )))
        } else if path.is_dir() {
            Ok(ModelSpec::Hf(path.to_path_buf()))
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
            && path.is_file()
        {
            Ok(ModelSpec::Gguf(path.to_path_buf()))
        } else if path.exists() {
            Err(ModelError::Invalid(format!(
                "{spec}: expected `tiny`, an HF model folder, a .gguf file or a run directory"
            )))
        } else {
            Err(ModelError::io(
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
            ))
        }
    }

    /// The folder or file the weights come from (`None` for `tiny`).
    pub fn weights_path(&self) -> Option<PathBuf> {
        match self {
            ModelSpec::Tiny => None,
            ModelSpec::Hf(p) | ModelSpec::Gguf(p) => Some(p.clone()),
            ModelSpec::RunDir(p) => Some(p.join("checkpoints").join("final")),
        }
    }

    /// The model's tokenizer, chat template and context length, read without its weights
    /// (the config is checked as for loading): what data can be checked with before any model
    /// work.
    pub fn prompt_encoder(&self) -> Result<PromptEncoder> {
        match self {
            ModelSpec::Tiny => {
                let tokenizer = Tokenizer::chars()?;
                let max_positions = ModelConfig::tiny(1, 0).max_position_embeddings as usize;
                Ok(PromptEncoder {
                    tokenizer,
                    chat: None,
                    max_positions,
                })
            }
            ModelSpec::Hf(p) => crate::load::hf::read_prompt_encoder(p),
            ModelSpec::Gguf(p) => crate::load::gguf::read_prompt_encoder(p),
            ModelSpec::RunDir(p) => {
                crate::load::hf::read_prompt_encoder(&p.join("checkpoints").join("final"))
            }
        }
    }

    /// Loads the model onto `device`; `tiny_seed` initialises the built-in model.
    pub fn load(&self, device: Device, tiny_seed: u64) -> Result<Model> {
        match self {
            ModelSpec::Tiny => Model::tiny(device, tiny_seed),
            ModelSpec::Hf(p) => Model::load_hf(p, device),
            ModelSpec::Gguf(p) => Model::load_gguf(p, device),
            ModelSpec::RunDir(p) => {
                // Written atomically with its manifest: one without is not a finished checkpoint.
                let dir = p.join("checkpoints").join("final");
                if !dir.join(MANIFEST).is_file() {
                    return Err(ModelError::Checkpoint {
                        path: dir,
                        message: format!(
                            "no {MANIFEST} (incomplete, or not written by fulcrum): not loaded"
                        ),
                    });
                }
                Model::load_hf(&dir, device)
            }
        }
    }
}

impl std::fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSpec::Tiny => f.write_str("tiny"),
            ModelSpec::Hf(p) | ModelSpec::Gguf(p) | ModelSpec::RunDir(p) => {
                write!(f, "{}", p.display())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_spec_is_recognised() {
        let dir = std::env::temp_dir().join(format!("fulcrum-spec-{}", std::process::id()));
        let run = dir.join("run");
        std::fs::create_dir_all(run.join("checkpoints/final")).unwrap();
        std::fs::write(dir.join("m.gguf"), b"x").unwrap();
        std::fs::write(dir.join("m.bin"), b"x").unwrap();
        assert_eq!(ModelSpec::parse("tiny").unwrap(), ModelSpec::Tiny);
        assert_eq!(
            ModelSpec::parse(run.to_str().unwrap()).unwrap(),
            ModelSpec::RunDir(run.clone())
        );
        assert_eq!(
            ModelSpec::parse(dir.to_str().unwrap()).unwrap(),
            ModelSpec::Hf(dir.clone())
        );
        let gguf = dir.join("m.gguf");
        assert_eq!(
            ModelSpec::parse(gguf.to_str().unwrap()).unwrap(),
            ModelSpec::Gguf(gguf)
        );
        assert!(ModelSpec::parse(dir.join("m.bin").to_str().unwrap()).is_err());
        assert!(ModelSpec::parse(dir.join("absent").to_str().unwrap()).is_err());
        assert_eq!(
            ModelSpec::RunDir(run.clone()).weights_path(),
            Some(run.join("checkpoints/final"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_run_without_a_verified_final_checkpoint_is_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        // Interrupted: checkpoints but no final.
        std::fs::create_dir_all(run.join("checkpoints/step-2")).unwrap();
        std::fs::write(run.join("config.toml"), "").unwrap();
        let e = ModelSpec::parse(run.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("without a final checkpoint") && e.contains("--resume"),
            "{e}"
        );
        // A final folder without its manifest.
        std::fs::create_dir_all(run.join("checkpoints/final")).unwrap();
        let spec = ModelSpec::parse(run.to_str().unwrap()).unwrap();
        let e = spec.load(Device::Cpu, 0).unwrap_err().to_string();
        assert!(
            e.contains("checkpoints/final") && e.contains("no manifest.json"),
            "{e}"
        );
    }
}
