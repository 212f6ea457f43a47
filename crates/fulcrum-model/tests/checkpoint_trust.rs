//! Every load of a checkpoint folder as a model verifies it against its manifest, whichever
//! door it comes through (`Model::load_hf`, `load_model`, `ModelSpec` for a run directory or a
//! checkpoint folder): a corrupt, truncated, missing or unlisted file is an error naming the
//! checkpoint and the file, never a silent load. A plain HF folder (no manifest) loads as before.

use std::path::Path;

use fulcrum_model::tch::Device;
use fulcrum_model::{
    load_model, sha256_file, FileEntry, Manifest, Model, ModelSpec, CHECKPOINT_FORMAT, MANIFEST,
};

/// Writes the manifest of every file in `dir`, as the trainer does.
fn seal(dir: &Path) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != MANIFEST)
        .collect();
    names.sort();
    let files = names
        .into_iter()
        .map(|name| {
            let (bytes, sha256) = sha256_file(&dir.join(&name)).unwrap();
            FileEntry {
                name,
                bytes,
                sha256,
            }
        })
        .collect();
    let m = Manifest {
        format_version: CHECKPOINT_FORMAT,
        meta: serde_json::json!({}),
        files,
    };
    std::fs::write(
        dir.join(MANIFEST),
        serde_json::to_string_pretty(&m).unwrap(),
    )
    .unwrap();
}

/// Replaces `name` in `dir` by a copy with one byte flipped (a new file: a new inode).
fn flip_a_byte(dir: &Path, name: &str) {
    let mut bytes = std::fs::read(dir.join(name)).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x10;
    let tmp = dir.join(".flipped");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

fn load_err(r: fulcrum_model::Result<Model>) -> String {
    match r {
        Ok(_) => "loaded".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_door_to_a_checkpoint_verifies_it() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let final_dir = run.join("checkpoints/final");
    Model::tiny(Device::Cpu, 3)
        .unwrap()
        .save(&final_dir)
        .unwrap();
    std::fs::write(run.join("config.toml"), "").unwrap();
    // A plain HF folder: no manifest, loads.
    Model::load_hf(&final_dir, Device::Cpu).unwrap();
    seal(&final_dir);
    let spec = ModelSpec::parse(run.to_str().unwrap()).unwrap();
    assert!(matches!(spec, ModelSpec::RunDir(_)));
    spec.load(Device::Cpu, 0).unwrap();

    flip_a_byte(&final_dir, "model.safetensors");
    let named = format!("checkpoint {}: model.safetensors", final_dir.display());
    let by_spec = ModelSpec::parse(final_dir.to_str().unwrap()).unwrap();
    for (door, e) in [
        ("run directory", load_err(spec.load(Device::Cpu, 0))),
        ("checkpoint folder", load_err(by_spec.load(Device::Cpu, 0))),
        ("load_hf", load_err(Model::load_hf(&final_dir, Device::Cpu))),
        ("load_model", load_err(load_model(&final_dir, Device::Cpu))),
    ] {
        assert!(
            e.starts_with(&named) && e.contains("corrupt"),
            "{door}: {e}"
        );
    }

    // Truncated, and a file the manifest does not list.
    let bytes = std::fs::read(final_dir.join("model.safetensors")).unwrap();
    std::fs::write(
        final_dir.join("model.safetensors"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    let e = load_err(spec.load(Device::Cpu, 0));
    assert!(e.starts_with(&named) && e.contains("truncated"), "{e}");
    std::fs::write(final_dir.join("model.safetensors"), &bytes).unwrap();
    flip_a_byte(&final_dir, "model.safetensors");
    seal(&final_dir);
    spec.load(Device::Cpu, 0).unwrap();
    std::fs::write(final_dir.join("adapter_config.json"), "{}").unwrap();
    let e = load_err(spec.load(Device::Cpu, 0));
    assert!(
        e.contains("adapter_config.json is not listed in manifest.json"),
        "{e}"
    );
}
