//! The write side of a weight push, timed (docs/scale.md, "Weight sync"): what a push writes
//! for each engine, from a model loaded the way a run loads it.
//!
//!   push-bench MODEL DIR gguf                  the llama.cpp push: one f16 GGUF file
//!   push-bench MODEL DIR hf                    one model.safetensors (what a push wrote before)
//!   push-bench MODEL DIR shards RANK WORLD     this rank's shards of an HF push by WORLD ranks
//!   push-bench MODEL DIR gguf-adapter          a LoRA policy's push to llama.cpp: the adapter
//!   push-bench MODEL DIR peft-adapter          ... to vLLM/SGLang: a PEFT adapter folder
//!
//! The adapter modes attach rank-8 adapters to all seven projections (as `[model.lora]` with
//! every target would).
//!
//! bench/push.sh runs them and the ranks side by side. Prints `seconds bytes` of the write
//! (bytes: all files in DIR).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use fulcrum_model::save_gguf::GgufTemplate;
use fulcrum_model::{GgufDtype, Model};
use tch::Device;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (model_path, dir, what) = match &args[..] {
        [m, d, w, ..] => (PathBuf::from(m), PathBuf::from(d), w.as_str()),
        _ => bail!(
            "usage: push-bench MODEL DIR gguf|hf|shards|gguf-adapter|peft-adapter [RANK WORLD]"
        ),
    };
    tch::set_num_threads(1);
    let mut model = if model_path.extension().is_some_and(|e| e == "gguf") {
        Model::load_gguf(&model_path, Device::Cpu)?
    } else {
        Model::load_hf(&model_path, Device::Cpu)?
    };
    if what.ends_with("-adapter") {
        model.attach_lora(&fulcrum_model::LoraConfig {
            rank: 8,
            alpha: 16.0,
            targets: fulcrum_model::lora::TARGETS.map(String::from).to_vec(),
        })?;
    }
    // Ranks started together wait for one wall-clock instant, so their writes overlap as in a
    // push (PUSH_BENCH_START: seconds since the epoch).
    if let Some(start) = std::env::var("PUSH_BENCH_START")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        if start > now {
            std::thread::sleep(std::time::Duration::from_secs_f64(start - now));
        }
    }
    let t0 = Instant::now();
    match what {
        "gguf" => {
            let template = GgufTemplate::read(&model_path)?;
            model.save_gguf(&template, &dir.join("weights.gguf"), GgufDtype::F16)?;
        }
        "hf" => model.save_merged(&dir)?,
        "shards" => {
            let num = |i: usize| -> Result<usize> {
                args.get(i)
                    .context("shards needs RANK WORLD")?
                    .parse()
                    .context("RANK and WORLD are numbers")
            };
            let (rank, world) = (num(3)?, num(4)?);
            // As a push writes it: two shards per rank, each on a thread.
            let mine = [2 * rank, 2 * rank + 1];
            model.save_merged_shards(&dir, 2 * world, &mine, rank == 0)?;
        }
        "gguf-adapter" => {
            let template = GgufTemplate::read(&model_path)?;
            model.save_gguf_adapter(&template, &dir.join("adapter.gguf"))?;
        }
        "peft-adapter" => model.save_peft_adapter(&dir)?,
        other => bail!("{other}: not gguf, hf, shards, gguf-adapter or peft-adapter"),
    }
    let secs = t0.elapsed().as_secs_f64();
    let bytes: u64 = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!("{secs:.3} {bytes}");
    Ok(())
}
