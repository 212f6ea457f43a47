//! Checkpoint directories that are never half-written and never loaded when damaged.
//!
//! A checkpoint is a directory (`checkpoints/step-N/`, `checkpoints/final/`) whose files are
//! written by the caller into a temporary sibling (`.tmp-step-N-<pid>`), then listed with their
//! size and sha256 in `manifest.json` (with a format version and the caller's metadata), synced,
//! and renamed into place. A crash at any moment leaves either the previous checkpoint or the new
//! one, plus at most a `.tmp-*` directory that is ignored and cleaned up later. [`verify`] checks
//! every file against the manifest before anything is loaded.
//!
//! The manifest's format and its check live in fulcrum-model (`fulcrum_model::Manifest`,
//! `fulcrum_model::verify_checkpoint`), because every load of a checkpoint folder as a model
//! verifies it there, whoever loads it (`--resume`, the SFT cache, `fulcrum eval` / `generate` /
//! `convert`, `model.path`). This layer owns the atomic write, the metadata and the policy's
//! files. A policy's
//! checkpoint ([`save_policy`], [`load_policy`]) holds fulcrum-model's files (the model as an HF
//! folder and `optimizer.safetensors`) plus `checkpoint.json`: the format version, the
//! optimizer's step, its hyper-parameters and the trainer's state.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use fulcrum_model::{Model, ModelError};
use serde_json::json;

use crate::policy::{rl_optimizer, Optimizer, Policy};
use crate::ranks::Ranks;
use crate::{Config, TrainError};

/// Version of the checkpoint layout; a different one is refused, never patched.
pub const FORMAT_VERSION: u32 = fulcrum_model::CHECKPOINT_FORMAT;
/// The manifest's file name inside a checkpoint directory.
pub const MANIFEST: &str = fulcrum_model::MANIFEST;
/// The optimizer's step and the trainer's state inside a policy checkpoint.
pub const POLICY_META: &str = "checkpoint.json";

pub use fulcrum_model::{FileEntry, Manifest};

fn bad(path: &Path, message: impl Into<String>) -> TrainError {
    TrainError::Checkpoint {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// A checkpoint problem found by fulcrum-model, as the trainer's checkpoint error.
fn from_model(e: ModelError) -> TrainError {
    match e {
        ModelError::Checkpoint { path, message } => TrainError::Checkpoint { path, message },
        e => TrainError::Model(e),
    }
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<(u64, String), TrainError> {
    fulcrum_model::sha256_file(path).map_err(TrainError::io(path))
}

/// Writes the checkpoint `dest` atomically: `fill` creates a temporary directory at the path it
/// is given and writes the files there (plain files, and folders of plain files one level deep:
/// a final checkpoint's exports), then the manifest is added (a file in a folder listed as
/// `folder/name`), everything synced, and the directory renamed to `dest`, replacing an older
/// one of the same name.
pub fn write<F>(dest: &Path, meta: serde_json::Value, fill: F) -> Result<Manifest, TrainError>
where
    F: FnOnce(&Path) -> Result<(), TrainError>,
{
    let parent = dest.parent().unwrap_or(Path::new("."));
    let name = dest
        .file_name()
        .ok_or_else(|| bad(dest, "checkpoint path has no directory name"))?
        .to_string_lossy()
        .into_owned();
    fs::create_dir_all(parent).map_err(TrainError::io(parent))?;
    // Unique per writer, threads of one process included (two runs of a comparison may write
    // the same warm-up at once).
    static WRITERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let writer = WRITERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = parent.join(format!(".tmp-{name}-{}-{writer}", std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(TrainError::io(&tmp))?;
    }
    fill(&tmp)?;
    if !tmp.is_dir() {
        return Err(bad(dest, "the checkpoint writer created no directory"));
    }

    let mut files = Vec::new();
    for (name, p) in files_to_list(&tmp, dest)? {
        File::open(&p)
            .and_then(|f| f.sync_all())
            .map_err(TrainError::io(&p))?;
        let (bytes, sha256) = sha256_file(&p)?;
        files.push(FileEntry {
            name,
            bytes,
            sha256,
        });
    }
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        meta,
        files,
    };
    let mpath = tmp.join(MANIFEST);
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| bad(dest, e.to_string()))?;
    let mut f = File::create(&mpath).map_err(TrainError::io(&mpath))?;
    f.write_all(text.as_bytes())
        .map_err(TrainError::io(&mpath))?;
    f.sync_all().map_err(TrainError::io(&mpath))?;
    sync_dir(&tmp)?;

    // Replace an existing checkpoint of the same name: move it aside first (a directory cannot
    // be renamed over a non-empty one), then remove it once the new one is in place.
    let old = parent.join(format!(".old-{name}-{}-{writer}", std::process::id()));
    let had_old = dest.exists();
    if had_old {
        fs::rename(dest, &old).map_err(TrainError::io(dest))?;
    }
    fs::rename(&tmp, dest).map_err(TrainError::io(dest))?;
    sync_dir(parent)?;
    if had_old {
        fs::remove_dir_all(&old).map_err(TrainError::io(&old))?;
    }
    Ok(manifest)
}

/// The files of the checkpoint being written in `tmp`, by their manifest names, sorted: plain
/// files, and the plain files of its folders as `folder/name` (each folder synced); anything
/// else is an error.
fn files_to_list(tmp: &Path, dest: &Path) -> Result<Vec<(String, PathBuf)>, TrainError> {
    let entries = |dir: &Path| -> Result<Vec<(String, PathBuf)>, TrainError> {
        Ok(fs::read_dir(dir)
            .map_err(TrainError::io(dir))?
            .filter_map(|e| e.ok())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect())
    };
    let mut out = Vec::new();
    for (name, p) in entries(tmp)? {
        if p.is_file() {
            out.push((name, p));
        } else if p.is_dir() {
            for (inner, q) in entries(&p)? {
                if !q.is_file() {
                    return Err(bad(
                        dest,
                        format!(
                            "{} is not a plain file (folders nest one level)",
                            q.display()
                        ),
                    ));
                }
                out.push((format!("{name}/{inner}"), q));
            }
            sync_dir(&p)?;
        } else {
            return Err(bad(dest, format!("{} is not a plain file", p.display())));
        }
    }
    out.sort();
    Ok(out)
}

fn sync_dir(dir: &Path) -> Result<(), TrainError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(TrainError::io(dir))
}

/// Checks a checkpoint directory against its manifest: format version, every listed file
/// present with its size and sha256, no unlisted file (`fulcrum_model::verify_checkpoint`, the
/// check every load of a checkpoint makes). Returns the manifest.
pub fn verify(dir: &Path) -> Result<Manifest, TrainError> {
    fulcrum_model::verify_checkpoint(dir).map_err(from_model)
}

/// The `step-N` checkpoints under `dir`, sorted by step (temporary directories ignored).
pub fn list_steps(dir: &Path) -> Result<Vec<(u64, PathBuf)>, TrainError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut out: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .map_err(TrainError::io(dir))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("step-")?.parse().ok()?;
            Some((step, e.path()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Removes all but the newest `keep` (at least one) `step-N` checkpoints under `dir`. Called
/// after a checkpoint is complete (renamed into place), so the newest is never at risk.
pub fn prune_steps(dir: &Path, keep: u64) -> Result<(), TrainError> {
    let steps = list_steps(dir)?;
    let excess = steps.len().saturating_sub(keep.max(1) as usize);
    for (_, path) in &steps[..excess] {
        fs::remove_dir_all(path).map_err(TrainError::io(path))?;
    }
    Ok(())
}

/// Saves the policy as the checkpoint `checkpoints/step-{step}` (see [`save_policy`]), then,
/// with `keep > 0`, removes all but the newest `keep` step checkpoints: scheduled and interrupt
/// checkpoints alike. Returns the checkpoint's path.
pub fn save_step(
    checkpoints: &Path,
    step: u64,
    policy: &Policy,
    ranks: &mut Ranks,
    meta: serde_json::Value,
    keep: u64,
) -> Result<PathBuf, TrainError> {
    let dest = checkpoints.join(format!("step-{step}"));
    save_policy(&dest, policy, ranks, meta)?;
    if keep > 0 && ranks.is_main() {
        prune_steps(checkpoints, keep)?;
    }
    Ok(dest)
}

/// Removes `.tmp-*` and `.old-*` leftovers of an interrupted write.
pub fn clean_leftovers(dir: &Path) -> Result<(), TrainError> {
    if !dir.exists() {
        return Ok(());
    }
    for e in fs::read_dir(dir)
        .map_err(TrainError::io(dir))?
        .filter_map(|e| e.ok())
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tmp-") || name.starts_with(".old-") {
            fs::remove_dir_all(e.path()).map_err(TrainError::io(e.path()))?;
        }
    }
    Ok(())
}

/// Saves model, optimizer and the trainer's `meta` as the checkpoint `dest` (see [`write`]).
/// With a sharded optimizer every rank must call it (the state is gathered); rank 0 writes.
pub fn save_policy(
    dest: &Path,
    policy: &Policy,
    ranks: &mut Ranks,
    meta: serde_json::Value,
) -> Result<(), TrainError> {
    save_policy_with(dest, policy, ranks, meta, |_| Ok(()))
}

/// [`save_policy`], with `extra` writing more files (the exports of `export.rs`) into the
/// checkpoint's temporary folder on rank 0, so that they are listed in the manifest and appear
/// with the rest, or not at all.
pub(crate) fn save_policy_with(
    dest: &Path,
    policy: &Policy,
    ranks: &mut Ranks,
    meta: serde_json::Value,
    extra: impl FnOnce(&Path) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    let (state, step, masters) = match &policy.opt {
        Optimizer::Replicated(a) => {
            let (state, step) = a.state();
            (state, step, a.master_weights())
        }
        Optimizer::Sharded(z) => {
            let (state, step) = z.full_state(ranks)?;
            let bf16 = policy.model.net().kind() != tch::Kind::Float;
            let masters = if bf16 {
                Some(z.master_weights(ranks)?)
            } else {
                None
            };
            (state, step, masters)
        }
    };
    if !ranks.is_main() {
        return Ok(());
    }
    write(dest, meta.clone(), |dir| {
        fulcrum_model::save_checkpoint_files(dir, &policy.model, &state, masters.as_deref())?;
        let o = policy.opt.config();
        let record = json!({
            "format_version": FORMAT_VERSION,
            "optimizer_step": step,
            "adamw": {
                "beta1": o.beta1,
                "beta2": o.beta2,
                "eps": o.eps,
                "weight_decay": o.weight_decay,
            },
            "trainer": meta,
        });
        let path = dir.join(POLICY_META);
        fs::write(&path, record.to_string()).map_err(TrainError::io(&path))?;
        extra(dir)
    })?;
    Ok(())
}

/// Loads the model and the optimizer (built from `cfg` for `ranks`, its moments, step and any
/// fp32 master weights restored) of a verified policy checkpoint onto `device`. The state is
/// whole in the checkpoint, so it resumes at any rank count.
pub fn load_policy(
    dir: &Path,
    cfg: &Config,
    device: tch::Device,
    ranks: &Ranks,
) -> Result<(Model, Optimizer), TrainError> {
    let mut model = fulcrum_model::load_model(dir, device).map_err(from_model)?;
    let mut opt = rl_optimizer(
        &cfg.optim,
        cfg.model.dtype,
        cfg.dist.zero1,
        &mut model,
        ranks,
    );
    let path = dir.join(POLICY_META);
    let text = fs::read_to_string(&path).map_err(TrainError::io(&path))?;
    let record: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(dir, format!("{POLICY_META}: {e}")))?;
    let version = record.get("format_version").and_then(|v| v.as_u64());
    if version != Some(u64::from(FORMAT_VERSION)) {
        return Err(bad(
            dir,
            format!("{POLICY_META}: format_version: expected {FORMAT_VERSION}, got {version:?}"),
        ));
    }
    let step = record
        .get("optimizer_step")
        .and_then(|v| v.as_i64())
        .ok_or_else(|| {
            bad(
                dir,
                format!("{POLICY_META}: optimizer_step: missing or not an integer"),
            )
        })?;
    match &mut opt {
        Optimizer::Replicated(a) => {
            fulcrum_model::load_optimizer(dir, a, step).map_err(from_model)?
        }
        Optimizer::Sharded(z) => {
            let path = dir.join(fulcrum_model::OPTIMIZER_FILE);
            let state = fulcrum_model::read_named(&path, device).map_err(from_model)?;
            z.load_state(state, step, &path)?;
            let masters = dir.join(fulcrum_model::MASTER_FILE);
            if masters.exists() {
                let m = fulcrum_model::read_named(&masters, device).map_err(from_model)?;
                z.load_master_weights(m, &masters)?;
            }
        }
    }
    Ok((model, opt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(text: &'static str) -> impl FnOnce(&Path) -> Result<(), TrainError> {
        move |d: &Path| {
            fs::create_dir(d).unwrap();
            fs::write(d.join("model.safetensors"), text).unwrap();
            fs::write(d.join("state.json"), "{}").unwrap();
            Ok(())
        }
    }

    #[test]
    fn written_checkpoint_verifies_and_replaces_an_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("checkpoints/step-3");
        write(&dest, serde_json::json!({"step": 3}), fill("first")).unwrap();
        let m = write(&dest, serde_json::json!({"step": 3}), fill("second")).unwrap();
        assert_eq!(verify(&dest).unwrap(), m);
        assert_eq!(
            fs::read_to_string(dest.join("model.safetensors")).unwrap(),
            "second"
        );
        let names: Vec<_> = fs::read_dir(dir.path().join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("step-3")]);
    }

    #[test]
    fn folders_one_level_deep_are_listed_and_deeper_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("final");
        let m = write(&dest, serde_json::json!({}), |d| {
            fs::create_dir_all(d.join("hf")).unwrap();
            fs::write(d.join("model.safetensors"), "w").unwrap();
            fs::write(d.join("hf/config.json"), "{}").unwrap();
            Ok(())
        })
        .unwrap();
        let names: Vec<&str> = m.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["hf/config.json", "model.safetensors"]);
        verify(&dest).unwrap();
        let e = write(&dir.path().join("deep"), serde_json::json!({}), |d| {
            fs::create_dir_all(d.join("a/b")).unwrap();
            Ok(())
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("folders nest one level"), "{e}");
    }

    #[test]
    fn truncated_corrupt_or_incomplete_checkpoints_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("step-1");
        write(&dest, serde_json::json!({}), fill("weights!")).unwrap();
        fs::write(dest.join("model.safetensors"), "weights").unwrap();
        assert!(verify(&dest).unwrap_err().to_string().contains("truncated"));
        fs::write(dest.join("model.safetensors"), "weightz!").unwrap();
        assert!(verify(&dest).unwrap_err().to_string().contains("corrupt"));
        fs::remove_file(dest.join("model.safetensors")).unwrap();
        assert!(verify(&dest).unwrap_err().to_string().contains("missing"));
        fs::write(dest.join(MANIFEST), "{\"format_version\": 1, \"meta\"").unwrap();
        assert!(verify(&dest).unwrap_err().to_string().contains("corrupt"));
        fs::remove_file(dest.join(MANIFEST)).unwrap();
        assert!(verify(&dest)
            .unwrap_err()
            .to_string()
            .contains("incomplete"));
    }

    #[test]
    fn other_format_versions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("step-1");
        write(&dest, serde_json::json!({}), fill("w")).unwrap();
        let text = fs::read_to_string(dest.join(MANIFEST))
            .unwrap()
            .replace("\"format_version\": 1", "\"format_version\": 99");
        fs::write(dest.join(MANIFEST), text).unwrap();
        assert!(verify(&dest)
            .unwrap_err()
            .to_string()
            .contains("format version 99"));
    }

    #[test]
    fn steps_are_listed_in_order_and_leftovers_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        for s in [10, 2, 30] {
            write(
                &dir.path().join(format!("step-{s}")),
                serde_json::json!({}),
                fill("w"),
            )
            .unwrap();
        }
        fs::create_dir(dir.path().join(".tmp-step-40-1")).unwrap();
        let steps: Vec<u64> = list_steps(dir.path())
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(steps, vec![2, 10, 30]);
        clean_leftovers(dir.path()).unwrap();
        assert!(!dir.path().join(".tmp-step-40-1").exists());
        // Pruning keeps the newest by step number (10 after 2, not by name), never `final`,
        // and at least one.
        fs::create_dir(dir.path().join("final")).unwrap();
        prune_steps(dir.path(), 2).unwrap();
        let left =
            |d: &Path| -> Vec<u64> { list_steps(d).unwrap().into_iter().map(|(s, _)| s).collect() };
        assert_eq!(left(dir.path()), vec![10, 30]);
        prune_steps(dir.path(), 0).unwrap();
        assert_eq!(left(dir.path()), vec![30]);
        assert!(dir.path().join("final").is_dir());
    }

    #[test]
    fn a_write_that_fails_midway_leaves_the_previous_checkpoint_intact() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("step-4");
        write(&dest, serde_json::json!({"step": 4}), fill("good")).unwrap();
        let failing = |d: &Path| -> Result<(), TrainError> {
            fs::create_dir(d).unwrap();
            fs::write(d.join("model.safetensors"), "half").unwrap();
            Err(TrainError::Io {
                path: d.join("optimizer.safetensors"),
                source: std::io::Error::from_raw_os_error(28), // ENOSPC
            })
        };
        let err = write(&dest, serde_json::json!({"step": 4}), failing)
            .unwrap_err()
            .to_string();
        assert!(err.contains("optimizer.safetensors"), "{err}");
        verify(&dest).unwrap();
        assert_eq!(
            fs::read_to_string(dest.join("model.safetensors")).unwrap(),
            "good"
        );
        clean_leftovers(dir.path()).unwrap();
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("step-4")]);
    }

    #[test]
    fn a_model_load_of_a_written_checkpoint_is_verified() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("final");
        write(&dest, serde_json::json!({}), |d| {
            Ok(Model::tiny(tch::Device::Cpu, 0)?.save(d)?)
        })
        .unwrap();
        fulcrum_model::load_model(&dest, tch::Device::Cpu).unwrap();
        let weights = dest.join("model.safetensors");
        let mut bytes = fs::read(&weights).unwrap();
        bytes.truncate(bytes.len() - 1);
        fs::write(&weights, bytes).unwrap();
        let e = fulcrum_model::load_model(&dest, tch::Device::Cpu)
            .map_err(from_model)
            .unwrap_err();
        assert!(matches!(e, TrainError::Checkpoint { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.starts_with(&format!(
                "checkpoint {}: model.safetensors is",
                dest.display()
            )) && e.contains("truncated"),
            "{e}"
        );
    }
}
