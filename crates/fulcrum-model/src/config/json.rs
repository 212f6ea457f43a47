//! Reading an HF `config.json` field by field: a missing field, a wrong type, a fraction or a
//! number out of range names the field and the file, never wraps around.

use std::path::Path;

use super::check::{check_count, WHY_HEADS, WHY_HIDDEN};
use super::{Arch, Field, HfConfig, ModelConfig};
use crate::error::{HyperProblem, ModelError, Result};
use crate::limits::model as limits;

/// The fields of one `config.json` object, read with errors naming the field and the file.
struct JsonFields<'a> {
    path: &'a Path,
    obj: &'a serde_json::Map<String, serde_json::Value>,
}

impl JsonFields<'_> {
    fn err(&self, field: &str, problem: HyperProblem) -> ModelError {
        ModelError::HyperParameter {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            problem,
        }
    }

    fn wrong(&self, field: &str, expected: &'static str, got: &serde_json::Value) -> ModelError {
        let mut got = got.to_string();
        if got.len() > 60 {
            got = format!("{}...", got.chars().take(60).collect::<String>());
        }
        self.err(field, HyperProblem::WrongType { expected, got })
    }

    /// The value of `field`; `None` when absent or `null`.
    fn get(&self, field: &str) -> Option<&serde_json::Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    fn as_int(&self, field: &str, v: &serde_json::Value) -> Result<i64> {
        match v {
            serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Ok(i),
                // Above i64: a value no cast may wrap around.
                (None, Some(u)) => Err(self.err(
                    field,
                    HyperProblem::TooLarge {
                        value: u.to_string(),
                        limit: i64::MAX.to_string(),
                        why: "the largest 64-bit integer",
                    },
                )),
                (None, None) => Err(self.wrong(field, "an integer", v)),
            },
            other => Err(self.wrong(field, "an integer", other)),
        }
    }

    fn int(&self, field: &str) -> Result<Option<i64>> {
        self.get(field).map(|v| self.as_int(field, v)).transpose()
    }

    fn required_int(&self, field: &str) -> Result<i64> {
        self.int(field)?
            .ok_or_else(|| self.err(field, HyperProblem::Missing))
    }

    fn float(&self, field: &str) -> Result<Option<f64>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.wrong(field, "a number", v)),
        }
    }

    fn boolean(&self, field: &str) -> Result<Option<bool>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.wrong(field, "true or false", v)),
        }
    }

    fn string(&self, field: &str) -> Result<Option<String>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(|s| Some(s.to_string()))
                .ok_or_else(|| self.wrong(field, "a string", v)),
        }
    }

    /// An integer or a list of integers (`eos_token_id`).
    fn ints(&self, field: &str) -> Result<Option<Vec<i64>>> {
        match self.get(field) {
            None => Ok(None),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .map(|v| self.as_int(field, v))
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(v) => self.as_int(field, v).map(|i| Some(vec![i])),
        }
    }
}

impl HfConfig {
    /// Read and parse `config.json`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
        Self::parse(&text, path)
    }

    /// Parse the text of a `config.json` read from `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let json: serde_json::Value = serde_json::from_str(text).map_err(|e| ModelError::Json {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let obj = json.as_object().ok_or_else(|| ModelError::Json {
            path: path.to_path_buf(),
            message: "expected a JSON object".into(),
        })?;
        let f = JsonFields { path, obj };
        let value = |field: &str| f.get(field).cloned();
        Ok(HfConfig {
            model_type: f.string("model_type")?,
            vocab_size: f.required_int("vocab_size")?,
            hidden_size: f.required_int("hidden_size")?,
            intermediate_size: f.required_int("intermediate_size")?,
            num_hidden_layers: f.required_int("num_hidden_layers")?,
            num_attention_heads: f.required_int("num_attention_heads")?,
            num_key_value_heads: f.int("num_key_value_heads")?,
            head_dim: f.int("head_dim")?,
            rms_norm_eps: f.float("rms_norm_eps")?,
            rope_theta: f.float("rope_theta")?,
            max_position_embeddings: f.int("max_position_embeddings")?,
            tie_word_embeddings: f.boolean("tie_word_embeddings")?,
            attention_bias: f.boolean("attention_bias")?,
            hidden_act: f.string("hidden_act")?,
            rope_scaling: value("rope_scaling"),
            rope_parameters: value("rope_parameters"),
            use_sliding_window: f.boolean("use_sliding_window")?,
            bos_token_id: f.int("bos_token_id")?,
            eos_token_id: f.ints("eos_token_id")?,
        })
    }

    /// Check the config and turn it into a [`ModelConfig`]; `path` is for error messages.
    /// Every hyper-parameter is checked ([`ModelConfig::check`]) before anything uses it.
    pub fn resolve(&self, path: &Path) -> Result<ModelConfig> {
        let err = |field: &str, message: String| ModelError::Config {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        let hyper = |field: Field, problem: HyperProblem| ModelError::HyperParameter {
            path: path.to_path_buf(),
            field: field.hf(),
            problem,
        };
        let model_type = self.model_type.as_deref().unwrap_or("");
        let arch = match model_type {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            other => {
                return Err(err(
                    "model_type",
                    format!("unsupported \"{other}\" (supported: llama, qwen2, qwen3)"),
                ))
            }
        };
        for (field, value) in [
            ("rope_scaling", &self.rope_scaling),
            ("rope_parameters", &self.rope_parameters),
        ] {
            let Some(value) = value.as_ref().filter(|v| !v.is_null()) else {
                continue;
            };
            let kind = value.get("rope_type").or_else(|| value.get("type"));
            if kind.and_then(|k| k.as_str()) != Some("default") {
                return Err(err(
                    field,
                    format!("only default RoPE is supported, got {value}"),
                ));
            }
        }
        let nested_theta = match self
            .rope_parameters
            .as_ref()
            .and_then(|v| v.get("rope_theta"))
        {
            None => None,
            Some(v) => Some(v.as_f64().ok_or_else(|| {
                err(
                    "rope_parameters.rope_theta",
                    format!("expected a number, got {v}"),
                )
            })?),
        };
        if self.use_sliding_window == Some(true) {
            return Err(err(
                "use_sliding_window",
                "sliding-window attention is not supported".into(),
            ));
        }
        if let Some(act) = &self.hidden_act {
            if act != "silu" {
                return Err(err(
                    "hidden_act",
                    format!("expected \"silu\", got \"{act}\""),
                ));
            }
        }
        // Heads first: the head dimension is derived from them.
        let heads = self.num_attention_heads;
        check_count(heads, limits::MAX_HEADS, WHY_HEADS).map_err(|p| hyper(Field::Heads, p))?;
        let head_dim = match self.head_dim {
            Some(d) => d,
            None => {
                check_count(self.hidden_size, limits::MAX_HIDDEN, WHY_HIDDEN)
                    .map_err(|p| hyper(Field::Hidden, p))?;
                if self.hidden_size % heads != 0 {
                    return Err(hyper(
                        Field::Hidden,
                        HyperProblem::Inconsistent(format!(
                            "{} is not a multiple of num_attention_heads = {heads} (and no \
                             head_dim is given)",
                            self.hidden_size
                        )),
                    ));
                }
                self.hidden_size / heads
            }
        };
        let qkv_bias = match arch {
            Arch::Qwen2 => true,
            Arch::Llama | Arch::Qwen3 => self.attention_bias.unwrap_or(false),
        };
        let cfg = ModelConfig {
            arch,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(heads),
            head_dim,
            rms_norm_eps: self.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: self.rope_theta.or(nested_theta).unwrap_or(10_000.0),
            max_position_embeddings: self.max_position_embeddings.unwrap_or(4096),
            qkv_bias,
            qk_norm: arch == Arch::Qwen3,
            tie_embeddings: self.tie_word_embeddings.unwrap_or(false),
            bos_token_id: self.bos_token_id,
            eos_token_ids: self.eos_token_id.clone().unwrap_or_default(),
        };
        cfg.check(&Field::hf).map_err(|(f, p)| hyper(f, p))?;
        Ok(cfg)
    }
}
