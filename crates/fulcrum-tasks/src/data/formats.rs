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
//! answer is an error naming file, line and field; it never becomes an empty example.

use std::path::Path;

use serde_json::Value;

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

/// Converts one raw record.
pub fn to_example(path: &Path, line: usize, v: &Value, format: Format) -> Result<Example> {
    let f = Fields { path, line, v };
    let format = if format == Format::Auto {
        Format::detect(v)
    } else {
        format
    };
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
            Example {
                id,
                prompt: f.text("prompt")?,
                answer: f.answer("answer")?,
                demonstration: f.optional_text("demonstration"),
                verifier,
                entry_point: f.optional_text("entry_point"),
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
mod tests {
    use super::*;
    use serde_json::json;

    fn ex(v: Value) -> Result<Example> {
        to_example(Path::new("f.jsonl"), 7, &v, Format::Auto)
    }

    #[test]
    fn mbpp_prompts_show_the_test_asserts() -> Result<()> {
        let e = ex(
            json!({"task_id": 2, "prompt": "Write a function to add two numbers.",
                          "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"]}),
        )?;
        assert_eq!(
            e.prompt,
            "Write a function to add two numbers.\nYour code should pass these tests:\n\
             assert add(1, 2) == 3\nassert add(0, 0) == 0"
        );
        Ok(())
    }

    #[test]
    fn formats_are_detected_and_answers_found() -> Result<()> {
        let e = ex(
            json!({"prompt": [{"role": "user", "content": "Q?"}], "reward_model": {"ground_truth": "34"}}),
        )?;
        assert_eq!((e.prompt.as_str(), e.answer.as_str()), ("Q?", "34"));
        let e = ex(json!({"problem": "P", "solution": "so \\boxed{\\frac{1}{2}}."}))?;
        assert_eq!(e.answer, "\\frac{1}{2}");
        let e = ex(json!({"question": "Q", "answer": "work\n#### 1,000"}))?;
        assert_eq!(e.answer, "1,000");
        let e = ex(json!({"question": "Q", "answer": 27.0}))?;
        assert_eq!(e.answer, "27");
        let e = ex(json!({"question": "Q", "final_answer": ["$69$", "$84$"]}))?;
        assert_eq!(e.answer, "69, 84");
        let e = ex(
            json!({"prompt": "p", "answer": "assert f()", "verifier": "code", "entry_point": "f"}),
        )?;
        assert_eq!(
            (e.verifier, e.entry_point.as_deref()),
            (Verifier::Code, Some("f"))
        );
        Ok(())
    }

    #[test]
    fn bad_rows_are_errors_naming_line_and_field() {
        for (v, field) in [
            (json!({"prompt": "", "answer": "1"}), "prompt"),
            (json!({"prompt": "p"}), "answer"),
            (json!({"prompt": "p", "answer": null}), "answer"),
            (
                json!({"prompt": "p", "answer": "1", "verifier": "magic"}),
                "verifier",
            ),
            (json!({"problem": "p", "solution": "no box"}), "solution"),
            (
                json!({"question": "q", "answer": "no hashes ####"}),
                "answer",
            ),
            (
                json!({"prompt": [], "reward_model": {"ground_truth": "1"}}),
                "prompt",
            ),
        ] {
            let e = ex(v).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.starts_with(&format!("f.jsonl:7: {field}")), "{e}");
        }
    }

    #[test]
    fn codeforces_tests_become_stdio_cases_and_svs_uses_ref_answer() -> Result<()> {
        let e = ex(json!({"problem": "add", "tests": [{"input": "1 2\n", "output": "3\n"}]}))?;
        assert_eq!(e.verifier, Verifier::Code);
        assert_eq!(
            crate::code::TestSpec::from_answer(&e.answer, None),
            crate::code::TestSpec::Stdio(vec![("1 2\n".into(), "3\n".into())])
        );
        let e = ex(json!({"question": "Q", "ref_answer": "216", "data_source": "MATH-500"}))?;
        assert_eq!(e.answer, "216");
        let bad = ex(json!({"problem": "p", "tests": [{"input": 1}]}));
        assert!(bad
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .contains("tests/0"));
        Ok(())
    }

    #[test]
    fn records_keep_their_own_ids_and_fall_back_to_file_and_line() -> Result<()> {
        let id = |v: Value| ex(v).map(|e| e.id);
        assert_eq!(
            id(json!({"id": "mul-8-45", "prompt": "p", "answer": "1"}))?,
            "mul-8-45"
        );
        assert_eq!(
            id(
                json!({"unique_id": "test/algebra/1.json", "problem": "p", "solution": "\\boxed{2}"})
            )?,
            "test/algebra/1.json"
        );
        assert_eq!(
            id(json!({"prompt": [{"role": "user", "content": "Q"}],
                      "reward_model": {"ground_truth": "3"}, "extra_info": {"index": 12}}))?,
            "12"
        );
        assert_eq!(
            id(json!({"task_id": 2, "prompt": "p", "test_list": ["assert 1"]}))?,
            "mbpp/2"
        );
        // Empty or non-scalar ids are not ids: the record is named by file and line.
        assert_eq!(
            id(json!({"id": " ", "prompt": "p", "answer": "1"}))?,
            "f.jsonl:7"
        );
        assert_eq!(
            id(json!({"id": {"a": 1}, "prompt": "p", "answer": "1"}))?,
            "f.jsonl:7"
        );
        assert_eq!(id(json!({"prompt": "p", "answer": "1"}))?, "f.jsonl:7");
        Ok(())
    }

    #[test]
    fn leetcode_entry_point_is_the_solution_method() {
        assert_eq!(
            leetcode_method("```python\nclass Solution:\n    def maxSum(self, nums): ...```")
                .as_deref(),
            Some("maxSum")
        );
    }
}
