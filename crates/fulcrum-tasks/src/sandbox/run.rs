//! Running one untrusted Python program in the chosen mode ([`run_python`]): its fresh
//! directory, the mode's command (`bwrap.rs`, `native.rs`, or plain rlimits), the deadline, the
//! capped output, and the kill of everything it started.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::config::{RunDir, RunOutput, SandboxConfig, SandboxMode, SANDBOX_UID};
use super::error::StartError;
use super::{bwrap, native};

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn rlimit_command(cfg: &SandboxConfig, dir: &Path, id: &str) -> Command {
    let mut c = Command::new(&cfg.python);
    c.args(["-I", "-B", "main.py"]);
    c.current_dir(dir);
    c.env_clear();
    c.env("PATH", "/usr/bin:/bin");
    c.env("HOME", dir);
    c.env("FULCRUM_SANDBOX_ID", id);
    c
}

/// Sets the rlimits and drops to the sandbox uid (bwrap and unsafe-rlimit modes), and lets
/// `inherit` survive exec; runs in the child between fork and exec, so it only calls
/// async-signal-safe libc functions.
fn limit_child(
    cfg: &SandboxConfig,
    mode: SandboxMode,
    inherit: Vec<RawFd>,
) -> impl FnMut() -> std::io::Result<()> {
    let limits = cfg.rlimits();
    move || {
        // SAFETY: plain libc calls on values owned by this closure; no allocation.
        unsafe {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for &fd in &inherit {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::getuid() == 0 {
                if mode == SandboxMode::UnsafeRlimit {
                    // No network for the weak mode either (possible only as root).
                    libc::unshare(libc::CLONE_NEWNET);
                }
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(SANDBOX_UID) != 0
                    || libc::setuid(SANDBOX_UID) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // After the uid change: changing credentials clears the parent-death signal.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            for (res, soft, hard) in limits {
                let lim = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(res, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// Reads a pipe up to `cap` bytes; past that, raises `overflow` and stops.
fn spawn_reader(
    mut pipe: impl Read + Send + 'static,
    cap: usize,
    overflow: Arc<AtomicBool>,
) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if buf.len() + n > cap {
                        let room = cap - buf.len();
                        buf.extend_from_slice(&chunk[..room]);
                        overflow.store(true, Ordering::SeqCst);
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
            }
        }
        let _ = tx.send(buf);
    });
    rx
}

/// Kills every process whose environment holds `FULCRUM_SANDBOX_ID=<id>` (unsafe-rlimit mode's
/// substitute for a pid namespace; needs permission to read other processes' environments,
/// which root and the same uid have).
fn kill_tagged(id: &str) {
    let marker = format!("FULCRUM_SANDBOX_ID={id}");
    for _ in 0..20 {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return;
        };
        let mut found = false;
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(env) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if env.split(|&b| b == 0).any(|kv| kv == marker.as_bytes()) {
                found = true;
                // SAFETY: signalling a process that carries our run's id.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        if !found {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `program` (Python source) with `stdin`, under `cfg`'s mode and limits.
///
/// An error means the sandbox could not start; everything the program does (crash, timeout,
/// flood) is reported in [`RunOutput`].
pub fn run_python(
    cfg: &SandboxConfig,
    program: &str,
    stdin: &str,
) -> Result<RunOutput, StartError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let id = format!(
        "{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let dir = RunDir::new(&id)?;
    let main = dir.work.join("main.py");
    std::fs::write(&main, program).map_err(|e| StartError::io(&main, e))?;

    let mut steps = None;
    let mut filters = Vec::new();
    let mut cmd = match cfg.mode {
        SandboxMode::Bwrap => {
            let (cmd, fds) = bwrap::command(cfg, &dir.work, &id)?;
            filters = fds;
            cmd
        }
        SandboxMode::UnsafeRlimit => rlimit_command(cfg, &dir.work, &id),
        SandboxMode::Namespaces | SandboxMode::Landlock => {
            let (cmd, log) = native::command(cfg, &dir, &id)?;
            steps = Some(log);
            cmd
        }
    };
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if matches!(cfg.mode, SandboxMode::Bwrap | SandboxMode::UnsafeRlimit) {
        // SAFETY: the closure only makes async-signal-safe libc calls (see `limit_child`).
        let inherit = filters.iter().map(|f| f.as_raw_fd()).collect();
        unsafe {
            cmd.pre_exec(limit_child(cfg, cfg.mode, inherit));
        }
    }
    let start = Instant::now();
    let spawned = cmd.spawn();
    // The built-in modes log each set-up step, so a failure names the step that failed.
    let failed_step = steps.map(|s| s.finish()).unwrap_or_default();
    let mut child = spawned.map_err(|e| {
        StartError::Setup(format!(
            "cannot start {} mode ({:?}){failed_step}: {e}",
            cfg.mode,
            cmd.get_program()
        ))
    })?;
    // bwrap has read its filters by now or will read them from its own descriptors.
    drop(cmd);
    drop(filters);
    let pgid = child.id() as libc::pid_t;
    let overflow = Arc::new(AtomicBool::new(false));
    let out_rx = child
        .stdout
        .take()
        .map(|p| spawn_reader(p, cfg.max_output_bytes, overflow.clone()));
    let err_rx = child
        .stderr
        .take()
        .map(|p| spawn_reader(p, cfg.max_output_bytes, overflow.clone()));
    if let Some(mut sin) = child.stdin.take() {
        let data = stdin.as_bytes().to_vec();
        std::thread::spawn(move || {
            let _ = sin.write_all(&data);
        });
    }
    let kill_all = || {
        // SAFETY: signalling our own child's process group.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    };
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(_) => break None,
        }
        if overflow.load(Ordering::SeqCst) {
            kill_all();
        } else if start.elapsed() > cfg.wall {
            timed_out = true;
            kill_all();
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    // Whatever is left of the group goes too (in the landlock mode every descendant is still
    // in it: seccomp refuses setsid and setpgid); in unsafe-rlimit mode also every process
    // that still carries this run's id in its environment (children that left the group).
    kill_all();
    if cfg.mode == SandboxMode::UnsafeRlimit {
        kill_tagged(&id);
    }
    let collect = |rx: Option<mpsc::Receiver<Vec<u8>>>| {
        rx.and_then(|r| r.recv_timeout(Duration::from_millis(500)).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let stdout = collect(out_rx);
    let stderr = collect(err_rx);
    Ok(RunOutput {
        id,
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s)),
        timed_out,
        output_overflow: overflow.load(Ordering::SeqCst),
        stdout,
        stderr,
        wall: start.elapsed(),
    })
}
