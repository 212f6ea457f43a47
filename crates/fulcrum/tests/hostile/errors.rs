//! Data errors name the file, the line and the field: code items whose tests cannot fail (a
//! reward hole: any program that runs would score 1), bytes that are not UTF-8, characters the
//! built-in model cannot encode. And a `[task]` table given in part keeps the documented
//! defaults of the keys it leaves out.

use std::path::Path;

use super::*;

/// `fulcrum train` (small) on the data file `name` holding `text`.
fn train_on(cwd: &Path, name: &str, text: &[u8]) -> std::process::Output {
    std::fs::write(cwd.join(name), text).unwrap();
    train(
        cwd,
        &[
            "--set",
            "task.name=\"jsonl\"",
            "--set",
            &format!("task.path=\"{name}\""),
        ],
    )
}

/// A run recorded before the refused commands, and a check that it is still whole after them.
struct Recorded {
    files: Vec<(std::path::PathBuf, Vec<u8>)>,
}

impl Recorded {
    fn new(cwd: &Path) -> Recorded {
        succeeded(&train(cwd, &[]));
        let run = cwd.join("runs/demo");
        let files = ["config.toml", "metrics.jsonl", "summary.json", "eval.jsonl"]
            .iter()
            .map(|f| (run.join(f), std::fs::read(run.join(f)).unwrap()))
            .collect();
        Recorded { files }
    }

    #[track_caller]
    fn intact(&self) {
        for (p, bytes) in &self.files {
            assert_eq!(&std::fs::read(p).unwrap(), bytes, "{} changed", p.display());
        }
    }
}

#[test]
fn code_items_whose_tests_cannot_fail_are_refused_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let recorded = Recorded::new(cwd);
    let good =
        "{\"prompt\": \"add\", \"answer\": \"assert add(1, 2) == 3\", \"verifier\": \"code\"}\n";
    for (bad, field) in [
        // No assertion: the program runs, the "tests" run, reward 1.
        ("{\"prompt\": \"add\", \"answer\": \"add(1, 2)\", \"verifier\": \"code\"}", "answer"),
        ("{\"prompt\": \"add\", \"answer\": \"# assert add(1, 2) == 3\", \"verifier\": \"code\"}", "answer"),
        // Empty tests.
        ("{\"prompt\": \"add\", \"answer\": \" \", \"verifier\": \"code\"}", "answer"),
        // Zero stdin/stdout cases.
        ("{\"prompt\": \"add\", \"answer\": [], \"verifier\": \"code\"}", "answer"),
        // check(candidate) with nothing to call it with, and check without a check.
        ("{\"prompt\": \"add\", \"answer\": \"def check(c):\\n    assert c(1, 2) == 3\", \"verifier\": \"code\"}", "entry_point"),
        ("{\"prompt\": \"add\", \"answer\": \"def check(c):\\n    c(1, 2)\", \"verifier\": \"code\", \"entry_point\": \"add\"}", "answer"),
        ("{\"prompt\": \"add\", \"answer\": \"assert add(1, 2) == 3\", \"verifier\": \"code\", \"entry_point\": \"add\"}", "answer"),
    ] {
        let o = train_on(cwd, "code.jsonl", format!("{good}{bad}\n").as_bytes());
        refused(&o, &[&format!("code.jsonl:2: {field}:")]);
        // The same file as a benchmark, and lines of `fulcrum score`.
        let o = fulcrum(cwd, &["eval", "--model", "tiny", "--bench", "code.jsonl"]);
        refused(&o, &[&format!("code.jsonl:2: {field}:")]);
        let line = bad.replacen('{', "{\"response\": \"x\", ", 1);
        std::fs::write(cwd.join("score.jsonl"), format!("{line}\n")).unwrap();
        refused(
            &fulcrum(cwd, &["score", "score.jsonl"]),
            &[&format!("score.jsonl:1: {field}:")],
        );
    }
    recorded.intact();
}

#[test]
fn bytes_that_are_not_utf8_name_the_line_and_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let recorded = Recorded::new(cwd);
    let text = b"{\"prompt\": \"Q: 1+1\", \"answer\": \"2\"}\n{\"prompt\": \"Q: 2+2\", \"answer\": \"4\"}\n{\"prompt\": \"Q: \xff\", \"answer\": \"4\"}\n";
    // Line 3 starts at byte 72; the bad byte is 15 bytes into it.
    let o = train_on(cwd, "bytes.jsonl", text);
    refused(&o, &["bytes.jsonl:3:", "not valid UTF-8 (byte offset 87)"]);
    let o = fulcrum(cwd, &["eval", "--model", "tiny", "--bench", "bytes.jsonl"]);
    refused(&o, &["bytes.jsonl:3:", "not valid UTF-8 (byte offset 87)"]);
    recorded.intact();
}

#[test]
fn characters_the_built_in_model_lacks_are_named_by_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let recorded = Recorded::new(cwd);
    // In a prompt: named before the run starts.
    let text = "{\"prompt\": \"Q: 1+1\", \"answer\": \"2\", \"demonstration\": \"Answer: 2\"}\n{\"prompt\": \"Q: 3\u{d7}4\", \"answer\": \"12\", \"demonstration\": \"Answer: 12\"}\n";
    let o = train_on(cwd, "vocab.jsonl", text.as_bytes());
    refused(&o, &["vocab.jsonl:2", "'\u{d7}'", "U+00D7"]);
    let o = fulcrum(cwd, &["eval", "--model", "tiny", "--bench", "vocab.jsonl"]);
    refused(&o, &["vocab.jsonl:2", "U+00D7"]);
    // In a demonstration (read by the SFT warm-up): named with its field. Records with ids of
    // their own are still named by file and line.
    let text = "{\"id\": \"a\", \"prompt\": \"Q: 1+1\", \"answer\": \"2\", \"demonstration\": \"Answer: 2\"}\n{\"id\": \"b\", \"prompt\": \"Q: 3*4\", \"answer\": \"12\", \"demonstration\": \"3\u{d7}4 = 12\\nAnswer: 12\"}\n";
    let o = train_on(cwd, "demos.jsonl", text.as_bytes());
    refused(&o, &["demos.jsonl:2: demonstration:", "U+00D7"]);
    recorded.intact();
}

#[test]
fn a_task_table_given_in_part_keeps_the_documented_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let printed = |extra: &[&str]| {
        let mut args = vec!["train", "--print-config"];
        args.extend_from_slice(extra);
        let o = fulcrum(cwd, &args);
        succeeded(&o);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let defaults = printed(&[]);
    assert!(
        defaults.contains("difficulty = 2") && defaults.contains("mistake_rate = 0.2"),
        "{defaults}"
    );
    // A key set to its default value, alone in the table: nothing else changes.
    assert_eq!(printed(&["--set", "task.length=1.0"]), defaults);
    assert_eq!(printed(&["--set", "task.name=\"arithmetic\""]), defaults);
    // From a config file too.
    std::fs::write(cwd.join("t.toml"), "[task]\nreward = \"zero-one\"\n").unwrap();
    assert_eq!(printed(&["--config", "t.toml"]), defaults);
}
