//! [`Model`]: a transformer with its VarStore, tokenizer and chat template; how to get one
//! (built-in `tiny`, an HF folder, a GGUF file; `spec.rs` picks among them from what a user
//! names) and how to write it as an HF folder.

use std::path::Path;

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use crate::chat_template::ChatTemplate;
use crate::config::ModelConfig;
use crate::error::{ModelError, Result, TorchContext};
use crate::hf_meta::{self, Declared};
use crate::load;
use crate::lora::{self, LoraConfig};
use crate::tokenizer::Tokenizer;
use crate::transformer::Transformer;

/// A policy model ready to run.
pub struct Model {
    vs: VarStore,
    net: Transformer,
    tokenizer: Option<Tokenizer>,
    chat: Option<ChatTemplate>,
    /// Set when LoRA adapters are attached (`lora.rs`): the base weights are then frozen.
    lora: Option<LoraConfig>,
    /// What the source (an HF folder, a GGUF file) declares about its tokens, written back
    /// completed into every folder ([`crate::hf_meta`]); `None` for the built-in model.
    declared: Option<Declared>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("config", self.net.config())
            .field("device", &self.vs.device())
            .field("kind", &self.net.kind())
            .finish()
    }
}

impl Model {
    /// A randomly initialised model. libtorch's global generator is seeded with `seed` first,
    /// so the same seed gives the same weights.
    pub fn random(cfg: &ModelConfig, device: Device, seed: u64) -> Self {
        let _rng = crate::torch_seed::torch_rng_lock();
        tch::manual_seed(seed as i64);
        let vs = VarStore::new(device);
        let net = Transformer::new(&vs.root(), cfg);
        Model {
            vs,
            net,
            tokenizer: None,
            chat: None,
            lora: None,
            declared: None,
        }
    }

    /// The built-in tiny model with the character tokenizer, randomly initialised.
    pub fn tiny(device: Device, seed: u64) -> Result<Self> {
        let tokenizer = Tokenizer::chars()?;
        let eos = tokenizer
            .token_id("<eos>")
            .ok_or_else(|| ModelError::Tokenizer("character tokenizer lacks <eos>".into()))?;
        // Round the vocabulary up to a multiple of 64 for friendlier GEMM shapes.
        let vocab = (tokenizer.vocab_size() as i64 + 63) / 64 * 64;
        let mut model = Model::random(&ModelConfig::tiny(vocab, eos), device, seed);
        model.tokenizer = Some(tokenizer);
        Ok(model)
    }

    /// Load an HF folder (see `load/hf.rs`).
    pub fn load_hf(dir: &Path, device: Device) -> Result<Self> {
        let folder = load::hf::read_folder(dir)?;
        let mut model = Model::random(&folder.config, device, 0);
        load::copy_weights(&model.vs, folder.tensors, &folder.weights_path)?;
        release_freed_memory();
        model.tokenizer = folder.tokenizer;
        model.chat = folder.chat;
        model.declared = Some(Declared::read_hf(dir)?);
        // A folder saved with adapters carries them beside the base weights.
        if let Some(cfg) = lora::read_config(dir)? {
            model.attach_lora(&cfg)?;
            lora::load_adapters(&model.vs, dir)?;
        }
        Ok(model)
    }

    /// Load a GGUF file, dequantised to f32 (see `load/gguf.rs`).
    pub fn load_gguf(path: &Path, device: Device) -> Result<Self> {
        let file = load::gguf::read_gguf(path)?;
        let mut model = Model::random(&file.config, device, 0);
        load::copy_weights(&model.vs, file.tensors, path)?;
        release_freed_memory();
        model.tokenizer = Some(file.tokenizer);
        model.chat = file.chat;
        model.declared = Some(file.declared);
        Ok(model)
    }

    pub fn config(&self) -> &ModelConfig {
        self.net.config()
    }

    /// Freezes the weights and attaches LoRA adapters (B = 0: the outputs do not change);
    /// returns the number of trainable parameters. Attaching twice is an error.
    pub fn attach_lora(&mut self, cfg: &LoraConfig) -> Result<i64> {
        if self.lora.is_some() {
            return Err(ModelError::Invalid(
                "LoRA adapters are already attached".into(),
            ));
        }
        let n = lora::attach(&self.vs, &mut self.net, cfg)?;
        self.lora = Some(cfg.clone());
        Ok(n)
    }

    /// The LoRA settings when adapters are attached.
    pub fn lora(&self) -> Option<&LoraConfig> {
        self.lora.as_ref()
    }

    pub fn net(&self) -> &Transformer {
        &self.net
    }

    pub fn var_store(&self) -> &VarStore {
        &self.vs
    }

    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// Cast every parameter to `kind` (`Float`, or `BFloat16` on a GPU).
    pub fn set_kind(&mut self, kind: Kind) {
        self.vs.set_kind(kind);
    }

    /// The tokenizer, or an error saying the model came without one.
    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            ModelError::Tokenizer("this model has no tokenizer (no tokenizer.json)".into())
        })
    }

    /// The chat template, or an error saying the model came without one.
    pub fn chat_template(&self) -> Result<&ChatTemplate> {
        self.chat
            .as_ref()
            .ok_or_else(|| ModelError::ChatTemplate("this model has no chat template".into()))
    }

    /// `text` as the model sees a user's prompt (its chat template, when it has one), encoded
    /// unless longer than `limit` tokens ([`crate::encode_within`]).
    pub fn encode_within(&self, text: &str, limit: usize) -> Result<crate::PromptTokens> {
        crate::prompt::encode_within(self.tokenizer()?, self.chat.as_ref(), text, limit)
    }

    /// What the model's source declares about its tokens (`None` for the built-in model).
    pub fn declared(&self) -> Option<&Declared> {
        self.declared.as_ref()
    }

    /// The chat template, when the model has one.
    pub fn chat(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }

    /// Token ids that end a sequence: the config's EOS ids, plus ChatML's `<|im_end|>` when the
    /// model has a chat template.
    pub fn stop_token_ids(&self) -> Vec<i64> {
        let mut ids = self.config().eos_token_ids.clone();
        if let (Some(_), Some(tok)) = (&self.chat, &self.tokenizer) {
            if let Some(end) = tok.token_id("<|im_end|>") {
                if !ids.contains(&end) {
                    ids.push(end);
                }
            }
        }
        ids
    }

    /// Write an HF folder: `config.json`, `model.safetensors` (in the current dtype),
    /// `tokenizer.json`, and for a model from an HF folder or a GGUF file a complete
    /// `tokenizer_config.json` and `generation_config.json` ([`crate::hf_meta`]). The folder is
    /// created.
    /// With LoRA adapters, `model.safetensors` holds the base weights unmerged and the adapters
    /// go to `adapter_model.safetensors` + `adapter_config.json` (loading restores them exactly);
    /// [`Model::save_merged`] writes them folded in instead.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let (base, adapters): (Vec<_>, Vec<_>) = self
            .vs
            .variables()
            .into_iter()
            .partition(|(n, _)| !lora::is_adapter_name(n));
        self.write_folder(dir, &base)?;
        if let Some(cfg) = &self.lora {
            save_named(&adapters, &dir.join(lora::ADAPTER_WEIGHTS))?;
            let path = dir.join(lora::ADAPTER_CONFIG);
            let text = serde_json::to_string_pretty(cfg).map_err(|e| ModelError::Json {
                path: path.clone(),
                message: e.to_string(),
            })?;
            std::fs::write(&path, text).map_err(|e| ModelError::io(&path, e))?;
        }
        Ok(())
    }

    /// Write a plain HF folder with any LoRA adapters folded into the weights
    /// (`W + alpha/rank * B A`); without adapters it is [`Model::save`].
    pub fn save_merged(&self, dir: &Path) -> Result<()> {
        self.write_folder(dir, &lora::merged_variables(&self.vs, &self.net))
    }

    /// Write a GGUF file for llama.cpp, LoRA adapters folded in, with the metadata (architecture,
    /// tokenizer, chat template) of `template`, a GGUF file of the same model
    /// ([`crate::save_gguf`]).
    pub fn save_gguf(
        &self,
        template: &crate::save_gguf::GgufTemplate,
        out: &Path,
        dtype: crate::GgufDtype,
    ) -> Result<()> {
        let weights = lora::merged_variables(&self.vs, &self.net);
        crate::save_gguf::write_gguf(&weights, self.config(), template, out, dtype)
    }

    /// Write the policy (LoRA adapters folded in) as an HF folder of `shards` safetensors
    /// shards with their index ([`crate::shards`]), writing here only the shards in `mine`
    /// (each on a thread) and, with `meta`, the index, `config.json` and the tokenizer files.
    /// Several processes holding the same weights write one folder together, each its share.
    pub fn save_merged_shards(
        &self,
        dir: &Path,
        shards: usize,
        mine: &[usize],
        meta: bool,
    ) -> Result<()> {
        let weights = lora::merged_variables(&self.vs, &self.net);
        let sizes: Vec<(String, u64)> = weights
            .iter()
            .map(|(n, t)| (n.clone(), crate::shards::tensor_bytes(t)))
            .collect();
        let plan = crate::shards::ShardPlan::new(&sizes, shards);
        std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        if meta {
            self.write_meta(dir)?;
        }
        // A plan of fewer shards than asked (a model of few tensors) leaves some writers none.
        let mine: Vec<usize> = mine
            .iter()
            .copied()
            .filter(|&k| k < plan.shards.len())
            .collect();
        crate::shards::write_shards(&weights, &plan, &mine, dir, meta)
    }

    /// Write the LoRA adapters alone as a llama.cpp adapter GGUF (names from `template`, a GGUF
    /// of the base model; [`crate::save_gguf::write_gguf_adapter`]). An error without LoRA.
    pub fn save_gguf_adapter(
        &self,
        template: &crate::save_gguf::GgufTemplate,
        out: &Path,
    ) -> Result<()> {
        let cfg = self.lora.as_ref().ok_or_else(no_adapters)?;
        let adapters = self.adapter_variables();
        crate::save_gguf::write_gguf_adapter(&adapters, cfg, self.config(), template, out)
    }

    /// Write the LoRA adapters alone as a PEFT adapter folder, what vLLM's and SGLang's
    /// `load_lora_adapter` read ([`crate::lora::write_peft_adapter`]). An error without LoRA.
    pub fn save_peft_adapter(&self, dir: &Path) -> Result<()> {
        let cfg = self.lora.as_ref().ok_or_else(no_adapters)?;
        lora::write_peft_adapter(&self.adapter_variables(), cfg, dir)
    }

    fn adapter_variables(&self) -> Vec<(String, Tensor)> {
        self.vs
            .variables()
            .into_iter()
            .filter(|(n, _)| lora::is_adapter_name(n))
            .collect()
    }

    fn write_folder(&self, dir: &Path, weights: &[(String, Tensor)]) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        self.write_meta(dir)?;
        save_named(weights, &dir.join("model.safetensors"))
    }

    /// `config.json`; `tokenizer.json` when the model has a tokenizer; for a model from an HF
    /// folder or a GGUF file, complete `tokenizer_config.json` and `generation_config.json`; for
    /// another one with a chat template (none today), that template alone.
    fn write_meta(&self, dir: &Path) -> Result<()> {
        let config_path = dir.join("config.json");
        let mut config = self.config().to_hf_json();
        // The weights are written in the model's dtype; transformers reads it from here.
        config["torch_dtype"] = serde_json::json!(match self.net.kind() {
            Kind::BFloat16 => "bfloat16",
            Kind::Half => "float16",
            _ => "float32",
        });
        let text = serde_json::to_string_pretty(&config).map_err(|e| ModelError::Json {
            path: config_path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&config_path, text).map_err(|e| ModelError::io(&config_path, e))?;
        if let Some(tok) = &self.tokenizer {
            tok.save(&dir.join("tokenizer.json"))?;
        }
        let tokens = match (&self.declared, &self.tokenizer) {
            (Some(declared), Some(tok)) => {
                let map = hf_meta::tokenizer_config(declared, self.config(), tok, self.chat());
                hf_meta::write_json(&dir.join(hf_meta::TOKENIZER_CONFIG), map.clone())?;
                Some((map, tok))
            }
            (None, _) | (_, None) => {
                if let Some(chat) = &self.chat {
                    let mut map = serde_json::Map::new();
                    map.insert("chat_template".into(), serde_json::json!(chat.source));
                    hf_meta::write_json(&dir.join(hf_meta::TOKENIZER_CONFIG), map)?;
                }
                None
            }
        };
        if let Some(declared) = &self.declared {
            let map = hf_meta::generation_config(
                declared,
                self.config(),
                &self.stop_token_ids(),
                tokens.as_ref().map(|(m, t)| (m, *t)),
            );
            hf_meta::write_json(&dir.join(hf_meta::GENERATION_CONFIG), map)?;
        }
        Ok(())
    }
}

/// Write named tensors (any device) to a safetensors file, sorted by name.
pub(crate) fn save_named(named: &[(String, Tensor)], path: &Path) -> Result<()> {
    let mut cpu: Vec<(String, Tensor)> = named
        .iter()
        .map(|(n, t)| (n.clone(), t.detach().to_device(Device::Cpu).contiguous()))
        .collect();
    cpu.sort_by(|a, b| a.0.cmp(&b.0));
    Tensor::write_safetensors(&cpu, path).ctx(|| format!("writing {}", path.display()))
}

/// Hands the heap pages freed after loading (dequantised or read copies of every weight, about
/// the model's size again) back to the system. glibc keeps freed blocks below its mmap threshold
/// (which grows to 32 MB after large frees) in the process, so without this a loaded 0.5B model
/// held twice its size in resident memory for the whole run.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns unused pages of the allocator's own heap to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn no_adapters() -> ModelError {
    ModelError::Invalid("the model has no LoRA adapters to write".into())
}
