//! `fulcrum eval`: k samples per problem on built-in tasks or registry benchmarks; avg@k and
//! pass@k per benchmark as a table (or `--json`).

use std::process::ExitCode;

use anyhow::{Context, Result};
use fulcrum_model::ModelSpec;
use fulcrum_tasks::{create_task, TaskConfig};
use fulcrum_train::{evaluate_with_samples, EvalSettings};

use super::runtime::RuntimeArgs;
use crate::results::eval_table;

/// Flags of `fulcrum eval`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `tiny`, an HF folder, a .gguf file, or a run directory (its final checkpoint).
    #[arg(long)]
    pub model: String,
    /// Comma-separated task or benchmark names (arithmetic, countdown, lists, steps, gsm8k,
    /// math500, aime24, aime25, amc23, minerva, olympiadbench, humaneval, mbpp, leetcode), each
    /// optionally with its settings as in `compare --tasks` (`arithmetic:difficulty=2,
    /// mistake_length=2`, `jsonl:path=my.jsonl`).
    #[arg(long, required = true)]
    pub bench: Vec<String>,
    /// Samples per problem.
    #[arg(long, default_value_t = 1)]
    pub k: usize,
    /// Problems per benchmark (the first N of its fixed order).
    #[arg(long, default_value_t = 128)]
    pub prompts: usize,
    /// Sampling temperature; 0 is greedy (then k > 1 repeats the same answer).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Longest response in tokens.
    #[arg(long, default_value_t = 512)]
    pub max_new_tokens: usize,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write every scored response (benchmark, problem id, prompt, response, tokens,
    /// truncated, reward, correct, verifier's reason) to this JSONL file.
    #[arg(long)]
    pub samples: Option<std::path::PathBuf>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if args.temperature < 0.0 || !args.temperature.is_finite() {
        anyhow::bail!(
            "--temperature: must be finite and >= 0, got {}",
            args.temperature
        );
    }
    if args.k == 0 || args.prompts == 0 {
        anyhow::bail!("--k and --prompts must be >= 1");
    }
    // Tasks first: a bad spec or data file is reported before a slow model load.
    let specs = super::compare::grid::split_task_specs("--bench", &args.bench)?;
    let mut tasks = Vec::new();
    for name in &specs {
        let cfg: TaskConfig = name.parse().with_context(|| format!("--bench {name}"))?;
        tasks.push(create_task(&cfg).with_context(|| format!("--bench {name}"))?);
    }
    // Code benchmarks: the sandbox (FULCRUM_SANDBOX, else auto) is chosen and printed now;
    // when none contains programs, stop here rather than report zeros.
    let task_refs: Vec<&dyn fulcrum_tasks::Task> = tasks.iter().map(|t| t.as_ref()).collect();
    let choice = fulcrum_tasks::code::sandbox_choice()?;
    fulcrum_tasks::code::sandbox_for_tasks(choice, &task_refs, 0)?;
    // Created before the slow part, so that an unwritable path fails at once.
    let mut samples_out = match &args.samples {
        Some(p) => Some((
            p,
            std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("--samples {}", p.display()))?,
            ),
        )),
        None => None,
    };
    let runtime = args.runtime.resolve()?;
    let spec = ModelSpec::parse(&args.model).with_context(|| format!("--model {}", args.model))?;
    let model = spec
        .load(runtime.device, 0)
        .with_context(|| format!("loading model {spec}"))?;
    // What the JSON names as the model: the folder or file the weights came from.
    let spec = spec
        .weights_path()
        .map_or_else(|| spec.to_string(), |p| p.to_string_lossy().into_owned());
    let mut rows = Vec::new();
    for (name, task) in specs.iter().zip(&tasks) {
        let s = EvalSettings {
            prompts: args.prompts,
            k: args.k,
            temperature: args.temperature,
            max_new_tokens: args.max_new_tokens,
            max_prompt_len: usize::MAX,
            seed: args.runtime.seed,
        };
        let t0 = std::time::Instant::now();
        let (r, samples) = evaluate_with_samples(&model, task.as_ref(), &s)
            .with_context(|| format!("evaluating {name}"))?;
        let secs = t0.elapsed().as_secs_f64();
        if let Some((path, out)) = samples_out.as_mut() {
            use std::io::Write;
            for sample in &samples {
                let mut line = serde_json::to_value(sample)?;
                line["bench"] = serde_json::Value::String(name.clone());
                writeln!(out, "{line}").with_context(|| format!("writing {}", path.display()))?;
            }
            out.flush()
                .with_context(|| format!("writing {}", path.display()))?;
        }
        rows.push((name.clone(), r, secs));
    }
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(n, r, secs)| serde_json::json!({"bench": n, "result": r, "seconds": secs}))
            .collect();
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({"model": spec, "results": v}))?
        );
    } else {
        print!("{}", eval_table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}
