//! `fulcrum analyze FILE`: the aggregation advisor.
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `fulcrum analyze`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rollout dump: JSONL, one response per line.
    pub file: PathBuf,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet written")
}
