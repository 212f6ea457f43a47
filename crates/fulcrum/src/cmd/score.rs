//! `fulcrum score FILE`: score model responses from a JSONL file, one JSON line out per line in.
//!
//! Input lines: `response`, `answer`, optional `verifier` (`math` default, `exact`, `code`) and
//! `entry_point`. Output lines: `{"reward": .., "correct": .., "reason": ..}` in input order.
//! Every line is checked before any is scored: a malformed line is an error naming its line.
//! Code runs in the sandbox `--sandbox` names (default: `FULCRUM_SANDBOX`, else `auto`:
//! bubblewrap when it works, else the built-in namespaces or landlock mode); the mode is
//! printed once on stderr. When no mode that contains programs works, code items are refused:
//! an error naming what is missing, nothing scored.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use fulcrum_tasks::code::CodeRunner;
use fulcrum_tasks::sandbox::{set_sandbox_choice, SandboxChoice};
use fulcrum_tasks::{parse_requests, score_requests};
use fulcrum_tasks::{RewardMode, Verifier};

/// Flags of `fulcrum score`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// JSONL file of responses to score (`-` reads stdin).
    pub file: PathBuf,
    /// Reward scale: `zero-one` ({0,1}) or `plus-minus` ({-1,+1}, as verl's math_dapo).
    #[arg(long, default_value = "zero-one")]
    pub reward: String,
    /// Code programs run at the same time (default: one per CPU).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Code sandbox: `auto` (bwrap, else built-in namespaces, else landlock; refuses when none
    /// works), `bwrap`, `namespaces`, `landlock`, or `unsafe-rlimit` (NOT a sandbox: only for
    /// programs you trust). Default: FULCRUM_SANDBOX, else auto.
    #[arg(long)]
    pub sandbox: Option<SandboxChoice>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mode: RewardMode = args.reward.parse()?;
    let text = if args.file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read stdin")?;
        s
    } else {
        std::fs::read_to_string(&args.file)
            .with_context(|| format!("{}: cannot read", args.file.display()))?
    };
    let reqs = parse_requests(&args.file, &text)?;
    if let Some(choice) = args.sandbox {
        set_sandbox_choice(choice)?;
    }
    let runner = if reqs.iter().any(|r| r.verifier == Verifier::Code) {
        // Prints the mode once; refuses (an error, nothing scored) when no sandbox works.
        let runner = CodeRunner::try_detect()?;
        let runner = match args.workers {
            Some(w) => runner.with_workers(w),
            None => runner,
        };
        eprintln!("fulcrum: code runner: {} workers", runner.workers());
        Some(runner)
    } else {
        None
    };
    let scores = score_requests(&reqs, mode, runner.as_ref());
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for s in scores {
        let line =
            serde_json::json!({"reward": s.reward, "correct": s.correct, "reason": s.reason});
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
