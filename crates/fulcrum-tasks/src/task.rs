//! The `Task` interface: prompts with ground truth for a split and seed, scoring, demonstrations.
//!
//! Only the interface lives here; [`crate::create`] builds a task by name and is the one place
//! that knows every implementation. The trainer asks a task
//! for `examples(split, seed, count)`, samples responses, and calls `score(example, response)`
//! for each; the returned [`Score`] carries the reward and a short reason (what was extracted,
//! which check passed or failed). A failed check is a reward, never an error.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::verify::{Score, Verifier};

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

/// A source of prompts and a judge of responses.
pub trait Task: Send + Sync {
    /// The task's name as written in config (`arithmetic`, `jsonl`, `gsm8k`, ...).
    fn name(&self) -> &str;

    /// `count` examples of `split`, the same for the same seed. Synthetic tasks generate them;
    /// dataset tasks return records in a seeded order (cycling if `count` exceeds the file).
    fn examples(&self, split: Split, seed: u64, count: usize) -> Result<Vec<Example>>;

    /// How many distinct problems the task's test split holds, for a finite set (a benchmark or
    /// a data file: the whole file); `None` for generated tasks, which have no end.
    fn problems_total(&self) -> Option<usize> {
        None
    }

    /// Scores one response to `example`. Never fails: a problem is a zero reward with a reason.
    fn score(&self, example: &Example, response: &str) -> Score;

    /// The score of a response that could not be judged (its verifier crashed): a wrong
    /// answer's reward in the task's reward mode, never more, so that breaking the verifier
    /// cannot pay. The default is reward 0; tasks with a reward mode give theirs.
    fn unjudged(&self, reason: String) -> Score {
        Score {
            reward: 0.0,
            correct: false,
            reason,
        }
    }

    /// Scores many responses, in order. Tasks with code verifiers override this to run the
    /// programs concurrently in the sandbox's bounded pool; the default scores one by one.
    fn score_batch(&self, items: &[(&Example, &str)]) -> Vec<Score> {
        items.iter().map(|(e, r)| self.score(e, r)).collect()
    }

    /// Checks the text a model is given (every prompt with its template, and every
    /// demonstration when `demonstrations`: the SFT warm-up encodes them) with `unknown`, which
    /// returns the first character the model cannot encode: an error names the file, the line,
    /// the field and the character, before a run starts (a tokenizer error mid-run could name
    /// none of them). Tasks read from files check all of theirs; generated tasks write only the
    /// built-in vocabulary ([`crate::vocab`]) and have nothing to check.
    fn check_text(
        &self,
        unknown: &dyn Fn(&str) -> Option<char>,
        demonstrations: bool,
    ) -> Result<()> {
        let _ = (unknown, demonstrations);
        Ok(())
    }
}

/// How [`Task::check_text`] describes a character the model cannot encode.
pub(crate) fn unknown_char_problem(c: char) -> String {
    format!(
        "the character {c:?} (U+{:04X}) is not in the model's vocabulary",
        u32::from(c)
    )
}
