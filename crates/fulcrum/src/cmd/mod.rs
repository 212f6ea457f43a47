//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> anyhow::Result<ExitCode>`.

pub mod analyze;
pub mod compare;
pub mod convert;
pub mod eval;
pub mod fetch_assets;
pub mod generate;
pub mod launch;
pub mod progress;
pub mod report;
pub mod runtime;
pub mod score;
pub mod sft;
pub mod train;
