//! The GGUF metadata of a model that did not come from a GGUF file (an HF folder, a checkpoint),
//! made from its config, tokenizer, chat template and declared special tokens, so that any
//! policy can be written for llama.cpp ([`GgufTemplate::for_model`]); a model that came from a
//! GGUF file is better written with that file as template (`save_gguf.rs`), which keeps every
//! key of the original.
//!
//! What llama.cpp reads, as its own `convert_hf_to_gguf.py` writes it: the architecture's
//! hyper-parameters (`<arch>.block_count`, ...), and the tokenizer as `tokenizer.ggml.*`: the
//! byte-level BPE (`model = "gpt2"`) with every token by id (ids the tokenizer lacks up to the
//! embedding's rows as unused `[PADn]`), their types (added special tokens control, other added
//! tokens user-defined), the merges, the pre-tokenizer's name, and the bos, eos, pad and unk ids.
//! The pre-tokenizer is named from the tokenizer's own (digits then byte-level: `smollm`; the
//! Qwen2 split: `qwen2`; byte-level alone: `gpt2`); any other is refused, naming it, because
//! llama.cpp would split the text differently from the trainer.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use serde_json::Value as Json;

use crate::error::{ModelError, Result};
use crate::hf_meta;
use crate::load::gguf::{gguf_name, QWEN2_SPLIT};
use crate::model::Model;
use crate::save_gguf::GgufTemplate;

/// llama.cpp's token types.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// llama.cpp's name of a `tokenizer.json` pre-tokenizer, for those fulcrum's GGUF loader also
/// rebuilds (`load/gguf.rs`), so that a written file reads back to the same tokenizer.
fn pre_tokenizer_name(pre: &Json) -> Option<&'static str> {
    let byte_level = |v: &Json, regex: bool| {
        v["type"] == "ByteLevel" && v["use_regex"] == regex && v["add_prefix_space"] == false
    };
    match pre["type"].as_str()? {
        "ByteLevel" if byte_level(pre, true) => Some("gpt2"),
        "Sequence" => match pre["pretokenizers"].as_array()?.as_slice() {
            [d, b] if d["type"] == "Digits" && d["individual_digits"] == true => {
                byte_level(b, true).then_some("smollm")
            }
            [s, b] if s["type"] == "Split" && s["pattern"]["Regex"] == QWEN2_SPLIT => {
                byte_level(b, false).then_some("qwen2")
            }
            _ => None,
        },
        _ => None,
    }
}

impl GgufTemplate {
    /// The metadata and tensor names of `model` as a GGUF file (see the module); `out`, the
    /// file to be written, is named in errors.
    pub fn for_model(model: &Model, out: &Path) -> Result<GgufTemplate> {
        let err = |message: String| ModelError::Gguf {
            path: out.to_path_buf(),
            message,
        };
        let cfg = model.config();
        let tok = model.tokenizer()?;
        let declared = model.declared().cloned().unwrap_or_default();
        let tokens_config = hf_meta::tokenizer_config(&declared, cfg, tok, model.chat());
        let json: Json = tok
            .hf()
            .to_string(false)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .ok_or_else(|| err("the tokenizer does not serialise".into()))?;
        let kind = json["model"]["type"].as_str().unwrap_or("unknown");
        if kind != "BPE" {
            return Err(err(format!(
                "llama.cpp reads a byte-level BPE tokenizer here, this one is a {kind} model"
            )));
        }
        let pre = pre_tokenizer_name(&json["pre_tokenizer"]).ok_or_else(|| {
            err(format!(
                "the tokenizer's pre-tokenizer {} has no llama.cpp name fulcrum knows \
                 (digits + byte-level: smollm, the Qwen2 split: qwen2, byte-level: gpt2)",
                json["pre_tokenizer"]
            ))
        })?;

        // Every id up to the embedding's rows, in id order.
        let rows = cfg.vocab_size as usize;
        let mut by_id: Vec<Option<String>> = vec![None; rows];
        for (token, id) in tok.hf().get_vocab(true) {
            let slot = by_id.get_mut(id as usize).ok_or_else(|| {
                err(format!(
                    "token {token:?} has id {id}, beyond the model's {rows} embedding rows"
                ))
            })?;
            *slot = Some(token);
        }
        let added = tok.hf().get_added_tokens_decoder();
        let types: Vec<Value> = by_id
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let ty = match (t, added.get(&(i as u32))) {
                    (None, _) => UNUSED,
                    (Some(_), Some(a)) if a.special => CONTROL,
                    (Some(_), Some(_)) => USER_DEFINED,
                    (Some(_), None) => NORMAL,
                };
                Value::I32(ty)
            })
            .collect();
        let tokens: Vec<Value> = by_id
            .into_iter()
            .enumerate()
            .map(|(i, t)| Value::String(t.unwrap_or_else(|| format!("[PAD{i}]"))))
            .collect();
        let merges = json["model"]["merges"]
            .as_array()
            .ok_or_else(|| err("the BPE tokenizer has no merges".into()))?
            .iter()
            .map(|m| {
                let (a, b) = match m {
                    Json::String(s) => s.split_once(' ').unwrap_or((s, "")),
                    Json::Array(p) if p.len() == 2 => {
                        (p[0].as_str().unwrap_or(""), p[1].as_str().unwrap_or(""))
                    }
                    _ => ("", ""),
                };
                // GGUF writes a merge as "a b": a part holding a space would not read back.
                if a.is_empty() || b.is_empty() || a.contains(' ') || b.contains(' ') {
                    return Err(err(format!("merge {m} cannot be written as \"a b\"")));
                }
                Ok(Value::String(format!("{a} {b}")))
            })
            .collect::<Result<Vec<_>>>()?;

        let arch = cfg.arch.model_type();
        let count = |key: &str, v: i64| {
            u32::try_from(v)
                .map(Value::U32)
                .map_err(|_| err(format!("{arch}.{key} = {v} does not fit GGUF's u32")))
        };
        let mut md: HashMap<String, Value> = HashMap::new();
        let mut put = |key: String, v: Value| {
            md.insert(key, v);
        };
        put("general.architecture".into(), Value::String(arch.into()));
        put("general.type".into(), Value::String("model".into()));
        for (key, v) in [
            ("context_length", cfg.max_position_embeddings),
            ("embedding_length", cfg.hidden_size),
            ("block_count", cfg.num_layers),
            ("feed_forward_length", cfg.intermediate_size),
            ("attention.head_count", cfg.num_heads),
            ("attention.head_count_kv", cfg.num_kv_heads),
            ("attention.key_length", cfg.head_dim),
            ("attention.value_length", cfg.head_dim),
            ("rope.dimension_count", cfg.head_dim),
            ("vocab_size", cfg.vocab_size),
        ] {
            put(format!("{arch}.{key}"), count(key, v)?);
        }
        put(
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            Value::F32(cfg.rms_norm_eps as f32),
        );
        put(
            format!("{arch}.rope.freq_base"),
            Value::F32(cfg.rope_theta as f32),
        );
        put("tokenizer.ggml.model".into(), Value::String("gpt2".into()));
        put("tokenizer.ggml.pre".into(), Value::String(pre.into()));
        put("tokenizer.ggml.tokens".into(), Value::Array(tokens));
        put("tokenizer.ggml.token_type".into(), Value::Array(types));
        put("tokenizer.ggml.merges".into(), Value::Array(merges));
        let eos = hf_meta::token_id(&tokens_config, "eos_token", tok)
            .or_else(|| cfg.eos_token_ids.first().copied());
        for (key, id) in [
            (
                "bos_token_id",
                hf_meta::token_id(&tokens_config, "bos_token", tok),
            ),
            ("eos_token_id", eos),
            (
                "padding_token_id",
                hf_meta::token_id(&tokens_config, "pad_token", tok),
            ),
            (
                "unknown_token_id",
                hf_meta::token_id(&tokens_config, "unk_token", tok),
            ),
        ] {
            if let Some(id) = id {
                put(format!("tokenizer.ggml.{key}"), count(key, id)?);
            }
        }
        // fulcrum never adds a bos token when it encodes; llama.cpp adds one only when told.
        let add_bos = tokens_config.get("add_bos_token").and_then(Json::as_bool);
        put(
            "tokenizer.ggml.add_bos_token".into(),
            Value::Bool(add_bos.unwrap_or(false)),
        );
        if let Some(b) = tokens_config.get("add_eos_token").and_then(Json::as_bool) {
            put("tokenizer.ggml.add_eos_token".into(), Value::Bool(b));
        }
        if let Some(chat) = model.chat() {
            put(
                "tokenizer.chat_template".into(),
                Value::String(chat.source.clone()),
            );
        }

        let tensors = cfg
            .parameter_shapes()
            .into_iter()
            .map(|(hf, shape)| {
                let name = gguf_name(&hf).ok_or_else(|| err(format!("`{hf}` has no GGUF name")))?;
                Ok((name, shape.into_iter().map(|d| d as usize).collect()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(GgufTemplate::from_parts(out.to_path_buf(), md, tensors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pre_tokenizers_fulcrum_rebuilds_are_named_and_others_refused() {
        let byte_level = |regex: bool| {
            serde_json::json!({"type": "ByteLevel", "add_prefix_space": false,
                               "trim_offsets": true, "use_regex": regex})
        };
        let smollm = serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level(true)]});
        assert_eq!(pre_tokenizer_name(&smollm), Some("smollm"));
        let qwen2 = serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated",
             "invert": false}, byte_level(false)]});
        assert_eq!(pre_tokenizer_name(&qwen2), Some("qwen2"));
        assert_eq!(pre_tokenizer_name(&byte_level(true)), Some("gpt2"));
        let metaspace = serde_json::json!({"type": "Metaspace", "replacement": "_"});
        assert_eq!(pre_tokenizer_name(&metaspace), None);
        assert_eq!(pre_tokenizer_name(&byte_level(false)), None);
    }

    #[test]
    fn a_tokenizer_llama_cpp_cannot_read_is_refused_naming_the_file() {
        let model = Model::tiny(tch::Device::Cpu, 0).unwrap();
        let e = GgufTemplate::for_model(&model, Path::new("out/model.gguf"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("out/model.gguf") && e.contains("WordLevel"),
            "{e}"
        );
    }
}
