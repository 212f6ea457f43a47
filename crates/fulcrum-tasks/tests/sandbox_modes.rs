//! Choosing the sandbox: every containing mode that this machine allows runs programs; a
//! missing, failing or unconfined bwrap falls back to a built-in mode; when nothing contains
//! programs, `auto` refuses with a message naming what is missing; the weak mode is used only
//! when asked for by name.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use fulcrum_tasks::code::{CodeRunner, TestSpec};
use fulcrum_tasks::sandbox::{
    probe, run_python, set_sandbox_choice, SandboxChoice, SandboxConfig, SandboxError, SandboxMode,
};

/// A temporary directory of this test process, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(label: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("fulcrum-modes-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch directory");
        // The fake bwrap scripts run as uid 65534 when the tests run as root.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Scratch(d)
    }

    fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(mode: SandboxMode) -> SandboxConfig {
    SandboxConfig {
        mode,
        ..SandboxConfig::default()
    }
}

/// The built-in modes this kernel allows, by their own probe.
fn builtin_modes() -> Vec<SandboxMode> {
    [SandboxMode::Namespaces, SandboxMode::Landlock]
        .into_iter()
        .filter(|&m| match probe(m, &config(m)) {
            Ok(_) => true,
            Err(why) => {
                eprintln!("{m}: not available here: {why}");
                false
            }
        })
        .collect()
}

#[test]
fn every_available_mode_runs_a_program_and_its_stdin() {
    let mut modes = builtin_modes();
    if probe(SandboxMode::Bwrap, &config(SandboxMode::Bwrap)).is_ok() {
        modes.push(SandboxMode::Bwrap);
    }
    modes.push(SandboxMode::UnsafeRlimit);
    for mode in modes {
        let out = run_python(
            &config(mode),
            "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n",
            "1 2 39\n",
        )
        .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(out.success(), "{mode}: {out:?}");
        assert_eq!(out.stdout.trim(), "42", "{mode}");
    }
}

#[test]
fn a_crash_and_a_signal_are_reported_in_the_built_in_modes() {
    for mode in builtin_modes() {
        let out = run_python(&config(mode), "import sys\nsys.exit(3)\n", "").expect("runs");
        assert_eq!(out.exit_code, Some(3), "{mode}: {out:?}");
        let out = run_python(
            &config(mode),
            "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
            "",
        )
        .expect("runs");
        let by_signal =
            out.signal == Some(libc::SIGSEGV) || out.exit_code == Some(128 + libc::SIGSEGV);
        assert!(by_signal, "{mode}: {out:?}");
    }
}

#[test]
fn absent_bwrap_falls_back_to_a_containing_mode() {
    let base = SandboxConfig {
        bwrap: PathBuf::from("/nonexistent/bwrap"),
        ..SandboxConfig::default()
    };
    if builtin_modes().is_empty() {
        let err = SandboxChoice::Auto
            .resolve(&base)
            .expect_err("nothing contains here");
        assert!(matches!(err, SandboxError::Unavailable { .. }), "{err}");
        return;
    }
    let chosen = SandboxChoice::Auto.resolve(&base).expect("a built-in mode");
    assert!(chosen.mode.contains(), "{chosen:?}");
    assert_ne!(chosen.mode, SandboxMode::Bwrap);
    assert!(
        chosen
            .why
            .contains("bwrap: not found at /nonexistent/bwrap"),
        "{}",
        chosen.why
    );
}

#[test]
fn failing_bwrap_falls_back_to_a_containing_mode() {
    let dir = Scratch::new("broken");
    let fake = dir.script(
        "bwrap",
        "echo 'bwrap: setting up uid map: Permission denied' >&2\nexit 1",
    );
    let base = SandboxConfig {
        bwrap: fake.clone(),
        ..SandboxConfig::default()
    };
    let why = probe(SandboxMode::Bwrap, &base).expect_err("a failing bwrap is no sandbox");
    assert!(why.contains("setting up uid map"), "{why}");
    if builtin_modes().is_empty() {
        return;
    }
    let chosen = SandboxChoice::Auto.resolve(&base).expect("a built-in mode");
    assert!(chosen.mode.contains() && chosen.mode != SandboxMode::Bwrap);
    assert!(chosen.why.contains("exit 1"), "{}", chosen.why);
}

#[test]
fn a_bwrap_that_runs_programs_unconfined_is_not_taken_for_a_sandbox() {
    let dir = Scratch::new("unconfined");
    // Ignores every option but --bind SRC DST and runs Python in SRC: no isolation at all.
    let fake = dir.script(
        "bwrap",
        "while [ $# -gt 0 ]; do\n  case $1 in\n    --bind) cd \"$2\"; shift 3;;\n    /usr/bin/python3) exec \"$@\";;\n    *) shift;;\n  esac\ndone\nexit 99",
    );
    let base = SandboxConfig {
        bwrap: fake,
        ..SandboxConfig::default()
    };
    let why = probe(SandboxMode::Bwrap, &base).expect_err("an unconfined bwrap is no sandbox");
    assert!(why.contains("wrote a file outside"), "{why}");
}

#[test]
fn auto_refuses_and_names_what_is_missing_when_nothing_contains_programs() {
    let base = SandboxConfig {
        bwrap: PathBuf::from("/nonexistent/bwrap"),
        python: PathBuf::from("/nonexistent/python3"),
        ..SandboxConfig::default()
    };
    let err = SandboxChoice::Auto.resolve(&base).expect_err("refused");
    let text = err.to_string();
    for needle in [
        "code rewards refused",
        "bwrap: not found at /nonexistent/bwrap",
        "namespaces:",
        "landlock:",
        "apt-get install -y bubblewrap",
        "unsafe-rlimit",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    // The weak mode is never a fallback, only a choice by name.
    assert!(SandboxChoice::Mode(SandboxMode::UnsafeRlimit)
        .resolve(&SandboxConfig::default())
        .is_ok_and(|c| c.mode == SandboxMode::UnsafeRlimit));
}

#[test]
fn a_mode_asked_for_by_name_is_that_mode_or_an_error() {
    let base = SandboxConfig {
        bwrap: PathBuf::from("/nonexistent/bwrap"),
        ..SandboxConfig::default()
    };
    let err = SandboxChoice::Mode(SandboxMode::Bwrap)
        .resolve(&base)
        .expect_err("no bwrap");
    assert!(
        matches!(&err, SandboxError::ModeUnavailable { mode: SandboxMode::Bwrap, why } if why.contains("not found")),
        "{err}"
    );
    for mode in builtin_modes() {
        let chosen = SandboxChoice::Mode(mode)
            .resolve(&base)
            .expect("probed above");
        assert_eq!(chosen.mode, mode);
    }
}

#[test]
fn choices_parse_by_name_and_round_trip_through_serde() {
    for (text, want) in [
        ("auto", SandboxChoice::Auto),
        ("bwrap", SandboxChoice::Mode(SandboxMode::Bwrap)),
        ("namespaces", SandboxChoice::Mode(SandboxMode::Namespaces)),
        ("landlock", SandboxChoice::Mode(SandboxMode::Landlock)),
        (
            "unsafe-rlimit",
            SandboxChoice::Mode(SandboxMode::UnsafeRlimit),
        ),
    ] {
        let got: SandboxChoice = text.parse().expect(text);
        assert_eq!(got, want);
        assert_eq!(got.to_string(), text);
        let json = serde_json::to_string(&got).expect("serialises");
        assert_eq!(json, format!("{text:?}"));
        assert_eq!(
            serde_json::from_str::<SandboxChoice>(&json).ok(),
            Some(want)
        );
    }
    // The old name of the weak mode no longer selects it: the unsafe name must be written.
    let err = "rlimit".parse::<SandboxChoice>().expect_err("not a mode");
    assert!(err.to_string().contains("unsafe-rlimit"), "{err}");
    assert!(serde_json::from_str::<SandboxChoice>("\"rlimit\"").is_err());
}

/// Set in a child of this test binary that runs under a seccomp filter.
const CONFINED: &str = "FULCRUM_TEST_CONFINED";

/// Runs `test` again in a child of this test binary, under a seccomp filter that refuses
/// `unshare` (as a container's profile does) and, with `no_landlock`, Landlock (as a kernel
/// without it), and without bwrap. Returns false in that child, which then runs the test body.
fn rerun_confined(test: &str, no_landlock: bool) -> bool {
    use std::collections::BTreeMap;
    use std::os::unix::process::CommandExt;

    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

    if std::env::var_os(CONFINED).is_some() {
        return false;
    }
    let arch = TargetArch::try_from(std::env::consts::ARCH).expect("a seccompiler arch");
    let filter = |nr: i64, errno: i32| -> BpfProgram {
        SeccompFilter::new(
            BTreeMap::from([(nr, Vec::new())]),
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .and_then(BpfProgram::try_from)
        .expect("filter")
    };
    let mut filters = vec![filter(libc::SYS_unshare, libc::EPERM)];
    if no_landlock {
        filters.push(filter(libc::SYS_landlock_create_ruleset, libc::ENOSYS));
    }
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CONFINED, "1")
        .env("FULCRUM_BWRAP", "/nonexistent/bwrap")
        .env_remove("FULCRUM_SANDBOX");
    // SAFETY: applying prepared filters to the child only; seccompiler makes two syscalls.
    unsafe {
        cmd.pre_exec(move || {
            for f in &filters {
                seccompiler::apply_filter(f).map_err(|_| std::io::Error::last_os_error())?;
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("runs itself");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprint!("{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} confined:\n{stdout}\n{stderr}"
    );
    true
}

#[test]
fn a_container_that_refuses_namespaces_gets_the_landlock_mode() {
    if rerun_confined(
        "a_container_that_refuses_namespaces_gets_the_landlock_mode",
        false,
    ) {
        return;
    }
    let chosen = SandboxChoice::Auto
        .resolve(&SandboxConfig::default())
        .expect("landlock works without namespaces");
    assert_eq!(chosen.mode, SandboxMode::Landlock, "{}", chosen.why);
    assert!(
        chosen.why.contains("bwrap: not found") && chosen.why.contains("unshare"),
        "{}",
        chosen.why
    );
}

#[test]
fn without_namespaces_and_landlock_code_rewards_are_refused() {
    if rerun_confined(
        "without_namespaces_and_landlock_code_rewards_are_refused",
        true,
    ) {
        return;
    }
    let err = CodeRunner::try_detect().expect_err("no sandbox works");
    let text = err.to_string();
    assert!(
        text.contains("namespaces:") && text.contains("landlock: this kernel has no Landlock"),
        "{text}"
    );
    // The library's runner refuses every program, with the reason, instead of running it.
    let runner = CodeRunner::detect();
    assert!(runner.refused().is_some());
    let o = runner.run_code("x = 1\n", &TestSpec::Asserts("assert x == 1".into()));
    assert!(!o.passed && o.fraction == 0.0, "{o:?}");
    assert!(o.reason.contains("code rewards refused"), "{}", o.reason);
    // The process's choice is final once made: no silent switch to the weak mode later. The
    // way out is asking for it by name (a config key, flag or FULCRUM_SANDBOX), which works.
    assert!(set_sandbox_choice(SandboxChoice::Mode(SandboxMode::UnsafeRlimit)).is_err());
    let weak = SandboxChoice::Mode(SandboxMode::UnsafeRlimit)
        .resolve(&SandboxConfig::default())
        .expect("runs Python");
    assert_eq!(weak.mode, SandboxMode::UnsafeRlimit);
}

#[test]
fn a_run_resolves_the_sandbox_only_when_its_tasks_score_code() {
    use fulcrum_tasks::sandbox_for_tasks;
    use fulcrum_tasks::{create_task, TaskConfig, TaskError};

    let dir = Scratch::new("tasks");
    let path = dir.0.join("code.jsonl");
    std::fs::write(
        &path,
        "{\"prompt\": \"def add\", \"answer\": \"assert add(1, 2) == 3\", \"verifier\": \"code\"}\n",
    )
    .expect("task file");
    let code = create_task(&TaskConfig {
        name: "jsonl".into(),
        path: Some(path),
        ..TaskConfig::default()
    })
    .expect("jsonl task");
    let math = create_task(&TaskConfig::default()).expect("arithmetic task");
    let none = sandbox_for_tasks(SandboxChoice::Auto, &[math.as_ref()], 0).expect("no code");
    assert_eq!(none, None, "a task without code needs no sandbox");
    match sandbox_for_tasks(SandboxChoice::Auto, &[math.as_ref(), code.as_ref()], 0) {
        Ok(Some(mode)) => assert!(mode.contains(), "{mode}"),
        Err(TaskError::SandboxChoice(SandboxError::Unavailable { tried })) => {
            eprintln!("no sandbox here: the run is refused ({tried})")
        }
        other => panic!("{other:?}"),
    }
}
