//! Scoring many responses at once: the batch scorer behind `fulcrum score FILE` and the
//! dataset tasks' [`crate::Task::score_batch`].
//!
//! Each JSONL line holds `response`, `answer` (a string; a number for math; for code, test code
//! or a list of `{"input", "output"}` stdin/stdout cases) and optionally
//! `verifier` (`math` default, `exact`, `code`) and `entry_point` (code with a
//! `check(candidate)` test). [`parse_requests`] checks every line first, so a malformed line
//! (code tests that cannot fail included: `crate::code::TestSpec::checked`) is an error naming
//! `file:line: field` before anything is scored; [`score_requests`] scores them
//! in input order, running code items concurrently in the sandbox.

use std::path::Path;

use serde_json::Value;

use crate::code::{extract_code, CodeRunner, SpecField, TestSpec};
use crate::error::{Result, TaskError};
use crate::verify::{score_response, RewardMode, Score, Verifier};

/// One line of a score file.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreRequest {
    /// The model's response.
    pub response: String,
    /// The gold answer, or the test code for `code`.
    pub answer: String,
    /// How to check.
    pub verifier: Verifier,
    /// For `code` with `check(candidate)`.
    pub entry_point: Option<String>,
}

/// Parses one line (1-based `line` for errors).
pub fn parse_request(path: &Path, line: usize, text: &str) -> Result<ScoreRequest> {
    let err = |field: &str, problem: String| TaskError::record(path, line, field, problem);
    let v: Value = serde_json::from_str(text).map_err(|e| err("(json)", e.to_string()))?;
    if !v.is_object() {
        return Err(err("(json)", "expected an object".into()));
    }
    let response = match v.get("response") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(err("response", "expected a string".into())),
        None => return Err(err("response", "missing".into())),
    };
    let answer = match v.get("answer") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        // stdin/stdout cases for `code`: a list of {"input", "output"} objects.
        Some(v @ Value::Array(_)) => v.to_string(),
        Some(_) => {
            return Err(err(
                "answer",
                "expected a string, a number, or a list of {input, output} cases".into(),
            ))
        }
        None => return Err(err("answer", "missing".into())),
    };
    let verifier = match v.get("verifier") {
        None | Some(Value::Null) => Verifier::Math,
        Some(Value::String(s)) => s
            .parse()
            .map_err(|e: fulcrum_core::CoreError| err("verifier", e.to_string()))?,
        Some(_) => return Err(err("verifier", "expected a string".into())),
    };
    let entry_point = match v.get("entry_point") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(err("entry_point", "expected a string".into())),
    };
    // Tests that cannot fail would score any program that runs as right: refused, as when a
    // dataset is read.
    if verifier == Verifier::Code {
        TestSpec::checked(&answer, entry_point.as_deref()).map_err(|p| match p.field {
            SpecField::Tests => err("answer", p.problem),
            SpecField::EntryPoint => err("entry_point", p.problem),
        })?;
    }
    Ok(ScoreRequest {
        response,
        answer,
        verifier,
        entry_point,
    })
}

/// Parses every non-blank line of a score file's text.
pub fn parse_requests(path: &Path, text: &str) -> Result<Vec<ScoreRequest>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_request(path, i + 1, l))
        .collect()
}

/// Scores requests in order; `runner` is used for `code` items (which run concurrently).
pub fn score_requests(
    reqs: &[ScoreRequest],
    mode: RewardMode,
    runner: Option<&CodeRunner>,
) -> Vec<Score> {
    let code_idx: Vec<usize> = (0..reqs.len())
        .filter(|&i| reqs[i].verifier == Verifier::Code)
        .collect();
    let mut code_scores = std::collections::HashMap::new();
    if let Some(runner) = runner {
        let jobs: Vec<(String, TestSpec)> = code_idx
            .iter()
            .map(|&i| {
                let r = &reqs[i];
                (
                    extract_code(&r.response),
                    TestSpec::from_answer(&r.answer, r.entry_point.as_deref()),
                )
            })
            .collect();
        for (i, o) in code_idx.iter().zip(runner.run_many(&jobs)) {
            code_scores.insert(*i, Score::from_outcome(mode, o.passed, o.reason));
        }
    }
    reqs.iter()
        .enumerate()
        .map(|(i, r)| match code_scores.remove(&i) {
            Some(s) => s,
            None => score_response(
                r.verifier,
                &r.response,
                &r.answer,
                r.entry_point.as_deref(),
                mode,
                None,
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_lines_name_their_line_and_field() {
        let p = Path::new("in.jsonl");
        let text = "{\"response\": \"\\\\boxed{1}\", \"answer\": \"1\"}\n\n{\"response\": 3, \"answer\": \"1\"}\n";
        let e = parse_requests(p, text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(e, "in.jsonl:3: response: expected a string");
        let e = parse_requests(p, "{\"response\": \"x\"}")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(e, "in.jsonl:1: answer: missing");
        let e = parse_requests(p, "not json")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("in.jsonl:1: (json):"), "{e}");
        let e = parse_requests(
            p,
            "{\"response\": \"x\", \"answer\": \"1\", \"verifier\": \"regex\"}",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            e.starts_with("in.jsonl:1: verifier: unknown verifier"),
            "{e}"
        );
    }

    #[test]
    fn code_lines_whose_tests_cannot_fail_are_refused() {
        let p = Path::new("in.jsonl");
        for (line, want) in [
            (
                r#"{"response": "x", "answer": "", "verifier": "code"}"#,
                "in.jsonl:1: answer: empty",
            ),
            (
                r##"{"response": "x", "answer": "# assert f()", "verifier": "code"}"##,
                "in.jsonl:1: answer: no assertion",
            ),
            (
                r#"{"response": "x", "answer": [], "verifier": "code"}"#,
                "in.jsonl:1: answer: an empty list",
            ),
            (
                r#"{"response": "x", "answer": "assert f()", "verifier": "code", "entry_point": "f"}"#,
                "in.jsonl:1: answer: defines no `check`",
            ),
        ] {
            let e = parse_request(p, 1, line)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.starts_with(want), "{e}");
        }
    }

    #[test]
    fn a_list_answer_becomes_stdio_cases() -> Result<()> {
        let line = r#"{"response": "print(1)", "answer": [{"input": "", "output": "1"}], "verifier": "code"}"#;
        let r = parse_request(Path::new("x"), 1, line)?;
        assert_eq!(
            TestSpec::from_answer(&r.answer, None),
            TestSpec::Stdio(vec![(String::new(), "1".into())])
        );
        Ok(())
    }

    #[test]
    fn scores_come_back_in_input_order() -> Result<()> {
        let text = concat!(
            "{\"response\": \"\\\\boxed{2}\", \"answer\": 2}\n",
            "{\"response\": \"Answer: b\", \"answer\": \"a\", \"verifier\": \"exact\"}\n",
            "{\"response\": \"so 0.5\", \"answer\": \"\\\\frac{1}{2}\"}\n",
        );
        let reqs = parse_requests(Path::new("x"), text)?;
        let s = score_requests(&reqs, RewardMode::PlusMinus, None);
        assert_eq!(
            s.iter().map(|s| s.reward).collect::<Vec<_>>(),
            vec![1.0, -1.0, 1.0]
        );
        Ok(())
    }
}
