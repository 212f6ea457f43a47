//! The results code `compare`, `report` and `eval` share: the arms of a comparison ([`arm`]),
//! the statistics ([`stats`]), what a
//! comparison concludes from its runs and its table ([`summary`]: per-run measures, means with
//! confidence intervals over seeds, paired contrasts between rules, relations to the length
//! diagnostics), and the evaluation table. Runs are read with `fulcrum_train::RunData`.

pub mod arm;
pub mod stats;
pub mod summary;

use fulcrum_train::{EvalResult, ProblemMeasures};
use serde::Serialize;

/// Above this fraction of responses cut at the length limit, `fulcrum eval` warns: the cut
/// answers score as wrong, so the number understates the model.
pub const TRUNCATION_WARNING: f64 = 0.1;

/// One benchmark's evaluation as `fulcrum eval` reports it.
#[derive(Debug, Clone)]
pub struct EvalRow {
    pub bench: String,
    pub measures: ProblemMeasures,
    /// The benchmark's full size; `None` for a generated task.
    pub problems_total: Option<usize>,
    /// How the problems were chosen when they are not the whole set.
    pub subset: Option<String>,
    pub temperature: f64,
    pub max_new_tokens: usize,
    /// Problems whose responses came from the `--samples` file.
    pub problems_cached: usize,
    /// Wall time of this run, cached problems costing nothing.
    pub seconds: f64,
    /// Tokens per second of the responses sampled in this run (0 when all were cached).
    pub tokens_per_s: f64,
    /// The model had tools (`--tools`).
    pub tools: bool,
}

/// The JSON `result` of one benchmark: the keys of earlier versions (`prompts`, `k`,
/// `accuracy`, `pass_at_k`, ...) and the labelled ones.
#[derive(Debug, Serialize)]
pub struct EvalResultJson {
    #[serde(flatten)]
    pub legacy: EvalResult,
    pub problems: usize,
    pub problems_total: Option<usize>,
    pub subset: Option<String>,
    pub samples_per_problem: usize,
    #[serde(rename = "pass@1")]
    pub pass_at_1: f64,
    #[serde(rename = "pass@k")]
    pub pass_at_k: f64,
    #[serde(rename = "avg@k")]
    pub avg_at_k: f64,
    pub temperature: f64,
    pub max_new_tokens: usize,
    pub problems_cached: usize,
    /// Tool calls per response, when the benchmark gave the model tools (`--tools`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls_mean: Option<f64>,
}

impl EvalRow {
    /// The JSON `result`.
    pub fn json(&self) -> EvalResultJson {
        let m = &self.measures;
        EvalResultJson {
            legacy: EvalResult {
                prompts: m.problems,
                k: m.k,
                accuracy: m.avg_at_k,
                pass_at_k: m.pass_at_k,
                reward: m.reward,
                mean_len: m.mean_len,
                tokens_per_s: self.tokens_per_s,
                truncated: m.truncated,
                greedy_prompts: None,
                greedy_accuracy: None,
                greedy_truncated: None,
            },
            problems: m.problems,
            problems_total: self.problems_total,
            subset: self.subset.clone(),
            samples_per_problem: m.n,
            pass_at_1: m.pass_at_1,
            pass_at_k: m.pass_at_k,
            avg_at_k: m.avg_at_k,
            temperature: self.temperature,
            max_new_tokens: self.max_new_tokens,
            problems_cached: self.problems_cached,
            tool_calls_mean: self.tools.then_some(m.tool_calls_mean),
        }
    }

    /// "N of TOTAL", or "N (generated)" for a task without a fixed size.
    pub fn problems_label(&self) -> String {
        match self.problems_total {
            Some(t) => format!("{} of {t}", self.measures.problems),
            None => format!("{} (gen.)", self.measures.problems),
        }
    }

    /// The warning for a truncated fraction above [`TRUNCATION_WARNING`], if there is one.
    pub fn truncation_warning(&self) -> Option<String> {
        (self.measures.truncated > TRUNCATION_WARNING).then(|| {
            format!(
                "{}: {:.0}% of responses reached the {}-token limit without stopping and score \
                 as wrong; the numbers understate the model (raise --max-new-tokens)",
                self.bench,
                100.0 * self.measures.truncated,
                self.max_new_tokens
            )
        })
    }
}

/// The table of `fulcrum eval`: one row per benchmark, then a note for every subset and every
/// truncation warning.
pub fn eval_table(rows: &[EvalRow]) -> String {
    let mut out = format!(
        "{:<16} {:>12} {:>4} {:>4} {:>5} {:>6} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8}\n",
        "bench",
        "problems",
        "k",
        "n",
        "temp",
        "limit",
        "avg@k",
        "pass@k",
        "mean len",
        "truncated",
        "seconds",
        "tok/s"
    );
    for r in rows {
        let m = &r.measures;
        out.push_str(&format!(
            "{:<16} {:>12} {:>4} {:>4} {:>5} {:>6} {:>8.4} {:>8.4} {:>9.1} {:>9.3} {:>9.1} {:>8.1}\n",
            r.bench,
            r.problems_label(),
            m.k,
            m.n,
            r.temperature,
            r.max_new_tokens,
            m.avg_at_k,
            m.pass_at_k,
            m.mean_len,
            m.truncated,
            r.seconds,
            r.tokens_per_s
        ));
    }
    let mut notes = Vec::new();
    for r in rows {
        if let Some(s) = &r.subset {
            notes.push(format!("{}: {s}", r.bench));
        }
        if r.problems_cached > 0 {
            notes.push(format!(
                "{}: {} of its problems were read from the --samples file",
                r.bench, r.problems_cached
            ));
        }
        if let Some(w) = r.truncation_warning() {
            notes.push(format!("warning: {w}"));
        }
    }
    if !notes.is_empty() {
        out.push('\n');
        for n in notes {
            out.push_str(&n);
            out.push('\n');
        }
    }
    out
}
