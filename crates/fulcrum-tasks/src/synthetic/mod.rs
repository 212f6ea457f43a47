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
//! Two more knobs, [`Shape`] (`shape.rs`), set the within-group length variation
//! (`verbose_rate`) and the ± length gap (`mistake_length`) directly on any family.
//!
//! All text uses only the characters of [`crate::vocab::CHARS`]. Every response ends with an
//! `Answer: ...` line. A demonstration is the worked response the task would write; with
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

pub use shape::Shape;

use std::str::FromStr;

use crate::error::{Result, TaskError};
use crate::rng::{hash_str, Rng};
use crate::task::{Example, Score, Split, Task, TaskConfig};
use crate::verify::{score_exact, RewardMode, Verifier};

/// The synthetic families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Multi-digit addition with a column-by-column scratchpad.
    Arithmetic,
    /// Reach a target from given numbers; demonstrations show the search.
    Countdown,
    /// Sort, reverse or dedupe a list.
    Lists,
    /// Write every step of a Collatz trajectory.
    Steps,
}

impl Family {
    /// Every family, in one place.
    pub const ALL: [Family; 4] = [
        Family::Arithmetic,
        Family::Countdown,
        Family::Lists,
        Family::Steps,
    ];

    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            Family::Arithmetic => "arithmetic",
            Family::Countdown => "countdown",
            Family::Lists => "lists",
            Family::Steps => "steps",
        }
    }
}

impl FromStr for Family {
    type Err = TaskError;
    fn from_str(s: &str) -> Result<Self> {
        Family::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| TaskError::UnknownName {
                kind: "synthetic family",
                name: s.to_string(),
                valid: Family::ALL.map(Family::name).join(", "),
            })
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
pub fn generate(family: Family, rng: &mut Rng, knobs: &Knobs) -> Problem {
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
    /// The task for a family with the knobs of `cfg` (already validated).
    pub fn new(family: Family, cfg: &TaskConfig) -> Self {
        SyntheticTask {
            family,
            knobs: Knobs {
                difficulty: cfg.difficulty,
                length: cfg.length,
                mistake_rate: cfg.mistake_rate,
            },
            shape: Shape {
                verbose_rate: cfg.verbose_rate,
                mistake_length: cfg.mistake_length,
            },
            reward: cfg.reward,
        }
    }

    /// The family.
    pub fn family(&self) -> Family {
        self.family
    }
}

impl Task for SyntheticTask {
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
            let mut rng = Rng::derive(seed, self.family.name(), i);
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
            _ => score_exact(response, &example.answer, self.reward),
        }
    }
}

/// The length of a demonstration in characters (= tokens of the char vocabulary).
#[cfg(test)]
pub(crate) fn demo_lengths(family: Family, knobs: &Knobs, n: usize) -> Vec<(usize, bool)> {
    (0..n as u64)
        .map(|i| {
            let p = generate(family, &mut Rng::derive(11, "len", i), knobs);
            (p.demonstration.chars().count(), p.mistaken)
        })
        .collect()
}

#[cfg(test)]
pub(crate) fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::create_task;
    use crate::vocab::CharVocab;

    fn cfg(name: &str, mistake_rate: f64) -> TaskConfig {
        TaskConfig {
            name: name.into(),
            difficulty: 4,
            mistake_rate,
            ..TaskConfig::default()
        }
    }

    #[test]
    fn same_seed_gives_same_examples_and_other_seed_differs() -> Result<()> {
        for f in Family::ALL {
            let t = create_task(&cfg(f.name(), 0.2))?;
            let a = t.examples(Split::Train, 5, 20)?;
            assert_eq!(a, t.examples(Split::Train, 5, 20)?);
            assert_ne!(a, t.examples(Split::Train, 6, 20)?, "{}", f.name());
        }
        Ok(())
    }

    #[test]
    fn train_and_test_prompts_never_overlap() -> Result<()> {
        for f in Family::ALL {
            let t = create_task(&cfg(f.name(), 0.0))?;
            let train: std::collections::HashSet<String> = t
                .examples(Split::Train, 1, 300)?
                .into_iter()
                .map(|e| e.prompt)
                .collect();
            for e in t.examples(Split::Test, 1, 30)? {
                assert!(!train.contains(&e.prompt), "{}: {}", f.name(), e.prompt);
            }
        }
        Ok(())
    }

    #[test]
    fn clean_demonstrations_score_full_reward() -> Result<()> {
        for f in Family::ALL {
            let t = create_task(&cfg(f.name(), 0.0))?;
            for e in t.examples(Split::Train, 3, 50)? {
                let demo = e.demonstration.clone().unwrap_or_default();
                let s = t.score(&e, &demo);
                assert!(s.correct, "{}: {} -> {}", f.name(), demo, s.reason);
                assert!(!t.score(&e, "Answer: 0 0").correct || e.answer == "0 0");
            }
        }
        Ok(())
    }

    #[test]
    fn mistake_rate_sets_fraction_of_wrong_demonstrations() -> Result<()> {
        for f in Family::ALL {
            let t = create_task(&cfg(f.name(), 0.3))?;
            let ex = t.examples(Split::Train, 9, 400)?;
            let wrong = ex
                .iter()
                .filter(|e| !t.score(e, e.demonstration.as_deref().unwrap_or("")).correct)
                .count() as f64
                / ex.len() as f64;
            assert!((0.2..0.4).contains(&wrong), "{}: {wrong}", f.name());
        }
        Ok(())
    }

    #[test]
    fn all_text_fits_the_char_vocabulary() -> Result<()> {
        let v = CharVocab;
        for f in Family::ALL {
            for d in [1, 5, 10] {
                let t = create_task(&TaskConfig {
                    difficulty: d,
                    length: 2.0,
                    ..cfg(f.name(), 0.5)
                })?;
                for e in t.examples(Split::Train, 2, 30)? {
                    let demo = e.demonstration.unwrap_or_default();
                    assert!(
                        v.covers(&e.prompt) && v.covers(&demo) && v.covers(&e.answer),
                        "{demo}"
                    );
                }
            }
        }
        Ok(())
    }

    #[test]
    fn length_zero_gives_answer_only_demonstrations() -> Result<()> {
        for f in Family::ALL {
            let t = create_task(&TaskConfig {
                length: 0.0,
                ..cfg(f.name(), 0.0)
            })?;
            for e in t.examples(Split::Train, 4, 10)? {
                let demo = e.demonstration.unwrap_or_default();
                assert!(demo.starts_with("Answer:"), "{}: {demo}", f.name());
            }
        }
        Ok(())
    }
}
