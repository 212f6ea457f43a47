//! Running one untrusted Python program with limits, and killing everything it started.
//!
//! Two modes, chosen by [`SandboxMode::detect`] (the choice is reported, never silent):
//!
//! - **`bwrap`** (bubblewrap, Debian's `bubblewrap` package): `--unshare-all` (new user, pid, net,
//!   ipc, uts and cgroup namespaces: no network at all), `--die-with-parent`, `--new-session`,
//!   `--clearenv`, read-only `/usr` (plus the `/bin`, `/lib`, `/lib64` symlinks), fresh `/proc`
//!   and `/dev`, a size-limited tmpfs `/tmp`, and the run's fresh temporary directory bound
//!   read-write at `/sandbox`; nothing else of the host is visible. When the run ends or a limit
//!   hits, killing bwrap ends its pid namespace, and the kernel kills every process in it,
//!   including children that called `setsid()`.
//! - **`rlimit`** (fallback when bwrap is absent or cannot start): the same rlimits, a new
//!   session, a fresh working directory, an empty environment, and (when fulcrum runs as root)
//!   a new network namespace and the unprivileged uid 65534, so the host's files are protected by
//!   permissions. After the run it kills the process group and every process whose environment
//!   carries the run's id, so detached children go too. It does **not** hide readable host files
//!   or the host's process list, and a child that clears its environment *and* leaves the
//!   process group survives until its CPU-time limit; use bwrap for untrusted code.
//!
//! In both modes the program runs with rlimits set before exec: CPU seconds, address space,
//! file size, open files, processes (counted per uid: the runner's uid 65534 when root), no core
//! dumps; a wall-clock deadline; and captured stdout/stderr capped at `max_output_bytes` (the
//! program is killed when it writes more).

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::error::{Result, TaskError};

/// The uid/gid programs run as when the runner is root.
pub const SANDBOX_UID: u32 = 65534;

/// How the program is isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// bubblewrap namespaces plus rlimits.
    Bwrap,
    /// rlimits, a new session and (as root) a new network namespace and uid 65534.
    Rlimit,
}

impl SandboxMode {
    /// bwrap when `/usr/bin/bwrap` exists and starts a trivial sandbox, else rlimit.
    pub fn detect() -> (SandboxMode, String) {
        let bwrap = Path::new("/usr/bin/bwrap");
        if !bwrap.exists() {
            return (
                SandboxMode::Rlimit,
                "bwrap not found at /usr/bin/bwrap".into(),
            );
        }
        let probe = SandboxConfig {
            mode: SandboxMode::Bwrap,
            ..SandboxConfig::default()
        };
        match run_python(&probe, "print('ok')", "") {
            Ok(out) if out.stdout.trim() == "ok" => (SandboxMode::Bwrap, "bwrap works".into()),
            Ok(out) => (
                SandboxMode::Rlimit,
                format!("bwrap probe failed: {}", out.stderr.trim()),
            ),
            Err(e) => (SandboxMode::Rlimit, format!("bwrap probe failed: {e}")),
        }
    }

    /// The name used in reasons and logs.
    pub fn name(self) -> &'static str {
        match self {
            SandboxMode::Bwrap => "bwrap",
            SandboxMode::Rlimit => "rlimit",
        }
    }
}

/// Limits and paths for one run.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Isolation mode.
    pub mode: SandboxMode,
    /// The Python interpreter (Debian's, visible inside the sandbox).
    pub python: PathBuf,
    /// Wall-clock limit.
    pub wall: Duration,
    /// CPU-time limit in seconds.
    pub cpu_seconds: u64,
    /// Address-space limit in bytes.
    pub memory_bytes: u64,
    /// Limit on processes of the sandbox uid (shared by concurrent runs when root).
    pub max_processes: u64,
    /// Largest file the program may write, in bytes (also the size of its tmpfs `/tmp`).
    pub max_file_bytes: u64,
    /// Most bytes kept of stdout and of stderr; writing more kills the program.
    pub max_output_bytes: usize,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            mode: SandboxMode::Bwrap,
            python: PathBuf::from("/usr/bin/python3"),
            wall: Duration::from_secs(10),
            cpu_seconds: 5,
            memory_bytes: 1 << 30,
            max_processes: 256,
            max_file_bytes: 16 << 20,
            max_output_bytes: 1 << 20,
        }
    }
}

/// What happened to one program.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutput {
    /// The run's unique id (also in the program's environment as `FULCRUM_SANDBOX_ID`).
    pub id: String,
    /// Exit code, if the program exited normally.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did (rlimit mode; bwrap reports 128 + n as exit code).
    pub signal: Option<i32>,
    /// Killed by the wall-clock deadline.
    pub timed_out: bool,
    /// Killed for writing more than `max_output_bytes`.
    pub output_overflow: bool,
    /// Captured stdout (lossy UTF-8, capped).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8, capped).
    pub stderr: String,
    /// Wall time.
    pub wall: Duration,
}

impl RunOutput {
    /// Exit code 0 and no limit hit.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.output_overflow
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(id: &str) -> Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("fulcrum-sbx-{id}"));
        std::fs::create_dir(&dir).map_err(|e| TaskError::io(&dir, e))?;
        use std::os::unix::fs::PermissionsExt;
        // The program runs as uid 65534 and must be able to write its own directory.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| TaskError::io(&dir, e))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bwrap_command(cfg: &SandboxConfig, dir: &Path, id: &str) -> Command {
    let mut c = Command::new("/usr/bin/bwrap");
    c.args([
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]);
    c.args(["--setenv", "PATH", "/usr/bin:/bin"]);
    c.args(["--setenv", "HOME", "/sandbox"]);
    c.args(["--setenv", "FULCRUM_SANDBOX_ID", id]);
    c.args(["--ro-bind", "/usr", "/usr"]);
    for (link, target) in [
        ("/bin", "usr/bin"),
        ("/lib", "usr/lib"),
        ("/lib64", "usr/lib64"),
    ] {
        if Path::new(link).exists() {
            c.args(["--symlink", target, link]);
        }
    }
    c.args(["--proc", "/proc", "--dev", "/dev"]);
    c.arg("--size").arg(cfg.max_file_bytes.to_string());
    c.args(["--tmpfs", "/tmp"]);
    c.arg("--bind").arg(dir).arg("/sandbox");
    c.args(["--chdir", "/sandbox"]);
    c.arg(&cfg.python).args(["-I", "-B", "main.py"]);
    c
}

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

/// Sets the rlimits and drops to the sandbox uid; runs in the child between fork and exec, so
/// it only calls async-signal-safe libc functions.
fn limit_child(cfg: &SandboxConfig, mode: SandboxMode) -> impl FnMut() -> std::io::Result<()> {
    // CPU: SIGXCPU at the soft limit, SIGKILL one second later (for programs ignoring it).
    let limits = [
        (libc::RLIMIT_CPU, cfg.cpu_seconds, cfg.cpu_seconds + 1),
        (libc::RLIMIT_AS, cfg.memory_bytes, cfg.memory_bytes),
        (libc::RLIMIT_FSIZE, cfg.max_file_bytes, cfg.max_file_bytes),
        (libc::RLIMIT_NOFILE, 256, 256),
        (libc::RLIMIT_NPROC, cfg.max_processes, cfg.max_processes),
        (libc::RLIMIT_CORE, 0, 0),
    ];
    move || {
        // SAFETY: plain libc calls on values owned by this closure; no allocation.
        unsafe {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getuid() == 0 {
                if mode == SandboxMode::Rlimit {
                    // No network for the fallback either (possible only as root).
                    libc::unshare(libc::CLONE_NEWNET);
                }
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(SANDBOX_UID) != 0
                    || libc::setuid(SANDBOX_UID) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
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

/// Kills every process whose environment holds `FULCRUM_SANDBOX_ID=<id>` (rlimit mode's
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
pub fn run_python(cfg: &SandboxConfig, program: &str, stdin: &str) -> Result<RunOutput> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let id = format!(
        "{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let dir = TempDir::new(&id)?;
    let main = dir.0.join("main.py");
    std::fs::write(&main, program).map_err(|e| TaskError::io(&main, e))?;

    let mut cmd = match cfg.mode {
        SandboxMode::Bwrap => bwrap_command(cfg, &dir.0, &id),
        SandboxMode::Rlimit => rlimit_command(cfg, &dir.0, &id),
    };
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure only makes async-signal-safe libc calls (see `limit_child`).
    unsafe {
        cmd.pre_exec(limit_child(cfg, cfg.mode));
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| TaskError::Sandbox(format!("cannot start {:?}: {e}", cmd.get_program())))?;
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
    // Whatever is left of the group goes too; in rlimit mode also every process that still
    // carries this run's id in its environment (children that left the process group).
    kill_all();
    if cfg.mode == SandboxMode::Rlimit {
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
