//! Many training ranks fed by inference-engine servers (docs/scale.md): `fulcrum train --nproc 2`
//! (and ranks started by hand, as torchrun does) against real llama.cpp servers. The slower
//! suite, run by `.ci/run` with `--ignored` after `fulcrum fetch-assets --only smollm2`.

#[path = "../../fulcrum-train/tests/common/llamacpp.rs"]
mod llamacpp;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use llamacpp::{engine_sets, free_port, gguf, pushed_files, run_metrics, scratch, Server};
use serde_json::Value;

/// `fulcrum train` of the short engine run, one libtorch thread per rank.
fn train(run_dir: &Path, urls: &[&str], steps: u64, extra: &[&str]) -> Result<Command> {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fulcrum"));
    c.arg("train").arg("--quiet").arg("--run-dir").arg(run_dir);
    for s in engine_sets(urls, steps)?
        .iter()
        .map(String::as_str)
        .chain(["threads=1"])
        .chain(extra.iter().copied())
    {
        c.args(["--set", s]);
    }
    Ok(c)
}

fn run(mut c: Command) -> Result<Output> {
    let out = c.output().context("running fulcrum")?;
    ensure!(
        out.status.success(),
        "fulcrum failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn field(line: &Value, key: &str) -> f64 {
    line[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

#[test]
#[ignore = "slow: starts two llama.cpp servers (run with --ignored)"]
fn two_ranks_on_two_servers_train_the_run_one_rank_trains() -> Result<()> {
    let path = gguf()?;
    let (a, b) = (Server::start(&path)?, Server::start(&path)?);
    let urls = [a.url.as_str(), b.url.as_str()];
    let dir = scratch()?;
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    run(train(&one, &urls, 2, &[])?)?;
    let mut c = train(&two, &urls, 2, &[])?;
    c.args(["--nproc", "2"]);
    let out = run(c)?;
    // One process wrote the run: one summary.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("GRPO steps").count(), 1, "{stdout}");
    let (m1, m2) = (run_metrics(&one)?, run_metrics(&two)?);
    assert_eq!((m1.len(), m2.len()), (2, 2));
    // Step 1 samples the same pushed file with the same per-group seeds, whichever server
    // takes a group (llama.cpp samples a seeded request the same on any server of the same
    // file and build): the same responses, rewards and lengths. The update is the same up to
    // the order of floating-point sums (the gradient all-reduce), so its loss agrees closely.
    // Later steps push weights that may differ in the last bit, which can flip a sampled token:
    // only step 1 is compared exactly.
    for key in ["reward/mean", "len/mean", "sample/tokens", "acc/train"] {
        assert_eq!(m1[0][key], m2[0][key], "{key}");
    }
    for key in ["loss/policy", "kl/engine"] {
        let (x, y) = (field(&m1[0], key), field(&m2[0], key));
        assert!((x - y).abs() <= 1e-6 + 1e-3 * x.abs(), "{key}: {x} vs {y}");
    }
    for line in &m2 {
        // One push a step (rank 0 writes it, both servers load it), and nothing stale.
        assert!(field(line, "time/weight_push") > 0.0, "{line}");
        assert_eq!(line["rollout/staleness_max"], 0, "{line}");
        assert!(field(line, "kl/engine") < 0.05, "{line}");
    }
    assert_eq!(pushed_files(&two)?, vec!["weights-v1.gguf".to_string()]);
    Ok(())
}

#[test]
#[ignore = "slow: starts two llama.cpp servers (run with --ignored)"]
fn max_staleness_2_samples_ahead_trains_nothing_older_and_says_so() -> Result<()> {
    let path = gguf()?;
    let (a, b) = (Server::start(&path)?, Server::start(&path)?);
    let dir = scratch()?;
    let rd = dir.path().join("run");
    let mut c = train(
        &rd,
        &[&a.url, &b.url],
        4,
        // Every second step: step 2's checkpoint is the one looked at, and each full checkpoint
        // of SmolLM2-135M with AdamW's moments takes 1.6 GB of the disk.
        &["rollout.max_staleness=2", "checkpoint_every=2"],
    )?;
    c.args(["--nproc", "2"]);
    run(c)?;
    let m = run_metrics(&rd)?;
    let max: Vec<u64> = m
        .iter()
        .map(|l| l["rollout/staleness_max"].as_u64().unwrap())
        .collect();
    // Step 1 samples on its own weights; step 2's draw was queued during step 1 (on version
    // 0, trains version 1); from step 3 on each draw was queued two versions back.
    assert_eq!(max, vec![0, 1, 2, 2]);
    let mean: Vec<f64> = m
        .iter()
        .map(|l| field(l, "rollout/staleness_mean"))
        .collect();
    assert_eq!(mean, vec![0.0, 1.0, 2.0, 2.0]);
    for line in &m {
        assert_eq!(line["rollout/dropped_stale"], 0, "{line}");
        assert!(field(line, "kl/engine") < 0.2, "{line}");
    }
    for line in &m[1..] {
        assert_eq!(line["rollout/stale"], 16, "{line}");
    }
    // Step 2's checkpoint resumes the prompt stream before step 3's prompts (queued ahead).
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(
        rd.join("checkpoints/step-2/checkpoint.json"),
    )?)?;
    assert_eq!(meta.pointer("/trainer/data/offset"), Some(&Value::from(8)));
    Ok(())
}

#[test]
#[ignore = "slow: starts two llama.cpp servers (run with --ignored)"]
fn a_server_dying_under_two_ranks_is_survived_and_said() -> Result<()> {
    let path = gguf()?;
    let a = Server::start(&path)?;
    let mut b = Server::start(&path)?;
    let dir = scratch()?;
    let rd = dir.path().join("run");
    let mut c = train(&rd, &[&a.url, &b.url], 3, &[])?;
    c.args(["--nproc", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = c.spawn()?;
    wait_for_steps(&rd, 1)?;
    b.kill();
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        run_metrics(&rd)?.len(),
        3,
        "the run went on with the other server"
    );
    assert!(
        stderr.contains(&b.url),
        "the dropped server is named: {stderr}"
    );
    Ok(())
}

#[test]
#[ignore = "slow: starts a llama.cpp server (run with --ignored)"]
fn a_killed_rank_stops_the_job_and_it_resumes_with_one_rank() -> Result<()> {
    let path = gguf()?;
    let a = Server::start(&path)?;
    let dir = scratch()?;
    let rd = dir.path().join("run");
    let port = free_port()?.to_string();
    // Ranks started by hand, as torchrun or Slurm start them.
    let rank = |r: usize| -> Result<std::process::Child> {
        let mut c = train(
            &rd,
            &[&a.url],
            4,
            // Only the newest step checkpoint stays (1.6 GB each): the resume takes that one.
            &[
                "checkpoint_every=1",
                "checkpoint_keep=1",
                "dist.timeout_s=10",
            ],
        )?;
        c.env("RANK", r.to_string())
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Ok(c.spawn()?)
    };
    let survivor = rank(0)?;
    let mut victim = rank(1)?;
    wait_for_steps(&rd, 2)?;
    victim.kill()?;
    let _ = victim.wait();
    let killed = Instant::now();
    let out = survivor.wait_with_output()?;
    let secs = killed.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(secs < 60.0, "rank 0 took {secs} s to stop: {stderr}");
    assert!(stderr.contains("c10d"), "{stderr}");
    let done = run_metrics(&rd)?.len();
    assert!((2..4).contains(&done), "{done} steps before the kill");

    // One process takes the run over from its newest checkpoint and finishes it.
    let mut c = Command::new(env!("CARGO_BIN_EXE_fulcrum"));
    c.args(["train", "--quiet", "--resume"]).arg(&rd);
    run(c)?;
    let m = run_metrics(&rd)?;
    let steps: Vec<u64> = m.iter().map(|l| l["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, vec![1, 2, 3, 4]);
    Ok(())
}

/// Waits until the run at `dir` has recorded `n` steps (at most 5 minutes).
fn wait_for_steps(dir: &Path, n: usize) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let done = std::fs::read_to_string(dir.join("metrics.jsonl"))
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if done >= n {
            return Ok(());
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(300),
            "{}: {done} of {n} steps after 5 minutes",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
