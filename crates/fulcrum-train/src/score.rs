//! Prompts in, scored rollouts out (design.md steps 1-3 for one batch of examples).
//!
//! A prompt's text is rendered with the model's chat template when it has one (pretrained chat
//! models) and used raw otherwise (the built-in character model), encoded, and completed G
//! times by the rollout engine (`engine.rs`). Each response is decoded without its stop token
//! and scored by the task; a verifier failure is a zero reward with a reason, never an error.

use fulcrum_model::{Completion, Finish, Message, Model};
use fulcrum_tasks::{Example, Score, Task};

use crate::engine::{RolloutEngine, Sampled};
use crate::error::TrainError;
use crate::rollout::{Rollout, SampleSettings};

/// Encodes a prompt the way the model expects it.
pub fn encode_prompt(model: &Model, text: &str) -> Result<Vec<i64>, TrainError> {
    encode_prompt_with(model, text, None)
}

/// [`encode_prompt`] after a system prompt (the tools' declaration), when there is one: a
/// system message of the chat template, or the text before the prompt without one.
pub fn encode_prompt_with(
    model: &Model,
    text: &str,
    system: Option<&str>,
) -> Result<Vec<i64>, TrainError> {
    let tok = model.tokenizer()?;
    let rendered = match (model.chat_template(), system) {
        (Ok(t), Some(sys)) => t.render(&[Message::system(sys), Message::user(text)], true),
        (Ok(t), None) => t.render(&[Message::user(text)], true),
        (Err(_), Some(sys)) => format!("{sys}\n\n{text}"),
        (Err(_), None) => text.to_string(),
    };
    Ok(tok.encode(&rendered)?)
}

/// Decodes a response, without the stop token that ended it (a tool's answers included).
pub fn decode_response(model: &Model, c: &Completion) -> Result<String, TrainError> {
    let tok = model.tokenizer()?;
    Ok(tok.decode(&c.tokens[..own_end(c)], false)?)
}

/// A multi-turn response's own text: the model's tokens only, without the stop token (a
/// number printed by a tool is not the model's answer).
fn own_text(model: &Model, c: &Completion) -> Result<String, TrainError> {
    let own: Vec<i64> = c.tokens[..own_end(c)]
        .iter()
        .zip(&c.tool)
        .filter(|(_, &t)| !t)
        .map(|(&id, _)| id)
        .collect();
    Ok(model.tokenizer()?.decode(&own, false)?)
}

/// Where a response's text ends: before the stop token that ended it.
fn own_end(c: &Completion) -> usize {
    match c.finish {
        Finish::StopToken(_) => c.tokens.len().saturating_sub(1),
        _ => c.tokens.len(),
    }
}

/// Samples `samples_per_prompt` responses for each example on `engine` and scores them. Groups
/// are numbered from `first_group`. Also returns the seconds spent scoring (the rest was
/// sampling).
pub fn sample_and_score(
    engine: &mut RolloutEngine,
    model: &Model,
    task: &dyn Task,
    examples: &[Example],
    s: &SampleSettings,
    first_group: usize,
) -> Result<(Vec<Rollout>, f64), TrainError> {
    let system = engine.system_prompt();
    let prompts = encode_prompts(model, examples, s.max_prompt_len, system.as_deref())?;
    let sampled = engine.sample(model, &prompts, s)?;
    score_completions(model, task, examples, &prompts, sampled, first_group)
}

/// Encodes every example's prompt (after `system`, when given); one longer than
/// `max_prompt_len` tokens is an error.
pub fn encode_prompts(
    model: &Model,
    examples: &[Example],
    max_prompt_len: usize,
    system: Option<&str>,
) -> Result<Vec<Vec<i64>>, TrainError> {
    let mut prompts = Vec::with_capacity(examples.len());
    for ex in examples {
        let ids = encode_prompt_with(model, &ex.prompt, system)?;
        if ids.len() > max_prompt_len {
            return Err(TrainError::PromptTooLong {
                example: ex.id.clone(),
                tokens: ids.len(),
                limit: max_prompt_len,
            });
        }
        prompts.push(ids);
    }
    Ok(prompts)
}

/// Decodes and scores sampled completions of `examples` (prompts `prompts`), into rollouts
/// numbered from `first_group`; also returns the seconds spent scoring.
pub fn score_completions(
    model: &Model,
    task: &dyn Task,
    examples: &[Example],
    prompts: &[Vec<i64>],
    sampled: Sampled,
    first_group: usize,
) -> Result<(Vec<Rollout>, f64), TrainError> {
    let Sampled {
        completions,
        engine_side,
    } = sampled;
    let texts: Vec<String> = completions
        .iter()
        .map(|c| decode_response(model, c))
        .collect::<Result<_, _>>()?;
    // A multi-turn response is scored on the model's own text; any other on its text as is.
    let scored: Vec<Option<String>> = completions
        .iter()
        .map(|c| {
            c.tool
                .contains(&true)
                .then(|| own_text(model, c))
                .transpose()
        })
        .collect::<Result<_, _>>()?;
    // Scored together: code verifiers run their programs concurrently in the sandbox's pool.
    let t0 = std::time::Instant::now();
    let pairs: Vec<(&Example, &str)> = completions
        .iter()
        .zip(scored.iter().zip(&texts))
        .map(|(c, (own, t))| (&examples[c.prompt_index], own.as_deref().unwrap_or(t)))
        .collect();
    let scores = score_guarded(task, &pairs);
    let secs = t0.elapsed().as_secs_f64();
    let mut out = Vec::with_capacity(completions.len());
    let rows = completions
        .into_iter()
        .zip(engine_side)
        .zip(texts)
        .zip(scores);
    for (((c, engine), text), score) in rows {
        out.push(Rollout {
            group: first_group + c.prompt_index,
            prompt_ids: prompts[c.prompt_index].clone(),
            truncated: c.finish == Finish::Length,
            response_ids: c.tokens,
            old_logprobs: c.logprobs,
            engine,
            is_weights: None,
            text,
            reward: score.reward,
            correct: score.correct,
            reason: score.reason,
            tool_mask: c.tool,
        });
    }
    Ok((out, secs))
}

/// Scores a batch, surviving a verifier that panics: the batch is scored again one response
/// at a time, and a response whose verifier panics gets the task's wrong-answer score
/// ([`Task::unjudged`]: 0, or -1 under `plus-minus`) with the panic as its reason; the step
/// goes on.
pub fn score_guarded(task: &dyn Task, pairs: &[(&Example, &str)]) -> Vec<Score> {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    if let Ok(scores) = catch_unwind(AssertUnwindSafe(|| task.score_batch(pairs))) {
        return scores;
    }
    pairs
        .iter()
        .map(|(e, r)| {
            catch_unwind(AssertUnwindSafe(|| task.score(e, r))).unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                task.unjudged(format!("verifier crashed: {why}"))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fulcrum_tasks::{Split, Verifier};

    /// A task whose verifier panics on one response.
    struct Brittle;

    impl Task for Brittle {
        fn name(&self) -> &str {
            "brittle"
        }
        fn examples(&self, _: Split, _: u64, _: usize) -> fulcrum_tasks::Result<Vec<Example>> {
            Ok(Vec::new())
        }
        fn score(&self, _: &Example, response: &str) -> Score {
            assert!(response != "boom", "pathological answer");
            Score {
                reward: 1.0,
                correct: true,
                reason: "fine".into(),
            }
        }
    }

    #[test]
    fn a_verifier_that_panics_costs_only_its_response() {
        let e = Example {
            id: "x".into(),
            prompt: "p".into(),
            answer: "a".into(),
            demonstration: None,
            verifier: Verifier::Exact,
            entry_point: None,
        };
        let pairs = [(&e, "ok"), (&e, "boom"), (&e, "ok")];
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let scores = score_guarded(&Brittle, &pairs);
        std::panic::set_hook(hook);
        let rewards: Vec<f64> = scores.iter().map(|s| s.reward).collect();
        assert_eq!(rewards, vec![1.0, 0.0, 1.0]);
        assert!(scores[1]
            .reason
            .contains("verifier crashed: pathological answer"));
    }

    #[test]
    fn a_crashed_verifier_never_pays_more_than_a_wrong_answer() -> fulcrum_tasks::Result<()> {
        use fulcrum_tasks::{create_task, RewardMode, TaskConfig};
        for (mode, wrong) in [(RewardMode::ZeroOne, 0.0), (RewardMode::PlusMinus, -1.0)] {
            let task = create_task(&TaskConfig {
                reward: mode,
                ..TaskConfig::default()
            })?;
            let s = task.unjudged("verifier crashed: x".into());
            assert_eq!((s.reward, s.correct), (wrong, false), "{mode}");
        }
        Ok(())
    }
}
