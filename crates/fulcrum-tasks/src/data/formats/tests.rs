//! Every record format read from its own shape of record.

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
        json!({"prompt": "p", "answer": "def check(c):\n    assert c()", "verifier": "code", "entry_point": "f"}),
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
fn code_records_whose_tests_cannot_fail_name_line_and_field() {
    for (v, field, want) in [
        (
            json!({"prompt": "p", "answer": "x = 1", "verifier": "code"}),
            "answer",
            "no assertion",
        ),
        (
            json!({"prompt": "p", "answer": "[]", "verifier": "code"}),
            "answer",
            "empty list",
        ),
        (
            json!({"prompt": "p", "answer": [], "verifier": "code"}),
            "answer",
            "empty list",
        ),
        (
            json!({"prompt": "p", "answer": 3, "verifier": "code"}),
            "answer",
            "expected a string",
        ),
        (
            json!({"prompt": "p", "answer": "def check(c):\n    assert c()", "verifier": "code"}),
            "entry_point",
            "missing",
        ),
        (
            json!({"prompt": "p", "answer": "assert f()", "entry_point": "f"}),
            "entry_point",
            "verifier is `math`",
        ),
        (
            json!({"task_id": "HumanEval/0", "prompt": "def f():", "test": "def check(c):\n    pass", "entry_point": "f"}),
            "test",
            "no assertion",
        ),
        (
            json!({"task_id": 1, "prompt": "p", "test_list": ["f(1)"]}),
            "test_list",
            "no assertion",
        ),
        (
            json!({"problem": "p", "tests": [{"input": "1", "output": ""}]}),
            "tests",
            "empty output",
        ),
        (
            json!({"problem": "class Solution:\n    def go(self): ...", "tests": {"functional": "def check(c):\n    c().go()"}}),
            "tests/functional",
            "no assertion",
        ),
    ] {
        let e = ex(v.clone())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with(&format!("f.jsonl:7: {field}: ")) && e.contains(want),
            "{v}: {e}"
        );
    }
    // A list of cases given as JSON (not a string) is read as those cases.
    let e =
        ex(json!({"prompt": "p", "answer": [{"input": "", "output": "1"}], "verifier": "code"}));
    assert!(e.is_ok_and(|e| e.answer.starts_with("[{")));
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
        id(json!({"unique_id": "test/algebra/1.json", "problem": "p", "solution": "\\boxed{2}"}))?,
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
