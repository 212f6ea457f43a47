//! What sampling produces: a sampled and scored response ([`Rollout`]) with what an inference
//! engine said of it ([`EngineSample`]), and the settings of one sampling call
//! ([`SampleSettings`]). The data types only: where responses are sampled is `engine.rs`, how
//! they are scored `score.rs`, how a step draws its groups `draw.rs`.

use fulcrum_model::Sampling;

/// One sampled and scored response, with what the update needs (serialisable: ranks of a
/// data-parallel job exchange them).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Rollout {
    /// Index of its prompt (group) within the step batch.
    pub group: usize,
    pub prompt_ids: Vec<i64>,
    /// Sampled tokens, the stop token included (it is part of what the policy chose).
    pub response_ids: Vec<i64>,
    /// Log-probabilities of `response_ids` under the policy that sampled them, as the trainer
    /// computes them: the native sampler's own; for engine rollouts empty until the step's
    /// trainer forward fills them (offpolicy.rs).
    pub old_logprobs: Vec<f32>,
    /// What an inference engine said of this response, when one sampled it.
    pub engine: Option<EngineSample>,
    /// Per-token importance weights of the policy loss (truncated importance sampling against
    /// engine/trainer mismatch); `None`: 1.
    pub is_weights: Option<Vec<f32>>,
    /// The response hit `max_response_len` without stopping.
    pub truncated: bool,
    /// Decoded response (stop token left out).
    pub text: String,
    pub reward: f64,
    pub correct: bool,
    pub reason: String,
    /// Per response token: whether a tool wrote it (a multi-turn response, `tools.rs`); empty:
    /// every token is the model's. Tool tokens are context: no loss, no length.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_mask: Vec<bool>,
}

impl Rollout {
    /// Whether response token `j` was written by a tool.
    pub fn is_tool(&self, j: usize) -> bool {
        self.tool_mask.get(j).copied().unwrap_or(false)
    }

    /// The tool calls the response made: its runs of tool tokens (each answers one call).
    pub fn tool_calls(&self) -> usize {
        let m = &self.tool_mask;
        (0..m.len())
            .filter(|&j| m[j] && (j == 0 || !m[j - 1]))
            .count()
    }

    /// The response's length for the aggregation rules: the model's own tokens.
    pub fn model_len(&self) -> usize {
        self.response_ids.len() - self.tool_mask.iter().filter(|&&t| t).count()
    }
}

/// An engine's side of a rollout.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EngineSample {
    /// The engine's log-probability of each response token.
    pub logprobs: Vec<f32>,
    /// The weight version that sampled it (as the engine reports, else as last pushed).
    pub weight_version: Option<u64>,
}

/// Settings of one sampling call.
#[derive(Debug, Clone, Copy)]
pub struct SampleSettings {
    pub samples_per_prompt: usize,
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    pub seed: u64,
    /// Index of the first prompt within its step's draw (a rank's share starts past 0): the
    /// sampling streams are those of the whole draw.
    pub first_prompt: usize,
    pub max_prompt_len: usize,
}
