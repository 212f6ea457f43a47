//! Model configuration: the raw HF `config.json` ([`HfConfig`]) and the resolved
//! [`ModelConfig`] the transformer is built from.
//!
//! Llama (SmolLM2), Qwen2/Qwen2.5 and Qwen3 differ only in fields here: q/k/v biases, q/k
//! RMSNorm, an explicit head dimension, tied embeddings and the RoPE base. Anything we do not
//! implement (RoPE scaling, sliding windows) is refused when resolving, not ignored.
//!
//! `json.rs` reads `config.json` field by field (so that a wrong type or an out-of-range number
//! names its field and file); `check.rs` checks every hyper-parameter before anything is
//! allocated.

use serde::{Deserialize, Serialize};
use serde_json::json;

mod check;
mod json;

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

/// The fields of an HF `config.json` that fulcrum reads (others are ignored), each read by
/// [`HfConfig::read`] with its own type check, so that a string, a fraction or a number beyond
/// 64 bits is an error naming the field.
#[derive(Debug, Clone, Default)]
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
    /// An integer or a list of integers in HF configs.
    pub eos_token_id: Option<Vec<i64>>,
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

/// A hyper-parameter of [`ModelConfig`], named as the file it came from names it
/// ([`Field::hf`], [`Field::gguf`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Vocab,
    Hidden,
    Intermediate,
    Layers,
    Heads,
    KvHeads,
    HeadDim,
    NormEps,
    RopeTheta,
    MaxPositions,
    BosToken,
    EosToken,
}

impl Field {
    /// The field's name in an HF `config.json`.
    pub fn hf(self) -> String {
        match self {
            Field::Vocab => "vocab_size",
            Field::Hidden => "hidden_size",
            Field::Intermediate => "intermediate_size",
            Field::Layers => "num_hidden_layers",
            Field::Heads => "num_attention_heads",
            Field::KvHeads => "num_key_value_heads",
            Field::HeadDim => "head_dim",
            Field::NormEps => "rms_norm_eps",
            Field::RopeTheta => "rope_theta",
            Field::MaxPositions => "max_position_embeddings",
            Field::BosToken => "bos_token_id",
            Field::EosToken => "eos_token_id",
        }
        .to_string()
    }

    /// The metadata key of a GGUF file of architecture `arch` (`llama`, `qwen2`, ...); the
    /// vocabulary is the length of the token list.
    pub fn gguf(self, arch: &str) -> String {
        match self {
            Field::Vocab => "tokenizer.ggml.tokens".to_string(),
            Field::Hidden => format!("{arch}.embedding_length"),
            Field::Intermediate => format!("{arch}.feed_forward_length"),
            Field::Layers => format!("{arch}.block_count"),
            Field::Heads => format!("{arch}.attention.head_count"),
            Field::KvHeads => format!("{arch}.attention.head_count_kv"),
            Field::HeadDim => format!("{arch}.attention.key_length"),
            Field::NormEps => format!("{arch}.attention.layer_norm_rms_epsilon"),
            Field::RopeTheta => format!("{arch}.rope.freq_base"),
            Field::MaxPositions => format!("{arch}.context_length"),
            Field::BosToken => "tokenizer.ggml.bos_token_id".to_string(),
            Field::EosToken => "tokenizer.ggml.eos_token_id".to_string(),
        }
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
    /// Every parameter of the transformer with this configuration, by HF name, with its shape:
    /// what `Transformer::new` creates, known without creating it (so that the weight files'
    /// headers can be checked against it before anything is allocated).
    pub fn parameter_shapes(&self) -> Vec<(String, Vec<i64>)> {
        let (d, v, f) = (self.hidden_size, self.vocab_size, self.intermediate_size);
        let q = self.num_heads * self.head_dim;
        let kv = self.num_kv_heads * self.head_dim;
        let mut out = vec![
            ("model.embed_tokens.weight".to_string(), vec![v, d]),
            ("model.norm.weight".to_string(), vec![d]),
        ];
        if !self.tie_embeddings {
            out.push(("lm_head.weight".to_string(), vec![v, d]));
        }
        for i in 0..self.num_layers {
            let p = format!("model.layers.{i}");
            let mut add = |name: &str, shape: Vec<i64>| out.push((format!("{p}.{name}"), shape));
            add("input_layernorm.weight", vec![d]);
            add("post_attention_layernorm.weight", vec![d]);
            for (proj, rows) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
                add(&format!("self_attn.{proj}.weight"), vec![rows, d]);
                if self.qkv_bias {
                    add(&format!("self_attn.{proj}.bias"), vec![rows]);
                }
            }
            add("self_attn.o_proj.weight", vec![d, q]);
            if self.qk_norm {
                add("self_attn.q_norm.weight", vec![self.head_dim]);
                add("self_attn.k_norm.weight", vec![self.head_dim]);
            }
            add("mlp.gate_proj.weight", vec![f, d]);
            add("mlp.up_proj.weight", vec![f, d]);
            add("mlp.down_proj.weight", vec![d, f]);
        }
        out
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
    use std::path::Path;

    fn parse(text: &str) -> HfConfig {
        HfConfig::parse(text, Path::new("c")).unwrap()
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

    const BASE: &str = r#""model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2"#;

    /// The error of resolving BASE with `field` set to `value` (JSON), as text.
    fn refused(field: &str, value: &str) -> String {
        let text = format!(r#"{{{BASE},"{field}":{value}}}"#);
        let result = HfConfig::parse(&text, Path::new("m/config.json"))
            .and_then(|c| c.resolve(Path::new("m/config.json")));
        match result {
            Ok(c) => panic!("{field} = {value} was accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_hyper_parameter_is_checked_naming_the_field_and_file() {
        for (field, value, says) in [
            ("num_attention_heads", "0", "at least 1"),
            ("num_attention_heads", "-2", "at least 1"),
            ("num_key_value_heads", "0", "at least 1"),
            ("num_key_value_heads", "3", "does not divide"),
            ("num_key_value_heads", "4", "does not divide"),
            ("hidden_size", "-8", "at least 1"),
            ("hidden_size", "9", "not a multiple"),
            ("hidden_size", "1000000", "the most fulcrum accepts"),
            ("vocab_size", "0", "at least 1"),
            ("vocab_size", "-1", "at least 1"),
            ("vocab_size", "100000000", "the most fulcrum accepts"),
            ("intermediate_size", "0", "at least 1"),
            ("num_hidden_layers", "0", "at least 1"),
            ("num_hidden_layers", "1000000", "the most fulcrum accepts"),
            ("head_dim", "3", "even"),
            ("head_dim", "0", "at least 1"),
            ("head_dim", "-4", "at least 1"),
            ("rope_theta", "0", "finite and > 0"),
            ("rope_theta", "-10000.0", "finite and > 0"),
            ("rms_norm_eps", "0", "finite and > 0"),
            ("rms_norm_eps", "-1e-5", "finite and > 0"),
            ("rms_norm_eps", "2.0", "below 1"),
            ("max_position_embeddings", "0", "at least 1"),
            ("eos_token_id", "10", "outside the vocabulary"),
            ("eos_token_id", "[2, -1]", "outside the vocabulary"),
            ("bos_token_id", "-1", "outside the vocabulary"),
            // Types: never a wraparound, never a silent cast.
            (
                "num_hidden_layers",
                "18446744073709551615",
                "largest 64-bit integer",
            ),
            ("num_hidden_layers", "2.5", "expected an integer"),
            ("num_hidden_layers", "\"2\"", "expected an integer"),
            ("tie_word_embeddings", "1", "expected true or false"),
            ("rope_theta", "\"big\"", "expected a number"),
        ] {
            let e = refused(field, value);
            assert!(
                e.contains("m/config.json")
                    && e.contains(&format!("`{field}`"))
                    && e.contains(says),
                "{field} = {value}: {e}"
            );
        }
    }

    #[test]
    fn a_missing_size_is_named() {
        let e = HfConfig::parse(
            r#"{"model_type":"llama","vocab_size":10}"#,
            Path::new("c.json"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`hidden_size`") && e.contains("missing"), "{e}");
    }

    #[test]
    fn an_explicit_head_dim_need_not_divide_hidden() {
        // Qwen3: 2 heads of 8 over a hidden size of 8.
        let text = format!(r#"{{{BASE},"head_dim":8}}"#);
        let c = HfConfig::parse(&text, Path::new("c"))
            .and_then(|c| c.resolve(Path::new("c")))
            .unwrap();
        assert_eq!((c.num_heads, c.head_dim, c.hidden_size), (2, 8, 8));
    }
}
