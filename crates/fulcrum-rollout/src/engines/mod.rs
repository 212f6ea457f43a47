//! The engines: what every client does ([`EngineClient`]) and one module per engine.

pub mod llamacpp;
pub mod sglang;
pub mod vllm;

use std::time::Duration;

use crate::error::{EngineError, Result};
use crate::http::Http;
use crate::request::{EngineCompletion, GenerateRequest, WeightFiles, WeightFormat};

fulcrum_core::closed_set! {
    /// Where rollouts are sampled (config `rollout.engine`).
    pub enum EngineKind("rollout engine") {
        /// fulcrum's own KV-cache sampler, in the trainer's process (the default).
        Native = "native",
        /// vLLM's OpenAI-compatible server (`/v1/completions`).
        Vllm = "vllm",
        /// SGLang's server (`/generate`).
        Sglang = "sglang",
        /// llama.cpp's server (`/completion`), as run by scripts/llamacpp-server.sh.
        Llamacpp = "llamacpp",
    }
}

impl EngineKind {
    /// The files a weight push writes for this engine.
    pub fn weight_format(self) -> WeightFormat {
        match self {
            EngineKind::Llamacpp => WeightFormat::Gguf,
            _ => WeightFormat::HfFolder,
        }
    }

    /// The files a weight push of a LoRA policy writes for this engine: the adapter alone.
    pub fn adapter_format(self) -> WeightFormat {
        match self {
            EngineKind::Llamacpp => WeightFormat::GgufAdapter,
            _ => WeightFormat::PeftAdapter,
        }
    }
}

/// One engine server (or one router in front of many).
pub trait EngineClient: Send + Sync {
    /// The client of the server's base URL.
    fn http(&self) -> &Http;
    /// The base URL, as configured.
    fn url(&self) -> &str {
        self.http().base()
    }
    /// Completes one prompt `req.n` times.
    fn generate(&self, req: &GenerateRequest) -> Result<Vec<EngineCompletion>>;
    /// Loads weights written to disk and tags what it samples from now on with `version`.
    fn load_weights(&self, files: &WeightFiles, version: u64) -> Result<()>;
    /// Colocation (`rollout.colocate`): frees the engine's accelerator memory (weights and KV
    /// cache) so that the trainer's update can use it. The engine samples nothing until
    /// [`EngineClient::load_weights_released`] has given it weights again.
    fn release_memory(&self) -> Result<()> {
        Err(no_colocation(self.url()))
    }
    /// Colocation: takes the weights' memory back, loads `files` into it as `version`, then
    /// takes the KV cache's memory back, so the engine samples again.
    fn load_weights_released(&self, _files: &WeightFiles, _version: u64) -> Result<()> {
        Err(no_colocation(self.url()))
    }
    /// Answers when the engine is up (`GET /health`, the same route on all three engines); a
    /// probe, bounded by [`crate::PROBE_TIMEOUT`].
    fn health(&self) -> Result<()> {
        self.http().probe("/health").map(|_| ())
    }
    /// The model file the engine serves, where it says (llama.cpp's `/props`): the metadata
    /// template of a GGUF push. A probe, bounded by [`crate::PROBE_TIMEOUT`].
    fn model_path(&self) -> Result<Option<String>> {
        Ok(None)
    }
}

/// An engine with no call to free its memory for a colocated trainer.
fn no_colocation(url: &str) -> EngineError {
    EngineError::Unsupported {
        url: url.into(),
        what: "this engine cannot free its memory for a colocated trainer (rollout.colocate \
               needs vLLM or SGLang)"
            .into(),
    }
}

/// A client of `kind` for the server at `url`, each call bounded by `timeout`.
pub fn connect(kind: EngineKind, url: &str, timeout: Duration) -> Result<Box<dyn EngineClient>> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(EngineError::Config(format!(
            "rollout.engine_urls: {url:?} is not an http:// or https:// URL"
        )));
    }
    Ok(match kind {
        EngineKind::Native => {
            return Err(EngineError::Config(
                "the native sampler runs in the trainer and has no URL".into(),
            ))
        }
        EngineKind::Vllm => Box::new(vllm::Vllm::new(url, timeout)),
        EngineKind::Sglang => Box::new(sglang::Sglang::new(url, timeout)),
        EngineKind::Llamacpp => Box::new(llamacpp::LlamaCpp::new(url, timeout)),
    })
}

/// Reads a field the parser needs, or says which one is missing.
pub(crate) fn field<'a>(
    v: &'a serde_json::Value,
    url: &str,
    path: &str,
) -> Result<&'a serde_json::Value> {
    v.pointer(path).ok_or_else(|| EngineError::Malformed {
        url: url.to_string(),
        what: format!("no `{}` in the reply", path.trim_start_matches('/')),
    })
}

/// The `n` completions of a reply that is one object (for `n = 1`) or a list of them.
pub(crate) fn one_or_many<'a>(
    reply: &'a serde_json::Value,
    n: usize,
    url: &str,
) -> Result<Vec<&'a serde_json::Value>> {
    let items: Vec<&serde_json::Value> = match reply {
        serde_json::Value::Array(list) => list.iter().collect(),
        one @ serde_json::Value::Object(_) => vec![one],
        _ => {
            return Err(EngineError::Malformed {
                url: url.into(),
                what: "the reply is neither a completion nor a list of them".into(),
            })
        }
    };
    if items.len() != n {
        return Err(EngineError::Malformed {
            url: url.into(),
            what: format!("{} completions for n = {n}", items.len()),
        });
    }
    Ok(items)
}

/// Refuses weight files of another format than the engine loads.
pub(crate) fn expect_format(
    url: &str,
    engine: &str,
    files: &WeightFiles,
    want: WeightFormat,
) -> Result<()> {
    if files.format == want {
        return Ok(());
    }
    Err(EngineError::Config(format!(
        "{url}: {engine} loads {want:?} weights, not {:?}",
        files.format
    )))
}

/// A JSON array of token ids.
pub(crate) fn ids(v: &serde_json::Value, url: &str, what: &str) -> Result<Vec<i64>> {
    let bad = || EngineError::Malformed {
        url: url.to_string(),
        what: format!("`{what}` is not a list of token ids"),
    };
    v.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|x| x.as_i64().ok_or_else(bad))
        .collect()
}

/// Checks a completion's lengths line up (one log-probability per token, at most `max`
/// tokens, every log-probability a finite number <= 0, or NaN where the engine gave none)
/// before it reaches the trainer.
pub(crate) fn check_completion(c: &EngineCompletion, max_tokens: usize) -> Result<()> {
    let bad = |what: String| EngineError::Malformed {
        url: c.engine.clone(),
        what,
    };
    if c.tokens.len() != c.logprobs.len() {
        return Err(bad(format!(
            "{} tokens but {} log-probabilities",
            c.tokens.len(),
            c.logprobs.len()
        )));
    }
    if c.tokens.len() > max_tokens {
        return Err(bad(format!(
            "{} tokens, more than max_tokens = {max_tokens}",
            c.tokens.len()
        )));
    }
    if let Some(lp) = c
        .logprobs
        .iter()
        .find(|lp| !(lp.is_nan() || (lp.is_finite() && **lp <= 1e-3)))
    {
        return Err(bad(format!(
            "log-probability {lp} is not a finite number <= 0"
        )));
    }
    Ok(())
}
