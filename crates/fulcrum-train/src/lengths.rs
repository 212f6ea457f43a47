//! Prompt lengths, checked when a run is set up, before any model work: every prompt a run can
//! draw, rendered in the model's chat template and encoded by its tokenizer (read without the
//! weights), must fit `rollout.max_prompt_len`, which the sampler enforces. Without this a
//! data file with one long prompt stopped the run at that prompt's first draw, after the SFT
//! warm-up and any steps before it.
//!
//! Data files and benchmarks are finite: all their prompts are checked. Generated tasks have no
//! end, but their prompts are bounded by construction: a sample of each split is checked, which
//! catches a limit below what the task writes. A prompt too long by its bytes alone is refused
//! without encoding it ([`fulcrum_model::encode_within`]).

use fulcrum_model::{ModelError, ModelSpec, PromptEncoder, PromptTokens};
use fulcrum_tasks::{is_data_file, Split, Task, TaskConfig};

use crate::config::Config;
use crate::error::TrainError;

/// Prompts of each split of a generated task checked.
const GENERATED_SAMPLE: usize = 256;

/// Refuses, naming the file and record (or the task and example), any prompt of `task` (the
/// training task) or `eval_task` (the held-out one, when the config names one) longer than
/// `rollout.max_prompt_len` tokens as `model` sees it. A model without a tokenizer is not
/// checked here (its load says so).
pub(crate) fn check_prompt_lengths(
    cfg: &Config,
    model: &ModelSpec,
    task: &dyn Task,
    eval_task: Option<&dyn Task>,
) -> Result<(), TrainError> {
    let encoder = match model.prompt_encoder() {
        Ok(e) => e,
        Err(ModelError::Tokenizer(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let limit = cfg.rollout.max_prompt_len;
    let train = Source::of(&cfg.task, "task");
    check_task(&encoder, task, Split::Train, &train, limit)?;
    match (eval_task, &cfg.eval.task) {
        (Some(eval), Some(eval_cfg)) => check_task(
            &encoder,
            eval,
            Split::Test,
            &Source::of(eval_cfg, "eval.task"),
            limit,
        ),
        // The training task's test split: the same records for a data file, held-out ones
        // of a generated task.
        _ => check_task(&encoder, task, Split::Test, &train, limit),
    }
}

/// Where a task's prompts come from, for messages: its data file, else the task by name.
struct Source {
    shown: String,
}

impl Source {
    fn of(t: &TaskConfig, section: &str) -> Source {
        let shown = match &t.path {
            Some(p) => p.display().to_string(),
            None if is_data_file(&t.name) => t.name.trim().to_string(),
            None => format!("{section} {}", t.name),
        };
        Source { shown }
    }
}

fn check_task(
    encoder: &PromptEncoder,
    task: &dyn Task,
    split: Split,
    source: &Source,
    limit: usize,
) -> Result<(), TrainError> {
    let count = task.problems_total().unwrap_or(GENERATED_SAMPLE);
    let examples = task.examples(split, 0, count)?;
    let mut first: Option<(String, PromptTokens)> = None;
    let mut too_long = 0usize;
    for ex in &examples {
        let tokens =
            encoder
                .encode_within(&ex.prompt, limit)
                .map_err(|e| TrainError::ConfigKey {
                    file: source.shown.clone(),
                    key: "model.path".into(),
                    message: format!(
                        "prompt {}: the model's tokenizer cannot encode it: {e}",
                        ex.id
                    ),
                })?;
        if let PromptTokens::TooLong { .. } = tokens {
            too_long += 1;
            first.get_or_insert((ex.id.clone(), tokens));
        }
    }
    let Some((id, tokens)) = first else {
        return Ok(());
    };
    let others = match too_long - 1 {
        0 => String::new(),
        n => format!(" ({n} more of its {} prompts are too)", examples.len()),
    };
    let seen = if encoder.chat.is_some() {
        "as the model sees it (in its chat template)"
    } else {
        "as the model's tokenizer encodes it"
    };
    Err(TrainError::ConfigKey {
        file: source.shown.clone(),
        key: "rollout.max_prompt_len".into(),
        message: format!(
            "prompt {id} is {} {seen}, more than rollout.max_prompt_len = {limit}{others}: \
             raise rollout.max_prompt_len, or leave such prompts out",
            tokens.describe()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fulcrum_tasks::create_task;

    fn jsonl(dir: &std::path::Path, prompts: &[String]) -> std::path::PathBuf {
        let path = dir.join("data.jsonl");
        let lines: Vec<String> = prompts
            .iter()
            .map(|p| serde_json::json!({"prompt": p, "answer": "1"}).to_string())
            .collect();
        std::fs::write(&path, lines.join("\n")).unwrap();
        path
    }

    fn config(path: &std::path::Path, max_prompt_len: usize) -> Config {
        let mut cfg = Config {
            task: TaskConfig {
                name: "jsonl".into(),
                path: Some(path.to_path_buf()),
                ..TaskConfig::default()
            },
            ..Config::default()
        };
        cfg.rollout.max_prompt_len = max_prompt_len;
        cfg
    }

    #[test]
    fn a_prompt_too_long_in_a_data_file_is_named_by_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut prompts: Vec<String> = (0..20).map(|i| format!("{i} + 1 = ?")).collect();
        prompts[6] = "9".repeat(300);
        prompts[11] = "9".repeat(10_000_000);
        let path = jsonl(dir.path(), &prompts);
        let cfg = config(&path, 128);
        let task = create_task(&cfg.task).unwrap();
        let t0 = std::time::Instant::now();
        let e = check_prompt_lengths(&cfg, &ModelSpec::Tiny, task.as_ref(), None)
            .unwrap_err()
            .to_string();
        assert!(
            t0.elapsed().as_secs_f64() < 10.0,
            "a 10 MB prompt was encoded"
        );
        assert!(
            e.contains("data.jsonl")
                && e.contains("rollout.max_prompt_len = 128")
                && (e.contains("data.jsonl:7") || e.contains("data.jsonl:12"))
                && e.contains("1 more"),
            "{e}"
        );
        // Within the limit: accepted.
        let short = jsonl(dir.path(), &prompts[..5]);
        let cfg = config(&short, 128);
        let task = create_task(&cfg.task).unwrap();
        check_prompt_lengths(&cfg, &ModelSpec::Tiny, task.as_ref(), None).unwrap();
    }

    #[test]
    fn a_limit_below_what_a_generated_task_writes_is_refused() {
        let mut cfg = Config::default();
        cfg.rollout.max_prompt_len = 4;
        let task = create_task(&cfg.task).unwrap();
        let e = check_prompt_lengths(&cfg, &ModelSpec::Tiny, task.as_ref(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("task arithmetic") && e.contains("= 4"), "{e}");
        let ok = Config::default();
        check_prompt_lengths(&ok, &ModelSpec::Tiny, task.as_ref(), None).unwrap();
    }
}
