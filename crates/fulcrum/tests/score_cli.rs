//! `fulcrum score` end to end: the real binary on a temporary JSONL file.

use std::process::Command;

fn run_score(name: &str, input: &str, extra: &[&str]) -> std::io::Result<std::process::Output> {
    let path =
        std::env::temp_dir().join(format!("fulcrum-score-{}-{name}.jsonl", std::process::id()));
    std::fs::write(&path, input)?;
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .arg("score")
        .arg(&path)
        .args(extra)
        .output()
}

#[test]
fn one_output_line_per_input_line_in_order() -> std::io::Result<()> {
    let input = concat!(
        "{\"response\": \"so \\\\boxed{\\\\frac{1}{2}}\", \"answer\": \"0.5\"}\n",
        "{\"response\": \"Answer: 7\", \"answer\": 8}\n",
        "{\"response\": \"Answer: hi\", \"answer\": \"hi\", \"verifier\": \"exact\"}\n",
    );
    let out = run_score("ok", input, &["--reward", "plus-minus"])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(serde_json::Value::Null))
        .collect();
    let rewards: Vec<f64> = lines
        .iter()
        .map(|l| l["reward"].as_f64().unwrap_or(9.0))
        .collect();
    assert_eq!(rewards, vec![1.0, -1.0, 1.0]);
    assert!(lines.iter().all(|l| l["reason"].is_string()));
    Ok(())
}

#[test]
fn malformed_line_is_an_error_with_its_line_number() -> std::io::Result<()> {
    let out = run_score(
        "bad",
        "{\"response\": \"x\", \"answer\": \"1\"}\n{\"response\": \"x\"\n",
        &[],
    )?;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.jsonl:2: (json)"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "nothing is scored when a line is malformed"
    );
    Ok(())
}

#[test]
fn code_items_run_in_the_sandbox() -> std::io::Result<()> {
    let input = concat!(
        "{\"response\": \"```python\\ndef add(a, b):\\n    return a + b\\n```\", \"answer\": \"assert add(2, 3) == 5\", \"verifier\": \"code\"}\n",
        "{\"response\": \"```python\\ndef add(a, b):\\n    return a * b\\n```\", \"answer\": \"def check(candidate):\\n    assert candidate(2, 3) == 5\\n\", \"verifier\": \"code\", \"entry_point\": \"add\"}\n",
    );
    let out = run_score("code", input, &[])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let correct: Vec<bool> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v["correct"] == true))
        .collect();
    assert_eq!(correct, vec![true, false]);
    Ok(())
}
