//! The private root of the namespaces mode, as steps prepared in the parent (C strings and
//! flags) and run by the child between fork and exec, and the Landlock rules of both built-in
//! modes.
//!
//! The root: a read-only tmpfs `/`; `/usr` bound read-only; `/bin`, `/lib`, `/lib64`, ... as the
//! host has them (symlinks into `/usr` recreated, real directories bound read-only); a tmpfs
//! `/dev`, read-only, holding only null, zero, full, random and urandom (bound from the host);
//! a size-limited tmpfs `/tmp`; the run's own directory bound at `/sandbox`; no `/proc`, no
//! `/etc`, nothing else of the host.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use landlock::{AccessFs, BitFlags};
use libc::{c_int, c_ulong};

use super::config::{RunDir, SandboxConfig};
use super::confine;
use super::error::StartError;

type Result<T> = std::result::Result<T, StartError>;

/// One step of building the private root.
pub(crate) enum Op {
    Dir(CString),
    /// An empty file, the mount point of a device node.
    File(CString),
    Symlink {
        target: CString,
        at: CString,
    },
    Tmpfs {
        at: CString,
        data: CString,
        flags: c_ulong,
    },
    Bind {
        src: CString,
        at: CString,
    },
    /// Changes the flags of the mount at `at` (read-only, nosuid, ...); `flags` include those
    /// the source mount had, which a user namespace may not drop.
    Remount {
        at: CString,
        flags: c_ulong,
    },
}

impl Op {
    /// Runs in the child: system calls only.
    pub(crate) fn run(&self) -> io::Result<()> {
        let null = std::ptr::null::<libc::c_char>();
        // SAFETY: every pointer is a NUL-terminated string owned by the plan, or null where
        // the call takes null.
        let rc = unsafe {
            match self {
                Op::Dir(at) => libc::mkdir(at.as_ptr(), 0o755),
                Op::File(at) => {
                    let fd = libc::open(
                        at.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                    }
                    fd
                }
                Op::Symlink { target, at } => libc::symlink(target.as_ptr(), at.as_ptr()),
                Op::Tmpfs { at, data, flags } => libc::mount(
                    c"tmpfs".as_ptr(),
                    at.as_ptr(),
                    c"tmpfs".as_ptr(),
                    *flags,
                    data.as_ptr().cast(),
                ),
                Op::Bind { src, at } => libc::mount(
                    src.as_ptr(),
                    at.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ),
                Op::Remount { at, flags } => return remount(at, *flags),
            }
        };
        check(rc)
    }
}

/// Changes the per-mount flags of the mount at `at`.
pub(crate) fn remount(at: &CStr, flags: c_ulong) -> io::Result<()> {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: NUL-terminated path, null elsewhere.
    check(unsafe {
        libc::mount(
            null,
            at.as_ptr(),
            null,
            libc::MS_REMOUNT | libc::MS_BIND | flags,
            std::ptr::null(),
        )
    })
}

pub(crate) fn check(rc: c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub(crate) fn cstring(p: impl AsRef<Path>) -> Result<CString> {
    CString::new(p.as_ref().as_os_str().as_bytes())
        .map_err(|_| StartError::Setup(format!("path {:?} holds a NUL byte", p.as_ref())))
}

/// The flags of the mount holding `path` that a user namespace locks (nosuid, nodev, noexec,
/// read-only, atime), so a remount keeps them.
fn locked_flags(path: &Path) -> Result<c_ulong> {
    let c = cstring(path)?;
    // SAFETY: statvfs fills the struct; c is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(StartError::io(path, io::Error::last_os_error()));
    }
    let pairs = [
        (libc::ST_RDONLY, libc::MS_RDONLY),
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs
        .iter()
        .filter(|(st_flag, _)| st.f_flag & st_flag != 0)
        .fold(0, |acc, (_, ms)| acc | ms))
}

/// The top-level directories that hold binaries and libraries: on merged-/usr systems they are
/// symlinks into /usr (recreated as such); a real directory is bound read-only.
enum LibDir {
    Link(std::path::PathBuf),
    Real,
}

fn lib_dirs() -> Vec<(&'static str, LibDir)> {
    ["bin", "sbin", "lib", "lib32", "lib64", "libx32"]
        .into_iter()
        .filter_map(|name| {
            let host = Path::new("/").join(name);
            let meta = std::fs::symlink_metadata(&host).ok()?;
            if meta.file_type().is_symlink() {
                Some((name, LibDir::Link(std::fs::read_link(&host).ok()?)))
            } else if meta.is_dir() {
                Some((name, LibDir::Real))
            } else {
                None
            }
        })
        .collect()
}

/// Device nodes the program may use: (name, writable).
const DEVICES: [(&str, bool); 5] = [
    ("null", true),
    ("zero", true),
    ("full", true),
    ("random", false),
    ("urandom", false),
];

pub(crate) type Rules = Vec<(CString, BitFlags<AccessFs>)>;

fn device_rules(prefix: &str) -> Result<Rules> {
    DEVICES
        .iter()
        .filter(|(name, _)| Path::new("/dev").join(name).exists())
        .map(|(name, rw)| {
            let access = if *rw {
                confine::device_rw()
            } else {
                confine::device_read()
            };
            Ok((cstring(format!("{prefix}/dev/{name}"))?, access))
        })
        .collect()
}

/// Most steps of the private root (the child logs a step as one byte, after the fixed ones).
pub(crate) const MAX_OPS: usize = 200;

/// The private root of the namespaces mode (labelled steps), and the Landlock rules that
/// apply inside it after `pivot_root`.
pub(crate) fn namespace_layout(
    cfg: &SandboxConfig,
    dir: &RunDir,
) -> Result<(Vec<(String, Op)>, Rules)> {
    let r = &dir.root;
    let at = |p: &str| cstring(r.join(p));
    let nosuid_nodev = libc::MS_NOSUID | libc::MS_NODEV;
    let mut ops = vec![(
        "mount a tmpfs as the private root".to_string(),
        Op::Tmpfs {
            at: cstring(r)?,
            data: c"size=1m,mode=0755".to_owned(),
            flags: nosuid_nodev,
        },
    )];
    let ro_bind = |ops: &mut Vec<(String, Op)>, name: &str| -> Result<()> {
        let host = Path::new("/").join(name);
        let flags = libc::MS_RDONLY | nosuid_nodev | locked_flags(&host)?;
        ops.push((format!("mkdir /{name}"), Op::Dir(at(name)?)));
        ops.push((
            format!("bind /{name}"),
            Op::Bind {
                src: cstring(&host)?,
                at: at(name)?,
            },
        ));
        ops.push((
            format!("remount /{name} read-only"),
            Op::Remount {
                at: at(name)?,
                flags,
            },
        ));
        Ok(())
    };
    ro_bind(&mut ops, "usr")?;
    let mut rules: Rules = vec![(c"/usr".to_owned(), confine::read_exec())];
    for (name, kind) in lib_dirs() {
        match kind {
            LibDir::Link(target) => ops.push((
                format!("symlink /{name}"),
                Op::Symlink {
                    target: cstring(target)?,
                    at: at(name)?,
                },
            )),
            LibDir::Real => {
                ro_bind(&mut ops, name)?;
                rules.push((cstring(format!("/{name}"))?, confine::read_exec()));
            }
        }
    }
    ops.push(("mkdir /dev".into(), Op::Dir(at("dev")?)));
    ops.push((
        "mount a tmpfs at /dev".into(),
        Op::Tmpfs {
            at: at("dev")?,
            data: c"size=64k,mode=0755".to_owned(),
            flags: libc::MS_NOSUID | libc::MS_NOEXEC,
        },
    ));
    for (name, _) in DEVICES {
        if !Path::new("/dev").join(name).exists() {
            continue;
        }
        let node = format!("dev/{name}");
        ops.push((format!("create /{node}"), Op::File(at(&node)?)));
        ops.push((
            format!("bind /{node}"),
            Op::Bind {
                src: cstring(format!("/{node}"))?,
                at: at(&node)?,
            },
        ));
    }
    ops.push((
        "remount /dev read-only".into(),
        Op::Remount {
            at: at("dev")?,
            flags: libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NOEXEC,
        },
    ));
    ops.push(("mkdir /tmp".into(), Op::Dir(at("tmp")?)));
    ops.push((
        "mount a tmpfs at /tmp".into(),
        Op::Tmpfs {
            at: at("tmp")?,
            data: CString::new(format!("size={},mode=1777", cfg.max_file_bytes))
                .map_err(|e| StartError::Setup(e.to_string()))?,
            flags: nosuid_nodev,
        },
    ));
    ops.push(("mkdir /sandbox".into(), Op::Dir(at("sandbox")?)));
    ops.push((
        "bind the run's directory at /sandbox".into(),
        Op::Bind {
            src: cstring(&dir.work)?,
            at: at("sandbox")?,
        },
    ));
    ops.push((
        "remount /sandbox nosuid, nodev".into(),
        Op::Remount {
            at: at("sandbox")?,
            flags: nosuid_nodev | locked_flags(&dir.work)?,
        },
    ));
    rules.push((c"/sandbox".to_owned(), confine::read_write()));
    rules.push((c"/tmp".to_owned(), confine::read_write()));
    rules.extend(device_rules("")?);
    if ops.len() > MAX_OPS {
        return Err(StartError::Setup("too many mount steps".into()));
    }
    Ok((ops, rules))
}

/// The Landlock rules of the landlock mode, on the host's paths.
pub(crate) fn host_rules(dir: &RunDir) -> Result<Rules> {
    let mut rules: Rules = vec![(c"/usr".to_owned(), confine::read_exec())];
    for (name, kind) in lib_dirs() {
        if let LibDir::Real = kind {
            rules.push((cstring(format!("/{name}"))?, confine::read_exec()));
        }
    }
    rules.push((cstring(&dir.work)?, confine::read_write()));
    rules.extend(device_rules("")?);
    Ok(rules)
}
