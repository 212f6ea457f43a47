//! Memory and speed of one training step, full fine-tuning vs LoRA adapters (README "LoRA").
//!
//! Loads a model (a GGUF file or an HF folder), optionally attaches LoRA adapters, then times
//! training steps (forward over `batch x seq` random tokens, backward, gradient clip, AdamW) and
//! prints one JSON line: trainable parameters, seconds per step, tokens/s, resident memory after
//! loading and the process's peak (VmHWM). Run each configuration in its own process, so that the
//! peak belongs to it.
//! Usage: lora-bench MODEL full|lora [--batch 2] [--seq 256] [--steps 3] [--rank 16]
//!        [--targets q_proj,k_proj,v_proj,o_proj] [--threads 1] [--checkpoint]
//! The step is the trainer's: LM head only on scored positions, in chunks; `--checkpoint` adds
//! activation checkpointing (`model.checkpoint_activations`). The peak is measured from after
//! loading.

use std::time::Instant;

use anyhow::{bail, Context};
use fulcrum_model::logprobs::EntropyGrad;
use fulcrum_model::masked_logprobs::{masked_sequence_logprobs_with, MemoryOptions};
use fulcrum_model::tch::{self, Device, Kind, Tensor};
use fulcrum_model::{clip_grad_norm, weighted_sum, AdamW, AdamWConfig, LoraConfig};
use serde_json::json;

/// A `/proc/self/status` field in bytes (`VmRSS`, `VmHWM`), 0 where unavailable.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

fn flag(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, mode) = match (args.first(), args.get(1)) {
        (Some(p), Some(m)) if m == "full" || m == "lora" => (p.clone(), m.clone()),
        _ => bail!("usage: lora-bench MODEL full|lora [--batch N] [--seq N] [--steps N] [--rank N] [--targets a,b] [--threads N]"),
    };
    let num = |name: &str, default: &str| -> anyhow::Result<i64> {
        flag(&args, name, default)
            .parse()
            .with_context(|| format!("{name}: not an integer"))
    };
    let (batch, seq, steps) = (
        num("--batch", "2")?,
        num("--seq", "256")?,
        num("--steps", "3")?,
    );
    let rank = num("--rank", "16")?;
    tch::set_num_threads(num("--threads", "1")? as i32);
    let targets: Vec<String> = flag(&args, "--targets", "q_proj,k_proj,v_proj,o_proj")
        .split(',')
        .map(str::to_string)
        .collect();

    let mut model = fulcrum_model::ModelSpec::parse(&path)?.load(Device::Cpu, 0)?;
    let total_params: i64 = model
        .var_store()
        .variables()
        .values()
        .map(|t| t.numel() as i64)
        .sum();
    if mode == "lora" {
        model.attach_lora(&LoraConfig {
            rank,
            alpha: 2.0 * rank as f64,
            targets: targets.clone(),
        })?;
    }
    let rss_loaded = status_bytes("VmRSS");
    // The peak of training alone: reset the high-water mark left by loading (GGUF dequantising).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let memory = MemoryOptions {
        checkpoint_layers: args.iter().any(|a| a == "--checkpoint"),
        ..Default::default()
    };
    let trainable = fulcrum_model::lora::trainable_parameters(model.var_store());
    let vocab = model.config().vocab_size;
    tch::manual_seed(0);
    let ids = Tensor::randint(vocab, [batch, seq + 1], (Kind::Int64, Device::Cpu));
    let weights = Tensor::ones([batch, seq], (Kind::Float, Device::Cpu)) / (batch * seq) as f64;
    let mask = Tensor::ones([batch, seq], (Kind::Float, Device::Cpu));
    let mut opt = AdamW::new(model.var_store(), AdamWConfig::default());
    let mut times = Vec::new();
    // One warm-up step (allocations, AdamW state), then the timed ones.
    for _ in 0..=steps {
        let t = Instant::now();
        opt.zero_grad();
        let (lp, head) =
            masked_sequence_logprobs_with(model.net(), &ids, &mask, 1.0, EntropyGrad::No, memory)?;
        let loss = -weighted_sum(&lp.logprobs, &weights)?;
        head.backward(&loss)?;
        clip_grad_norm(model.var_store(), 1.0);
        opt.step(1e-4);
        times.push(t.elapsed().as_secs_f64());
    }
    let secs = times[1..].iter().sum::<f64>() / steps as f64;
    println!(
        "{}",
        json!({
            "model": path, "mode": mode, "batch": batch, "seq": seq, "steps": steps,
            "threads": tch::get_num_threads(), "checkpoint_layers": memory.checkpoint_layers,
            "lora": (mode == "lora").then(|| json!({"rank": rank, "alpha": 2 * rank, "targets": targets})),
            "parameters": total_params, "trainable": trainable,
            "step_s": secs, "tokens_per_s": (batch * seq) as f64 / secs,
            "rss_after_load_gb": rss_loaded as f64 / 1e9,
            "peak_rss_gb": status_bytes("VmHWM") as f64 / 1e9,
        })
    );
    Ok(())
}
