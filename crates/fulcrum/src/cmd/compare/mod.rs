//! `fulcrum compare`: the same training under several aggregation rules (and, with `--losses`,
//! policy losses), seeds and tasks, from
//! one shared SFT warm-up per task and seed, then the comparison's numbers.
//!
//! The grid (tasks x seeds x rules) runs sequentially, each cell a normal run directory under
//! `OUT/runs/<task>/<rule>-seed<S>`. The warm-up of each task and seed is trained once, into the
//! task's `sft-cache/`, before its cells; each cell must then report that it reused exactly that
//! checkpoint, which is what makes the rules start from the same model. Finished cells are
//! skipped, interrupted ones resumed from their latest checkpoint, so the command can be run
//! again after a kill. At the end `OUT/summary.json` and `OUT/summary.md` hold the measures of
//! `results/summary.rs`; the table also goes to stdout.

pub mod grid;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{Context, Result};
use fulcrum_train::{Event, RunData};
use serde_json::json;

use super::progress::Progress;
use crate::results::summary::{self, Thresholds};
use grid::{Cell, CellState};

/// Flags of `fulcrum compare`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Base config and `--set` overrides (as for `train`); the grid changes task, rule, seed.
    #[command(flatten)]
    pub source: super::train::ConfigArgs,
    /// Aggregation rules to compare (spec names, comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "token,seq,ba")]
    pub rules: Vec<String>,
    /// Policy losses to compare (`ppo.loss` names, comma-separated) [default: the config's
    /// loss, and run directories named `<rule>-seed<S>`]. Given, every rule runs under every
    /// loss, in `<rule>-<loss>-seed<S>`, and the tables name each run `rule+loss`.
    #[arg(long, value_delimiter = ',')]
    pub losses: Vec<String>,
    /// Number of seeds: the config's seed, seed+1, ...
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Task specs, comma-separated (`countdown:difficulty=2,length=0.5,lists,jsonl:path=my.jsonl`)
    /// [default: the config's task]. A spec sets the config's task name and the keys it gives.
    #[arg(long)]
    pub tasks: Vec<String>,
    /// GRPO steps per run [default: the config's].
    #[arg(long)]
    pub steps: Option<u64>,
    /// Comparison directory.
    #[arg(long, default_value = "runs/compare")]
    pub out: PathBuf,
    /// A step counts as collapsed when held-out accuracy is this far below its best so far.
    #[arg(long, default_value_t = Thresholds::default().acc_margin)]
    pub collapse_margin: f64,
    /// Runs at once: each worker takes one task and seed at a time (its warm-up, then its
    /// rules), so results do not depend on it. With `threads = 0` each run gets
    /// cores / jobs libtorch threads. Small models train faster as several one-thread runs
    /// than as one run on every core.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// No progress on stderr (a bar on a terminal; otherwise a line every few seconds).
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let base = args.source.load()?;
    distinct_names::<fulcrum_core::Rule>("--rules", "rule", &args.rules)?;
    distinct_names::<fulcrum_core::PolicyLoss>("--losses", "loss", &args.losses)?;
    if args.rules.is_empty() || args.seeds == 0 {
        anyhow::bail!("--rules and --seeds must name at least one rule and one seed");
    }
    if args.collapse_margin.is_nan() || args.collapse_margin < 0.0 {
        anyhow::bail!(
            "--collapse-margin must be >= 0, got {}",
            args.collapse_margin
        );
    }
    let tasks = if args.tasks.is_empty() {
        vec![base_task_spec(&base)]
    } else {
        grid::split_task_specs("--tasks", &args.tasks)?
    };
    let seeds: Vec<u64> = (0..args.seeds).map(|k| base.seed + k).collect();
    if args.jobs == 0 {
        anyhow::bail!("--jobs must be at least 1");
    }
    let mut sets = args.source.set.clone();
    if args.jobs > 1 && base.threads == 0 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        sets.push(format!("threads={}", (cores / args.jobs).max(1)));
    }
    let cells = grid::plan(
        args.source.config.as_deref(),
        &sets,
        &grid::Axes {
            tasks: &tasks,
            rules: &args.rules,
            losses: &args.losses,
            seeds: &seeds,
        },
        args.steps,
        &args.out,
    )?;
    // Held for the whole comparison: a second one into the same directory is refused.
    let _held = fulcrum_train::OwnedDir::claim(&args.out, fulcrum_train::DirKind::Compare)?;
    let manifest = json!({
        "config": args.source.config, "set": args.source.set, "tasks": tasks,
        "rules": args.rules, "losses": args.losses, "seeds": seeds, "steps": args.steps,
    });
    let mpath = args.out.join("compare.json");
    fs::write(&mpath, serde_json::to_string_pretty(&manifest)? + "\n")
        .with_context(|| format!("writing {}", mpath.display()))?;

    // Ctrl-C / SIGTERM: the running cells checkpoint and stop; the same command resumes them.
    fulcrum_train::install_signal_handlers()?;
    run_grid(&cells, &tasks, &seeds, &args.out, args.jobs, args.quiet)?;

    let th = Thresholds {
        acc_margin: args.collapse_margin,
        ..Thresholds::default()
    };
    let stats: Vec<_> = cells
        .iter()
        .map(|c| {
            let d = RunData::load(c.dir())
                .with_context(|| format!("reading the run {}", c.dir().display()))?;
            let mut stats = summary::run_stats(&c.task, &d, &th);
            stats.rule = c.arm.clone();
            Ok(stats)
        })
        .collect::<Result<_>>()?;
    // The arms of the tables: the rules, or every rule+loss pair.
    let mut arms: Vec<String> = Vec::new();
    for c in &cells {
        if !arms.contains(&c.arm) {
            arms.push(c.arm.clone());
        }
    }
    let s = summary::summarise(&tasks, &arms, &seeds, stats, th);
    let path = args.out.join("summary.json");
    fs::write(&path, serde_json::to_string_pretty(&s)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    let table = summary::table(&s);
    let path = args.out.join("summary.md");
    fs::write(&path, &table).with_context(|| format!("writing {}", path.display()))?;
    print!("{table}");
    Ok(ExitCode::SUCCESS)
}

/// Parses every value of `flag` as a `T` and refuses a value named twice (two spellings of one
/// rule or loss would be two runs writing the same directory).
fn distinct_names<T>(flag: &str, what: &str, values: &[String]) -> Result<()>
where
    T: std::str::FromStr<Err = fulcrum_core::CoreError> + Ord + std::fmt::Display,
{
    let mut named = std::collections::BTreeSet::new();
    for v in values {
        let x = v.parse::<T>().with_context(|| format!("{flag}: {v:?}"))?;
        let name = x.to_string();
        if !named.insert(x) {
            anyhow::bail!("{flag}: {v:?}: {what} `{name}` is named twice");
        }
    }
    Ok(())
}

/// The config's own task as a spec (when `--tasks` is not given).
fn base_task_spec(cfg: &fulcrum_train::Config) -> String {
    let t = &cfg.task;
    let mut s = format!(
        "{}:difficulty={},length={},mistake_rate={}",
        t.name, t.difficulty, t.length, t.mistake_rate
    );
    if let Some(p) = &t.path {
        s.push_str(&format!(",path={}", p.display()));
    }
    s
}

/// One task and seed's share of the grid: its warm-up, then its unfinished cells in order.
struct Unit<'a> {
    task: &'a str,
    seed: u64,
    cells: Vec<(&'a Cell, CellState)>,
}

/// Runs every unfinished cell, `jobs` units (task and seed) at a time: within a unit the shared
/// warm-up comes first, then the rules.
fn run_grid(
    cells: &[Cell],
    tasks: &[String],
    seeds: &[u64],
    out: &Path,
    jobs: usize,
    quiet: bool,
) -> Result<()> {
    let states: Vec<CellState> = cells.iter().map(grid::state).collect::<Result<_>>()?;
    let done = states.iter().filter(|s| **s == CellState::Done).count();
    let pending: Vec<(&Cell, CellState)> = cells
        .iter()
        .zip(states)
        .filter(|(_, s)| *s != CellState::Done)
        .collect();
    let mut units = Vec::new();
    for task in tasks {
        for &seed in seeds {
            let todo: Vec<(&Cell, CellState)> = pending
                .iter()
                .filter(|(c, _)| &c.task == task && c.seed == seed)
                .copied()
                .collect();
            if !todo.is_empty() {
                units.push(Unit {
                    task,
                    seed,
                    cells: todo,
                });
            }
        }
    }
    let total: u64 = pending.iter().map(|(c, _)| c.config.steps).sum::<u64>()
        + pending.first().map_or(0, |(c, _)| c.config.sft.steps) * units.len() as u64;
    let pb = Progress::new(quiet);
    let grid =
        |pb: &Progress, delta: u64, message: String| pb.advance("grid", delta, total, message);
    if done > 0 {
        pb.say(format!(
            "fulcrum: {done} of {} runs already finished: skipped",
            cells.len()
        ));
    }
    let numbers: Vec<&Path> = pending.iter().map(|(c, _)| c.dir()).collect();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let errors = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, units.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(unit) = units.get(i) else { break };
                if failed.load(Ordering::SeqCst) {
                    break;
                }
                if let Err(e) = run_unit(unit, out, &numbers, &pb, &grid) {
                    failed.store(true, Ordering::SeqCst);
                    errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
                }
            });
        }
    });
    pb.finish();
    match errors
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .next()
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The lock of one warm-up (task and SFT seed) within this process.
fn warm_up_lock(key: &str) -> std::sync::Arc<Mutex<()>> {
    static LOCKS: std::sync::OnceLock<
        Mutex<std::collections::BTreeMap<String, std::sync::Arc<Mutex<()>>>>,
    > = std::sync::OnceLock::new();
    let mut map = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    map.entry(key.to_string()).or_default().clone()
}

/// The warm-up of one task and seed, then its cells; progress goes to the shared bar by steps.
fn run_unit(
    unit: &Unit<'_>,
    out: &Path,
    numbers: &[&Path],
    pb: &Progress,
    grid: &dyn Fn(&Progress, u64, String),
) -> Result<()> {
    let (task, seed) = (unit.task, unit.seed);
    let Some((first, _)) = unit.cells.first() else {
        return Ok(());
    };
    // The shared warm-up, trained (or found) once, from a directory that never holds a run but
    // shares the cells' parent and so their sft-cache.
    let mut wcfg = first.config.clone();
    wcfg.run_dir = Some(grid::task_dir(out, task).join(format!("warmup-seed{seed}")));
    let warm = if wcfg.sft.steps > 0 {
        // Units that share a warm-up (`sft.seed`) train it once: the others wait, then find it.
        let lock = warm_up_lock(&format!("{task}\u{0}{}", wcfg.sft_seed()));
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut counted = 0u64;
        let mut on = |e: Event<'_>| {
            if let Event::Sft { step, .. } = e {
                let message = format!("{task} seed {seed}: SFT warm-up");
                grid(pb, step.saturating_sub(counted), message);
                counted = counted.max(step);
            }
        };
        let (dir, acc) = fulcrum_train::warm_up(&wcfg, &mut on)
            .with_context(|| format!("SFT warm-up of {task}, seed {seed}"))?;
        grid(pb, wcfg.sft.steps.saturating_sub(counted), String::new());
        pb.say(format!(
            "{task} seed {seed}: warm-up {} (held-out accuracy {})",
            dir.display(),
            acc.map_or("-".into(), |a| format!("{a:.3}"))
        ));
        Some(dir)
    } else {
        None
    };
    for (cell, state) in &unit.cells {
        let k = numbers.iter().position(|d| *d == cell.dir()).unwrap_or(0) + 1;
        let label = format!(
            "[{k}/{}] {} {} seed {}",
            numbers.len(),
            cell.task,
            cell.arm,
            cell.seed
        );
        let mut reused: Option<PathBuf> = None;
        let mut trained_own = false;
        let mut counted = 0u64;
        let mut on = |e: Event<'_>| match e {
            Event::Step { step, metrics, .. } => {
                let message = format!(
                    "{label}: step {step}, reward {:.3}, train accuracy {:.3}, {:.0} tok/s",
                    metrics.reward_mean,
                    metrics.acc_train,
                    metrics.sample_tokens_per_s()
                );
                grid(pb, step.saturating_sub(counted), message);
                counted = counted.max(step);
            }
            Event::SftCached { path } => reused = Some(path.to_path_buf()),
            Event::Sft { .. } => trained_own = true,
            _ => {}
        };
        let summary = match state {
            CellState::Partial => fulcrum_train::resume(cell.dir(), &mut on)
                .with_context(|| format!("resuming {}", cell.dir().display()))?,
            _ => fulcrum_train::train(&cell.config, &mut on)
                .with_context(|| format!("run {}", cell.dir().display()))?,
        };
        // A fresh run must have started from the shared warm-up (a resumed one starts from its
        // own checkpoint).
        if *state == CellState::New && warm.is_some() && (trained_own || reused != warm) {
            anyhow::bail!(
                "{} did not start from the shared warm-up {}",
                cell.dir().display(),
                warm.as_deref()
                    .map_or("-".into(), |w| w.display().to_string())
            );
        }
        grid(pb, cell.config.steps.saturating_sub(counted), String::new());
        pb.say(format!(
            "{label}: held-out accuracy {:.3} after {} steps ({:.0} s)",
            summary.final_accuracy, summary.steps, summary.wall_seconds
        ));
    }
    Ok(())
}
