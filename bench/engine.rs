//! fulcrum-model throughput benchmark (run by `bench/run.sh`, which compares it with PyTorch).
//!
//! Prints one JSON object on stdout: the machine's f32 GEMM rate, a training step of the
//! reference config (d 256, 4 layers, 4 heads, vocab 512, seq 256, batch 16: forward, backward,
//! AdamW), batched KV-cache sampling (batch 64, prompt 32, 128 new tokens; median of 3, f32 and bf16) and, when the
//! SmolLM2 GGUF is present, its sampling and training throughput and peak memory.
//! Usage: engine [--device cpu|cuda] [--skip-smollm2] [--sample-only]
//! (`--sample-only`: the batched sampling alone, for a profiler.)

use std::time::Instant;

use fulcrum_model::logprobs::EntropyGrad;
use fulcrum_model::masked_logprobs::{masked_sequence_logprobs_with, MemoryOptions};
use fulcrum_model::tch::{self, Device, Kind, Tensor};
use fulcrum_model::{weighted_sum, AdamW, AdamWConfig, DeviceChoice, Message, Model, ModelConfig};
use serde_json::{json, Value};

#[path = "sampling.rs"]
mod sampling;
use sampling::{arg, sample_secs, sync};

/// Peak resident memory of this process in bytes (VmHWM), 0 where unavailable.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn gemm_gflops(device: Device) -> f64 {
    let n = 2048;
    let a = Tensor::randn([n, n], (Kind::Float, device));
    let b = Tensor::randn([n, n], (Kind::Float, device));
    let _ = a.matmul(&b);
    sync(device);
    let reps = if device.is_cuda() { 50 } else { 5 };
    let t = Instant::now();
    for _ in 0..reps {
        let _ = a.matmul(&b);
    }
    sync(device);
    2.0 * (n * n * n) as f64 * reps as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn bench_config() -> ModelConfig {
    ModelConfig {
        vocab_size: 512,
        hidden_size: 256,
        intermediate_size: 1024,
        num_layers: 4,
        num_heads: 4,
        num_kv_heads: 4,
        head_dim: 64,
        tie_embeddings: false,
        ..ModelConfig::tiny(512, 2)
    }
}

/// Mean seconds of `steps` full training steps (after `warmup`) over `batch`
/// random sequences of `seq + 1` tokens, every position scored, forward and backward in
/// micro-batches of `micro` sequences (gradient accumulation), then clipping and AdamW.
fn train_steps(
    model: &Model,
    batch: i64,
    seq: i64,
    micro: i64,
    memory: MemoryOptions,
    steps: usize,
    warmup: usize,
) -> anyhow::Result<f64> {
    let device = model.device();
    let vocab = model.config().vocab_size;
    let ids = Tensor::randint(vocab, [batch, seq + 1], (Kind::Int64, device));
    let weights = Tensor::ones([micro, seq], (Kind::Float, device)) / (batch * seq) as f64;
    let mask = Tensor::ones([micro, seq], (Kind::Float, device));
    let mut opt = AdamW::new(
        model.var_store(),
        AdamWConfig {
            weight_decay: 0.01,
            ..Default::default()
        },
    );
    let mut total = 0.0;
    for i in 0..warmup + steps {
        sync(device);
        let t = Instant::now();
        opt.zero_grad();
        for part in ids.split(micro, 0) {
            let (lp, head) = masked_sequence_logprobs_with(
                model.net(),
                &part,
                &mask,
                1.0,
                EntropyGrad::No,
                memory,
            )?;
            let loss = -weighted_sum(&lp.logprobs, &weights)?;
            head.backward(&loss)?;
        }
        fulcrum_model::clip_grad_norm(model.var_store(), 1.0);
        opt.step(1e-4);
        sync(device);
        if i >= warmup {
            total += t.elapsed().as_secs_f64();
        }
    }
    Ok(total / steps as f64)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let device_arg = arg(&args, "--device").unwrap_or("cpu");
    let device = device_arg.parse::<DeviceChoice>()?.resolve()?;
    let sample_only = args.iter().any(|a| a == "--sample-only");
    let skip_smol = sample_only || args.iter().any(|a| a == "--skip-smollm2");
    let mut out = serde_json::Map::new();
    out.insert("threads".into(), json!(tch::get_num_threads()));
    out.insert("device".into(), json!(format!("{device:?}")));
    let cfg = bench_config();
    let model = Model::random(&cfg, device, 0);
    if !sample_only {
        let gemm = gemm_gflops(device);
        out.insert("gemm_gflops".into(), json!(gemm));
        eprintln!("gemm: {gemm:.1} GFLOP/s");

        // Training step of the reference config.
        let (batch, seq) = (16, 256);
        let step = train_steps(&model, batch, seq, batch, MemoryOptions::default(), 5, 2)?;
        let tokens = (batch * seq) as f64;
        // 6 N flops per token for the weights, plus attention (QK^T and AV, forward and backward).
        let n = cfg.num_parameters() as f64;
        let attn = 12.0 * (cfg.num_layers * seq * cfg.hidden_size) as f64 / 2.0;
        let flops = tokens * (6.0 * n + attn);
        out.insert("train_step_s".into(), json!(step));
        out.insert("train_gflops".into(), json!(flops / step / 1e9));
        out.insert(
            "train_gemm_fraction".into(),
            json!(flops / step / 1e9 / gemm),
        );
        eprintln!(
            "train step: {:.1} ms ({:.0} tokens/s)",
            step * 1e3,
            tokens / step
        );
    }

    // Batched sampling: 64 prompts of 32 tokens, 128 new tokens each.
    tch::manual_seed(1);
    let prompts: Vec<Vec<i64>> = (0..64)
        .map(|_| {
            Vec::<i64>::try_from(&Tensor::randint(
                cfg.vocab_size,
                [32],
                (Kind::Int64, Device::Cpu),
            ))
            .unwrap_or_default()
        })
        .collect();
    // The median of 3 runs (this shared machine's memory bandwidth varies by tens of percent
    // from one second to the next), in f32 and then with bf16 weights and cache.
    let mut model = model;
    for (kind, key) in [(Kind::Float, "sample"), (Kind::BFloat16, "sample_bf16")] {
        model.set_kind(kind);
        let _ = sample_secs(&model, prompts[..4].to_vec(), 1, 8, 0)?;
        let mut runs = (0..3)
            .map(|_| sample_secs(&model, prompts.clone(), 1, 128, 0))
            .collect::<anyhow::Result<Vec<_>>>()?;
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (secs, n_tok) = runs[1];
        out.insert(format!("{key}_s"), json!(secs));
        out.insert(format!("{key}_tokens_per_s"), json!(n_tok as f64 / secs));
        eprintln!("{key}: {secs:.2} s ({:.0} tokens/s)", n_tok as f64 / secs);
    }
    drop(model);

    let smol_path = std::env::var("FULCRUM_SMOLLM2_GGUF")
        .unwrap_or_else(|_| "assets/SmolLM2-135M-Instruct.Q4_1.gguf".into());
    if !skip_smol && std::path::Path::new(&smol_path).is_file() {
        let model = fulcrum_model::ModelSpec::parse(&smol_path)?.load(device, 0)?;
        let tok = model.tokenizer()?;
        let text = model
            .chat_template()?
            .render(&[Message::user("Write a short story about a robot.")], true);
        let prompt = tok.encode(&text)?;
        let mut smol = serde_json::Map::new();
        for b in [1usize, 32] {
            let (secs, n_tok) = sample_secs(&model, vec![prompt.clone()], b, 128, 3)?;
            smol.insert(
                format!("sample_b{b}_tokens_per_s"),
                json!(n_tok as f64 / secs),
            );
            eprintln!(
                "smollm2 sampling batch {b}: {:.1} tokens/s",
                n_tok as f64 / secs
            );
        }
        // Peak memory of training alone: reset the high-water mark left by loading (GGUF
        // dequantisation) and sampling.
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        // Micro-batches of 2 sequences and activation checkpointing (what the trainer's
        // `ppo.micro_batch_size` and `model.checkpoint_activations` give).
        let (batch, seq, micro) = (8, 256, 2);
        let memory = MemoryOptions {
            checkpoint_layers: true,
            ..Default::default()
        };
        let step = train_steps(&model, batch, seq, micro, memory, 2, 1)?;
        smol.insert(
            "train_tokens_per_s".into(),
            json!((batch * seq) as f64 / step),
        );
        smol.insert("train_batch".into(), json!(batch));
        smol.insert("train_seq".into(), json!(seq));
        smol.insert("train_micro_batch".into(), json!(micro));
        smol.insert("train_checkpoint_layers".into(), json!(true));
        let peak = if device.is_cuda() { 0 } else { peak_rss() };
        smol.insert("peak_rss_bytes".into(), json!(peak));
        eprintln!(
            "smollm2 train: {:.0} tokens/s, peak RSS {:.2} GB",
            (batch * seq) as f64 / step,
            peak as f64 / 1e9
        );
        out.insert("smollm2".into(), Value::Object(smol));
    }
    println!("{}", Value::Object(out));
    Ok(())
}
