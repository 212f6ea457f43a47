//! A task loaded from a user's JSONL file: `prompt`, `answer`, optional `demonstration`,
//! optional `verifier` (`math` default, `exact`, `code`) and, for `code`, optional `entry_point`.
//! Records in the other known layouts are read too, each detected by its fields (verl parquet
//! rows as in DAPO-Math-17k, `problem`/`answer` as in Polaris and MATH, GSM8K, ...; see
//! `data/formats.rs`); an optional template (`task.template`) wraps every prompt.
//!
//! Every record is checked when the file is loaded: a line without a prompt or answer, or a
//! code record whose tests cannot fail, stops the load with an error naming file, line and
//! field. Each example keeps its line, so that a character the model cannot encode
//! ([`Task::check_text`]) is named by file and line too. The file is one split: `examples` returns its
//! records for either split, in an order shuffled by the seed, cycling when more are asked for
//! than the file holds. Bring a second file for held-out evaluation.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::code::CodeRunner;
use crate::data::{load_numbered, Format};
use crate::error::{Result, TaskError};
use crate::task::{unknown_char_problem, Example, Split, Task};
use crate::verify::{score_requests, score_response, RewardMode, Score, ScoreRequest, Verifier};
use fulcrum_core::SplitMix64;

/// Examples from a file, scored by each example's verifier.
#[derive(Debug)]
pub struct JsonlTask {
    name: String,
    examples: Vec<Example>,
    /// The file the examples were read from and each one's line (`None`: built in memory).
    source: Option<(PathBuf, Vec<usize>)>,
    /// The template wrapped around every prompt, if any.
    template: Option<String>,
    reward: RewardMode,
    runner: OnceLock<CodeRunner>,
}

impl JsonlTask {
    /// Loads and checks every record of `path`, each in the layout its fields show.
    pub fn load(path: &Path, reward: RewardMode) -> Result<Self> {
        Ok(Self::from_file(
            "jsonl",
            path,
            load_numbered(path, Format::Auto)?,
            reward,
        ))
    }

    /// Wraps every prompt in `template`, `{problem}` standing for the prompt.
    pub fn with_template(mut self, template: &str) -> Self {
        for e in &mut self.examples {
            e.prompt = template.replace("{problem}", &e.prompt);
        }
        self.template = Some(template.to_string());
        self
    }

    /// A task over examples already loaded (used by the benchmark registry).
    pub fn from_examples(name: &str, examples: Vec<Example>, reward: RewardMode) -> Self {
        JsonlTask {
            name: name.to_string(),
            examples,
            source: None,
            template: None,
            reward,
            runner: OnceLock::new(),
        }
    }

    /// A task over the examples read from `path`, each with its line.
    pub fn from_file(
        name: &str,
        path: &Path,
        numbered: Vec<(usize, Example)>,
        reward: RewardMode,
    ) -> Self {
        let (lines, examples) = numbered.into_iter().unzip();
        JsonlTask {
            source: Some((path.to_path_buf(), lines)),
            ..Self::from_examples(name, examples, reward)
        }
    }

    /// Every example, in file order.
    pub fn all(&self) -> &[Example] {
        &self.examples
    }
}

/// The examples of a fixed list in seeded order, cycling.
pub fn seeded_order(examples: &[Example], seed: u64, count: usize) -> Vec<Example> {
    let mut order: Vec<usize> = (0..examples.len()).collect();
    SplitMix64::seeded(seed).shuffle(&mut order);
    order
        .iter()
        .cycle()
        .take(count)
        .map(|&i| examples[i].clone())
        .collect()
}

impl Task for JsonlTask {
    fn unjudged(&self, reason: String) -> Score {
        Score::from_outcome(self.reward, false, reason)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn problems_total(&self) -> Option<usize> {
        Some(self.examples.len())
    }

    fn examples(&self, _split: Split, seed: u64, count: usize) -> Result<Vec<Example>> {
        Ok(seeded_order(&self.examples, seed, count))
    }

    fn score_batch(&self, items: &[(&Example, &str)]) -> Vec<Score> {
        let reqs: Vec<ScoreRequest> = items
            .iter()
            .map(|(e, r)| ScoreRequest {
                response: r.to_string(),
                answer: e.answer.clone(),
                verifier: e.verifier,
                entry_point: e.entry_point.clone(),
            })
            .collect();
        let runner = reqs
            .iter()
            .any(|r| r.verifier == Verifier::Code)
            .then(|| self.runner.get_or_init(CodeRunner::detect));
        score_requests(&reqs, self.reward, runner)
    }

    fn check_text(
        &self,
        unknown: &dyn Fn(&str) -> Option<char>,
        demonstrations: bool,
    ) -> Result<()> {
        if let Some(c) = self.template.as_deref().and_then(unknown) {
            return Err(TaskError::Setting {
                key: "template".into(),
                problem: unknown_char_problem(c),
            });
        }
        for (i, e) in self.examples.iter().enumerate() {
            let texts = [
                ("prompt", Some(e.prompt.as_str())),
                (
                    "demonstration",
                    e.demonstration.as_deref().filter(|_| demonstrations),
                ),
            ];
            for (field, text) in texts {
                let Some(c) = text.and_then(unknown) else {
                    continue;
                };
                return Err(match &self.source {
                    Some((path, lines)) => {
                        TaskError::record(path, lines[i], field, unknown_char_problem(c))
                    }
                    None => TaskError::Setting {
                        key: format!("{} {}", self.name, e.id),
                        problem: format!("{field}: {}", unknown_char_problem(c)),
                    },
                });
            }
        }
        Ok(())
    }

    fn score(&self, example: &Example, response: &str) -> Score {
        let runner = (example.verifier == Verifier::Code)
            .then(|| self.runner.get_or_init(CodeRunner::detect));
        score_response(
            example.verifier,
            response,
            &example.answer,
            example.entry_point.as_deref(),
            self.reward,
            runner,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::create::{create_task, TaskConfig};

    #[test]
    fn jsonl_task_scores_with_each_lines_verifier() -> Result<()> {
        let p =
            std::env::temp_dir().join(format!("fulcrum-jsonl-task-{}.jsonl", std::process::id()));
        let text = concat!(
            "{\"prompt\": \"1/2 as decimal?\", \"answer\": \"0.5\"}\n",
            "{\"prompt\": \"say hi\", \"answer\": \"hi\", \"verifier\": \"exact\", \"demonstration\": \"Answer: hi\"}\n",
        );
        std::fs::write(&p, text).map_err(|e| crate::TaskError::io(&p, e))?;
        let task = create_task(&TaskConfig {
            name: "jsonl".into(),
            path: Some(p.clone()),
            ..TaskConfig::default()
        })?;
        let ex = task.examples(Split::Train, 1, 5)?;
        assert_eq!(ex.len(), 5);
        let math = ex
            .iter()
            .find(|e| e.verifier == Verifier::Math)
            .expect("a math record");
        assert!(task.score(math, "so \\boxed{\\frac{1}{2}}").correct);
        let exact = ex
            .iter()
            .find(|e| e.verifier == Verifier::Exact)
            .expect("an exact record");
        assert!(task.score(exact, "Answer: hi").correct);
        assert!(!task.score(exact, "Answer: hello").correct);
        Ok(())
    }

    #[test]
    fn other_layouts_are_detected_and_the_template_wraps_prompts() -> Result<()> {
        let p = std::env::temp_dir().join(format!(
            "fulcrum-jsonl-layouts-{}.jsonl",
            std::process::id()
        ));
        let text = concat!(
            "{\"problem\": \"What is 2+3?\", \"answer\": \"5\", \"difficulty\": 3.0}\n",
            "{\"prompt\": [{\"role\": \"user\", \"content\": \"What is 1+1?\"}], \"reward_model\": {\"ground_truth\": \"2\"}}\n",
        );
        std::fs::write(&p, text).map_err(|e| crate::TaskError::io(&p, e))?;
        let task = create_task(&TaskConfig {
            name: "jsonl".into(),
            path: Some(p.clone()),
            template: Some("{problem} Put the answer in \\boxed{}.".into()),
            ..TaskConfig::default()
        })?;
        let mut prompts: Vec<String> = task
            .examples(Split::Train, 0, 2)?
            .into_iter()
            .map(|e| e.prompt)
            .collect();
        prompts.sort();
        assert_eq!(
            prompts,
            [
                "What is 1+1? Put the answer in \\boxed{}.",
                "What is 2+3? Put the answer in \\boxed{}."
            ]
        );
        let bad = TaskConfig {
            name: "jsonl".into(),
            path: Some(p),
            template: Some("no placeholder".into()),
            ..TaskConfig::default()
        };
        assert!(create_task(&bad).is_err());
        Ok(())
    }

    #[test]
    fn a_character_the_model_lacks_is_named_by_file_line_and_field() -> Result<()> {
        let p =
            std::env::temp_dir().join(format!("fulcrum-jsonl-vocab-{}.jsonl", std::process::id()));
        let text = concat!(
            "{\"prompt\": \"1+1\", \"answer\": \"2\"}\n",
            "\n",
            "{\"prompt\": \"2+2\", \"answer\": \"4\", \"demonstration\": \"so \u{2192} 4\"}\n",
        );
        std::fs::write(&p, text).map_err(|e| crate::TaskError::io(&p, e))?;
        let ascii = |t: &str| t.chars().find(|c| !c.is_ascii());
        let task = JsonlTask::load(&p, RewardMode::ZeroOne)?;
        assert!(task.check_text(&ascii, false).is_ok());
        let e = task.check_text(&ascii, true).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}:3: demonstration:", p.display()))
                && e.contains("'\u{2192}' (U+2192)"),
            "{e}"
        );
        let e = JsonlTask::load(&p, RewardMode::ZeroOne)?
            .with_template("\u{bf}{problem}?")
            .check_text(&ascii, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("template") && e.contains("U+00BF"), "{e}");
        assert!(task.check_text(&|_| None, true).is_ok());
        Ok(())
    }

    #[test]
    fn line_without_answer_stops_the_load() {
        let p =
            std::env::temp_dir().join(format!("fulcrum-jsonl-bad-{}.jsonl", std::process::id()));
        let _ = std::fs::write(
            &p,
            "{\"prompt\": \"a\", \"answer\": \"1\"}\n{\"prompt\": \"b\"}\n",
        );
        let e = JsonlTask::load(&p, RewardMode::ZeroOne)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.ends_with(":2: answer: missing"), "{e}");
    }
}
