//! `fulcrum eval`: n responses to each problem of built-in tasks or registry benchmarks, scored;
//! pass@1, pass@k and avg@k per benchmark as a table (or `--json`).
//!
//! Registered benchmarks and data files are evaluated whole unless `--prompts` asks for fewer,
//! and every output says how many of how many. Problems are sampled in batches; with
//! `--samples FILE` every batch's responses are appended to FILE as they are scored, and a
//! rerun reads them back and samples only the problems not finished ([`cache`]).
//!
//! A problem whose prompt is longer than the model's context leaves beside the response
//! (`max_position_embeddings` minus the length limit) is skipped: never sampled, not counted
//! in the measures, and counted in the output (`skipped_too_long`). Prompt lengths are found
//! before the model is loaded, with its tokenizer alone; a prompt too long by its bytes is
//! never encoded.

mod cache;
mod plan;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use fulcrum_model::limits::{
    MAX_BATCH_SEQUENCES, MAX_PROMPTS, MAX_SAMPLES_PER_PROMPT, MAX_SEQUENCE_TOKENS,
};
use fulcrum_model::{Model, ModelSpec, PromptEncoder, PromptTokens};
use fulcrum_tasks::{create_task, Example, Split, Task, TaskConfig};
use fulcrum_train::{measure_problems, sample_problems, EvalSample, ProblemSampling, EVAL_CHUNK};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::progress::clock;
use super::runtime::{bounded, RuntimeArgs};
use crate::results::{eval_table, EvalRow};
use cache::{Key, SampleLine, SamplesFile};
use plan::{BenchPlan, Overrides, Protocol};

/// Flags of `fulcrum eval`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `tiny`, an HF folder, a .gguf file, or a run directory (its final checkpoint).
    #[arg(long)]
    pub model: String,
    /// Comma-separated task or benchmark names (arithmetic, countdown, lists, steps, gsm8k,
    /// math500, aime24, aime25, amc23, minerva, olympiadbench, humaneval, mbpp, leetcode), each
    /// optionally with its settings as in `compare --tasks` (`arithmetic:difficulty=2,
    /// mistake_length=2`, `jsonl:path=my.jsonl`). With --protocol: the protocol's benchmarks
    /// when not given.
    #[arg(long)]
    pub bench: Vec<String>,
    /// An evaluation protocol: its benchmarks and, for each, k, temperature and length limit
    /// (`paper`: avg@32 on AIME24/AIME25/AMC23, avg@4 on MATH-500/Minerva/OlympiadBench, all at
    /// temperature 1.0 and 8192 tokens). Flags given explicitly override it.
    #[arg(long, value_enum)]
    pub protocol: Option<Protocol>,
    /// The k of pass@k and avg@k, 1 to 65536 [default: 1, or the protocol's].
    #[arg(long, value_parser = bounded(1, MAX_SAMPLES_PER_PROMPT))]
    pub k: Option<usize>,
    /// Responses sampled per problem, n >= k (at most 65536): pass@k is the unbiased estimate
    /// from n [default: k].
    #[arg(long, value_parser = bounded(1, MAX_SAMPLES_PER_PROMPT))]
    pub samples_per_problem: Option<usize>,
    /// Problems per benchmark: the first N of its fixed seeded order, at most 1048576
    /// [default: the whole benchmark or data file; 128 for generated tasks, which have no end].
    #[arg(long, value_parser = bounded(1, MAX_PROMPTS))]
    pub prompts: Option<usize>,
    /// Sampling temperature; 0 is greedy (then every response to a problem is the same)
    /// [default: 0, or the protocol's].
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Longest response in tokens, at most 1048576 [default: by benchmark family: code 512,
    /// GSM8K 1024, MATH-500 and Minerva 2048, competition math 4096, other tasks 512; or the
    /// protocol's]. A problem whose prompt does not fit the model's context beside it is
    /// skipped and counted (`skipped_too_long`).
    #[arg(long, value_parser = bounded(1, MAX_SEQUENCE_TOKENS))]
    pub max_new_tokens: Option<usize>,
    /// Responses sampled together: a batch is this many responses in whole problems (a power
    /// of two, at most 64 problems, at least one; at most 1048576 responses). Lower it if the
    /// sampler runs out of memory.
    #[arg(long, default_value_t = 256, value_parser = bounded(1, MAX_BATCH_SEQUENCES))]
    pub batch_size: usize,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write every scored response (benchmark, problem index and id, sample index, settings,
    /// prompt, response, tokens, truncated, reward, correct, verifier's reason) to this JSONL
    /// file as it is scored. The file is also a cache: a rerun with the same settings reads it
    /// and samples only the problems it has not finished.
    #[arg(long)]
    pub samples: Option<std::path::PathBuf>,
    /// Start the --samples file over instead of reusing its responses (needed when they were
    /// sampled with other settings).
    #[arg(long, requires = "samples")]
    pub fresh: bool,
    /// No progress bar or progress lines (the bar is also off when stderr is not a terminal;
    /// then a line per batch is printed instead).
    #[arg(long)]
    pub quiet: bool,
    /// A tool the model may call in the middle of its responses: `python` (a Python
    /// interpreter in the code sandbox), as `task.tools` in training; the same as
    /// `tools=python` in each --bench's settings.
    #[arg(long)]
    pub tools: Option<fulcrum_tasks::tools::ToolName>,
    /// How the model calls the tool: `chat` (`<tool_call>` JSON) or `code` (a fenced python
    /// block) [default: chat].
    #[arg(long, requires = "tools")]
    pub tool_format: Option<fulcrum_tasks::tools::ToolFormat>,
    /// Most tool calls in one response (1 to 64).
    #[arg(long, default_value_t = 4, requires = "tools", value_parser = bounded(1, 64))]
    pub max_turns: usize,
}

/// `spec` with the --tools flags in its settings (`NAME:...,tools=python,tool_format=code`),
/// so that the tools are part of the benchmark's name and of the samples file's key.
fn with_tools(spec: &str, args: &Args) -> String {
    let Some(tool) = args.tools else {
        return spec.to_string();
    };
    let mut settings = vec![format!("tools={tool}")];
    if let Some(f) = args.tool_format {
        settings.push(format!("tool_format={f}"));
    }
    let sep = if spec.contains(':') { "," } else { ":" };
    format!("{spec}{sep}{}", settings.join(","))
}

/// One benchmark ready to run.
struct Bench {
    name: String,
    /// The spec's settings (its tools among them).
    config: TaskConfig,
    task: Box<dyn Task>,
    plan: BenchPlan,
    examples: Vec<Example>,
    /// `too_long[i]`: problem i's prompt does not fit the model's context beside the response;
    /// it is skipped.
    too_long: Vec<bool>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if let Some(t) = args.temperature {
        if t < 0.0 || !t.is_finite() {
            anyhow::bail!("--temperature: must be finite and >= 0, got {t}");
        }
    }
    if args.batch_size == 0 {
        anyhow::bail!("--batch-size must be >= 1");
    }
    let specs = match (&args.protocol, args.bench.is_empty()) {
        (Some(p), true) => p.rows().iter().map(|r| r.bench.to_string()).collect(),
        (None, true) => anyhow::bail!("give --bench (or --protocol paper)"),
        (_, false) => super::compare::grid::split_task_specs("--bench", &args.bench)?,
    };
    let overrides = Overrides {
        k: args.k,
        samples_per_problem: args.samples_per_problem,
        temperature: args.temperature,
        max_new_tokens: args.max_new_tokens,
        prompts: args.prompts,
    };
    // Tasks first: a bad spec, data file or flag is reported before a slow model load.
    let mut benches = Vec::new();
    let specs: Vec<String> = specs.iter().map(|s| with_tools(s, &args)).collect();
    for name in &specs {
        let cfg: TaskConfig = name.parse().with_context(|| format!("--bench {name}"))?;
        let task = create_task(&cfg).with_context(|| format!("--bench {name}"))?;
        let plan = plan::plan(&cfg.name, task.problems_total(), args.protocol, &overrides)
            .with_context(|| format!("--bench {name}"))?;
        // The first N of the seeded order: the order does not depend on N, so a subset is a
        // prefix of the whole set and its cached responses carry over.
        let examples = task
            .examples(Split::Test, args.runtime.seed, plan.problems)
            .with_context(|| format!("--bench {name}"))?;
        benches.push(Bench {
            name: name.clone(),
            config: cfg,
            task,
            plan,
            examples,
            too_long: Vec::new(),
        });
    }
    // Code benchmarks: the sandbox (FULCRUM_SANDBOX, else auto) is chosen and printed now;
    // when none contains programs, stop here rather than report zeros.
    let task_refs: Vec<&dyn Task> = benches.iter().map(|b| b.task.as_ref()).collect();
    let choice = fulcrum_tasks::sandbox::sandbox_choice()?;
    fulcrum_tasks::sandbox_for_tasks(choice, &task_refs, 0)?;
    let spec = ModelSpec::parse(&args.model).with_context(|| format!("--model {}", args.model))?;
    // Prompts the model's context cannot hold beside a response are found now, with the
    // tokenizer alone, before the model is loaded.
    let encoder = spec
        .prompt_encoder()
        .with_context(|| format!("--model {}", args.model))?;
    for b in &mut benches {
        b.too_long = too_long(&encoder, b).with_context(|| format!("--bench {}", b.name))?;
    }
    // What the JSON and the samples file name as the model: where the weights came from.
    let model_name = spec
        .weights_path()
        .map_or_else(|| spec.to_string(), |p| p.to_string_lossy().into_owned());
    // Opened and checked before the slow part, so that an unwritable path or a file of other
    // settings fails at once.
    let mut samples = match &args.samples {
        Some(p) => Some(SamplesFile::open(p, args.fresh)?),
        None => None,
    };
    let mut cached = Vec::new();
    for b in &benches {
        let key = key(&b.name, &model_name, &b.plan, args.runtime.seed);
        cached.push(match &samples {
            Some(f) => f.cached(&key, &b.examples, b.plan.n)?,
            None => vec![vec![None; b.plan.n]; b.examples.len()],
        });
    }
    let runtime = args.runtime.resolve()?;
    let model = spec
        .load(runtime.device, 0)
        .with_context(|| format!("loading model {spec}"))?;
    let mut rows = Vec::new();
    for (b, cache) in benches.iter().zip(cached) {
        let run = BenchRun {
            model: &model,
            max_turns: args.max_turns,
            model_name: &model_name,
            seed: args.runtime.seed,
            batch_size: args.batch_size,
            quiet: args.quiet,
        };
        let row = run
            .evaluate(b, cache, samples.as_mut())
            .with_context(|| format!("evaluating {}", b.name))?;
        if let Some(w) = row.truncation_warning() {
            eprintln!("eval: warning: {w}");
        }
        rows.push(row);
    }
    let skipped: Vec<usize> = benches
        .iter()
        .map(|b| b.too_long.iter().filter(|&&t| t).count())
        .collect();
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .zip(&skipped)
            .map(|(r, skipped)| {
                serde_json::json!({"bench": r.bench, "result": r.json(), "seconds": r.seconds,
                                   "skipped_too_long": skipped})
            })
            .collect();
        let protocol = args.protocol.map(Protocol::name);
        println!(
            "{}",
            serde_json::to_string(
                &serde_json::json!({"model": model_name, "protocol": protocol, "results": v})
            )?
        );
    } else {
        print!("{}", eval_table(&rows));
        for (b, &n) in benches.iter().zip(&skipped).filter(|(_, &n)| n > 0) {
            println!("{}", skipped_note(b, n, encoder.max_positions));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Which problems of `b` have a prompt longer than the model's context leaves beside a
/// response of `b.plan.max_new_tokens` tokens. Every problem skipped, or no room at all, is an
/// error naming the flag to change.
fn too_long(encoder: &PromptEncoder, b: &Bench) -> Result<Vec<bool>> {
    let context = encoder.max_positions;
    let room = context.saturating_sub(b.plan.max_new_tokens);
    if room == 0 {
        anyhow::bail!(
            "responses of up to {} tokens ({}) leave no room for a prompt in the model's context \
             of {context} tokens (max_position_embeddings): lower --max-new-tokens",
            b.plan.max_new_tokens,
            b.plan.max_new_tokens_from
        );
    }
    let skip = b
        .examples
        .iter()
        .map(|ex| match encoder.encode_within(&ex.prompt, room) {
            Ok(t) => Ok(matches!(t, PromptTokens::TooLong { .. })),
            Err(e) => Err(anyhow::Error::new(e).context(format!("prompt {}", ex.id))),
        })
        .collect::<Result<Vec<bool>>>()?;
    if !skip.is_empty() && skip.iter().all(|&t| t) {
        anyhow::bail!(
            "every one of its {} prompts is longer than the {room} tokens the model's context of \
             {context} leaves beside responses of up to {} tokens ({}): nothing to evaluate; \
             lower --max-new-tokens",
            skip.len(),
            b.plan.max_new_tokens,
            b.plan.max_new_tokens_from
        );
    }
    Ok(skip)
}

/// The line that says how many problems of `b` were skipped for their length, and why.
fn skipped_note(b: &Bench, n: usize, context: usize) -> String {
    format!(
        "{}: {n} of {} problems skipped, not sampled and not counted: their prompts are longer \
         than the {} tokens the model's context of {context} leaves beside responses of up to {} \
         tokens",
        b.name,
        b.examples.len(),
        context.saturating_sub(b.plan.max_new_tokens),
        b.plan.max_new_tokens
    )
}

/// The settings a cached response of benchmark `bench` must match.
fn key<'a>(bench: &'a str, model: &'a str, plan: &BenchPlan, seed: u64) -> Key<'a> {
    Key {
        bench,
        model,
        temperature: plan.temperature,
        max_new_tokens: plan.max_new_tokens,
        seed,
    }
}

/// What every benchmark of one `fulcrum eval` shares.
struct BenchRun<'a> {
    model: &'a Model,
    /// Most tool calls in one response (`--max-turns`).
    max_turns: usize,
    model_name: &'a str,
    seed: u64,
    batch_size: usize,
    quiet: bool,
}

impl BenchRun<'_> {
    /// Evaluates one benchmark: samples every problem not in `cache` batch by batch (appending
    /// each batch to the samples file), then measures all of them.
    fn evaluate(
        &self,
        b: &Bench,
        mut cache: Vec<Vec<Option<EvalSample>>>,
        mut samples: Option<&mut SamplesFile>,
    ) -> Result<EvalRow> {
        let plan = &b.plan;
        let t0 = Instant::now();
        let skip = |i: usize| b.too_long.get(i).copied().unwrap_or(false);
        let skipped = (0..b.examples.len()).filter(|&i| skip(i)).count();
        // Problems finished in the samples file (a skipped one was never sampled: its
        // settings, which the file's lines must match, skip it there too).
        let cached = cache::finished(&cache);
        let subset = plan::subset_rule(plan, self.seed);
        let pb = self.bar(&b.name, plan.problems as u64);
        let mut lines = vec![format!(
            "eval: {}: {} problems{}, {} response{} each (k = {}), temperature {}, at most {} \
             tokens ({})",
            b.name,
            match plan.problems_total {
                Some(t) => format!("{} of {t}", plan.problems),
                None => format!("{} generated", plan.problems),
            },
            if plan.is_subset() { " (a subset)" } else { "" },
            plan.n,
            if plan.n == 1 { "" } else { "s" },
            plan.k,
            plan.temperature,
            plan.max_new_tokens,
            plan.max_new_tokens_from
        )];
        if let (Some(f), true) = (&samples, cached > 0) {
            lines.push(format!(
                "eval: {}: {cached} problems finished in {}, not sampled again",
                b.name,
                f.path().display()
            ));
        }
        lines.extend(plan.notes.iter().map(|n| format!("eval: {}: {n}", b.name)));
        if skipped > 0 {
            let context = self.model.config().max_position_embeddings as usize;
            lines.push(format!("eval: {}", skipped_note(b, skipped, context)));
        }
        for l in lines {
            say(&pb, self.quiet, l);
        }
        pb.set_position((cached + skipped) as u64);
        pb.reset_eta();
        // The native sampler, with the benchmark's tools when it has some.
        let tools = fulcrum_train::tools::ToolSetup::for_task(&b.config, self.max_turns);
        let mut engine = fulcrum_train::engine::RolloutEngine::Native(tools.map(Box::new));
        let sampling = ProblemSampling {
            n: plan.n,
            temperature: plan.temperature,
            max_new_tokens: plan.max_new_tokens,
            seed: self.seed,
        };
        // A fixed grid of batches (a power of two that divides the evaluation's chunks, so a
        // batch never straddles two of them): a rerun resamples a batch it has not finished
        // whole, so that each of its problems is sampled in the company an uninterrupted run
        // gave it, and the results agree to the last bit.
        let per_batch = batch_problems(self.batch_size, plan.n);
        let (mut new_tokens, mut sampling_secs, mut done) = (0usize, 0.0f64, cached + skipped);
        for start in (0..b.examples.len()).step_by(per_batch) {
            let end = b.examples.len().min(start + per_batch);
            let complete = |p: &Vec<Option<EvalSample>>| p.iter().all(Option::is_some);
            if (start..end).all(|i| skip(i) || complete(&cache[i])) {
                continue;
            }
            // The batch's problems in runs between skipped ones: a problem draws from its own
            // streams whatever run it is sampled in.
            let t = Instant::now();
            let mut fresh = Vec::new();
            let mut i = start;
            while i < end {
                if skip(i) {
                    i += 1;
                    continue;
                }
                let run_end = (i..end).find(|&k| skip(k)).unwrap_or(end);
                let run = sample_problems(
                    &mut engine,
                    self.model,
                    b.task.as_ref(),
                    &b.examples[i..run_end],
                    i,
                    &sampling,
                )?;
                fresh.extend((i..run_end).zip(run));
                i = run_end;
            }
            sampling_secs += t.elapsed().as_secs_f64();
            let mut new_lines = Vec::new();
            for (problem, responses) in fresh {
                if complete(&cache[problem]) {
                    continue;
                }
                done += 1;
                for (g, s) in responses.into_iter().enumerate() {
                    if cache[problem][g].is_some() {
                        continue;
                    }
                    new_tokens += s.tokens;
                    new_lines.push(SampleLine {
                        bench: b.name.clone(),
                        problem,
                        sample: g,
                        model: self.model_name.to_string(),
                        temperature: plan.temperature,
                        max_new_tokens: plan.max_new_tokens,
                        seed: self.seed,
                        problems: plan.problems,
                        problems_total: plan.problems_total,
                        scored: s.clone(),
                    });
                    cache[problem][g] = Some(s);
                }
            }
            if let Some(f) = samples.as_deref_mut() {
                f.append(&new_lines)?;
            }
            let rate = new_tokens as f64 / sampling_secs.max(1e-9);
            pb.set_message(format!("{rate:.1} tok/s"));
            pb.set_position(done as u64);
            if pb.is_hidden() && !self.quiet {
                let elapsed = t0.elapsed().as_secs_f64();
                let sampled = (done - cached).max(1) as f64;
                let left = elapsed / sampled * (plan.problems - done) as f64;
                eprintln!(
                    "eval: {}: {done}/{} problems, {rate:.1} tok/s, {} elapsed, ~{} left",
                    b.name,
                    plan.problems,
                    clock(elapsed),
                    clock(left)
                );
            }
        }
        pb.finish_and_clear();
        let problems: Vec<Vec<EvalSample>> = cache
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| !skip(i))
            .map(|(_, p)| p.into_iter().flatten().collect())
            .collect();
        let measures = measure_problems(&problems, plan.k)?;
        Ok(EvalRow {
            bench: b.name.clone(),
            measures,
            problems_total: plan.problems_total,
            subset,
            temperature: plan.temperature,
            max_new_tokens: plan.max_new_tokens,
            problems_cached: cached,
            seconds: t0.elapsed().as_secs_f64(),
            tokens_per_s: if new_tokens > 0 {
                new_tokens as f64 / sampling_secs.max(1e-9)
            } else {
                0.0
            },
            tools: !b.config.tools.is_empty(),
        })
    }

    /// The progress bar of one benchmark on stderr: problems done of all, tokens/s, elapsed
    /// and remaining time; hidden with `--quiet` or when stderr is not a terminal.
    fn bar(&self, name: &str, len: u64) -> ProgressBar {
        let target = if self.quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let pb = ProgressBar::with_draw_target(Some(len), target);
        pb.set_style(
            ProgressStyle::with_template(
                "{prefix} [{bar:30}] {pos}/{len} problems, {msg}, {elapsed_precise} elapsed, \
                 {eta_precise} left",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        pb.set_prefix(name.to_string());
        pb.set_message("- tok/s");
        pb
    }
}

/// Problems per batch: `batch_size` responses in whole problems of `n` responses, rounded down
/// to a power of two no larger than the evaluation's chunk (at least one problem).
fn batch_problems(batch_size: usize, n: usize) -> usize {
    let fit = (batch_size / n.max(1)).clamp(1, EVAL_CHUNK);
    1 << fit.ilog2()
}

/// A log line on stderr: above the bar when one is drawn, plainly otherwise; none with
/// `--quiet`.
fn say(pb: &ProgressBar, quiet: bool, line: String) {
    if quiet {
        return;
    }
    if pb.is_hidden() {
        eprintln!("{line}");
    } else {
        pb.println(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_whole_problems_that_tile_the_chunks() {
        assert_eq!(batch_problems(256, 1), 64);
        assert_eq!(batch_problems(256, 32), 8);
        assert_eq!(batch_problems(256, 3), 64);
        assert_eq!(batch_problems(100, 4), 16);
        assert_eq!(batch_problems(4, 2), 2);
        assert_eq!(batch_problems(1, 32), 1);
        for size in 1..300 {
            for n in 1..40 {
                let p = batch_problems(size, n);
                assert_eq!(EVAL_CHUNK % p, 0, "{size} {n}");
            }
        }
    }
}
