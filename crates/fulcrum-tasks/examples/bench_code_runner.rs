//! Throughput of the sandboxed code runner on HumanEval's 164 canonical solutions.
//!
//! `cargo run --release -p fulcrum-tasks --example bench_code_runner -- [WORKERS] [ROUNDS]`
//! prints one JSON line: mode, workers, programs, seconds, programs per second, and how many
//! passed (all should). `bench/code_runner.sh` runs it next to the plain-subprocess reference.

use std::time::Instant;

use fulcrum_tasks::code::{CodeRunner, TestSpec};
use fulcrum_tasks::data::registry::Benchmark;
use fulcrum_tasks::data::{load_strict, Format};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let workers: usize = args.next().map_or(Ok(2), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(1), |a| a.parse())?;
    let bench = Benchmark::find("humaneval").ok_or("no humaneval in the registry")?;
    let path = bench.path(None);
    let examples = load_strict(&path, Format::HumanEval)?;
    let jobs: Vec<(String, TestSpec)> = (0..rounds)
        .flat_map(|_| examples.iter())
        .map(|e| {
            let code = format!(
                "{}{}",
                e.prompt,
                e.demonstration.clone().unwrap_or_default()
            );
            (
                code,
                TestSpec::from_answer(&e.answer, e.entry_point.as_deref()),
            )
        })
        .collect();
    let detected = CodeRunner::detect();
    let runner = CodeRunner::new(detected.config().clone(), workers);
    let start = Instant::now();
    let outcomes = runner.run_many(&jobs);
    let secs = start.elapsed().as_secs_f64();
    let passed = outcomes.iter().filter(|o| o.passed).count();
    println!(
        "{{\"runner\": \"fulcrum-{}\", \"workers\": {workers}, \"programs\": {}, \"passed\": {passed}, \"seconds\": {secs:.3}, \"programs_per_second\": {:.2}}}",
        runner.config().mode.name(),
        jobs.len(),
        jobs.len() as f64 / secs
    );
    Ok(())
}
