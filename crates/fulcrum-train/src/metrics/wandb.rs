//! Weights & Biases through its own Python SDK (`logging.wandb`): a sidecar process
//! (`wandb_sidecar.py`, run by `python3`, or `FULCRUM_PYTHON`) fed the run's records as JSON
//! lines. No part of W&B's protocol is written here.
//!
//! Start-up is checked: a missing `wandb` package, no login (online), or a failing `wandb.init`
//! is an error before the first step. After that the sidecar can never stop or slow training:
//! records go through a channel to a writer thread, and a sidecar that dies is said once and
//! dropped (the JSONL files stay complete). A resumed run logs to the same W&B run (its id is
//! kept in `<run_dir>/wandb-id`); W&B drops a step it already has, so no step is logged twice.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::config::{LoggingConfig, WandbMode};
use crate::error::TrainError;

const SIDECAR: &str = include_str!("wandb_sidecar.py");
/// What the sidecar's own lines start with on its stdout.
const PREFIX: &str = "fulcrum-wandb: ";
/// How long `wandb.init` may take (online, it reaches the server).
const INIT_TIMEOUT: Duration = Duration::from_secs(180);
/// How long the end of the run waits for the sidecar to upload and exit.
const FINISH_TIMEOUT: Duration = Duration::from_secs(300);

/// A running W&B sidecar.
pub struct Wandb {
    child: Child,
    records: Option<Sender<String>>,
    writer: Option<JoinHandle<()>>,
    said: Receiver<Value>,
    /// The run directory (W&B's files are under its `wandb/`).
    dir: PathBuf,
}

impl Wandb {
    /// Starts the sidecar for the run at `dir` (named `name`, config `config`) and waits for
    /// `wandb.init`; `resumed`: the run goes on from a checkpoint (same W&B run).
    pub fn start(
        cfg: &LoggingConfig,
        dir: &Path,
        name: &str,
        config: &Value,
        resumed: bool,
    ) -> Result<Wandb, TrainError> {
        let fail = |message: String| TrainError::Wandb { message };
        let id = run_id(dir, resumed)?;
        let python = std::env::var("FULCRUM_PYTHON").unwrap_or_else(|_| "python3".into());
        let mut child = Command::new(&python)
            .args(["-u", "-c", SIDECAR])
            .env("WANDB_SILENT", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| fail(format!("starting {python} (FULCRUM_PYTHON): {e}")))?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(fail("the sidecar has no pipes".into()));
        };
        let said = read_said(stdout);
        let init = json!({"init": {
            "project": cfg.wandb_project.clone().unwrap_or_else(|| "fulcrum".into()),
            "entity": cfg.wandb_entity,
            "mode": cfg.wandb_mode.name(),
            "dir": dir,
            "name": name,
            "id": id,
            "resume": "allow",
            "config": config,
        }});
        let sent = writeln!(stdin, "{init}");
        let t0 = Instant::now();
        let answer = loop {
            match said.recv_timeout(Duration::from_millis(200)) {
                Ok(v) => break Some(v),
                Err(RecvTimeoutError::Disconnected) => break None,
                Err(RecvTimeoutError::Timeout) if t0.elapsed() > INIT_TIMEOUT => {
                    let _ = child.kill();
                    return Err(fail(format!(
                        "wandb.init did not answer within {} s",
                        INIT_TIMEOUT.as_secs()
                    )));
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        };
        match answer {
            Some(v) if v["ready"] == true => {
                if let (Some(url), WandbMode::Online) = (v["url"].as_str(), cfg.wandb_mode) {
                    eprintln!("fulcrum: W&B run {url}");
                }
            }
            Some(v) => {
                let _ = child.wait();
                return Err(fail(v["error"].as_str().unwrap_or("failed").to_string()));
            }
            None => {
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                let why = sent.err().map(|e| format!(" ({e})")).unwrap_or_default();
                return Err(fail(format!("the sidecar ({python}) exited {status}{why}")));
            }
        }
        let (records, inbox) = channel::<String>();
        let writer = std::thread::Builder::new()
            .name("fulcrum-wandb".into())
            .spawn(move || write_records(stdin, inbox))
            .map_err(|e| fail(format!("starting its writer thread: {e}")))?;
        Ok(Wandb {
            child,
            records: Some(records),
            writer: Some(writer),
            said,
            dir: dir.to_path_buf(),
        })
    }

    /// Sends one record; false when the sidecar is gone (said once by the caller).
    pub fn send(&mut self, record: Value) -> bool {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return false;
        }
        self.records
            .as_ref()
            .is_some_and(|r| r.send(record.to_string()).is_ok())
    }

    /// Ends the W&B run with `summary` and the chart images `images` (name to path), and waits
    /// (a bounded time) for the sidecar to upload and exit.
    pub fn finish(mut self, summary: Value, images: Value) {
        self.send(json!({"finish": {"summary": summary, "images": images}}));
        // The writer ends when the channel closes, and closes the sidecar's stdin.
        self.records = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        let t0 = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if t0.elapsed() < FINISH_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                _ => {
                    eprintln!(
                        "fulcrum: the W&B sidecar did not finish within {} s; stopped \
                         (`wandb sync {}` uploads what it wrote)",
                        FINISH_TIMEOUT.as_secs(),
                        self.dir.join("wandb").join("latest-run").display()
                    );
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
            }
        }
        let finished = self.said.try_iter().any(|v| v["finished"] == true);
        if !finished {
            eprintln!("fulcrum: the W&B sidecar ended without finishing its run");
        }
    }
}

impl Drop for Wandb {
    fn drop(&mut self) {
        // A run that ends with an error: the sidecar sees its stdin close and finishes.
        self.records = None;
    }
}

/// The W&B run id of the run at `dir`: made on a fresh start and kept in `dir/wandb-id`, read
/// back on resume.
fn run_id(dir: &Path, resumed: bool) -> Result<String, TrainError> {
    let path = dir.join("wandb-id");
    if resumed {
        if let Ok(id) = std::fs::read_to_string(&path) {
            let id = id.trim().to_string();
            if !id.is_empty() {
                return Ok(id);
            }
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = fulcrum_core::rng::mix(nanos, u64::from(std::process::id()));
    let alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let id: String = (0..12)
        .map(|_| {
            let c = alphabet[(x % 36) as usize] as char;
            x /= 36;
            c
        })
        .collect();
    std::fs::write(&path, &id).map_err(TrainError::io(&path))?;
    Ok(id)
}

/// The sidecar's own lines on its stdout, parsed, as they come (the SDK's lines are dropped);
/// reading goes on to the end so that its pipe never fills.
fn read_said(stdout: std::process::ChildStdout) -> Receiver<Value> {
    let (tx, rx) = channel();
    let _ = std::thread::Builder::new()
        .name("fulcrum-wandb-out".into())
        .spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(v) = line
                    .strip_prefix(PREFIX)
                    .and_then(|j| serde_json::from_str::<Value>(j).ok())
                {
                    let _ = tx.send(v);
                }
            }
        });
    rx
}

/// Writes records to the sidecar until the channel closes or the sidecar stops reading.
fn write_records(mut stdin: ChildStdin, inbox: Receiver<String>) {
    for rec in inbox {
        if writeln!(stdin, "{rec}")
            .and_then(|_| stdin.flush())
            .is_err()
        {
            return;
        }
    }
}
