//! The bwrap mode's command line (guarantees: `sandbox.rs`), and what the bwrap binary at hand
//! supports.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};

use super::config::SandboxConfig;
use super::confine;
use super::error::StartError;

type Result<T> = std::result::Result<T, StartError>;

/// What a bwrap binary supports beyond its 0.4 basics (older Debian and Ubuntu ship older
/// versions), from its `--help`; asked once per binary.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BwrapFeatures {
    /// `--add-seccomp-fd` (bubblewrap 0.5).
    pub(crate) seccomp: bool,
    /// `--disable-userns` (bubblewrap 0.8).
    pub(crate) disable_userns: bool,
}

pub(crate) fn features(bwrap: &Path) -> BwrapFeatures {
    static SEEN: Mutex<Vec<(PathBuf, BwrapFeatures)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, f)) = seen.iter().find(|(p, _)| p == bwrap) {
        return *f;
    }
    let help = Command::new(bwrap)
        .arg("--help")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let f = BwrapFeatures {
        seccomp: help.contains("--add-seccomp-fd"),
        disable_userns: help.contains("--disable-userns"),
    };
    seen.push((bwrap.to_path_buf(), f));
    f
}

/// The bwrap command, and the pipes holding its seccomp programs (the child keeps them open
/// across exec for bwrap to read).
pub(crate) fn command(
    cfg: &SandboxConfig,
    dir: &Path,
    id: &str,
) -> Result<(Command, Vec<OwnedFd>)> {
    let features = features(&cfg.bwrap);
    let mut c = Command::new(&cfg.bwrap);
    // bwrap's own process is pid 1 inside, readable as /proc/1: it must not carry our
    // environment (API keys and the like), so it gets none.
    c.env_clear();
    c.args([
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]);
    if features.disable_userns {
        // No nested user namespaces: they would give the program capabilities over new
        // namespaces of its own, kernel attack surface it has no use for.
        c.args(["--unshare-user", "--disable-userns"]);
    }
    let mut filters = Vec::new();
    if features.seccomp {
        // The same seccomp filter as the built-in modes, loaded by bwrap just before exec.
        for program in confine::seccomp_filters().map_err(StartError::Setup)? {
            let fd = filter_pipe(&confine::filter_bytes(program))?;
            c.arg("--add-seccomp-fd").arg(fd.as_raw_fd().to_string());
            filters.push(fd);
        }
    }
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
    Ok((c, filters))
}

/// A pipe holding `bytes` (a compiled filter, far below the pipe's capacity), write end closed.
fn filter_pipe(bytes: &[u8]) -> Result<OwnedFd> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(StartError::Setup(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: both were just created and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    std::fs::File::from(write)
        .write_all(bytes)
        .map_err(|e| StartError::Setup(format!("seccomp filter pipe: {e}")))?;
    Ok(read)
}
