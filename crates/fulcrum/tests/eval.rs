//! `fulcrum eval` as a user runs it, on the built-in tiny model: whole sets by default and
//! labelled subsets, the pass@1 / pass@k / avg@k keys against the scored responses, the
//! `--protocol paper` preset under explicit flags, and the samples file as a resumable cache.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// `fulcrum eval --model tiny --threads 1` with `extra` arguments, in `cwd`.
fn eval(cwd: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(cwd)
        .args(["eval", "--model", "tiny", "--threads", "1"])
        .args(extra)
        .output()
        .expect("fulcrum runs")
}

/// [`eval`] with `--json`: the parsed output, after checking that it succeeded.
fn eval_json(cwd: &Path, extra: &[&str]) -> Value {
    let o = eval(cwd, &[&["--json"], extra].concat());
    assert!(o.status.success(), "{}", err(&o));
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A data file of `count` problems whose answers are single digits (so that the untrained tiny
/// model's last number is sometimes right, and the measures are not all zero).
fn digits_file(dir: &Path, count: usize) -> &'static str {
    let lines: String = (0..count)
        .map(|i| {
            format!(
                "{{\"prompt\": \"Q: {i}\\n\", \"answer\": \"{}\"}}\n",
                i % 9 + 1
            )
        })
        .collect();
    std::fs::write(dir.join("digits.jsonl"), lines).unwrap();
    "digits.jsonl"
}

/// The lines of a samples file.
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// 1 - C(n-c, k) / C(n, k), by counting: the test's own computation, not the crate's.
fn unbiased(n: u64, c: u64, k: u64) -> f64 {
    let choose = |a: u64, b: u64| -> f64 {
        if b > a {
            return 0.0;
        }
        (0..b).map(|i| (a - i) as f64 / (i + 1) as f64).product()
    };
    1.0 - choose(n - c, k) / choose(n, k)
}

#[test]
fn a_data_file_is_evaluated_whole_by_default_and_a_subset_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = digits_file(dir.path(), 6);
    let v = eval_json(dir.path(), &["--bench", file, "--max-new-tokens", "3"]);
    let r = &v["results"][0]["result"];
    assert_eq!(r["problems"], 6);
    assert_eq!(r["problems_total"], 6);
    assert_eq!(r["prompts"], 6, "the old key stays");
    assert_eq!(r["subset"], Value::Null);
    for key in [
        "pass@1",
        "pass@k",
        "avg@k",
        "accuracy",
        "pass_at_k",
        "truncated",
    ] {
        assert!(r[key].is_f64(), "{key}: {r}");
    }
    assert_eq!(
        (r["k"].as_u64(), r["samples_per_problem"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(r["temperature"], 0.0);
    assert_eq!(v["protocol"], Value::Null);

    // --prompts: the first N, labelled in the JSON, the table and the samples file.
    let v = eval_json(
        dir.path(),
        &[
            "--bench",
            file,
            "--max-new-tokens",
            "3",
            "--prompts",
            "4",
            "--samples",
            "s.jsonl",
        ],
    );
    let r = &v["results"][0]["result"];
    assert_eq!(
        (r["problems"].as_u64(), r["problems_total"].as_u64()),
        (Some(4), Some(6))
    );
    let subset = r["subset"].as_str().unwrap_or_default();
    assert!(
        subset.contains("first 4 of 6") && subset.contains("seed 0"),
        "{subset}"
    );
    let s = lines(&dir.path().join("s.jsonl"));
    assert_eq!(s.len(), 4);
    for l in &s {
        assert_eq!(
            (l["problems"].as_u64(), l["problems_total"].as_u64()),
            (Some(4), Some(6))
        );
    }
    let o = eval(
        dir.path(),
        &["--bench", file, "--max-new-tokens", "3", "--prompts", "4"],
    );
    assert!(o.status.success(), "{}", err(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("4 of 6"), "{table}");
    assert!(table.contains("the first 4 of 6 problems"), "{table}");
    // Three tokens cut almost every response: warned on stderr and under the table.
    assert!(
        err(&o).contains("warning") && err(&o).contains("3-token limit"),
        "{}",
        err(&o)
    );
    assert!(table.contains("warning:"), "{table}");

    // More than the file holds: the whole file, said so.
    let o = eval(
        dir.path(),
        &["--bench", file, "--max-new-tokens", "3", "--prompts", "50"],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("all 6 are evaluated"), "{}", err(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("6 of 6"));

    // A generated task has no total: 128 problems unless told, labelled as generated.
    let v = eval_json(dir.path(), &["--bench", "lists", "--max-new-tokens", "2"]);
    let r = &v["results"][0]["result"];
    assert_eq!(r["problems"], 128);
    assert_eq!(r["problems_total"], Value::Null);
    assert!(r["subset"]
        .as_str()
        .unwrap_or_default()
        .contains("generated"));
}

#[test]
fn pass_at_k_and_avg_at_k_are_those_of_the_scored_responses() {
    let dir = tempfile::tempdir().unwrap();
    let file = digits_file(dir.path(), 8);
    let v = eval_json(
        dir.path(),
        &[
            "--bench",
            file,
            "--k",
            "4",
            "--samples-per-problem",
            "16",
            "--temperature",
            "1",
            "--max-new-tokens",
            "6",
            "--samples",
            "s.jsonl",
        ],
    );
    let r = &v["results"][0]["result"];
    assert_eq!(
        (r["k"].as_u64(), r["samples_per_problem"].as_u64()),
        (Some(4), Some(16))
    );
    let s = lines(&dir.path().join("s.jsonl"));
    assert_eq!(s.len(), 8 * 16);
    let mut correct = [0u64; 8];
    for l in &s {
        correct[l["problem"].as_u64().unwrap() as usize] += u64::from(l["correct"] == true);
    }
    // Some problems part right and part wrong, or the comparison below proves little.
    assert!(correct.iter().any(|&c| c > 0 && c < 16), "{correct:?}");
    let n = 16.0;
    let pass1 = correct.iter().map(|&c| c as f64 / n).sum::<f64>() / 8.0;
    let pass4 = correct.iter().map(|&c| unbiased(16, c, 4)).sum::<f64>() / 8.0;
    let close = |key: &str, want: f64| {
        let got = r[key].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "{key}: {got} != {want}");
    };
    close("pass@1", pass1);
    close("avg@k", pass1);
    close("accuracy", pass1);
    close("pass@k", pass4);
    close("pass_at_k", pass4);
    assert!(pass4 > pass1, "pass@4 {pass4} should exceed pass@1 {pass1}");

    // n < k is refused, naming both flags.
    let o = eval(
        dir.path(),
        &["--bench", file, "--k", "4", "--samples-per-problem", "2"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--samples-per-problem 2") && err(&o).contains("--k"));
}

#[test]
fn the_paper_protocol_sets_k_and_temperature_and_explicit_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let v = eval_json(
        dir.path(),
        &[
            "--protocol",
            "paper",
            "--bench",
            "amc23,math500",
            "--prompts",
            "2",
            "--max-new-tokens",
            "2",
            "--samples-per-problem",
            "32",
        ],
    );
    assert_eq!(v["protocol"], "paper");
    let res = v["results"].as_array().unwrap();
    let (amc, math) = (&res[0]["result"], &res[1]["result"]);
    // From the preset: k 32 on AMC23, 4 on MATH-500, temperature 1.
    assert_eq!((amc["k"].as_u64(), math["k"].as_u64()), (Some(32), Some(4)));
    assert_eq!(
        (amc["temperature"].as_f64(), math["temperature"].as_f64()),
        (Some(1.0), Some(1.0))
    );
    // From the flags: the length limit, the responses per problem and the subset.
    for r in [amc, math] {
        assert_eq!(r["max_new_tokens"], 2);
        assert_eq!(r["samples_per_problem"], 32);
        assert_eq!(r["problems"], 2);
    }
    assert_eq!(
        (
            amc["problems_total"].as_u64(),
            math["problems_total"].as_u64()
        ),
        (Some(40), Some(500))
    );
}

/// The evaluation the resume test runs, with `extra` flags: 6 problems, 2 responses each, 2
/// problems per batch.
const RESUMABLE: &[&str] = &[
    "--k",
    "2",
    "--temperature",
    "1",
    "--max-new-tokens",
    "6",
    "--batch-size",
    "4",
];

/// A JSON result without what differs between runs of the same evaluation.
fn settled(mut v: Value) -> Value {
    for r in v["results"].as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("seconds");
        let res = r["result"].as_object_mut().unwrap();
        res.remove("tokens_per_s");
        res.remove("problems_cached");
    }
    v
}

/// A samples line without the labels of the run that wrote it.
fn response(mut l: Value) -> Value {
    let o = l.as_object_mut().unwrap();
    o.remove("problems");
    o.remove("problems_total");
    l
}

#[test]
fn a_rerun_reuses_finished_problems_and_ends_as_the_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = digits_file(dir.path(), 6);
    let run = |samples: &str, extra: &[&str]| {
        let args = [&["--bench", file, "--samples", samples], RESUMABLE, extra].concat();
        eval_json(dir.path(), &args)
    };
    let whole = run("whole.jsonl", &[]);
    assert_eq!(whole["results"][0]["result"]["problems_cached"], 0);

    // Interrupted in the middle of the second batch: its last line torn in two, so that
    // problem 3 has one of its two responses.
    let part = run("part.jsonl", &["--prompts", "4"]);
    assert_eq!(part["results"][0]["result"]["problems"], 4);
    let text = std::fs::read_to_string(dir.path().join("part.jsonl")).unwrap();
    let last = text.trim_end().rfind('\n').unwrap() + 1;
    let torn = &text[..last + (text.len() - last) / 2];
    std::fs::write(dir.path().join("part.jsonl"), torn).unwrap();
    let args = [
        &["--json", "--bench", file, "--samples", "part.jsonl"],
        RESUMABLE,
    ]
    .concat();
    let o = eval(dir.path(), &args);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        err(&o).contains("part.jsonl:8: dropping a torn last line"),
        "{}",
        err(&o)
    );
    assert!(err(&o).contains("3 problems finished"), "{}", err(&o));
    let resumed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(resumed["results"][0]["result"]["problems_cached"], 3);
    assert_eq!(settled(resumed), settled(whole.clone()));
    // Each response once, the same as the uninterrupted run's.
    let sorted = |name: &str| {
        let mut l: Vec<String> = lines(&dir.path().join(name))
            .into_iter()
            .map(|l| response(l).to_string())
            .collect();
        l.sort();
        l
    };
    assert_eq!(sorted("part.jsonl").len(), 12);
    assert_eq!(sorted("part.jsonl"), sorted("whole.jsonl"));

    // A finished file: nothing sampled, the same result.
    let again = run("whole.jsonl", &[]);
    assert_eq!(again["results"][0]["result"]["problems_cached"], 6);
    assert_eq!(again["results"][0]["result"]["tokens_per_s"], 0.0);
    assert_eq!(settled(again), settled(whole));
    assert_eq!(lines(&dir.path().join("whole.jsonl")).len(), 12);
}

#[test]
fn a_samples_file_of_other_settings_is_refused_unless_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let file = digits_file(dir.path(), 4);
    let base = [
        "--bench",
        file,
        "--samples",
        "s.jsonl",
        "--max-new-tokens",
        "4",
    ];
    let first = eval(dir.path(), &[&base[..], &["--temperature", "1"]].concat());
    assert!(first.status.success(), "{}", err(&first));
    for (flags, what) in [
        (
            &["--temperature", "0.5"][..],
            "temperature 1, here with 0.5",
        ),
        (
            &["--temperature", "1", "--seed", "3"][..],
            "seed 0, here with 3",
        ),
    ] {
        let o = eval(dir.path(), &[&base[..], flags].concat());
        assert_eq!(o.status.code(), Some(2), "{flags:?}");
        assert!(
            err(&o).contains("s.jsonl:1") && err(&o).contains(what),
            "{}",
            err(&o)
        );
        assert!(err(&o).contains("--fresh"), "{}", err(&o));
    }
    // The refusal leaves the file as it was; --fresh starts it over.
    assert_eq!(lines(&dir.path().join("s.jsonl")).len(), 4);
    let o = eval(
        dir.path(),
        &[&base[..], &["--temperature", "0.5", "--fresh"]].concat(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let l = lines(&dir.path().join("s.jsonl"));
    assert_eq!(l.len(), 4);
    assert!(l.iter().all(|l| l["temperature"] == 0.5));
    // A file of another program (or an older samples file) is refused naming the line.
    std::fs::write(
        dir.path().join("old.jsonl"),
        "{\"id\": \"x\", \"response\": \"y\"}\n",
    )
    .unwrap();
    let o = eval(dir.path(), &["--bench", file, "--samples", "old.jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("old.jsonl:1"), "{}", err(&o));
}

#[test]
fn eval_takes_task_specs_with_settings_and_names_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let run = |bench: &str| {
        eval(
            dir.path(),
            &[
                "--json",
                "--bench",
                bench,
                "--prompts",
                "2",
                "--max-new-tokens",
                "8",
            ],
        )
    };
    let o = run("arithmetic:difficulty=1,mistake_length=2,lists");
    assert!(o.status.success(), "{}", err(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let benches: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bench"].as_str().unwrap())
        .collect();
    assert_eq!(
        benches,
        ["arithmetic:difficulty=1,mistake_length=2", "lists"]
    );
    let bad = run("lists:verbose_rate=7");
    assert_eq!(bad.status.code(), Some(2));
    assert!(err(&bad).contains("verbose_rate"), "{}", err(&bad));
    assert!(bad.stdout.is_empty());
    // No benchmark and no protocol: told what to give.
    let none = eval(dir.path(), &[]);
    assert_eq!(none.status.code(), Some(2));
    assert!(err(&none).contains("--bench"), "{}", err(&none));
}

#[test]
fn eval_samples_file_holds_every_scored_response() {
    let dir = tempfile::tempdir().unwrap();
    let v = eval_json(
        dir.path(),
        &[
            "--bench",
            "arithmetic:difficulty=1,lists",
            "--prompts",
            "3",
            "--k",
            "2",
            "--temperature",
            "1",
            "--max-new-tokens",
            "12",
            "--samples",
            "s.jsonl",
        ],
    );
    let lines = lines(&dir.path().join("s.jsonl"));
    assert_eq!(lines.len(), 2 * 3 * 2, "2 benches x 3 problems x k=2");
    for r in v["results"].as_array().unwrap() {
        let bench = r["bench"].as_str().unwrap();
        let mine: Vec<&Value> = lines.iter().filter(|l| l["bench"] == bench).collect();
        assert_eq!(mine.len(), 6, "{bench}");
        let n = mine.len() as f64;
        let correct = mine.iter().filter(|l| l["correct"] == true).count() as f64;
        let tokens: f64 = mine.iter().map(|l| l["tokens"].as_f64().unwrap()).sum();
        let cut = mine.iter().filter(|l| l["truncated"] == true).count() as f64;
        let res = &r["result"];
        assert!((res["accuracy"].as_f64().unwrap() - correct / n).abs() < 1e-9);
        assert!((res["mean_len"].as_f64().unwrap() - tokens / n).abs() < 1e-9);
        assert!((res["truncated"].as_f64().unwrap() - cut / n).abs() < 1e-9);
        for l in &mine {
            assert!(!l["id"].as_str().unwrap().is_empty());
            assert!(!l["prompt"].as_str().unwrap().is_empty());
            assert!(l["response"].is_string() && l["reason"].is_string());
            assert_eq!(l["model"], "tiny");
            assert!(l["problem"].as_u64().unwrap() < 3 && l["sample"].as_u64().unwrap() < 2);
        }
    }
    // An unwritable samples path fails before the model is loaded, naming the path.
    let o = eval(
        dir.path(),
        &["--bench", "lists", "--samples", "no/such/dir/s.jsonl"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("no/such/dir/s.jsonl"), "{}", err(&o));
}
