//! Range checks that types cannot express; each error names the key at fault.

use super::Config;
use crate::TrainError;
use fulcrum_core::Rule;

impl Config {
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
        match (r.engine, r.engine_urls.is_empty()) {
            (fulcrum_rollout::EngineKind::Native, false) => {
                return bad(
                    "rollout.engine_urls",
                    "is set but rollout.engine = \"native\" samples in the trainer: set \
                     rollout.engine to vllm, sglang or llamacpp, or drop the URLs"
                        .into(),
                )
            }
            (kind, true) if kind != fulcrum_rollout::EngineKind::Native => {
                return bad(
                    "rollout.engine_urls",
                    format!("rollout.engine = \"{kind}\" needs at least one server URL"),
                )
            }
            _ => {}
        }
        if let Some(u) = r
            .engine_urls
            .iter()
            .find(|u| !(u.starts_with("http://") || u.starts_with("https://")))
        {
            return bad(
                "rollout.engine_urls",
                format!("{u:?} is not an http:// or https:// URL"),
            );
        }
        if self.dist.timeout_s == 0 || self.dist.bucket_mb == 0 {
            return bad(
                "dist.timeout_s",
                "dist.timeout_s and dist.bucket_mb must be >= 1".into(),
            );
        }
        if !(r.engine_timeout_s > 0.0 && r.engine_timeout_s.is_finite()) {
            return bad(
                "rollout.engine_timeout_s",
                "must be a positive number of seconds".into(),
            );
        }
        if r.engine_requests == 0 || r.engine_max_failures == 0 {
            return bad(
                "rollout.engine_requests",
                "engine_requests and engine_max_failures must be >= 1".into(),
            );
        }
        if let Some(cap) = r.is_cap {
            if !(cap >= 1.0 && cap.is_finite()) {
                return bad(
                    "rollout.is_cap",
                    format!("must be a finite cap >= 1 (2.0 is usual), got {cap}"),
                );
            }
        }
        if r.overlap && r.engine == fulcrum_rollout::EngineKind::Native {
            return bad(
                "rollout.overlap",
                "needs rollout.engine = vllm, sglang or llamacpp (the native sampler shares the \
                 trainer's process)"
                    .into(),
            );
        }
        if r.overlap && r.is_cap.is_none() {
            return bad(
                "rollout.overlap",
                "samples from weights one step behind, so it needs the importance correction: \
                 set rollout.is_cap (2.0 is usual)"
                    .into(),
            );
        }
        let p = &self.ppo;
        p.params
            .clip()
            .validate()
            .and_then(|()| p.params.validate(p.loss))
            .or_else(|e| match e {
                fulcrum_core::CoreError::InvalidParam { name, why } => {
                    bad(&format!("ppo.{name}"), why)
                }
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
        let lambda = self.ba_pos_scale;
        if !(lambda > 0.0 && lambda.is_finite()) {
            return bad(
                "ba_pos_scale",
                format!("must be finite and > 0, got {lambda}"),
            );
        }
        if lambda != 1.0 && !matches!(self.rule, Rule::Ba | Rule::BaBatch) {
            return bad(
                "ba_pos_scale",
                format!(
                    "scales BA's positive side and means nothing under rule {}: use rule ba or \
                     ba-batch, or leave it at 1",
                    self.rule
                ),
            );
        }
        if self.eval.k == 0 {
            return bad("eval.k", "must be >= 1".into());
        }
        if let Some(lora) = &self.model.lora {
            if let Err(e) = lora.validate() {
                return bad(&format!("model.lora.{}", e.field), e.reason);
            }
        }
        Ok(())
    }
}
