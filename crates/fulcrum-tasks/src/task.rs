//! The `Task` interface: prompts with ground truth for a split and seed, scoring, demonstrations.
//!
//! A task is created by name from a [`TaskConfig`] (see [`create_task`]). The trainer asks a task
//! for `examples(split, seed, count)`, samples responses, and calls `score(example, response)`
//! for each; the returned [`Score`] carries the reward and a short reason (what was extracted,
//! which check passed or failed). A failed check is a reward, never an error.

use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TaskError};
use crate::verify::{RewardMode, Verifier};

/// Which part of a task's prompts to draw from. Synthetic tasks keep the two disjoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Prompts for training (SFT and RL).
    Train,
    /// Held-out prompts for evaluation.
    Test,
}

/// One prompt with what is needed to verify a response to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// A stable identifier (file:line for datasets, family-seed-index for synthetic tasks).
    pub id: String,
    /// The prompt text given to the model.
    pub prompt: String,
    /// The ground truth: the answer for `math` and `exact`, the test code for `code`.
    pub answer: String,
    /// A worked response for SFT warm-up, if the task has one.
    pub demonstration: Option<String>,
    /// How a response is checked. For synthetic tasks this says what the answer looks like;
    /// [`Task::score`] is the authority (countdown accepts any expression that reaches the
    /// target, which no plain verifier can check), so score through the task.
    pub verifier: Verifier,
    /// For `code` with a `check(candidate)` test: the function under test.
    pub entry_point: Option<String>,
}

/// The outcome of scoring one response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The reward given to the trainer (in `{0,1}` or `{-1,+1}`, or a pass fraction).
    pub reward: f64,
    /// Whether the response counts as correct (for accuracy metrics).
    pub correct: bool,
    /// A short reason: the extracted answer and the check that passed or failed.
    pub reason: String,
}

impl Score {
    /// A score from a pass/fail outcome under a reward mode.
    pub fn from_outcome(mode: RewardMode, correct: bool, reason: impl Into<String>) -> Self {
        Score {
            reward: mode.reward(if correct { 1.0 } else { 0.0 }),
            correct,
            reason: reason.into(),
        }
    }
}

/// A source of prompts and a judge of responses.
pub trait Task: Send + Sync {
    /// The task's name as written in config (`arithmetic`, `jsonl`, `gsm8k`, ...).
    fn name(&self) -> &str;

    /// `count` examples of `split`, the same for the same seed. Synthetic tasks generate them;
    /// dataset tasks return records in a seeded order (cycling if `count` exceeds the file).
    fn examples(&self, split: Split, seed: u64, count: usize) -> Result<Vec<Example>>;

    /// Scores one response to `example`. Never fails: a problem is a zero reward with a reason.
    fn score(&self, example: &Example, response: &str) -> Score;

    /// Scores many responses, in order. Tasks with code verifiers override this to run the
    /// programs concurrently in the sandbox's bounded pool; the default scores one by one.
    fn score_batch(&self, items: &[(&Example, &str)]) -> Vec<Score> {
        items.iter().map(|(e, r)| self.score(e, r)).collect()
    }
}

/// The names [`create_task`] knows, besides the benchmark names of [`crate::data::registry`].
pub const TASK_NAMES: [&str; 5] = ["arithmetic", "countdown", "lists", "steps", "jsonl"];

/// How to build a task: its name plus the knobs that apply to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskConfig {
    /// A synthetic family (`arithmetic`, `countdown`, `lists`, `steps`), `jsonl`, or a
    /// benchmark name (`gsm8k`, `math500`, ...).
    pub name: String,
    /// Synthetic tasks: 1 (easiest) to 10.
    pub difficulty: u32,
    /// Synthetic tasks: scales how much working the demonstrations write (0 = answer only,
    /// 1 = normal, 2 = verbose).
    pub length: f64,
    /// Synthetic tasks: probability that a demonstration carries an injected mistake.
    pub mistake_rate: f64,
    /// Synthetic tasks: fraction of demonstrations that restate every working line (`check`
    /// lines), right or wrong alike: within-group length variation without a ± gap.
    pub verbose_rate: f64,
    /// Synthetic tasks: length of a mistaken demonstration's working relative to a right one's
    /// (1 = same, 0.5 = half its lines, 2 = repeated): sets the sign and size of the ± gap.
    pub mistake_length: f64,
    /// `jsonl` (and benchmarks, to override the registry's file): the file to read.
    pub path: Option<PathBuf>,
    /// `{0,1}` (`zero-one`) or `{-1,+1}` (`plus-minus`).
    pub reward: RewardMode,
    /// `jsonl`: a prompt template applied to every record, `{problem}` standing for the
    /// record's prompt (e.g. an instruction to put the answer in `\boxed{}`); `None`: as is.
    pub template: Option<String>,
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            name: "arithmetic".into(),
            difficulty: 3,
            length: 1.0,
            mistake_rate: 0.0,
            verbose_rate: 0.0,
            mistake_length: 1.0,
            path: None,
            reward: RewardMode::ZeroOne,
            template: None,
        }
    }
}

impl FromStr for TaskConfig {
    type Err = TaskError;

    /// The compact spelling used on the command line: `NAME[:key=value,...]`, for example
    /// `countdown:difficulty=4,mistake_rate=0.1` or `jsonl:path=my.jsonl`.
    fn from_str(s: &str) -> Result<Self> {
        let (name, rest) = s.split_once(':').unwrap_or((s, ""));
        let mut cfg = TaskConfig {
            name: name.trim().to_string(),
            ..TaskConfig::default()
        };
        for kv in rest.split(',').filter(|kv| !kv.trim().is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| TaskError::Setting {
                key: kv.to_string(),
                problem: "expected key=value".into(),
            })?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |p: &str| TaskError::Setting {
                key: k.to_string(),
                problem: format!("{p}: {v:?}"),
            };
            match k {
                "difficulty" => cfg.difficulty = v.parse().map_err(|_| bad("not an integer"))?,
                "length" => cfg.length = v.parse().map_err(|_| bad("not a number"))?,
                "mistake_rate" => cfg.mistake_rate = v.parse().map_err(|_| bad("not a number"))?,
                "verbose_rate" => cfg.verbose_rate = v.parse().map_err(|_| bad("not a number"))?,
                "mistake_length" => {
                    cfg.mistake_length = v.parse().map_err(|_| bad("not a number"))?
                }
                "path" => cfg.path = Some(PathBuf::from(v)),
                "reward" => cfg.reward = v.parse()?,
                _ => {
                    return Err(TaskError::Setting {
                        key: k.to_string(),
                        problem: "unknown key (valid: difficulty, length, mistake_rate, \
                                  verbose_rate, mistake_length, path, reward)"
                            .into(),
                    })
                }
            }
        }
        Ok(cfg)
    }
}

impl TaskConfig {
    /// Checks the ranges of the knobs.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, problem: String| {
            Err(TaskError::Setting {
                key: key.into(),
                problem,
            })
        };
        if !(1..=10).contains(&self.difficulty) {
            return bad(
                "difficulty",
                format!("{} is outside 1..=10", self.difficulty),
            );
        }
        if !(0.0..=4.0).contains(&self.length) {
            return bad("length", format!("{} is outside 0..=4", self.length));
        }
        if !(0.0..=1.0).contains(&self.mistake_rate) {
            return bad(
                "mistake_rate",
                format!("{} is outside 0..=1", self.mistake_rate),
            );
        }
        if !(0.0..=1.0).contains(&self.verbose_rate) {
            return bad(
                "verbose_rate",
                format!("{} is outside 0..=1", self.verbose_rate),
            );
        }
        if !(0.0..=4.0).contains(&self.mistake_length) {
            return bad(
                "mistake_length",
                format!("{} is outside 0..=4", self.mistake_length),
            );
        }
        if let Some(t) = &self.template {
            if !t.contains("{problem}") {
                return bad("template", format!("{t:?} has no {{problem}} placeholder"));
            }
        }
        Ok(())
    }
}

/// Creates a task by name (see [`TASK_NAMES`] and the benchmark registry).
pub fn create_task(cfg: &TaskConfig) -> Result<Box<dyn Task>> {
    use crate::synthetic::{self, Family};
    cfg.validate()?;
    if let Ok(family) = cfg.name.parse::<Family>() {
        return Ok(Box::new(synthetic::SyntheticTask::new(family, cfg)));
    }
    if cfg.name == "jsonl" {
        let path = cfg.path.clone().ok_or_else(|| TaskError::Setting {
            key: "path".into(),
            problem: "the jsonl task needs a path".into(),
        })?;
        let task = crate::jsonl_task::JsonlTask::load(&path, cfg.reward)?;
        return Ok(Box::new(match &cfg.template {
            Some(t) => task.with_template(t),
            None => task,
        }));
    }
    if let Some(bench) = crate::data::registry::Benchmark::find(&cfg.name) {
        return Ok(Box::new(crate::data::registry::BenchmarkTask::load(
            bench,
            cfg.path.as_deref(),
            cfg.reward,
        )?));
    }
    let mut valid: Vec<&str> = TASK_NAMES.to_vec();
    valid.extend(crate::data::registry::BENCHMARK_NAMES);
    Err(TaskError::UnknownName {
        kind: "task",
        name: cfg.name.clone(),
        valid: valid.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_spelling_sets_knobs() -> Result<()> {
        let cfg: TaskConfig =
            "countdown:difficulty=4,mistake_rate=0.25,reward=plus-minus".parse()?;
        assert_eq!(cfg.name, "countdown");
        assert_eq!(cfg.difficulty, 4);
        assert_eq!(cfg.mistake_rate, 0.25);
        assert_eq!(cfg.reward, RewardMode::PlusMinus);
        Ok(())
    }

    #[test]
    fn unknown_key_is_an_error() {
        assert!("lists:colour=red".parse::<TaskConfig>().is_err());
    }

    #[test]
    fn unknown_task_name_lists_valid_names() {
        let cfg = TaskConfig {
            name: "arithmatic".into(),
            ..TaskConfig::default()
        };
        let err = create_task(&cfg)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("arithmetic") && err.contains("gsm8k"), "{err}");
    }

    #[test]
    fn out_of_range_difficulty_is_rejected() {
        let cfg = TaskConfig {
            difficulty: 11,
            ..TaskConfig::default()
        };
        assert!(create_task(&cfg).is_err());
    }
}
