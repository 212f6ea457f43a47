//! fulcrum-model: the policy that samples responses and learns.
//!
//! One decoder-only transformer ([`transformer::Transformer`]) on libtorch through `tch`,
//! configured for Llama, Qwen2/2.5 and Qwen3 ([`config::ModelConfig`]); [`Model`] bundles it
//! with its tokenizer and chat template and loads HF folders and GGUF files; a KV-cache batched
//! sampler; per-token log-probabilities for training; AdamW; checkpoints as safetensors.
pub mod chat_template;
pub mod checkpoint;
pub mod config;
pub mod device;
pub mod error;
pub mod kv_cache;
pub mod load;
pub mod logprobs;
pub mod lora;
pub mod masked_logprobs;
pub mod model;
pub mod optim;
pub mod rng;
pub mod sampler;
pub mod tokenizer;
pub mod transformer;

pub use chat_template::{ChatTemplate, Message};
pub use config::{Arch, ModelConfig};
pub use device::DeviceChoice;
pub use error::{ModelError, Result};
pub use logprobs::{sequence_logprobs, token_logprobs, weighted_sum, TokenLogprobs};
pub use lora::LoraConfig;
pub use model::Model;
pub use sampler::{generate, Completion, Finish, SampleRequest, Sampling};
pub use tokenizer::Tokenizer;

pub use checkpoint::{load_model, load_optimizer, save_checkpoint};
pub use optim::{clip_grad_norm, grad_norm, grads_are_finite, AdamW, AdamWConfig, LrSchedule};
/// libtorch bindings, re-exported so that dependants use the same `tch` (devices, kinds, tensors).
pub use tch;
