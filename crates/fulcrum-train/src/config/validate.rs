//! Range checks that types cannot express. Each error names exactly the key at fault (never a
//! neighbour, never a whole section), and every size has an upper bound that no real run comes
//! near, so that a typo is refused here, naming the key and the bound, instead of reaching
//! libtorch as an allocation failure. The bounds shared with the command line are
//! `fulcrum_model::limits`'s; the others are below, each with its reason.

use fulcrum_core::Rule;
use fulcrum_model::limits::{
    MAX_BATCH_SEQUENCES, MAX_PROMPTS, MAX_SAMPLES_PER_PROMPT, MAX_SEQUENCE_TOKENS, MAX_THREADS,
};
use fulcrum_rollout::EngineKind;
use fulcrum_tasks::{TaskConfig, TaskError};

use super::Config;
use crate::TrainError;

/// `rollout.dynamic_sampling_max_draws`: DAPO redraws a handful of times; 1,024 draws of a
/// step's prompts is a run that never fills a batch.
const MAX_DRAWS: usize = 1024;

/// `rollout.engine_requests`: requests in flight on one engine; servers batch a few hundred.
const MAX_ENGINE_REQUESTS: usize = 65_536;

/// `rollout.engine_timeout_s` and `dist.timeout_s`: one week. A wait longer than that is a
/// hang; beyond some bound a timeout no longer fits the clocks' types.
const MAX_SECONDS: u64 = 7 * 24 * 3600;

/// `dist.bucket_mb`: 64 GiB, more than any one device's memory.
const MAX_BUCKET_MB: usize = 65_536;
/// Tool calls in one response: agentic RL recipes use a handful to a few dozen.
const MAX_TURNS: usize = 64;
const WHY_TURNS: &str = "more calls than any tool-use recipe makes in one response";
/// Versions the engines may sample ahead: the async trainers that bound staleness (AReaL,
/// prime-rl) use single digits; far beyond that the importance weights carry the update.
const MAX_STALENESS: u64 = 64;

/// Why a size bound is what it is, said with the bound.
const WHY_TOKENS: &str = "8 times the longest context of any model fulcrum loads";
const WHY_SAMPLES: &str = "32 times the largest pass@k studies";
const WHY_PROMPTS: &str = "ten times the largest evaluation sets";
const WHY_BATCH: &str = "128 times a paper-scale step's responses";
const WHY_THREADS: &str = "several times the hardware threads of the largest machines";

/// The first failed check: the key and what is wrong with it.
type Check = Result<(), (String, String)>;

fn fail(key: &str, message: String) -> Check {
    Err((key.to_string(), message))
}

/// A count in `min..=max`; above `max`, the bound and why it is there are said.
fn count(key: &str, value: usize, min: usize, max: usize, why: &str) -> Check {
    if value < min {
        fail(key, format!("must be >= {min}, got {value}"))
    } else if value > max {
        fail(
            key,
            format!("{value} is more than {max}, the most fulcrum accepts ({why})"),
        )
    } else {
        Ok(())
    }
}

/// A finite number in `[min, ...)` (or `(min, ...)` when `strict`).
fn number(key: &str, value: f64, min: f64, strict: bool) -> Check {
    let ok = value.is_finite() && if strict { value > min } else { value >= min };
    if ok {
        Ok(())
    } else {
        let op = if strict { ">" } else { ">=" };
        fail(key, format!("must be finite and {op} {min}, got {value}"))
    }
}

/// A task table's range checks (`fulcrum_tasks::TaskConfig::validate`) under its dotted key.
fn task(section: &str, t: &TaskConfig) -> Check {
    match t.validate() {
        Ok(()) => Ok(()),
        Err(TaskError::Setting { key, problem }) => fail(&format!("{section}.{key}"), problem),
        Err(other) => fail(section, other.to_string()),
    }
}

impl Config {
    /// Range checks that types cannot express; the error names `file` and the one key at fault.
    pub fn validate(&self, file: &str) -> Result<(), TrainError> {
        self.check()
            .map_err(|(key, message)| TrainError::ConfigKey {
                file: file.to_string(),
                key,
                message,
            })
    }

    fn check(&self) -> Check {
        count("threads", self.threads, 0, MAX_THREADS, WHY_THREADS)?;
        self.check_rollout()?;
        self.check_dist()?;
        self.check_ppo()?;
        self.check_optim()?;
        self.check_sft_and_eval()?;
        if let Some(l) = self.drgrpo_l_norm {
            number("drgrpo_l_norm", l, 0.0, true)?;
        }
        let lambda = self.ba_pos_scale;
        number("ba_pos_scale", lambda, 0.0, true)?;
        if lambda != 1.0 && !matches!(self.rule, Rule::Ba | Rule::BaBatch) {
            return fail(
                "ba_pos_scale",
                format!(
                    "scales BA's positive side and means nothing under rule {}: use rule ba or \
                     ba-batch, or leave it at 1",
                    self.rule
                ),
            );
        }
        if let Some(lora) = &self.model.lora {
            if let Err(e) = lora.validate() {
                return fail(&format!("model.lora.{}", e.field), e.reason);
            }
        }
        task("task", &self.task)?;
        if let Some(t) = &self.eval.task {
            task("eval.task", t)?;
        }
        count(
            "rollout.max_turns",
            self.rollout.max_turns,
            1,
            MAX_TURNS,
            WHY_TURNS,
        )?;
        Ok(())
    }

    fn check_rollout(&self) -> Check {
        let r = &self.rollout;
        count(
            "rollout.prompts_per_step",
            r.prompts_per_step,
            1,
            MAX_PROMPTS,
            WHY_PROMPTS,
        )?;
        if r.group_size < 2 {
            return fail(
                "rollout.group_size",
                format!(
                    "must be >= 2 for group-relative advantages, got {}",
                    r.group_size
                ),
            );
        }
        count(
            "rollout.group_size",
            r.group_size,
            2,
            MAX_SAMPLES_PER_PROMPT,
            WHY_SAMPLES,
        )?;
        let responses = r.prompts_per_step * r.group_size;
        if responses > MAX_BATCH_SEQUENCES {
            return fail(
                "rollout.group_size",
                format!(
                    "{} responses to each of rollout.prompts_per_step = {} prompts is {responses} \
                     responses a step, more than {MAX_BATCH_SEQUENCES}, the most fulcrum accepts \
                     ({WHY_BATCH})",
                    r.group_size, r.prompts_per_step
                ),
            );
        }
        number("rollout.temperature", r.temperature, 0.0, false)?;
        if !(r.top_p > 0.0 && r.top_p <= 1.0) {
            return fail(
                "rollout.top_p",
                format!("must be in (0, 1], got {}", r.top_p),
            );
        }
        count(
            "rollout.max_prompt_len",
            r.max_prompt_len,
            1,
            MAX_SEQUENCE_TOKENS,
            WHY_TOKENS,
        )?;
        count(
            "rollout.max_response_len",
            r.max_response_len,
            1,
            MAX_SEQUENCE_TOKENS,
            WHY_TOKENS,
        )?;
        if r.overlong_buffer >= r.max_response_len && r.overlong_buffer > 0 {
            return fail(
                "rollout.overlong_buffer",
                format!(
                    "{} must be below rollout.max_response_len = {}",
                    r.overlong_buffer, r.max_response_len
                ),
            );
        }
        number("rollout.overlong_penalty", r.overlong_penalty, 0.0, false)?;
        let draws_min = usize::from(r.dynamic_sampling);
        count(
            "rollout.dynamic_sampling_max_draws",
            r.dynamic_sampling_max_draws,
            draws_min,
            MAX_DRAWS,
            "a step that needs more draws never fills its batch",
        )?;
        match (r.engine, r.engine_urls.is_empty()) {
            (EngineKind::Native, false) => {
                return fail(
                    "rollout.engine_urls",
                    "is set but rollout.engine = \"native\" samples in the trainer: set \
                     rollout.engine to vllm, sglang or llamacpp, or drop the URLs"
                        .into(),
                )
            }
            (kind, true) if kind != EngineKind::Native => {
                return fail(
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
            return fail(
                "rollout.engine_urls",
                format!("{u:?} is not an http:// or https:// URL"),
            );
        }
        if !(r.engine_timeout_s > 0.0 && r.engine_timeout_s <= MAX_SECONDS as f64) {
            return fail(
                "rollout.engine_timeout_s",
                format!(
                    "must be a positive number of seconds, at most {MAX_SECONDS} (a week), got {}",
                    r.engine_timeout_s
                ),
            );
        }
        count(
            "rollout.engine_requests",
            r.engine_requests,
            1,
            MAX_ENGINE_REQUESTS,
            "servers batch a few hundred requests",
        )?;
        if r.engine_max_failures == 0 {
            return fail("rollout.engine_max_failures", "must be >= 1, got 0".into());
        }
        if let Some(cap) = r.is_cap {
            if !(cap >= 1.0 && cap.is_finite()) {
                return fail(
                    "rollout.is_cap",
                    format!("must be a finite cap >= 1 (2.0 is usual), got {cap}"),
                );
            }
        }
        // The key that asked for sampling ahead, to name in what follows.
        let ahead = if r.max_staleness > 0 {
            "rollout.max_staleness"
        } else {
            "rollout.overlap"
        };
        if r.overlap && r.max_staleness > 1 {
            return fail(
                "rollout.overlap",
                format!(
                    "means rollout.max_staleness = 1, but rollout.max_staleness = {}: set only \
                     max_staleness",
                    r.max_staleness
                ),
            );
        }
        if r.max_staleness > MAX_STALENESS {
            return fail(
                "rollout.max_staleness",
                format!(
                    "must be at most {MAX_STALENESS} (a draw that many steps ahead trains on \
                     weights that far behind), got {}",
                    r.max_staleness
                ),
            );
        }
        if r.staleness() > 0 && r.engine == EngineKind::Native {
            return fail(
                ahead,
                "needs rollout.engine = vllm, sglang or llamacpp (the native sampler shares the \
                 trainer's process)"
                    .into(),
            );
        }
        if r.staleness() > 0 && r.is_cap.is_none() {
            return fail(
                ahead,
                "samples from weights behind the policy it trains, so it needs the importance \
                 correction: set rollout.is_cap (2.0 is usual)"
                    .into(),
            );
        }
        if r.colocate && r.staleness() > 0 {
            return fail(
                "rollout.colocate",
                format!(
                    "frees the engines' memory during the update, so they cannot sample ahead \
                     of it; {ahead} must be 0/false with colocate"
                ),
            );
        }
        if r.colocate && self.model.lora.is_some() {
            return fail(
                "rollout.colocate",
                "with LoRA (model.lora) is not built: a colocated engine discards its base weights \
                 while asleep, and a LoRA push carries only the adapter"
                    .into(),
            );
        }
        if r.colocate && !matches!(r.engine, EngineKind::Vllm | EngineKind::Sglang) {
            return fail(
                "rollout.colocate",
                format!(
                    "frees and retakes the memory of a vLLM or SGLang server on the trainer's \
                     GPU; rollout.engine = \"{}\" has no such call",
                    r.engine
                ),
            );
        }
        Ok(())
    }

    fn check_dist(&self) -> Check {
        let d = &self.dist;
        if d.timeout_s == 0 || d.timeout_s > MAX_SECONDS {
            return fail(
                "dist.timeout_s",
                format!(
                    "must be from 1 to {MAX_SECONDS} seconds (a week), got {}",
                    d.timeout_s
                ),
            );
        }
        count(
            "dist.bucket_mb",
            d.bucket_mb,
            1,
            MAX_BUCKET_MB,
            "more than any device's memory",
        )
    }

    fn check_ppo(&self) -> Check {
        let p = &self.ppo;
        p.params
            .clip()
            .validate()
            .and_then(|()| p.params.validate(p.loss))
            .or_else(|e| match e {
                fulcrum_core::CoreError::InvalidParam { name, why } => {
                    fail(&format!("ppo.{name}"), why)
                }
                other => fail("ppo.loss", other.to_string()),
            })?;
        if p.epochs == 0 {
            return fail("ppo.epochs", "must be >= 1, got 0".into());
        }
        if p.mini_batches == 0 {
            return fail("ppo.mini_batches", "must be >= 1, got 0".into());
        }
        if p.mini_batches > self.rollout.prompts_per_step {
            return fail(
                "ppo.mini_batches",
                format!(
                    "{} mini-batches cannot split rollout.prompts_per_step = {} prompts",
                    p.mini_batches, self.rollout.prompts_per_step
                ),
            );
        }
        count(
            "ppo.micro_batch_size",
            p.micro_batch_size,
            1,
            MAX_BATCH_SEQUENCES,
            WHY_BATCH,
        )?;
        number("ppo.kl_coef", p.kl_coef, 0.0, false)?;
        number("ppo.entropy_coef", p.entropy_coef, 0.0, false)
    }

    fn check_optim(&self) -> Check {
        let o = &self.optim;
        number("optim.lr", o.lr, 0.0, true)?;
        for (key, beta) in [("optim.beta1", o.beta1), ("optim.beta2", o.beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return fail(key, format!("must be in [0, 1), got {beta}"));
            }
        }
        number("optim.eps", o.eps, 0.0, true)?;
        number("optim.weight_decay", o.weight_decay, 0.0, false)?;
        number("optim.grad_clip", o.grad_clip, 0.0, false)?;
        if !(0.0..=1.0).contains(&o.min_lr_ratio) {
            return fail(
                "optim.min_lr_ratio",
                format!("must be in [0, 1], got {}", o.min_lr_ratio),
            );
        }
        Ok(())
    }

    fn check_sft_and_eval(&self) -> Check {
        let s = &self.sft;
        count(
            "sft.batch_size",
            s.batch_size,
            1,
            MAX_BATCH_SEQUENCES,
            WHY_BATCH,
        )?;
        count(
            "sft.micro_batch_size",
            s.micro_batch_size,
            1,
            MAX_BATCH_SEQUENCES,
            WHY_BATCH,
        )?;
        number("sft.lr", s.lr, 0.0, true)?;
        let e = &self.eval;
        count("eval.prompts", e.prompts, 1, MAX_PROMPTS, WHY_PROMPTS)?;
        count("eval.k", e.k, 1, MAX_SAMPLES_PER_PROMPT, WHY_SAMPLES)?;
        number("eval.temperature", e.temperature, 0.0, false)?;
        count(
            "eval.greedy_prompts",
            e.greedy_prompts,
            0,
            MAX_PROMPTS,
            WHY_PROMPTS,
        )
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
