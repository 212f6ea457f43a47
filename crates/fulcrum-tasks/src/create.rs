//! Building a task by name: [`TaskConfig`] (the `[task]` table, or the compact
//! `NAME[:key=value,...]` spelling of the command line) and [`create_task`], the one factory
//! that knows every implementation (the synthetic families, `jsonl`, the benchmarks).

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::data::registry::{Benchmark, BenchmarkTask, BENCHMARK_NAMES};
use crate::error::{Result, TaskError};
use crate::jsonl_task::JsonlTask;
use crate::sandbox::{sandbox_in_use, set_sandbox_choice, SandboxChoice, SandboxMode};
use crate::synthetic::{Family, Knobs, Shape, SyntheticTask, VerboseLevels, DEFAULT_LOOP_LENGTH};
use crate::task::{Split, Task};
use crate::tools::{ToolFormat, ToolName};
use crate::verify::{RewardMode, Verifier};

/// The names [`create_task`] knows, besides the benchmark names of [`crate::data::registry`].
pub const TASK_NAMES: [&str; 5] = ["arithmetic", "countdown", "lists", "steps", "jsonl"];

/// How to build a task: its name plus the knobs that apply to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskConfig {
    /// A synthetic family (`arithmetic`, `countdown`, `lists`, `steps`), `jsonl`, or a
    /// benchmark name (`gsm8k`, `math500`, ...).
    pub name: String,
    /// Synthetic tasks: 1 (easiest) to 10.
    pub difficulty: u32,
    /// Synthetic tasks: scales how much working the demonstrations write (0 = answer only,
    /// 1 = normal, 2 = verbose).
    pub length: f64,
    /// Synthetic tasks: probability that a demonstration carries an injected mistake.
    pub mistake_rate: f64,
    /// Synthetic tasks: fraction of demonstrations that restate every working line (`check`
    /// lines), right or wrong alike: within-group length variation without a ± gap.
    pub verbose_rate: f64,
    /// Synthetic tasks: length of a mistaken demonstration's working relative to a right one's
    /// (1 = same, 0.5 = half its lines, 2 = repeated): sets the sign and size of the ± gap.
    pub mistake_length: f64,
    /// Synthetic tasks: a distribution over the number of `check` lines restating each working
    /// line, `k:p/k:p/...` (`0:0.6/1:0.2/4:0.2`), drawn per demonstration whatever its outcome:
    /// more within-side length variation than `verbose_rate` (exclusive with it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verbose_levels: Option<VerboseLevels>,
    /// Synthetic tasks: fraction of mistaken demonstrations that loop instead of answering
    /// (`again` lines up to `loop_length` characters, no `Answer:`), so that the model's
    /// mistakes are truncated and score as wrong.
    #[serde(skip_serializing_if = "is_zero")]
    pub loop_rate: f64,
    /// Synthetic tasks: the length of a looping demonstration in characters.
    #[serde(skip_serializing_if = "is_default_loop_length")]
    pub loop_length: usize,
    /// `jsonl` (and benchmarks, to override the registry's file): the file to read.
    pub path: Option<PathBuf>,
    /// `{0,1}` (`zero-one`) or `{-1,+1}` (`plus-minus`).
    pub reward: RewardMode,
    /// `jsonl`: a prompt template applied to every record, `{problem}` standing for the
    /// record's prompt (e.g. an instruction to put the answer in `\boxed{}`); `None`: as is.
    pub template: Option<String>,
    /// Tools the model may call in the middle of its response (`["python"]`, crate::tools);
    /// empty: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolName>,
    /// How the model calls them: `chat` (`<tool_call>` JSON, answered by a tool message) or
    /// `code` (a fenced python block answered by a fenced output block).
    #[serde(skip_serializing_if = "is_default_tool_format")]
    pub tool_format: ToolFormat,
    /// Wall-clock limit of one tool call, in seconds.
    #[serde(skip_serializing_if = "is_default_tool_timeout")]
    pub tool_timeout_s: f64,
    /// Most characters of a tool's output the model sees (the rest is cut, saying so).
    #[serde(skip_serializing_if = "is_default_tool_max_output")]
    pub tool_max_output: usize,
}

/// `task.tool_timeout_s` by default: what a tool-integrated math call needs, with room.
pub const DEFAULT_TOOL_TIMEOUT_S: f64 = 10.0;
/// `task.tool_max_output` by default, in characters.
pub const DEFAULT_TOOL_MAX_OUTPUT: usize = 2000;

fn is_default_tool_format(f: &ToolFormat) -> bool {
    *f == ToolFormat::Chat
}

fn is_default_tool_timeout(x: &f64) -> bool {
    *x == DEFAULT_TOOL_TIMEOUT_S
}

fn is_default_tool_max_output(n: &usize) -> bool {
    *n == DEFAULT_TOOL_MAX_OUTPUT
}

/// The defaults are the demo's (`fulcrum train` with no config): 3-digit additions whose
/// demonstrations carry a mistake one time in five, so that SFT leaves room for RL to improve.
/// They are the one default of each key, wherever a task is described: the trainer's config,
/// a `[task]` table given in part (`--set task.length=1.0`), `[eval.task]`, and the compact
/// spelling of `fulcrum eval --bench` and `fulcrum compare --tasks`.
impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            name: "arithmetic".into(),
            difficulty: 2,
            length: 1.0,
            mistake_rate: 0.2,
            verbose_rate: 0.0,
            mistake_length: 1.0,
            verbose_levels: None,
            loop_rate: 0.0,
            loop_length: DEFAULT_LOOP_LENGTH,
            path: None,
            reward: RewardMode::ZeroOne,
            template: None,
            tools: Vec::new(),
            tool_format: ToolFormat::Chat,
            tool_timeout_s: DEFAULT_TOOL_TIMEOUT_S,
            tool_max_output: DEFAULT_TOOL_MAX_OUTPUT,
        }
    }
}

impl FromStr for TaskConfig {
    type Err = TaskError;

    /// The compact spelling used on the command line: `NAME[:key=value,...]`, for example
    /// `countdown:difficulty=4,mistake_rate=0.1` or `jsonl:path=my.jsonl`. A bare path to a
    /// data file (`my.jsonl`, `train.parquet`, see [`is_data_file`]) means the `jsonl` task on
    /// that file, with the same optional settings after a `:`.
    fn from_str(s: &str) -> Result<Self> {
        let spec = expand_data_file(s);
        let (name, rest) = spec.split_once(':').unwrap_or((&spec, ""));
        let mut cfg = TaskConfig {
            name: name.trim().to_string(),
            ..TaskConfig::default()
        };
        for kv in rest.split(',').filter(|kv| !kv.trim().is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| TaskError::Setting {
                key: kv.to_string(),
                problem: "expected key=value".into(),
            })?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |p: &str| TaskError::Setting {
                key: k.to_string(),
                problem: format!("{p}: {v:?}"),
            };
            match k {
                "difficulty" => cfg.difficulty = whole(k, v, DIFFICULTY)?,
                "length" => cfg.length = v.parse().map_err(|_| bad("not a number"))?,
                "mistake_rate" => cfg.mistake_rate = v.parse().map_err(|_| bad("not a number"))?,
                "verbose_rate" => cfg.verbose_rate = v.parse().map_err(|_| bad("not a number"))?,
                "mistake_length" => {
                    cfg.mistake_length = v.parse().map_err(|_| bad("not a number"))?
                }
                "verbose_levels" => {
                    cfg.verbose_levels = Some(v.parse().map_err(|e: String| bad(&e))?)
                }
                "loop_rate" => cfg.loop_rate = v.parse().map_err(|_| bad("not a number"))?,
                "loop_length" => cfg.loop_length = whole(k, v, LOOP_LENGTH)?,
                "path" => cfg.path = Some(PathBuf::from(v)),
                "reward" => cfg.reward = v.parse()?,
                // One tool in the compact spelling (commas separate settings).
                "tools" => cfg.tools = vec![v.parse().map_err(|e| bad(&format!("{e}")))?],
                "tool_format" => cfg.tool_format = v.parse().map_err(|e| bad(&format!("{e}")))?,
                "tool_timeout_s" => {
                    cfg.tool_timeout_s = v.parse().map_err(|_| bad("not a number"))?
                }
                "tool_max_output" => cfg.tool_max_output = whole(k, v, TOOL_MAX_OUTPUT)?,
                _ => {
                    return Err(TaskError::Setting {
                        key: k.to_string(),
                        problem: format!("unknown key (valid: {})", SETTING_KEYS.join(", ")),
                    })
                }
            }
        }
        Ok(cfg)
    }
}

/// The range of `difficulty`.
const DIFFICULTY: std::ops::RangeInclusive<u64> = 1..=10;

/// The range of `loop_length` (characters of a looping demonstration).
const LOOP_LENGTH: std::ops::RangeInclusive<u64> = 16..=4096;

/// A whole-number setting of the compact spelling: something not a number is "not a whole
/// number"; a number its type cannot hold (negative, fractional, huge) says the key's range,
/// with the same words as [`TaskConfig::validate`], which checks the range of the others.
fn whole<T: TryFrom<u64>>(key: &str, v: &str, range: std::ops::RangeInclusive<u64>) -> Result<T> {
    let outside = || TaskError::Setting {
        key: key.to_string(),
        problem: format!("{v} is outside {}..={}", range.start(), range.end()),
    };
    match v.parse::<u64>() {
        Ok(n) => T::try_from(n).map_err(|_| outside()),
        // A number all the same (negative, fractional, beyond 64 bits): out of range, not
        // "not an integer".
        Err(_) if v.parse::<f64>().is_ok_and(|x| !x.is_nan()) => Err(outside()),
        Err(_) => Err(TaskError::Setting {
            key: key.to_string(),
            problem: format!("not a whole number: {v:?}"),
        }),
    }
}

/// The keys of the compact spelling, in the order the docs give them.
pub const SETTING_KEYS: [&str; 14] = [
    "difficulty",
    "length",
    "mistake_rate",
    "verbose_rate",
    "verbose_levels",
    "mistake_length",
    "loop_rate",
    "loop_length",
    "path",
    "reward",
    "tools",
    "tool_format",
    "tool_timeout_s",
    "tool_max_output",
];

/// The range of `tool_max_output`: at least a line, at most a long file.
const TOOL_MAX_OUTPUT: std::ops::RangeInclusive<u64> = 1..=1_000_000;

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_default_loop_length(n: &usize) -> bool {
    *n == DEFAULT_LOOP_LENGTH
}

/// Whether a task name is a path to a data file that the `jsonl` task reads
/// (`.jsonl`, `.jsonl.gz`, `.json`, `.json.gz`, `.parquet`).
pub fn is_data_file(name: &str) -> bool {
    let lower = name.trim().to_ascii_lowercase();
    [".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet"]
        .iter()
        .any(|ext| lower.ends_with(ext) && lower.len() > ext.len())
}

/// Rewrites a task spec whose name is a bare data-file path (`my.jsonl[:settings]`) into the
/// `jsonl:path=...` spelling; any other spec is returned as it is.
pub fn expand_data_file(spec: &str) -> String {
    let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
    if !is_data_file(name) {
        return spec.to_string();
    }
    let mut out = format!("jsonl:path={}", name.trim());
    if !rest.trim().is_empty() {
        out.push(',');
        out.push_str(rest);
    }
    out
}

impl TaskConfig {
    /// Checks the ranges of the knobs.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, problem: String| {
            Err(TaskError::Setting {
                key: key.into(),
                problem,
            })
        };
        if !DIFFICULTY.contains(&u64::from(self.difficulty)) {
            return bad(
                "difficulty",
                format!(
                    "{} is outside {}..={}",
                    self.difficulty,
                    DIFFICULTY.start(),
                    DIFFICULTY.end()
                ),
            );
        }
        if !(0.0..=4.0).contains(&self.length) {
            return bad("length", format!("{} is outside 0..=4", self.length));
        }
        // A tool call may take up to ten minutes: beyond that a rollout would stall the step.
        if !(self.tool_timeout_s > 0.0 && self.tool_timeout_s <= 600.0) {
            return bad(
                "tool_timeout_s",
                format!("{} is outside (0, 600] seconds", self.tool_timeout_s),
            );
        }
        if !TOOL_MAX_OUTPUT.contains(&(self.tool_max_output as u64)) {
            return bad(
                "tool_max_output",
                format!(
                    "{} is outside {}..={} characters",
                    self.tool_max_output,
                    TOOL_MAX_OUTPUT.start(),
                    TOOL_MAX_OUTPUT.end()
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.mistake_rate) {
            return bad(
                "mistake_rate",
                format!("{} is outside 0..=1", self.mistake_rate),
            );
        }
        if !(0.0..=1.0).contains(&self.verbose_rate) {
            return bad(
                "verbose_rate",
                format!("{} is outside 0..=1", self.verbose_rate),
            );
        }
        if !(0.0..=4.0).contains(&self.mistake_length) {
            return bad(
                "mistake_length",
                format!("{} is outside 0..=4", self.mistake_length),
            );
        }
        if !(0.0..=1.0).contains(&self.loop_rate) {
            return bad("loop_rate", format!("{} is outside 0..=1", self.loop_rate));
        }
        if !LOOP_LENGTH.contains(&(self.loop_length as u64)) {
            return bad(
                "loop_length",
                format!(
                    "{} is outside {}..={}",
                    self.loop_length,
                    LOOP_LENGTH.start(),
                    LOOP_LENGTH.end()
                ),
            );
        }
        if self.verbose_levels.is_some() && self.verbose_rate > 0.0 {
            return bad(
                "verbose_levels",
                "give verbose_levels or verbose_rate, not both (verbose_rate = r is 0:1-r/1:r)"
                    .into(),
            );
        }
        if let Some(t) = &self.template {
            if !t.contains("{problem}") {
                return bad("template", format!("{t:?} has no {{problem}} placeholder"));
            }
        }
        Ok(())
    }
}

/// Creates a task by name (see [`TASK_NAMES`] and the benchmark registry). An unknown name is
/// an error listing every valid one and suggesting the nearest.
pub fn create_task(cfg: &TaskConfig) -> Result<Box<dyn Task>> {
    cfg.validate()?;
    if let Ok(family) = cfg.name.parse::<Family>() {
        let knobs = Knobs {
            difficulty: cfg.difficulty,
            length: cfg.length,
            mistake_rate: cfg.mistake_rate,
        };
        let shape = Shape {
            verbose_rate: cfg.verbose_rate,
            verbose_levels: cfg.verbose_levels.clone(),
            mistake_length: cfg.mistake_length,
            loop_rate: cfg.loop_rate,
            loop_length: cfg.loop_length,
        };
        return Ok(Box::new(SyntheticTask::new(
            family, knobs, shape, cfg.reward,
        )));
    }
    if cfg.name == "jsonl" {
        let path = cfg.path.as_deref().ok_or_else(|| TaskError::Setting {
            key: "path".into(),
            problem: "the jsonl task needs a path".into(),
        })?;
        return Ok(Box::new(jsonl_task(path, cfg)?));
    }
    if is_data_file(&cfg.name) && cfg.path.is_none() {
        return Ok(Box::new(jsonl_task(Path::new(cfg.name.trim()), cfg)?));
    }
    if let Some(bench) = Benchmark::find(&cfg.name) {
        return Ok(Box::new(BenchmarkTask::load(
            bench,
            cfg.path.as_deref(),
            cfg.reward,
        )?));
    }
    let mut valid: Vec<&str> = TASK_NAMES.to_vec();
    valid.extend(BENCHMARK_NAMES);
    Err(fulcrum_core::names::unknown_name("task", &cfg.name, &valid).into())
}

/// The `jsonl` task on `path`, with the config's reward mode and template.
fn jsonl_task(path: &Path, cfg: &TaskConfig) -> Result<JsonlTask> {
    let task = JsonlTask::load(path, cfg.reward)?;
    Ok(match &cfg.template {
        Some(t) => task.with_template(t),
        None => task,
    })
}

/// The sandbox of a run over `tasks` (the factory knows which tasks score code; the sandbox
/// knows nothing of tasks): makes `choice` this process's sandbox and, when a task scores code
/// (judged by a sample of its examples of either split), resolves it now, so that the mode is
/// printed at the start and a refusal stops the run before its first step. Returns the mode in
/// use (to record in the run's config), or `None` when no task scores code.
pub fn sandbox_for_tasks(
    choice: SandboxChoice,
    tasks: &[&dyn Task],
    seed: u64,
) -> Result<Option<SandboxMode>> {
    set_sandbox_choice(choice)?;
    let mut needs_code = false;
    for task in tasks {
        for split in [Split::Train, Split::Test] {
            let examples = task.examples(split, seed, 32)?;
            needs_code |= examples.iter().any(|e| e.verifier == Verifier::Code);
        }
    }
    if !needs_code {
        return Ok(None);
    }
    Ok(Some(sandbox_in_use()?.mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_spelling_sets_knobs() -> Result<()> {
        let cfg: TaskConfig =
            "countdown:difficulty=4,mistake_rate=0.25,reward=plus-minus".parse()?;
        assert_eq!(cfg.name, "countdown");
        assert_eq!(cfg.difficulty, 4);
        assert_eq!(cfg.mistake_rate, 0.25);
        assert_eq!(cfg.reward, RewardMode::PlusMinus);
        Ok(())
    }

    #[test]
    fn unknown_key_is_an_error_listing_every_key() {
        let e = "lists:colour=red"
            .parse::<TaskConfig>()
            .unwrap_err()
            .to_string();
        for k in SETTING_KEYS {
            assert!(e.contains(k), "{e}");
        }
    }

    #[test]
    fn length_coupling_knobs_spell_validate_and_round_trip() -> Result<()> {
        let cfg: TaskConfig =
            "arithmetic:difficulty=2,verbose_levels=0:0.6/1:0.2/4:0.2,loop_rate=0.5,loop_length=300"
                .parse()?;
        assert_eq!(cfg.loop_rate, 0.5);
        assert_eq!(cfg.loop_length, 300);
        let levels = cfg.verbose_levels.as_ref().map(|l| l.levels().to_vec());
        assert_eq!(levels, Some(vec![(0, 0.6), (1, 0.2), (4, 0.2)]));
        create_task(&cfg)?;
        // Through JSON (the run's config.toml goes through serde the same way).
        let back: TaskConfig = serde_json::from_value(serde_json::to_value(&cfg).unwrap()).unwrap();
        assert_eq!(back, cfg);
        // Defaults are not written, so configs without the knobs serialize as before.
        let plain = serde_json::to_value(TaskConfig::default()).unwrap();
        for k in ["verbose_levels", "loop_rate", "loop_length"] {
            assert!(plain.get(k).is_none(), "{plain}");
        }
        for (spec, key) in [
            ("arithmetic:loop_rate=1.5", "loop_rate"),
            ("arithmetic:loop_length=4", "loop_length"),
            (
                "arithmetic:verbose_rate=0.5,verbose_levels=0:0.5/1:0.5",
                "verbose_levels",
            ),
        ] {
            let cfg: TaskConfig = spec.parse()?;
            let e = create_task(&cfg)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(key), "{spec}: {e}");
        }
        let e = "arithmetic:verbose_levels=0:0.6"
            .parse::<TaskConfig>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("verbose_levels") && e.contains("sum to"), "{e}");
        let e = serde_json::from_str::<TaskConfig>(r#"{"verbose_levels": "2:1/2:0"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");
        Ok(())
    }

    #[test]
    fn unknown_task_name_lists_valid_names() {
        let cfg = TaskConfig {
            name: "arithmatic".into(),
            ..TaskConfig::default()
        };
        let err = create_task(&cfg)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("arithmetic") && err.contains("gsm8k"), "{err}");
        assert!(err.contains("did you mean arithmetic?"), "{err}");
    }

    #[test]
    fn a_bare_data_file_path_is_the_jsonl_task_on_it() -> Result<()> {
        let cfg: TaskConfig = "data/my tasks.jsonl".parse()?;
        assert_eq!(cfg.name, "jsonl");
        assert_eq!(cfg.path.as_deref(), Some(Path::new("data/my tasks.jsonl")));
        let cfg: TaskConfig = "train.parquet:reward=plus-minus".parse()?;
        assert_eq!(
            (cfg.name.as_str(), cfg.reward),
            ("jsonl", RewardMode::PlusMinus)
        );
        assert_eq!(cfg.path.as_deref(), Some(Path::new("train.parquet")));
        assert_eq!(expand_data_file("x.jsonl.gz"), "jsonl:path=x.jsonl.gz");
        assert_eq!(expand_data_file("gsm8k"), "gsm8k");
        assert!(!is_data_file(".jsonl") && !is_data_file("jsonl"));
        Ok(())
    }

    #[test]
    fn a_number_out_of_range_says_the_range_not_that_it_is_no_number() {
        for (spec, key, says) in [
            (
                "arithmetic:difficulty=-1",
                "difficulty",
                "-1 is outside 1..=10",
            ),
            (
                "arithmetic:difficulty=0",
                "difficulty",
                "0 is outside 1..=10",
            ),
            (
                "arithmetic:difficulty=2.5",
                "difficulty",
                "2.5 is outside 1..=10",
            ),
            (
                "arithmetic:difficulty=99999999999999999999",
                "difficulty",
                "is outside 1..=10",
            ),
            (
                "arithmetic:loop_length=-5",
                "loop_length",
                "-5 is outside 16..=4096",
            ),
            (
                "arithmetic:difficulty=hard",
                "difficulty",
                "not a whole number: \"hard\"",
            ),
        ] {
            let e = spec
                .parse::<TaskConfig>()
                .and_then(|c| c.validate())
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains(says), "{spec}: {e}");
        }
        let cfg: TaskConfig = "arithmetic:difficulty=10,loop_length=16".parse().unwrap();
        assert_eq!((cfg.difficulty, cfg.loop_length), (10, 16));
    }

    #[test]
    fn out_of_range_difficulty_is_rejected() {
        let cfg = TaskConfig {
            difficulty: 11,
            ..TaskConfig::default()
        };
        assert!(create_task(&cfg).is_err());
    }
}
