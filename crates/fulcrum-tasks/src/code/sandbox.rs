//! Running one untrusted Python program with limits, and killing everything it started.
//!
//! Four modes. [`crate::code::SandboxChoice::resolve`] picks one (`auto`: the first of bwrap,
//! namespaces, landlock that passes a live probe; never `unsafe-rlimit`) and says why; the
//! pick is printed once per process (see [`crate::code::sandbox_in_use`]).
//!
//! - **`bwrap`** (bubblewrap, Debian's `bubblewrap` package; binary from
//!   [`SandboxConfig::bwrap`]): `--unshare-all` (new user, pid, net, ipc, uts and cgroup
//!   namespaces: no network at all), `--die-with-parent`, `--new-session`, `--clearenv`,
//!   read-only `/usr` (plus the `/bin`, `/lib`, `/lib64` symlinks), fresh `/proc` and `/dev`, a
//!   size-limited tmpfs `/tmp`, and the run's fresh directory bound read-write at `/sandbox`;
//!   nothing else of the host is visible. bwrap itself starts with an empty environment, so its
//!   pid 1 (visible as `/proc/1`) holds no secret of ours. Where the bwrap binary supports them
//!   (0.5 and 0.8), the built-in modes' seccomp filter (`confine.rs`) and `--disable-userns`
//!   are added. Killing bwrap ends its pid namespace, and the kernel kills every process in it,
//!   including children that called `setsid()`.
//! - **`namespaces`** (built in, no external binary; `native.rs`): new mount, pid, network,
//!   IPC, UTS and cgroup namespaces — created as root when fulcrum is root, else inside an
//!   unprivileged user namespace — with a root of its own (read-only tmpfs `/`, read-only
//!   `/usr` and the lib/bin links, `/dev` with null, zero, full, random and urandom only, a
//!   size-limited tmpfs `/tmp`, the run's directory at `/sandbox`, no `/proc`), entered with
//!   `pivot_root`, so the host's files do not exist for the program. The program runs as uid
//!   65534 (when root) or as the caller's uid mapped to itself (no capabilities survive its
//!   exec), under the seccomp filter of `confine.rs` (no sockets, ptrace, io_uring, mounts,
//!   new namespaces, new sessions or process groups, keyrings, SysV IPC, BPF, perf, ...) and
//!   a Landlock ruleset (writes only in `/sandbox` and `/tmp`, reads only there, in `/usr` and
//!   the device nodes; no signals out of its domain) when the kernel has Landlock. A tiny init
//!   reaps inside the pid namespace; when the program exits or a limit hits, the namespace ends
//!   and the kernel kills everything in it.
//! - **`landlock`** (built in, for containers that refuse namespaces): no namespaces; Landlock
//!   (required) lets the program write only in its own directory and read only `/usr`, the
//!   lib/bin directories, that directory and the device nodes above (no `/proc`, no host
//!   `/tmp`, no home), forbids TCP bind/connect and signals or abstract sockets outside its
//!   domain (ABI 4 and 6, required unless root, where uid 65534 separates it from the
//!   runner); the seccomp filter refuses every socket, and refusing `setsid`/`setpgid` keeps
//!   every descendant in the run's process group, which is killed at the end.
//! - **`unsafe-rlimit`** (explicit opt-in only; never chosen by `auto`): the rlimits below, a
//!   new session, a fresh working directory, an empty environment, and (when fulcrum runs as
//!   root) a new network namespace and uid 65534. It does **not** hide or protect host files
//!   beyond permissions (as a non-root user the program can write wherever that user can),
//!   nor the host's process list, and a child that clears its environment *and* leaves the
//!   process group survives until its CPU-time limit. For programs you trust only.
//!
//! In every mode the program runs with rlimits set before exec: CPU seconds, address space,
//! file size, open files, processes (counted per uid: the runner's uid 65534 when root), no core
//! dumps; a wall-clock deadline; and captured stdout/stderr capped at `max_output_bytes` (the
//! program is killed when it writes more).

use std::fmt;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::choose::SandboxError;
use super::{bwrap, native};
use crate::error::{Result, TaskError};

/// The uid/gid programs run as when the runner is root.
pub const SANDBOX_UID: u32 = 65534;

/// The bubblewrap binary unless `FULCRUM_BWRAP` names another.
pub const DEFAULT_BWRAP: &str = "/usr/bin/bwrap";

/// How the program is isolated (see the module documentation for what each guarantees).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxMode {
    /// bubblewrap namespaces plus rlimits.
    Bwrap,
    /// Built-in mount, pid and network namespaces, seccomp, Landlock when present, rlimits.
    Namespaces,
    /// Built-in Landlock and seccomp without namespaces, rlimits.
    Landlock,
    /// rlimits, a new session and (as root) a network namespace and uid 65534: not a sandbox.
    UnsafeRlimit,
}

impl SandboxMode {
    /// Every mode, strongest first.
    pub const ALL: [SandboxMode; 4] = [
        SandboxMode::Bwrap,
        SandboxMode::Namespaces,
        SandboxMode::Landlock,
        SandboxMode::UnsafeRlimit,
    ];

    /// The name used in config, flags, reasons and logs.
    pub fn name(self) -> &'static str {
        match self {
            SandboxMode::Bwrap => "bwrap",
            SandboxMode::Namespaces => "namespaces",
            SandboxMode::Landlock => "landlock",
            SandboxMode::UnsafeRlimit => "unsafe-rlimit",
        }
    }

    /// Whether the mode contains file writes, network and processes (all but `unsafe-rlimit`).
    pub fn contains(self) -> bool {
        self != SandboxMode::UnsafeRlimit
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SandboxMode {
    type Err = SandboxError;
    fn from_str(s: &str) -> std::result::Result<Self, SandboxError> {
        SandboxMode::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                let valid = ["auto", "bwrap", "namespaces", "landlock", "unsafe-rlimit"];
                SandboxError::UnknownMode(
                    fulcrum_core::names::unknown_name("sandbox mode", s.trim(), &valid).to_string(),
                )
            })
    }
}

/// Limits and paths for one run.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Isolation mode.
    pub mode: SandboxMode,
    /// The Python interpreter (Debian's, under `/usr`, visible inside the sandbox).
    pub python: PathBuf,
    /// The bubblewrap binary (`FULCRUM_BWRAP`, else `/usr/bin/bwrap`).
    pub bwrap: PathBuf,
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
            bwrap: std::env::var_os("FULCRUM_BWRAP")
                .filter(|p| !p.is_empty())
                .map_or_else(|| PathBuf::from(DEFAULT_BWRAP), PathBuf::from),
            wall: Duration::from_secs(10),
            cpu_seconds: 5,
            memory_bytes: 1 << 30,
            max_processes: 256,
            max_file_bytes: 16 << 20,
            max_output_bytes: 1 << 20,
        }
    }
}

impl SandboxConfig {
    /// The rlimits set before exec: (resource, soft, hard).
    pub(crate) fn rlimits(&self) -> [(libc::__rlimit_resource_t, u64, u64); 6] {
        // CPU: SIGXCPU at the soft limit, SIGKILL one second later (for programs ignoring it).
        [
            (libc::RLIMIT_CPU, self.cpu_seconds, self.cpu_seconds + 1),
            (libc::RLIMIT_AS, self.memory_bytes, self.memory_bytes),
            (libc::RLIMIT_FSIZE, self.max_file_bytes, self.max_file_bytes),
            (libc::RLIMIT_NOFILE, 256, 256),
            (libc::RLIMIT_NPROC, self.max_processes, self.max_processes),
            (libc::RLIMIT_CORE, 0, 0),
        ]
    }
}

/// What happened to one program.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutput {
    /// The run's unique id (also in the program's environment as `FULCRUM_SANDBOX_ID`).
    pub id: String,
    /// Exit code, if the program exited normally.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did (landlock and unsafe-rlimit modes; bwrap and
    /// namespaces report 128 + n as exit code).
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

/// Whether this process runs as root (then programs run as [`SANDBOX_UID`]).
pub(crate) fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

/// The run's fresh directories, removed on drop: `top` (only traversable by others) holds
/// `work` (the program's own directory, owned by the uid it runs as) and, for the namespaces
/// mode, `root` (the mount point of its private root).
pub(crate) struct RunDir {
    pub(crate) top: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) root: PathBuf,
}

impl RunDir {
    fn new(id: &str) -> Result<RunDir> {
        use std::os::unix::fs::PermissionsExt;
        let top = std::env::temp_dir().join(format!("fulcrum-sbx-{id}"));
        let dir = RunDir {
            work: top.join("work"),
            root: top.join("root"),
            top,
        };
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
                .map_err(|e| TaskError::io(p, e))
        };
        for p in [&dir.top, &dir.work, &dir.root] {
            std::fs::create_dir(p).map_err(|e| TaskError::io(p, e))?;
        }
        // Others may pass through `top` to reach `work` (the program may run as uid 65534),
        // but not list it or write there.
        mode(&dir.top, 0o711)?;
        mode(&dir.root, 0o755)?;
        mode(&dir.work, 0o700)?;
        if is_root() {
            std::os::unix::fs::chown(&dir.work, Some(SANDBOX_UID), Some(SANDBOX_UID))
                .map_err(|e| TaskError::io(&dir.work, e))?;
        }
        Ok(dir)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        // remove_dir_all does not follow symlinks the program left, so it only deletes inside.
        let _ = std::fs::remove_dir_all(&self.top);
    }
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
pub fn run_python(cfg: &SandboxConfig, program: &str, stdin: &str) -> Result<RunOutput> {
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
    std::fs::write(&main, program).map_err(|e| TaskError::io(&main, e))?;

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
        TaskError::Sandbox(format!(
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
