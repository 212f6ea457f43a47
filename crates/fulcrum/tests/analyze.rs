//! `fulcrum analyze` run as a user runs it: the real binary on files in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fulcrum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(args)
        .output()
        .expect("the fulcrum binary runs")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn analyze_json(file: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["analyze", file.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let o = fulcrum(&args);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("stdout is one JSON document")
}

/// The spec's first worked example, as a rollout dump.
const SPEC_CASE: &str = r#"{"group": 0, "reward": 1, "length": 5}
{"group": 0, "reward": 0, "length": 12}
{"group": 0, "reward": 0, "length": 9}
{"group": 0, "reward": 1, "length": 3}
{"group": 1, "reward": 0, "length": 7}
{"group": 1, "reward": 0, "length": 7}
{"group": 1, "reward": 0, "length": 20}
{"group": 1, "reward": 1, "length": 4}
"#;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-12)
}

#[test]
fn json_output_has_exactly_the_documented_keys_and_spec_values() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "r.jsonl", SPEC_CASE);
    let v = analyze_json(&f, &["--l-norm", "20"]);
    let top: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(top, ["advantages", "diagnostics", "rules"]);
    let rules = v["rules"].as_object().unwrap();
    let names: Vec<&str> = rules.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "ba",
            "ba-batch",
            "drgrpo",
            "seq",
            "seq-sum",
            "token",
            "token-group"
        ]
    );
    for (name, r) in rules {
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "len_weight_corr",
                "mass_neg",
                "mass_pos",
                "mass_ratio",
                "weights"
            ],
            "{name}"
        );
        assert_eq!(r["weights"].as_array().unwrap().len(), 8, "{name}");
    }
    let d = v["diagnostics"].as_object().unwrap();
    let keys: Vec<&str> = d.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "frac_all_correct",
            "frac_all_wrong",
            "frac_mixed",
            "len_cv",
            "len_gap",
            "len_gap_rel",
            "len_mean",
            "len_neg_mean",
            "len_pos_mean"
        ]
    );
    // Values from shared/spec/aggregation-vectors.json, case "binary-two-groups".
    let adv = v["advantages"].as_array().unwrap();
    assert!(close(adv[0].as_f64().unwrap(), 0.8660239037870368));
    assert!(close(adv[7].as_f64().unwrap(), 1.499997000006));
    assert!(close(
        v["rules"]["ba"]["weights"][1].as_f64().unwrap(),
        1.0 / (2.0 * 4.0 * 10.5)
    ));
    assert!(close(
        v["rules"]["token"]["mass_neg"].as_f64().unwrap(),
        0.5251711638745638
    ));
    assert!(close(
        v["rules"]["drgrpo"]["weights"][0].as_f64().unwrap(),
        1.0 / (8.0 * 20.0)
    ));
    assert!(close(v["rules"]["ba"]["mass_ratio"].as_f64().unwrap(), 1.0));
    assert_eq!(v["diagnostics"]["frac_mixed"].as_f64(), Some(1.0));
}

#[test]
fn verl_style_keys_work_unchanged_and_by_flag() {
    let dir = tempfile::tempdir().unwrap();
    let verl: String = SPEC_CASE
        .replace("\"group\"", "\"uid\"")
        .replace("\"reward\"", "\"score\"")
        .replace("\"length\"", "\"response_length\"");
    let f = write(dir.path(), "verl.jsonl", &verl);
    let ours = write(dir.path(), "ours.jsonl", SPEC_CASE);
    let want = analyze_json(&ours, &[]);
    assert_eq!(analyze_json(&f, &[]), want);
    let flags = [
        "--group-key",
        "uid",
        "--reward-key",
        "score",
        "--length-key",
        "response_length",
    ];
    assert_eq!(analyze_json(&f, &flags), want);
    // Custom names.
    let custom = SPEC_CASE
        .replace("\"group\"", "\"prompt\"")
        .replace("\"length\"", "\"ntok\"");
    let f = write(dir.path(), "custom.jsonl", &custom);
    assert_eq!(
        analyze_json(&f, &["--group-key", "prompt", "--length-key", "ntok"]),
        want
    );
}

#[test]
fn given_advantages_are_used_instead_of_computed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let text = "{\"group\": \"a\", \"reward\": 1, \"length\": 4, \"adv\": 2.5}\n\
                {\"group\": \"a\", \"reward\": 0, \"length\": 8, \"adv\": -0.5}\n";
    let f = write(dir.path(), "r.jsonl", text);
    let v = analyze_json(&f, &["--advantage-key", "adv"]);
    assert_eq!(v["advantages"], serde_json::json!([2.5, -0.5]));
    let v = analyze_json(&f, &[]);
    assert!(close(
        v["advantages"][0].as_f64().unwrap(),
        0.5 / (0.5f64.sqrt() + 1e-6)
    ));
}

#[test]
fn estimator_and_ba_count_flags_change_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let text = "{\"group\":1,\"reward\":1,\"length\":4}\n{\"group\":1,\"reward\":0,\"length\":6}\n\
                {\"group\":1,\"reward\":0.5,\"length\":10}\n";
    let f = write(dir.path(), "r.jsonl", text);
    let rloo = analyze_json(&f, &["--advantage", "rloo"]);
    assert_eq!(rloo["advantages"], serde_json::json!([0.75, -0.75, 0.0]));
    let group = analyze_json(&f, &["--advantage", "rloo"]);
    let signed = analyze_json(&f, &["--advantage", "rloo", "--ba-count", "signed"]);
    // W_g = 3 (group) vs 2 (signed) for the positive response of length 4.
    assert!(close(
        group["rules"]["ba"]["weights"][0].as_f64().unwrap(),
        1.0 / 12.0
    ));
    assert!(close(
        signed["rules"]["ba"]["weights"][0].as_f64().unwrap(),
        1.0 / 8.0
    ));
    let o = fulcrum(&["analyze", f.to_str().unwrap(), "--advantage", "grpo2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("valid advantage estimators: grpo, mean, rloo, opo"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn human_report_shows_every_rule_and_a_verdict() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/rollouts.jsonl");
    let o = fulcrum(&["analyze", example.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for rule in [
        "token",
        "token-group",
        "seq",
        "seq-sum",
        "drgrpo",
        "ba/group",
        "ba-batch/group",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{rule} "))),
            "no row for {rule}:\n{out}"
        );
    }
    assert!(
        out.contains("wrong answers are 2.5x longer than right ones"),
        "{out}"
    );
    assert!(
        out.contains("`token` gives the negative side 2.5x the push"),
        "{out}"
    );
    assert!(out.contains("`ba` balances both"), "{out}");
}

/// Each bad input: exit 2, nothing on stdout, and an error naming file, line and field.
#[test]
fn bad_input_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = "{\"group\": 0, \"reward\": 1, \"length\": 3}\n";
    let cases: &[(&str, &str)] = &[
        (
            "{\"group\": 0, \"reward\": 1, \"length\": 3",
            ":2: malformed JSON",
        ),
        ("{\"group\": 0, \"length\": 3}", ":2: reward: missing field"),
        (
            "{\"group\": 0, \"reward\": \"yes\", \"length\": 3}",
            ":2: reward: expected a number",
        ),
        (
            "{\"group\": 0, \"reward\": 1, \"length\": -4}",
            ":2: length: negative length -4",
        ),
        (
            "{\"group\": 0, \"reward\": 1, \"length\": 3.5}",
            ":2: length: expected an integer",
        ),
        (
            "{\"group\": 0, \"reward\": 1, \"length\": \"3\"}",
            ":2: length: expected an integer",
        ),
        (
            "{\"group\": 0.5, \"reward\": 1, \"length\": 3}",
            ":2: group: expected a string or integer",
        ),
        ("{\"reward\": 1, \"length\": 3}", ":2: group: missing field"),
        ("[1, 2, 3]", ":2: expected a JSON object"),
        (
            "{\"group\": 0, \"reward\": 1, \"length\": 3, \"advantage\": 1}",
            ":2: advantage: present here but not on the first line",
        ),
    ];
    for (k, (line, want)) in cases.iter().enumerate() {
        let f = write(
            dir.path(),
            &format!("bad{k}.jsonl"),
            &format!("{good}{line}\n{good}"),
        );
        let o = fulcrum(&["analyze", f.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "case {k}");
        assert!(o.stdout.is_empty(), "case {k}: printed a result");
        let err = stderr(&o);
        assert!(
            err.contains(&format!("bad{k}.jsonl{want}")),
            "case {k}: {err}"
        );
    }
}

#[test]
fn empty_and_missing_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("empty.jsonl", ""), ("blank.jsonl", "\n  \n")] {
        let f = write(dir.path(), name, text);
        let o = fulcrum(&["analyze", f.to_str().unwrap(), "--json"]);
        assert_eq!(o.status.code(), Some(2));
        assert!(o.stdout.is_empty());
        assert!(stderr(&o).contains("empty file"), "{}", stderr(&o));
    }
    let o = fulcrum(&["analyze", dir.path().join("nope.jsonl").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("nope.jsonl: cannot open"),
        "{}",
        stderr(&o)
    );
    let f = write(dir.path(), "ok.jsonl", SPEC_CASE);
    let o = fulcrum(&["analyze", f.to_str().unwrap(), "--l-norm", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("l_norm"), "{}", stderr(&o));
}

#[test]
fn batch_without_gradient_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let text = "{\"group\":1,\"reward\":1,\"length\":4}\n{\"group\":1,\"reward\":1,\"length\":6}\n{\"group\":2,\"reward\":0,\"length\":3}\n";
    let f = write(dir.path(), "r.jsonl", text);
    let o = fulcrum(&["analyze", f.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(
        stdout(&o).contains("every rule gives this batch zero policy gradient"),
        "{}",
        stdout(&o)
    );
    let v = analyze_json(&f, &[]);
    assert_eq!(v["diagnostics"]["frac_all_correct"].as_f64(), Some(0.5));
    assert_eq!(v["diagnostics"]["frac_all_wrong"].as_f64(), Some(0.5));
    assert!(v["diagnostics"]["len_gap"].is_null());
}
