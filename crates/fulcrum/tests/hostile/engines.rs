//! engines: rollout-engine servers that accept connections and never answer. The run must not
//! wait out the request timeout (`rollout.engine_timeout_s`, 600 s by default): a server that
//! does not answer the health probe fails the run within seconds, naming it; and a SIGTERM while
//! the trainer waits on a generation, a weight push or a background draw stops the run within
//! seconds, with exit status 130 and the way to resume. Every wait here is bounded, so that a
//! regression fails instead of hanging.

#[allow(unused_imports)]
use super::*;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "../../../fulcrum-rollout/tests/common/http_request.rs"]
mod http_request;
use http_request::read_request;

/// How long a silent server may hold a run up: the probe timeout (5 s) and start-up, with room
/// for a loaded machine; far below the 600 s request timeout it used to wait.
const FAILS_WITHIN: Duration = Duration::from_secs(60);
/// How long a run may take to stop after SIGTERM ("within seconds").
const STOPS_WITHIN: Duration = Duration::from_secs(10);
/// How long a run may take to reach the wait the test interrupts (start-up and a step or two of
/// the tiny model).
const REACHES_WITHIN: Duration = Duration::from_secs(180);

/// A `fulcrum train` in the background, its stdout and stderr read as they come.
struct Running {
    child: Child,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

impl Running {
    /// `fulcrum train --quiet` with the small config, then `extra`, in `cwd`.
    fn train(cwd: &Path, extra: &[&str]) -> Running {
        let mut args = vec!["train", "--quiet"];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(extra);
        let mut child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .current_dir(cwd)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the fulcrum binary runs");
        let out = child.stdout.take().map(drain);
        let err = child.stderr.take().map(drain);
        Running { child, out, err }
    }

    fn sigterm(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on our own child's pid, which it still holds (not yet waited for).
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("waiting for fulcrum")
    }

    /// Kills the run and fails the test with what it wrote.
    fn fail(&mut self, why: String) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let err = self.err.take().map(|h| h.join().unwrap_or_default());
        panic!(
            "{why}\nstderr: {}",
            String::from_utf8_lossy(&err.unwrap_or_default())
        );
    }

    /// Waits at most `limit` for the run to end; its output and how long it took.
    fn finish(mut self, limit: Duration) -> (Output, Duration) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            if t0.elapsed() > limit {
                self.fail(format!("still running after {limit:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = t0.elapsed();
        let join = |h: Option<JoinHandle<Vec<u8>>>| h.map(|h| h.join().unwrap_or_default());
        let output = Output {
            status,
            stdout: join(self.out.take()).unwrap_or_default(),
            stderr: join(self.err.take()).unwrap_or_default(),
        };
        (output, took)
    }
}

/// What a fake engine does with a request: the JSON to answer, or `None` to hold it without a
/// word until the client goes away.
type Answer = dyn Fn(&str, &Value) -> Option<Value> + Send + Sync;

/// A fake engine server on loopback; every request's path is sent to `seen` as it arrives.
struct Fake {
    url: String,
    seen: Receiver<String>,
}

impl Fake {
    fn start(answer: Arc<Answer>) -> Fake {
        let l = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!(
            "http://127.0.0.1:{}",
            l.local_addr().expect("an address").port()
        );
        let (tx, seen) = channel();
        std::thread::spawn(move || {
            for stream in l.incoming().flatten() {
                let (answer, tx) = (Arc::clone(&answer), tx.clone());
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let Some((path, body)) = read_request(&stream) else {
                        return;
                    };
                    let _ = tx.send(path.clone());
                    match answer(&path, &body) {
                        Some(reply) => {
                            let text = reply.to_string();
                            let _ = write!(
                                stream,
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                                 Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
                                text.len()
                            );
                        }
                        None => {
                            let _ = stream.read(&mut [0u8; 1]);
                        }
                    }
                });
            }
        });
        Fake { url, seen }
    }

    /// Waits (at most `limit`) until a request for `path` has arrived, while `run` runs.
    fn wait_for(&self, path: &str, run: &mut Running, limit: Duration) {
        let t0 = Instant::now();
        loop {
            if let Ok(p) = self.seen.recv_timeout(Duration::from_millis(50)) {
                if p == path {
                    return;
                }
            }
            if let Some(status) = run.exited() {
                run.fail(format!("fulcrum ended ({status}) before asking for {path}"));
            }
            if t0.elapsed() > limit {
                run.fail(format!("no request for {path} within {limit:?}"));
            }
        }
    }
}

/// SGLang's server, as far as the trainer uses it: `/health`, the weight push
/// (`/update_weights_from_disk`) and `/generate`, each answered or held as `hold` says.
fn sglang(hold: impl Fn(&str) -> bool + Send + Sync + 'static) -> Fake {
    Fake::start(Arc::new(move |path: &str, body: &Value| {
        if hold(path) {
            return None;
        }
        match path {
            "/health" => Some(json!({})),
            "/update_weights_from_disk" => Some(json!({"success": true, "message": "ok"})),
            "/generate" => {
                let n = body
                    .pointer("/sampling_params/n")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                let one = json!({
                    "output_ids": [5, 6, 7],
                    "meta_info": {
                        "output_token_logprobs": [[-1.0, 5, null], [-1.0, 6, null], [-1.0, 7, null]],
                        "finish_reason": {"type": "length"},
                    },
                });
                Some(Value::Array(vec![one; n as usize]))
            }
            _ => None,
        }
    }))
}

/// The settings of a run in `run/` on the engine `kind` at `url`, without the warm-up.
fn on_engine(kind: &str, url: &str) -> Vec<String> {
    let sets = [
        "sft.steps=0".to_string(),
        format!("rollout.engine={kind}"),
        format!("rollout.engine_urls=[\"{url}\"]"),
    ];
    let mut args = vec!["--run-dir".to_string(), "run".to_string()];
    args.extend(sets.into_iter().flat_map(|kv| ["--set".to_string(), kv]));
    args
}

/// Sends SIGTERM to `run` and checks it ends within [`STOPS_WITHIN`], with status 130, no panic,
/// and every one of `names` (and the way to resume) in its message; returns that message.
#[track_caller]
fn stops_on_sigterm(run: Running, names: &[&str]) -> String {
    run.sigterm();
    let (out, took) = run.finish(STOPS_WITHIN);
    let e = stderr(&out);
    eprintln!("stopped {took:?} after SIGTERM: {e}");
    assert_eq!(
        out.status.code(),
        Some(130),
        "exit status {:?}: {e}",
        out.status
    );
    assert!(!e.contains("panicked"), "a panic: {e}");
    for n in names.iter().chain(&["fulcrum train --resume", "cut short"]) {
        assert!(e.contains(n), "{n:?} is not named in: {e}");
    }
    e
}

#[test]
fn a_server_that_never_answers_fails_the_run_fast_naming_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Bound and listening, never accepting: the kernel takes the connection, nobody answers.
    let silent = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!(
        "http://127.0.0.1:{}",
        silent.local_addr().expect("an address").port()
    );
    let set = on_engine("llamacpp", &url);
    let extra: Vec<&str> = set.iter().map(String::as_str).collect();
    let (out, took) = Running::train(dir.path(), &extra).finish(FAILS_WITHIN);
    refused(
        &out,
        &[
            &url,
            "/health",
            "no answer within 5 s",
            "no rollout engine is left",
        ],
    );
    eprintln!("failed {took:?} after the start");
    drop(silent);
}

#[test]
fn sigterm_while_a_generation_hangs_stops_the_run_within_seconds() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let fake = sglang(|path| path == "/generate");
    let set = on_engine("sglang", &fake.url);
    let extra: Vec<&str> = set.iter().map(String::as_str).collect();
    let mut run = Running::train(dir.path(), &extra);
    fake.wait_for("/generate", &mut run, REACHES_WITHIN);
    stops_on_sigterm(
        run,
        &[
            "interrupted after GRPO step 0",
            "step 1 was cut short",
            &format!("waiting on the rollout engines {}", fake.url),
            "checkpoint run/checkpoints/step-0 written",
        ],
    );
}

#[test]
fn sigterm_while_a_weight_push_hangs_stops_the_run_within_seconds() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let fake = sglang(|path| path == "/update_weights_from_disk");
    let set = on_engine("sglang", &fake.url);
    let extra: Vec<&str> = set.iter().map(String::as_str).collect();
    let mut run = Running::train(dir.path(), &extra);
    fake.wait_for("/update_weights_from_disk", &mut run, REACHES_WITHIN);
    stops_on_sigterm(
        run,
        &[
            "interrupted after GRPO step 0",
            &format!("{} asked to load weights v0", fake.url),
        ],
    );
}

#[test]
fn sigterm_while_a_background_draw_hangs_stops_the_run_within_seconds() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Step 1's own draw (one request per prompt, 2 prompts) is answered; the draw sampled
    // ahead for step 2 (`rollout.overlap`) is held.
    let generations = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&generations);
    let fake =
        sglang(move |path| path == "/generate" && counted.fetch_add(1, Ordering::SeqCst) >= 2);
    let mut set = on_engine("sglang", &fake.url);
    for kv in ["rollout.overlap=true", "rollout.is_cap=2.0"] {
        set.extend(["--set".to_string(), kv.to_string()]);
    }
    let extra: Vec<&str> = set.iter().map(String::as_str).collect();
    let mut run = Running::train(dir.path(), &extra);
    // Step 1 checkpoints (checkpoint_every = 1) and step 2 then waits for its draw.
    let step1 = dir.path().join("run/checkpoints/step-1");
    let t0 = Instant::now();
    while !step1.is_dir() || generations.load(Ordering::SeqCst) < 3 {
        if let Some(status) = run.exited() {
            run.fail(format!(
                "fulcrum ended ({status}) before checkpointing step 1"
            ));
        }
        if t0.elapsed() > REACHES_WITHIN {
            run.fail(format!(
                "{} and the draw ahead not there within {REACHES_WITHIN:?}",
                step1.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stops_on_sigterm(
        run,
        &[
            "interrupted after GRPO step 1",
            "step 2 was cut short",
            "checkpoint run/checkpoints/step-1 written",
        ],
    );
}

#[test]
fn sigterm_after_steps_without_a_checkpoint_checkpoints_the_last_finished_step() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Step 1 (two requests) is answered; step 2's draw is held. No checkpoint before step 10.
    let generations = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&generations);
    let fake =
        sglang(move |path| path == "/generate" && counted.fetch_add(1, Ordering::SeqCst) >= 2);
    let mut set = on_engine("sglang", &fake.url);
    set.extend(["--set".to_string(), "checkpoint_every=10".to_string()]);
    let extra: Vec<&str> = set.iter().map(String::as_str).collect();
    let mut run = Running::train(dir.path(), &extra);
    let t0 = Instant::now();
    while generations.load(Ordering::SeqCst) < 3 {
        if let Some(status) = run.exited() {
            run.fail(format!("fulcrum ended ({status}) before step 2's draw"));
        }
        if t0.elapsed() > REACHES_WITHIN {
            run.fail(format!("no draw for step 2 within {REACHES_WITHIN:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stops_on_sigterm(
        run,
        &[
            "interrupted after GRPO step 1",
            "step 2 was cut short",
            "checkpoint run/checkpoints/step-1 written",
        ],
    );
    // Step 1 was not a scheduled checkpoint: it is written now, so nothing finished is lost.
    assert!(dir
        .path()
        .join("run/checkpoints/step-1/manifest.json")
        .exists());
}
