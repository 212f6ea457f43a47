//! Verifiers: the closed set of ways a response is checked, and the reward modes.
//!
//! `math` uses the answer checker in [`crate::math`], `exact` compares the final `Answer:` line
//! (or the whole response) with the answer after collapsing whitespace, and `code` runs the
//! response's Python against test code in the sandbox of [`crate::code`]. [`score_response`]
//! is the one entry point for a single response; [`score_requests`] scores a batch in order,
//! running code items concurrently (`fulcrum score`, the JSONL and benchmark tasks).

mod batch;

pub use batch::{parse_request, parse_requests, score_requests, ScoreRequest};

use crate::code::{CodeRunner, TestSpec};
use crate::math::{self, MathOptions};
use serde::{Deserialize, Serialize};

fulcrum_core::closed_set! {
    /// How a response is checked against its answer.
    #[derive(Default)]
    pub enum Verifier("verifier") {
        /// Extract the final answer and compare it mathematically ([`crate::math`]).
        #[default]
        Math = "math",
        /// Compare the final `Answer:` line (or the whole response) as text.
        Exact = "exact",
        /// Run the response's Python code, then the answer as test code, in the sandbox.
        Code = "code",
    }
}

fulcrum_core::closed_set! {
    /// The reward scale: `{0,1}` (default) or `{-1,+1}` as verl's math_dapo gives.
    #[derive(Default)]
    pub enum RewardMode("reward mode") {
        /// Wrong 0, right 1; a pass fraction stays as it is.
        #[default]
        ZeroOne = "zero-one",
        /// Wrong -1, right +1; a pass fraction f becomes 2f - 1.
        PlusMinus = "plus-minus",
    }
}

impl RewardMode {
    /// Maps a success fraction in `[0,1]` to the reward.
    pub fn reward(self, fraction: f64) -> f64 {
        match self {
            RewardMode::ZeroOne => fraction,
            RewardMode::PlusMinus => 2.0 * fraction - 1.0,
        }
    }
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

/// The text after the last `Answer:` marker (to the end of that line), if any.
pub fn answer_line(response: &str) -> Option<&str> {
    let at = response.rfind("Answer:")?;
    let rest = &response[at + "Answer:".len()..];
    Some(rest.lines().next().unwrap_or("").trim())
}

/// Collapses runs of whitespace to one space and trims.
pub fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `exact` verifier: the `Answer:` line (or the whole response) equals the answer.
pub fn score_exact(response: &str, answer: &str, mode: RewardMode) -> Score {
    let got = collapse_ws(answer_line(response).unwrap_or(response));
    let want = collapse_ws(answer);
    let ok = got == want;
    let shown: String = got.chars().take(80).collect();
    Score::from_outcome(
        mode,
        ok,
        if ok {
            format!("exact match \"{shown}\"")
        } else {
            format!(
                "\"{shown}\" differs from \"{}\"",
                want.chars().take(80).collect::<String>()
            )
        },
    )
}

/// Scores one response with any verifier. `runner` is needed only for `code` (without one,
/// a code response scores 0 with a reason saying so).
pub fn score_response(
    verifier: Verifier,
    response: &str,
    answer: &str,
    entry_point: Option<&str>,
    mode: RewardMode,
    runner: Option<&CodeRunner>,
) -> Score {
    match verifier {
        Verifier::Math => {
            let r = math::check(response, answer, &MathOptions::default());
            Score::from_outcome(mode, r.equivalent, r.reason)
        }
        Verifier::Exact => score_exact(response, answer, mode),
        Verifier::Code => {
            let Some(runner) = runner else {
                return Score::from_outcome(mode, false, "no code runner available");
            };
            let spec = TestSpec::from_answer(answer, entry_point);
            let outcome = runner.run_response(response, &spec);
            Score::from_outcome(mode, outcome.passed, outcome.reason)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_uses_last_answer_line() {
        let s = score_exact(
            "work\nAnswer: 1 2\nAnswer: 3  4\n",
            "3 4",
            RewardMode::ZeroOne,
        );
        assert!(s.correct);
        assert_eq!(s.reward, 1.0);
    }

    #[test]
    fn exact_without_marker_compares_whole_response() {
        assert!(score_exact(" hello  world ", "hello world", RewardMode::ZeroOne).correct);
        let s = score_exact("Answer: 5", "6", RewardMode::PlusMinus);
        assert!(!s.correct);
        assert_eq!(s.reward, -1.0);
    }

    #[test]
    fn names_round_trip() -> crate::Result<()> {
        for v in Verifier::ALL {
            assert_eq!(v.name().parse::<Verifier>()?, *v);
        }
        assert!("maths".parse::<Verifier>().is_err());
        Ok(())
    }
}
