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
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use crate::error::{ModelError, Result};

/// Special tokens of the character tokenizer, in id order.
pub const CHAR_SPECIALS: [&str; 3] = ["<pad>", "<bos>", "<eos>"];

fn tok_err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Tokenizer(e.to_string())
}

/// A tokenizer with the few operations fulcrum needs.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer(vocab {})", self.vocab_size())
    }
}

impl Tokenizer {
    /// Wrap a `tokenizers` tokenizer built elsewhere (GGUF).
    pub fn from_hf(inner: tokenizers::Tokenizer) -> Self {
        Tokenizer { inner }
    }

    /// Load an HF `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Tokenizer { inner })
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
            .unk_token("<unk-char>".into())
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
        Ok(Tokenizer { inner })
    }

    /// The underlying `tokenizers` object.
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Token ids of `text` (no BOS/EOS added; special tokens in the text are recognised).
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let enc = self.inner.encode(text, false).map_err(tok_err)?;
        let ids: Vec<i64> = enc.get_ids().iter().map(|&i| i as i64).collect();
        if let Some(unk) = self.inner.token_to_id("<unk-char>") {
            if ids.contains(&(unk as i64)) {
                return Err(ModelError::Tokenizer(format!(
                    "the character tokenizer has no id for a character of {text:?}"
                )));
            }
        }
        Ok(ids)
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
    fn char_tokenizer_rejects_characters_it_lacks() {
        let t = Tokenizer::chars().unwrap();
        assert!(t.encode("é").is_err());
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
