//! Where a run is shown and what it leaves: `[logging]` (TensorBoard, Weights & Biases) and
//! `[export]` (the final checkpoint as files other tools open).

use serde::{Deserialize, Serialize};

fulcrum_core::closed_set! {
    /// How the W&B sidecar logs (config `logging.wandb_mode`).
    pub enum WandbMode("W&B mode") {
        /// To the W&B server the user is logged in to.
        Online = "online",
        /// To W&B's offline run directory only (`wandb sync` uploads it later).
        Offline = "offline",
    }
}

/// `[logging]`: dashboards fed the same records as `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// A TensorBoard event file under `<run_dir>/tb/`, written as the run goes.
    pub tensorboard: bool,
    /// Logs the run to Weights & Biases through its own Python SDK (a sidecar process).
    pub wandb: bool,
    /// The W&B project (unset: `fulcrum`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wandb_project: Option<String>,
    /// The W&B entity (unset: the logged-in user's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wandb_entity: Option<String>,
    pub wandb_mode: WandbMode,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            tensorboard: true,
            wandb: false,
            wandb_project: None,
            wandb_entity: None,
            wandb_mode: WandbMode::Online,
        }
    }
}

/// `[export]`: the final checkpoint also as files the ecosystem opens without a conversion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// `checkpoints/final/hf/`: a plain HF folder (a LoRA run's adapters folded in), and for a
    /// LoRA run `checkpoints/final/adapter/` (PEFT's format).
    pub hf: bool,
    /// `checkpoints/final/model.gguf`, for llama.cpp.
    pub gguf: bool,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            hf: true,
            gguf: false,
        }
    }
}
