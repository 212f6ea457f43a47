//! HF model folders: `config.json`, `model.safetensors` or sharded safetensors with
//! `model.safetensors.index.json`, `tokenizer.json` and `tokenizer_config.json` (chat template).
//!
//! The tokenizer and chat template are optional (reference fixtures have neither); asking for
//! them later is then an error. Writing a folder is in `Model::save`.
//!
//! A folder with a `manifest.json` is a fulcrum checkpoint: its files are verified against the
//! manifest before anything is read (`checkpoint.rs`). Every safetensors file is read through
//! `safetensors.rs`, which checks the header against the file before any tensor is made.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use tch::Tensor;

use crate::chat_template::ChatTemplate;
use crate::checkpoint::verify_model_files;
use crate::config::{Field, HfConfig, ModelConfig};
use crate::error::{ModelError, Result};
use crate::tokenizer::Tokenizer;

/// What an HF folder holds, read from disk but not yet on a device.
pub struct HfFolder {
    pub config: ModelConfig,
    pub tensors: HashMap<String, Tensor>,
    /// The weight file (or index) named in errors.
    pub weights_path: PathBuf,
    pub tokenizer: Option<Tokenizer>,
    pub chat: Option<ChatTemplate>,
}

/// The safetensors files of a folder: the single file, or every shard named by the index.
fn weight_files(dir: &Path) -> Result<(PathBuf, Vec<PathBuf>)> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok((single.clone(), vec![single]));
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return Err(ModelError::io(
            &single,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no model.safetensors nor model.safetensors.index.json in the folder",
            ),
        ));
    }
    let text = std::fs::read_to_string(&index).map_err(|e| ModelError::io(&index, e))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Json {
        path: index.clone(),
        message: e.to_string(),
    })?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| ModelError::Config {
            path: index.clone(),
            field: "weight_map".into(),
            message: "missing or not an object".into(),
        })?;
    let shards: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
    Ok((
        index.clone(),
        shards.into_iter().map(|s| dir.join(s)).collect(),
    ))
}

/// Read the chat template from `tokenizer_config.json`, if there is one.
pub(crate) fn read_chat_template(dir: &Path) -> Result<Option<ChatTemplate>> {
    let path = dir.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| ModelError::io(&path, e))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Json {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let source = match json.get("chat_template") {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(s)) => s.clone(),
        // A list of named templates: use the one named "default".
        Some(serde_json::Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(|t| t.as_str())
            .ok_or_else(|| ModelError::Config {
                path: path.clone(),
                field: "chat_template".into(),
                message: "a list without a template named \"default\"".into(),
            })?
            .to_string(),
        Some(other) => {
            return Err(ModelError::Config {
                path,
                field: "chat_template".into(),
                message: format!("expected a string, got {other}"),
            })
        }
    };
    ChatTemplate::from_source(&source)
        .map(Some)
        .map_err(|e| ModelError::Config {
            path,
            field: "chat_template".into(),
            message: e.to_string(),
        })
}

/// Read an HF folder (a checkpoint folder verified first).
pub fn read_folder(dir: &Path) -> Result<HfFolder> {
    verify_model_files(dir)?;
    let config_path = dir.join("config.json");
    let config = HfConfig::read(&config_path)?.resolve(&config_path)?;
    let (weights_path, files) = check_weights(dir, &config)?;
    let mut tensors = HashMap::new();
    let mut from: HashMap<String, PathBuf> = HashMap::new();
    for file in files {
        for (name, t) in super::safetensors::read_safetensors(&file)? {
            if let Some(first) = from.get(&name) {
                return Err(ModelError::Header {
                    path: file.clone(),
                    message: format!("tensor `{name}` is also in {}", first.display()),
                });
            }
            from.insert(name.clone(), file.clone());
            tensors.insert(name, t);
        }
    }
    let tokenizer_path = dir.join("tokenizer.json");
    let tokenizer = if tokenizer_path.is_file() {
        Some(Tokenizer::from_file(&tokenizer_path)?)
    } else {
        None
    };
    Ok(HfFolder {
        config,
        tensors,
        weights_path,
        tokenizer,
        chat: read_chat_template(dir)?,
    })
}

/// The weight files of the folder `dir` (the index or single file, and every file), their
/// headers' shapes checked against `config` ([`super::check_shapes`]) before any tensor is
/// read.
fn check_weights(dir: &Path, config: &ModelConfig) -> Result<(PathBuf, Vec<PathBuf>)> {
    let (weights_path, files) = weight_files(dir)?;
    let mut declared = BTreeMap::new();
    for file in &files {
        for t in super::safetensors::read_header(file)? {
            declared.insert(t.name, (t.shape, file.clone()));
        }
    }
    super::check_shapes(
        config,
        &declared,
        &super::Sources {
            config: &dir.join("config.json"),
            name: &Field::hf,
            weights: &weights_path,
        },
    )?;
    Ok((weights_path, files))
}

/// The text side of an HF folder without its weights: the config (checked, and against the
/// weight files' headers, as for loading), the tokenizer (an error when the folder has none)
/// and the chat template.
pub fn read_prompt_encoder(dir: &Path) -> Result<crate::PromptEncoder> {
    // A checkpoint's files are verified before any of them is read, here as for the weights.
    verify_model_files(dir)?;
    let config_path = dir.join("config.json");
    let config = HfConfig::read(&config_path)?.resolve(&config_path)?;
    check_weights(dir, &config)?;
    let tokenizer_path = dir.join("tokenizer.json");
    if !tokenizer_path.is_file() {
        return Err(ModelError::Tokenizer(format!(
            "{}: the model has no tokenizer (no tokenizer.json)",
            dir.display()
        )));
    }
    Ok(crate::PromptEncoder {
        tokenizer: Tokenizer::from_file(&tokenizer_path)?,
        chat: read_chat_template(dir)?,
        max_positions: config.max_position_embeddings as usize,
    })
}
