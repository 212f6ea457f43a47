//! Hostile programs that try to reach outside the sandbox directory: shell-outs, writes to
//! /tmp, /dev/shm and $HOME, hard links and symlinks, other processes' environments, and
//! limits. Each looks on the host afterwards for the effect the attack would leave there
//! (harness: `hostile/mod.rs`). Host directories are world-writable or world-readable, so that
//! only the sandbox, not file permissions, can stop the attack.

mod hostile;

use std::path::Path;
use std::process::Command;

use hostile::{contained, exists, hostile, may_signal_us, weak, HostDir};

#[test]
fn os_system_shell_out_cannot_touch_a_file_outside() {
    let dir = HostDir::new("shell", 0o777);
    let target = dir.path("touched");
    hostile(
        "os.system('touch FILE') outside",
        &format!("import os\nos.system('touch ' + {})\n", dir.py("touched")),
        &format!("import os\nassert os.path.exists({})", dir.py("touched")),
        true,
        &|| exists(&target),
    );
}

#[test]
fn ctypes_shell_out_cannot_touch_a_file_outside() {
    let dir = HostDir::new("ctypes", 0o777);
    let target = dir.path("touched");
    hostile(
        "ctypes libc.system('touch FILE') outside",
        &format!(
            "import ctypes\nrc = ctypes.CDLL(None).system(('touch ' + {}).encode())\n",
            dir.py("touched")
        ),
        &format!("import os\nassert os.path.exists({})", dir.py("touched")),
        true,
        &|| exists(&target),
    );
}

#[test]
fn ctypes_cannot_make_a_user_namespace() {
    weak(
        "ctypes unshare(CLONE_NEWUSER)",
        "import ctypes\nrc = ctypes.CDLL(None, use_errno=True).unshare(0x10000000)\n",
        "assert rc == 0",
    );
}

/// Writes into `dir` (a host directory such as /tmp), succeeding only where it also sees a
/// file the host planted there: a private /tmp or home of the sandbox does not count.
/// `prelude` runs first (Python).
fn write_beside_a_host_file(label: &str, dir: &Path, prelude: &str) {
    if !dir.is_dir() {
        eprintln!("{label}: {} does not exist here: skipped", dir.display());
        return;
    }
    let marker = dir.join(format!(".fulcrum-host-marker-{}", std::process::id()));
    let target = dir.join(format!(".fulcrum-hostile-{}", std::process::id()));
    std::fs::write(&marker, "host").expect("marker");
    let (m, t) = (
        format!("{:?}", marker.to_string_lossy()),
        format!("{:?}", target.to_string_lossy()),
    );
    hostile(
        label,
        &format!("{prelude}open({t}, 'w').write('pwned')\n"),
        &format!("import os\nassert os.path.exists({m}) and open({t}).read() == 'pwned'"),
        true,
        &|| exists(&target),
    );
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(&target);
}

#[test]
fn writing_to_tmp_does_not_reach_the_host() {
    write_beside_a_host_file("write /tmp", Path::new("/tmp"), "");
}

#[test]
fn writing_to_dev_shm_does_not_reach_the_host() {
    write_beside_a_host_file("write /dev/shm", Path::new("/dev/shm"), "");
}

#[test]
fn writing_to_the_host_home_fails() {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    // Its own home (the sandbox's HOME) may be written; the host user's may not.
    write_beside_a_host_file(
        "write $HOME",
        Path::new(&home),
        "import os\nopen(os.path.expanduser('~/own'), 'w').write('ok')\n",
    );
}

#[test]
fn a_hard_link_out_of_the_sandbox_directory_fails() {
    let dir = HostDir::new("hardlink-out", 0o777);
    let target = dir.path("link");
    hostile(
        "hard link from its directory to outside",
        &format!(
            "import os\nopen('mine', 'w').write('x')\nos.link('mine', {})\n",
            dir.py("link")
        ),
        &format!("import os\nassert os.path.exists({})", dir.py("link")),
        true,
        &|| exists(&target),
    );
}

/// A world-writable host file holding "original", for attacks that write through a link.
fn victim(dir: &HostDir) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let v = dir.path("victim");
    std::fs::write(&v, "original").expect("victim");
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    v
}

fn changed(path: &Path) -> Option<String> {
    let now = std::fs::read_to_string(path).unwrap_or_default();
    (now != "original").then(|| format!("{} now holds {now:?}", path.display()))
}

#[test]
fn a_hard_link_to_a_host_file_cannot_write_it() {
    let dir = HostDir::new("hardlink-in", 0o777);
    let v = victim(&dir);
    hostile(
        "hard link a host file in, write through it",
        &format!(
            "import os\nos.link({}, 'hl')\nopen('hl', 'w').write('pwned')\n",
            dir.py("victim")
        ),
        "assert open('hl').read() == 'pwned'",
        true,
        &|| changed(&v),
    );
}

#[test]
fn a_symlink_to_a_host_file_cannot_write_it() {
    let dir = HostDir::new("symlink-in", 0o777);
    let v = victim(&dir);
    hostile(
        "symlink to a host file, write through it",
        &format!(
            "import os\nos.symlink({}, 'sl')\nopen('sl', 'w').write('pwned')\n",
            dir.py("victim")
        ),
        "assert open('sl').read() == 'pwned'",
        true,
        &|| changed(&v),
    );
}

#[test]
fn a_symlink_placed_outside_fails() {
    let dir = HostDir::new("symlink-out", 0o777);
    let target = dir.path("sl");
    hostile(
        "symlink created outside its directory",
        &format!("import os\nos.symlink('/etc/passwd', {})\n", dir.py("sl")),
        &format!("import os\nassert os.path.islink({})", dir.py("sl")),
        true,
        &|| exists(&target),
    );
}

const SECRET_VAR: &str = "FULCRUM_HOSTILE_SECRET";

/// Runs `body` in a copy of this test process that has a secret in its initial environment
/// (what /proc/PID/environ shows: a variable set later with set_var would not be there).
fn with_a_secret_in_our_environment(test: &str, body: impl FnOnce(&str)) {
    if let Ok(secret) = std::env::var(SECRET_VAR) {
        body(&secret);
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let secret = format!("fulcrum-secret-{}-{nanos}", std::process::id());
    let exe = std::env::current_exe().expect("this test binary");
    // Under the suite's lock: between programs this process reaps adopted orphans, which
    // must not take this child's exit status.
    let _guard = hostile::serial();
    let out = Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(SECRET_VAR, &secret)
        .output()
        .expect("runs itself");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{test} with a secret in the environment: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Reads each of `paths` (Python expressions) and its own environment into `data`.
fn read_environments(paths: &str) -> String {
    format!(
        "import os\nfound = []\nfor p in [{paths}]:\n    try:\n        found.append(open(p, 'rb').read().decode('latin-1'))\n    except OSError as e:\n        found.append(str(e))\nfound.append(repr(dict(os.environ)))\ndata = '\\n'.join(found)\nprint(data[:4000])\n"
    )
}

#[test]
fn reading_proc_1_environ_shows_no_secret() {
    with_a_secret_in_our_environment("reading_proc_1_environ_shows_no_secret", |secret| {
        weak(
            "read /proc/1/environ",
            &read_environments("'/proc/1/environ'"),
            &format!("assert {secret:?} in data"),
        );
    });
}

#[test]
fn reading_the_parent_s_environment_shows_no_secret() {
    with_a_secret_in_our_environment(
        "reading_the_parent_s_environment_shows_no_secret",
        |secret| {
            weak(
                "read the parent's environment",
                &read_environments("'/proc/%d/environ' % os.getppid(), '/proc/self/environ'"),
                &format!("assert {secret:?} in data"),
            );
        },
    );
}

#[test]
fn raising_every_own_limit_fails() {
    contained(
        "raise its own rlimits to unlimited",
        "import resource\nraised = []\nfor r in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE):\n    try:\n        resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n        raised.append(r)\n    except (ValueError, OSError):\n        pass\nbig = bytearray(2 * 1024 ** 3)\n",
        "assert len(raised) == 5 and len(big) > 0",
    );
}

fn nofile() -> libc::rlimit {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    lim
}

#[test]
fn lowering_the_runner_s_limits_fails() {
    let before = nofile();
    hostile(
        "prlimit the parent's open-file limit",
        "import os, resource\nppid = os.getppid()\nsoft, hard = resource.prlimit(ppid, resource.RLIMIT_NOFILE)\nresource.prlimit(ppid, resource.RLIMIT_NOFILE, (16, hard))\ndone = True\n",
        "assert done",
        true,
        &|| {
            let now = nofile();
            (now.rlim_cur != before.rlim_cur || now.rlim_max != before.rlim_max)
                .then(|| format!("this process's open-file limit is now {}", now.rlim_cur))
        },
    );
    // SAFETY: restoring our own soft limit (the weak mode may have lowered it).
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &before) };
}

#[test]
fn ptrace_of_the_parent_fails() {
    if !may_signal_us("ptrace parent") {
        return;
    }
    weak(
        "ptrace(PTRACE_ATTACH) the parent",
        "import ctypes, os\nrc = ctypes.CDLL(None, use_errno=True).ptrace(16, os.getppid(), 0, 0)\n",
        "assert rc == 0",
    );
}
