//! `fulcrum train --nproc 2` against one process, and a job that loses a rank: the survivor
//! stops with an error naming the collective within its timeout (`dist.timeout_s`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const QUICK: [&str; 10] = [
    "--quiet",
    "--set",
    "threads=1",
    "--set",
    "sft.steps=0",
    "--set",
    "eval.prompts=4",
    "--set",
    "rollout.prompts_per_step=3",
    "--set=rollout.max_response_len=16",
];

fn fulcrum() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
}

/// The metrics lines without the wall-clock fields (`time/...`, throughput).
fn reproducible_metrics(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let o = v.as_object_mut().unwrap();
            o.retain(|k, _| {
                ["reward/mean", "len/mean", "acc/train", "sample/tokens"].contains(&k.as_str())
            });
            v
        })
        .collect()
}

#[test]
fn nproc_2_samples_what_one_process_samples_and_writes_one_set_of_files() {
    let dir = tempfile::tempdir().unwrap();
    for (name, nproc) in [("one", None), ("two", Some("2"))] {
        let mut c = fulcrum();
        c.arg("train").args(QUICK).args(["--set", "steps=2"]);
        c.arg("--run-dir").arg(dir.path().join(name));
        if let Some(n) = nproc {
            c.args(["--nproc", n]);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        // One summary, from rank 0.
        assert_eq!(stdout.matches("GRPO steps").count(), 1, "{stdout}");
    }
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    assert_eq!(reproducible_metrics(&one), reproducible_metrics(&two));
    assert_eq!(reproducible_metrics(&two).len(), 2);
    assert!(two.join("checkpoints/final/model.safetensors").exists());
}

#[test]
fn a_killed_rank_ends_the_job_with_an_error_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rank = |r: usize| {
        let mut c = fulcrum();
        c.arg("train")
            .args(QUICK)
            .args(["--set", "steps=100000", "--set", "dist.timeout_s=10"])
            .arg("--run-dir")
            .arg(&run)
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let survivor = rank(0);
    let mut victim = rank(1);
    let t0 = Instant::now();
    while !run.join("metrics.jsonl").exists()
        || std::fs::read_to_string(run.join("metrics.jsonl"))
            .unwrap()
            .is_empty()
    {
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "no step was written"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    victim.kill().unwrap();
    let _ = victim.wait();
    let killed = Instant::now();
    let out = survivor.wait_with_output().unwrap();
    let secs = killed.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(secs < 60.0, "the survivor took {secs} s to stop: {stderr}");
    assert!(stderr.contains("c10d"), "{stderr}");
}
