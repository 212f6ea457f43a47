//! Sampling and scoring: prompts to rollouts (design.md steps 1-3), and a step's drawing of
//! groups with DAPO's dynamic sampling ([`draw_groups`], [`keep_informative_groups`]).
//!
//! A prompt's text is rendered with the model's chat template when it has one (pretrained chat
//! models) and used raw otherwise (the built-in character model), encoded, and completed G
//! times by the rollout engine: the KV-cache sampler, or engine servers sent the token ids (one
//! request per group, seeded by the group). Each response is decoded without its stop token and
//! scored by the task; a verifier failure is a zero reward with a reason, never an error.

use std::collections::HashMap;

use fulcrum_core::rng::mix;
use fulcrum_model::{Completion, Finish, Message, Model, SampleRequest, Sampling};
use fulcrum_tasks::{Example, Score, Task};

use crate::config::Config;
use crate::data::DataStream;
use crate::engine::{RemoteEngine, RolloutEngine};
use crate::error::TrainError;
use crate::ranks::Ranks;

/// One sampled and scored response, with what the update needs (serialisable: ranks of a
/// data-parallel job exchange them).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Rollout {
    /// Index of its prompt (group) within the step batch.
    pub group: usize,
    pub prompt_ids: Vec<i64>,
    /// Sampled tokens, the stop token included (it is part of what the policy chose).
    pub response_ids: Vec<i64>,
    /// Log-probabilities of `response_ids` under the policy that sampled them, as the trainer
    /// computes them: the native sampler's own; for engine rollouts empty until the step's
    /// trainer forward fills them (offpolicy.rs).
    pub old_logprobs: Vec<f32>,
    /// What an inference engine said of this response, when one sampled it.
    pub engine: Option<EngineSample>,
    /// Per-token importance weights of the policy loss (truncated importance sampling against
    /// engine/trainer mismatch); `None`: 1.
    pub is_weights: Option<Vec<f32>>,
    /// The response hit `max_response_len` without stopping.
    pub truncated: bool,
    /// Decoded response (stop token left out).
    pub text: String,
    pub reward: f64,
    pub correct: bool,
    pub reason: String,
}

/// An engine's side of a rollout.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EngineSample {
    /// The engine's log-probability of each response token.
    pub logprobs: Vec<f32>,
    /// The weight version that sampled it (as the engine reports, else as last pushed).
    pub weight_version: Option<u64>,
}

/// Encodes a prompt the way the model expects it.
pub fn encode_prompt(model: &Model, text: &str) -> Result<Vec<i64>, TrainError> {
    let tok = model.tokenizer()?;
    let rendered = match model.chat_template() {
        Ok(t) => t.render(&[Message::user(text)], true),
        Err(_) => text.to_string(),
    };
    Ok(tok.encode(&rendered)?)
}

/// Decodes a response for scoring, without the stop token that ended it.
pub fn decode_response(model: &Model, c: &Completion) -> Result<String, TrainError> {
    let tok = model.tokenizer()?;
    let ids = match c.finish {
        Finish::StopToken(_) => &c.tokens[..c.tokens.len().saturating_sub(1)],
        _ => &c.tokens[..],
    };
    Ok(tok.decode(ids, false)?)
}

/// Settings of one sampling call.
#[derive(Debug, Clone, Copy)]
pub struct SampleSettings {
    pub samples_per_prompt: usize,
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    pub seed: u64,
    /// Index of the first prompt within its step's draw (a rank's share starts past 0): the
    /// sampling streams are those of the whole draw.
    pub first_prompt: usize,
    pub max_prompt_len: usize,
}

/// Samples `samples_per_prompt` responses for each example and scores them. Groups are numbered
/// from `first_group`. Also returns the seconds spent scoring (the rest was sampling).
pub fn sample_and_score(
    engine: &mut RolloutEngine,
    model: &Model,
    task: &dyn Task,
    examples: &[Example],
    s: &SampleSettings,
    first_group: usize,
) -> Result<(Vec<Rollout>, f64), TrainError> {
    let prompts = encode_prompts(model, examples, s.max_prompt_len)?;
    let (completions, engine_side) = match engine {
        RolloutEngine::Native => {
            let req = SampleRequest {
                first_prompt: s.first_prompt,
                prompts: prompts.clone(),
                samples_per_prompt: s.samples_per_prompt,
                max_new_tokens: s.max_new_tokens,
                sampling: s.sampling,
                seed: s.seed,
                stop_token_ids: model.stop_token_ids(),
                stop_strings: vec![],
            };
            let tok = model.tokenizer()?;
            let c = fulcrum_model::generate(model.net(), &req, Some(tok))?;
            let none = vec![None; c.len()];
            (c, none)
        }
        RolloutEngine::Remote(remote) => {
            let reqs = RemoteEngine::requests(model, &prompts, s);
            let groups = remote.generate(&reqs)?;
            RemoteEngine::completions(model, groups)?
        }
    };
    score_completions(
        model,
        task,
        examples,
        &prompts,
        completions,
        engine_side,
        first_group,
    )
}

/// Encodes every example's prompt; one longer than `max_prompt_len` tokens is an error.
pub fn encode_prompts(
    model: &Model,
    examples: &[Example],
    max_prompt_len: usize,
) -> Result<Vec<Vec<i64>>, TrainError> {
    let mut prompts = Vec::with_capacity(examples.len());
    for ex in examples {
        let ids = encode_prompt(model, &ex.prompt)?;
        if ids.len() > max_prompt_len {
            return Err(TrainError::Run(format!(
                "prompt {} has {} tokens, more than rollout.max_prompt_len = {}",
                ex.id,
                ids.len(),
                max_prompt_len
            )));
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
    completions: Vec<Completion>,
    engine_side: Vec<Option<EngineSample>>,
    first_group: usize,
) -> Result<(Vec<Rollout>, f64), TrainError> {
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

/// The groups one step trains on (design.md steps 1-3), with what drawing them took.
pub struct Drawn {
    pub rollouts: Vec<Rollout>,
    /// Prompts drawn, dropped groups included.
    pub groups_drawn: usize,
    /// Groups dropped by dynamic sampling.
    pub groups_dropped: usize,
    /// Seconds spent scoring (the rest of the drawing was sampling).
    pub score_secs: f64,
}

/// Draws `prompts_per_step` prompts, samples `group_size` responses to each and scores them.
/// With dynamic sampling, groups whose rewards are all equal are dropped and more prompts are
/// drawn, up to `dynamic_sampling_max_draws` draws, until the batch is full; the batch is then
/// cut to `prompts_per_step` groups. Draw `d` of step `s` samples with seed `mix(mix(seed, s), d)`.
///
/// In a data-parallel job every rank takes the same prompts from the stream, samples and scores
/// its share of them (whole groups, numbered and seeded as in the whole draw), and the rollouts
/// are gathered, so every rank ends with the same `Drawn` as one process would.
pub fn draw_groups(
    engine: &mut RolloutEngine,
    model: &Model,
    task: &dyn Task,
    cfg: &Config,
    step: u64,
    data: &mut DataStream,
    ranks: &mut Ranks,
) -> Result<Drawn, TrainError> {
    let r = &cfg.rollout;
    let sampling = Sampling::Sample {
        temperature: r.temperature,
        top_k: (r.top_k > 0).then_some(r.top_k as i64),
        top_p: (r.top_p < 1.0).then_some(r.top_p),
    };
    let max_draws = if r.dynamic_sampling {
        r.dynamic_sampling_max_draws
    } else {
        1
    };
    let mut out = Drawn {
        rollouts: Vec::new(),
        groups_drawn: 0,
        groups_dropped: 0,
        score_secs: 0.0,
    };
    let settings = |step: u64, draw: usize| SampleSettings {
        samples_per_prompt: r.group_size,
        max_new_tokens: r.max_response_len,
        sampling,
        seed: mix(mix(cfg.seed, step), draw as u64),
        first_prompt: 0,
        max_prompt_len: r.max_prompt_len,
    };
    for draw in 0..max_draws {
        // With `rollout.overlap`, the first draw was sampled during the previous update.
        let prefetched = match engine {
            RolloutEngine::Remote(remote) if draw == 0 => remote.take_prefetched(step)?,
            _ => None,
        };
        let (examples, (mut drawn, score_secs)) = match prefetched {
            Some(p) => {
                let (c, side) = RemoteEngine::completions(model, p.groups)?;
                let scored = score_completions(
                    model,
                    task,
                    &p.examples,
                    &p.prompts,
                    c,
                    side,
                    out.groups_drawn,
                )?;
                (p.examples, scored)
            }
            None => {
                let examples = data.take(task, r.prompts_per_step)?;
                let mine = ranks.share(examples.len());
                let s = SampleSettings {
                    first_prompt: mine.start,
                    ..settings(step, draw)
                };
                let first_group = out.groups_drawn + mine.start;
                let (rollouts, secs) =
                    sample_and_score(engine, model, task, &examples[mine], &s, first_group)?;
                (examples, (ranks.gather_rollouts(rollouts)?, secs))
            }
        };
        if draw == 0 && r.overlap && step < cfg.steps {
            if let RolloutEngine::Remote(remote) = engine {
                // Step `step + 1`'s first draw, sampled on the weights the engines hold now
                // while this step updates: one step off-policy.
                let resume_at = data.position();
                let next = data.take(task, r.prompts_per_step)?;
                let s = settings(step + 1, 0);
                let prompts = encode_prompts(model, &next, s.max_prompt_len)?;
                let reqs = RemoteEngine::requests(model, &prompts, &s);
                remote.start_prefetch(step + 1, next, prompts, reqs, resume_at)?;
            }
        }
        out.score_secs += score_secs;
        out.groups_drawn += examples.len();
        if r.dynamic_sampling {
            out.groups_dropped += keep_informative_groups(&mut drawn, r.group_size);
        }
        out.rollouts.extend(drawn);
        if !r.dynamic_sampling || out.rollouts.len() / r.group_size >= r.prompts_per_step {
            break;
        }
    }
    if r.dynamic_sampling {
        out.rollouts.truncate(r.prompts_per_step * r.group_size);
    }
    Ok(out)
}

/// DAPO's dynamic sampling filter: keeps the groups whose rewards differ (a group of equal
/// rewards has zero advantages and teaches nothing); returns how many groups it dropped.
pub fn keep_informative_groups(rollouts: &mut Vec<Rollout>, group_size: usize) -> usize {
    let before = rollouts.len();
    let mut range: HashMap<usize, (f64, f64)> = HashMap::new();
    for x in rollouts.iter() {
        let e = range.entry(x.group).or_insert((x.reward, x.reward));
        *e = (e.0.min(x.reward), e.1.max(x.reward));
    }
    rollouts.retain(|x| range.get(&x.group).is_some_and(|(lo, hi)| lo < hi));
    (before - rollouts.len()) / group_size
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
    fn engine_tokens_outside_the_vocabulary_are_refused() {
        let model = Model::tiny(tch::Device::Cpu, 0).unwrap();
        let c = |t: i64| fulcrum_rollout::EngineCompletion {
            tokens: vec![1, t],
            logprobs: vec![-1.0, -1.0],
            finish: fulcrum_rollout::FinishReason::Length,
            weight_version: None,
            engine: "http://e".into(),
        };
        let (done, side) = RemoteEngine::completions(&model, vec![vec![c(2)]]).unwrap();
        assert_eq!(done[0].tokens, vec![1, 2]);
        assert_eq!(side[0].as_ref().map(|e| e.logprobs.len()), Some(2));
        let e = RemoteEngine::completions(&model, vec![vec![c(2), c(1 << 20)]]).unwrap_err();
        assert!(e.to_string().contains("http://e") && e.to_string().contains("vocabulary"));
        assert!(RemoteEngine::completions(&model, vec![vec![c(-1)]]).is_err());
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
