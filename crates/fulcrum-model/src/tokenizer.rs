//! Tokenizers: a thin wrapper over the `tokenizers` crate (pure Rust, `fancy-regex`).
//!
//! Three sources, one type: an HF `tokenizer.json`, the built-in character-level tokenizer of
//! the tiny model (built as a `tokenizers` WordLevel model so it saves as a `tokenizer.json`
//! like any other), and a byte-level BPE rebuilt from a GGUF file's vocabulary and merges
//! (`load/gguf.rs`). Encoding never adds BOS/EOS by itself; special tokens written in the text
//! (`<|im_start|>`) encode as themselves. Token ids are `i64`, as tensors want them.

use std::path::Path;

use tokenizers::decoders::fuse::Fuse;
use tokenizers::models::bpe::Vocab;
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::models::ModelWrapper;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use crate::error::{ModelError, Result};

/// Special tokens of the character tokenizer, in id order.
pub const CHAR_SPECIALS: [&str; 3] = ["<pad>", "<bos>", "<eos>"];

/// The unknown-token name of the character tokenizer: not in its vocabulary, so that a
/// character it lacks is never silently encoded (and marks a tokenizer as the character one).
const CHAR_UNK: &str = "<unk-char>";

fn tok_err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Tokenizer(e.to_string())
}

/// A tokenizer with the few operations fulcrum needs.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The longest token's text in bytes (added tokens included): a text of `n` bytes is at
    /// least `n / max_token_bytes` tokens, known without encoding it.
    max_token_bytes: usize,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer(vocab {})", self.vocab_size())
    }
}

impl Tokenizer {
    /// Wrap a `tokenizers` tokenizer built elsewhere (GGUF).
    pub fn from_hf(inner: tokenizers::Tokenizer) -> Self {
        let max_token_bytes = inner
            .get_vocab(true)
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(1)
            .max(1);
        Tokenizer {
            inner,
            max_token_bytes,
        }
    }

    /// Load an HF `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Tokenizer::from_hf(inner))
    }

    /// The character-level tokenizer of the tiny model: `<pad>`, `<bos>`, `<eos>`, then newline
    /// and the printable ASCII characters, one id each. Other characters are an encode error.
    pub fn chars() -> Result<Self> {
        let mut vocab = Vocab::default();
        for (i, s) in CHAR_SPECIALS.iter().enumerate() {
            vocab.insert((*s).to_string(), i as u32);
        }
        let chars = std::iter::once('\n').chain((32u8..127).map(char::from));
        for c in chars {
            let id = vocab.len() as u32;
            vocab.insert(c.to_string(), id);
        }
        let model = WordLevel::builder()
            .vocab(vocab)
            .unk_token(CHAR_UNK.into())
            .build()
            .map_err(tok_err)?;
        let split = Split::new(
            SplitPattern::Regex("(?s).".into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(tok_err)?;
        let mut inner = tokenizers::Tokenizer::new(model);
        inner.with_pre_tokenizer(Some(split));
        inner.with_decoder(Some(Fuse::new()));
        inner
            .add_special_tokens(CHAR_SPECIALS.iter().map(|s| AddedToken::from(*s, true)))
            .map_err(tok_err)?;
        Ok(Tokenizer::from_hf(inner))
    }

    /// The underlying `tokenizers` object.
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The longest token's text in bytes: every token covers at most this much of a text.
    pub fn max_token_bytes(&self) -> usize {
        self.max_token_bytes
    }

    /// The first character of `text` this tokenizer has no id for. Only the built-in character
    /// tokenizer (newline and printable ASCII) lacks characters: a byte-level BPE encodes any
    /// text, so for it this is always `None`.
    pub fn unknown_char(&self, text: &str) -> Option<char> {
        let ModelWrapper::WordLevel(model) = self.inner.get_model() else {
            return None;
        };
        if model.unk_token != CHAR_UNK {
            return None;
        }
        let mut buf = [0u8; 4];
        text.chars()
            .find(|c| self.inner.token_to_id(c.encode_utf8(&mut buf)).is_none())
    }

    /// Token ids of `text` (no BOS/EOS added; special tokens in the text are recognised). A
    /// character the tokenizer lacks is an error naming it and where it is.
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        if let Some(c) = self.unknown_char(text) {
            let at = text.chars().take_while(|&x| x != c).count();
            let excerpt: String = text.chars().skip(at.saturating_sub(20)).take(40).collect();
            return Err(ModelError::Tokenizer(format!(
                "the character tokenizer has no id for the character {c:?} (U+{:04X}), \
                 character {} of the text (near {excerpt:?})",
                u32::from(c),
                at + 1
            )));
        }
        let enc = self.inner.encode(text, false).map_err(tok_err)?;
        Ok(enc.get_ids().iter().map(|&i| i as i64).collect())
    }

    /// Text of `ids`; special tokens are kept when `keep_special` is true.
    pub fn decode(&self, ids: &[i64], keep_special: bool) -> Result<String> {
        let ids: Vec<u32> = ids
            .iter()
            .map(|&i| {
                u32::try_from(i).map_err(|_| ModelError::Tokenizer(format!("invalid token id {i}")))
            })
            .collect::<Result<_>>()?;
        self.inner.decode(&ids, !keep_special).map_err(tok_err)
    }

    /// The id of a token given by its text, if it exists.
    pub fn token_id(&self, token: &str) -> Option<i64> {
        self.inner.token_to_id(token).map(i64::from)
    }

    /// Write `tokenizer.json`.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.inner
            .save(path, false)
            .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_tokenizer_round_trips_text_and_specials() {
        let t = Tokenizer::chars().unwrap();
        let ids = t.encode("ab 7\n<eos>").unwrap();
        assert_eq!(ids.len(), 6);
        assert_eq!(*ids.last().unwrap(), 2);
        assert_eq!(t.decode(&ids, true).unwrap(), "ab 7\n<eos>");
        assert_eq!(t.decode(&ids, false).unwrap(), "ab 7\n");
        assert_eq!(t.vocab_size(), 3 + 1 + 95);
    }

    #[test]
    fn char_tokenizer_rejects_characters_it_lacks_naming_them() {
        let t = Tokenizer::chars().unwrap();
        let e = t.encode("x = caf\u{e9}!").unwrap_err().to_string();
        assert!(
            e.contains("'\u{e9}'") && e.contains("U+00E9") && e.contains("character 8"),
            "{e}"
        );
        assert_eq!(t.unknown_char("tab\there"), Some('\t'));
        assert_eq!(t.unknown_char("all ASCII, {braces} too\n<eos>"), None);
    }

    #[test]
    fn char_tokenizer_survives_save_and_load() {
        let t = Tokenizer::chars().unwrap();
        let dir = std::env::temp_dir().join(format!("fulcrum-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokenizer.json");
        t.save(&path).unwrap();
        let back = Tokenizer::from_file(&path).unwrap();
        assert_eq!(
            back.encode("x = 12\n").unwrap(),
            t.encode("x = 12\n").unwrap()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
