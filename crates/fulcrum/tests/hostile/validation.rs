//! Validation before allocation: what a user types (config keys, `--set`, flags) and the model
//! files and data they name are checked before any model work, and a refusal names the one
//! thing at fault (the key, the flag, the field of `config.json` or the GGUF key, the data
//! file and line) with the limit that applies: never a panic, an allocation failure, or a
//! neighbouring key.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::*;

/// The tiny Llama folder of fulcrum-model's tests (config.json and weights, no tokenizer).
fn llama_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fulcrum-model/tests/fixtures/llama")
}

/// A copy of the Llama fixture in `dir/name` with `field` of its config.json set to `value`.
fn lying_folder(dir: &Path, name: &str, field: &str, value: serde_json::Value) -> PathBuf {
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(llama_fixture().join(f), out.join(f)).unwrap();
    }
    let path = out.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg[field] = value;
    std::fs::write(&path, cfg.to_string()).unwrap();
    out
}

/// Nothing was written where a refused command ran, but the file that was there before.
#[track_caller]
fn nothing_written(dir: &Path) {
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "keep.txt" && !n.ends_with(".jsonl") && !n.ends_with(".gguf"))
        .filter(|n| !n.starts_with("model-"))
        .collect();
    assert!(left.is_empty(), "a refused command wrote {left:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "recorded",
        "a file that was there is lost"
    );
}

/// A temporary directory holding one file a user had there before.
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "recorded").unwrap();
    dir
}

#[test]
fn each_range_error_names_exactly_its_key_and_the_set_that_gave_it() {
    let dir = workdir();
    // Each with the neighbour (or section) it used to blame.
    for (set, key, blamed) in [
        (
            "rollout.max_prompt_len=0",
            "rollout.max_prompt_len",
            "rollout.max_response_len",
        ),
        ("optim.beta2=1.5", "optim.beta2", "optim.beta1"),
        ("dist.bucket_mb=0", "dist.bucket_mb", "dist.timeout_s"),
        (
            "rollout.engine_max_failures=0",
            "rollout.engine_max_failures",
            "rollout.engine_requests",
        ),
        ("sft.micro_batch_size=0", "sft.micro_batch_size", "sft"),
        ("ppo.micro_batch_size=0", "ppo.micro_batch_size", "ppo"),
        ("ppo.epochs=0", "ppo.epochs", "ppo"),
        ("optim.eps=0.0", "optim.eps", "optim"),
    ] {
        let o = train(dir.path(), &["--set", set]);
        refused(&o, &[&format!("--set {set}: {key}: ")]);
        assert!(
            !stderr(&o).contains(&format!(": {blamed}:")),
            "{set}: {}",
            stderr(&o)
        );
    }
    nothing_written(dir.path());
}

#[test]
fn a_number_out_of_range_is_said_so() {
    let dir = workdir();
    let o = train(dir.path(), &["--set", "steps=99999999999999999999"]);
    refused(
        &o,
        &["--set steps=99999999999999999999", "steps", "out of range"],
    );
    assert!(!stderr(&o).contains("string"), "{}", stderr(&o));
    let o = train(dir.path(), &["--set", "task.difficulty=-1"]);
    refused(&o, &["task.difficulty", ">= 0"]);
    assert!(!stderr(&o).contains("not an integer"), "{}", stderr(&o));
    let o = fulcrum(
        dir.path(),
        &[
            "eval",
            "--model",
            "tiny",
            "--bench",
            "arithmetic:difficulty=-1",
        ],
    );
    refused(&o, &["difficulty", "-1 is outside 1..=10"]);
    nothing_written(dir.path());
}

#[test]
fn absurd_sizes_are_refused_with_the_key_and_the_limit() {
    let dir = workdir();
    for (set, key, limit) in [
        (
            "rollout.group_size=1000000000",
            "rollout.group_size",
            "65536",
        ),
        (
            "rollout.prompts_per_step=1000000000",
            "rollout.prompts_per_step",
            "1048576",
        ),
        (
            "rollout.max_response_len=1000000000",
            "rollout.max_response_len",
            "1048576",
        ),
        (
            "rollout.max_prompt_len=1000000000",
            "rollout.max_prompt_len",
            "1048576",
        ),
        (
            "ppo.micro_batch_size=1000000000",
            "ppo.micro_batch_size",
            "1048576",
        ),
        ("sft.batch_size=1000000000", "sft.batch_size", "1048576"),
        (
            "sft.micro_batch_size=1000000000",
            "sft.micro_batch_size",
            "1048576",
        ),
        ("eval.prompts=1000000000", "eval.prompts", "1048576"),
        ("eval.k=1000000000", "eval.k", "65536"),
        ("threads=1000000000", "threads", "4096"),
    ] {
        let o = train(dir.path(), &["--set", set]);
        refused(&o, &[&format!("{key}:"), limit]);
    }
    for (args, flag, limit) in [
        (
            &["--max-new-tokens", "1000000000"][..],
            "--max-new-tokens",
            "1048576",
        ),
        (&["--threads", "1000000000"], "--threads", "4096"),
        (&["--batch-size", "1000000000"], "--batch-size", "1048576"),
        (&["--batch-size", "0"], "--batch-size", "1048576"),
        (&["--k", "1000000000"], "--k", "65536"),
        (
            &["--samples-per-problem", "1000000000"],
            "--samples-per-problem",
            "65536",
        ),
        (&["--prompts", "1000000000"], "--prompts", "1048576"),
    ] {
        let mut all = vec!["eval", "--model", "tiny", "--bench", "arithmetic"];
        all.extend_from_slice(args);
        refused(&fulcrum(dir.path(), &all), &[flag, limit]);
    }
    for (args, flag, limit) in [
        (
            &["--max-new-tokens", "1000000000"][..],
            "--max-new-tokens",
            "1048576",
        ),
        (&["--threads", "1000000000"], "--threads", "4096"),
        (&["--top-k", "0"], "--top-k", "1.."),
    ] {
        let mut all = vec!["generate", "--model", "tiny", "--prompt", "1+1="];
        all.extend_from_slice(args);
        refused(&fulcrum(dir.path(), &all), &[flag, limit]);
    }
    nothing_written(dir.path());
}

#[test]
fn a_model_folder_that_lies_is_refused_before_its_tensors_are_made() {
    let dir = workdir();
    for (name, field, value, says) in [
        (
            "model-heads",
            "num_attention_heads",
            serde_json::json!(0),
            "at least 1",
        ),
        (
            "model-vocab",
            "vocab_size",
            serde_json::json!(-5),
            "at least 1",
        ),
        (
            "model-layers",
            "num_hidden_layers",
            serde_json::json!(1_000_000),
            "1024",
        ),
        (
            "model-wrap",
            "num_hidden_layers",
            serde_json::json!(u64::MAX),
            "64-bit",
        ),
        (
            "model-more",
            "num_hidden_layers",
            serde_json::json!(6),
            "holds 2 layers",
        ),
    ] {
        let model = lying_folder(dir.path(), name, field, value);
        let m = model.to_str().unwrap();
        let t0 = Instant::now();
        let o = fulcrum(dir.path(), &["generate", "--model", m, "--prompt", "hi"]);
        refused(&o, &[field, "config.json", says]);
        let o = train(dir.path(), &["--set", &format!("model.path=\"{m}\"")]);
        refused(&o, &[field, "config.json", says]);
        assert!(
            t0.elapsed().as_secs() < 60,
            "{field}: refused only after model work"
        );
        // No run was set up for it.
        assert!(!dir.path().join("runs").join("sft-cache").exists());
    }
}

/// A GGUF file of metadata alone (no tensors): a byte-level BPE of `vocab` tokens and the
/// Llama hyper-parameters `ints` (key suffix after `llama.`, value).
fn gguf_metadata_only(path: &Path, ints: &[(&str, u32)]) {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let vocab = 8u64;
    let mut kv: Vec<u8> = Vec::new();
    let mut count = 0u64;
    let mut put = |key: &str, ty: u32, value: &dyn Fn(&mut Vec<u8>)| {
        string(&mut kv, key);
        kv.extend(ty.to_le_bytes());
        value(&mut kv);
        count += 1;
    };
    const U32: u32 = 4;
    const F32: u32 = 6;
    const STRING: u32 = 8;
    const ARRAY: u32 = 9;
    const I32: u32 = 5;
    put("general.architecture", STRING, &|o| string(o, "llama"));
    put("tokenizer.ggml.model", STRING, &|o| string(o, "gpt2"));
    put("tokenizer.ggml.tokens", ARRAY, &|o| {
        o.extend(STRING.to_le_bytes());
        o.extend(vocab.to_le_bytes());
        for i in 0..vocab {
            string(o, &format!("t{i}"));
        }
    });
    put("tokenizer.ggml.merges", ARRAY, &|o| {
        o.extend(STRING.to_le_bytes());
        o.extend(0u64.to_le_bytes());
    });
    put("tokenizer.ggml.token_type", ARRAY, &|o| {
        o.extend(I32.to_le_bytes());
        o.extend(vocab.to_le_bytes());
        for _ in 0..vocab {
            o.extend(1i32.to_le_bytes());
        }
    });
    put("llama.attention.layer_norm_rms_epsilon", F32, &|o| {
        o.extend(1e-5f32.to_le_bytes())
    });
    for (k, v) in ints {
        let v = *v;
        put(&format!("llama.{k}"), U32, &move |o| {
            o.extend(v.to_le_bytes())
        });
    }
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.extend(count.to_le_bytes());
    bytes.extend(kv);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_gguf_file_whose_metadata_lies_is_refused_naming_the_key() {
    let dir = workdir();
    let sizes = [
        ("embedding_length", 16),
        ("feed_forward_length", 32),
        ("block_count", 2),
        ("attention.head_count", 2),
    ];
    for (key, value, says) in [
        // Zero heads divided by zero in the loader: a panic.
        ("attention.head_count", 0, "at least 1"),
        ("attention.head_count_kv", 0, "at least 1"),
        ("attention.head_count_kv", 3, "does not divide"),
        ("block_count", 1_000_000, "1024"),
        ("embedding_length", 17, "not a multiple"),
    ] {
        let path = dir
            .path()
            .join(format!("model-{}-{value}.gguf", key.replace('.', "-")));
        let mut ints: Vec<(&str, u32)> = sizes.iter().filter(|(k, _)| *k != key).copied().collect();
        ints.push((key, value));
        gguf_metadata_only(&path, &ints);
        let p = path.to_str().unwrap();
        let o = fulcrum(dir.path(), &["generate", "--model", p, "--prompt", "hi"]);
        let field = if key == "embedding_length" {
            "llama.embedding_length".to_string()
        } else {
            format!("llama.{key}")
        };
        refused(&o, &[&field, p, says]);
    }
    // The same file with honest metadata but no tensors: the first tensor is named missing.
    let path = dir.path().join("model-honest.gguf");
    gguf_metadata_only(&path, &sizes);
    let p = path.to_str().unwrap();
    let o = fulcrum(dir.path(), &["generate", "--model", p, "--prompt", "hi"]);
    refused(&o, &[p, "holds no layers"]);
    nothing_written(dir.path());
}

#[test]
fn a_prompt_longer_than_the_limit_is_refused_before_any_model_work() {
    let dir = workdir();
    let mut lines: Vec<String> = (0..10)
        .map(|i| {
            serde_json::json!({"prompt": format!("{i}+1="), "answer": format!("{}", i + 1)})
                .to_string()
        })
        .collect();
    lines[2] = serde_json::json!({"prompt": "9".repeat(400), "answer": "1"}).to_string();
    std::fs::write(dir.path().join("long.jsonl"), lines.join("\n")).unwrap();
    let t0 = Instant::now();
    let o = train(
        dir.path(),
        &[
            "--set",
            "task.name=\"jsonl\"",
            "--set",
            "task.path=\"long.jsonl\"",
            "--set",
            "sft.steps=200",
        ],
    );
    refused(
        &o,
        &["long.jsonl:3", "rollout.max_prompt_len = 128", "400 tokens"],
    );
    // Refused when the data was read, not after a warm-up of 200 steps.
    assert!(t0.elapsed().as_secs() < 30, "took {:?}", t0.elapsed());
    let runs = dir.path().join("runs");
    assert!(!runs.join("sft-cache").exists(), "a warm-up ran");
    assert!(
        !runs.join("demo").join("checkpoints").exists(),
        "a checkpoint was written"
    );
}

/// The peak resident memory of `fulcrum ARGS` in `cwd` in MiB (polled from /proc), with its
/// output.
fn peak_mib(cwd: &Path, args: &[&str]) -> (std::process::Output, u64) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(cwd)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status) {
            if let Some(kb) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak = peak.max(kb / 1024);
            }
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    (child.wait_with_output().unwrap(), peak)
}

#[test]
fn eval_skips_and_counts_a_prompt_longer_than_the_context_without_growing_memory() {
    let dir = workdir();
    let short: Vec<String> = (0..6)
        .map(|i| serde_json::json!({"prompt": format!("Q: {i}\n"), "answer": "1"}).to_string())
        .collect();
    std::fs::write(dir.path().join("short.jsonl"), short.join("\n")).unwrap();
    let mut with_long = short.clone();
    // 10 MB: millions of tokens if it were encoded, far past the tiny model's 2048 positions.
    with_long.insert(
        3,
        serde_json::json!({"prompt": "7".repeat(10 << 20), "answer": "1"}).to_string(),
    );
    // Just past the context beside 16 new tokens: encoded, counted, and skipped too.
    with_long.push(serde_json::json!({"prompt": "7".repeat(2040), "answer": "1"}).to_string());
    std::fs::write(dir.path().join("long.jsonl"), with_long.join("\n")).unwrap();
    let run = |file: &str| {
        peak_mib(
            dir.path(),
            &[
                "eval",
                "--model",
                "tiny",
                "--threads",
                "1",
                "--json",
                "--max-new-tokens",
                "16",
                "--bench",
                file,
            ],
        )
    };
    let (base, base_mib) = run("short.jsonl");
    succeeded(&base);
    let (o, mib) = run("long.jsonl");
    succeeded(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bench = &v["results"][0];
    assert_eq!(bench["skipped_too_long"], 2, "{v}");
    assert_eq!(bench["result"]["prompts"], 6, "{v}");
    let b: serde_json::Value = serde_json::from_slice(&base.stdout).unwrap();
    assert_eq!(b["results"][0]["skipped_too_long"], 0);
    assert!(
        stderr(&o).contains("2 of 8 problems skipped"),
        "{}",
        stderr(&o)
    );
    // The file itself is 10 MB (read, parsed, held a few times over): a few hundred MB above
    // the run without it would mean the prompt was encoded.
    assert!(
        mib < base_mib + 200,
        "peak {mib} MiB with the long prompt, {base_mib} MiB without"
    );
    // A context with no room for any prompt is refused naming the flag.
    let o = fulcrum(
        dir.path(),
        &[
            "eval",
            "--model",
            "tiny",
            "--bench",
            "short.jsonl",
            "--max-new-tokens",
            "4096",
        ],
    );
    refused(&o, &["--max-new-tokens", "2048"]);
}
