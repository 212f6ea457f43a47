//! fulcrum-model: the policy that samples responses and learns.
//!
//! One decoder-only transformer on libtorch through `tch`, configured for Llama, Qwen2/2.5 and
//! Qwen3. The façade is [`Model`] (a transformer with its tokenizer and chat template), how to
//! name one ([`ModelSpec`]: `tiny`, HF folder, GGUF file, run directory), where it runs
//! ([`Runtime`], [`DeviceChoice`], [`Dtype`]), sampling ([`generate`]), log-probabilities,
//! [`AdamW`], and the model's and optimizer's files of a checkpoint. Modules, bottom up:
//!
//! - `config`: [`ModelConfig`] from HF `config.json` or GGUF metadata, every hyper-parameter
//!   checked (alone, against the others, against the bounds of [`limits`], and against the
//!   weight files' headers) before any tensor is made;
//! - `linear`: the linear layer and its LoRA adapter; `transformer`: the network (RmsNorm,
//!   attention with RoPE, SwiGLU, layers); `kv_cache`: the sampler's cache; `lora`: attaching,
//!   saving and merging adapters;
//! - `load` (HF folders, GGUF files), `tokenizer`, `chat_template`, `model`, `spec`; `hf_meta`:
//!   the complete `tokenizer_config.json` and `generation_config.json` every folder gets;
//!   `save_gguf` and `save_gguf_meta`: a GGUF file for llama.cpp; `prompt`:
//!   a prompt's tokens held against a length limit, also without the weights
//!   ([`PromptEncoder`]);
//! - `sampler`: the KV-cache batched sampler; `logprobs` and `masked_logprobs`: per-token
//!   log-probabilities and entropy for training (the LM head only on response positions);
//!   `shared_prompt`: the same with a group's common prompt forwarded once;
//! - `optim`: AdamW, gradient clipping, learning-rate schedules; `checkpoint`: model and
//!   optimizer files, and the manifest every load of a checkpoint folder is verified against
//!   (the trainer owns the atomic write and the metadata);
//! - `runtime`: device, dtype, threads; `error`: [`ModelError`].
//!
//! Random streams come from `fulcrum_core::SplitMix64`; libtorch's own generator only draws
//! initial weights, under a process-wide lock.
mod chat_template;
mod checkpoint;
mod config;
mod error;
pub mod hf_meta;
mod kv_cache;
pub mod limits;
mod linear;
mod load;
pub mod logprobs;
pub mod lora;
pub mod masked_logprobs;
mod model;
pub mod optim;
mod prompt;
mod runtime;
pub mod sampler;
pub mod save_gguf;
mod save_gguf_meta;
pub mod shards;
pub mod shared_prompt;
mod spec;
mod tokenizer;
mod torch_seed;
mod transformer;
pub mod turns;

pub use chat_template::{ChatTemplate, Message};
pub use config::{Arch, Field, ModelConfig};
pub use error::{HyperProblem, ModelError, Result};
pub use logprobs::{sequence_logprobs, token_logprobs, weighted_sum, TokenLogprobs};
pub use lora::{InvalidLora, LoraConfig};
pub use model::Model;
pub use prompt::{encode_within, PromptEncoder, PromptTokens};
pub use runtime::{DeviceChoice, Dtype, Runtime};
pub use sampler::{generate, generate_turns, Completion, Finish, SampleRequest, Sampling};
pub use save_gguf::GgufDtype;
pub use spec::ModelSpec;
pub use tokenizer::Tokenizer;

pub use checkpoint::{
    is_checkpoint, load_model, load_optimizer, read_named, save_checkpoint_files,
    save_model_and_optimizer, sha256_file, verify_checkpoint, FileEntry, Manifest,
    CHECKPOINT_FORMAT, MANIFEST, MASTER_FILE, OPTIMIZER_FILE,
};
pub use optim::{
    clip_grad_norm, grad_norm, grads_are_finite, AdamW, AdamWConfig, LrSchedule, Update,
};
/// libtorch bindings, re-exported so that dependants use the same `tch` (devices, kinds, tensors).
pub use tch;
