//! What the sampling benchmarks share (`engine.rs`, `sample_real.rs`, included with `#[path]`):
//! a flag's value, and timing one batch of temperature-1 completions that run to the length
//! limit.

use std::time::Instant;

use fulcrum_model::tch::{self, Device};
use fulcrum_model::{generate, Model, SampleRequest, Sampling};

/// The value after `name` on the command line.
pub fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// Waits for the GPU's queued work (nothing on a CPU).
pub fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Seconds and tokens of sampling `g` completions of `new_tokens` for each prompt at temperature
/// 1, with no stop token (every row runs to the limit).
pub fn sample_secs(
    model: &Model,
    prompts: Vec<Vec<i64>>,
    g: usize,
    new_tokens: usize,
    seed: u64,
) -> anyhow::Result<(f64, usize)> {
    let req = SampleRequest {
        first_prompt: 0,
        prompts,
        samples_per_prompt: g,
        max_new_tokens: new_tokens,
        sampling: Sampling::Sample {
            temperature: 1.0,
            top_k: None,
            top_p: None,
        },
        seed,
        stop_token_ids: vec![],
        stop_strings: vec![],
    };
    let device = model.device();
    sync(device);
    let t = Instant::now();
    let out = generate(model.net(), &req, None)?;
    sync(device);
    Ok((
        t.elapsed().as_secs_f64(),
        out.iter().map(|c| c.tokens.len()).sum(),
    ))
}
