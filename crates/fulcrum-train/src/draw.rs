//! A step's drawing of groups (design.md steps 1-3): prompts from the stream, `group_size`
//! responses to each on the rollout engine, scored; DAPO's dynamic sampling draws more until the
//! batch is full of informative groups. In a data-parallel job every rank samples its share of
//! the prompts and the rollouts are gathered, so every rank ends with the same batch.

use std::collections::HashMap;

use fulcrum_core::rng::mix;
use fulcrum_model::{Model, Sampling};
use fulcrum_tasks::Task;

use crate::config::RolloutConfig;
use crate::data::DataStream;
use crate::engine::RolloutEngine;
use crate::error::TrainError;
use crate::ranks::Ranks;
use crate::rollout::{Rollout, SampleSettings};
use crate::score::{encode_prompts, sample_and_score, score_completions};

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
    r: &RolloutConfig,
    at: StepOf,
    data: &mut DataStream,
    ranks: &mut Ranks,
) -> Result<Drawn, TrainError> {
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
        seed: mix(mix(at.seed, step), draw as u64),
        first_prompt: 0,
        max_prompt_len: r.max_prompt_len,
    };
    let step = at.step;
    for draw in 0..max_draws {
        // With `rollout.overlap`, the first draw was sampled during the previous update.
        let prefetched = match draw {
            0 => engine.take_prefetched(model, step)?,
            _ => None,
        };
        let (examples, (mut drawn, score_secs)) = match prefetched {
            Some(p) => {
                let first_group = out.groups_drawn;
                let scored = score_completions(
                    model,
                    task,
                    &p.examples,
                    &p.prompts,
                    p.sampled,
                    first_group,
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
                (examples, (ranks.gather(rollouts, "rollouts")?, secs))
            }
        };
        if draw == 0 && r.overlap && step < at.steps && engine.samples_ahead() {
            // Step `step + 1`'s first draw, sampled on the weights the engines hold now while
            // this step updates: one step off-policy.
            let resume_at = data.position();
            let next = data.take(task, r.prompts_per_step)?;
            let s = settings(step + 1, 0);
            let prompts = encode_prompts(model, &next, s.max_prompt_len)?;
            engine.sample_ahead(model, step + 1, next, prompts, &s, resume_at)?;
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

/// Step `step` of the `steps` of a run seeded `seed` (what a draw's sampling seeds derive from,
/// and whether a next step's draw may start early).
#[derive(Debug, Clone, Copy)]
pub struct StepOf {
    pub seed: u64,
    pub step: u64,
    pub steps: u64,
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
