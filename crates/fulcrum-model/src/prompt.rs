//! A prompt as a model sees it: rendered in the model's chat template (when it has one) and
//! encoded by its tokenizer, with its length held against a limit, and the same known without
//! the model's weights ([`PromptEncoder`], from [`crate::ModelSpec::prompt_encoder`]), so that
//! data can be checked before any model work.
//!
//! A prompt too long by its bytes alone (more than `limit` times the longest token's bytes) is
//! refused without encoding it: a 10 MB prompt never becomes millions of tokens in memory.

use crate::chat_template::{ChatTemplate, Message};
use crate::error::Result;
use crate::tokenizer::Tokenizer;

/// A prompt's tokens, or its length when it is longer than the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptTokens {
    /// The tokens of the rendered prompt, no more than the limit.
    Fits(Vec<i64>),
    /// More than the limit: `tokens` when it was encoded (`counted`), else a lower bound from
    /// its bytes.
    TooLong { tokens: usize, counted: bool },
}

impl PromptTokens {
    /// "N tokens" or "at least N tokens", for messages.
    pub fn describe(&self) -> String {
        match self {
            PromptTokens::Fits(ids) => format!("{} tokens", ids.len()),
            PromptTokens::TooLong {
                tokens,
                counted: true,
            } => format!("{tokens} tokens"),
            PromptTokens::TooLong { tokens, .. } => format!("at least {tokens} tokens"),
        }
    }
}

/// `text` as a user message in `chat` (as it is without one), encoded by `tokenizer`, unless it
/// is longer than `limit` tokens.
pub fn encode_within(
    tokenizer: &Tokenizer,
    chat: Option<&ChatTemplate>,
    text: &str,
    limit: usize,
) -> Result<PromptTokens> {
    let at_least = text.len().div_ceil(tokenizer.max_token_bytes());
    if at_least > limit {
        return Ok(PromptTokens::TooLong {
            tokens: at_least,
            counted: false,
        });
    }
    let ids = match chat {
        Some(t) => tokenizer.encode(&t.render(&[Message::user(text)], true))?,
        None => tokenizer.encode(text)?,
    };
    Ok(if ids.len() > limit {
        PromptTokens::TooLong {
            tokens: ids.len(),
            counted: true,
        }
    } else {
        PromptTokens::Fits(ids)
    })
}

/// The text side of a model, read without its weights: tokenizer, chat template and context
/// length.
#[derive(Debug, Clone)]
pub struct PromptEncoder {
    pub tokenizer: Tokenizer,
    pub chat: Option<ChatTemplate>,
    /// The model's context (`max_position_embeddings`) in tokens.
    pub max_positions: usize,
}

impl PromptEncoder {
    /// [`encode_within`] with this model's tokenizer and template.
    pub fn encode_within(&self, text: &str, limit: usize) -> Result<PromptTokens> {
        encode_within(&self.tokenizer, self.chat.as_ref(), text, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_prompt_is_too_long_before_it_is_encoded() {
        let tok = Tokenizer::chars().unwrap();
        // "<bos>" and friends: the longest token is 5 bytes.
        assert_eq!(tok.max_token_bytes(), 5);
        let huge = "7".repeat(10_000_000);
        let t0 = std::time::Instant::now();
        let got = encode_within(&tok, None, &huge, 1000).unwrap();
        assert_eq!(
            got,
            PromptTokens::TooLong {
                tokens: 2_000_000,
                counted: false
            }
        );
        assert!(t0.elapsed().as_secs_f64() < 1.0, "it was encoded");
        assert_eq!(got.describe(), "at least 2000000 tokens");
        let near = "7".repeat(1002);
        assert_eq!(
            encode_within(&tok, None, &near, 1000).unwrap(),
            PromptTokens::TooLong {
                tokens: 1002,
                counted: true
            }
        );
        assert_eq!(
            encode_within(&tok, None, "12", 1000).unwrap(),
            PromptTokens::Fits(tok.encode("12").unwrap())
        );
    }
}
