//! The trainer's one `Config`: every key, its default and its meaning in one place.
//!
//! Precedence: built-in defaults < the TOML file < `--set key=value` overrides (dotted keys, e.g.
//! `--set steps=8 --set ppo.eps_high=0.28`). Unknown keys and wrong types are errors that name
//! the file and the key path; ranges are checked by [`Config::validate`]. The resolved config is
//! written to the run directory as `config.toml`, so a run can be repeated exactly.
//!
//! The rule, estimator and BA-count names are the spec's (`ba`, `ba-batch`, `grpo`, ...), parsed
//! by `fulcrum-core` so that the spelling lives in one place.

use std::path::{Path, PathBuf};

use fulcrum_core::{BaCount, ClipParams, Estimator, Rule};
use fulcrum_model::LoraConfig;
use fulcrum_tasks::code::SandboxChoice;
use fulcrum_tasks::TaskConfig;
use serde::{Deserialize, Serialize};

use crate::TrainError;

/// A whole training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Name of the run; the run directory defaults to `runs/<run_name>`.
    pub run_name: String,
    /// Run directory; `None` means `runs/<run_name>`.
    pub run_dir: Option<PathBuf>,
    /// Seed of everything random (prompts, sampling, initialisation).
    pub seed: u64,
    /// Number of GRPO optimizer steps.
    pub steps: u64,
    /// Aggregation rule: token, token-group, seq, seq-sum, drgrpo, ba, ba-batch.
    pub rule: Rule,
    /// BA's count `W_g`: group or signed.
    pub ba_count: BaCount,
    /// `drgrpo`'s `L_norm`; `None` means `rollout.max_response_len`.
    pub drgrpo_l_norm: Option<f64>,
    /// Advantage estimator: grpo, mean, rloo, opo.
    pub advantage: Estimator,
    /// Evaluate on the held-out split every this many steps (0: only at the end).
    pub eval_every: u64,
    /// Write a checkpoint every this many steps (0: only the final one).
    pub checkpoint_every: u64,
    /// Device: cpu, cuda, cuda:N or auto.
    pub device: String,
    /// CPU threads for libtorch's kernels (0: one per core). On a machine that is busy with
    /// other work, fewer threads than cores avoids OpenMP oversubscription, which is slow.
    pub threads: usize,
    /// Sandbox of code rewards: `auto` (bwrap, else the built-in namespaces or landlock mode;
    /// a run whose tasks need code refuses to start when none works), a mode by name, or
    /// `unsafe-rlimit` (NOT a sandbox: only for programs you trust). A run that scores code
    /// records the mode it used here in its `config.toml`.
    pub sandbox: SandboxChoice,
    /// The policy model.
    pub model: ModelConfig,
    /// The task or dataset prompts come from (`fulcrum-tasks`: name, difficulty, length,
    /// mistake_rate, path, reward).
    pub task: TaskConfig,
    /// Sampling of the G responses per prompt.
    pub rollout: RolloutConfig,
    /// The PPO-style policy loss and its regularisers.
    pub ppo: PpoConfig,
    /// AdamW and the learning-rate schedule.
    pub optim: OptimConfig,
    /// Supervised warm-up on the task's demonstrations.
    pub sft: SftConfig,
    /// Held-out evaluation.
    pub eval: EvalConfig,
}

/// The policy model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// `tiny` (built-in, character level), an HF folder, a `.gguf` file, or a run directory.
    pub path: String,
    /// Parameter dtype: f32 or bf16 (bf16 on GPU only).
    pub dtype: String,
    /// Activation checkpointing in training forwards: keep only each decoder layer's input and
    /// recompute the layer in backward (about a third more compute, a fraction of the memory).
    pub checkpoint_activations: bool,
    /// LoRA adapters (`{ rank, alpha, targets = ["q_proj", "v_proj"] }`): the weights stay
    /// frozen and only the adapters train; `None`: full fine-tuning. See `fulcrum-model`'s
    /// `lora.rs` for how they are saved.
    pub lora: Option<LoraConfig>,
}

/// Sampling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    /// Prompts (groups) per optimizer step, `M`.
    pub prompts_per_step: usize,
    /// Responses sampled per prompt, `G`.
    pub group_size: usize,
    /// Sampling temperature (> 0); training log-probabilities use the same temperature.
    pub temperature: f64,
    /// Nucleus sampling threshold (1.0: off).
    pub top_p: f64,
    /// Top-k sampling (0: off).
    pub top_k: usize,
    /// Prompts longer than this many tokens are an error.
    pub max_prompt_len: usize,
    /// Responses stop after this many tokens (and count as truncated).
    pub max_response_len: usize,
    /// DAPO dynamic sampling: drop groups whose rewards are all equal and draw more prompts
    /// until the batch is full.
    pub dynamic_sampling: bool,
    /// Cap on the prompts drawn per step under dynamic sampling, as a multiple of
    /// `prompts_per_step`.
    pub dynamic_sampling_max_draws: usize,
    /// Overlong filtering: truncated responses get zero loss weight (masked).
    pub overlong_filter: bool,
    /// Soft overlong punishment: over the last this many tokens before the limit the reward
    /// falls linearly by up to `overlong_penalty` (0: off).
    pub overlong_buffer: usize,
    /// Largest soft overlong punishment.
    pub overlong_penalty: f64,
}

/// The policy loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PpoConfig {
    /// Passes over each rollout batch.
    pub epochs: usize,
    /// Optimizer steps per epoch (the batch is cut into this many mini-batches).
    pub mini_batches: usize,
    /// Responses per forward/backward pass (gradient accumulation inside a mini-batch).
    pub micro_batch_size: usize,
    /// Lower clip range.
    pub eps_low: f64,
    /// Upper clip range (DAPO's clip-higher: 0.28).
    pub eps_high: f64,
    /// Dual-clip constant `c > 1`.
    pub dual_clip_c: f64,
    /// KL-to-reference coefficient (0: no reference model is kept).
    pub kl_coef: f64,
    /// KL estimator: k1 or k3.
    pub kl_estimator: String,
    /// Entropy bonus coefficient.
    pub entropy_coef: f64,
    /// Leave responses whose aggregation weight is exactly 0 (groups with equal rewards) out of
    /// the forward and backward pass. The gradient is unchanged when no KL or entropy term is
    /// on (those still need every response, so then nothing is skipped); clip, entropy and KL
    /// metrics then cover only the responses that were computed.
    pub skip_zero_weight: bool,
}

/// AdamW and the learning-rate schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// Schedule after warm-up: constant or cosine.
    pub schedule: String,
    /// Linear warm-up steps.
    pub warmup_steps: u64,
    /// Cosine floor as a fraction of `lr`.
    pub min_lr_ratio: f64,
    /// Decoupled weight decay (not applied to biases and norms).
    pub weight_decay: f64,
    /// Gradient-norm clip (0: off).
    pub grad_clip: f64,
    /// Adam's beta1.
    pub beta1: f64,
    /// Adam's beta2.
    pub beta2: f64,
    /// Adam's epsilon.
    pub eps: f64,
}

/// Supervised warm-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SftConfig {
    /// SFT steps before RL when no warmed-up checkpoint exists (0: no SFT).
    pub steps: u64,
    /// Examples per SFT step.
    pub batch_size: usize,
    /// Examples per forward/backward within a step, cut from the batch ordered by length so
    /// that each pads little (same loss: the token-mean is over the whole batch).
    pub micro_batch_size: usize,
    /// SFT learning rate.
    pub lr: f64,
    /// SFT warm-up steps.
    pub warmup_steps: u64,
}

/// Held-out evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalConfig {
    /// Held-out prompts evaluated.
    pub prompts: usize,
    /// Samples per prompt (avg@k, pass@k).
    pub k: usize,
    /// Sampling temperature for evaluation (0: greedy).
    pub temperature: f64,
    /// Also evaluate the starting policy before the first step (step 0, `phase = "start"`
    /// in `eval.jsonl`); the SFT warm-up is always evaluated.
    pub at_start: bool,
    /// The held-out task (e.g. `{ name = "gsm8k" }`); `None`: the training task's test split.
    /// Needed when training on a dataset file, whose splits are the same records.
    pub task: Option<TaskConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            run_name: "demo".into(),
            run_dir: None,
            seed: 0,
            steps: 60,
            rule: Rule::Ba,
            ba_count: BaCount::Group,
            drgrpo_l_norm: None,
            advantage: Estimator::Grpo,
            eval_every: 10,
            checkpoint_every: 20,
            device: "cpu".into(),
            threads: 0,
            sandbox: SandboxChoice::Auto,
            model: ModelConfig::default(),
            // The CPU demo: 3-digit additions whose demonstrations carry a mistake one time in
            // five, so that SFT leaves room for RL to improve.
            task: TaskConfig {
                difficulty: 2,
                mistake_rate: 0.2,
                ..TaskConfig::default()
            },
            rollout: RolloutConfig::default(),
            ppo: PpoConfig::default(),
            optim: OptimConfig::default(),
            sft: SftConfig::default(),
            eval: EvalConfig::default(),
        }
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            path: "tiny".into(),
            dtype: "f32".into(),
            checkpoint_activations: false,
            lora: None,
        }
    }
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self {
            prompts_per_step: 8,
            group_size: 8,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_prompt_len: 128,
            max_response_len: 64,
            dynamic_sampling: false,
            dynamic_sampling_max_draws: 3,
            overlong_filter: false,
            overlong_buffer: 0,
            overlong_penalty: 1.0,
        }
    }
}

impl Default for PpoConfig {
    fn default() -> Self {
        let clip = ClipParams::default();
        Self {
            epochs: 1,
            mini_batches: 1,
            micro_batch_size: 32,
            eps_low: clip.eps_low,
            eps_high: 0.28,
            dual_clip_c: clip.dual_clip_c,
            kl_coef: 0.0,
            kl_estimator: "k3".into(),
            entropy_coef: 0.0,
            skip_zero_weight: false,
        }
    }
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            // Measured on the CPU demo (held-out avg@4 at temperature 1 after SFT: 0.541):
            // 3e-6, 1e-5, 2e-5, 3e-5 reached 0.604, 0.629, 0.658, 0.639 in 60 steps; 1e-4 undid
            // the warm-up (greedy accuracy 0.93 -> 0.49 in 40 steps).
            lr: 2e-5,
            schedule: "constant".into(),
            warmup_steps: 0,
            min_lr_ratio: 0.1,
            weight_decay: 0.0,
            grad_clip: 1.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

impl Default for SftConfig {
    fn default() -> Self {
        Self {
            steps: 200,
            batch_size: 32,
            micro_batch_size: 32,
            lr: 1e-3,
            warmup_steps: 20,
        }
    }
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            // Sampled at the training temperature, avg@4: the accuracy of the policy being
            // trained (greedy decoding hides what RL changes in the distribution).
            prompts: 128,
            k: 4,
            temperature: 1.0,
            at_start: false,
            task: None,
        }
    }
}

impl Config {
    /// Reads `path` (or only the defaults when `None`), applies `--set` overrides in order,
    /// and validates. Messages name the file, or `(defaults)` when there is none.
    pub fn load(path: Option<&Path>, overrides: &[String]) -> Result<Self, TrainError> {
        let (file, mut table) = match path {
            Some(p) => {
                let shown = p.display().to_string();
                let text = std::fs::read_to_string(p).map_err(TrainError::io(p))?;
                let table: toml::Table =
                    text.parse()
                        .map_err(|e: toml::de::Error| TrainError::ConfigSyntax {
                            file: shown.clone(),
                            message: e.to_string().trim_end().to_string(),
                        })?;
                (shown, table)
            }
            None => ("(defaults)".to_string(), toml::Table::new()),
        };
        for o in overrides {
            apply_override(&mut table, o)?;
        }
        Self::from_table(table, &file)
    }

    /// Deserialises a table over the defaults, naming the key path of any error.
    pub fn from_table(table: toml::Table, file: &str) -> Result<Self, TrainError> {
        let cfg: Config =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                let key = e.path().to_string();
                let message = e.into_inner().to_string().trim_end().to_string();
                TrainError::ConfigKey {
                    file: file.to_string(),
                    key: if key == "." {
                        "(top level)".into()
                    } else {
                        key
                    },
                    message,
                }
            })?;
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// Range checks that types cannot express.
    pub fn validate(&self, file: &str) -> Result<(), TrainError> {
        let bad = |key: &str, message: String| {
            Err(TrainError::ConfigKey {
                file: file.to_string(),
                key: key.to_string(),
                message,
            })
        };
        let r = &self.rollout;
        if r.prompts_per_step == 0 {
            return bad("rollout.prompts_per_step", "must be >= 1".into());
        }
        if r.group_size < 2 {
            return bad(
                "rollout.group_size",
                format!(
                    "must be >= 2 for group-relative advantages, got {}",
                    r.group_size
                ),
            );
        }
        if !(r.temperature >= 0.0 && r.temperature.is_finite()) {
            return bad(
                "rollout.temperature",
                format!("must be finite and >= 0, got {}", r.temperature),
            );
        }
        if !(r.top_p > 0.0 && r.top_p <= 1.0) {
            return bad(
                "rollout.top_p",
                format!("must be in (0, 1], got {}", r.top_p),
            );
        }
        if r.max_response_len == 0 || r.max_prompt_len == 0 {
            return bad("rollout.max_response_len", "lengths must be >= 1".into());
        }
        if r.overlong_buffer >= r.max_response_len && r.overlong_buffer > 0 {
            return bad(
                "rollout.overlong_buffer",
                format!("must be below max_response_len ({})", r.max_response_len),
            );
        }
        if r.dynamic_sampling && r.dynamic_sampling_max_draws == 0 {
            return bad("rollout.dynamic_sampling_max_draws", "must be >= 1".into());
        }
        let p = &self.ppo;
        self.clip().validate().or_else(|e| match e {
            fulcrum_core::CoreError::InvalidParam { name, why } => bad(&format!("ppo.{name}"), why),
            other => bad("ppo", other.to_string()),
        })?;
        if self.sft.batch_size == 0 || self.sft.micro_batch_size == 0 {
            return bad("sft", "batch_size and micro_batch_size must be >= 1".into());
        }
        if p.epochs == 0 || p.mini_batches == 0 || p.micro_batch_size == 0 {
            return bad(
                "ppo",
                "epochs, mini_batches and micro_batch_size must be >= 1".into(),
            );
        }
        if p.mini_batches > r.prompts_per_step {
            return bad(
                "ppo.mini_batches",
                format!(
                    "{} mini-batches cannot split {} prompts",
                    p.mini_batches, r.prompts_per_step
                ),
            );
        }
        if !["k1", "k3"].contains(&p.kl_estimator.as_str()) {
            return bad(
                "ppo.kl_estimator",
                format!("unknown estimator {:?}; valid: k1, k3", p.kl_estimator),
            );
        }
        for (key, v) in [
            ("ppo.kl_coef", p.kl_coef),
            ("ppo.entropy_coef", p.entropy_coef),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(key, format!("must be finite and >= 0, got {v}"));
            }
        }
        let o = &self.optim;
        if !(o.lr > 0.0 && o.lr.is_finite()) {
            return bad("optim.lr", format!("must be finite and > 0, got {}", o.lr));
        }
        if !["constant", "cosine"].contains(&o.schedule.as_str()) {
            return bad(
                "optim.schedule",
                format!("unknown schedule {:?}; valid: constant, cosine", o.schedule),
            );
        }
        if !(0.0..1.0).contains(&o.beta1) || !(0.0..1.0).contains(&o.beta2) {
            return bad("optim.beta1", "betas must be in [0, 1)".into());
        }
        if !(o.weight_decay >= 0.0 && o.grad_clip >= 0.0 && o.eps > 0.0) {
            return bad(
                "optim",
                "weight_decay and grad_clip must be >= 0, eps > 0".into(),
            );
        }
        if let Some(l) = self.drgrpo_l_norm {
            if !(l > 0.0 && l.is_finite()) {
                return bad("drgrpo_l_norm", format!("must be finite and > 0, got {l}"));
            }
        }
        if !["f32", "bf16"].contains(&self.model.dtype.as_str()) {
            return bad(
                "model.dtype",
                format!("unknown dtype {:?}; valid: f32, bf16", self.model.dtype),
            );
        }
        if self.eval.k == 0 {
            return bad("eval.k", "must be >= 1".into());
        }
        if let Some(lora) = &self.model.lora {
            if let Err(m) = lora.validate() {
                let field = m.split(':').next().unwrap_or_default();
                return bad(
                    &format!("model.lora.{field}"),
                    m[field.len()..].trim_start_matches(": ").to_string(),
                );
            }
        }
        Ok(())
    }

    /// How training forwards trade memory for compute.
    pub fn memory(&self) -> fulcrum_model::masked_logprobs::MemoryOptions {
        fulcrum_model::masked_logprobs::MemoryOptions {
            checkpoint_layers: self.model.checkpoint_activations,
            ..Default::default()
        }
    }

    /// The clip settings of the policy loss.
    pub fn clip(&self) -> ClipParams {
        ClipParams {
            eps_low: self.ppo.eps_low,
            eps_high: self.ppo.eps_high,
            dual_clip_c: self.ppo.dual_clip_c,
        }
    }

    /// `drgrpo`'s `L_norm`: the configured constant, else the max response length.
    pub fn l_norm(&self) -> f64 {
        self.drgrpo_l_norm
            .unwrap_or(self.rollout.max_response_len as f64)
    }

    /// The resolved config as TOML, for `runs/<name>/config.toml`.
    pub fn to_toml(&self) -> String {
        // Every field is a TOML-representable type; `None`s are simply left out.
        toml::to_string_pretty(self)
            .unwrap_or_else(|e| format!("# config could not be written: {e}\n"))
    }

    /// The run directory.
    pub fn run_dir(&self) -> PathBuf {
        self.run_dir
            .clone()
            .unwrap_or_else(|| Path::new("runs").join(&self.run_name))
    }
}

/// Applies one `key.path=value` override to the raw table. The value is read as TOML (so
/// `8`, `0.28`, `true`, `[1, 2]` keep their types) and otherwise taken as a plain string (so
/// `rule=ba` works without quotes).
pub fn apply_override(table: &mut toml::Table, given: &str) -> Result<(), TrainError> {
    let bad = |message: &str| TrainError::BadOverride {
        given: given.to_string(),
        message: message.to_string(),
    };
    let (key, raw) = given
        .split_once('=')
        .ok_or_else(|| bad("expected key=value"))?;
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(bad("empty key"));
    }
    let value = parse_value(raw.trim());
    let mut node = table;
    for p in &parts[..parts.len() - 1] {
        let entry = node
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        node = entry
            .as_table_mut()
            .ok_or_else(|| bad(&format!("`{p}` is not a table")))?;
    }
    node.insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}

fn parse_value(raw: &str) -> toml::Value {
    let doc = format!("v = {raw}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("c.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        let c = Config::default();
        c.validate("(defaults)").unwrap();
        let text = c.to_toml();
        let back = Config::from_table(text.parse().unwrap(), "x").unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn the_demo_preset_is_the_defaults() {
        let preset = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/demo.toml");
        let c = Config::load(Some(&preset), &[]).unwrap();
        assert_eq!(
            c,
            Config::default(),
            "regenerate with `fulcrum train --print-config`"
        );
    }

    #[test]
    fn file_then_overrides_take_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "steps = 5\nrule = \"seq\"\n[ppo]\neps_high = 0.3\n",
        );
        let c = Config::load(
            Some(&p),
            &[
                "steps=8".into(),
                "ppo.eps_low=0.1".into(),
                "rule=ba-batch".into(),
            ],
        )
        .unwrap();
        assert_eq!(c.steps, 8);
        assert_eq!(c.rule, Rule::BaBatch);
        assert_eq!(c.ppo.eps_high, 0.3);
        assert_eq!(c.ppo.eps_low, 0.1);
        let c = Config::load(None, &["task.difficulty=4".into()]).unwrap();
        assert_eq!(c.task.difficulty, 4);
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "[ppo]\neps_hgh = 0.3\n");
        let err = Config::load(Some(&p), &[]).unwrap_err().to_string();
        assert!(
            err.contains("c.toml: ppo") && err.contains("eps_hgh"),
            "{err}"
        );
        let err = Config::load(None, &["stepz=3".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("stepz"), "{err}");
    }

    #[test]
    fn wrong_type_and_bad_names_are_errors_with_the_key() {
        let err = Config::load(None, &["steps=many".into()])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("(defaults): steps:"), "{err}");
        let err = Config::load(None, &["rule=ba_batch".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rule:") && err.contains("did you mean ba-batch?"),
            "{err}"
        );
        let err = Config::load(None, &["ppo.dual_clip_c=0.5".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("ppo.dual_clip_c"), "{err}");
        let err = Config::load(None, &["rollout.group_size=1".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("rollout.group_size"), "{err}");
        let err = Config::load(None, &["steps".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected key=value"), "{err}");
    }

    #[test]
    fn syntax_error_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "steps = 5\nrule = \n");
        let err = Config::load(Some(&p), &[]).unwrap_err().to_string();
        assert!(err.contains("c.toml") && err.contains("line 2"), "{err}");
    }
}
