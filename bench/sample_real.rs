//! Sampling throughput of a real GGUF model in fulcrum's KV-cache sampler, at the batch sizes
//! given, in f32 and bf16 (run by `bench/sample_llamacpp.sh`, which times llama.cpp's server on
//! the same file, prompt and thread count).
//!
//! Usage: sample-real-bench --model FILE.gguf [--batches 1,32] [--new-tokens 128]
//!        [--dtypes f32,bf16] [--repeats 3] [--threads N]
//! Every response runs to `--new-tokens` (no stop token), sampled at temperature 1 from one
//! chat prompt; each figure is the best of `--repeats` runs after one warm-up. Prints one JSON
//! line: the prompt's token ids, and per dtype and batch size the seconds and tokens/s.

use anyhow::{Context, Result};
use fulcrum_model::tch::{self, Device, Kind};
use fulcrum_model::{Message, ModelSpec};
use serde_json::json;

#[path = "sampling.rs"]
mod sampling;
use sampling::{arg, sample_secs};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = arg(&args, "--model").context("--model FILE.gguf is required")?;
    let batches: Vec<usize> = arg(&args, "--batches")
        .unwrap_or("1,32")
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("--batches: comma-separated integers")?;
    let new_tokens: usize = arg(&args, "--new-tokens").unwrap_or("128").parse()?;
    let repeats: usize = arg(&args, "--repeats").unwrap_or("3").parse()?;
    let dtypes: Vec<&str> = arg(&args, "--dtypes")
        .unwrap_or("f32,bf16")
        .split(',')
        .collect();
    if let Some(n) = arg(&args, "--threads") {
        tch::set_num_threads(n.parse().context("--threads: an integer")?);
    }

    let mut model = ModelSpec::parse(path)?.load(Device::Cpu, 0)?;
    let text = model
        .chat_template()?
        .render(&[Message::user("Write a short story about a robot.")], true);
    let prompt = model.tokenizer()?.encode(&text)?;
    let mut results = Vec::new();
    for dtype in dtypes {
        let kind = match dtype {
            "f32" => Kind::Float,
            "bf16" => Kind::BFloat16,
            other => anyhow::bail!("--dtypes: {other} is not f32 or bf16"),
        };
        model.set_kind(kind);
        for &b in &batches {
            let run = |seed: u64, n: usize| sample_secs(&model, vec![prompt.clone()], b, n, seed);
            run(0, 8)?;
            let mut best = f64::INFINITY;
            let mut tokens = 0;
            for r in 0..repeats.max(1) {
                let (secs, n) = run(1 + r as u64, new_tokens)?;
                best = best.min(secs);
                tokens = n;
            }
            eprintln!(
                "fulcrum {dtype} batch {b}: {:.1} tokens/s ({best:.2} s)",
                tokens as f64 / best
            );
            results.push(json!({"dtype": dtype, "batch": b, "seconds": best,
                "tokens": tokens, "tokens_per_s": tokens as f64 / best}));
        }
    }
    println!(
        "{}",
        json!({"threads": tch::get_num_threads(), "prompt_ids": prompt,
            "new_tokens": new_tokens, "results": results})
    );
    Ok(())
}
