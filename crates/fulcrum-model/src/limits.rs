//! Upper bounds on the sizes a user types (config keys, command-line flags) and on a model's
//! hyper-parameters, checked before anything is allocated.
//!
//! Each bound is far above what any real run or published model uses, so that only a typo, a
//! wrong unit or a hostile file meets it; below it, memory is the machine's business. Without
//! them an absurd value reached libtorch as an allocation failure, a thread explosion or an
//! overflow, after minutes of work and with no word of which setting was at fault.

/// Prompt or response length in tokens (`rollout.max_prompt_len`, `rollout.max_response_len`,
/// `--max-new-tokens`): 2^20 = 1,048,576, eight times the longest context of the models fulcrum
/// loads (Qwen's 131,072) and 128 times the paper's 8,192-token responses.
pub const MAX_SEQUENCE_TOKENS: usize = 1 << 20;

/// Responses sampled for one prompt (`rollout.group_size`, `eval.k`, `--k`,
/// `--samples-per-problem`): 65,536, 32 times the largest pass@k studies (k = 2,048) and 1,000
/// times a usual GRPO group.
pub const MAX_SAMPLES_PER_PROMPT: usize = 1 << 16;

/// Prompts of one step or one evaluation (`rollout.prompts_per_step`, `eval.prompts`,
/// `eval.greedy_prompts`, `--prompts`): 2^20, ten times the largest evaluation sets and 2,000
/// times a paper-scale step's 512 prompts.
pub const MAX_PROMPTS: usize = 1 << 20;

/// Sequences in one batch (responses of a step, `ppo.micro_batch_size`, `sft.batch_size`,
/// `sft.micro_batch_size`, `--batch-size`): 2^20, 128 times a paper-scale step's 8,192
/// responses.
pub const MAX_BATCH_SEQUENCES: usize = 1 << 20;

/// libtorch's CPU threads (`threads`, `--threads`): 4,096, several times the hardware threads
/// of the largest machines (two 192-core CPUs: 768).
pub const MAX_THREADS: usize = 4096;

/// Hyper-parameters of a model (`config.json`, GGUF metadata): each bound is several times the
/// largest open model's value, so that a file that lies is refused before its tensors are made.
pub mod model {
    /// `vocab_size`: 2^24 = 16,777,216, 64 times the largest vocabularies (262,144).
    pub const MAX_VOCAB: i64 = 1 << 24;
    /// `hidden_size`: 65,536, four times the widest open models (16,384).
    pub const MAX_HIDDEN: i64 = 1 << 16;
    /// `intermediate_size`: 2^18 = 262,144, about five times the widest (53,248).
    pub const MAX_INTERMEDIATE: i64 = 1 << 18;
    /// `num_hidden_layers`: 1,024, eight times the deepest open models (126).
    pub const MAX_LAYERS: i64 = 1024;
    /// `num_attention_heads` (and key/value heads): 1,024, eight times the most (128).
    pub const MAX_HEADS: i64 = 1024;
    /// `head_dim`: 1,024, four times the largest (256).
    pub const MAX_HEAD_DIM: i64 = 1024;
    /// `max_position_embeddings`: 2^27 = 134,217,728, more than ten times the longest context
    /// of any open model (10M).
    pub const MAX_POSITIONS: i64 = 1 << 27;
}
