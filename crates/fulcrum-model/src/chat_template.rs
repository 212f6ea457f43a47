//! Chat templates: ChatML, the format of Qwen and SmolLM2, rendered in Rust.
//!
//! We do not run Jinja. A model's template (from `tokenizer_config.json` or the GGUF metadata) is
//! recognised as ChatML by its `<|im_start|>` markers, and a literal default system message
//! (SmolLM2's "You are a helpful AI assistant named SmolLM...", Qwen2.5's "You are Qwen...") is
//! read from it. Any other template is an error naming what was found, never a silent fallback.

use crate::error::{ModelError, Result};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn user(content: impl Into<String>) -> Self {
        Message {
            role: "user".into(),
            content: content.into(),
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Message {
            role: "system".into(),
            content: content.into(),
        }
    }
}

/// A chat format fulcrum can render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    /// The template source as the model shipped it (saved back unchanged).
    pub source: String,
    /// System message the template inserts when the conversation has none.
    pub default_system: Option<String>,
}

const SYSTEM_OPEN: &str = "<|im_start|>system\n";
const END: &str = "<|im_end|>";

impl ChatTemplate {
    /// Recognise a Jinja chat template; only ChatML is supported.
    pub fn from_source(source: &str) -> Result<Self> {
        if !source.contains("<|im_start|>") || !source.contains(END) {
            let head: String = source.chars().take(80).collect();
            return Err(ModelError::ChatTemplate(format!(
                "unsupported template (only ChatML with <|im_start|>/<|im_end|> is rendered), starts with {head:?}"
            )));
        }
        // Jinja string literals write a newline as backslash-n.
        let text = source.replace("\\n", "\n");
        let default_system = text.find(SYSTEM_OPEN).and_then(|at| {
            let rest = &text[at + SYSTEM_OPEN.len()..];
            let lit = &rest[..rest.find(END)?];
            let is_literal = !lit.is_empty() && !lit.contains(['\'', '"', '{', '}', '+']);
            is_literal.then(|| lit.to_string())
        });
        Ok(ChatTemplate {
            source: source.to_string(),
            default_system,
        })
    }

    /// The prompt text for `messages`, ending with the assistant header when
    /// `add_generation_prompt` is true.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> String {
        let mut out = String::new();
        let has_system = messages.first().is_some_and(|m| m.role == "system");
        if let (false, Some(system)) = (has_system, &self.default_system) {
            out.push_str(&format!("{SYSTEM_OPEN}{system}{END}\n"));
        }
        for m in messages {
            out.push_str(&format!("<|im_start|>{}\n{}{END}\n", m.role, m.content));
        }
        if add_generation_prompt {
            out.push_str("<|im_start|>assistant\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOL: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn smollm2_template_renders_its_default_system_prompt() {
        let t = ChatTemplate::from_source(SMOL).unwrap();
        let text = t.render(&[Message::user("What is 7 times 8?")], true);
        assert_eq!(
            text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn an_explicit_system_message_replaces_the_default() {
        let t = ChatTemplate::from_source(SMOL).unwrap();
        let text = t.render(&[Message::system("Be brief."), Message::user("Hi")], false);
        assert_eq!(
            text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }

    #[test]
    fn a_template_built_from_message_content_has_no_default_system() {
        let src = "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}";
        assert_eq!(ChatTemplate::from_source(src).unwrap().default_system, None);
    }

    #[test]
    fn non_chatml_templates_are_refused() {
        let llama3 = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}";
        assert!(ChatTemplate::from_source(llama3).is_err());
    }
}
