//! The code runner's test kinds, ordering and pool, and benchmark tasks built by name.

use std::time::Duration;

use fulcrum_tasks::code::{CodeRunner, TestSpec};
use fulcrum_tasks::sandbox::SandboxConfig;
use fulcrum_tasks::{create_task, Split, TaskConfig};

/// This process's sandbox (`FULCRUM_SANDBOX`, else `auto`) with a longer wall clock.
fn runner(workers: usize) -> CodeRunner {
    let detected =
        CodeRunner::try_detect().unwrap_or_else(|e| panic!("these tests need a code sandbox: {e}"));
    CodeRunner::new(
        SandboxConfig {
            wall: Duration::from_secs(5),
            ..detected.config().clone()
        },
        workers,
    )
}

#[test]
fn stdio_cases_give_a_pass_fraction() {
    let code = "a, b = map(int, input().split())\nprint(a + b if a < 5 else a - b)\n";
    let spec = TestSpec::Stdio(vec![
        ("1 2\n".into(), "3".into()),
        ("2 2\n".into(), "4\n".into()),
        ("7 1\n".into(), "8".into()),
    ]);
    let o = runner(1).run_code(code, &spec);
    assert!(!o.passed);
    assert!((o.fraction - 2.0 / 3.0).abs() < 1e-9, "{o:?}");
    assert!(o.reason.starts_with("case 3"), "{}", o.reason);
}

#[test]
fn check_function_tests_the_entry_point() {
    let spec = TestSpec::from_answer(
        "def check(candidate):\n    assert candidate(3) == 9\n",
        Some("sq"),
    );
    let r = runner(1);
    assert!(r.run_code("def sq(x):\n    return x * x\n", &spec).passed);
    assert!(!r.run_code("def sq(x):\n    return x + x\n", &spec).passed);
}

#[test]
fn run_many_keeps_input_order_with_a_bounded_pool() {
    let jobs: Vec<(String, TestSpec)> = (0..12)
        .map(|i| {
            let code = format!("import time\ntime.sleep(0.05)\nv = {i}\n");
            (code, TestSpec::Asserts("assert v % 3 == 0".into()))
        })
        .collect();
    let out = runner(3).run_many(&jobs);
    let passed: Vec<bool> = out.iter().map(|o| o.passed).collect();
    let want: Vec<bool> = (0..12).map(|i| i % 3 == 0).collect();
    assert_eq!(passed, want);
}

#[test]
fn benchmark_names_create_tasks_that_score() -> Result<(), fulcrum_tasks::TaskError> {
    let task = create_task(&"gsm8k".parse::<TaskConfig>()?)?;
    let ex = task.examples(Split::Test, 3, 4)?;
    assert_eq!(ex.len(), 4);
    let e = &ex[0];
    assert!(task.score(e, &format!("#### {}", e.answer)).correct);
    assert!(!task.score(e, "#### -123456789").correct);

    let mbpp = create_task(&"mbpp".parse::<TaskConfig>()?)?;
    let e = &mbpp.examples(Split::Test, 0, 1)?[0];
    let demo = e.demonstration.clone().unwrap_or_default();
    assert!(mbpp.score(e, &format!("```python\n{demo}\n```")).correct);
    assert!(!mbpp.score(e, "```python\npass\n```").correct);

    // A batch runs the programs concurrently and keeps the order.
    let ex = mbpp.examples(Split::Test, 1, 4)?;
    let right: Vec<String> = ex
        .iter()
        .map(|e| {
            format!(
                "```python\n{}\n```",
                e.demonstration.clone().unwrap_or_default()
            )
        })
        .collect();
    let items: Vec<(&fulcrum_tasks::Example, &str)> = ex
        .iter()
        .zip(&right)
        .enumerate()
        .map(|(i, (e, r))| {
            (
                e,
                if i % 2 == 0 {
                    r.as_str()
                } else {
                    "```python\npass\n```"
                },
            )
        })
        .collect();
    let scores = mbpp.score_batch(&items);
    let correct: Vec<bool> = scores.iter().map(|s| s.correct).collect();
    assert_eq!(correct, vec![true, false, true, false]);
    Ok(())
}
