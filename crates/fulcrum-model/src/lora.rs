//! LoRA adapters (Hu et al. 2021, arXiv:2106.09685): train a low-rank update `scale * B A` next
//! to a frozen linear weight `W`, so that `y = x W^T + b + scale * (x A^T) B^T`.
//!
//! [`attach`] freezes every parameter already in the VarStore and adds, for each targeted
//! projection (`q_proj`, `v_proj`, ...), two trainable variables named after it:
//! `model.layers.N.self_attn.q_proj.lora_A` (`[rank, in]`, uniform in `±1/sqrt(in)`) and
//! `...lora_B` (`[out, rank]`, zeros). With `B = 0` the model computes exactly what the base
//! model computes; only the adapters are trainable, so only they enter the optimizer (AdamW
//! takes the variables that require a gradient). `scale = alpha / rank`.
//!
//! Saving (`Model::save`) keeps the base weights unmerged in `model.safetensors` (so the folder
//! is the base model's HF folder) and writes the adapters to `adapter_model.safetensors` with
//! their settings in `adapter_config.json`; loading the folder with fulcrum attaches them again,
//! bit for bit, which is what exact resume needs. `Model::save_merged` folds `scale * B A` into
//! `W` and writes a plain HF folder with no adapter files (`fulcrum convert` does this).
//! Not here: dropout on the adapter input (RL fine-tuning runs without it), bias adapters.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tch::nn::VarStore;
use tch::Tensor;

use crate::error::{ModelError, Result, TorchContext};
use crate::linear::Adapter;
use crate::transformer::Transformer;

/// The projections an adapter may target (HF names of the linear layers).
pub const TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// The adapter file and its settings, beside `model.safetensors`.
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
pub const ADAPTER_CONFIG: &str = "adapter_config.json";

/// LoRA settings (config `model.lora = { rank = 8, alpha = 16, targets = ["q_proj", "v_proj"] }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    /// Rank `r` of the update `B A` (`A` is `[r, in]`, `B` is `[out, r]`).
    pub rank: i64,
    /// The update is scaled by `alpha / rank`.
    pub alpha: f64,
    /// Which projections get an adapter, by HF name (see [`TARGETS`]).
    pub targets: Vec<String>,
}

impl LoraConfig {
    /// `alpha / rank`.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// Range and name checks: the field at fault and why.
    pub fn validate(&self) -> std::result::Result<(), InvalidLora> {
        let bad = |field, reason: String| Err(InvalidLora { field, reason });
        if self.rank < 1 {
            return bad("rank", format!("must be >= 1, got {}", self.rank));
        }
        if !(self.alpha > 0.0 && self.alpha.is_finite()) {
            return bad(
                "alpha",
                format!("must be finite and > 0, got {}", self.alpha),
            );
        }
        if self.targets.is_empty() {
            return bad("targets", format!("empty; valid: {}", TARGETS.join(", ")));
        }
        for t in &self.targets {
            if !TARGETS.contains(&t.as_str()) {
                return bad(
                    "targets",
                    format!("unknown projection {t:?}; valid: {}", TARGETS.join(", ")),
                );
            }
        }
        Ok(())
    }
}

/// A LoRA setting that is out of range: which field of `model.lora` and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidLora {
    pub field: &'static str,
    pub reason: String,
}

impl std::fmt::Display for InvalidLora {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Freezes every variable of `vs` and attaches adapters to the targeted projections of `net`.
/// Returns the number of trainable adapter parameters.
pub fn attach(vs: &VarStore, net: &mut Transformer, cfg: &LoraConfig) -> Result<i64> {
    cfg.validate()
        .map_err(|e| ModelError::Invalid(format!("lora.{e}")))?;
    for (_, var) in vs.variables() {
        let _ = var.set_requires_grad(false);
    }
    let mut trainable = 0;
    // The A matrices draw from libtorch's global generator.
    let _rng = crate::torch_seed::torch_rng_lock();
    for (name, linear) in net.linears_mut() {
        let short = name.rsplit('.').next().unwrap_or_default();
        if !cfg.targets.iter().any(|t| t == short) {
            continue;
        }
        if linear.adapter().is_some() {
            return Err(ModelError::Invalid(format!(
                "{name}: already has a LoRA adapter"
            )));
        }
        let (out_dim, in_dim) = linear.shape();
        let mut p = vs.root();
        for part in name.split('.') {
            p = &p / part;
        }
        let bound = 1.0 / (in_dim as f64).sqrt();
        let a = p.var(
            "lora_A",
            &[cfg.rank, in_dim],
            tch::nn::Init::Uniform {
                lo: -bound,
                up: bound,
            },
        );
        let b = p.var("lora_B", &[out_dim, cfg.rank], tch::nn::Init::Const(0.0));
        trainable += cfg.rank * (in_dim + out_dim);
        linear.set_adapter(Adapter::new(a, b, cfg.scale()));
    }
    if trainable == 0 {
        return Err(ModelError::Invalid(format!(
            "lora.targets: none of {:?} is in this model",
            cfg.targets
        )));
    }
    Ok(trainable)
}

/// Whether a VarStore name is an adapter variable.
pub fn is_adapter_name(name: &str) -> bool {
    name.ends_with(".lora_A") || name.ends_with(".lora_B")
}

/// The weights of `net` with every adapter folded in (`W + scale * B A`), by HF name, plus the
/// names of the other variables of `vs` unchanged; adapter variables are left out.
pub fn merged_variables(vs: &VarStore, net: &Transformer) -> Vec<(String, Tensor)> {
    let deltas: HashMap<String, Tensor> = tch::no_grad(|| {
        net.linears()
            .into_iter()
            .filter_map(|(name, l)| l.adapter().map(|a| (format!("{name}.weight"), a.delta())))
            .collect()
    });
    vs.variables()
        .into_iter()
        .filter(|(n, _)| !is_adapter_name(n))
        .map(|(n, t)| match deltas.get(&n) {
            Some(d) => {
                let merged = tch::no_grad(|| &t + d.to_kind(t.kind()));
                (n, merged)
            }
            None => (n, t),
        })
        .collect()
}

/// Reads `adapter_config.json` from a model folder, if there is one.
pub fn read_config(dir: &Path) -> Result<Option<LoraConfig>> {
    let path = dir.join(ADAPTER_CONFIG);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| ModelError::io(&path, e))?;
    let cfg: LoraConfig = serde_json::from_str(&text).map_err(|e| ModelError::Json {
        path: path.clone(),
        message: e.to_string(),
    })?;
    cfg.validate().map_err(|e| ModelError::Config {
        path: path.clone(),
        field: e.field.to_string(),
        message: e.to_string(),
    })?;
    Ok(Some(cfg))
}

/// Copies the adapter tensors of `dir/adapter_model.safetensors` into the adapter variables of
/// `vs`; a missing, misshapen or unused tensor is an error naming it.
pub fn load_adapters(vs: &VarStore, dir: &Path) -> Result<()> {
    let path = dir.join(ADAPTER_WEIGHTS);
    let tensors = Tensor::read_safetensors(&path).ctx(|| format!("reading {}", path.display()))?;
    let vars: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .filter(|(n, _)| is_adapter_name(n))
        .collect();
    crate::load::copy_named(vars, tensors.into_iter().collect(), &path)
}

/// Writes adapter variables (`...q_proj.lora_A`, `...lora_B`) as a PEFT adapter folder, the
/// format vLLM's and SGLang's `load_lora_adapter` read: `adapter_model.safetensors` with PEFT's
/// names (`base_model.model.<module>.lora_A.weight`) and an `adapter_config.json` of a plain
/// LoRA (`r`, `lora_alpha`, `target_modules`, no bias, no dropout). This is not the folder
/// `Model::save` writes (fulcrum's own, for exact resume): a push writes this one.
pub fn write_peft_adapter(
    adapters: &[(String, Tensor)],
    cfg: &LoraConfig,
    dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
    let named: Vec<(String, Tensor)> = adapters
        .iter()
        .map(|(n, t)| (format!("base_model.model.{n}.weight"), t.shallow_clone()))
        .collect();
    crate::model::save_named(&named, &dir.join(ADAPTER_WEIGHTS))?;
    // PEFT writes an integral alpha as an integer (vLLM's PEFTHelper types it `int`).
    let alpha = if cfg.alpha.fract() == 0.0 && cfg.alpha.abs() < 1e15 {
        serde_json::json!(cfg.alpha as i64)
    } else {
        serde_json::json!(cfg.alpha)
    };
    let config = serde_json::json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": cfg.rank,
        "lora_alpha": alpha,
        "target_modules": cfg.targets,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": false,
        "use_rslora": false,
        "use_dora": false,
        "inference_mode": true,
    });
    let path = dir.join(ADAPTER_CONFIG);
    let text = serde_json::to_string_pretty(&config).map_err(|e| ModelError::Json {
        path: path.clone(),
        message: e.to_string(),
    })?;
    std::fs::write(&path, text).map_err(|e| ModelError::io(&path, e))
}

/// Number of elements of the variables that require a gradient (tch's own
/// `trainable_variables` still lists frozen ones: it records how a variable was created).
pub fn trainable_parameters(vs: &VarStore) -> i64 {
    vs.variables()
        .values()
        .filter(|t| t.requires_grad())
        .map(Tensor::numel)
        .sum::<usize>() as i64
}
