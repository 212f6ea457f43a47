//! GGUF files (llama.cpp's format), read with `candle-core`'s `quantized::gguf_file`.
//!
//! Every tensor is dequantised to f32 and renamed to its HF name through one table
//! ([`hf_name`]). Llama-architecture files store q and k rows permuted for interleaved RoPE;
//! we undo that so the one rotate-half transformer serves every format. The tokenizer is rebuilt
//! from the file's own vocabulary and merges as a byte-level BPE; tokens typed control or
//! user-defined become special added tokens, so `<|im_start|>` in a prompt encodes as itself.
//! GGUF has no tie flag: by llama.cpp's convention a file without `output.weight` has its LM
//! head tied to the token embeddings, and that is what we configure.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use tch::Tensor;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use crate::chat_template::ChatTemplate;
use crate::config::{Arch, ModelConfig};
use crate::error::{ModelError, Result};
use crate::tokenizer::Tokenizer;

/// Qwen2's pre-tokenizer split pattern (from its `tokenizer.json`).
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types that become special added tokens: control (3) and user-defined (4).
const SPECIAL_TOKEN_TYPES: [i64; 2] = [3, 4];

/// What a GGUF file holds, dequantised, with HF names.
pub struct GgufModel {
    pub config: ModelConfig,
    pub tensors: HashMap<String, Tensor>,
    pub tokenizer: Tokenizer,
    pub chat: Option<ChatTemplate>,
}

/// The HF name of a GGUF tensor name, or `None` when it has none.
pub fn hf_name(gguf: &str) -> Option<String> {
    let fixed = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, suffix) = rest.rsplit_once('.')?;
    let hf = match part {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

struct Meta<'a> {
    path: &'a Path,
    md: &'a HashMap<String, Value>,
}

impl Meta<'_> {
    fn err(&self, message: String) -> ModelError {
        ModelError::Gguf {
            path: self.path.to_path_buf(),
            message,
        }
    }

    fn get(&self, key: &str) -> Result<&Value> {
        self.md
            .get(key)
            .ok_or_else(|| self.err(format!("missing metadata `{key}`")))
    }

    fn int(&self, key: &str) -> Result<i64> {
        let v = self.get(key)?;
        v.to_u32()
            .map(i64::from)
            .or_else(|_| v.to_i32().map(i64::from))
            .or_else(|_| v.to_u64().map(|x| x as i64))
            .map_err(|e| self.err(format!("`{key}`: {e}")))
    }

    fn float(&self, key: &str) -> Result<f64> {
        let v = self.get(key)?;
        v.to_f32()
            .map(f64::from)
            .or_else(|_| v.to_f64())
            .map_err(|e| self.err(format!("`{key}`: {e}")))
    }

    fn string(&self, key: &str) -> Result<&str> {
        self.get(key)?
            .to_string()
            .map(|s| s.as_str())
            .map_err(|e| self.err(format!("`{key}`: {e}")))
    }

    fn strings(&self, key: &str) -> Result<Vec<&str>> {
        let list = self
            .get(key)?
            .to_vec()
            .map_err(|e| self.err(format!("`{key}`: {e}")))?;
        list.iter()
            .map(|v| v.to_string().map(|s| s.as_str()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| self.err(format!("`{key}`: {e}")))
    }
}

/// Undo llama.cpp's q/k row permutation: `[rows, cols]` with `heads` heads back to HF's order.
pub(crate) fn unpermute_rows(t: &Tensor, heads: i64) -> Tensor {
    let (rows, cols) = (t.size()[0], t.size()[1]);
    t.reshape([heads, rows / heads / 2, 2, cols])
        .transpose(1, 2)
        .reshape([rows, cols])
}

fn build_tokenizer(meta: &Meta) -> Result<Tokenizer> {
    let model = meta.string("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(meta.err(format!(
            "tokenizer.ggml.model: only byte-level BPE (\"gpt2\") is supported, got \"{model}\""
        )));
    }
    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    let merges = meta
        .strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| meta.err(format!("tokenizer.ggml.merges: malformed merge {m:?}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut vocab = Vocab::default();
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert((*t).to_string(), i as u32);
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| meta.err(format!("building the BPE tokenizer: {e}")))?;
    let pre = meta
        .md
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map(String::as_str);
    let pre_tokenizer: PreTokenizerWrapper = match pre {
        Some("smollm") => Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])
        .into(),
        Some("qwen2") => Sequence::new(vec![
            Split::new(SplitPattern::Regex(QWEN2_SPLIT.into()), SplitDelimiterBehavior::Isolated, false)
                .map_err(|e| meta.err(format!("qwen2 split pattern: {e}")))?
                .into(),
            ByteLevel::new(false, false, false).into(),
        ])
        .into(),
        None | Some("default") | Some("gpt2") => ByteLevel::new(false, true, true).into(),
        Some(other) => {
            return Err(meta.err(format!(
                "tokenizer.ggml.pre: unsupported pre-tokenizer \"{other}\" (supported: smollm, qwen2, gpt2, default)"
            )))
        }
    };
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner.with_pre_tokenizer(Some(pre_tokenizer));
    inner.with_decoder(Some(ByteLevelDecoder::default()));
    let types = meta
        .get("tokenizer.ggml.token_type")?
        .to_vec()
        .map_err(|e| meta.err(e.to_string()))?;
    let specials: Vec<AddedToken> = types
        .iter()
        .zip(&tokens)
        .filter(|(ty, _)| {
            let ty = ty
                .to_i32()
                .map(i64::from)
                .or_else(|_| ty.to_u32().map(i64::from))
                .unwrap_or(1);
            SPECIAL_TOKEN_TYPES.contains(&ty)
        })
        .map(|(_, t)| AddedToken::from(*t, true))
        .collect();
    inner
        .add_special_tokens(specials)
        .map_err(|e| meta.err(format!("adding special tokens: {e}")))?;
    Ok(Tokenizer::from_hf(inner))
}

/// Read and dequantise a GGUF file.
pub fn read_gguf(path: &Path) -> Result<GgufModel> {
    let mut file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
    let content = Content::read(&mut file).map_err(|e| ModelError::Gguf {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let meta = Meta {
        path,
        md: &content.metadata,
    };
    let arch_name = meta.string("general.architecture")?;
    let arch = match arch_name {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        other => {
            return Err(meta.err(format!(
                "unsupported architecture \"{other}\" (supported: llama, qwen2, qwen3)"
            )))
        }
    };
    let key = |k: &str| format!("{arch_name}.{k}");
    let tokenizer = build_tokenizer(&meta)?;
    let hidden = meta.int(&key("embedding_length"))?;
    let heads = meta.int(&key("attention.head_count"))?;
    let kv_heads = meta.int(&key("attention.head_count_kv")).unwrap_or(heads);
    let head_dim = meta
        .int(&key("attention.key_length"))
        .unwrap_or(hidden / heads.max(1));
    let vocab = meta.strings("tokenizer.ggml.tokens")?.len() as i64;
    let tied = !content.tensor_infos.contains_key("output.weight");
    let has_bias = content.tensor_infos.contains_key("blk.0.attn_q.bias");
    let eos = meta.int("tokenizer.ggml.eos_token_id").ok();
    let config = ModelConfig {
        arch,
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: meta.int(&key("feed_forward_length"))?,
        num_layers: meta.int(&key("block_count"))?,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        rms_norm_eps: meta.float(&key("attention.layer_norm_rms_epsilon"))?,
        rope_theta: meta.float(&key("rope.freq_base")).unwrap_or(10_000.0),
        max_position_embeddings: meta.int(&key("context_length")).unwrap_or(4096),
        qkv_bias: has_bias || arch == Arch::Qwen2,
        qk_norm: arch == Arch::Qwen3,
        tie_embeddings: tied,
        bos_token_id: meta.int("tokenizer.ggml.bos_token_id").ok(),
        eos_token_ids: eos.into_iter().collect(),
    };
    let chat = match meta.md.get("tokenizer.chat_template") {
        Some(v) => {
            let source = v
                .to_string()
                .map_err(|e| meta.err(format!("tokenizer.chat_template: {e}")))?;
            Some(ChatTemplate::from_source(source)?)
        }
        None => None,
    };
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = HashMap::new();
    for name in names {
        let hf = hf_name(name)
            .ok_or_else(|| meta.err(format!("tensor `{name}` has no HF counterpart")))?;
        let q = content
            .tensor(&mut file, name, &candle_core::Device::Cpu)
            .map_err(|e| meta.err(format!("tensor `{name}`: {e}")))?;
        let dense = q
            .dequantize(&candle_core::Device::Cpu)
            .and_then(|t| {
                let dims: Vec<i64> = t.dims().iter().map(|&d| d as i64).collect();
                t.flatten_all()?.to_vec1::<f32>().map(|v| (dims, v))
            })
            .map_err(|e| meta.err(format!("dequantising `{name}`: {e}")))?;
        let mut t = Tensor::from_slice(&dense.1).reshape(dense.0);
        if arch == Arch::Llama && name.ends_with(".weight") {
            if name.contains(".attn_q.") {
                t = unpermute_rows(&t, heads);
            } else if name.contains(".attn_k.") {
                t = unpermute_rows(&t, kv_heads);
            }
        }
        tensors.insert(hf, t);
    }
    Ok(GgufModel {
        config,
        tensors,
        tokenizer,
        chat,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_hf() {
        assert_eq!(
            hf_name("blk.12.attn_q.weight").unwrap(),
            "model.layers.12.self_attn.q_proj.weight"
        );
        assert_eq!(
            hf_name("blk.0.attn_k.bias").unwrap(),
            "model.layers.0.self_attn.k_proj.bias"
        );
        assert_eq!(
            hf_name("blk.3.ffn_norm.weight").unwrap(),
            "model.layers.3.post_attention_layernorm.weight"
        );
        assert_eq!(hf_name("output.weight").unwrap(), "lm_head.weight");
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }

    #[test]
    fn unpermute_inverts_the_llama_cpp_permutation() {
        let (heads, rows, cols) = (2, 8, 3);
        let hf =
            Tensor::arange(rows * cols, (tch::Kind::Float, tch::Device::Cpu)).reshape([rows, cols]);
        // llama.cpp's export: reshape(heads, 2, rows/heads/2, cols), swap axes 1 and 2.
        let gguf = hf
            .reshape([heads, 2, rows / heads / 2, cols])
            .transpose(1, 2)
            .reshape([rows, cols]);
        assert!(unpermute_rows(&gguf, heads).equal(&hf));
        assert!(!gguf.equal(&hf));
    }
}
