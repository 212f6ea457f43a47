//! What a user names as a model (`model.path`, `--model`), parsed once: the built-in `tiny`, an
//! HF folder, a `.gguf` file, or a fulcrum run directory (meaning its final checkpoint).

use std::path::{Path, PathBuf};

use tch::Device;

use crate::error::{ModelError, Result};
use crate::model::Model;

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

    /// Loads the model onto `device`; `tiny_seed` initialises the built-in model.
    pub fn load(&self, device: Device, tiny_seed: u64) -> Result<Model> {
        match self {
            ModelSpec::Tiny => Model::tiny(device, tiny_seed),
            ModelSpec::Hf(p) => Model::load_hf(p, device),
            ModelSpec::Gguf(p) => Model::load_gguf(p, device),
            ModelSpec::RunDir(p) => Model::load_hf(&p.join("checkpoints").join("final"), device),
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
}
