//! The harness of the hostile-program suites (`sandbox_hostile.rs`, `sandbox_escape.rs`).
//!
//! `FULCRUM_TEST_SANDBOX` picks the sandbox the suites run in:
//! - unset or `auto`: what fulcrum would pick here (when nothing contains programs, every
//!   program must be refused with the reason);
//! - `bwrap`, `namespaces`, `landlock`, `unsafe-rlimit`: exactly that mode (an error when this
//!   machine cannot run it);
//! - `bwrap-absent`: `auto` with the bwrap binary missing; `bwrap-broken`: `auto` with a fake
//!   bwrap that fails: both must fall back to a containing built-in mode.
//!
//! `scripts/test-sandbox.sh` runs both suites in every mode; `FULCRUM_SANDBOX_REPORT=FILE`
//! appends one JSON line per program and mode (the table in `docs/code-sandbox.md`).
//!
//! Each hostile program is written to *succeed* only if its attack works: it attacks, then the
//! test code asserts the attack's effect, so a contained attack fails the tests and scores 0.
//! Where the attack has an effect outside, the test also looks for it on the host afterwards.
//! In `unsafe-rlimit` mode the programs marked weak are measured and recorded, not asserted:
//! that mode does not contain them, and says so.

#![allow(dead_code)] // each suite uses part of the harness

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use fulcrum_tasks::code::{CodeRunner, Outcome, TestSpec};
use fulcrum_tasks::sandbox::{SandboxChoice, SandboxConfig, SandboxMode};

static SERIAL: Mutex<()> = Mutex::new(());

/// The sandbox the suite runs in.
pub struct Setup {
    /// `FULCRUM_TEST_SANDBOX`, or `auto`.
    pub label: String,
    /// The mode in use; `None` when `auto` refused (nothing contains programs here).
    pub mode: Option<SandboxMode>,
    bwrap: PathBuf,
    _fake: Option<HostDir>,
}

pub fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        adopt_orphans();
        let label = std::env::var("FULCRUM_TEST_SANDBOX").unwrap_or_else(|_| "auto".into());
        let mut fake = None;
        let bwrap = match label.as_str() {
            "bwrap-absent" => PathBuf::from("/nonexistent/bwrap"),
            "bwrap-broken" => {
                let dir = HostDir::new("fake-bwrap", 0o755);
                let p = dir.0.join("bwrap");
                std::fs::write(&p, "#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n")
                    .expect("fake bwrap");
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
                    .expect("chmod");
                fake = Some(dir);
                p
            }
            _ => SandboxConfig::default().bwrap,
        };
        let base = SandboxConfig {
            bwrap: bwrap.clone(),
            ..SandboxConfig::default()
        };
        let choice = match label.as_str() {
            "auto" | "bwrap-absent" | "bwrap-broken" => SandboxChoice::Auto,
            name => name
                .parse()
                .unwrap_or_else(|e| panic!("FULCRUM_TEST_SANDBOX: {e}")),
        };
        let mode = match choice.resolve(&base) {
            Ok(c) => {
                eprintln!("sandbox suite {label}: {} mode ({})", c.mode, c.why);
                if label.starts_with("bwrap-") {
                    assert!(
                        c.mode.contains() && c.mode != SandboxMode::Bwrap,
                        "{label}: fell back to {}",
                        c.mode
                    );
                }
                Some(c.mode)
            }
            Err(e) if choice == SandboxChoice::Auto && label == "auto" => {
                eprintln!("sandbox suite auto: no sandbox here, every program must be refused: {e}");
                None
            }
            Err(e) => panic!("sandbox suite {label}: {e}"),
        };
        Setup {
            label,
            mode,
            bwrap,
            _fake: fake,
        }
    })
}

/// Whether the suite runs in the weak mode.
pub fn unsafe_mode() -> bool {
    setup().mode == Some(SandboxMode::UnsafeRlimit)
}

pub fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

pub fn runner() -> CodeRunner {
    let s = setup();
    let Some(mode) = s.mode else {
        // The process-wide runner, which refuses every program here.
        return CodeRunner::detect();
    };
    CodeRunner::new(
        SandboxConfig {
            mode,
            bwrap: s.bwrap.clone(),
            wall: Duration::from_secs(2),
            cpu_seconds: 1,
            memory_bytes: 512 << 20,
            max_processes: 64,
            max_file_bytes: 8 << 20,
            max_output_bytes: 64 << 10,
            ..SandboxConfig::default()
        },
        1,
    )
}

/// A field of `/proc/PID/status` (its first word).
fn status_field(pid: u32, name: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string()
}

/// Makes this test process the reaper of its orphaned descendants, so that a process a
/// program left behind stays findable as our descendant (other users' processes, even of the
/// same uid, are not mistaken for leftovers).
fn adopt_orphans() {
    // SAFETY: no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
    assert_eq!(rc, 0, "PR_SET_CHILD_SUBREAPER");
}

/// Live (not zombie) descendants of this process.
fn leftover_processes() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let procs: Vec<(u32, u32, bool)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .map(|pid| {
            let ppid = status_field(pid, "PPid:").parse().unwrap_or(0);
            let zombie = status_field(pid, "State:").starts_with('Z');
            (pid, ppid, zombie)
        })
        .collect();
    let mut ours = vec![std::process::id()];
    let mut grew = true;
    while grew {
        grew = false;
        for &(pid, ppid, _) in &procs {
            if ours.contains(&ppid) && !ours.contains(&pid) {
                ours.push(pid);
                grew = true;
            }
        }
    }
    procs
        .iter()
        .filter(|&&(pid, _, zombie)| pid != std::process::id() && ours.contains(&pid) && !zombie)
        .map(|&(pid, _, _)| pid)
        .collect()
}

/// Reaps the zombies of adopted orphans (they would count against the sandbox uid's process
/// limit); only between programs, when no run of ours is waiting for its child.
fn reap_adopted() {
    // SAFETY: waitpid with a null status pointer; WNOHANG never blocks.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

/// Waits (up to 3 s: the kernel tears pid namespaces down asynchronously) for no process
/// started by the program to be left; returns those still there.
fn wait_for_leftovers() -> Vec<u32> {
    let start = Instant::now();
    loop {
        let left = leftover_processes();
        if left.is_empty() || start.elapsed() > Duration::from_secs(3) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Holds the suite's lock: one program at a time (the process limit is per uid, and the
/// leftover check and the reaping of orphans look at all of this process's descendants).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn record(name: &str, contained: bool, outcome: &Outcome, effect: Option<&str>) {
    let Ok(path) = std::env::var("FULCRUM_SANDBOX_REPORT") else {
        return;
    };
    let s = setup();
    let line = serde_json::json!({
        "suite": s.label,
        "mode": s.mode.map_or("refused", |m| m.name()),
        "root": is_root(),
        "program": name,
        "contained": contained,
        "reason": outcome.reason,
        "effect": effect,
    });
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        panic!("cannot append to FULCRUM_SANDBOX_REPORT={path}: {e}");
    }
}

/// Runs a hostile program with its test code; `effect` looks on the host for what the attack
/// would leave there. Contained means: scored 0, no effect outside, no process it started left
/// running (this process adopts orphans, so they are its descendants), done in time. Asserted in every mode, except for `weak` programs in unsafe-rlimit mode, which are
/// only recorded. The runner must pass a good program afterwards in every mode.
pub fn hostile(
    name: &str,
    program: &str,
    test: &str,
    weak: bool,
    effect: &dyn Fn() -> Option<String>,
) -> Outcome {
    let _guard = serial();
    let r = runner();
    let start = Instant::now();
    let outcome = r.run_code(program, &TestSpec::Asserts(test.into()));
    let took = start.elapsed();
    let left = wait_for_leftovers();
    let seen = effect()
        .or_else(|| (!left.is_empty()).then(|| format!("processes left running: {}", left.len())));
    let contained = !outcome.passed && outcome.fraction == 0.0 && seen.is_none();
    eprintln!(
        "{name}: contained={contained} passed={} reason={:?} effect={seen:?} in {took:?}",
        outcome.passed, outcome.reason
    );
    record(name, contained, &outcome, seen.as_deref());
    if setup().mode.is_none() {
        assert!(
            outcome.reason.contains("code rewards refused"),
            "{name}: not refused: {outcome:?}"
        );
    }
    if weak && unsafe_mode() {
        eprintln!("{name}: unsafe-rlimit does not contain this program: measured, not asserted");
    } else {
        assert!(
            !outcome.passed,
            "{name}: hostile program passed: {outcome:?}"
        );
        assert_eq!(outcome.fraction, 0.0, "{name}");
        assert!(
            seen.is_none(),
            "{name}: effect outside the sandbox: {seen:?}"
        );
        assert!(took < Duration::from_secs(6), "{name}: took {took:?}");
    }
    // What the weak mode left running goes now, by pid (all are this process's descendants).
    for &pid in &left {
        // SAFETY: signalling a process this test started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    reap_adopted();
    if setup().mode.is_some() {
        // After a fork or thread bomb the kernel may still be tearing down the killed
        // processes and their namespaces for a moment, and a new sandbox can fail with EAGAIN
        // meanwhile; the runner must be healthy again once that is over (within 10 s).
        let start = Instant::now();
        let healthy = loop {
            let h = r.run_code(
                "def f():\n    return 42\n",
                &TestSpec::Asserts("assert f() == 42".into()),
            );
            let transient = h.reason.contains("Resource temporarily unavailable");
            if h.passed || !transient || start.elapsed() > Duration::from_secs(10) {
                break h;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(
            healthy.passed,
            "{name}: runner unhealthy afterwards: {healthy:?}"
        );
    }
    outcome
}

/// A program every mode must contain (the rlimits and the runner stop it even in unsafe-rlimit).
pub fn contained(name: &str, program: &str, test: &str) -> Outcome {
    hostile(name, program, test, false, &|| None)
}

/// A program every containing mode must contain, which unsafe-rlimit may not.
pub fn weak(name: &str, program: &str, test: &str) -> Outcome {
    hostile(name, program, test, true, &|| None)
}

/// A host directory every uid may write (so that only the sandbox can stop a write there),
/// removed on drop.
pub struct HostDir(pub PathBuf);

impl HostDir {
    pub fn new(label: &str, mode: u32) -> HostDir {
        Self::under(&std::env::temp_dir(), label, mode)
    }

    pub fn under(parent: &Path, label: &str, mode: u32) -> HostDir {
        let d = parent.join(format!("fulcrum-host-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("host directory");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).expect("chmod");
        HostDir(d)
    }

    /// A path inside, as a Python string literal.
    pub fn py(&self, name: &str) -> String {
        format!("{:?}", self.0.join(name).to_string_lossy())
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `Some(what)` when `path` exists (a symlink counts, even dangling).
pub fn exists(path: &Path) -> Option<String> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|_| format!("{} exists on the host", path.display()))
}

/// Whether the kill tests may run: in unsafe-rlimit mode as a non-root user, the program runs
/// as this user and would kill this test process.
pub fn may_signal_us(name: &str) -> bool {
    if unsafe_mode() && !is_root() {
        eprintln!("{name}: unsafe-rlimit as this uid would kill the test itself: skipped");
        return false;
    }
    true
}
