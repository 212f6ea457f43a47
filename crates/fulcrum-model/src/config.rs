//! Model configuration: the raw HF `config.json` ([`HfConfig`]) and the resolved
//! [`ModelConfig`] the transformer is built from.
//!
//! Llama (SmolLM2), Qwen2/Qwen2.5 and Qwen3 differ only in fields here: q/k/v biases, q/k
//! RMSNorm, an explicit head dimension, tied embeddings and the RoPE base. Anything we do not
//! implement (RoPE scaling, sliding windows) is refused when resolving, not ignored.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{ModelError, Result};

/// The architecture families fulcrum implements (one transformer, these switches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

impl Arch {
    /// The HF `model_type` spelling.
    pub fn model_type(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    /// The HF `architectures` class name.
    pub fn hf_class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
        }
    }
}

/// `eos_token_id` is an integer or a list of integers in HF configs.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(i64),
    Many(Vec<i64>),
}

/// The fields of an HF `config.json` that fulcrum reads (others are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct HfConfig {
    pub model_type: Option<String>,
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_hidden_layers: i64,
    pub num_attention_heads: i64,
    pub num_key_value_heads: Option<i64>,
    pub head_dim: Option<i64>,
    pub rms_norm_eps: Option<f64>,
    pub rope_theta: Option<f64>,
    pub max_position_embeddings: Option<i64>,
    pub tie_word_embeddings: Option<bool>,
    pub attention_bias: Option<bool>,
    pub hidden_act: Option<String>,
    pub rope_scaling: Option<serde_json::Value>,
    /// transformers 5 writes the RoPE base here (`{"rope_type": "default", "rope_theta": ..}`).
    pub rope_parameters: Option<serde_json::Value>,
    pub use_sliding_window: Option<bool>,
    pub bos_token_id: Option<i64>,
    pub eos_token_id: Option<OneOrMany>,
}

/// Everything the transformer needs to know, resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_layers: i64,
    pub num_heads: i64,
    pub num_kv_heads: i64,
    pub head_dim: i64,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub max_position_embeddings: i64,
    /// Biases on q, k and v projections (Qwen2; optional for Llama and Qwen3).
    pub qkv_bias: bool,
    /// RMSNorm on each head of q and k before RoPE (Qwen3).
    pub qk_norm: bool,
    /// The LM head shares the token embedding matrix.
    pub tie_embeddings: bool,
    pub bos_token_id: Option<i64>,
    pub eos_token_ids: Vec<i64>,
}

impl HfConfig {
    /// Read and parse `config.json`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
        serde_json::from_str(&text).map_err(|e| ModelError::Json {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Check the config and turn it into a [`ModelConfig`]; `path` is for error messages.
    pub fn resolve(&self, path: &Path) -> Result<ModelConfig> {
        let err = |field: &str, message: String| ModelError::Config {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
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
        let nested_theta = self
            .rope_parameters
            .as_ref()
            .and_then(|v| v.get("rope_theta"))
            .and_then(|v| v.as_f64());
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
        let num_kv_heads = self.num_key_value_heads.unwrap_or(self.num_attention_heads);
        if self.num_attention_heads <= 0
            || num_kv_heads <= 0
            || self.num_attention_heads % num_kv_heads != 0
        {
            return Err(err(
                "num_key_value_heads",
                format!(
                    "{num_kv_heads} must divide num_attention_heads {}",
                    self.num_attention_heads
                ),
            ));
        }
        let head_dim = match self.head_dim {
            Some(d) => d,
            None => {
                if self.hidden_size % self.num_attention_heads != 0 {
                    return Err(err(
                        "hidden_size",
                        format!(
                            "{} is not a multiple of num_attention_heads {}",
                            self.hidden_size, self.num_attention_heads
                        ),
                    ));
                }
                self.hidden_size / self.num_attention_heads
            }
        };
        if head_dim % 2 != 0 {
            return Err(err(
                "head_dim",
                format!("must be even for RoPE, got {head_dim}"),
            ));
        }
        let qkv_bias = match arch {
            Arch::Qwen2 => true,
            Arch::Llama | Arch::Qwen3 => self.attention_bias.unwrap_or(false),
        };
        let eos_token_ids = match &self.eos_token_id {
            None => vec![],
            Some(OneOrMany::One(id)) => vec![*id],
            Some(OneOrMany::Many(ids)) => ids.clone(),
        };
        Ok(ModelConfig {
            arch,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: self.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: self.rope_theta.or(nested_theta).unwrap_or(10_000.0),
            max_position_embeddings: self.max_position_embeddings.unwrap_or(4096),
            qkv_bias,
            qk_norm: arch == Arch::Qwen3,
            tie_embeddings: self.tie_word_embeddings.unwrap_or(false),
            bos_token_id: self.bos_token_id,
            eos_token_ids,
        })
    }
}

impl ModelConfig {
    /// The built-in tiny Llama-style model for the synthetic tasks (about 3.4M parameters with
    /// the character tokenizer's vocabulary).
    pub fn tiny(vocab_size: i64, eos_token_id: i64) -> Self {
        ModelConfig {
            arch: Arch::Llama,
            vocab_size,
            hidden_size: 256,
            intermediate_size: 768,
            num_layers: 4,
            num_heads: 4,
            num_kv_heads: 4,
            head_dim: 64,
            rms_norm_eps: 1e-5,
            rope_theta: 10_000.0,
            max_position_embeddings: 2048,
            qkv_bias: false,
            qk_norm: false,
            tie_embeddings: true,
            bos_token_id: None,
            eos_token_ids: vec![eos_token_id],
        }
    }

    /// The number of parameters of a model with this configuration.
    pub fn num_parameters(&self) -> i64 {
        let d = self.hidden_size;
        let q = self.num_heads * self.head_dim;
        let kv = self.num_kv_heads * self.head_dim;
        let mut attn = d * q + 2 * d * kv + q * d;
        if self.qkv_bias {
            attn += q + 2 * kv;
        }
        if self.qk_norm {
            attn += 2 * self.head_dim;
        }
        let layer = attn + 3 * d * self.intermediate_size + 2 * d;
        let emb = self.vocab_size * d;
        let head = if self.tie_embeddings { 0 } else { emb };
        emb + head + self.num_layers * layer + d
    }

    /// The HF `config.json` for this configuration (what `save` writes; loads back equal).
    pub fn to_hf_json(&self) -> serde_json::Value {
        let eos = match self.eos_token_ids.as_slice() {
            [one] => json!(one),
            many => json!(many),
        };
        let mut v = json!({
            "architectures": [self.arch.hf_class()],
            "model_type": self.arch.model_type(),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_embeddings,
            "hidden_act": "silu",
            "eos_token_id": eos,
            "torch_dtype": "float32",
        });
        if self.arch != Arch::Qwen2 {
            v["attention_bias"] = json!(self.qkv_bias);
        }
        if let Some(bos) = self.bos_token_id {
            v["bos_token_id"] = json!(bos);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> HfConfig {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn qwen2_gets_qkv_bias_and_qwen3_gets_qk_norm() {
        let base = r#""vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2"#;
        let q2 = parse(&format!(r#"{{"model_type":"qwen2",{base}}}"#))
            .resolve(Path::new("c"))
            .unwrap();
        assert!(q2.qkv_bias && !q2.qk_norm);
        let q3 = parse(&format!(r#"{{"model_type":"qwen3",{base}}}"#))
            .resolve(Path::new("c"))
            .unwrap();
        assert!(!q3.qkv_bias && q3.qk_norm);
        assert_eq!(q3.head_dim, 4);
    }

    #[test]
    fn rope_scaling_is_refused_naming_the_field() {
        let c = parse(
            r#"{"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"rope_scaling":{"type":"linear","factor":2.0}}"#,
        );
        let e = c.resolve(Path::new("config.json")).unwrap_err().to_string();
        assert!(e.contains("rope_scaling"), "{e}");
    }

    #[test]
    fn hf_json_round_trips() {
        let cfg = ModelConfig::tiny(128, 2);
        let text = cfg.to_hf_json().to_string();
        let back = parse(&text).resolve(Path::new("c")).unwrap();
        assert_eq!(back, cfg);
    }
}
