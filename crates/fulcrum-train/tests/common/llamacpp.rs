//! Real llama.cpp servers for the slow engine suites (scripts/llamacpp-server.sh, SmolLM2-135M
//! Q4_1), shared by `fulcrum-train/tests/engine_llamacpp.rs` and `fulcrum/tests/engine_ranks.rs`.
//! Each server runs on a free loopback port and is killed when dropped.
//!
//! The model file comes from `FULCRUM_SMOLLM2_GGUF` or `assets/`; the engine is installed by the
//! script into `.venv-engine` (`FULCRUM_ENGINE_VENV`) on first use. Missing either is a failure,
//! not a skip: these suites run only when asked for (`--ignored`).

#![allow(dead_code)] // each suite uses its own part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fulcrum_rollout::engines::llamacpp::LlamaCpp;
use fulcrum_rollout::EngineClient;

/// The checkout's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// SmolLM2-135M-Instruct Q4_1, as `fulcrum fetch-assets --only smollm2` puts it.
pub fn gguf() -> Result<PathBuf> {
    let p = std::env::var_os("FULCRUM_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("assets/SmolLM2-135M-Instruct.Q4_1.gguf"));
    if !p.is_file() {
        bail!(
            "{}: missing (fulcrum fetch-assets --only smollm2)",
            p.display()
        );
    }
    Ok(p)
}

/// A loopback port nothing listens on (at the time of asking).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// A URL where no server answers.
pub fn server_gone() -> Result<String> {
    Ok(format!("http://127.0.0.1:{}", free_port()?))
}

/// A server started by scripts/llamacpp-server.sh, killed on drop.
pub struct Server {
    child: Child,
    pub url: String,
}

impl Server {
    /// A server of `model` with 4 slots and `threads` threads, once it answers `/health`.
    pub fn start_with(model: &Path, threads: usize) -> Result<Server> {
        let port = free_port()?;
        let child = Command::new(root().join("scripts/llamacpp-server.sh"))
            .arg(model)
            .arg(port.to_string())
            .args(["--slots", "4", "--ctx", "1024", "--verbosity", "0"])
            .args(["--threads", &threads.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting scripts/llamacpp-server.sh")?;
        let url = format!("http://127.0.0.1:{port}");
        let mut server = Server { child, url };
        let client = LlamaCpp::new(&server.url, Duration::from_secs(5));
        let t0 = Instant::now();
        // The first start may install the engine (a pip install).
        while client.health().is_err() {
            if let Some(status) = server.child.try_wait()? {
                bail!("{}: the server exited ({status})", server.url);
            }
            if t0.elapsed() > Duration::from_secs(300) {
                server.kill();
                bail!("{} did not come up within 300 s", server.url);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(server)
    }

    /// [`Server::start_with`] two threads.
    pub fn start(model: &Path) -> Result<Server> {
        Server::start_with(model, 2)
    }

    pub fn client(&self) -> LlamaCpp {
        LlamaCpp::new(&self.url, Duration::from_secs(120))
    }

    /// The processes the front started (its llama-servers), from /proc.
    pub fn children(&self) -> Result<Vec<u32>> {
        let front = self.child.id();
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc")? {
            let Ok(pid) = entry?.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            // /proc/PID/stat: "pid (comm) state ppid ...", comm may hold spaces and parentheses.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(front) {
                out.push(pid);
            }
        }
        Ok(out)
    }

    /// The front's exit status, once it has exited within `limit`.
    pub fn exit_within(&mut self, limit: Duration) -> Result<std::process::ExitStatus> {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if t0.elapsed() > limit {
                bail!("{} still running after {limit:?}", self.url);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The lines of a run's metrics.jsonl.
pub fn run_metrics(dir: &Path) -> Result<Vec<serde_json::Value>> {
    let path = dir.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(text
        .lines()
        .map(serde_json::from_str)
        .collect::<std::result::Result<_, _>>()?)
}

/// The files of a run's weight pushes still on disk (the last version's only, once it loaded).
pub fn pushed_files(run_dir: &Path) -> Result<Vec<String>> {
    Ok(std::fs::read_dir(run_dir.join("engine-weights"))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect())
}

/// The `--set` overrides of a short GRPO run of SmolLM2 on one-digit additions against the
/// llama.cpp servers at `urls`.
pub fn engine_sets(urls: &[&str], steps: u64) -> Result<Vec<String>> {
    let gguf = gguf()?;
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    let data = root().join("data/arith/add_1digit.jsonl");
    Ok(vec![
        format!("model.path={:?}", gguf.display().to_string()),
        format!("task.path={:?}", data.display().to_string()),
        "task.name=\"jsonl\"".into(),
        format!("steps={steps}"),
        "sft.steps=0".into(),
        "rollout.engine=\"llamacpp\"".into(),
        format!("rollout.engine_urls=[{}]", urls.join(",")),
        "rollout.engine_max_failures=1".into(),
        "rollout.engine_timeout_s=120".into(),
        "rollout.prompts_per_step=4".into(),
        "rollout.group_size=4".into(),
        "rollout.max_prompt_len=64".into(),
        "rollout.max_response_len=24".into(),
        "rollout.is_cap=2.0".into(),
        "ppo.micro_batch_size=8".into(),
        "optim.lr=2e-5".into(),
        "eval.prompts=4".into(),
        "eval_every=0".into(),
        "checkpoint_every=0".into(),
    ])
}

/// A scratch folder beside the build, not in /tmp: every weight push writes a full f16 GGUF
/// (270 MB for SmolLM2-135M), and /tmp may be a small tmpfs.
pub fn scratch() -> std::io::Result<tempfile::TempDir> {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))
}
