//! Engine-neutral requests and completions.

/// How tokens are drawn. Every engine is sent all of it explicitly (llama.cpp's defaults are
/// not neutral: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    pub temperature: f64,
    /// `None`: off.
    pub top_k: Option<i64>,
    /// `None`: off (1.0).
    pub top_p: Option<f64>,
}

impl SamplingParams {
    /// Temperature 1 with no truncation: the engine's raw log-probabilities are those of the
    /// distribution sampled from.
    pub fn is_plain(&self) -> bool {
        self.temperature == 1.0 && self.top_k.is_none() && self.top_p.is_none()
    }
}

/// One prompt, completed `n` times (one GRPO group).
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    pub prompt_ids: Vec<i64>,
    pub n: usize,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Completion `j` of this request draws from seed `seed + j` where the engine seeds
    /// completions one by one, or from the engine's own stream under `seed` otherwise.
    pub seed: u64,
    /// A sampled token in this list ends its completion (and is kept in `tokens`).
    pub stop_token_ids: Vec<i64>,
    /// The LoRA adapter to sample with, by the name it was loaded under ([`ADAPTER_NAME`]):
    /// vLLM and SGLang apply an adapter per request; llama.cpp applies the one it loaded.
    pub adapter: Option<String>,
}

/// The name a policy's LoRA adapter is loaded under on vLLM and SGLang.
pub const ADAPTER_NAME: &str = "fulcrum-policy";

/// Why a completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token (kept as the last of `tokens`) or end of sequence.
    Stop,
    /// `max_tokens` reached: the response is truncated.
    Length,
}

/// One completion as the engine returned it.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineCompletion {
    pub tokens: Vec<i64>,
    /// The engine's log-probability of each of `tokens`; NaN where it gave none (llama.cpp:
    /// the leading byte tokens of a character split over several tokens).
    pub logprobs: Vec<f32>,
    pub finish: FinishReason,
    /// The weight version the engine says produced it, where the engine tells (SGLang's
    /// `weight_version`, the `X-Weight-Version` of scripts/llamacpp-server.sh); else the
    /// version the pool last pushed to that engine.
    pub weight_version: Option<u64>,
    /// The engine that served it.
    pub engine: String,
}

/// How pushed weights are written for an engine to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// An HF folder (`config.json`, safetensors shards and their index, tokenizer): vLLM and
    /// SGLang.
    HfFolder,
    /// A GGUF file: llama.cpp.
    Gguf,
    /// A PEFT LoRA adapter folder (`adapter_config.json`, `adapter_model.safetensors`) on the
    /// engine's own base weights: vLLM's and SGLang's `load_lora_adapter`.
    PeftAdapter,
    /// A llama.cpp LoRA adapter GGUF, loaded beside the server's own base file.
    GgufAdapter,
}

impl WeightFormat {
    /// Whether the files are an adapter on the engine's base weights, not whole weights.
    pub fn is_adapter(self) -> bool {
        matches!(self, WeightFormat::PeftAdapter | WeightFormat::GgufAdapter)
    }
}

/// Weights written to disk for engines to load (the disk transport of the weight push; an
/// NCCL broadcast would hand the engines tensors instead of a path).
#[derive(Debug, Clone, PartialEq)]
pub struct WeightFiles {
    pub format: WeightFormat,
    /// The folder (HF) or file (GGUF), absolute, on a file system the engines see.
    pub path: std::path::PathBuf,
}
