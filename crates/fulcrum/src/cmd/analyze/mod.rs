//! `fulcrum analyze FILE`: the aggregation advisor.
//!
//! Reads a rollout dump (ours, or verl / TRL logs turned into JSONL), computes advantages (or
//! takes them from the file), and shows what every aggregation rule of the spec would do to
//! this batch: positive and negative gradient mass, their ratio, the length-weight correlation,
//! the length diagnostics, and a plain-language verdict. `--json` gives the same as data.

mod input;
mod report;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use fulcrum_core::{advantages, analysis, BaCount, Diagnostics, Estimator, RuleParams, StepBatch};

/// Flags of `fulcrum analyze`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rollout dump: JSONL, one response per line, with a group id (string or integer), a
    /// reward (number) and a response length in tokens (integer); an advantage, when present,
    /// is used instead of computing one.
    pub file: PathBuf,
    /// Key of the group id [default: the first of group, group_id, uid, prompt_id present].
    #[arg(long)]
    pub group_key: Option<String>,
    /// Key of the reward [default: the first of reward, score, rewards present].
    #[arg(long)]
    pub reward_key: Option<String>,
    /// Key of the response length [default: the first of length, response_length, num_tokens
    /// present].
    #[arg(long)]
    pub length_key: Option<String>,
    /// Key of a precomputed advantage [default: advantage or advantages].
    #[arg(long)]
    pub advantage_key: Option<String>,
    /// Advantage estimator used when the file has no advantages: grpo, mean, rloo, opo.
    #[arg(long, default_value = "grpo", value_parser = parse_estimator)]
    pub advantage: Estimator,
    /// BA's count W_g for `ba` and `ba-batch`: group or signed.
    #[arg(long, default_value = "group", value_parser = parse_ba_count)]
    pub ba_count: BaCount,
    /// `drgrpo`'s constant L_norm [default: the longest response in the file].
    #[arg(long)]
    pub l_norm: Option<f64>,
    /// Print machine-readable JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
}

fn parse_estimator(s: &str) -> Result<Estimator, String> {
    s.parse()
        .map_err(|e: fulcrum_core::CoreError| e.to_string())
}

fn parse_ba_count(s: &str) -> Result<BaCount, String> {
    s.parse()
        .map_err(|e: fulcrum_core::CoreError| e.to_string())
}

pub fn run(args: Args) -> Result<ExitCode> {
    let keys = input::Keys {
        group: args.group_key.clone(),
        reward: args.reward_key.clone(),
        length: args.length_key.clone(),
        advantage: args.advantage_key.clone(),
    };
    let rollouts = input::read(&args.file, &keys)?;
    let shown = args.file.display();

    let params = RuleParams {
        ba_count: args.ba_count,
        l_norm: args
            .l_norm
            .unwrap_or_else(|| analysis::default_l_norm(&rollouts.lengths)),
        ..RuleParams::default()
    };
    params.validate().context("--l-norm")?;

    let (adv, adv_source) = match &rollouts.advantages {
        Some(a) => (
            a.clone(),
            format!("from the file's `{}` field", rollouts.keys_used[3]),
        ),
        None => (
            advantages::compute(
                args.advantage,
                &rollouts.groups,
                &rollouts.rewards,
                &rollouts.lengths,
            )
            .with_context(|| format!("{shown}: computing advantages"))?,
            format!("computed with `{}`", args.advantage),
        ),
    };
    let batch = StepBatch::new(&rollouts.groups, &rollouts.lengths, &adv)
        .with_context(|| format!("{shown}: building the batch"))?;
    let diag = Diagnostics::compute(&batch, &rollouts.rewards, &params)
        .with_context(|| format!("{shown}: diagnostics"))?;

    let [g, r, l, _] = &rollouts.keys_used;
    eprintln!("fulcrum: {shown}: {} responses, keys group={g} reward={r} length={l}; advantages {adv_source}", batch.len());

    let text = if args.json {
        report::json(&adv, &diag)?
    } else {
        report::human(&batch, &diag, &params, &adv_source)
    };
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
