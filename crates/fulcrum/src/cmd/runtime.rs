//! The runtime flags `eval` and `generate` share (seed, device, threads), resolved through
//! fulcrum-model's one runtime helper, as `train` resolves its config's.

use anyhow::{Context, Result};
use fulcrum_model::{DeviceChoice, Runtime};

/// Seed, device and threads.
#[derive(Debug, clap::Args)]
pub struct RuntimeArgs {
    /// Seed of the sampler's random stream.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Device: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// CPU threads for libtorch (0: one per core). Fewer than cores helps on a busy machine.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

impl RuntimeArgs {
    /// The device (`auto`: CUDA when there is one) and thread count, set for libtorch.
    pub fn resolve(&self) -> Result<Runtime> {
        let choice: DeviceChoice = self.device.parse().context("--device")?;
        Ok(Runtime::resolve(choice, self.threads)?)
    }
}
