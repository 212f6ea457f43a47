//! Runs that destroy each other: two processes on one directory, a directory of another kind,
//! a resume that would discard recorded steps, a damaged record or checkpoint, a run name that
//! leaves `runs/`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// metrics.jsonl without its wall-clock fields (`time/*`).
fn records(run: &Path) -> Vec<serde_json::Value> {
    read(&run.join("metrics.jsonl"))
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("a metrics line");
            v.as_object_mut()
                .expect("an object")
                .retain(|k, _| !k.starts_with("time/"));
            v
        })
        .collect()
}

#[test]
fn a_second_process_is_refused_a_run_directory_in_use_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    let mut args = vec!["train", "--quiet", "--run-dir", "runs/x"];
    args.extend_from_slice(SMALL);
    let first = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(p)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = first.id().to_string();
    let lock = p.join("runs/x/.fulcrum.lock");
    let t0 = Instant::now();
    while read(&lock).trim() != pid {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the first run never took its lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // A fresh run into the same directory, and a resume of it, while the first trains.
    let again = train(p, &["--run-dir", "runs/x"]);
    refused(&again, &["runs/x", "in use", &pid]);
    let resume = fulcrum(p, &["train", "--quiet", "--resume", "runs/x"]);
    refused(&resume, &["runs/x", "in use", &pid]);
    let done = first.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", stderr(&done));
    let steps: Vec<u64> = records(&p.join("runs/x"))
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert_eq!(
        steps,
        vec![1, 2, 3],
        "one run's records, not two interleaved"
    );
    // The lock went with the process: the finished run can be resumed now.
    succeeded(&fulcrum(p, &["train", "--quiet", "--resume", "runs/x"]));
}

#[test]
fn a_comparison_is_never_a_run_and_a_run_never_a_comparison() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    succeeded(&train(p, &["--run-dir", "runs/r", "--set", "steps=1"]));
    let summary = read(&p.join("runs/r/summary.json"));
    let mut cmp = vec![
        "compare", "--quiet", "--rules", "ba", "--seeds", "1", "--steps", "1", "--out",
    ];
    let into_run = {
        let mut a = cmp.clone();
        a.push("runs/r");
        a.extend_from_slice(SMALL);
        fulcrum(p, &a)
    };
    refused(
        &into_run,
        &["runs/r", "is a run directory, not a comparison"],
    );
    assert_eq!(
        read(&p.join("runs/r/summary.json")),
        summary,
        "the run's summary is kept"
    );
    cmp.push("runs/c");
    cmp.extend_from_slice(SMALL);
    succeeded(&fulcrum(p, &cmp));
    let cmp_summary = read(&p.join("runs/c/summary.json"));
    refused(
        &train(p, &["--run-dir", "runs/c"]),
        &["runs/c", "is a comparison directory"],
    );
    refused(
        &fulcrum(p, &["train", "--quiet", "--resume", "runs/c"]),
        &["runs/c", "is a comparison directory"],
    );
    assert_eq!(read(&p.join("runs/c/summary.json")), cmp_summary);
    // A folder of someone else's files is nobody's run.
    std::fs::create_dir(p.join("mine")).unwrap();
    std::fs::write(p.join("mine/notes.txt"), "keep me").unwrap();
    refused(
        &train(p, &["--run-dir", "mine"]),
        &["mine", "did not write"],
    );
    assert_eq!(read(&p.join("mine/notes.txt")), "keep me");
}

#[test]
fn a_resume_without_a_checkpoint_stops_and_keeps_the_records_until_asked_to_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    succeeded(&train(p, &["--run-dir", "r"]));
    let before = read(&p.join("r/metrics.jsonl"));
    std::fs::remove_dir_all(p.join("r/checkpoints")).unwrap();
    let o = fulcrum(p, &["train", "--quiet", "--resume", "r"]);
    refused(&o, &["3 recorded step", "no checkpoint", "--restart"]);
    assert_eq!(
        read(&p.join("r/metrics.jsonl")),
        before,
        "nothing recorded was lost"
    );
    let o = fulcrum(p, &["train", "--quiet", "--resume", "r", "--restart"]);
    succeeded(&o);
    assert_eq!(records(&p.join("r")).len(), 3);
}

#[test]
fn a_deleted_or_damaged_record_is_refused_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    succeeded(&train(p, &["--run-dir", "r"]));
    let metrics = p.join("r/metrics.jsonl");
    let kept = read(&metrics);
    std::fs::remove_file(&metrics).unwrap();
    let o = fulcrum(p, &["train", "--quiet", "--resume", "r"]);
    refused(&o, &["metrics.jsonl", "missing", "step 3"]);
    assert!(
        !metrics.exists(),
        "a missing record is not silently replaced"
    );
    let mut lines: Vec<&str> = kept.lines().collect();
    lines[1] = "{\"step\": 2, \"reward/mean\"";
    std::fs::write(&metrics, lines.join("\n") + "\n").unwrap();
    let o = fulcrum(p, &["train", "--quiet", "--resume", "r"]);
    refused(&o, &["metrics.jsonl:2", "damaged"]);
    // A last line cut short by a crash is still repaired, as before.
    std::fs::write(&metrics, kept.clone() + "{\"step\": 4, \"rew").unwrap();
    succeeded(&fulcrum(p, &["train", "--quiet", "--resume", "r"]));
    assert_eq!(read(&metrics), kept);
}

#[test]
fn a_corrupt_newest_checkpoint_is_named_and_the_previous_intact_one_offered() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    succeeded(&train(p, &["--run-dir", "whole"]));
    succeeded(&train(p, &["--run-dir", "r"]));
    let weights = p.join("r/checkpoints/step-3/model.safetensors");
    let len = std::fs::metadata(&weights).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&weights)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let o = fulcrum(p, &["train", "--quiet", "--resume", "r"]);
    refused(
        &o,
        &["step-3", "model.safetensors", "--from-checkpoint step-2"],
    );
    let o = fulcrum(
        p,
        &[
            "train",
            "--quiet",
            "--resume",
            "r",
            "--from-checkpoint",
            "step-7",
        ],
    );
    refused(&o, &["no checkpoint step-7", "step-1, step-2, step-3"]);
    let o = fulcrum(
        p,
        &[
            "train",
            "--quiet",
            "--resume",
            "r",
            "--from-checkpoint",
            "step-2",
        ],
    );
    succeeded(&o);
    assert_eq!(records(&p.join("r")), records(&p.join("whole")));
}

#[test]
fn a_run_name_must_stay_inside_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("work");
    std::fs::create_dir(&p).unwrap();
    for name in ["../..", "..", "a/b", "\"\""] {
        let set = format!("run_name={name}");
        let o = fulcrum(&p, &["train", "--quiet", "--set", &set]);
        refused(&o, &["run_name"]);
    }
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(
        left.len(),
        1,
        "nothing was written beside the working directory"
    );
}

#[test]
fn a_run_refused_at_its_start_leaves_no_directory_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    let o = train(p, &["--set", "model.path=no-such-model"]);
    refused(&o, &["no-such-model"]);
    assert!(
        !p.join("runs").exists(),
        "runs/ was made for a run that never started"
    );
}
