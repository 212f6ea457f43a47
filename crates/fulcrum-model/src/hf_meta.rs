//! The two small files that tell the ecosystem how to use a model's tokens:
//! `tokenizer_config.json` (bos, eos, pad and unk tokens, the added tokens, the tokenizer class,
//! the longest input, the chat template) and `generation_config.json` (the bos, eos and pad ids
//! `generate` stops and pads with).
//!
//! fulcrum itself needs neither (it encodes with `tokenizer.json` and stops on the config's eos
//! ids and the chat end token), but transformers does: a folder whose `tokenizer_config.json`
//! holds only a chat template gives a tokenizer without eos or pad token, and the first batched
//! generation of TRL fails. So what a model's source declares ([`Declared`]: an HF folder's two
//! files, or the same keys made from a GGUF file's `tokenizer.ggml.*` metadata) travels with the
//! model through every checkpoint, and every folder written from it gets both files, completed
//! ([`tokenizer_config`], [`generation_config`]) from the model's config and tokenizer where the
//! source is silent. A key the source sets is kept as it is, even `null` (Qwen2.5 declares no
//! bos token on purpose), except a `null` eos or pad token, which transformers cannot do
//! without.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::chat_template::ChatTemplate;
use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::tokenizer::Tokenizer;

pub const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
pub const GENERATION_CONFIG: &str = "generation_config.json";

/// The tokenizer class written when the source names none (a GGUF file): the generic class
/// that loads `tokenizer.json` as it is, in transformers 4 and 5 alike. A named class such as
/// `GPT2Tokenizer` would, in transformers 5, rebuild the tokenizer from the vocabulary with
/// its own pre-tokenizer, and SmolLM2's digit splitting would be lost.
const GENERIC_TOKENIZER_CLASS: &str = "PreTrainedTokenizerFast";

/// What a model's source declares about its tokens, kept so that every folder written from the
/// model carries it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    /// The keys of the source's `tokenizer_config.json` (its chat template as written, a list
    /// of named templates included; not `auto_map`, whose code files are not copied); for a
    /// GGUF source, the same keys made from its metadata ([`Declared::from_gguf`]).
    pub tokenizer: Map<String, Value>,
    /// The source's `generation_config.json` (empty when it has none).
    pub generation: Map<String, Value>,
}

/// The special-token metadata of a GGUF file (`tokenizer.ggml.*`), as read.
#[derive(Debug, Clone, Default)]
pub struct GgufSpecials {
    pub bos: Option<i64>,
    pub eos: Option<i64>,
    pub pad: Option<i64>,
    pub unk: Option<i64>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
}

fn read_object(path: &Path) -> Result<Option<Map<String, Value>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
    match serde_json::from_str(&text) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(_) => Err(ModelError::Json {
            path: path.to_path_buf(),
            message: "expected a JSON object".into(),
        }),
        Err(e) => Err(ModelError::Json {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

impl Declared {
    /// What the HF folder `dir` declares: its `tokenizer_config.json` and
    /// `generation_config.json`, each when present.
    pub fn read_hf(dir: &Path) -> Result<Declared> {
        let mut tokenizer = read_object(&dir.join(TOKENIZER_CONFIG))?.unwrap_or_default();
        tokenizer.remove("auto_map");
        let generation = read_object(&dir.join(GENERATION_CONFIG))?.unwrap_or_default();
        Ok(Declared {
            tokenizer,
            generation,
        })
    }

    /// The `tokenizer_config.json` keys a GGUF file declares through `specials` (ids into
    /// `tokens`, the file's `tokenizer.ggml.tokens`) and its context length. An id outside the
    /// vocabulary is an error naming its metadata key.
    pub fn from_gguf(
        specials: &GgufSpecials,
        tokens: &[&str],
        context_length: i64,
        path: &Path,
    ) -> Result<Declared> {
        let mut map = Map::new();
        map.insert("tokenizer_class".into(), json!(GENERIC_TOKENIZER_CLASS));
        for (key, id, gguf_key) in [
            ("bos_token", specials.bos, "bos_token_id"),
            ("eos_token", specials.eos, "eos_token_id"),
            ("pad_token", specials.pad, "padding_token_id"),
            ("unk_token", specials.unk, "unknown_token_id"),
        ] {
            let Some(id) = id else { continue };
            let token = usize::try_from(id)
                .ok()
                .and_then(|i| tokens.get(i))
                .ok_or_else(|| ModelError::Gguf {
                    path: path.to_path_buf(),
                    message: format!(
                        "tokenizer.ggml.{gguf_key} = {id} is outside the vocabulary of {} tokens",
                        tokens.len()
                    ),
                })?;
            map.insert(key.into(), json!(token));
        }
        if let Some(b) = specials.add_bos {
            map.insert("add_bos_token".into(), json!(b));
        }
        if let Some(b) = specials.add_eos {
            map.insert("add_eos_token".into(), json!(b));
        }
        map.insert("model_max_length".into(), json!(context_length));
        // A byte-level BPE decodes to the exact text: no clean-up of spaces before punctuation.
        map.insert("clean_up_tokenization_spaces".into(), json!(false));
        Ok(Declared {
            tokenizer: map,
            generation: Map::new(),
        })
    }
}

/// The text of a token value of `tokenizer_config.json`: a string, or an added-token object's
/// `content`.
fn token_text(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("content").and_then(Value::as_str),
        _ => None,
    }
}

/// The id of the token `key` (`eos_token`, ...) of a complete `tokenizer_config.json`.
pub fn token_id(map: &Map<String, Value>, key: &str, tokenizer: &Tokenizer) -> Option<i64> {
    map.get(key)
        .and_then(token_text)
        .and_then(|t| tokenizer.token_id(t))
}

fn unset(map: &Map<String, Value>, key: &str) -> bool {
    !map.contains_key(key)
}

/// The complete `tokenizer_config.json` of a model: what its source declares, completed from
/// its config and tokenizer: bos and eos from the config's ids, the added tokens from the
/// tokenizer, the context length, the generic class, the chat template the model holds.
pub fn tokenizer_config(
    declared: &Declared,
    config: &ModelConfig,
    tokenizer: &Tokenizer,
    chat: Option<&ChatTemplate>,
) -> Map<String, Value> {
    let mut map = declared.tokenizer.clone();
    let text_of = |id: i64| {
        u32::try_from(id)
            .ok()
            .and_then(|i| tokenizer.hf().id_to_token(i))
    };
    if unset(&map, "bos_token") {
        if let Some(t) = config.bos_token_id.and_then(text_of) {
            map.insert("bos_token".into(), json!(t));
        }
    }
    if map.get("eos_token").is_none_or(Value::is_null) {
        if let Some(t) = config.eos_token_ids.first().copied().and_then(text_of) {
            map.insert("eos_token".into(), json!(t));
        }
    }
    if map.get("pad_token").is_none_or(Value::is_null) {
        // The source declares no pad token, and transformers cannot batch (TRL's generation
        // pads) without one: the eos token is what HF's own recipes choose, and padded
        // positions are masked out of attention and loss, so which token pads does not matter.
        if let Some(eos) = map.get("eos_token").filter(|v| !v.is_null()).cloned() {
            map.insert("pad_token".into(), eos);
        }
    }
    if unset(&map, "added_tokens_decoder") {
        let mut added: Vec<(u32, tokenizers::AddedToken)> = tokenizer
            .hf()
            .get_added_tokens_decoder()
            .into_iter()
            .collect();
        added.sort_by_key(|(id, _)| *id);
        let decoder: Map<String, Value> = added
            .into_iter()
            .map(|(id, t)| {
                let entry = json!({
                    "content": t.content,
                    "lstrip": t.lstrip,
                    "normalized": t.normalized,
                    "rstrip": t.rstrip,
                    "single_word": t.single_word,
                    "special": t.special,
                });
                (id.to_string(), entry)
            })
            .collect();
        map.insert("added_tokens_decoder".into(), Value::Object(decoder));
    }
    if unset(&map, "model_max_length") {
        map.insert(
            "model_max_length".into(),
            json!(config.max_position_embeddings),
        );
    }
    if unset(&map, "tokenizer_class") {
        map.insert("tokenizer_class".into(), json!(GENERIC_TOKENIZER_CLASS));
    }
    if let (true, Some(chat)) = (unset(&map, "chat_template"), chat) {
        map.insert("chat_template".into(), json!(chat.source));
    }
    map
}

/// The complete `generation_config.json`: what the source declares, completed with the bos id
/// of the config, the eos ids `stop_ids` (the config's and the chat end token, as fulcrum stops
/// on them; a list when several) and the pad token's id from `tokens` (the complete
/// `tokenizer_config.json`).
pub fn generation_config(
    declared: &Declared,
    config: &ModelConfig,
    stop_ids: &[i64],
    tokens: Option<(&Map<String, Value>, &Tokenizer)>,
) -> Map<String, Value> {
    let mut map = declared.generation.clone();
    if unset(&map, "bos_token_id") {
        if let Some(bos) = config.bos_token_id {
            map.insert("bos_token_id".into(), json!(bos));
        }
    }
    if unset(&map, "eos_token_id") {
        match stop_ids {
            [] => {}
            [one] => {
                map.insert("eos_token_id".into(), json!(one));
            }
            many => {
                map.insert("eos_token_id".into(), json!(many));
            }
        }
    }
    if unset(&map, "pad_token_id") {
        if let Some(pad) = tokens.and_then(|(m, tok)| token_id(m, "pad_token", tok)) {
            map.insert("pad_token_id".into(), json!(pad));
        }
    }
    map
}

/// Writes `map` as pretty JSON to `path`.
pub fn write_json(path: &Path, map: Map<String, Value>) -> Result<()> {
    let text = serde_json::to_string_pretty(&Value::Object(map)).map_err(|e| ModelError::Json {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    std::fs::write(path, text).map_err(|e| ModelError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars_config() -> (ModelConfig, Tokenizer) {
        let tok = Tokenizer::chars().unwrap();
        let mut cfg = ModelConfig::tiny(128, 2);
        cfg.bos_token_id = Some(1);
        (cfg, tok)
    }

    #[test]
    fn a_silent_source_gets_eos_as_pad_the_added_tokens_and_the_generic_class() {
        let (cfg, tok) = chars_config();
        let map = tokenizer_config(&Declared::default(), &cfg, &tok, None);
        assert_eq!(map["bos_token"], "<bos>");
        assert_eq!(map["eos_token"], "<eos>");
        assert_eq!(map["pad_token"], "<eos>");
        assert!(map.get("unk_token").is_none());
        assert_eq!(map["tokenizer_class"], GENERIC_TOKENIZER_CLASS);
        assert_eq!(map["model_max_length"], cfg.max_position_embeddings);
        assert_eq!(map["added_tokens_decoder"]["0"]["content"], "<pad>");
        assert_eq!(map["added_tokens_decoder"]["2"]["special"], true);
        let gen = generation_config(&Declared::default(), &cfg, &[2, 5], Some((&map, &tok)));
        assert_eq!(gen["bos_token_id"], 1);
        assert_eq!(gen["eos_token_id"], json!([2, 5]));
        assert_eq!(gen["pad_token_id"], 2);
    }

    #[test]
    fn what_the_source_declares_is_kept_even_null() {
        let (cfg, tok) = chars_config();
        let mut declared = Declared::default();
        declared.tokenizer.insert("bos_token".into(), Value::Null);
        declared.tokenizer.insert(
            "pad_token".into(),
            json!({"content": "<pad>", "special": true}),
        );
        declared
            .tokenizer
            .insert("tokenizer_class".into(), json!("Qwen2Tokenizer"));
        declared.generation.insert("temperature".into(), json!(0.7));
        let chat = ChatTemplate::from_source("<|im_start|>{{x}}<|im_end|>").unwrap();
        let map = tokenizer_config(&declared, &cfg, &tok, Some(&chat));
        assert_eq!(map["bos_token"], Value::Null);
        assert_eq!(map["pad_token"]["content"], "<pad>");
        assert_eq!(map["tokenizer_class"], "Qwen2Tokenizer");
        assert_eq!(map["chat_template"], chat.source);
        let gen = generation_config(&declared, &cfg, &[2], Some((&map, &tok)));
        assert_eq!(gen["temperature"], 0.7);
        assert_eq!(gen["eos_token_id"], 2);
        assert_eq!(gen["pad_token_id"], 0);
    }

    #[test]
    fn gguf_ids_become_token_strings_and_a_bad_id_names_its_key() {
        let tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a"];
        let specials = GgufSpecials {
            bos: Some(1),
            eos: Some(2),
            pad: Some(2),
            unk: Some(0),
            add_bos: Some(false),
            add_eos: None,
        };
        let d = Declared::from_gguf(&specials, &tokens, 8192, Path::new("m.gguf")).unwrap();
        assert_eq!(d.tokenizer["bos_token"], "<|im_start|>");
        assert_eq!(d.tokenizer["eos_token"], "<|im_end|>");
        assert_eq!(d.tokenizer["pad_token"], "<|im_end|>");
        assert_eq!(d.tokenizer["unk_token"], "<|endoftext|>");
        assert_eq!(d.tokenizer["add_bos_token"], false);
        assert_eq!(d.tokenizer["model_max_length"], 8192);
        let bad = GgufSpecials {
            eos: Some(9),
            ..GgufSpecials::default()
        };
        let e = Declared::from_gguf(&bad, &tokens, 1, Path::new("m.gguf"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m.gguf") && e.contains("tokenizer.ggml.eos_token_id = 9"),
            "{e}"
        );
    }
}
