//! Synthetic tasks for the CPU lab: deterministic by seed, with difficulty and length knobs.
//!
//! Four families, one file each, chosen for their *response-length* behaviour, since the paper's
//! finding is that aggregation rules differ by the length variation inside a group and by the
//! length gap between right and wrong answers:
//!
//! | family | prompt | length profile (measured by each file's tests) |
//! |---|---|---|
//! | `arithmetic` | `Q: 347+86` | grows linearly with the number of digits; right and wrong equally long |
//! | `countdown` | `reach 24 with 3 5 2 4` | failed searches are longer than successful ones |
//! | `lists` | `sort: 5 3 9 1` | large variation inside a group (lists of very different lengths, trace or not) |
//! | `steps` | `collatz 7 steps 5` | every step must be written; shortcuts are wrong and shorter |
//!
//! More knobs, [`Shape`] (`shape.rs`), set the within-group length variation (`verbose_rate`,
//! `verbose_levels`) and the ± length gap (`mistake_length`, and `loop_rate`: mistakes that loop
//! to the length limit and never answer) directly on any family.
//!
//! All text uses only the characters of [`crate::vocab::CHARS`]. Every response ends with an
//! `Answer: ...` line (except the looping demonstrations of `loop_rate`). A demonstration is the worked response the task would write; with
//! probability `mistake_rate` it carries an injected mistake (and then a wrong answer), so a
//! model fitted to demonstrations is imperfect and RL has something to improve.
//!
//! Splits: each generated prompt is assigned to `test` when the hash of its text is 0 mod 10,
//! to `train` otherwise, so the two splits never share a prompt.

mod arithmetic;
mod countdown;
mod lists;
mod shape;
mod steps;

pub use shape::{Shape, VerboseLevels, DEFAULT_LOOP_LENGTH};

use crate::error::{Result, TaskError};
use crate::task::{Example, Split, Task};
use crate::verify::{score_exact, RewardMode, Score, Verifier};
use fulcrum_core::rng::{hash_str, SplitMix64};

fulcrum_core::closed_set! {
    /// The synthetic families.
    pub enum Family("synthetic family") {
        /// Multi-digit addition with a column-by-column scratchpad.
        Arithmetic = "arithmetic",
        /// Reach a target from given numbers; demonstrations show the search.
        Countdown = "countdown",
        /// Sort, reverse or dedupe a list.
        Lists = "lists",
        /// Write every step of a Collatz trajectory.
        Steps = "steps",
    }
}

/// The knobs every family reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knobs {
    /// 1 (easiest) to 10.
    pub difficulty: u32,
    /// How much working demonstrations write: 0 answer only, 1 normal, 2 and up verbose.
    pub length: f64,
    /// Probability of an injected mistake in a demonstration.
    pub mistake_rate: f64,
}

/// One generated problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The prompt text (ends with a newline).
    pub prompt: String,
    /// The reference answer (what follows `Answer:` in a right response).
    pub answer: String,
    /// The worked response; may carry an injected mistake.
    pub demonstration: String,
    /// Whether a mistake was injected (then the demonstration's answer is wrong).
    pub mistaken: bool,
}

/// Generates one problem of a family.
pub fn generate(family: Family, rng: &mut SplitMix64, knobs: &Knobs) -> Problem {
    match family {
        Family::Arithmetic => arithmetic::generate(rng, knobs),
        Family::Countdown => countdown::generate(rng, knobs),
        Family::Lists => lists::generate(rng, knobs),
        Family::Steps => steps::generate(rng, knobs),
    }
}

/// A synthetic family as a [`Task`].
#[derive(Debug, Clone)]
pub struct SyntheticTask {
    family: Family,
    knobs: Knobs,
    shape: Shape,
    reward: RewardMode,
}

impl SyntheticTask {
    /// The task for a family with its knobs (already validated, see `create.rs`).
    pub fn new(family: Family, knobs: Knobs, shape: Shape, reward: RewardMode) -> Self {
        SyntheticTask {
            family,
            knobs,
            shape,
            reward,
        }
    }

    /// The family.
    pub fn family(&self) -> Family {
        self.family
    }
}

impl Task for SyntheticTask {
    fn unjudged(&self, reason: String) -> Score {
        Score::from_outcome(self.reward, false, reason)
    }

    fn name(&self) -> &str {
        self.family.name()
    }

    fn examples(&self, split: Split, seed: u64, count: usize) -> Result<Vec<Example>> {
        let mut out = Vec::with_capacity(count);
        let max_attempts = 200 * count as u64 + 1000;
        let mut i = 0u64;
        while out.len() < count {
            if i >= max_attempts {
                return Err(TaskError::Setting {
                    key: "difficulty".into(),
                    problem: format!(
                        "{} at difficulty {} has too few distinct prompts for {count} {split:?} examples",
                        self.family.name(),
                        self.knobs.difficulty
                    ),
                });
            }
            let mut rng = SplitMix64::derive(seed, self.family.name(), i);
            i += 1;
            let mut p = generate(self.family, &mut rng, &self.knobs);
            self.shape.apply(&mut p, &mut rng);
            let is_test = hash_str(&p.prompt).is_multiple_of(10);
            if is_test != (split == Split::Test) {
                continue;
            }
            out.push(Example {
                id: format!("{}-{seed}-{}", self.family.name(), i - 1),
                prompt: p.prompt,
                answer: p.answer,
                demonstration: Some(p.demonstration),
                verifier: Verifier::Exact,
                entry_point: None,
            });
        }
        Ok(out)
    }

    fn score(&self, example: &Example, response: &str) -> Score {
        match self.family {
            Family::Countdown => countdown::score(&example.prompt, response, self.reward),
            Family::Arithmetic | Family::Lists | Family::Steps => {
                score_exact(response, &example.answer, self.reward)
            }
        }
    }
}

/// The length of a demonstration in characters (= tokens of the char vocabulary).
#[cfg(test)]
pub(crate) fn demo_lengths(family: Family, knobs: &Knobs, n: usize) -> Vec<(usize, bool)> {
    (0..n as u64)
        .map(|i| {
            let p = generate(family, &mut SplitMix64::derive(11, "len", i), knobs);
            (p.demonstration.chars().count(), p.mistaken)
        })
        .collect()
}

/// The mean of a test's measurements (fulcrum-core's; 0 for none, which no test asserts on).
#[cfg(test)]
pub(crate) fn mean(xs: &[f64]) -> f64 {
    fulcrum_core::stats::mean(xs).unwrap_or(0.0)
}
