//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> anyhow::Result<ExitCode>`.

pub mod analyze;
pub mod score;
