//! Record formats: turning a raw JSON record into an [`Example`].
//!
//! | format | fields | answer |
//! |---|---|---|
//! | `generic` | `prompt`, `answer`, optional `demonstration`, `verifier`, `entry_point` | `answer` |
//! | `verl` (DAPO-Math-17k, verl parquet) | `prompt` = list of `{role, content}`, `reward_model.ground_truth` | ground truth |
//! | `polaris` | `problem`, `answer` (string or number or list: first) | `answer` |
//! | `math` (MATH, Minerva) | `problem`, `solution` | last `\boxed{}` of `solution` |
//! | `gsm8k` | `question`, `answer` | text after `####` (thousands separators kept for the checker) |
//! | `qa` (AMC, SvS) | `question` or `problem`, `answer` or `ref_answer` | the answer, whole floats as integers |
//! | `olympiad` | `question`, `final_answer` (list) | the answers joined with `, ` |
//! | `humaneval` | `prompt`, `test`, `entry_point` | code verifier with `check(candidate)` |
//! | `mbpp` (sanitized or full) | `prompt` or `text`, `test_list`, `test_imports` / `test_setup_code` | code verifier with asserts |
//! | `leetcode` | `problem`, `tests.functional` | code verifier, entry point `Solution().<method>` |
//! | `codeforces` | `problem`, `tests` = list of `{input, output}` | code verifier, stdin/stdout cases (the answer is that list as JSON) |
//!
//! `auto` picks a format from the fields of each record. A record without a usable prompt or
//! answer is an error naming file, line and field; it never becomes an empty example. A code
//! record is refused when its tests could not fail ([`crate::code::TestSpec::checked`]: no
//! assertion, no `check` for its entry point, no stdin/stdout case, ...), since they would
//! give reward 1 to any program that runs; the error names the field the tests came from.

use std::path::Path;

use serde_json::Value;

use crate::code::{SpecField, TestSpec};
use crate::error::{Result, TaskError};
use crate::math::last_boxed;
use crate::task::Example;
use crate::verify::Verifier;

fulcrum_core::closed_set! {
    /// The record formats (see the module table).
    pub enum Format("format") {
        /// Detect from the fields of each record.
        Auto = "auto",
        /// `prompt`, `answer`, ...
        Generic = "generic",
        /// verl / DAPO parquet layout.
        Verl = "verl",
        /// `problem`, `answer`.
        Polaris = "polaris",
        /// `problem`, `solution` with a boxed answer.
        Math = "math",
        /// `question`, `answer` with `####`.
        Gsm8k = "gsm8k",
        /// `question`/`problem`, `answer`.
        Qa = "qa",
        /// OlympiadBench.
        Olympiad = "olympiad",
        /// HumanEval.
        HumanEval = "humaneval",
        /// MBPP sanitized.
        Mbpp = "mbpp",
        /// DeepCoder's LeetCode set.
        LeetCode = "leetcode",
        /// DeepCoder's Codeforces set (stdin/stdout cases).
        Codeforces = "codeforces",
    }
}

impl Format {
    /// The format a record looks like.
    pub fn detect(v: &Value) -> Format {
        let has = |k: &str| v.get(k).is_some();
        if has("reward_model") {
            Format::Verl
        } else if has("entry_point") && has("test") && has("task_id") {
            Format::HumanEval
        } else if has("test_list") {
            Format::Mbpp
        } else if v.pointer("/tests/functional").is_some() {
            Format::LeetCode
        } else if v.get("tests").is_some_and(Value::is_array) {
            Format::Codeforces
        } else if has("final_answer") {
            Format::Olympiad
        } else if has("prompt") && has("answer") {
            Format::Generic
        } else if has("problem") && has("answer") {
            Format::Polaris
        } else if has("question") && has("ref_answer") {
            Format::Qa
        } else if has("question") && has("answer") {
            let hashes = v
                .get("answer")
                .and_then(Value::as_str)
                .is_some_and(|a| a.contains("####"));
            if hashes {
                Format::Gsm8k
            } else {
                Format::Qa
            }
        } else if has("problem") && has("solution") {
            Format::Math
        } else {
            Format::Generic
        }
    }
}

/// Field access that names file, line and field in its errors.
struct Fields<'a> {
    path: &'a Path,
    line: usize,
    v: &'a Value,
}

impl Fields<'_> {
    fn err(&self, field: &str, problem: impl Into<String>) -> TaskError {
        TaskError::record(self.path, self.line, field, problem)
    }

    fn get(&self, pointer: &str) -> Result<&Value> {
        let p = if pointer.starts_with('/') {
            pointer.to_string()
        } else {
            format!("/{pointer}")
        };
        match self.v.pointer(&p) {
            None | Some(Value::Null) => Err(self.err(pointer, "missing")),
            Some(x) => Ok(x),
        }
    }

    /// A non-empty string field.
    fn text(&self, field: &str) -> Result<String> {
        match self.get(field)? {
            Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
            Value::String(_) => Err(self.err(field, "empty")),
            other => Err(self.err(field, format!("expected a string, got {}", kind(other)))),
        }
    }

    /// An answer: a string, a number (whole floats written as integers), or a list (first).
    fn answer(&self, field: &str) -> Result<String> {
        let s = match self.get(field)? {
            Value::String(s) => s.trim().to_string(),
            Value::Number(n) => match n.as_f64() {
                Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{}", x as i64),
                _ => n.to_string(),
            },
            Value::Array(items) => match items.first() {
                Some(Value::String(s)) => s.trim().to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => return Err(self.err(field, "expected a non-empty list of answers")),
            },
            other => {
                return Err(self.err(field, format!("expected an answer, got {}", kind(other))))
            }
        };
        if s.is_empty() {
            return Err(self.err(field, "empty"));
        }
        Ok(s)
    }

    fn optional_text(&self, field: &str) -> Option<String> {
        self.v
            .get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .map(str::to_string)
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The id a record gives itself, so that samples and reports join with the dataset and with
/// other tools' outputs: `id`, `unique_id` (MATH-500), `problem_id`, `task_id`, or verl's
/// `extra_info.index`, a non-empty string or an integer. None: the caller names the record by
/// file and line instead.
fn own_id(v: &Value) -> Option<String> {
    [
        "/id",
        "/unique_id",
        "/problem_id",
        "/task_id",
        "/extra_info/index",
    ]
    .iter()
    .find_map(|p| match v.pointer(p)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        _ => None,
    })
}

/// Converts one raw record; a code record's tests are checked ([`check_code`]).
pub fn to_example(path: &Path, line: usize, v: &Value, format: Format) -> Result<Example> {
    let format = if format == Format::Auto {
        Format::detect(v)
    } else {
        format
    };
    let example = convert(path, line, v, format)?;
    check_code(path, line, format, &example)?;
    Ok(example)
}

/// The fields a format takes a code item's tests and entry point from, for errors.
fn code_fields(format: Format) -> (&'static str, &'static str) {
    match format {
        Format::HumanEval => ("test", "entry_point"),
        Format::Mbpp => ("test_list", "entry_point"),
        Format::LeetCode => ("tests/functional", "problem"),
        Format::Codeforces => ("tests", "entry_point"),
        _ => ("answer", "entry_point"),
    }
}

/// A code example must carry tests that can fail ([`TestSpec::checked`]); the error names file,
/// line and the field the tests (or the entry point) came from.
pub fn check_code(path: &Path, line: usize, format: Format, e: &Example) -> Result<()> {
    if e.verifier != Verifier::Code {
        return Ok(());
    }
    TestSpec::checked(&e.answer, e.entry_point.as_deref()).map_err(|p| {
        let (tests, entry) = code_fields(format);
        let field = match p.field {
            SpecField::Tests => tests,
            SpecField::EntryPoint => entry,
        };
        TaskError::record(path, line, field, p.problem)
    })?;
    Ok(())
}

fn convert(path: &Path, line: usize, v: &Value, format: Format) -> Result<Example> {
    let f = Fields { path, line, v };
    let id = own_id(v).unwrap_or_else(|| {
        format!(
            "{}:{line}",
            path.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        )
    });
    let math = |prompt: String, answer: String| Example {
        id: id.clone(),
        prompt,
        answer,
        demonstration: None,
        verifier: Verifier::Math,
        entry_point: None,
    };
    Ok(match format {
        Format::Auto | Format::Generic => {
            let verifier = match f.optional_text("verifier") {
                Some(v) => v
                    .parse()
                    .map_err(|e: fulcrum_core::CoreError| f.err("verifier", e.to_string()))?,
                None => Verifier::Math,
            };
            let entry_point = f.optional_text("entry_point");
            if entry_point.is_some() && verifier != Verifier::Code {
                return Err(f.err(
                    "entry_point",
                    format!(
                        "given, but the verifier is `{verifier}`: an entry point is for code \
                         tests (add \"verifier\": \"code\", or drop it)"
                    ),
                ));
            }
            // Code tests are text (test code, or the JSON of stdin/stdout cases): a list or a
            // number is not silently cut to its first item.
            let answer = match (verifier, v.get("answer")) {
                (Verifier::Code, Some(Value::Array(cases))) => {
                    Value::Array(cases.clone()).to_string()
                }
                (Verifier::Code, _) => f.text("answer")?,
                _ => f.answer("answer")?,
            };
            Example {
                id,
                prompt: f.text("prompt")?,
                answer,
                demonstration: f.optional_text("demonstration"),
                verifier,
                entry_point,
            }
        }
        Format::Verl => {
            let messages = f.get("prompt")?;
            let content = match messages {
                Value::Array(ms) => ms
                    .iter()
                    .rev()
                    .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                    .or(ms.last())
                    .and_then(|m| m.get("content"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                Value::String(s) => Some(s.clone()),
                _ => None,
            };
            let prompt = content
                .filter(|c| !c.trim().is_empty())
                .ok_or_else(|| f.err("prompt", "no user message with content"))?;
            math(prompt, f.answer("reward_model/ground_truth")?)
        }
        Format::Polaris => math(f.text("problem")?, f.answer("answer")?),
        Format::Math => {
            let solution = f.text("solution")?;
            let answer = match f.optional_text("answer") {
                Some(a) => a,
                None => last_boxed(&solution)
                    .map(str::to_string)
                    .filter(|a| !a.trim().is_empty())
                    .ok_or_else(|| f.err("solution", "no \\boxed{} answer"))?,
            };
            math(f.text("problem")?, answer)
        }
        Format::Gsm8k => {
            let full = f.text("answer")?;
            let answer = full
                .rsplit_once("####")
                .map(|(_, a)| a.trim().to_string())
                .filter(|a| !a.is_empty())
                .ok_or_else(|| f.err("answer", "no #### final answer"))?;
            let mut ex = math(f.text("question")?, answer);
            ex.demonstration = Some(full);
            ex
        }
        Format::Qa => {
            let prompt = f.text("question").or_else(|_| f.text("problem"))?;
            let answer = if v.get("ref_answer").is_some() && v.get("answer").is_none() {
                f.answer("ref_answer")?
            } else {
                f.answer("answer")?
            };
            math(prompt, answer)
        }
        Format::Olympiad => {
            let answers = match f.get("final_answer")? {
                Value::Array(a) if !a.is_empty() => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(|s| s.trim().trim_matches('$').trim().to_string())
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| f.err("final_answer", "expected a list of strings"))?,
                _ => return Err(f.err("final_answer", "expected a non-empty list")),
            };
            math(f.text("question")?, answers.join(", "))
        }
        Format::HumanEval => Example {
            id,
            prompt: f.text("prompt")?,
            answer: f.text("test")?,
            demonstration: f.optional_text("canonical_solution"),
            verifier: Verifier::Code,
            entry_point: Some(f.text("entry_point")?),
        },
        Format::Mbpp => {
            let tests = match f.get("test_list")? {
                Value::Array(t) if !t.is_empty() => t
                    .iter()
                    .map(|x| x.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| f.err("test_list", "expected a list of strings"))?,
                _ => return Err(f.err("test_list", "expected a non-empty list")),
            };
            let imports: Vec<String> = v
                .get("test_imports")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let mut test = imports.join("\n");
            test.push('\n');
            if let Some(setup) = f.optional_text("test_setup_code") {
                test.push_str(&setup);
                test.push('\n');
            }
            test.push_str(&tests.join("\n"));
            let text = if v.get("prompt").is_some() {
                f.text("prompt")?
            } else {
                f.text("text")?
            };
            Example {
                id: v.get("task_id").map_or(id, |t| format!("mbpp/{t}")),
                // MBPP's usual prompt shows the test asserts: the statement alone does not say
                // what the function is called or how it is called.
                prompt: format!(
                    "{text}\nYour code should pass these tests:\n{}",
                    tests.join("\n")
                ),
                answer: test,
                demonstration: f.optional_text("code"),
                verifier: Verifier::Code,
                entry_point: None,
            }
        }
        Format::LeetCode => {
            let test = f.text("tests/functional")?;
            let problem = f.text("problem")?;
            let method = leetcode_method(&problem)
                .ok_or_else(|| f.err("problem", "no `class Solution` method found"))?;
            Example {
                id,
                prompt: problem,
                answer: test,
                demonstration: f.optional_text("solutions"),
                verifier: Verifier::Code,
                entry_point: Some(format!("Solution().{method}")),
            }
        }
        Format::Codeforces => {
            let cases = match f.get("tests")? {
                Value::Array(t) if !t.is_empty() => t,
                _ => return Err(f.err("tests", "expected a non-empty list")),
            };
            for (i, c) in cases.iter().enumerate() {
                let ok = c.get("input").is_some_and(Value::is_string)
                    && c.get("output").is_some_and(Value::is_string);
                if !ok {
                    return Err(f.err(
                        &format!("tests/{i}"),
                        "expected {\"input\": string, \"output\": string}",
                    ));
                }
            }
            Example {
                id,
                prompt: f.text("problem")?,
                answer: Value::Array(cases.clone()).to_string(),
                demonstration: None,
                verifier: Verifier::Code,
                entry_point: None,
            }
        }
    })
}

/// The first method name defined in the `class Solution:` starter code of a LeetCode prompt.
fn leetcode_method(problem: &str) -> Option<String> {
    let class = problem.find("class Solution")?;
    let def = problem[class..].find("def ")? + class + 4;
    let name: String = problem[def..]
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests;
