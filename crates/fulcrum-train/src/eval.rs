//! Held-out evaluation: `k` responses per prompt of a task's test split, scored; avg@k (mean
//! correctness over all responses) and pass@k (prompts with at least one correct response).

use fulcrum_model::{Model, Sampling};
use fulcrum_tasks::{Example, Split, Task};
use serde::Serialize;

use crate::engine::RolloutEngine;
use crate::error::TrainError;
use crate::rollout::{sample_and_score, Rollout, SampleSettings};
use fulcrum_core::rng::mix;

/// Evaluation settings.
#[derive(Debug, Clone, Copy)]
pub struct EvalSettings {
    pub prompts: usize,
    pub k: usize,
    /// 0: greedy.
    pub temperature: f64,
    pub max_new_tokens: usize,
    pub max_prompt_len: usize,
    pub seed: u64,
}

impl EvalSettings {
    /// The in-training evaluation of a run's config (`eval.*`, the rollout's length limits, and
    /// a seed of its own so that it never shares a stream with training).
    pub fn of(cfg: &crate::Config) -> EvalSettings {
        EvalSettings {
            prompts: cfg.eval.prompts,
            k: cfg.eval.k,
            temperature: cfg.eval.temperature,
            max_new_tokens: cfg.rollout.max_response_len,
            max_prompt_len: cfg.rollout.max_prompt_len,
            seed: cfg.eval.seed.unwrap_or_else(|| mix(cfg.seed, 0xe7a1)),
        }
    }

    /// The greedy evaluation of a run's config (`eval.greedy_prompts`), on the same seed; `None`
    /// when it is off.
    pub fn greedy_of(cfg: &crate::Config) -> Option<EvalSettings> {
        (cfg.eval.greedy_prompts > 0).then(|| EvalSettings {
            prompts: cfg.eval.greedy_prompts,
            k: 1,
            temperature: 0.0,
            ..EvalSettings::of(cfg)
        })
    }
}

/// The result of one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalResult {
    pub prompts: usize,
    pub k: usize,
    /// avg@k: mean correctness over all `prompts * k` responses.
    pub accuracy: f64,
    /// pass@k: fraction of prompts with at least one correct response.
    pub pass_at_k: f64,
    /// Mean reward.
    pub reward: f64,
    /// Mean response length in tokens.
    pub mean_len: f64,
    /// Generated tokens per second.
    pub tokens_per_s: f64,
    /// Fraction of responses cut at `max_new_tokens` without stopping (scored as written).
    pub truncated: f64,
    /// The greedy evaluation (`eval.greedy_prompts`), when there was one: its prompts, its
    /// accuracy and its truncated fraction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub greedy_prompts: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub greedy_accuracy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub greedy_truncated: Option<f64>,
}

/// The evaluation a run's config asks for: the sampled one (avg@k, pass@k) and, with
/// `eval.greedy_prompts`, the greedy one.
pub fn evaluate_configured(
    model: &Model,
    task: &dyn Task,
    cfg: &crate::Config,
) -> Result<EvalResult, TrainError> {
    let mut result = evaluate(model, task, &EvalSettings::of(cfg))?;
    if let Some(g) = EvalSettings::greedy_of(cfg) {
        let greedy = evaluate(model, task, &g)?;
        result.greedy_prompts = Some(greedy.prompts);
        result.greedy_accuracy = Some(greedy.accuracy);
        result.greedy_truncated = Some(greedy.truncated);
    }
    Ok(result)
}

/// One scored response of an evaluation (what `fulcrum eval --samples` writes).
#[derive(Debug, Clone, Serialize)]
pub struct EvalSample {
    /// The problem's identifier in its data file or task.
    pub id: String,
    pub prompt: String,
    pub response: String,
    /// Response tokens, the stop token included.
    pub tokens: usize,
    pub truncated: bool,
    pub reward: f64,
    pub correct: bool,
    /// Why the verifier gave that reward.
    pub reason: String,
}

/// Evaluates `model` on the first `s.prompts` examples of the task's test split.
pub fn evaluate(
    model: &Model,
    task: &dyn Task,
    s: &EvalSettings,
) -> Result<EvalResult, TrainError> {
    sample_and_measure(model, task, s).map(|(result, _, _)| result)
}

/// [`evaluate`], also returning every scored response in problem order.
pub fn evaluate_with_samples(
    model: &Model,
    task: &dyn Task,
    s: &EvalSettings,
) -> Result<(EvalResult, Vec<EvalSample>), TrainError> {
    let (result, rollouts, examples) = sample_and_measure(model, task, s)?;
    let samples = rollouts
        .into_iter()
        .map(|r| EvalSample {
            id: examples[r.group].id.clone(),
            prompt: examples[r.group].prompt.clone(),
            tokens: r.response_ids.len(),
            response: r.text,
            truncated: r.truncated,
            reward: r.reward,
            correct: r.correct,
            reason: r.reason,
        })
        .collect();
    Ok((result, samples))
}

/// Samples and scores the test examples; the measures, the rollouts and their examples.
fn sample_and_measure(
    model: &Model,
    task: &dyn Task,
    s: &EvalSettings,
) -> Result<(EvalResult, Vec<Rollout>, Vec<Example>), TrainError> {
    let examples = task.examples(Split::Test, s.seed, s.prompts)?;
    if examples.is_empty() {
        return Err(TrainError::Run(format!(
            "task {} has no test examples",
            task.name()
        )));
    }
    let sampling = if s.temperature > 0.0 {
        Sampling::Sample {
            temperature: s.temperature,
            top_k: None,
            top_p: None,
        }
    } else {
        Sampling::Greedy
    };
    let t0 = std::time::Instant::now();
    let mut rollouts = Vec::new();
    // Chunks keep the sampler's batch (and memory) bounded on large sets.
    for (c, chunk) in examples.chunks(64).enumerate() {
        let settings = SampleSettings {
            first_prompt: 0,
            samples_per_prompt: s.k,
            max_new_tokens: s.max_new_tokens,
            sampling,
            seed: mix(s.seed, c as u64),
            max_prompt_len: s.max_prompt_len,
        };
        let (r, _) = sample_and_score(
            &mut RolloutEngine::Native,
            model,
            task,
            chunk,
            &settings,
            c * 64,
        )?;
        rollouts.extend(r);
    }
    let secs = t0.elapsed().as_secs_f64();
    let n = rollouts.len().max(1) as f64;
    let mut any_correct = vec![false; examples.len()];
    for r in &rollouts {
        any_correct[r.group] |= r.correct;
    }
    let tokens: usize = rollouts.iter().map(|r| r.response_ids.len()).sum();
    let result = EvalResult {
        prompts: examples.len(),
        k: s.k,
        accuracy: rollouts.iter().filter(|r| r.correct).count() as f64 / n,
        pass_at_k: any_correct.iter().filter(|c| **c).count() as f64 / examples.len() as f64,
        reward: rollouts.iter().map(|r| r.reward).sum::<f64>() / n,
        mean_len: tokens as f64 / n,
        tokens_per_s: tokens as f64 / secs.max(1e-9),
        truncated: rollouts.iter().filter(|r| r.truncated).count() as f64 / n,
        greedy_prompts: None,
        greedy_accuracy: None,
        greedy_truncated: None,
    };
    Ok((result, rollouts, examples))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fulcrum_core::Rule;

    #[test]
    fn the_eval_seed_is_the_rules_and_with_eval_seed_every_runs() {
        let cfg = |seed: u64, rule: Rule, eval_seed: Option<u64>| {
            let mut c = crate::Config {
                seed,
                rule,
                ..crate::Config::default()
            };
            c.eval.seed = eval_seed;
            c.eval.greedy_prompts = 256;
            c
        };
        let of = |c: &crate::Config| EvalSettings::of(c).seed;
        // Common random numbers: the rules of one seed share the held-out set and streams.
        assert_eq!(of(&cfg(3, Rule::Ba, None)), of(&cfg(3, Rule::Token, None)));
        assert_ne!(of(&cfg(3, Rule::Ba, None)), of(&cfg(4, Rule::Ba, None)));
        // eval.seed: the same for every seed too.
        assert_eq!(of(&cfg(3, Rule::Ba, Some(9))), 9);
        assert_eq!(of(&cfg(4, Rule::Seq, Some(9))), 9);
        let g = EvalSettings::greedy_of(&cfg(3, Rule::Ba, Some(9))).unwrap();
        assert_eq!((g.prompts, g.k, g.temperature, g.seed), (256, 1, 0.0, 9));
        let mut off = cfg(3, Rule::Ba, None);
        off.eval.greedy_prompts = 0;
        assert!(EvalSettings::greedy_of(&off).is_none());
    }
}
