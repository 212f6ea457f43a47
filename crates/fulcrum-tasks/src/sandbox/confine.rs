//! The two kernel confinements of the built-in modes, built in the parent before fork: the
//! seccomp filter (`seccompiler`) and the Landlock ruleset (`landlock`).
//!
//! **seccomp** refuses, with `EPERM`, the system calls a scored program has no use for and an
//! attacker has: every `socket()` (no network, no host UNIX sockets; `socketpair(AF_UNIX)`
//! stays, asyncio needs it), io_uring (it can open sockets without `socket()`), `ptrace`,
//! other processes' memory (`process_vm_*`, `process_madvise`, `pidfd_getfd`, `kcmp`), BPF,
//! perf events, userfaultfd, every mount and root change, new namespaces (`unshare`, `setns`,
//! `clone` with a `CLONE_NEW*` flag; `clone3`, whose flags a filter cannot read, answers
//! `ENOSYS` so the C library falls back to `clone`), `setsid` and `setpgid` (every descendant
//! stays in the run's process group, which the runner kills), keyrings, SysV and POSIX message
//! IPC (host-wide without an IPC namespace), kernel modules, kexec, reboot, swap, accounting,
//! file handles, fanotify, terminal injection (`TIOCSTI`, `TIOCLINUX`), and `prlimit` on any
//! process but itself. On x86_64 the x32 system-call range is refused as a whole, and calls of
//! another architecture (32-bit `int 0x80`) kill the process (seccompiler's architecture check).
//!
//! **Landlock** handles every filesystem right of ABI 1-5, TCP bind and connect (ABI 4) and the
//! signal and abstract-socket scopes (ABI 6); what the rules in `native.rs` do not grant is
//! denied.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreated, Scope, ABI,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Read and execute: the interpreter, its libraries, the program's source.
pub(crate) fn read_exec() -> BitFlags<AccessFs> {
    AccessFs::from_read(ABI::V5)
}

/// Everything, in the program's own directories.
pub(crate) fn read_write() -> BitFlags<AccessFs> {
    AccessFs::from_all(ABI::V5)
}

/// `/dev/null`, `/dev/zero`, `/dev/full`: read, write, truncate (`open(.., 'w')`) and ioctl
/// (Python asks whether a file is a terminal).
pub(crate) fn device_rw() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
}

/// `/dev/random`, `/dev/urandom`.
pub(crate) fn device_read() -> BitFlags<AccessFs> {
    AccessFs::ReadFile.into()
}

/// The Landlock ABI of the running kernel (0: none), for reports only: the rules themselves
/// are built by the crate's compatibility logic, which keeps this number private on purpose.
pub(crate) fn landlock_abi() -> i64 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION (1) with a null attribute only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    v.max(0)
}

/// A fresh ruleset (one per run: the child consumes it). `required` makes Landlock a hard
/// requirement (the `landlock` mode, where it is the only filesystem barrier); `isolated_uid`
/// says the program runs as another uid than the runner (root), so that signal scoping and
/// truncate control, which guard the runner's own files and processes, may be missing.
pub(crate) fn ruleset(
    required: bool,
    isolated_uid: bool,
) -> Result<RulesetCreated, landlock::RulesetError> {
    let mut r = Ruleset::default();
    if required {
        r = r
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(ABI::V1))?;
        if !isolated_uid {
            r = r
                .handle_access(AccessFs::from_all(ABI::V3))?
                .scope(Scope::from_all(ABI::V6))?;
        }
    }
    r.set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI::V5))?
        .handle_access(AccessNet::from_all(ABI::V4))?
        .scope(Scope::from_all(ABI::V6))?
        .create()
}

/// The seccomp filters, compiled once per process: refusals with `EPERM`, then `clone3` with
/// `ENOSYS` (one action per seccompiler filter; the kernel applies the strictest answer).
pub(crate) fn seccomp_filters() -> Result<&'static [BpfProgram], String> {
    static FILTERS: OnceLock<Result<Vec<BpfProgram>, String>> = OnceLock::new();
    FILTERS
        .get_or_init(|| build_filters().map_err(|e| format!("seccomp filter: {e}")))
        .as_ref()
        .map(Vec::as_slice)
        .map_err(Clone::clone)
}

fn build_filters() -> Result<Vec<BpfProgram>, seccompiler::Error> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let cond = |arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, len, op, value)
    };
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in REFUSED {
        deny.insert(nr, Vec::new());
    }
    // socketpair only for AF_UNIX pairs (connected to nothing but each other).
    deny.insert(
        libc::SYS_socketpair,
        vec![SeccompRule::new(vec![cond(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )?])?],
    );
    // prlimit on itself (pid 0) only: resource.setrlimit works, lowering the runner's does not.
    deny.insert(
        libc::SYS_prlimit64,
        vec![SeccompRule::new(vec![cond(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::Ne,
            0,
        )?])?],
    );
    // clone with any namespace flag.
    let ns_flags = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ];
    let clone_rules = ns_flags
        .iter()
        .map(|&f| {
            let f = f as u64;
            SeccompRule::new(vec![cond(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(f),
                f,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    deny.insert(libc::SYS_clone, clone_rules);
    let ioctl_rules = [libc::TIOCSTI, libc::TIOCLINUX]
        .iter()
        // The request's type differs between C libraries (c_ulong on glibc, c_int on musl).
        .map(|&req| {
            #[allow(clippy::unnecessary_cast)]
            let req = req as u64;
            SeccompRule::new(vec![cond(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                req,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    deny.insert(libc::SYS_ioctl, ioctl_rules);

    let eperm = SeccompAction::Errno(libc::EPERM as u32);
    let mut first: BpfProgram =
        SeccompFilter::new(deny, SeccompAction::Allow, eperm, arch)?.try_into()?;
    if arch == TargetArch::x86_64 {
        first.splice(0..0, x32_refusal());
    }
    let clone3 = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let second: BpfProgram = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )?
    .try_into()?;
    Ok(vec![first, second])
}

/// A compiled program as the bytes of `struct sock_filter[]` (what bwrap reads from a file
/// descriptor).
pub(crate) fn filter_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for f in program {
        out.extend_from_slice(&f.code.to_ne_bytes());
        out.push(f.jt);
        out.push(f.jf);
        out.extend_from_slice(&f.k.to_ne_bytes());
    }
    out
}

/// x32 system calls carry the x86_64 architecture tag with bit 30 set in their number, so
/// the per-number rules above would not see them; seccompiler has no number ranges, hence
/// three instructions ahead of its program: load the number, refuse it if it is >= 2^30.
fn x32_refusal() -> [seccompiler::sock_filter; 3] {
    // BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JGE | BPF_K, BPF_RET | BPF_K.
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JGE_K: u16 = 0x35;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    [
        // seccomp_data.nr is at offset 0.
        seccompiler::sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        seccompiler::sock_filter {
            code: BPF_JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: 0x4000_0000,
        },
        seccompiler::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
    ]
}

/// Refused whatever their arguments.
const REFUSED: [i64; 58] = [
    libc::SYS_socket,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_setsid,
    libc::SYS_setpgid,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_fanotify_init,
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semctl,
    libc::SYS_semtimedop,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_timedreceive,
];
