//! The runtime flags `eval` and `generate` share (seed, device, threads), resolved through
//! fulcrum-model's one runtime helper, as `train` resolves its config's; and [`bounded`], the
//! parser of every size flag, which refuses a value outside its range when the flags are read,
//! naming the flag and the range (`fulcrum_model::limits` has the bounds and their reasons).

use anyhow::{Context, Result};
use clap::builder::RangedU64ValueParser;
use fulcrum_model::limits::MAX_THREADS;
use fulcrum_model::{DeviceChoice, Runtime};

/// A whole-number flag in `min..=max`.
pub fn bounded(min: usize, max: usize) -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(min as u64..=max as u64)
}

/// Seed, device and threads.
#[derive(Debug, clap::Args)]
pub struct RuntimeArgs {
    /// Seed of the sampler's random stream.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Device: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// CPU threads for libtorch (0: one per core; at most 4096). Fewer than cores helps on a
    /// busy machine.
    #[arg(long, default_value_t = 0, value_parser = bounded(0, MAX_THREADS))]
    pub threads: usize,
}

impl RuntimeArgs {
    /// The device (`auto`: CUDA when there is one) and thread count, set for libtorch.
    pub fn resolve(&self) -> Result<Runtime> {
        let choice: DeviceChoice = self.device.parse().context("--device")?;
        Ok(Runtime::resolve(choice, self.threads)?)
    }
}
