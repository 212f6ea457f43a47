//! Held-out evaluation: `k` responses per prompt of a task's test split, scored; avg@k (mean
//! correctness over all responses) and pass@k (prompts with at least one correct response).

use fulcrum_model::{Model, Sampling};
use fulcrum_tasks::{Example, Split, Task};
use serde::{Deserialize, Serialize};

use crate::engine::RolloutEngine;
use crate::error::TrainError;
use crate::rollout::{Rollout, SampleSettings};
use crate::score::sample_and_score;
use crate::tools::ToolSetup;
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
    // The held-out task's tools (`eval.task`, else the training task's): a run trained with
    // tools is evaluated with them.
    let tools_of = cfg.eval.task.as_ref().unwrap_or(&cfg.task);
    let mut engine =
        RolloutEngine::Native(ToolSetup::for_task(tools_of, cfg.rollout.max_turns).map(Box::new));
    let s = EvalSettings::of(cfg);
    let mut result = sample_and_measure(&mut engine, model, task, &s)?.0;
    if let Some(g) = EvalSettings::greedy_of(cfg) {
        let greedy = sample_and_measure(&mut engine, model, task, &g)?.0;
        result.greedy_prompts = Some(greedy.prompts);
        result.greedy_accuracy = Some(greedy.accuracy);
        result.greedy_truncated = Some(greedy.truncated);
    }
    Ok(result)
}

/// One scored response of an evaluation (what `fulcrum eval --samples` writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Tool calls the response made (`--tools`; 0 without tools).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_calls: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl EvalSample {
    /// The scored response `r` to `example`.
    fn of(example: &Example, r: Rollout) -> EvalSample {
        let tool_calls = r.tool_calls();
        EvalSample {
            id: example.id.clone(),
            prompt: example.prompt.clone(),
            tokens: r.response_ids.len(),
            response: r.text,
            truncated: r.truncated,
            reward: r.reward,
            correct: r.correct,
            tool_calls,
            reason: r.reason,
        }
    }
}

/// Evaluates `model` on the first `s.prompts` examples of the task's test split.
pub fn evaluate(
    model: &Model,
    task: &dyn Task,
    s: &EvalSettings,
) -> Result<EvalResult, TrainError> {
    sample_and_measure(&mut RolloutEngine::Native(None), model, task, s)
        .map(|(result, _, _)| result)
}

/// [`evaluate`], also returning every scored response in problem order.
pub fn evaluate_with_samples(
    model: &Model,
    task: &dyn Task,
    s: &EvalSettings,
) -> Result<(EvalResult, Vec<EvalSample>), TrainError> {
    let (result, rollouts, examples) =
        sample_and_measure(&mut RolloutEngine::Native(None), model, task, s)?;
    let samples = rollouts
        .into_iter()
        .map(|r| EvalSample::of(&examples[r.group], r))
        .collect();
    Ok((result, samples))
}

/// How [`sample_problems`] samples: `n` responses per problem, greedy at temperature 0.
#[derive(Debug, Clone, Copy)]
pub struct ProblemSampling {
    pub n: usize,
    /// 0: greedy.
    pub temperature: f64,
    pub max_new_tokens: usize,
    pub seed: u64,
}

/// Problems per sampling chunk of [`evaluate`]: problem `i` of an evaluation draws from the
/// streams of chunk `i / EVAL_CHUNK` at position `i % EVAL_CHUNK`.
pub const EVAL_CHUNK: usize = 64;

/// Samples `p.n` responses for each of `examples` and scores them: `out[j]` holds the responses
/// to `examples[j]`, in sample order. Problem `j` of the slice is problem `first + j` of the evaluation's seeded
/// order, and sample `g` of problem `i` draws from the stream that [`evaluate`] gives it
/// (seed `mix(seed, i / 64)`, prompt `i % 64`, sample `g`), whatever slice it is sampled in:
/// an evaluation resumed from a cache of finished problems draws what an uninterrupted one
/// would, and `fulcrum eval` samples what the in-training evaluation of the same seed samples.
/// (The same streams give the same tokens; only floating-point rounding can differ between
/// batches of different composition, which at worst flips a near-tie.)
///
/// `engine` samples: the native sampler, with the task's tools when it has some
/// ([`crate::tools::ToolSetup`]).
pub fn sample_problems(
    engine: &mut RolloutEngine,
    model: &Model,
    task: &dyn Task,
    examples: &[Example],
    first: usize,
    p: &ProblemSampling,
) -> Result<Vec<Vec<EvalSample>>, TrainError> {
    let rollouts = sample_in_chunks(
        engine,
        model,
        task,
        examples,
        first,
        &SampleSettings {
            first_prompt: 0,
            samples_per_prompt: p.n,
            max_new_tokens: p.max_new_tokens,
            sampling: sampling_at(p.temperature),
            seed: p.seed,
            max_prompt_len: usize::MAX,
        },
    )?;
    let mut out: Vec<Vec<EvalSample>> = vec![Vec::with_capacity(p.n); examples.len()];
    // Rollouts come problem by problem, each problem's in sample order.
    for r in rollouts {
        let j = r.group;
        out[j].push(EvalSample::of(&examples[j], r));
    }
    Ok(out)
}

/// The measures of an evaluation with `n` responses to each problem, for a given `k <= n`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProblemMeasures {
    pub problems: usize,
    /// Responses per problem.
    pub n: usize,
    pub k: usize,
    /// Mean over problems of c / n (c: correct responses of the problem's n).
    pub pass_at_1: f64,
    /// Mean over problems of the unbiased estimator 1 - C(n-c, k) / C(n, k)
    /// ([`fulcrum_core::stats::pass_at_k`]): the chance that k of the n responses, drawn
    /// without replacement, hold a correct one.
    pub pass_at_k: f64,
    /// Mean correctness over all n responses of every problem (the papers' avg@k, for n = k;
    /// with n > k the same estimate of one response's accuracy, from more responses). Equal
    /// to `pass_at_1`, since every problem has n responses.
    pub avg_at_k: f64,
    pub reward: f64,
    /// Mean response length in tokens.
    pub mean_len: f64,
    /// Fraction of responses cut at the length limit.
    pub truncated: f64,
    /// Response tokens, all responses.
    pub tokens: usize,
    /// Tool calls per response (0 without tools).
    pub tool_calls_mean: f64,
}

/// Measures an evaluation from each problem's responses (`problems[i]`: problem i's n
/// responses). Every problem must have the same number n >= k >= 1 of responses.
pub fn measure_problems(
    problems: &[Vec<EvalSample>],
    k: usize,
) -> Result<ProblemMeasures, TrainError> {
    let n = problems.first().map_or(0, Vec::len);
    if problems.is_empty() || n == 0 {
        return Err(TrainError::Measure("no responses to measure".into()));
    }
    if let Some(bad) = problems.iter().find(|p| p.len() != n) {
        return Err(TrainError::Measure(format!(
            "problems with unequal response counts ({n} and {})",
            bad.len()
        )));
    }
    let bad_k = || TrainError::Measure(format!("pass@k needs 1 <= k <= n; k = {k}, n = {n}"));
    if k == 0 || k > n {
        return Err(bad_k());
    }
    let (mut p1, mut pk) = (0.0, 0.0);
    for p in problems {
        let c = p.iter().filter(|s| s.correct).count();
        p1 += c as f64 / n as f64;
        pk += fulcrum_core::stats::pass_at_k(n, c, k).ok_or_else(bad_k)?;
    }
    let all = problems.iter().flatten();
    let responses = (problems.len() * n) as f64;
    let tokens: usize = all.clone().map(|s| s.tokens).sum();
    let count = problems.len() as f64;
    Ok(ProblemMeasures {
        problems: problems.len(),
        n,
        k,
        pass_at_1: p1 / count,
        pass_at_k: pk / count,
        avg_at_k: all.clone().filter(|s| s.correct).count() as f64 / responses,
        reward: all.clone().map(|s| s.reward).sum::<f64>() / responses,
        mean_len: tokens as f64 / responses,
        truncated: all.clone().filter(|s| s.truncated).count() as f64 / responses,
        tool_calls_mean: all.map(|s| s.tool_calls as f64).sum::<f64>() / responses,
        tokens,
    })
}

/// Samples and scores the test examples; the measures, the rollouts and their examples.
fn sample_and_measure(
    engine: &mut RolloutEngine,
    model: &Model,
    task: &dyn Task,
    s: &EvalSettings,
) -> Result<(EvalResult, Vec<Rollout>, Vec<Example>), TrainError> {
    let examples = task.examples(Split::Test, s.seed, s.prompts)?;
    if examples.is_empty() {
        return Err(TrainError::NoExamples {
            task: task.name().to_string(),
            split: "test",
        });
    }
    let t0 = std::time::Instant::now();
    let rollouts = sample_in_chunks(
        engine,
        model,
        task,
        &examples,
        0,
        &SampleSettings {
            first_prompt: 0,
            samples_per_prompt: s.k,
            max_new_tokens: s.max_new_tokens,
            sampling: sampling_at(s.temperature),
            seed: s.seed,
            max_prompt_len: s.max_prompt_len,
        },
    )?;
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

/// Samples and scores `examples`, problems `first..` of an evaluation's seeded order, in the
/// evaluation's chunks of [`EVAL_CHUNK`] problems: chunk `c` is one request seeded
/// `mix(base.seed, c)`, problem `i` sits at position `i % EVAL_CHUNK` of its chunk (the
/// sampler's stream position), so a problem's responses do not depend on the slice it is
/// sampled in. Chunks also bound the sampler's batch (and memory) on large sets. Rollouts are
/// numbered by their problem's index in `examples`, in problem order. A stop asked for by a
/// signal ([`crate::stop_requested`]) is honoured before each chunk: the evaluation ends there
/// with [`TrainError::Stopped`], and nothing of it is returned.
fn sample_in_chunks(
    engine: &mut RolloutEngine,
    model: &Model,
    task: &dyn Task,
    examples: &[Example],
    first: usize,
    base: &SampleSettings,
) -> Result<Vec<Rollout>, TrainError> {
    let mut rollouts = Vec::new();
    let mut start = 0;
    while start < examples.len() {
        if crate::interrupt::stop_requested() {
            return Err(TrainError::Stopped {
                during: format!(
                    "evaluating (after {start} of its {} prompts)",
                    examples.len()
                ),
            });
        }
        let global = first + start;
        let chunk = global / EVAL_CHUNK;
        let end = examples
            .len()
            .min(start + (chunk + 1) * EVAL_CHUNK - global);
        let settings = SampleSettings {
            first_prompt: global % EVAL_CHUNK,
            seed: mix(base.seed, chunk as u64),
            ..*base
        };
        let (r, _) =
            sample_and_score(engine, model, task, &examples[start..end], &settings, start)?;
        rollouts.extend(r);
        start = end;
    }
    Ok(rollouts)
}

/// How an evaluation samples at `temperature`: greedy at 0, else the full distribution (no
/// top-k or top-p, so that avg@k and pass@k measure the policy itself).
fn sampling_at(temperature: f64) -> Sampling {
    if temperature > 0.0 {
        Sampling::Sample {
            temperature,
            top_k: None,
            top_p: None,
        }
    } else {
        Sampling::Greedy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fulcrum_core::Rule;

    fn sample(correct: bool, tokens: usize, truncated: bool) -> EvalSample {
        EvalSample {
            id: "p".into(),
            prompt: "q".into(),
            response: "r".into(),
            tokens,
            truncated,
            reward: if correct { 1.0 } else { 0.0 },
            correct,
            reason: String::new(),
            tool_calls: 0,
        }
    }

    /// Problems with 4 responses each, `correct[i]` of problem i correct.
    fn problems(correct: &[usize]) -> Vec<Vec<EvalSample>> {
        correct
            .iter()
            .map(|&c| {
                (0..4)
                    .map(|g| sample(g < c, 10 * (g + 1), g == 3))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn measures_of_hand_made_problems() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // n = 4; correct 0, 1 and 4 of 4.
        let m = measure_problems(&problems(&[0, 1, 4]), 2).unwrap();
        assert_eq!((m.problems, m.n, m.k), (3, 4, 2));
        // pass@1: mean of c/n = (0 + 1/4 + 1) / 3.
        assert!(close(m.pass_at_1, 1.25 / 3.0), "{m:?}");
        // pass@2: problem 2 is 1 - C(3,2)/C(4,2) = 1/2, so (0 + 1/2 + 1) / 3.
        assert!(close(m.pass_at_k, 0.5), "{m:?}");
        // avg@k: 5 correct of 12 responses.
        assert!(close(m.avg_at_k, 5.0 / 12.0) && close(m.reward, 5.0 / 12.0));
        assert!(close(m.mean_len, 25.0) && close(m.truncated, 0.25));
        assert_eq!(m.tokens, 300);
        // k = n: pass@k is "any of the n correct"; k = 1: pass@1.
        let all = measure_problems(&problems(&[0, 1, 4]), 4).unwrap();
        assert!(close(all.pass_at_k, 2.0 / 3.0));
        let one = measure_problems(&problems(&[0, 1, 4]), 1).unwrap();
        assert!(close(one.pass_at_k, one.pass_at_1));
        // n = 4, c = 2, k = 3: 1 - C(2,3)/C(4,3) = 1 (any 3 of 4 hold a correct one).
        assert!(close(
            measure_problems(&problems(&[2]), 3).unwrap().pass_at_k,
            1.0
        ));
        // Refused: k out of range, unequal response counts, nothing to measure.
        assert!(measure_problems(&problems(&[1]), 5).is_err());
        assert!(measure_problems(&problems(&[1]), 0).is_err());
        let mut uneven = problems(&[1, 2]);
        uneven[1].pop();
        assert!(measure_problems(&uneven, 1).is_err());
        assert!(measure_problems(&[], 1).is_err());
    }

    #[test]
    fn sampling_problems_in_any_slices_draws_the_evaluations_streams() {
        use fulcrum_tasks::{create_task, TaskConfig};
        let model = Model::tiny(tch::Device::Cpu, 0).unwrap();
        let task = create_task(&TaskConfig::default()).unwrap();
        // 70 problems: past the first chunk of 64, so the chunk seeds are exercised.
        let s = EvalSettings {
            prompts: 70,
            k: 2,
            temperature: 1.0,
            max_new_tokens: 6,
            max_prompt_len: usize::MAX,
            seed: 11,
        };
        let (_, whole) = evaluate_with_samples(&model, task.as_ref(), &s).unwrap();
        let examples = task.examples(Split::Test, s.seed, s.prompts).unwrap();
        let p = ProblemSampling {
            n: 2,
            temperature: 1.0,
            max_new_tokens: 6,
            seed: 11,
        };
        // Slices that start mid-chunk and one that straddles the chunk boundary.
        let mut pieces = Vec::new();
        for (a, b) in [(0, 5), (5, 60), (60, 70)] {
            let got = sample_problems(
                &mut RolloutEngine::Native(None),
                &model,
                task.as_ref(),
                &examples[a..b],
                a,
                &p,
            )
            .unwrap();
            assert_eq!(got.len(), b - a);
            assert!(got.iter().all(|s| s.len() == 2));
            pieces.extend(got.into_iter().flatten());
        }
        assert_eq!(pieces.len(), whole.len());
        assert_eq!(pieces, whole);
        // A different seed draws other responses (the comparison above can fail).
        let other = ProblemSampling { seed: 12, ..p };
        let moved = sample_problems(
            &mut RolloutEngine::Native(None),
            &model,
            task.as_ref(),
            &examples[..5],
            0,
            &other,
        )
        .unwrap();
        let moved: Vec<EvalSample> = moved.into_iter().flatten().collect();
        assert_ne!(moved, whole[..10]);
    }

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
