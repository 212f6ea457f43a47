//! The built-in sandboxes: the `namespaces` and `landlock` modes (their guarantees are in
//! `sandbox.rs`).
//!
//! [`command`] prepares everything in the parent — paths as C strings, the mount plan, the
//! seccomp programs, a Landlock ruleset — so that between fork and exec the child only makes
//! system calls on prepared values: the parent has other threads, so the child must not take
//! locks they might hold.
//!
//! The namespaces mode runs three processes:
//! - **A**, std's child: a new session; new mount, pid, network, IPC, UTS and cgroup
//!   namespaces, created as root when fulcrum is root, otherwise (or when root may not) after
//!   dropping to uid 65534 inside a new user namespace that maps the uid to itself. A forks B
//!   and exits with B's status; it dies with the runner (parent-death signal).
//! - **B**, pid 1 of the new pid namespace: forks C, reaps orphans, and exits with C's status
//!   (128 + n for signal n). When B exits the kernel kills everything left in the namespace; B
//!   dies with A.
//! - **C**: builds the private root, `pivot_root`s into it, drops to uid 65534 when root,
//!   sets the rlimits, Landlock and seccomp, and std execs Python.
//!
//! The landlock mode is one process: new session, uid 65534 when root, rlimits, Landlock
//! (required), seccomp.
//!
//! Each step writes its number to a pipe before it runs: when the spawn fails, std reports only
//! an errno, and the last number names the step that failed.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use landlock::{
    CompatLevel, Compatible, PathBeneath, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
};
use libc::c_int;
use seccompiler::BpfProgram;

use super::config::{is_root, RunDir, SandboxConfig, SandboxMode, SANDBOX_UID};
use super::confine;
use super::error::StartError;
use super::layout::{check, cstring, host_rules, namespace_layout, remount, Op, Rules, MAX_OPS};

type Result<T> = std::result::Result<T, StartError>;

/// Every namespace but the user namespace (added when not root).
const NS_FLAGS: c_int = libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP;

/// The fixed steps, in the order of [`STEP_NAMES`]; mount steps follow them.
mod step {
    pub const SETSID: u8 = 0;
    pub const UNSHARE: u8 = 1;
    pub const DROP_UID: u8 = 2;
    pub const USER_NS: u8 = 3;
    pub const ID_MAP: u8 = 4;
    pub const FORK_INIT: u8 = 5;
    pub const FORK_PROGRAM: u8 = 6;
    pub const PRIVATE: u8 = 7;
    pub const PIVOT: u8 = 8;
    pub const READ_ONLY_ROOT: u8 = 9;
    pub const CHDIR: u8 = 10;
    pub const RLIMITS: u8 = 11;
    pub const LANDLOCK: u8 = 12;
    pub const SECCOMP: u8 = 13;
    pub const DEATH_SIGNAL: u8 = 14;
    pub const MOUNTS: u8 = 15;
}

// Each step is logged as one byte.
const _: () = assert!(step::MOUNTS as usize + MAX_OPS <= u8::MAX as usize);

const STEP_NAMES: [&str; step::MOUNTS as usize] = [
    "new session",
    "unshare mount, pid, network, IPC, UTS and cgroup namespaces (as root)",
    "drop to uid 65534",
    "unshare user, mount, pid, network, IPC, UTS and cgroup namespaces",
    "write the user namespace's uid and gid maps",
    "fork pid 1 of the new pid namespace",
    "fork the program",
    "make every mount private",
    "pivot_root into the private root",
    "remount the private root read-only",
    "chdir /sandbox",
    "set the rlimits",
    "apply the Landlock ruleset",
    "apply the seccomp filter",
    "set the parent-death signal",
];

/// The read end of the step pipe and the step names.
pub(crate) struct StepLog {
    read: OwnedFd,
    names: Vec<String>,
}

impl StepLog {
    /// ` at step "..."` for the last step the child began, or nothing.
    pub(crate) fn finish(self) -> String {
        let mut last = None;
        let mut buf = [0u8; 256];
        loop {
            // SAFETY: reading into a local buffer from our own non-blocking pipe.
            let n =
                unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            last = buf.get(n as usize - 1).copied();
        }
        last.and_then(|s| self.names.get(s as usize))
            .map(|n| format!(" at step \"{n}\""))
            .unwrap_or_default()
    }
}

/// Everything the child needs, prepared by the parent.
struct Plan {
    namespaces: bool,
    runner_is_root: bool,
    log: OwnedFd,
    ops: Vec<Op>,
    root: CString,
    /// uid and gid map lines when the runner is root and had to drop first, and when not.
    maps_nobody: (CString, CString),
    maps_self: (CString, CString),
    limits: [(libc::__rlimit_resource_t, u64, u64); 6],
    ruleset: Option<RulesetCreated>,
    rules: Rules,
    filters: &'static [BpfProgram],
}

impl Plan {
    fn step(&self, s: u8) {
        // SAFETY: a one-byte write to our pipe; a full pipe only loses the log.
        unsafe {
            libc::write(self.log.as_raw_fd(), (&s as *const u8).cast(), 1);
        }
    }

    /// The child's whole set-up: returns (in C, or the landlock mode's only process) to let
    /// std exec Python; A and B never return.
    fn child(&mut self) -> io::Result<()> {
        self.step(step::SETSID);
        // SAFETY: no preconditions.
        check(unsafe { libc::setsid() })?;
        if self.namespaces {
            let as_root = self.enter_namespaces()?;
            self.fork_init_and_program()?;
            self.build_root()?;
            if as_root {
                self.step(step::DROP_UID);
                drop_to_nobody()?;
            }
        } else if self.runner_is_root {
            self.step(step::DROP_UID);
            drop_to_nobody()?;
        }
        self.step(step::RLIMITS);
        for (res, soft, hard) in self.limits {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            // SAFETY: lim lives across the call.
            check(unsafe { libc::setrlimit(res, &lim) })?;
        }
        self.step(step::LANDLOCK);
        self.landlock()?;
        self.step(step::SECCOMP);
        for f in self.filters {
            seccompiler::apply_filter(f).map_err(|_| io::Error::last_os_error())?;
        }
        self.step(step::DEATH_SIGNAL);
        // Last: any credential change clears it. The parent is B, or the runner's thread.
        // SAFETY: no pointers.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) })?;
        Ok(())
    }

    /// A: the namespaces, as root when possible, else in a user namespace as uid 65534 (when
    /// root) or ourselves. Returns whether they were made as root (then C drops the uid).
    fn enter_namespaces(&self) -> io::Result<bool> {
        if self.runner_is_root {
            self.step(step::UNSHARE);
            // SAFETY: no pointers.
            if unsafe { libc::unshare(NS_FLAGS) } == 0 {
                return Ok(true);
            }
            // No CAP_SYS_ADMIN here (e.g. a container): an unprivileged user namespace, as
            // nobody, is the other way in.
            self.step(step::DROP_UID);
            drop_to_nobody()?;
            // SAFETY: no pointers. Dumpable again, so /proc/self's map files are ours to write.
            check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) })?;
        }
        self.step(step::USER_NS);
        // SAFETY: no pointers.
        check(unsafe { libc::unshare(NS_FLAGS | libc::CLONE_NEWUSER) })?;
        self.step(step::ID_MAP);
        let (uid, gid) = if self.runner_is_root {
            &self.maps_nobody
        } else {
            &self.maps_self
        };
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", uid.as_bytes())?;
        write_file(c"/proc/self/gid_map", gid.as_bytes())?;
        Ok(false)
    }

    /// A forks B (pid 1) and waits; B forks C and reaps; C returns.
    fn fork_init_and_program(&self) -> io::Result<()> {
        // SAFETY: no pointers.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) })?;
        self.step(step::FORK_INIT);
        // SAFETY: the child continues with this single thread's copy of prepared data.
        let init = unsafe { libc::fork() };
        check(init)?;
        if init > 0 {
            wait_and_exit(init, false);
        }
        // B: dies with A.
        // SAFETY: no pointers.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) })?;
        self.step(step::FORK_PROGRAM);
        // SAFETY: as above.
        let program = unsafe { libc::fork() };
        check(program)?;
        if program > 0 {
            wait_and_exit(program, true);
        }
        Ok(())
    }

    /// C: the private root, entered with pivot_root.
    fn build_root(&self) -> io::Result<()> {
        self.step(step::PRIVATE);
        let null = std::ptr::null::<libc::c_char>();
        // SAFETY: constant strings or null.
        check(unsafe {
            libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        })?;
        for (i, op) in self.ops.iter().enumerate() {
            self.step(step::MOUNTS + i as u8);
            op.run()?;
        }
        self.step(step::PIVOT);
        // SAFETY: NUL-terminated strings; pivot_root(".", ".") stacks the old root under the
        // new one, and the detached unmount then drops it.
        unsafe {
            check(libc::chdir(self.root.as_ptr()))?;
            check(libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as c_int)?;
            check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
            check(libc::chdir(c"/".as_ptr()))?;
        }
        self.step(step::READ_ONLY_ROOT);
        remount(c"/", libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV)?;
        self.step(step::CHDIR);
        // SAFETY: constant string.
        check(unsafe { libc::chdir(c"/sandbox".as_ptr()) })
    }

    fn landlock(&mut self) -> io::Result<()> {
        let required = !self.namespaces;
        let Some(mut ruleset) = self.ruleset.take() else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        for (path, access) in &self.rules {
            // SAFETY: NUL-terminated path; the fd is owned by the rule.
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
            check(fd)?;
            // SAFETY: fd was just opened and is owned by nothing else.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let rule = PathBeneath::new(fd, *access).set_compatibility(CompatLevel::BestEffort);
            ruleset = ruleset
                .add_rule(rule)
                .map_err(|_| io::Error::from_raw_os_error(libc::EPERM))?;
        }
        let status = ruleset
            .restrict_self()
            .map_err(|_| io::Error::from_raw_os_error(libc::EPERM))?;
        if required && status.ruleset == RulesetStatus::NotEnforced {
            return Err(io::Error::from_raw_os_error(libc::ENOSYS));
        }
        Ok(())
    }
}

fn drop_to_nobody() -> io::Result<()> {
    // SAFETY: no pointers but null with a zero count.
    unsafe {
        check(libc::setgroups(0, std::ptr::null()))?;
        check(libc::setgid(SANDBOX_UID))?;
        check(libc::setuid(SANDBOX_UID))
    }
}

fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: NUL-terminated path; data outlives the write.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        check(fd)?;
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

/// A and B: close every descriptor (the runner waits for the pipes to close), wait for
/// `child` (B also reaps orphans of the namespace), exit with its status.
fn wait_and_exit(child: libc::pid_t, reap_all: bool) -> ! {
    // SAFETY: closing our own descriptors and waiting for children; _exit never returns.
    unsafe {
        libc::close_range(0, u32::MAX, 0);
        let mut status: c_int = 0;
        let code = loop {
            let pid = libc::waitpid(if reap_all { -1 } else { child }, &mut status, 0);
            if pid == child {
                break if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else if libc::WIFSIGNALED(status) {
                    128 + libc::WTERMSIG(status)
                } else {
                    125
                };
            }
            if pid < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break 125;
            }
        };
        libc::_exit(code)
    }
}

/// The Python command of a built-in mode, with its set-up between fork and exec.
pub(crate) fn command(cfg: &SandboxConfig, dir: &RunDir, id: &str) -> Result<(Command, StepLog)> {
    let namespaces = cfg.mode == SandboxMode::Namespaces;
    let runner_is_root = is_root();
    let (labelled, rules) = if namespaces {
        namespace_layout(cfg, dir)?
    } else {
        (Vec::new(), host_rules(dir)?)
    };
    let ruleset = confine::ruleset(!namespaces, runner_is_root)
        .map_err(|e| StartError::Setup(format!("Landlock: {e}")))?;
    let filters = confine::seccomp_filters().map_err(StartError::Setup)?;
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 fills the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(StartError::Setup(format!(
            "pipe: {}",
            io::Error::last_os_error()
        )));
    }
    // SAFETY: both were just created and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let map = |id: u32| CString::new(format!("{id} {id} 1\n")).unwrap_or_default();
    let mut names: Vec<String> = STEP_NAMES.iter().map(|s| s.to_string()).collect();
    names.extend(labelled.iter().map(|(label, _)| label.clone()));
    let mut plan = Plan {
        namespaces,
        runner_is_root,
        log: write,
        ops: labelled.into_iter().map(|(_, op)| op).collect(),
        root: cstring(&dir.root)?,
        maps_nobody: (map(SANDBOX_UID), map(SANDBOX_UID)),
        maps_self: (map(uid), map(gid)),
        limits: cfg.rlimits(),
        ruleset: Some(ruleset),
        rules,
        filters,
    };
    let mut c = Command::new(&cfg.python);
    c.args(["-I", "-B", "main.py"]);
    c.env_clear();
    c.env("PATH", "/usr/bin:/bin");
    c.env("FULCRUM_SANDBOX_ID", id);
    if namespaces {
        c.env("HOME", "/sandbox");
    } else {
        c.current_dir(&dir.work);
        c.env("HOME", &dir.work);
        c.env("TMPDIR", &dir.work);
    }
    // SAFETY: `Plan::child` makes system calls on data prepared above; the Landlock and
    // seccomp crates' calls there do not allocate on success.
    unsafe {
        c.pre_exec(move || plan.child());
    }
    Ok((c, StepLog { read, names }))
}
