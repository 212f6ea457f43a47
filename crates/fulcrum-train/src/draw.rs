//! A step's drawing of groups (design.md steps 1-3): prompts from the stream, `group_size`
//! responses to each on the rollout engine, scored; DAPO's dynamic sampling draws more until the
//! batch is full of informative groups; groups sampled more than `rollout.max_staleness` versions
//! behind are dropped. In a data-parallel job every rank samples its share of the prompts (with
//! engines, rank 0 samples them all) and the rollouts are gathered, so every rank ends with the
//! same batch.

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
use crate::tools::ToolStats;

/// The groups one step trains on (design.md steps 1-3), with what drawing them took.
pub struct Drawn {
    pub rollouts: Vec<Rollout>,
    /// Prompts drawn, dropped groups included.
    pub groups_drawn: usize,
    /// Groups dropped by dynamic sampling.
    pub groups_dropped: usize,
    /// Seconds spent scoring (the rest of the drawing was sampling).
    pub score_secs: f64,
    /// How many versions behind the trained policy the kept responses were sampled (engines;
    /// 0 with the native sampler): their sum and largest.
    pub staleness_sum: u64,
    pub staleness_max: u64,
    /// Responses dropped for being sampled more than `rollout.max_staleness` versions behind.
    pub dropped_stale: u64,
    /// What the tools did (every rank's calls).
    pub tool: ToolStats,
}

/// Draws `prompts_per_step` prompts, samples `group_size` responses to each and scores them.
/// With dynamic sampling, groups whose rewards are all equal are dropped and more prompts are
/// drawn, up to `dynamic_sampling_max_draws` draws, until the batch is full; the batch is then
/// cut to `prompts_per_step` groups. Draw `d` of step `s` samples with seed `mix(mix(seed, s), d)`.
///
/// In a data-parallel job every rank takes the same prompts from the stream, samples and scores
/// its share of them (whole groups, numbered and seeded as in the whole draw: with engines, the
/// rank that drives them samples all), and the rollouts are gathered, so every rank ends with
/// the same `Drawn` as one process would. With draws requested ahead (`rollout.max_staleness`),
/// a step's first draw is the one requested for it, and after it the next steps' are requested.
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
        staleness_sum: 0,
        staleness_max: 0,
        dropped_stale: 0,
        tool: ToolStats::default(),
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
        let ahead = match draw {
            0 => engine.take_ahead(model, step)?,
            _ => None,
        };
        let (examples, (mine, score_secs)) = match ahead {
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
                let mine = engine.share(ranks, examples.len());
                let s = SampleSettings {
                    first_prompt: mine.start,
                    ..settings(step, draw)
                };
                let first_group = out.groups_drawn + mine.start;
                let scored =
                    sample_and_score(engine, model, task, &examples[mine], &s, first_group)?;
                (examples, scored)
            }
        };
        let mut drawn = ranks.gather(mine, "rollouts")?;
        if draw == 0 {
            // The next steps' first draws sample while this step updates.
            let until = (step + engine.staleness()).min(at.steps);
            let from = engine.requested_until().map_or(step, |s| s.max(step)) + 1;
            for next in from..=until {
                let resume_at = data.position();
                let examples = data.take(task, r.prompts_per_step)?;
                let s = settings(next, 0);
                let system = engine.system_prompt();
                let prompts =
                    encode_prompts(model, &examples, s.max_prompt_len, system.as_deref())?;
                engine.request_ahead(model, next, (examples, prompts), &s, resume_at)?;
            }
        }
        out.score_secs += score_secs;
        out.groups_drawn += examples.len();
        let stale = keep_fresh_groups(&mut drawn, step - 1, engine.staleness());
        out.dropped_stale += stale.dropped;
        out.staleness_sum += stale.sum;
        out.staleness_max = out.staleness_max.max(stale.max);
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
    // Each rank ran the calls of its share (no exchange in a run without tools).
    if engine.has_tools() {
        let mine = engine.take_tool_stats();
        let counts = [mine.calls, mine.errors, mine.timeouts].map(|n| n as f64);
        if let [calls, errors, timeouts] = ranks.sum(&counts)?[..] {
            out.tool = ToolStats {
                calls: calls as usize,
                errors: errors as usize,
                timeouts: timeouts as usize,
            };
        }
    }
    Ok(out)
}

/// How stale the responses of a draw were.
#[derive(Debug, Default, PartialEq)]
struct Staleness {
    /// Over the responses kept: the sum and the largest of (trained version − sampling version).
    sum: u64,
    max: u64,
    /// Responses dropped.
    dropped: u64,
}

/// Drops every group with a response sampled more than `bound` versions before `trained` (the
/// version the step trains), and measures the staleness of the rest. A response whose engine
/// did not say its version, or that the native sampler drew, counts as current.
fn keep_fresh_groups(rollouts: &mut Vec<Rollout>, trained: u64, bound: u64) -> Staleness {
    let age = |x: &Rollout| {
        x.engine
            .as_ref()
            .and_then(|e| e.weight_version)
            .map_or(0, |v| trained.saturating_sub(v))
    };
    let too_old: std::collections::HashSet<usize> = rollouts
        .iter()
        .filter(|x| age(x) > bound)
        .map(|x| x.group)
        .collect();
    let before = rollouts.len();
    rollouts.retain(|x| !too_old.contains(&x.group));
    let ages: Vec<u64> = rollouts.iter().map(age).collect();
    Staleness {
        sum: ages.iter().sum(),
        max: ages.iter().copied().max().unwrap_or(0),
        dropped: (before - rollouts.len()) as u64,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::EngineSample;

    fn rollout(group: usize, version: Option<u64>, engine: bool) -> Rollout {
        Rollout {
            group,
            prompt_ids: vec![1],
            response_ids: vec![2],
            old_logprobs: vec![],
            engine: engine.then(|| EngineSample {
                logprobs: vec![-1.0],
                weight_version: version,
            }),
            is_weights: None,
            truncated: false,
            text: String::new(),
            reward: 0.0,
            correct: false,
            reason: String::new(),
            tool_mask: Vec::new(),
        }
    }

    #[test]
    fn groups_sampled_past_the_bound_are_dropped_whole_and_counted() {
        // Training version 5 with a bound of 2: version 3 is 2 behind (kept), version 2 is 3
        // behind (its whole group goes, the fresh response beside it included).
        let mut batch = vec![
            rollout(0, Some(3), true),
            rollout(0, Some(4), true),
            rollout(1, Some(2), true),
            rollout(1, Some(5), true),
            rollout(2, None, true),
            rollout(2, None, false),
        ];
        let s = keep_fresh_groups(&mut batch, 5, 2);
        assert_eq!(
            s,
            Staleness {
                sum: 2 + 1,
                max: 2,
                dropped: 2
            }
        );
        let groups: Vec<usize> = batch.iter().map(|x| x.group).collect();
        assert_eq!(groups, vec![0, 0, 2, 2]);
        // A bound of 0 keeps only responses of the trained version (or of no stated version).
        let mut batch = vec![rollout(0, Some(5), true), rollout(1, Some(4), true)];
        let s = keep_fresh_groups(&mut batch, 5, 0);
        assert_eq!((s.dropped, s.max, batch.len()), (1, 0, 1));
    }
}
