//! `fulcrum train`: the main job. With no arguments it trains the built-in tiny model on the
//! built-in synthetic task: SFT warm-up (cached), then GRPO with Balanced Aggregation.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use fulcrum_train::Config;
use fulcrum_train::{Event, RunSummary};

use super::progress::Progress;

/// Where a config comes from (shared by `train` and `sft`): defaults < `--config` < `--set`.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// TOML config (see `configs/`); defaults are the built-in CPU demo.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override a config key, e.g. `--set steps=8 --set ppo.eps_high=0.28` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl Args {
    /// The config of a new run: the source's, with `--run-dir` and `--device` applied.
    fn config(&self) -> Result<Config> {
        let mut cfg = self.source.load()?;
        if let Some(d) = &self.run_dir {
            cfg.run_dir = Some(d.clone());
        }
        if let Some(d) = &self.device {
            cfg.device = d.parse().context("--device")?;
        }
        Ok(cfg)
    }
}

impl ConfigArgs {
    /// The resolved, validated config.
    pub fn load(&self) -> Result<Config> {
        Ok(Config::load(self.config.as_deref(), &self.set)?)
    }
}

/// Flags of `fulcrum train`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: ConfigArgs,
    /// Run directory [default: runs/<run_name>, or the first free runs/<run_name>-N].
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Device: cpu, cuda, cuda:N or auto (the config's `device`; under --nproc or a launcher,
    /// `cuda` means each rank's own GPU, cuda:LOCAL_RANK).
    #[arg(long)]
    pub device: Option<String>,
    /// Continue the run in this directory from its latest checkpoint.
    #[arg(long, conflicts_with_all = ["config", "set", "run_dir", "device"])]
    pub resume: Option<PathBuf>,
    /// With --resume: continue even if the run's config.toml or this binary differs from what
    /// wrote the latest checkpoint (the differing keys are still printed).
    #[arg(long, requires = "resume")]
    pub force: bool,
    /// With --resume: start the run in that directory again from step 0, discarding its
    /// records and checkpoints (a resume never discards recorded steps otherwise).
    #[arg(long, requires = "resume", conflicts_with = "from_checkpoint")]
    pub restart: bool,
    /// With --resume: continue from this checkpoint (`step-N`, or `N`) instead of the newest,
    /// discarding what was recorded after it (when the newest one is damaged).
    #[arg(long, value_name = "CHECKPOINT", requires = "resume")]
    pub from_checkpoint: Option<String>,
    /// No progress on stderr (a bar on a terminal; otherwise a line every few seconds).
    #[arg(long)]
    pub quiet: bool,
    /// Print the resolved config (defaults < --config < --set) as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Data parallelism: start N ranks of this command on this machine (c10d: Gloo on CPU,
    /// NCCL on CUDA, one GPU per rank). A job started by torchrun or Slurm is joined from
    /// RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT instead.
    #[arg(long, value_name = "N")]
    pub nproc: Option<usize>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if args.print_config {
        let cfg = args.config()?;
        print!("{}", cfg.to_toml());
        return Ok(ExitCode::SUCCESS);
    }
    // Ctrl-C / SIGTERM: finish the step, checkpoint, exit 130 saying how to resume; a second
    // signal exits at once. (Under --nproc the ranks get the terminal's signal themselves.)
    fulcrum_train::install_signal_handlers()?;
    let launch = fulcrum_dist::Launch::from_env()?;
    if let (Some(n), None) = (args.nproc, &launch) {
        // Each rank gets its share of the cores unless the config names a thread count.
        let threads = match &args.resume {
            Some(_) => None,
            None => {
                let cfg = args.config()?;
                let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
                (cfg.threads == 0).then(|| (cores / n).max(1))
            }
        };
        return super::launch::run_ranks(n, &super::launch::args_without_nproc(), threads);
    }
    let launch = launch.filter(|l| l.world > 1);
    let main_rank = launch.as_ref().is_none_or(|l| l.rank == 0);
    let pb = Progress::new(args.quiet || !main_rank);
    let mut held_out = String::from("-");
    let mut on = |e: Event<'_>| match e {
        Event::Sft {
            step,
            total,
            loss,
            skipped,
        } => {
            pb.set("sft", step, total, format!("loss {loss:.3}"));
            if step == total && skipped > 0 {
                pb.say(format!(
                    "fulcrum: SFT skipped {skipped} of {total} steps (non-finite loss or gradient)"
                ));
            }
        }
        Event::SftCached { path } => pb.say(format!(
            "fulcrum: SFT warm-up reused from {}",
            path.display()
        )),
        Event::Eval { step, result } => {
            held_out = format!("{:.3}", result.accuracy);
            pb.say(format!(
                "step {step:>4}: held-out accuracy {:.3} (pass@{} {:.3})",
                result.accuracy, result.k, result.pass_at_k
            ));
        }
        Event::Step {
            step,
            total,
            metrics,
        } => pb.set(
            "grpo",
            step,
            total,
            format!(
                "reward {:.3} train accuracy {:.3} held-out {held_out} len {:.1} {:.0} tok/s",
                metrics.reward_mean,
                metrics.acc_train,
                metrics.len_mean,
                metrics.sample_tokens_per_s()
            ),
        ),
        Event::Checkpoint { .. } => {}
    };
    let summary = match &args.resume {
        Some(dir) => {
            let open = || -> Result<fulcrum_train::Run> {
                let run = fulcrum_train::Run::open(dir)?;
                Ok(match &launch {
                    Some(l) => {
                        let ranks = join(l, run.config())?;
                        run.on_ranks(ranks)
                    }
                    None => run,
                })
            };
            open()
                .and_then(|run| {
                    let mut run = run
                        .force(args.force)
                        .restart(args.restart)
                        .from_checkpoint(args.from_checkpoint.clone());
                    Ok(run.train(&mut on)?)
                })
                .with_context(|| format!("resuming {}", dir.display()))?
        }
        None => {
            let cfg = args.config()?;
            match &launch {
                Some(l) => {
                    let ranks = join(l, &cfg)?;
                    fulcrum_train::Run::create_on(&cfg, ranks)?.train(&mut on)?
                }
                None => fulcrum_train::train(&cfg, &mut on)?,
            }
        }
    };
    pb.finish();
    if main_rank {
        print_summary(&summary);
    }
    Ok(ExitCode::SUCCESS)
}

/// Joins the job `launch` describes, on the config's device (`cuda` means this rank's own GPU,
/// `cuda:LOCAL_RANK`), with the config's collective timeout.
fn join(launch: &fulcrum_dist::Launch, cfg: &Config) -> Result<fulcrum_train::ranks::Ranks> {
    let (_, device) = fulcrum_train::resolve_runtime(cfg)?;
    let device = match device {
        tch::Device::Cuda(_) => tch::Device::Cuda(launch.local_rank),
        d => d,
    };
    let timeout = std::time::Duration::from_secs(cfg.dist.timeout_s);
    let ranks = fulcrum_train::ranks::Ranks::join(launch, device, timeout).with_context(|| {
        format!(
            "joining the job as rank {} of {}",
            launch.rank, launch.world
        )
    })?;
    Ok(ranks.with_bucket_mb(cfg.dist.bucket_mb))
}

fn print_summary(s: &RunSummary) {
    let acc = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
    println!("{:<28} {}", "rule", s.rule);
    println!("{:<28} {}", "policy loss", s.loss);
    println!("{:<28} {}", "seed", s.seed);
    println!(
        "{:<28} {}",
        "held-out accuracy after SFT",
        acc(s.sft_accuracy)
    );
    println!(
        "{:<28} {}",
        "held-out accuracy after RL",
        acc(Some(s.final_accuracy))
    );
    println!("{:<28} {}", "GRPO steps", s.steps);
    println!("{:<28} {:.0}", "sampling tokens/s", s.sample_tokens_per_s);
    println!("{:<28} {:.1}", "wall time (s)", s.wall_seconds);
    println!("{:<28} {}", "run directory", s.run_dir.display());
}
