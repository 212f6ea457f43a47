//! Hostile programs against the code sandbox: each must be contained, score 0, leave no
//! process behind, and leave the runner healthy for the next program.
//!
//! The suite runs in whatever mode [`SandboxMode::detect`] picks (bubblewrap when installed, as
//! `.ci/run` does; the rlimit fallback otherwise, where the few checks that only namespaces can
//! pass are skipped with a message). `FULCRUM_TEST_SANDBOX=rlimit` forces the fallback mode, to
//! test it on a machine that has bwrap. Tests run one at a time (a shared lock), because the process
//! limit is per uid and the leftover check looks for any process of the sandbox uid.
//!
//! Each hostile program is written to *succeed* only if its attack works: it attacks, then the
//! test code asserts the attack's effect, so a contained attack fails the tests and scores 0.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fulcrum_tasks::code::sandbox::SANDBOX_UID;
use fulcrum_tasks::code::{CodeRunner, Outcome, SandboxConfig, SandboxMode, TestSpec};

static SERIAL: Mutex<()> = Mutex::new(());

fn mode() -> SandboxMode {
    static MODE: std::sync::OnceLock<SandboxMode> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| {
        if std::env::var("FULCRUM_TEST_SANDBOX").as_deref() == Ok("rlimit") {
            eprintln!("sandbox mode: rlimit (forced by FULCRUM_TEST_SANDBOX=rlimit)");
            return SandboxMode::Rlimit;
        }
        let (m, why) = SandboxMode::detect();
        eprintln!("sandbox mode: {} ({why})", m.name());
        m
    })
}

fn runner() -> CodeRunner {
    CodeRunner::new(
        SandboxConfig {
            mode: mode(),
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

/// Pids of live processes running as the sandbox uid.
fn sandbox_processes() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
            let real = uid_line.split_whitespace().nth(1).unwrap_or("");
            let zombie = status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'));
            real == SANDBOX_UID.to_string() && !zombie
        })
        .collect()
}

/// Waits (up to 3 s, the kernel tears pid namespaces down asynchronously) for no process of
/// the sandbox uid to be left.
fn assert_no_leftovers(name: &str) {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("{name}: not root, programs run as this uid: leftover check skipped");
        return;
    }
    let start = Instant::now();
    loop {
        let left = sandbox_processes();
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{name}: processes left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs a hostile program with its test code; checks it scored 0, left nothing, and that the
/// runner still passes a good program afterwards. Returns the outcome for extra checks.
fn contained(name: &str, program: &str, test: &str) -> Outcome {
    let _guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let r = runner();
    let start = Instant::now();
    let outcome = r.run_code(program, &TestSpec::Asserts(test.into()));
    let took = start.elapsed();
    eprintln!(
        "{name}: passed={} reason={:?} in {took:?}",
        outcome.passed, outcome.reason
    );
    assert!(
        !outcome.passed,
        "{name}: hostile program passed: {outcome:?}"
    );
    assert_eq!(outcome.fraction, 0.0, "{name}");
    assert!(took < Duration::from_secs(6), "{name}: took {took:?}");
    assert_no_leftovers(name);
    let healthy = r.run_code(
        "def f():\n    return 42\n",
        &TestSpec::Asserts("assert f() == 42".into()),
    );
    assert!(
        healthy.passed,
        "{name}: runner unhealthy afterwards: {healthy:?}"
    );
    outcome
}

fn host_temp(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fulcrum-host-{label}-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&d);
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
    d
}

fn bwrap_only(name: &str) -> bool {
    if mode() != SandboxMode::Bwrap {
        eprintln!("{name}: needs bwrap namespaces (rlimit mode does not hide this): skipped");
        return false;
    }
    true
}

/// Whether the mode separates the program from this process's user: bwrap always; the rlimit
/// fallback only when the tests run as root (the program then runs as uid 65534 in its own
/// network namespace). As another user, the fallback is a resource limiter only.
fn isolated(name: &str) -> bool {
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    if mode() != SandboxMode::Bwrap && !root {
        eprintln!("{name}: rlimit mode without root gives no user or network isolation: skipped");
        return false;
    }
    true
}

#[test]
fn infinite_loop_is_stopped() {
    let o = contained("infinite loop", "while True:\n    pass\n", "assert True");
    assert!(
        o.reason.contains("timeout") || o.reason.contains("CPU"),
        "{}",
        o.reason
    );
}

#[test]
fn sleeping_past_the_wall_clock_is_stopped() {
    let o = contained("sleep", "import time\ntime.sleep(60)\n", "assert True");
    assert_eq!(o.reason, "timeout");
}

#[test]
fn fork_bomb_is_contained() {
    contained(
        "fork bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "assert True",
    );
}

#[test]
fn forked_sleepers_are_all_killed() {
    contained(
        "forked sleepers",
        "import os, time\nfor _ in range(20):\n    if os.fork() == 0:\n        time.sleep(300)\n        os._exit(0)\ntime.sleep(300)\n",
        "assert True",
    );
}

#[test]
fn memory_bomb_fails() {
    contained(
        "memory bomb",
        "x = bytearray(8 * 1024 ** 3)\n",
        "assert len(x) > 0",
    );
}

#[test]
fn growing_memory_fails() {
    contained(
        "growing memory",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))\n",
        "assert True",
    );
}

#[test]
fn writing_to_the_home_directory_fails() {
    let target = "/root/fulcrum_hostile_home_write";
    contained(
        "write home",
        &format!("open({target:?}, 'w').write('pwned')\n"),
        &format!("import os\nassert os.path.exists({target:?})"),
    );
    assert!(!std::path::Path::new(target).exists());
}

#[test]
fn writing_to_host_tmp_fails() {
    if !isolated("write host /tmp") {
        return;
    }
    let dir = host_temp("tmpwrite");
    let target = dir.join("escaped");
    let t = target.to_string_lossy().to_string();
    contained(
        "write host /tmp",
        &format!("open({t:?}, 'w').write('pwned')\n"),
        &format!("import os\nassert os.path.exists({t:?})"),
    );
    assert!(!target.exists(), "file escaped the sandbox");
}

#[test]
fn writing_to_usr_fails() {
    contained(
        "write /usr",
        "open('/usr/fulcrum_evil', 'w').write('x')\n",
        "import os\nassert os.path.exists('/usr/fulcrum_evil')",
    );
    assert!(!std::path::Path::new("/usr/fulcrum_evil").exists());
}

#[test]
fn deleting_system_files_fails() {
    contained(
        "delete /usr",
        "import shutil\nshutil.rmtree('/usr/lib/python3', ignore_errors=True)\n",
        "import os\nassert not os.path.exists('/usr/lib/python3')",
    );
    assert!(std::path::Path::new("/usr/lib/python3").exists());
}

#[test]
fn reading_a_secret_outside_fails() {
    if !isolated("read secret") {
        return;
    }
    let dir = host_temp("secret");
    let secret = dir.join("secret.txt");
    let _ = std::fs::write(&secret, "TOPSECRET");
    let s = secret.to_string_lossy().to_string();
    contained(
        "read secret",
        &format!("data = open({s:?}).read()\n"),
        "assert data == 'TOPSECRET'",
    );
}

#[test]
fn reading_etc_shadow_fails() {
    contained(
        "read /etc/shadow",
        "data = open('/etc/shadow').read()\n",
        "assert 'root' in data",
    );
}

#[test]
fn host_filesystem_is_not_visible() {
    if !bwrap_only("host filesystem") {
        return;
    }
    contained(
        "list /",
        "import os\nnames = os.listdir('/')\n",
        "assert 'etc' in names or 'root' in names or 'work' in names",
    );
}

#[test]
fn connecting_to_a_host_listener_fails() {
    if !isolated("network connect") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0");
    let Ok(listener) = listener else {
        eprintln!("cannot bind a loopback listener: skipped");
        return;
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let _ = listener.set_nonblocking(true);
    contained(
        "network connect",
        &format!(
            "import socket\nok = False\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1).send(b'x')\n    ok = True\nexcept OSError:\n    pass\n"
        ),
        "assert ok",
    );
    assert!(
        listener.accept().is_err(),
        "the sandbox reached the host listener"
    );
}

#[test]
fn dns_lookup_fails() {
    if !isolated("dns") {
        return;
    }
    contained(
        "dns",
        "import socket\naddr = socket.gethostbyname('example.com')\n",
        "assert addr",
    );
}

#[test]
fn udp_to_the_internet_fails() {
    if !isolated("udp") {
        return;
    }
    contained(
        "udp",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nsent = s.sendto(b'x', ('8.8.8.8', 53))\n",
        "assert sent == 1",
    );
}

#[test]
fn killing_the_parent_fails() {
    if !isolated("kill parent") {
        return;
    }
    contained(
        "kill parent",
        "import os, signal, time\nppid = os.getppid()\ntry:\n    os.kill(ppid, signal.SIGKILL)\nexcept OSError:\n    pass\ntime.sleep(0.2)\ntry:\n    os.kill(ppid, 0)\n    alive = True\nexcept PermissionError:\n    alive = True\nexcept ProcessLookupError:\n    alive = False\n",
        "assert not alive",
    );
}

#[test]
fn killing_every_process_it_can_leaves_the_runner_alive() {
    if !isolated("kill -1") {
        return;
    }
    contained(
        "kill -1",
        "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n",
        "assert solution() == 42",
    );
}

#[test]
fn stdout_flood_is_cut_off() {
    let o = contained(
        "stdout flood",
        "while True:\n    print('x' * 10000)\n",
        "assert True",
    );
    assert_eq!(o.reason, "output limit exceeded");
}

#[test]
fn stderr_flood_is_cut_off() {
    let o = contained(
        "stderr flood",
        "import sys\nwhile True:\n    sys.stderr.write('y' * 10000)\n",
        "assert True",
    );
    assert_eq!(o.reason, "output limit exceeded");
}

#[test]
fn big_output_then_success_still_fails() {
    contained(
        "flood then exit 0",
        "import sys\nsys.stdout.write('z' * (10 * 1024 * 1024))\n",
        "assert True",
    );
}

#[test]
fn detached_grandchild_is_killed() {
    contained(
        "detached child",
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(300)\n    os._exit(0)\n",
        "assert solution() == 42",
    );
}

#[test]
fn new_session_subprocess_is_killed() {
    contained(
        "subprocess in new session",
        "import subprocess\nsubprocess.Popen(['/usr/bin/sleep', '300'], start_new_session=True)\n",
        "assert solution() == 42",
    );
}

#[test]
fn exiting_zero_before_the_tests_fails() {
    let o = contained("os._exit(0)", "import os\nos._exit(0)\n", "assert False");
    assert_eq!(o.reason, "tests did not run to the end");
    contained("sys.exit(0)", "import sys\nsys.exit(0)\n", "assert False");
}

#[test]
fn raising_its_own_limits_fails() {
    contained(
        "raise rlimit",
        "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (10 ** 6, 10 ** 6))\n",
        "assert True",
    );
}

#[test]
fn host_environment_is_not_visible() {
    // A secret in this test process's environment must not reach the program.
    let marker = format!("HOME={}", std::env::var("HOME").unwrap_or_default());
    contained(
        "environment",
        "import os\nenv = dict(os.environ)\n",
        &format!("assert 'CARGO' in ' '.join(env) or {marker:?} in [k + '=' + v for k, v in env.items()]"),
    );
}

#[test]
fn huge_file_write_fails() {
    contained(
        "file size bomb",
        "with open('big', 'wb') as f:\n    f.write(b'0' * (100 * 1024 * 1024))\n",
        "import os\nassert os.path.getsize('big') >= 100 * 1024 * 1024",
    );
}

#[test]
fn filling_tmp_fails() {
    contained(
        "fill /tmp",
        "with open('/tmp/fill', 'wb') as f:\n    for _ in range(100):\n        f.write(b'0' * (1024 * 1024))\n",
        "import os\nassert os.path.getsize('/tmp/fill') >= 100 * 1024 * 1024",
    );
}

#[test]
fn exhausting_file_descriptors_fails() {
    contained(
        "fd exhaustion",
        "files = [open('/dev/null') for _ in range(100000)]\n",
        "assert len(files) == 100000",
    );
}

#[test]
fn thread_bomb_is_contained() {
    contained(
        "thread bomb",
        "import threading, time\nthreads = []\nwhile True:\n    t = threading.Thread(target=time.sleep, args=(300,))\n    t.start()\n    threads.append(t)\n",
        "assert True",
    );
}

#[test]
fn stack_overflow_crash_scores_zero() {
    contained(
        "recursion crash",
        "import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n):\n    return f(n + 1)\nf(0)\n",
        "assert True",
    );
}

#[test]
fn ignoring_signals_does_not_prevent_the_kill() {
    contained(
        "ignore signals",
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n",
        "assert True",
    );
}

#[test]
fn other_processes_are_not_visible() {
    if !bwrap_only("process list") {
        return;
    }
    contained(
        "process list",
        "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n",
        "assert len(pids) > 5",
    );
}
