//! Hostile programs against the code sandbox: each must be contained (score 0, no effect on
//! the host, nothing left running, the runner healthy for the next program) in every mode
//! that contains programs. The harness, the choice of mode (`FULCRUM_TEST_SANDBOX`) and the
//! report are in `hostile/mod.rs`; programs that look for effects outside the sandbox
//! directory (shell-outs, writes to /tmp, /dev/shm and $HOME, links, environments, limits) are
//! in `sandbox_escape.rs`. Tests run one at a time (a shared lock), because the process limit
//! is per uid and the leftover check looks for any process of the sandbox uid.

mod hostile;

use std::net::TcpListener;
use std::path::Path;

use hostile::{contained, exists, hostile, may_signal_us, weak, HostDir};

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
fn writing_to_root_s_home_fails() {
    let target = Path::new("/root/fulcrum_hostile_home_write");
    hostile(
        "write /root",
        &format!("open({target:?}, 'w').write('pwned')\n"),
        &format!("import os\nassert os.path.exists({target:?})"),
        false,
        &|| exists(target),
    );
    let _ = std::fs::remove_file(target);
}

#[test]
fn writing_to_host_tmp_fails() {
    // World-writable, so that only the sandbox can stop the write.
    let dir = HostDir::new("tmpwrite", 0o777);
    let target = dir.path("escaped");
    hostile(
        "write host /tmp directory",
        &format!("open({}, 'w').write('pwned')\n", dir.py("escaped")),
        &format!("import os\nassert os.path.exists({})", dir.py("escaped")),
        true,
        &|| exists(&target),
    );
}

#[test]
fn writing_to_usr_fails() {
    let target = Path::new("/usr/fulcrum_evil");
    hostile(
        "write /usr",
        "open('/usr/fulcrum_evil', 'w').write('x')\n",
        "import os\nassert os.path.exists('/usr/fulcrum_evil')",
        false,
        &|| exists(target),
    );
    let _ = std::fs::remove_file(target);
}

#[test]
fn deleting_system_files_fails() {
    hostile(
        "delete /usr",
        "import shutil\nshutil.rmtree('/usr/lib/python3', ignore_errors=True)\n",
        "import os\nassert not os.path.exists('/usr/lib/python3')",
        false,
        &|| (!Path::new("/usr/lib/python3").exists()).then(|| "/usr/lib/python3 deleted".into()),
    );
}

#[test]
fn reading_a_secret_outside_fails() {
    // Readable by every uid, so that only the sandbox can stop the read.
    let dir = HostDir::new("secret", 0o755);
    std::fs::write(dir.path("secret.txt"), "TOPSECRET").expect("secret");
    weak(
        "read a secret file in host /tmp",
        &format!(
            "data = open({}).read()\nprint(data)\n",
            dir.py("secret.txt")
        ),
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
    weak(
        "list /",
        "import os\nnames = os.listdir('/')\n",
        "assert 'etc' in names or 'root' in names or 'work' in names",
    );
}

#[test]
fn connecting_to_a_host_listener_fails() {
    let listener = TcpListener::bind("127.0.0.1:0");
    let Ok(listener) = listener else {
        eprintln!("cannot bind a loopback listener: skipped");
        return;
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let _ = listener.set_nonblocking(true);
    hostile(
        "connect to a host listener",
        &format!(
            "import socket\nok = False\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1).send(b'x')\n    ok = True\nexcept OSError:\n    pass\n"
        ),
        "assert ok",
        true,
        &|| {
            listener
                .accept()
                .ok()
                .map(|_| "the host listener accepted a connection".into())
        },
    );
}

#[test]
fn dns_lookup_fails() {
    weak(
        "dns",
        "import socket\naddr = socket.gethostbyname('example.com')\n",
        "assert addr",
    );
}

#[test]
fn udp_to_the_internet_fails() {
    weak(
        "udp",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nsent = s.sendto(b'x', ('8.8.8.8', 53))\n",
        "assert sent == 1",
    );
}

#[test]
fn killing_the_parent_fails() {
    if !may_signal_us("kill parent") {
        return;
    }
    weak(
        "kill parent",
        "import os, signal, time\nppid = os.getppid()\ntry:\n    os.kill(ppid, signal.SIGKILL)\nexcept OSError:\n    pass\ntime.sleep(0.2)\ntry:\n    os.kill(ppid, 0)\n    alive = True\nexcept PermissionError:\n    alive = True\nexcept ProcessLookupError:\n    alive = False\n",
        "assert not alive",
    );
}

#[test]
fn killing_every_process_it_can_leaves_the_runner_alive() {
    if !may_signal_us("kill -1") {
        return;
    }
    weak(
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
fn a_child_that_clears_its_environment_and_leaves_the_session_is_killed() {
    // What unsafe-rlimit's kill by process group and environment tag cannot find.
    weak(
        "env-clearing child in a new session",
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    os.execve('/usr/bin/sleep', ['sleep', '30'], {})\ntime.sleep(0.3)\n",
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
    let name = format!("fulcrum-fill-{}", std::process::id());
    let host = Path::new("/tmp").join(&name);
    hostile(
        "fill /tmp",
        &format!("with open('/tmp/{name}', 'wb') as f:\n    for _ in range(100):\n        f.write(b'0' * (1024 * 1024))\n"),
        &format!("import os\nassert os.path.getsize('/tmp/{name}') >= 100 * 1024 * 1024"),
        true,
        &|| exists(&host),
    );
    let _ = std::fs::remove_file(&host);
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
    weak(
        "process list",
        "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n",
        "assert len(pids) > 5",
    );
}
