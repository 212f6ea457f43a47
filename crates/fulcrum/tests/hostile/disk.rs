//! Trusting what is on disk: every load of a checkpoint (a run directory's final checkpoint, a
//! step checkpoint, an SFT cache entry) verifies it against its manifest, whichever command
//! loads it; a damaged file is refused naming the checkpoint and the file. A safetensors header
//! that lies (offsets past the end, tensors over the same bytes, a shape that does not fill its
//! bytes) is refused naming the tensor and the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;

/// A finished small run: `cwd/runs/demo`.
fn finished_run(cwd: &Path) -> PathBuf {
    succeeded(&train(cwd, &[]));
    let run = cwd.join("runs/demo");
    assert!(run.join("checkpoints/final/manifest.json").is_file());
    run
}

/// A one-record evaluation file the built-in model can read.
fn bench_file(cwd: &Path) -> &'static str {
    std::fs::write(
        cwd.join("sums.jsonl"),
        "{\"prompt\": \"Q: 1+2\\n\", \"answer\": \"3\", \"verifier\": \"exact\"}\n",
    )
    .unwrap();
    "sums.jsonl"
}

/// Every file under `dir` with its bytes: what a refused command must leave as it was.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Flips one bit of `path` in place (same size).
fn flip_a_bit(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes.len() - 5;
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

/// `fulcrum eval --model MODEL` on the one-record file.
fn eval(cwd: &Path, model: &str) -> std::process::Output {
    let bench = bench_file(cwd);
    fulcrum(
        cwd,
        &[
            "eval",
            "--model",
            model,
            "--bench",
            bench,
            "--max-new-tokens",
            "2",
            "--threads",
            "1",
        ],
    )
}

#[test]
fn a_corrupt_final_checkpoint_is_refused_by_every_command_that_loads_it() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let run = finished_run(cwd);
    succeeded(&eval(cwd, "runs/demo"));
    flip_a_bit(&run.join("checkpoints/final/model.safetensors"));
    let before = snapshot(&run);
    let culprit = [
        "checkpoint",
        "runs/demo/checkpoints/final",
        "model.safetensors",
        "corrupt",
    ];

    refused(&eval(cwd, "runs/demo"), &culprit);
    refused(&eval(cwd, "runs/demo/checkpoints/final"), &culprit);
    refused(
        &fulcrum(
            cwd,
            &["generate", "--model", "runs/demo", "--prompt", "Q: 1+2"],
        ),
        &culprit,
    );
    refused(&fulcrum(cwd, &["convert", "runs/demo", "plain"]), &culprit);
    assert!(!cwd.join("plain").exists() && !cwd.join(".plain.partial").exists());
    for model in ["runs/demo", "runs/demo/checkpoints/final"] {
        refused(
            &train(cwd, &["--set", &format!("model.path=\"{model}\"")]),
            &culprit,
        );
    }
    // Nothing of the run was touched.
    assert_eq!(snapshot(&run), before);
}

#[test]
fn a_truncated_or_unlisted_file_of_a_step_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let run = finished_run(cwd);
    let step = run.join("checkpoints/step-2");
    let weights = std::fs::read(step.join("model.safetensors")).unwrap();
    std::fs::write(
        step.join("model.safetensors"),
        &weights[..weights.len() - 100],
    )
    .unwrap();
    refused(
        &eval(cwd, "runs/demo/checkpoints/step-2"),
        &[
            "runs/demo/checkpoints/step-2",
            "model.safetensors",
            "truncated",
        ],
    );
    std::fs::write(step.join("model.safetensors"), &weights).unwrap();
    succeeded(&eval(cwd, "runs/demo/checkpoints/step-2"));
    // A file put into a checkpoint after it was written is loaded by nobody unchecked.
    std::fs::write(
        step.join("tokenizer_config.json"),
        "{\"chat_template\": \"x\"}",
    )
    .unwrap();
    refused(
        &eval(cwd, "runs/demo/checkpoints/step-2"),
        &[
            "runs/demo/checkpoints/step-2",
            "tokenizer_config.json",
            "not listed",
        ],
    );
}

#[test]
fn a_damaged_sft_cache_entry_is_trained_again_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    finished_run(cwd);
    let cache = std::fs::read_dir(cwd.join("runs/sft-cache"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .unwrap();
    let good = std::fs::read(cache.join("model.safetensors")).unwrap();
    flip_a_bit(&cache.join("model.safetensors"));
    succeeded(&train(cwd, &[]));
    // Replaced by the same warm-up (deterministic), verified again.
    assert_eq!(
        std::fs::read(cache.join("model.safetensors")).unwrap(),
        good
    );
    succeeded(&eval(cwd, &cache.to_string_lossy()));
}

#[test]
fn a_run_without_its_final_checkpoint_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let run = finished_run(cwd);
    std::fs::rename(
        run.join("checkpoints/final"),
        run.join("checkpoints/final-moved"),
    )
    .unwrap();
    refused(
        &eval(cwd, "runs/demo"),
        &["runs/demo", "without a final checkpoint", "--resume"],
    );
    // A final folder without its manifest (not written by fulcrum) is not loaded either.
    std::fs::create_dir(run.join("checkpoints/final")).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(
            run.join("checkpoints/final-moved").join(f),
            run.join("checkpoints/final").join(f),
        )
        .unwrap();
    }
    refused(
        &eval(cwd, "runs/demo"),
        &["runs/demo/checkpoints/final", "no manifest.json"],
    );
}

/// Rewrites the header of the safetensors file `path` with `edit`, keeping the data.
fn rewrite_header(path: &Path, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let text = serde_json::to_vec(&header).unwrap();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(path, out).unwrap();
}

/// The tensors of a header by offset: (name, begin, end).
fn by_offset(header: &serde_json::Map<String, serde_json::Value>) -> Vec<(String, u64, u64)> {
    let mut t: Vec<(String, u64, u64)> = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            let o = v["data_offsets"].as_array().unwrap();
            (k.clone(), o[0].as_u64().unwrap(), o[1].as_u64().unwrap())
        })
        .collect();
    t.sort_by_key(|x| x.1);
    t
}

#[test]
fn a_safetensors_header_that_lies_names_the_tensor_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let run = finished_run(cwd);
    // A plain HF folder (no manifest): only the header can tell.
    let hf = cwd.join("hf");
    std::fs::create_dir(&hf).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(run.join("checkpoints/final").join(f), hf.join(f)).unwrap();
    }
    let weights = hf.join("model.safetensors");
    let good = std::fs::read(&weights).unwrap();
    succeeded(&eval(cwd, "hf"));

    let mut shown = String::new();
    let mut last = String::new();
    // Offsets past the end of the data.
    rewrite_header(&weights, |h| {
        let (name, b, e) = by_offset(h).pop().unwrap();
        h[&name]["data_offsets"] = serde_json::json!([b + 8, e + 8]);
        last = name;
    });
    refused(
        &eval(cwd, "hf"),
        &["hf/model.safetensors", &format!("tensor `{last}`")],
    );

    // Two tensors over the same bytes, each of the right length.
    std::fs::write(&weights, &good).unwrap();
    rewrite_header(&weights, |h| {
        let t = by_offset(h);
        let (first, second) = (&t[0], &t[1]);
        h[&second.0]["data_offsets"] =
            serde_json::json!([first.1, first.1 + (second.2 - second.1)]);
        shown = first.0.clone();
        last = second.0.clone();
    });
    let o = eval(cwd, "hf");
    refused(&o, &["hf/model.safetensors", "overlap"]);
    let e = stderr(&o);
    assert!(
        e.contains(&format!("`{shown}`")) && e.contains(&format!("`{last}`")),
        "{e}"
    );

    // A shape that does not match its bytes.
    std::fs::write(&weights, &good).unwrap();
    rewrite_header(&weights, |h| {
        let (name, _, _) = by_offset(h).pop().unwrap();
        let dims = h[&name]["shape"].as_array_mut().unwrap();
        let d0 = dims[0].as_u64().unwrap();
        dims[0] = serde_json::json!(d0 + 1);
        last = name;
    });
    refused(
        &eval(cwd, "hf"),
        &["hf/model.safetensors", &format!("tensor `{last}`")],
    );
}
