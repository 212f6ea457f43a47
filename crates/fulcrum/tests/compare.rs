//! `fulcrum compare` and `fulcrum report` as a user runs them: a tiny grid (a built-in synthetic
//! task and a user JSONL task, two rules, two seeds, two steps) that shares warm-ups, skips
//! finished cells when run again, refuses a changed command on an old directory, and gives a
//! report page with its charts.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const TINY: &[&str] = &[
    "--set",
    "sft.steps=4",
    "--set",
    "sft.batch_size=8",
    "--set",
    "rollout.prompts_per_step=2",
    "--set",
    "rollout.group_size=4",
    "--set",
    "rollout.max_response_len=16",
    "--set",
    "eval.prompts=4",
    "--set",
    "eval_every=1",
    "--set",
    "checkpoint_every=0",
    "--set",
    "threads=1",
];

fn fulcrum(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("fulcrum runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A small user task file: additions with worked demonstrations, checked exactly.
fn write_user_task(dir: &Path) -> std::path::PathBuf {
    let mut lines = String::new();
    for a in 1..=6 {
        for b in 1..=6 {
            lines.push_str(&format!(
                "{{\"prompt\": \"Q: {a}+{b}\", \"answer\": \"{}\", \"demonstration\": \"{a}+{b}={}\\nAnswer: {}\", \"verifier\": \"exact\"}}\n",
                a + b,
                a + b,
                a + b
            ));
        }
    }
    let path = dir.join("my-task.jsonl");
    std::fs::write(&path, lines).unwrap();
    path
}

fn compare_args<'a>(tasks: &'a str, steps: &'a str) -> Vec<&'a str> {
    let mut a = vec![
        "compare",
        "--quiet",
        "--rules",
        "token,seq",
        "--seeds",
        "2",
        "--steps",
        steps,
        "--out",
        "cmp",
        "--tasks",
        tasks,
    ];
    a.extend_from_slice(TINY);
    a
}

#[test]
fn compare_runs_the_grid_resumes_and_report_draws_it() {
    let dir = tempfile::tempdir().unwrap();
    let user = write_user_task(dir.path());
    let tasks = format!("arithmetic:difficulty=1,jsonl:path={}", user.display());

    let o = fulcrum(dir.path(), &compare_args(&tasks, "2"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("final acc (95% CI)"),
        "{}",
        text(&o.stdout)
    );

    let cmp = dir.path().join("cmp");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(cmp.join("summary.json")).unwrap()).unwrap();
    let runs = summary["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8, "2 tasks x 2 rules x 2 seeds");
    for r in runs {
        assert_eq!(r["steps"], 2, "{r}");
        assert!(r["final_accuracy"].is_number(), "{r}");
        assert!(r["len_cv"].is_number(), "{r}");
    }
    assert_eq!(summary["groups"].as_array().unwrap().len(), 4);
    for c in summary["contrasts"].as_array().unwrap() {
        assert_eq!(c["final_accuracy_diff"]["token-seq"]["n"], 2, "{c}");
    }
    // One warm-up per task and seed, shared by the rules: both rules start from the same
    // held-out accuracy, and each task's cache holds exactly two entries (the seeds).
    for task in [
        "arithmetic-difficulty=1",
        &format!(
            "jsonl-path={}",
            user.display().to_string().replace('/', "_")
        ),
    ] {
        let tdir = cmp.join("runs").join(task);
        let cache: Vec<_> = std::fs::read_dir(tdir.join("sft-cache")).unwrap().collect();
        assert_eq!(cache.len(), 2, "{}", tdir.display());
        for seed in [0, 1] {
            let first = |rule: &str| {
                let t = std::fs::read_to_string(tdir.join(format!("{rule}-seed{seed}/eval.jsonl")))
                    .unwrap();
                t.lines().next().unwrap().to_string()
            };
            assert_eq!(first("token"), first("seq"));
        }
    }

    // Run again: every cell is finished, nothing is trained.
    let again = fulcrum(dir.path(), &compare_args(&tasks, "2"));
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stderr).contains("8 of 8 runs already finished"),
        "{}",
        text(&again.stderr)
    );

    // A changed command on the same directory is refused, naming the run.
    let changed = fulcrum(dir.path(), &compare_args(&tasks, "3"));
    assert_eq!(changed.status.code(), Some(2));
    assert!(
        text(&changed.stderr).contains("different config"),
        "{}",
        text(&changed.stderr)
    );

    // The report: a page with embedded images, and the PNG files themselves.
    let rep = fulcrum(dir.path(), &["report", "cmp"]);
    assert!(rep.status.success(), "{}", text(&rep.stderr));
    let page = std::fs::read_to_string(cmp.join("report/index.html")).unwrap();
    assert!(
        page.contains("<table>") && page.contains("token"),
        "no summary table"
    );
    let pngs: Vec<_> = std::fs::read_dir(cmp.join("report"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    // Per task at least the charts that every run has data for (the gap and mass-ratio charts
    // need mixed groups, which so short a run may not have), and the token - seq scatter.
    for name in [
        "reward",
        "accuracy",
        "accuracy-diff",
        "length",
        "entropy",
        "grad-norm",
        "clip-frac",
    ] {
        let n = pngs
            .iter()
            .filter(|p| p.to_string_lossy().ends_with(&format!("-{name}.png")))
            .count();
        assert_eq!(n, 2, "{name}: {pngs:?}");
    }
    // Responses cut at 16 tokens: the truncated fraction is drawn for every task where something
    // was cut (each rule's predicted share of its update on them only where a group was mixed,
    // which two steps may not give).
    let count = |suffix: &str| {
        pngs.iter()
            .filter(|p| p.to_string_lossy().ends_with(suffix))
            .count()
    };
    assert!(count("-truncated.png") >= 1, "{pngs:?}");
    assert!(count("-trunc-share.png") <= count("-truncated.png"));
    assert!(cmp.join("report/study-cv.png").exists());
    for p in &pngs {
        let bytes = std::fs::read(p).unwrap();
        assert!(
            bytes.len() > 2000 && bytes.starts_with(b"\x89PNG"),
            "{}",
            p.display()
        );
    }
    assert_eq!(page.matches("data:image/png;base64,").count(), pngs.len());

    // A single run directory gets a report too.
    let one = fulcrum(
        dir.path(),
        &[
            "report",
            "cmp/runs/arithmetic-difficulty=1/seq-seed0",
            "--out",
            "one",
        ],
    );
    assert!(one.status.success(), "{}", text(&one.stderr));
    assert!(std::fs::read_to_string(dir.path().join("one/index.html"))
        .unwrap()
        .contains("data:image/png;base64,"));
}

#[test]
fn a_loss_grid_trains_every_policy_loss_and_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let losses = "ppo,gspo,cispo,sapo,gmpo,clip-cov,kl-cov";
    let mut args = vec![
        "compare",
        "--quiet",
        "--rules",
        "ba",
        "--losses",
        losses,
        "--seeds",
        "1",
        "--steps",
        "1",
        "--out",
        "cmp",
        "--tasks",
        "arithmetic:difficulty=1",
    ];
    args.extend_from_slice(TINY);
    let o = fulcrum(dir.path(), &args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let cmp = dir.path().join("cmp");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(cmp.join("summary.json")).unwrap()).unwrap();
    let runs = summary["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 7);
    for (run, loss) in runs.iter().zip(losses.split(',')) {
        assert_eq!(run["rule"], format!("ba+{loss}"), "{run}");
        assert_eq!(run["loss"], loss, "{run}");
        let rdir = cmp.join(format!("runs/arithmetic-difficulty=1/ba-{loss}-seed0"));
        let s: Value =
            serde_json::from_str(&std::fs::read_to_string(rdir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(s["loss"], loss, "{s}");
        let m = std::fs::read_to_string(rdir.join("metrics.jsonl")).unwrap();
        let line: Value = serde_json::from_str(m.lines().next().unwrap()).unwrap();
        assert!(line["clip/cov_selected_frac"].is_number(), "{line}");
        assert!(line["loss/policy"].is_number(), "{loss}: {line}");
    }
    // Each loss against ppo under the same rule.
    let c = &summary["contrasts"][0]["final_accuracy_diff"];
    assert!(c["ba+gspo-ba+ppo"].is_object(), "{c}");
    // The report draws every arm.
    let rep = fulcrum(dir.path(), &["report", "cmp"]);
    assert!(rep.status.success(), "{}", text(&rep.stderr));
    let page = std::fs::read_to_string(cmp.join("report/index.html")).unwrap();
    assert!(page.contains("ba+kl-cov"), "the page names the arms");
    // An unknown loss lists the valid ones before anything trains.
    let o = fulcrum(
        dir.path(),
        &["compare", "--losses", "ppo,gpso", "--out", "y"],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("gspo") && err.contains("kl-cov"), "{err}");
    assert!(!dir.path().join("y").exists());
}

#[test]
fn bad_rule_or_task_spec_stops_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let o = fulcrum(
        dir.path(),
        &["compare", "--rules", "token,ba_batch", "--out", "x"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("ba-batch"), "{}", text(&o.stderr));
    let o = fulcrum(
        dir.path(),
        &["compare", "--tasks", "lists:colour=red", "--out", "x"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("colour"), "{}", text(&o.stderr));
    // A rule or task named twice would be two runs in one directory.
    let o = fulcrum(
        dir.path(),
        &["compare", "--rules", "ba,token,ba", "--out", "x"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("named twice"),
        "{}",
        text(&o.stderr)
    );
    let o = fulcrum(
        dir.path(),
        &[
            "compare",
            "--tasks",
            "arithmetic:difficulty=1,arithmetic:difficulty=1",
            "--out",
            "x",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("named twice"),
        "{}",
        text(&o.stderr)
    );
    assert!(!dir.path().join("x").exists());
}

/// `metrics.jsonl` of a run without its timings (the only fields allowed to differ).
fn metrics_without_time(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if let Some(m) = v.as_object_mut() {
                m.retain(|k, _| !k.starts_with("time/") && !k.ends_with("tokens_per_s"));
            }
            v
        })
        .collect()
}

#[test]
fn parallel_jobs_give_the_same_runs_as_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let args = |out: &'static str, jobs: &'static str| {
        let mut a = vec![
            "compare",
            "--quiet",
            "--rules",
            "ba,token",
            "--seeds",
            "2",
            "--steps",
            "2",
            "--jobs",
            jobs,
            "--out",
            out,
            "--tasks",
            "arithmetic:difficulty=1,mistake_length=2",
        ];
        a.extend_from_slice(TINY);
        a
    };
    for (out, jobs) in [("one", "1"), ("two", "2")] {
        let o = fulcrum(dir.path(), &args(out, jobs));
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    for run in ["ba-seed0", "token-seed0", "ba-seed1", "token-seed1"] {
        let at = |out: &str| {
            dir.path()
                .join(out)
                .join("runs/arithmetic-difficulty=1-mistake_length=2")
                .join(run)
        };
        assert_eq!(
            metrics_without_time(&at("one")),
            metrics_without_time(&at("two")),
            "{run}"
        );
        let eval = |out: &str| std::fs::read_to_string(at(out).join("eval.jsonl")).unwrap();
        assert_eq!(eval("one"), eval("two"), "{run}");
    }
    let o = fulcrum(dir.path(), &["compare", "--jobs", "0", "--out", "x"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_shared_warm_up_is_trained_once_for_every_seed_even_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = vec![
        "compare",
        "--quiet",
        "--rules",
        "ba",
        "--seeds",
        "3",
        "--steps",
        "1",
        "--jobs",
        "2",
        "--out",
        "cmp",
        "--tasks",
        "arithmetic:difficulty=1,loop_rate=1,mistake_rate=0.5,loop_length=20",
        "--set",
        "sft.seed=11",
    ];
    a.extend_from_slice(TINY);
    let o = fulcrum(dir.path(), &a);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let task = dir
        .path()
        .join("cmp/runs/arithmetic-difficulty=1-loop_rate=1-mistake_rate=0.5-loop_length=20");
    let entries: Vec<String> = std::fs::read_dir(task.join("sft-cache"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1, "one warm-up, no leftovers: {entries:?}");
    assert!(entries[0].starts_with("arithmetic-seed11-"), "{entries:?}");
    // Every seed's run starts from it: the same start, different RL streams.
    let sft_line = |seed: u64| {
        let t = std::fs::read_to_string(task.join(format!("ba-seed{seed}/eval.jsonl"))).unwrap();
        t.lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(sft_line(0), sft_line(1));
    assert_eq!(sft_line(0), sft_line(2));
    let m = |seed: u64| metrics_without_time(&task.join(format!("ba-seed{seed}")));
    assert_ne!(m(0), m(1));
}
