//! Choosing the sandbox: `auto` or one mode by name, each checked by a live probe before any
//! model-written program runs, and the process-wide choice that tasks' code runners use.
//!
//! `auto` takes the first of `bwrap`, `namespaces`, `landlock` whose probe passes and never
//! `unsafe-rlimit`: when none passes, code rewards are refused with [`SandboxError::Unavailable`],
//! which names what each mode lacked and how to get a sandbox. The weak mode is only ever used
//! when asked for by name (`sandbox = "unsafe-rlimit"`, `--sandbox unsafe-rlimit`,
//! `FULCRUM_SANDBOX=unsafe-rlimit`).
//!
//! The probe runs a program that tries to write into a world-writable directory outside its
//! own: a containing mode passes only if the program runs, reports the write refused, and the
//! file is absent afterwards. So a bwrap that fails to start, or a "bwrap" that runs programs
//! unconfined, is not taken for a sandbox.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::config::{is_root, RunOutput, SandboxConfig, SandboxMode};
use super::confine::landlock_abi;
use super::run::run_python;

/// The environment variable that chooses the sandbox where no config key or flag did.
pub const SANDBOX_ENV: &str = "FULCRUM_SANDBOX";

const HOW_TO_GET: &str = "Install bubblewrap (as root: `apt-get install -y bubblewrap`, or run \
    scripts/setup-sandbox.sh), or use a kernel that allows user namespaces or Landlock. Only for \
    programs you trust: opt into the weak rlimit-only mode with sandbox = \"unsafe-rlimit\" \
    (trainer config), --sandbox unsafe-rlimit (fulcrum score) or FULCRUM_SANDBOX=unsafe-rlimit";

/// Every valid choice: `auto`, then each mode (as [`SandboxMode`] spells it).
fn valid_choices() -> Vec<&'static str> {
    std::iter::once("auto")
        .chain(SandboxMode::ALL.iter().map(|m| m.name()))
        .collect()
}

/// Why no sandbox, or not the one asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// `auto` found no mode that contains file writes, network and processes.
    #[error("code rewards refused: no code sandbox that contains file writes, network and processes works here ({tried}). {how}", how = HOW_TO_GET)]
    Unavailable {
        /// Each mode tried and why it failed.
        tried: String,
    },
    /// The mode asked for by name does not work here.
    #[error("code rewards refused: sandbox mode {mode} was asked for but does not work here: {why}. {how}", how = HOW_TO_GET)]
    ModeUnavailable {
        /// The mode asked for.
        mode: SandboxMode,
        /// What failed.
        why: String,
    },
    /// A name that is no mode: every valid name, and the nearest (fulcrum-core's
    /// `unknown_name`, as text: this error type is compared in tests, `CoreError` is not `Eq`).
    #[error("{0}")]
    UnknownMode(String),
    /// `FULCRUM_SANDBOX` holds no mode name.
    #[error("{var}={given:?} is not a sandbox mode; valid: {valid}", var = SANDBOX_ENV, valid = valid_choices().join(", "))]
    BadEnv {
        /// The variable's value.
        given: String,
    },
    /// The process already chose (and probed) a sandbox, and a different one is asked for.
    #[error("the code sandbox of this process is already {chosen}; cannot switch to {asked}")]
    AlreadyChosen {
        /// The choice in force.
        chosen: SandboxChoice,
        /// The choice refused.
        asked: SandboxChoice,
    },
}

/// Which sandbox to use, as written in config and flags: `auto` or a mode's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum SandboxChoice {
    /// The first containing mode that works here; refuse when none does.
    #[default]
    Auto,
    /// Exactly this mode; refuse when it does not work here.
    Mode(SandboxMode),
}

impl fmt::Display for SandboxChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxChoice::Auto => f.write_str("auto"),
            SandboxChoice::Mode(m) => f.write_str(m.name()),
        }
    }
}

impl FromStr for SandboxChoice {
    type Err = SandboxError;
    fn from_str(s: &str) -> Result<Self, SandboxError> {
        if s.trim() == "auto" {
            return Ok(SandboxChoice::Auto);
        }
        s.trim().parse().map(SandboxChoice::Mode).map_err(|_| {
            let e = fulcrum_core::names::unknown_name("sandbox mode", s.trim(), &valid_choices());
            SandboxError::UnknownMode(e.to_string())
        })
    }
}

impl TryFrom<String> for SandboxChoice {
    type Error = SandboxError;
    fn try_from(s: String) -> Result<Self, SandboxError> {
        s.parse()
    }
}

impl From<SandboxChoice> for String {
    fn from(c: SandboxChoice) -> String {
        c.to_string()
    }
}

/// The mode picked and why (the modes tried before it, and what it enforces here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// The mode.
    pub mode: SandboxMode,
    /// Why: modes that failed their probe, then what this one enforces here.
    pub why: String,
}

impl SandboxChoice {
    /// Probes the mode(s) this choice allows, with `base`'s interpreter and bwrap path.
    pub fn resolve(self, base: &SandboxConfig) -> Result<Chosen, SandboxError> {
        match self {
            SandboxChoice::Auto => {
                let mut tried = Vec::new();
                for mode in SandboxMode::ALL.iter().copied().filter(|m| m.contains()) {
                    match probe(mode, base) {
                        Ok(detail) => {
                            tried.push(detail);
                            return Ok(Chosen {
                                mode,
                                why: tried.join("; "),
                            });
                        }
                        Err(why) => tried.push(format!("{mode}: {why}")),
                    }
                }
                Err(SandboxError::Unavailable {
                    tried: tried.join("; "),
                })
            }
            SandboxChoice::Mode(mode) => probe(mode, base)
                .map(|detail| Chosen {
                    mode,
                    why: format!("asked for by name; {detail}"),
                })
                .map_err(|why| SandboxError::ModeUnavailable { mode, why }),
        }
    }
}

/// What `mode` would enforce here, or why it cannot run (checked, then proved by a probe).
pub fn probe(mode: SandboxMode, base: &SandboxConfig) -> Result<String, String> {
    let root = is_root();
    let abi = landlock_abi();
    let detail = match mode {
        SandboxMode::Bwrap => {
            if !base.bwrap.is_file() {
                return Err(format!("not found at {}", base.bwrap.display()));
            }
            let f = super::bwrap::features(&base.bwrap);
            let extras = match (f.seccomp, f.disable_userns) {
                (true, true) => "with the seccomp filter and --disable-userns",
                (true, false) => "with the seccomp filter; this bwrap lacks --disable-userns (0.8)",
                (false, _) => "without the seccomp filter: this bwrap lacks --add-seccomp-fd (0.5)",
            };
            format!("bwrap: {} works ({extras})", base.bwrap.display())
        }
        SandboxMode::Namespaces => format!(
            "namespaces: mount, pid, network, IPC, UTS and cgroup namespaces {}, seccomp, {}",
            if root {
                "(made as root, or in a user namespace where root may not; the program runs as uid 65534)"
            } else {
                "in a user namespace"
            },
            if abi > 0 {
                format!("Landlock ABI {abi}")
            } else {
                "no Landlock (this kernel lacks it; the private root alone keeps host files out)"
                    .into()
            }
        ),
        SandboxMode::Landlock => {
            if abi == 0 {
                return Err(
                    "this kernel has no Landlock (not built in, or not in its lsm= list)".into(),
                );
            }
            if !root && abi < 6 {
                return Err(format!(
                    "Landlock ABI {abi}: a non-root runner needs ABI 6 (Linux 6.12) so that programs cannot signal its processes"
                ));
            }
            format!(
                "landlock: Landlock ABI {abi}, seccomp, no namespaces{}",
                if root { ", uid 65534" } else { "" }
            )
        }
        SandboxMode::UnsafeRlimit => "unsafe-rlimit: rlimits only".into(),
    };
    if !base.python.is_file() {
        return Err(format!(
            "no Python interpreter at {}",
            base.python.display()
        ));
    }
    let canary = Canary::new()?;
    let target = canary.0.join("escaped");
    let program = format!(
        "try:\n    open({:?}, 'w').write('x')\n    print('escaped')\nexcept OSError:\n    print('contained')\n",
        target.to_string_lossy()
    );
    let cfg = SandboxConfig {
        mode,
        wall: base.wall.max(Duration::from_secs(10)),
        cpu_seconds: base.cpu_seconds.max(5),
        ..base.clone()
    };
    let out = run_python(&cfg, &program, "").map_err(|e| e.to_string())?;
    let escaped = target.exists() || out.stdout.trim() == "escaped";
    let ran = matches!(out.stdout.trim(), "contained" | "escaped");
    match (ran, escaped) {
        (true, _) if !mode.contains() => Ok(detail),
        (true, false) => Ok(detail),
        (_, true) => Err(
            "its probe program wrote a file outside its own directory: it does not contain programs"
                .into(),
        ),
        (false, false) => Err(format!("its probe program failed: {}", summary(&out))),
    }
}

fn summary(out: &RunOutput) -> String {
    let last = out
        .stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output");
    let status = match (out.exit_code, out.signal, out.timed_out) {
        (_, _, true) => "timed out".to_string(),
        (Some(c), _, _) => format!("exit {c}"),
        (None, Some(s), _) => format!("signal {s}"),
        (None, None, _) => "no status".to_string(),
    };
    format!("{status}: {}", last.chars().take(300).collect::<String>())
}

/// A world-writable directory outside the run's own, removed on drop.
struct Canary(PathBuf);

impl Canary {
    fn new() -> Result<Canary, String> {
        use std::os::unix::fs::PermissionsExt;
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fulcrum-probe-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let err =
            |e: std::io::Error| format!("cannot make the probe's directory {}: {e}", dir.display());
        std::fs::create_dir(&dir).map_err(err)?;
        let canary = Canary(dir.clone());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(err)?;
        Ok(canary)
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

static CHOICE: Mutex<Option<SandboxChoice>> = Mutex::new(None);
static IN_USE: OnceLock<(SandboxChoice, Result<Chosen, SandboxError>)> = OnceLock::new();

/// Sets the choice that [`sandbox_in_use`] resolves (a config key or flag; it wins over
/// `FULCRUM_SANDBOX`). Once a sandbox was resolved, only the same choice is accepted.
pub fn set_sandbox_choice(choice: SandboxChoice) -> Result<(), SandboxError> {
    let mut slot = CHOICE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((chosen, resolved)) = IN_USE.get() {
        // Naming the mode that `auto` already picked is the same choice (a resumed run
        // records the mode it used).
        let same_mode =
            matches!((choice, resolved), (SandboxChoice::Mode(m), Ok(c)) if c.mode == m);
        if *chosen != choice && !same_mode {
            return Err(SandboxError::AlreadyChosen {
                chosen: *chosen,
                asked: choice,
            });
        }
    }
    *slot = Some(choice);
    Ok(())
}

/// The choice in force: the one set, else `FULCRUM_SANDBOX`, else `auto`.
pub fn sandbox_choice() -> Result<SandboxChoice, SandboxError> {
    if let Some(c) = *CHOICE.lock().unwrap_or_else(PoisonError::into_inner) {
        return Ok(c);
    }
    match std::env::var(SANDBOX_ENV) {
        Ok(v) if !v.trim().is_empty() => v
            .parse()
            .map_err(|_| SandboxError::BadEnv { given: v.clone() }),
        _ => Ok(SandboxChoice::Auto),
    }
}

/// The sandbox of this process: resolved (probed) once, on first use, and printed once to
/// stderr when it works (a refusal is the caller's to report); later calls return the same
/// answer.
pub fn sandbox_in_use() -> Result<Chosen, SandboxError> {
    let choice = sandbox_choice()?;
    let (_, resolved) = IN_USE.get_or_init(|| {
        let r = choice.resolve(&SandboxConfig::default());
        match &r {
            Ok(c) if c.mode.contains() => {
                eprintln!("fulcrum: code sandbox: {} mode ({})", c.mode, c.why)
            }
            Ok(c) => eprintln!(
                "fulcrum: code sandbox: {} mode, asked for by name: model-written programs are NOT contained (they can write files, use the network and leave processes behind); use it only for programs you trust",
                c.mode
            ),
            Err(_) => {}
        }
        (choice, r)
    });
    resolved.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_by_name_and_a_typo_suggests_the_nearest() {
        assert_eq!(
            "auto".parse::<SandboxChoice>().ok(),
            Some(SandboxChoice::Auto)
        );
        assert_eq!(
            "landlock".parse::<SandboxChoice>().ok(),
            Some(SandboxChoice::Mode(SandboxMode::Landlock))
        );
        let err = "bwarp".parse::<SandboxChoice>().unwrap_err().to_string();
        assert!(
            err.contains("unsafe-rlimit") && err.contains("did you mean bwrap?"),
            "{err}"
        );
    }
}
