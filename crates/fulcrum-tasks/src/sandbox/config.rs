//! What every sandbox mode shares: the modes themselves ([`SandboxMode`], one spelling each), a
//! run's limits and paths ([`SandboxConfig`]), what happened to a program ([`RunOutput`]), and
//! the run's fresh directories ([`RunDir`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::StartError;

/// The uid/gid programs run as when the runner is root.
pub const SANDBOX_UID: u32 = 65534;

/// The bubblewrap binary unless `FULCRUM_BWRAP` names another.
pub const DEFAULT_BWRAP: &str = "/usr/bin/bwrap";

fulcrum_core::closed_set! {
    /// How the program is isolated (see the module documentation for what each guarantees).
    pub enum SandboxMode("sandbox mode") {
        /// bubblewrap namespaces plus rlimits.
        Bwrap = "bwrap",
        /// Built-in mount, pid and network namespaces, seccomp, Landlock when present, rlimits.
        Namespaces = "namespaces",
        /// Built-in Landlock and seccomp without namespaces, rlimits.
        Landlock = "landlock",
        /// rlimits, a new session and (as root) a network namespace and uid 65534: not a sandbox.
        UnsafeRlimit = "unsafe-rlimit",
    }
}

impl SandboxMode {
    /// Whether the mode contains file writes, network and processes (all but `unsafe-rlimit`).
    pub fn contains(self) -> bool {
        self != SandboxMode::UnsafeRlimit
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
    pub(crate) fn new(id: &str) -> Result<RunDir, StartError> {
        use std::os::unix::fs::PermissionsExt;
        let top = std::env::temp_dir().join(format!("fulcrum-sbx-{id}"));
        let dir = RunDir {
            work: top.join("work"),
            root: top.join("root"),
            top,
        };
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
                .map_err(|e| StartError::io(p, e))
        };
        for p in [&dir.top, &dir.work, &dir.root] {
            std::fs::create_dir(p).map_err(|e| StartError::io(p, e))?;
        }
        // Others may pass through `top` to reach `work` (the program may run as uid 65534),
        // but not list it or write there.
        mode(&dir.top, 0o711)?;
        mode(&dir.root, 0o755)?;
        mode(&dir.work, 0o700)?;
        if is_root() {
            std::os::unix::fs::chown(&dir.work, Some(SANDBOX_UID), Some(SANDBOX_UID))
                .map_err(|e| StartError::io(&dir.work, e))?;
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
