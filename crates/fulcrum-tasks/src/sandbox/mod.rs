//! The sandbox of untrusted programs: it runs one Python program with limits and kills
//! everything it started. It knows nothing of tasks or rewards (`code/` scores programs with it).
//!
//! Four modes. [`SandboxChoice::resolve`] picks one (`auto`: the first of bwrap,
//! namespaces, landlock that passes a live probe; never `unsafe-rlimit`) and says why; the
//! pick is printed once per process (see [`sandbox_in_use`]).
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
//!
//! Files: `config.rs` (the modes, limits, a run's output and directories), `run.rs`
//! ([`run_python`]), `choose.rs` (which mode this process uses, probed once), `bwrap.rs` and
//! `native.rs` (the modes' commands), `layout.rs` and `confine.rs` (the built-in modes' root,
//! seccomp filter and Landlock rules), `error.rs`.

mod bwrap;
mod choose;
mod config;
mod confine;
mod error;
mod layout;
mod native;
mod run;

pub use choose::{
    probe, sandbox_choice, sandbox_in_use, set_sandbox_choice, Chosen, SandboxChoice, SandboxError,
    SANDBOX_ENV,
};
pub use config::{RunOutput, SandboxConfig, SandboxMode, DEFAULT_BWRAP, SANDBOX_UID};
pub use error::StartError;
pub use run::run_python;
