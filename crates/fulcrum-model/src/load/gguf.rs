//! GGUF files (llama.cpp's format), read with `candle-core`'s `quantized::gguf_file`.
//!
//! Every tensor is dequantised to f32 and renamed to its HF name through one table
//! ([`hf_name`]). Llama-architecture files store q and k rows permuted for interleaved RoPE;
//! we undo that so the one rotate-half transformer serves every format. The tokenizer is rebuilt
//! from the file's own vocabulary and merges as a byte-level BPE; tokens typed control or
//! user-defined become special added tokens, so `<|im_start|>` in a prompt encodes as itself.
//! GGUF has no tie flag: by llama.cpp's convention a file without `output.weight` has its LM
//! head tied to the token embeddings, and that is what we configure.

use std::collections::{BTreeMap, HashMap};
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
use crate::config::{Arch, Field, ModelConfig};
use crate::error::{HyperProblem, ModelError, Result};
use crate::hf_meta::{Declared, GgufSpecials};
use crate::tokenizer::Tokenizer;

/// Qwen2's pre-tokenizer split pattern (from its `tokenizer.json`).
pub(crate) const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types that become special added tokens: control (3) and user-defined (4).
const SPECIAL_TOKEN_TYPES: [i64; 2] = [3, 4];

/// What a GGUF file holds, dequantised, with HF names.
pub struct GgufModel {
    pub config: ModelConfig,
    pub tensors: HashMap<String, Tensor>,
    pub tokenizer: Tokenizer,
    pub chat: Option<ChatTemplate>,
    /// The special tokens and context length the metadata declares, as HF's keys.
    pub declared: Declared,
}

/// GGUF's names of the tensors outside the layers, with their HF names.
const WHOLE_MODEL_NAMES: [(&str, &str); 3] = [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
];

/// GGUF's names of the parts of a layer (`blk.N.<part>.weight`), with their HF names
/// (`model.layers.N.<part>.weight`): the one table both directions read.
const LAYER_PART_NAMES: [(&str, &str); 11] = [
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// The HF name of a GGUF tensor name, or `None` when it has none.
pub fn hf_name(gguf: &str) -> Option<String> {
    if let Some((_, hf)) = WHOLE_MODEL_NAMES.iter().find(|(g, _)| *g == gguf) {
        return Some(hf.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, suffix) = rest.rsplit_once('.')?;
    let (_, hf) = LAYER_PART_NAMES.iter().find(|(g, _)| *g == part)?;
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// The GGUF name of an HF tensor name, or `None` when it has none ([`hf_name`]'s inverse).
pub fn gguf_name(hf: &str) -> Option<String> {
    if let Some((g, _)) = WHOLE_MODEL_NAMES.iter().find(|(_, h)| *h == hf) {
        return Some(g.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, suffix) = rest.rsplit_once('.')?;
    let (g, _) = LAYER_PART_NAMES.iter().find(|(_, h)| *h == part)?;
    Some(format!("blk.{layer}.{g}.{suffix}"))
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

    fn hyper(&self, key: &str, problem: HyperProblem) -> ModelError {
        ModelError::HyperParameter {
            path: self.path.to_path_buf(),
            field: key.to_string(),
            problem,
        }
    }

    /// An integer of any GGUF integer type, never wrapped around: a `u64` beyond `i64` is an
    /// error naming the key.
    fn opt_int(&self, key: &str) -> Result<Option<i64>> {
        let Some(v) = self.md.get(key) else {
            return Ok(None);
        };
        let i = match v {
            Value::U8(x) => i64::from(*x),
            Value::I8(x) => i64::from(*x),
            Value::U16(x) => i64::from(*x),
            Value::I16(x) => i64::from(*x),
            Value::U32(x) => i64::from(*x),
            Value::I32(x) => i64::from(*x),
            Value::I64(x) => *x,
            Value::U64(x) => i64::try_from(*x).map_err(|_| {
                self.hyper(
                    key,
                    HyperProblem::TooLarge {
                        value: x.to_string(),
                        limit: i64::MAX.to_string(),
                        why: "the largest 64-bit integer",
                    },
                )
            })?,
            other => {
                return Err(self.hyper(
                    key,
                    HyperProblem::WrongType {
                        expected: "an integer",
                        got: format!("a {:?}", other.value_type()),
                    },
                ))
            }
        };
        Ok(Some(i))
    }

    fn int(&self, key: &str) -> Result<i64> {
        self.opt_int(key)?
            .ok_or_else(|| self.hyper(key, HyperProblem::Missing))
    }

    fn opt_float(&self, key: &str) -> Result<Option<f64>> {
        match self.md.get(key) {
            None => Ok(None),
            Some(Value::F32(x)) => Ok(Some(f64::from(*x))),
            Some(Value::F64(x)) => Ok(Some(*x)),
            Some(other) => Err(self.hyper(
                key,
                HyperProblem::WrongType {
                    expected: "a float",
                    got: format!("a {:?}", other.value_type()),
                },
            )),
        }
    }

    fn float(&self, key: &str) -> Result<f64> {
        self.opt_float(key)?
            .ok_or_else(|| self.hyper(key, HyperProblem::Missing))
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.md.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.err(format!(
                "`{key}`: expected a bool, got a {:?}",
                other.value_type()
            ))),
        }
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

/// The hyper-parameters of a GGUF file, each checked ([`ModelConfig::check`]) and named by
/// its metadata key in errors.
fn gguf_config(meta: &Meta, content: &Content, arch_name: &str, arch: Arch) -> Result<ModelConfig> {
    let name = |f: Field| f.gguf(arch_name);
    let hyper = |f: Field, problem: HyperProblem| meta.hyper(&name(f), problem);
    let check = |f: Field, value: i64| {
        if value < 1 {
            Err(hyper(
                f,
                HyperProblem::TooSmall {
                    value: value.to_string(),
                    min: "1".into(),
                },
            ))
        } else {
            Ok(value)
        }
    };
    let hidden = check(Field::Hidden, meta.int(&name(Field::Hidden))?)?;
    let heads = check(Field::Heads, meta.int(&name(Field::Heads))?)?;
    let kv_heads = meta.opt_int(&name(Field::KvHeads))?.unwrap_or(heads);
    let head_dim = match meta.opt_int(&name(Field::HeadDim))? {
        Some(d) => d,
        None if hidden % heads == 0 => hidden / heads,
        None => {
            return Err(hyper(
                Field::Hidden,
                HyperProblem::Inconsistent(format!(
                    "{hidden} is not a multiple of {} = {heads} (and no {} is given)",
                    name(Field::Heads),
                    name(Field::HeadDim)
                )),
            ))
        }
    };
    let value_length = format!("{arch_name}.attention.value_length");
    if let Some(v) = meta.opt_int(&value_length)? {
        if v != head_dim {
            return Err(meta.hyper(
                &value_length,
                HyperProblem::Inconsistent(format!(
                    "{v} differs from {} = {head_dim} (fulcrum's attention has one head size)",
                    name(Field::HeadDim)
                )),
            ));
        }
    }
    let vocab = meta.strings("tokenizer.ggml.tokens")?.len() as i64;
    let config = ModelConfig {
        arch,
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: meta.int(&name(Field::Intermediate))?,
        num_layers: meta.int(&name(Field::Layers))?,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        rms_norm_eps: meta.float(&name(Field::NormEps))?,
        rope_theta: meta.opt_float(&name(Field::RopeTheta))?.unwrap_or(10_000.0),
        max_position_embeddings: meta.opt_int(&name(Field::MaxPositions))?.unwrap_or(4096),
        qkv_bias: content.tensor_infos.contains_key("blk.0.attn_q.bias") || arch == Arch::Qwen2,
        qk_norm: arch == Arch::Qwen3,
        // No tie flag in GGUF: a file without `output.weight` ties its LM head (llama.cpp).
        tie_embeddings: !content.tensor_infos.contains_key("output.weight"),
        bos_token_id: meta.opt_int(&name(Field::BosToken))?,
        eos_token_ids: meta.opt_int(&name(Field::EosToken))?.into_iter().collect(),
    };
    config.check(&name).map_err(|(f, p)| hyper(f, p))?;
    Ok(config)
}

/// Checks the file's tensor infos (names and shapes, read with the metadata) against the
/// config before any tensor is read: every tensor has an HF counterpart, and the shapes are
/// the config's ([`super::check_shapes`]).
fn check_tensor_infos(
    config: &ModelConfig,
    content: &Content,
    path: &Path,
    arch_name: &str,
) -> Result<()> {
    let err = |message: String| ModelError::Gguf {
        path: path.to_path_buf(),
        message,
    };
    let mut declared = BTreeMap::new();
    for (name, info) in &content.tensor_infos {
        let hf =
            hf_name(name).ok_or_else(|| err(format!("tensor `{name}` has no HF counterpart")))?;
        let shape = info
            .shape
            .dims()
            .iter()
            .map(|&d| i64::try_from(d))
            .collect::<std::result::Result<Vec<i64>, _>>()
            .map_err(|_| err(format!("tensor `{name}`: shape {:?} overflows", info.shape)))?;
        declared.insert(hf, (shape, path.to_path_buf()));
    }
    let name = |f: Field| f.gguf(arch_name);
    super::check_shapes(
        config,
        &declared,
        &super::Sources {
            config: path,
            name: &name,
            weights: path,
        },
    )
}

/// The special tokens the metadata names (`tokenizer.ggml.*`), as `tokenizer_config.json`'s
/// keys ([`Declared::from_gguf`]).
fn declared(meta: &Meta, config: &ModelConfig) -> Result<Declared> {
    let id = |key: &str| meta.opt_int(&format!("tokenizer.ggml.{key}"));
    let specials = GgufSpecials {
        bos: id("bos_token_id")?,
        eos: id("eos_token_id")?,
        pad: id("padding_token_id")?,
        unk: id("unknown_token_id")?,
        add_bos: meta.opt_bool("tokenizer.ggml.add_bos_token")?,
        add_eos: meta.opt_bool("tokenizer.ggml.add_eos_token")?,
    };
    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    Declared::from_gguf(
        &specials,
        &tokens,
        config.max_position_embeddings,
        meta.path,
    )
}

/// What a GGUF file's metadata holds, checked: the config, the tokenizer, the chat template
/// and the declared special tokens (no tensor read).
#[allow(clippy::type_complexity)]
fn read_meta(
    path: &Path,
) -> Result<(
    std::fs::File,
    Content,
    ModelConfig,
    Tokenizer,
    Option<ChatTemplate>,
    Declared,
)> {
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
    let tokenizer = build_tokenizer(&meta)?;
    let config = gguf_config(&meta, &content, arch_name, arch)?;
    check_tensor_infos(&config, &content, path, arch_name)?;
    let declared = declared(&meta, &config)?;
    let chat = match meta.md.get("tokenizer.chat_template") {
        Some(v) => {
            let source = v
                .to_string()
                .map_err(|e| meta.err(format!("tokenizer.chat_template: {e}")))?;
            Some(ChatTemplate::from_source(source)?)
        }
        None => None,
    };
    Ok((file, content, config, tokenizer, chat, declared))
}

/// The text side of a GGUF file, from its metadata alone (checked as for loading).
pub fn read_prompt_encoder(path: &Path) -> Result<crate::PromptEncoder> {
    let (_, _, config, tokenizer, chat, _) = read_meta(path)?;
    Ok(crate::PromptEncoder {
        tokenizer,
        chat,
        max_positions: config.max_position_embeddings as usize,
    })
}

/// Read and dequantise a GGUF file: the metadata and tensor infos are checked
/// ([`gguf_config`], [`check_tensor_infos`]) before any tensor is read.
pub fn read_gguf(path: &Path) -> Result<GgufModel> {
    let (mut file, content, config, tokenizer, chat, declared) = read_meta(path)?;
    let meta = Meta {
        path,
        md: &content.metadata,
    };
    let arch = config.arch;
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
                t = unpermute_rows(&t, config.num_heads);
            } else if name.contains(".attn_k.") {
                t = unpermute_rows(&t, config.num_kv_heads);
            }
        }
        tensors.insert(hf, t);
    }
    Ok(GgufModel {
        config,
        tensors,
        tokenizer,
        chat,
        declared,
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
        for g in [
            "blk.12.attn_q.weight",
            "blk.0.attn_k.bias",
            "output_norm.weight",
        ] {
            assert_eq!(gguf_name(&hf_name(g).unwrap()).unwrap(), g);
        }
        assert_eq!(gguf_name("model.layers.0.rotary_emb.inv_freq"), None);
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
