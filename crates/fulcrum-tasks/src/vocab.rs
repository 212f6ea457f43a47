//! The built-in character-level vocabulary of the synthetic tasks.
//!
//! Every prompt, demonstration and correct answer the synthetic families produce uses only the
//! characters in [`CHARS`] (a test checks this), so a tiny character-level model can be trained
//! on them from scratch. The built-in model's tokenizer (fulcrum-model's `Tokenizer::chars`)
//! knows newline and every printable ASCII character, a superset of [`CHARS`]; text read from a
//! data file is checked against the model's own tokenizer before a run starts
//! (`Task::check_text`), naming the file, line and character it lacks. The ids here (specials
//! `0..SPECIALS.len()`, then one per character in [`CHARS`] order) are this module's own, for
//! measuring lengths in tests: append, never reorder.

/// Special tokens, in id order: padding, start of sequence, end of sequence, unknown character.
pub const SPECIALS: [&str; 4] = ["<pad>", "<bos>", "<eos>", "<unk>"];

/// The characters, in id order (after the specials).
pub const CHARS: &str =
    "\n 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+-*/=()[],.:;?!<>#'_|";

/// The vocabulary as a value: encode and decode text with the built-in alphabet.
#[derive(Debug, Clone, Copy, Default)]
pub struct CharVocab;

impl CharVocab {
    /// The id of `<pad>`.
    pub const PAD: u32 = 0;
    /// The id of `<bos>`.
    pub const BOS: u32 = 1;
    /// The id of `<eos>`.
    pub const EOS: u32 = 2;
    /// The id of `<unk>`.
    pub const UNK: u32 = 3;

    /// Number of ids (specials plus characters).
    pub fn len(&self) -> usize {
        SPECIALS.len() + CHARS.chars().count()
    }

    /// Never empty; here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The id of one character, `UNK` if it is not in the alphabet.
    pub fn id(&self, c: char) -> u32 {
        CHARS
            .chars()
            .position(|x| x == c)
            .map_or(Self::UNK, |i| (i + SPECIALS.len()) as u32)
    }

    /// Encodes text, character by character (no specials added).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.chars().map(|c| self.id(c)).collect()
    }

    /// Decodes ids; specials other than `<unk>` are dropped, `<unk>` becomes `?`.
    pub fn decode(&self, ids: &[u32]) -> String {
        let chars: Vec<char> = CHARS.chars().collect();
        ids.iter()
            .filter_map(|&id| {
                let id = id as usize;
                if id == Self::UNK as usize {
                    Some('?')
                } else if id < SPECIALS.len() {
                    None
                } else {
                    chars.get(id - SPECIALS.len()).copied()
                }
            })
            .collect()
    }

    /// True when every character of `text` is in the alphabet.
    pub fn covers(&self, text: &str) -> bool {
        text.chars().all(|c| CHARS.contains(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chars_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in CHARS.chars() {
            assert!(seen.insert(c), "duplicate {c:?}");
        }
    }

    #[test]
    fn encode_then_decode_round_trips() {
        let v = CharVocab;
        let text = "12+34=46\nAnswer: 46";
        assert_eq!(v.decode(&v.encode(text)), text);
        assert_eq!(v.encode("\u{e9}"), vec![CharVocab::UNK]);
        assert_eq!(v.len(), SPECIALS.len() + CHARS.chars().count());
    }
}
