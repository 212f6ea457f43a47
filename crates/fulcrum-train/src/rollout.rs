//! Sampling and scoring: prompts to rollouts (design.md steps 1-3).
//!
//! A prompt's text is rendered with the model's chat template when it has one (pretrained chat
//! models) and used raw otherwise (the built-in character model), encoded, and completed G
//! times by the KV-cache sampler. Each response is decoded without its stop token and scored by
//! the task; a verifier failure is a zero reward with a reason, never an error.

use fulcrum_model::{Completion, Finish, Message, Model, SampleRequest, Sampling};
use fulcrum_tasks::{Example, Task};

use crate::error::TrainError;

/// One sampled and scored response, with what the update needs.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// Index of its prompt (group) within the step batch.
    pub group: usize,
    pub prompt_ids: Vec<i64>,
    /// Sampled tokens, the stop token included (it is part of what the policy chose).
    pub response_ids: Vec<i64>,
    /// Log-probabilities of `response_ids` under the sampling distribution.
    pub old_logprobs: Vec<f32>,
    /// The response hit `max_response_len` without stopping.
    pub truncated: bool,
    /// Decoded response (stop token left out).
    pub text: String,
    pub reward: f64,
    pub correct: bool,
    pub reason: String,
}

/// Encodes a prompt the way the model expects it.
pub fn encode_prompt(model: &Model, text: &str) -> Result<Vec<i64>, TrainError> {
    let tok = model.tokenizer().map_err(TrainError::model)?;
    let rendered = match model.chat_template() {
        Ok(t) => t.render(&[Message::user(text)], true),
        Err(_) => text.to_string(),
    };
    tok.encode(&rendered).map_err(TrainError::model)
}

/// Decodes a response for scoring, without the stop token that ended it.
pub fn decode_response(model: &Model, c: &Completion) -> Result<String, TrainError> {
    let tok = model.tokenizer().map_err(TrainError::model)?;
    let ids = match c.finish {
        Finish::StopToken(_) => &c.tokens[..c.tokens.len().saturating_sub(1)],
        _ => &c.tokens[..],
    };
    tok.decode(ids, false).map_err(TrainError::model)
}

/// Settings of one sampling call.
#[derive(Debug, Clone, Copy)]
pub struct SampleSettings {
    pub samples_per_prompt: usize,
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    pub seed: u64,
    pub max_prompt_len: usize,
}

/// Samples `samples_per_prompt` responses for each example and scores them. Groups are numbered
/// from `first_group`. Also returns the seconds spent scoring (the rest was sampling).
pub fn sample_and_score(
    model: &Model,
    task: &dyn Task,
    examples: &[Example],
    s: &SampleSettings,
    first_group: usize,
) -> Result<(Vec<Rollout>, f64), TrainError> {
    let mut prompts = Vec::with_capacity(examples.len());
    for ex in examples {
        let ids = encode_prompt(model, &ex.prompt)?;
        if ids.len() > s.max_prompt_len {
            return Err(TrainError::Data(format!(
                "prompt {} has {} tokens, more than rollout.max_prompt_len = {}",
                ex.id,
                ids.len(),
                s.max_prompt_len
            )));
        }
        prompts.push(ids);
    }
    let req = SampleRequest {
        prompts: prompts.clone(),
        samples_per_prompt: s.samples_per_prompt,
        max_new_tokens: s.max_new_tokens,
        sampling: s.sampling,
        seed: s.seed,
        stop_token_ids: model.stop_token_ids(),
        stop_strings: vec![],
    };
    let tok = model.tokenizer().map_err(TrainError::model)?;
    let completions =
        fulcrum_model::generate(model.net(), &req, Some(tok)).map_err(TrainError::model)?;
    let texts: Vec<String> = completions
        .iter()
        .map(|c| decode_response(model, c))
        .collect::<Result<_, _>>()?;
    // Scored together: code verifiers run their programs concurrently in the sandbox's pool.
    let t0 = std::time::Instant::now();
    let pairs: Vec<(&Example, &str)> = completions
        .iter()
        .zip(&texts)
        .map(|(c, t)| (&examples[c.prompt_index], t.as_str()))
        .collect();
    let scores = task.score_batch(&pairs);
    let secs = t0.elapsed().as_secs_f64();
    let mut out = Vec::with_capacity(completions.len());
    for ((c, text), score) in completions.into_iter().zip(texts).zip(scores) {
        out.push(Rollout {
            group: first_group + c.prompt_index,
            prompt_ids: prompts[c.prompt_index].clone(),
            truncated: c.finish == Finish::Length,
            response_ids: c.tokens,
            old_logprobs: c.logprobs,
            text,
            reward: score.reward,
            correct: score.correct,
            reason: score.reason,
        });
    }
    Ok((out, secs))
}
