//! The directories fulcrum writes (a run, a comparison) say what they are and are held by one
//! process at a time.
//!
//! - **Kind.** `.fulcrum` in the directory records its [`DirKind`]; a command refuses a
//!   directory of another kind, so a comparison is never trained into and a run never
//!   compared into (each would overwrite the other's `summary.json`). Directories written before
//!   the marker existed are recognised by their files (`compare.json`: a comparison;
//!   `config.toml`: a run). A directory of neither kind that holds files, or that holds fulcrum
//!   directories (`runs/` given as one run), is refused too: fulcrum does not write among
//!   files it did not make.
//! - **Lock.** [`OwnedDir::claim`] takes an exclusive advisory lock on `.fulcrum.lock` for as
//!   long as the returned value lives (in practice, the life of the process). The kernel
//!   releases it when the process ends, however it ends, so a crashed run never leaves a stale
//!   lock; a second process is refused with the holder's PID, which the holder writes into the
//!   lock file.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::TrainError;

fulcrum_core::closed_set! {
    /// What a directory fulcrum writes is.
    pub enum DirKind("directory kind") {
        /// A training run (`fulcrum train`): config, metrics, checkpoints, summary.
        Run = "run",
        /// A comparison (`fulcrum compare`): a grid of runs and their summary.
        Compare = "compare",
    }
}

impl DirKind {
    /// The kind in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            DirKind::Run => "run directory",
            DirKind::Compare => "comparison directory (fulcrum compare)",
        }
    }
}

/// The marker of a directory's kind.
const MARKER: &str = ".fulcrum";
/// The lock file.
const LOCK: &str = ".fulcrum.lock";

/// What `dir` is: its marker, else what its files say (directories written before the
/// marker); `None` for a missing or empty directory; an error for a non-empty one that fulcrum
/// did not write.
pub fn dir_kind(dir: &Path) -> Result<Option<DirKind>, TrainError> {
    let marker = dir.join(MARKER);
    if marker.is_file() {
        let text = fs::read_to_string(&marker).map_err(TrainError::io(&marker))?;
        let kind = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("kind")?.as_str()?.parse::<DirKind>().ok())
            .ok_or_else(|| TrainError::RunFile {
                path: marker.clone(),
                line: 1,
                message: format!(
                    "not a fulcrum directory marker (expected {{\"kind\": \"run\"}} or \
                     {{\"kind\": \"compare\"}}), got {:?}",
                    text.trim()
                ),
            })?;
        return Ok(Some(kind));
    }
    if dir.join("compare.json").is_file() {
        return Ok(Some(DirKind::Compare));
    }
    if dir.join("config.toml").is_file() {
        return Ok(Some(DirKind::Run));
    }
    match fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TrainError::io(dir)(e)),
        Ok(entries) => {
            // Someone else's: a file (other than our lock, left by a claim that ended before
            // its marker was written), or a folder that is itself a fulcrum directory (`runs/`
            // given as a run). Plain folders are allowed: a comparison's `runs/` may be laid out
            // before it starts (shared warm-ups).
            let foreign = entries.into_iter().any(|e| {
                let Ok(e) = e else { return true };
                let path = e.path();
                if path.is_dir() {
                    path.join(MARKER).exists() || path.join("config.toml").exists()
                } else {
                    e.file_name() != LOCK
                }
            });
            if foreign {
                Err(TrainError::NotOurs {
                    dir: dir.to_path_buf(),
                })
            } else {
                Ok(None)
            }
        }
    }
}

/// Refuses `dir` unless it is of kind `want` (or new).
pub fn check_kind(dir: &Path, want: DirKind) -> Result<(), TrainError> {
    match dir_kind(dir)? {
        Some(is) if is != want => Err(TrainError::WrongDirKind {
            dir: dir.to_path_buf(),
            is,
            want,
        }),
        _ => Ok(()),
    }
}

/// A directory this process holds: its lock, for as long as this value lives.
#[derive(Debug)]
pub struct OwnedDir {
    dir: PathBuf,
    /// Holds the lock; closing it (on drop or process exit) releases it.
    _lock: File,
}

impl OwnedDir {
    /// Creates `dir` if needed, refuses it when it is of another kind or another process holds
    /// it (naming that process), then locks it and marks it as `kind`.
    pub fn claim(dir: &Path, kind: DirKind) -> Result<OwnedDir, TrainError> {
        check_kind(dir, kind)?;
        fs::create_dir_all(dir).map_err(TrainError::io(dir))?;
        let path = dir.join(LOCK);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(TrainError::io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(TrainError::DirInUse {
                    dir: dir.to_path_buf(),
                    holder: holder.trim().to_string(),
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(TrainError::io(&path)(e)),
        }
        // Locked: say who holds it, for the process that will be refused.
        let me = std::process::id().to_string();
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
            .and_then(|()| file.write_all(me.as_bytes()))
            .and_then(|()| file.flush())
            .map_err(TrainError::io(&path))?;
        // The kind is checked again under the lock: another process may have marked the
        // directory between the first check and the lock.
        check_kind(dir, kind)?;
        let marker = dir.join(MARKER);
        if !marker.is_file() {
            let text = format!("{{\"kind\": \"{kind}\"}}\n");
            fs::write(&marker, text).map_err(TrainError::io(&marker))?;
        }
        Ok(OwnedDir {
            dir: dir.to_path_buf(),
            _lock: file,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_directory_is_refused_to_a_second_claim_naming_the_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r");
        let held = OwnedDir::claim(&dir, DirKind::Run).unwrap();
        let e = OwnedDir::claim(&dir, DirKind::Run).unwrap_err().to_string();
        assert!(e.contains(&std::process::id().to_string()), "{e}");
        assert!(e.contains("in use"), "{e}");
        drop(held);
        OwnedDir::claim(&dir, DirKind::Run).unwrap();
    }

    #[test]
    fn a_directory_of_another_kind_or_of_someone_else_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let cmp = tmp.path().join("c");
        drop(OwnedDir::claim(&cmp, DirKind::Compare).unwrap());
        let e = OwnedDir::claim(&cmp, DirKind::Run).unwrap_err().to_string();
        assert!(
            e.contains("comparison directory") && e.contains("not a run"),
            "{e}"
        );
        // Written before the marker existed: recognised by its files.
        let old = tmp.path().join("old");
        fs::create_dir(&old).unwrap();
        fs::write(old.join("config.toml"), "").unwrap();
        assert_eq!(dir_kind(&old).unwrap(), Some(DirKind::Run));
        assert!(check_kind(&old, DirKind::Compare).is_err());
        let foreign = tmp.path().join("home");
        fs::create_dir(&foreign).unwrap();
        fs::write(foreign.join("notes.txt"), "mine").unwrap();
        let e = OwnedDir::claim(&foreign, DirKind::Run).unwrap_err();
        assert!(matches!(e, TrainError::NotOurs { .. }), "{e}");
        assert_eq!(dir_kind(&tmp.path().join("new")).unwrap(), None);
        // `runs/` holding a run is not a run; a folder laid out in advance is fine.
        assert!(matches!(
            dir_kind(tmp.path()),
            Err(TrainError::NotOurs { .. })
        ));
        let laid_out = tmp.path().join("cmp2");
        fs::create_dir_all(laid_out.join("runs/task/sft-cache")).unwrap();
        assert_eq!(dir_kind(&laid_out).unwrap(), None);
    }
}
