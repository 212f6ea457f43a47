//! The model's and the optimizer's files of a checkpoint, and the manifest that vouches for
//! them.
//!
//! A checkpoint folder holds the model exactly as [`Model::save`] writes it (so it loads
//! anywhere an HF folder does) plus [`OPTIMIZER_FILE`], the AdamW moments named
//! `exp_avg.<param>` and `exp_avg_sq.<param>`, and [`MANIFEST`]: every file's name, size and
//! sha256, a format version and the trainer's metadata ([`Manifest`]). Where the folder goes
//! and how it is made atomic belong to the trainer (`fulcrum-train`'s `checkpoint.rs`, which
//! writes the manifest); reading and checking it is here, because every load of a checkpoint
//! checks it, whoever asks for the model.
//!
//! The one rule: a folder with a `manifest.json` is verified before anything in it is loaded
//! ([`verify_model_files`], called where an HF folder is read; [`read_named`] for the
//! optimizer's files; [`verify_checkpoint`] for the whole folder). A missing, truncated,
//! corrupt or unlisted file is an error naming the checkpoint and the file, never a silent
//! load. Files in a folder inside the checkpoint (the exports of a final checkpoint, `hf/`,
//! `adapter/`) are listed as `folder/name`, one level deep; a model load checks only the
//! files it reads, the whole-folder check every one. A file this process has already hashed and that has not changed since (same inode,
//! size, modification and change times) is not hashed again, so that verifying a checkpoint and
//! then loading it reads the weights once for the hash.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use tch::{Device, Tensor};

use crate::error::{ModelError, Result};
use crate::load::safetensors::read_safetensors;
use crate::model::{save_named, Model};
use crate::optim::AdamW;

/// The optimizer state's file inside a checkpoint folder.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";

/// The fp32 master weights (mixed precision) beside a model saved in bf16: resume continues
/// from them, while the folder still loads anywhere as the bf16 model.
pub const MASTER_FILE: &str = "master_weights.safetensors";

/// The manifest's file name inside a checkpoint folder.
pub const MANIFEST: &str = "manifest.json";

/// Version of the checkpoint layout; a different one is refused, never patched.
pub const CHECKPOINT_FORMAT: u32 = 1;

/// One file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

/// A checkpoint's `manifest.json`: format version, the writer's metadata (step, data
/// position, ...), and every file with its size and sha256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    pub meta: serde_json::Value,
    pub files: Vec<FileEntry>,
}

fn bad(dir: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Checkpoint {
        path: dir.to_path_buf(),
        message: message.into(),
    }
}

/// Size and sha256 (hex) of a file.
pub fn sha256_file(path: &Path) -> std::io::Result<(u64, String)> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            break;
        }
        n += k as u64;
        h.update(&buf[..k]);
    }
    let hex = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((n, hex))
}

/// True when `dir` holds a manifest: it is a checkpoint, and loads only verified.
pub fn is_checkpoint(dir: &Path) -> bool {
    dir.join(MANIFEST).is_file()
}

impl Manifest {
    /// Reads `dir/manifest.json` and checks its format version and file names (plain names in
    /// the folder, each once). The files themselves are not read.
    pub fn read(dir: &Path) -> Result<Manifest> {
        if !dir.is_dir() {
            return Err(bad(dir, "not a directory"));
        }
        let text = std::fs::read_to_string(dir.join(MANIFEST)).map_err(|e| {
            bad(
                dir,
                format!("cannot read {MANIFEST}: {e} (incomplete or not a fulcrum checkpoint)"),
            )
        })?;
        let manifest: Manifest = serde_json::from_str(&text)
            .map_err(|e| bad(dir, format!("{MANIFEST} is corrupt: {e}")))?;
        if manifest.format_version != CHECKPOINT_FORMAT {
            return Err(bad(
                dir,
                format!(
                    "format version {} is not supported (this build reads version {CHECKPOINT_FORMAT})",
                    manifest.format_version
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for entry in &manifest.files {
            // A plain name, or `folder/name`: never absolute, never up, never deeper.
            let parts: Vec<&str> = entry.name.split('/').collect();
            let unsafe_name = parts.len() > 2
                || parts
                    .iter()
                    .any(|p| p.is_empty() || *p == "." || p.contains(".."))
                || entry.name.contains('\\')
                || entry.name == MANIFEST;
            if unsafe_name {
                return Err(bad(
                    dir,
                    format!("{MANIFEST} lists an unsafe file name {:?}", entry.name),
                ));
            }
            if !seen.insert(entry.name.as_str()) {
                return Err(bad(dir, format!("{MANIFEST} lists {:?} twice", entry.name)));
            }
        }
        Ok(manifest)
    }

    fn entry(&self, name: &str) -> Option<&FileEntry> {
        self.files.iter().find(|e| e.name == name)
    }

    /// Checks the listed files that `which` selects against their size and sha256, and that
    /// the folder, and each folder in it that the manifest lists files of, holds no plain file
    /// the manifest does not list (a file put there later would be loaded unchecked).
    fn verify(&self, dir: &Path, which: impl Fn(&str) -> bool) -> Result<()> {
        let plain_files = |sub: &str| -> Result<Vec<String>> {
            let at = dir.join(sub);
            let listed = std::fs::read_dir(&at).map_err(|e| ModelError::io(&at, e))?;
            Ok(listed
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .map(|n| {
                    if sub.is_empty() {
                        n
                    } else {
                        format!("{sub}/{n}")
                    }
                })
                .collect())
        };
        let mut folders: Vec<&str> = self
            .files
            .iter()
            .filter_map(|e| e.name.split_once('/').map(|(f, _)| f))
            .collect();
        folders.sort();
        folders.dedup();
        let mut unlisted = Vec::new();
        for sub in std::iter::once("").chain(folders.into_iter().filter(|f| dir.join(f).is_dir())) {
            unlisted.extend(
                plain_files(sub)?
                    .into_iter()
                    .filter(|n| n != MANIFEST && self.entry(n).is_none()),
            );
        }
        unlisted.sort();
        if let Some(name) = unlisted.first() {
            return Err(bad(
                dir,
                format!(
                    "{name} is not listed in {MANIFEST} (added after the checkpoint was written?)"
                ),
            ));
        }
        for entry in self.files.iter().filter(|e| which(&e.name)) {
            verify_entry(dir, entry)?;
        }
        Ok(())
    }
}

/// A verified file: its identity and stamp when it matched, and the sha256 it matched.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    sha256: String,
}

/// Files this process has hashed and found to match, by (device, inode).
fn verified() -> &'static Mutex<HashMap<(u64, u64), Stamp>> {
    static VERIFIED: OnceLock<Mutex<HashMap<(u64, u64), Stamp>>> = OnceLock::new();
    VERIFIED.get_or_init(|| Mutex::new(HashMap::new()))
}

fn stamp_of(meta: &std::fs::Metadata, sha256: &str) -> Stamp {
    Stamp {
        len: meta.len(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
        sha256: sha256.to_string(),
    }
}

/// Checks one listed file: present, a plain file, its size, its sha256.
fn verify_entry(dir: &Path, entry: &FileEntry) -> Result<()> {
    let path = dir.join(&entry.name);
    let meta =
        std::fs::metadata(&path).map_err(|_| bad(dir, format!("{} is missing", entry.name)))?;
    if !meta.is_file() {
        return Err(bad(dir, format!("{} is not a plain file", entry.name)));
    }
    let size_error = |bytes: u64| {
        let why = if bytes < entry.bytes {
            "truncated?"
        } else {
            "changed after it was written?"
        };
        bad(
            dir,
            format!(
                "{} is {bytes} bytes, the manifest says {} ({why})",
                entry.name, entry.bytes
            ),
        )
    };
    if meta.len() != entry.bytes {
        return Err(size_error(meta.len()));
    }
    let key = (meta.dev(), meta.ino());
    let known = stamp_of(&meta, &entry.sha256);
    if verified()
        .lock()
        .is_ok_and(|v| v.get(&key).is_some_and(|s| *s == known))
    {
        return Ok(());
    }
    let (bytes, sha) = sha256_file(&path).map_err(|e| bad(dir, format!("{}: {e}", entry.name)))?;
    if bytes != entry.bytes {
        return Err(size_error(bytes));
    }
    if sha != entry.sha256 {
        return Err(bad(
            dir,
            format!("{} does not match its sha256 (corrupt)", entry.name),
        ));
    }
    // Recorded with the stamp read before hashing: a change during the hash changes the stamp.
    if let Ok(mut v) = verified().lock() {
        v.insert(key, known);
    }
    Ok(())
}

/// Checks a whole checkpoint folder against its manifest: format version, every listed file
/// present with its size and sha256, no unlisted file. Returns the manifest.
pub fn verify_checkpoint(dir: &Path) -> Result<Manifest> {
    let manifest = Manifest::read(dir)?;
    manifest.verify(dir, |_| true)?;
    Ok(manifest)
}

/// Where a folder is opened as a model: when it is a checkpoint (it has a manifest), every file
/// a model load reads is verified first (the optimizer's files are verified by [`read_named`]
/// when they are read; the exports, files in folders and GGUF files, are not read by a load);
/// a plain HF folder has nothing to check.
pub(crate) fn verify_model_files(dir: &Path) -> Result<()> {
    if !is_checkpoint(dir) {
        return Ok(());
    }
    Manifest::read(dir)?.verify(dir, |name| {
        name != OPTIMIZER_FILE
            && name != MASTER_FILE
            && !name.contains('/')
            && !name.ends_with(".gguf")
    })
}

/// A file of a checkpoint folder, verified against the folder's manifest when it has one (the
/// file must then be listed).
fn verify_in_checkpoint(path: &Path) -> Result<()> {
    let Some(dir) = path.parent().filter(|d| is_checkpoint(d)) else {
        return Ok(());
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let manifest = Manifest::read(dir)?;
    match manifest.entry(&name) {
        Some(entry) => verify_entry(dir, entry),
        None => Err(bad(dir, format!("{name} is not listed in {MANIFEST}"))),
    }
}

/// Writes the model and the optimizer's moments into `dir` (created if needed); returns the
/// optimizer's step count, which the caller records with its metadata.
pub fn save_model_and_optimizer(dir: &Path, model: &Model, opt: &AdamW) -> Result<i64> {
    let (state, step) = opt.state();
    save_checkpoint_files(dir, model, &state, opt.master_weights().as_deref())?;
    Ok(step)
}

/// Writes the model, AdamW-named optimizer moments `state` and, when given, fp32 `masters`
/// ([`MASTER_FILE`]) into `dir`: the files of [`save_model_and_optimizer`], from state that
/// may have been gathered from the ranks of a sharded optimizer.
pub fn save_checkpoint_files(
    dir: &Path,
    model: &Model,
    state: &[(String, Tensor)],
    masters: Option<&[(String, Tensor)]>,
) -> Result<()> {
    model.save(dir)?;
    save_named(state, &dir.join(OPTIMIZER_FILE))?;
    if let Some(m) = masters {
        save_named(m, &dir.join(MASTER_FILE))?;
    }
    Ok(())
}

/// The named tensors of a checkpoint file, on `device`; verified against the folder's manifest
/// when it has one, and a header that lies names the tensor.
pub fn read_named(path: &Path, device: Device) -> Result<Vec<(String, Tensor)>> {
    verify_in_checkpoint(path)?;
    let named = read_safetensors(path)?;
    Ok(named
        .into_iter()
        .map(|(n, t)| (n, t.to_device(device)))
        .collect())
}

/// Loads the model of a checkpoint (or any HF folder) onto `device`; a checkpoint is verified
/// (see the module's rule).
pub fn load_model(dir: &Path, device: Device) -> Result<Model> {
    Model::load_hf(dir, device)
}

/// Restores the optimizer's moments of a checkpoint into `opt` (built for the loaded model),
/// at optimizer step `step`.
pub fn load_optimizer(dir: &Path, opt: &mut AdamW, step: i64) -> Result<()> {
    let path = dir.join(OPTIMIZER_FILE);
    let named = read_named(&path, opt.device())?;
    opt.load_state(named, step, &path)?;
    let masters = dir.join(MASTER_FILE);
    if opt.master_weights().is_some() && masters.exists() {
        opt.load_master_weights(read_named(&masters, opt.device())?, &masters)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder of `files` with the manifest fulcrum-train writes for them.
    fn checkpoint(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut entries = Vec::new();
        for (name, bytes) in files {
            let p = dir.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, bytes).unwrap();
            let (bytes, sha256) = sha256_file(&p).unwrap();
            entries.push(FileEntry {
                name: name.to_string(),
                bytes,
                sha256,
            });
        }
        let m = Manifest {
            format_version: CHECKPOINT_FORMAT,
            meta: serde_json::json!({"step": 1}),
            files: entries,
        };
        std::fs::write(
            dir.path().join(MANIFEST),
            serde_json::to_string_pretty(&m).unwrap(),
        )
        .unwrap();
        dir
    }

    fn err(r: Result<impl std::fmt::Debug>) -> String {
        r.map(|v| format!("unexpected success: {v:?}"))
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn the_manifest_keeps_the_format_fulcrum_train_writes() {
        // Byte for byte what checkpoints written before this module held.
        let text = "{\n  \"format_version\": 1,\n  \"meta\": {\n    \"step\": 3\n  },\n  \"files\": [\n    {\n      \"name\": \"a\",\n      \"bytes\": 2,\n      \"sha256\": \"ff\"\n    }\n  ]\n}";
        let m: Manifest = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string_pretty(&m).unwrap(), text);
    }

    #[test]
    fn every_damage_names_the_checkpoint_and_the_file() {
        let d = checkpoint(&[("model.safetensors", b"weights!"), ("config.json", b"{}")]);
        let dir = d.path();
        verify_checkpoint(dir).unwrap();
        let shown = format!("checkpoint {}: ", dir.display());
        // A same-sized change after a successful check: a new file (new inode), so the earlier
        // check is not reused.
        let replace = |name: &str, bytes: &[u8]| {
            let tmp = dir.join(".replacement");
            std::fs::write(&tmp, bytes).unwrap();
            std::fs::rename(&tmp, dir.join(name)).unwrap();
        };
        replace("model.safetensors", b"weightz!");
        let e = err(verify_checkpoint(dir));
        assert!(
            e.starts_with(&shown)
                && e.contains("model.safetensors does not match its sha256 (corrupt)"),
            "{e}"
        );
        replace("model.safetensors", b"weight");
        let e = err(verify_checkpoint(dir));
        assert!(
            e.contains("model.safetensors is 6 bytes, the manifest says 8 (truncated?)"),
            "{e}"
        );
        replace("model.safetensors", b"weights!");
        std::fs::write(dir.join("extra.safetensors"), b"x").unwrap();
        let e = err(verify_checkpoint(dir));
        assert!(
            e.contains("extra.safetensors is not listed in manifest.json"),
            "{e}"
        );
        std::fs::remove_file(dir.join("extra.safetensors")).unwrap();
        std::fs::remove_file(dir.join("config.json")).unwrap();
        let e = err(verify_checkpoint(dir));
        assert!(
            e.starts_with(&shown) && e.contains("config.json is missing"),
            "{e}"
        );
    }

    #[test]
    fn unsafe_or_repeated_names_and_other_versions_are_refused() {
        for (files, want) in [
            (
                r#"[{"name": "../x", "bytes": 1, "sha256": "00"}]"#,
                "unsafe file name",
            ),
            (
                r#"[{"name": "a", "bytes": 1, "sha256": "00"}, {"name": "a", "bytes": 1, "sha256": "00"}]"#,
                "twice",
            ),
        ] {
            let d = tempfile::tempdir().unwrap();
            std::fs::write(d.path().join("a"), b"1").unwrap();
            let text = format!(r#"{{"format_version": 1, "meta": null, "files": {files}}}"#);
            std::fs::write(d.path().join(MANIFEST), text).unwrap();
            let e = err(verify_checkpoint(d.path()));
            assert!(e.contains(want), "{e}");
        }
        let d = checkpoint(&[("a", b"1")]);
        let text = std::fs::read_to_string(d.path().join(MANIFEST)).unwrap();
        std::fs::write(
            d.path().join(MANIFEST),
            text.replace("\"format_version\": 1", "\"format_version\": 7"),
        )
        .unwrap();
        assert!(err(verify_checkpoint(d.path())).contains("format version 7"));
    }

    #[test]
    fn export_folders_are_listed_one_level_deep_and_checked_whole_not_on_a_model_load() {
        let d = checkpoint(&[
            ("config.json", b"{}"),
            ("hf/config.json", b"{}"),
            ("hf/model.safetensors", b"w"),
            ("model.gguf", b"g"),
        ]);
        let dir = d.path();
        verify_checkpoint(dir).unwrap();
        // A changed export is found by the whole check, not by a model load (which reads none).
        let tmp = dir.join(".x");
        std::fs::write(&tmp, b"v").unwrap();
        std::fs::rename(&tmp, dir.join("hf/model.safetensors")).unwrap();
        verify_model_files(dir).unwrap();
        let e = err(verify_checkpoint(dir));
        assert!(e.contains("hf/model.safetensors does not match"), "{e}");
        std::fs::write(dir.join("hf/extra.json"), b"{}").unwrap();
        let e = err(verify_model_files(dir));
        assert!(e.contains("hf/extra.json is not listed"), "{e}");
        for name in ["a/b/c", "/abs", "hf/../x", "hf/"] {
            let text = format!(
                r#"{{"format_version": 1, "meta": null, "files": [{{"name": "{name}", "bytes": 1, "sha256": "00"}}]}}"#
            );
            std::fs::write(dir.join(MANIFEST), text).unwrap();
            let e = err(verify_checkpoint(dir));
            assert!(e.contains("unsafe file name"), "{name}: {e}");
        }
    }

    #[test]
    fn a_model_load_checks_the_model_files_and_the_optimizer_when_it_is_read() {
        let d = checkpoint(&[("config.json", b"{}"), (OPTIMIZER_FILE, b"moments")]);
        // The model's files are checked; the optimizer's only when read.
        let tmp = d.path().join(".o");
        std::fs::write(&tmp, b"momentz").unwrap();
        std::fs::rename(&tmp, d.path().join(OPTIMIZER_FILE)).unwrap();
        verify_model_files(d.path()).unwrap();
        let e = err(read_named(&d.path().join(OPTIMIZER_FILE), Device::Cpu));
        assert!(
            e.contains("optimizer.safetensors does not match its sha256"),
            "{e}"
        );
        // A folder without a manifest is a plain HF folder: nothing to check.
        let plain = tempfile::tempdir().unwrap();
        verify_model_files(plain.path()).unwrap();
    }
}
