//! `fulcrum sft`: the supervised warm-up alone, on the task's demonstrations; writes the model
//! as an HF folder (a checkpoint directory) and prints its held-out accuracy.

use std::process::ExitCode;

use anyhow::Result;
use fulcrum_train::Event;

/// Flags of `fulcrum sft`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `[sft]`, `[model]` and `[task]` of this config are used.
    #[command(flatten)]
    pub source: super::train::ConfigArgs,
    /// No progress on stderr (a bar on a terminal; otherwise a line every few seconds).
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let cfg = args.source.load()?;
    if cfg.sft.steps == 0 {
        anyhow::bail!("sft.steps is 0: nothing to do");
    }
    let pb = super::progress::Progress::new(args.quiet);
    let mut skipped_steps = 0;
    let mut on = |e: Event<'_>| {
        if let Event::Sft {
            step,
            total,
            loss,
            skipped,
        } = e
        {
            pb.set("sft", step, total, format!("loss {loss:.3}"));
            skipped_steps = skipped;
        }
    };
    let (dir, accuracy) = fulcrum_train::warm_up(&cfg, &mut on)?;
    pb.finish();
    if skipped_steps > 0 {
        eprintln!("fulcrum: SFT skipped {skipped_steps} steps (non-finite loss or gradient)");
    }
    println!("{:<28} {}", "model", dir.display());
    println!(
        "{:<28} {}",
        "held-out accuracy after SFT",
        accuracy.map_or("-".into(), |a| format!("{a:.3}"))
    );
    Ok(ExitCode::SUCCESS)
}
