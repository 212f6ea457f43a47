//! `fulcrum train` as a user runs it, on the built-in tiny model with a small config:
//! determinism, crash (SIGKILL) and resume, and bad input stopping before training.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const SMALL: &[&str] = &[
    "--set",
    "steps=4",
    "--set",
    "checkpoint_every=1",
    "--set",
    "eval_every=2",
    "--set",
    "sft.steps=6",
    "--set",
    "sft.batch_size=8",
    "--set",
    "rollout.prompts_per_step=3",
    "--set",
    "rollout.group_size=4",
    "--set",
    "rollout.max_response_len=24",
    "--set",
    "eval.prompts=6",
    "--set",
    "task.difficulty=1",
    "--set",
    "ppo.micro_batch_size=5",
    "--set",
    "threads=1",
];

fn train(cwd: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["train", "--quiet"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(cwd)
        .args(&args)
        .output()
        .expect("fulcrum runs")
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// metrics.jsonl without the wall-clock timings (`time/*`).
fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut()
                .unwrap()
                .retain(|k, _| !k.starts_with("time/"));
            v
        })
        .collect()
}

fn sha(path: &Path) -> String {
    // FNV-1a over the bytes: a fingerprint for comparing two files, not a security hash.
    let bytes = std::fs::read(path).unwrap();
    format!("{:x}", fulcrum_core::rng::hash_bytes(&bytes))
}

#[test]
fn same_config_and_seed_give_identical_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let a = train(dir.path(), &["--run-dir", "runs/a"]);
    assert!(a.status.success(), "{}", err(&a));
    // b keeps only its two newest step checkpoints, which changes nothing else.
    let b = train(
        dir.path(),
        &["--run-dir", "runs/b", "--set", "checkpoint_keep=2"],
    );
    assert!(b.status.success(), "{}", err(&b));
    let kept = |r: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join(r).join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        kept("runs/a"),
        ["final", "step-1", "step-2", "step-3", "step-4"]
    );
    assert_eq!(kept("runs/b"), ["final", "step-3", "step-4"]);
    let (ma, mb) = (
        metrics(&dir.path().join("runs/a")),
        metrics(&dir.path().join("runs/b")),
    );
    assert_eq!(ma.len(), 4);
    assert_eq!(ma, mb);
    for f in ["eval.jsonl", "samples.jsonl"] {
        let read = |r: &str| std::fs::read_to_string(dir.path().join(r).join(f)).unwrap();
        assert_eq!(read("runs/a"), read("runs/b"), "{f}");
    }
    let w = |r: &str| {
        sha(&dir
            .path()
            .join(r)
            .join("checkpoints/final/model.safetensors"))
    };
    assert_eq!(w("runs/a"), w("runs/b"));
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("runs/a/summary.json")).unwrap(),
    )
    .unwrap();
    for k in ["sft_accuracy", "final_accuracy", "steps", "wall_seconds"] {
        assert!(summary.get(k).is_some(), "summary.json lacks {k}");
    }
    // Every rule's diagnostics are in every line.
    for rule in [
        "token",
        "token-group",
        "seq",
        "seq-sum",
        "drgrpo",
        "ba",
        "ba-batch",
    ] {
        for key in ["mass_ratio", "update_cos"] {
            assert!(
                ma[0].get(format!("{key}/{rule}")).is_some(),
                "no {key}/{rule}"
            );
        }
    }
    // The trained rule against itself is 1 wherever a step had mass (null where none had).
    for m in &ma {
        if let Some(c) = m["update_cos/ba"].as_f64() {
            assert!((c - 1.0).abs() < 1e-9, "{m}");
        }
    }
    assert!(ma[0].get("len/cv_side").is_some());
}

#[test]
fn greedy_eval_is_written_next_to_avg_and_pass_at_k() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        "--run-dir",
        "runs/g",
        "--set",
        "eval.greedy_prompts=10",
        "--set",
        "eval.at_start=true",
        "--set",
        "eval.seed=5",
        "--set",
        "task.loop_rate=1",
        "--set",
        "task.mistake_rate=0.5",
    ];
    let o = train(dir.path(), &extra);
    assert!(o.status.success(), "{}", err(&o));
    let text = std::fs::read_to_string(dir.path().join("runs/g/eval.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let sampled: Vec<&Value> = lines.iter().filter(|l| l["phase"] != "sft").collect();
    assert_eq!(sampled.len(), 3, "start, step 2, step 4: {text}");
    for l in sampled {
        assert_eq!(l["greedy_prompts"], 10, "{l}");
        for k in [
            "accuracy",
            "pass_at_k",
            "greedy_accuracy",
            "greedy_truncated",
        ] {
            let x = l[k].as_f64().unwrap_or(-1.0);
            assert!((0.0..=1.0).contains(&x), "{k} in {l}");
        }
    }
}

#[test]
fn killed_run_resumes_to_the_same_end() {
    let dir = tempfile::tempdir().unwrap();
    let whole = train(dir.path(), &["--run-dir", "runs/whole"]);
    assert!(whole.status.success(), "{}", err(&whole));

    // The kill point varies from run to run of this test (the clock), as a real crash would.
    let kill_after = 1
        + (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
            % 3) as usize;
    let mut args = vec!["train", "--quiet"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(&["--run-dir", "runs/killed"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(dir.path())
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run: PathBuf = dir.path().join("runs/killed");
    let t0 = Instant::now();
    // Killed once the step's checkpoint is complete (renamed into place): a run killed before
    // any checkpoint, with steps recorded, is refused a resume (it would discard them).
    loop {
        let done = run.join(format!("checkpoints/step-{kill_after}")).exists();
        if done || t0.elapsed() > Duration::from_secs(300) {
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().ok(); // SIGKILL
    child.wait().unwrap();

    let resumed = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(dir.path())
        .args(["train", "--quiet", "--resume", "runs/killed"])
        .output()
        .unwrap();
    assert!(resumed.status.success(), "{}", err(&resumed));
    assert_eq!(metrics(&run), metrics(&dir.path().join("runs/whole")));
    assert_eq!(
        sha(&run.join("checkpoints/final/model.safetensors")),
        sha(&dir
            .path()
            .join("runs/whole/checkpoints/final/model.safetensors"))
    );
}

#[test]
fn corrupt_checkpoint_is_refused_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let o = train(dir.path(), &["--run-dir", "r", "--set", "steps=2"]);
    assert!(o.status.success(), "{}", err(&o));
    let weights = dir.path().join("r/checkpoints/step-2/model.safetensors");
    let len = std::fs::metadata(&weights).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&weights)
        .unwrap();
    f.set_len(len / 2).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(dir.path())
        .args(["train", "--resume", "r"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("truncated"), "{}", err(&o));
}

#[test]
fn bad_input_stops_before_training_naming_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("bad.toml"), "steps = 3\n[ppo]\neps_hi = 0.3\n").unwrap();
    std::fs::write(
        p.join("noanswer.jsonl"),
        "{\"prompt\": \"Q: 1+1\\n\", \"answer\": \"2\"}\n{\"prompt\": \"Q: 2+2\\n\"}\n",
    )
    .unwrap();
    std::fs::create_dir(p.join("empty-model")).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--config", "bad.toml"], "bad.toml: ppo"),
        (&["--set", "steps=many"], "steps"),
        (
            &[
                "--set",
                "task.name=jsonl",
                "--set",
                "task.path=missing.jsonl",
            ],
            "missing.jsonl",
        ),
        (
            &[
                "--set",
                "task.name=jsonl",
                "--set",
                "task.path=noanswer.jsonl",
            ],
            "noanswer.jsonl:2",
        ),
        (
            &["--set", "model.path=empty-model", "--set", "sft.steps=0"],
            "empty-model",
        ),
        (&["--set", "rule=ba_batch"], "did you mean ba-batch?"),
    ];
    for (k, (args, want)) in cases.iter().enumerate() {
        let run_dir = format!("run{k}");
        let mut a = vec!["train", "--quiet", "--run-dir", &run_dir];
        a.extend_from_slice(args);
        let o = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .current_dir(p)
            .args(&a)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "case {k}: {}", err(&o));
        assert!(
            err(&o).contains(want),
            "case {k}: want {want:?} in {}",
            err(&o)
        );
        assert!(
            !p.join(&run_dir).join("metrics.jsonl").exists(),
            "case {k} trained anyway"
        );
    }
}

/// Starts `fulcrum train` on the small config with `extra`, waits for its first metrics line,
/// sends it SIGTERM `signals` times in a row, and returns how it ended.
fn train_and_signal(cwd: &Path, run: &str, extra: &[&str], signals: usize) -> Output {
    let mut args = vec!["train", "--quiet"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--run-dir", run]);
    let child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(cwd)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = cwd.join(run).join("metrics.jsonl");
    let t0 = Instant::now();
    while std::fs::read_to_string(&metrics).map_or(0, |t| t.lines().count()) < 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "no step after 300 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..signals {
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }
    child.wait_with_output().unwrap()
}

#[test]
fn sigterm_checkpoints_and_resume_ends_as_the_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let long = ["--set", "steps=6"];
    let whole = train(dir.path(), &[&long[..], &["--run-dir", "whole"]].concat());
    assert!(whole.status.success(), "{}", err(&whole));
    let whole_model = sha(&dir.path().join("whole/checkpoints/final/model.safetensors"));

    // One signal: the step finishes, its checkpoint is written, exit 130 with how to resume.
    // Two signals: exit at once; whatever was written is still a resumable run.
    for (run, signals) in [("once", 1), ("twice", 2)] {
        let o = train_and_signal(dir.path(), run, &long, signals);
        assert_eq!(o.status.code(), Some(130), "{run}: {}", err(&o));
        let path = dir.path().join(run);
        if signals == 1 {
            assert!(
                err(&o).contains("interrupted after GRPO step"),
                "{}",
                err(&o)
            );
            assert!(err(&o).contains(&format!("--resume {run}")), "{}", err(&o));
            let done = metrics(&path).len();
            assert!(done < 6, "the run was not interrupted: {done} steps");
            assert!(path.join(format!("checkpoints/step-{done}")).is_dir());
            assert!(!path.join("summary.json").exists());
        }
        let resumed = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .current_dir(dir.path())
            .args(["train", "--quiet", "--resume", run])
            .output()
            .unwrap();
        assert!(resumed.status.success(), "{run}: {}", err(&resumed));
        assert_eq!(metrics(&path), metrics(&dir.path().join("whole")), "{run}");
        assert_eq!(
            sha(&path.join("checkpoints/final/model.safetensors")),
            whole_model,
            "{run}"
        );
    }
}

#[test]
fn resume_refuses_a_changed_config_naming_the_keys_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let o = train(dir.path(), &["--run-dir", "r", "--set", "steps=2"]);
    assert!(o.status.success(), "{}", err(&o));
    std::fs::remove_file(dir.path().join("r/summary.json")).unwrap();
    let cfg = dir.path().join("r/config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("temperature = 1.0"), "{text}");
    std::fs::write(
        &cfg,
        text.replacen("temperature = 1.0", "temperature = 0.7", 1),
    )
    .unwrap();
    let resume = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .current_dir(dir.path())
            .args(["train", "--quiet", "--resume", "r"])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = resume(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("rollout.temperature") && err(&o).contains("--force"),
        "{}",
        err(&o)
    );
    assert!(!dir.path().join("r/summary.json").exists());
    let o = resume(&["--force"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("resuming anyway"), "{}", err(&o));
}

#[test]
fn device_flag_sets_the_device_and_a_bad_one_names_the_flag() {
    let run = |device: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .args(["train", "--print-config", "--device", device])
            .output()
            .unwrap()
    };
    let ok = run("cuda:1");
    assert!(ok.status.success());
    assert!(String::from_utf8_lossy(&ok.stdout).contains("device = \"cuda:1\""));
    let bad = run("tpu");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--device"));
}

#[test]
fn without_a_terminal_progress_is_a_plain_line_now_and_then_and_quiet_silences_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["train", "--run-dir", "runs/p"];
    args.extend_from_slice(SMALL);
    let o = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(dir.path())
        .args(&args)
        .output()
        .expect("fulcrum runs");
    let e = err(&o);
    assert!(o.status.success(), "{e}");
    // The phases' first and last positions always get their line (stderr is a pipe here).
    for want in [
        "sft 1/6: loss",
        "sft 6/6: loss",
        "grpo 1/4: reward",
        "grpo 4/4: reward",
    ] {
        assert!(e.contains(want), "no {want:?} in:\n{e}");
    }
    assert!(
        e.contains("train accuracy") && e.contains("tok/s") && e.contains("left"),
        "{e}"
    );
    assert!(
        e.contains("held-out accuracy"),
        "evaluations are said too:\n{e}"
    );
    let quiet = train(dir.path(), &["--run-dir", "runs/q"]);
    assert!(quiet.status.success(), "{}", err(&quiet));
    assert!(!err(&quiet).contains("grpo "), "--quiet: {}", err(&quiet));
}
