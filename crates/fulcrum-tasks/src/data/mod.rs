//! Datasets: reading files into [`Example`]s, deduplication, and the benchmark registry.
//!
//! [`load`] reads any supported file ([`read`]) in any record format ([`formats`]) and returns
//! the examples plus the records it could not use, each an error naming `file:line: field`
//! (the caller decides whether that is fatal; [`load_strict`] makes it so). [`dedupe`] drops
//! repeated prompts and reports how many went and how many prompts had conflicting answers.

pub mod formats;
pub mod read;
pub mod registry;

use std::collections::HashMap;
use std::path::Path;

pub use formats::Format;

use crate::error::{Result, TaskError};
use crate::math::normalize;
use crate::task::Example;

/// What [`load`] returns: the usable examples and the problems with the rest.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Usable examples, in file order.
    pub examples: Vec<Example>,
    /// One error per unusable record.
    pub problems: Vec<TaskError>,
}

/// Reads a dataset file; unusable records are reported in `problems`, never turned into
/// empty examples. Errors only when the file itself cannot be read.
pub fn load(path: &Path, format: Format) -> Result<Loaded> {
    let mut out = Loaded::default();
    for (line, v) in read::read_records(path)? {
        match formats::to_example(path, line, &v, format) {
            Ok(e) => out.examples.push(e),
            Err(e) => out.problems.push(e),
        }
    }
    Ok(out)
}

/// Like [`load`], but the first unusable record is an error, and an empty file too.
pub fn load_strict(path: &Path, format: Format) -> Result<Vec<Example>> {
    Ok(load_numbered(path, format)?
        .into_iter()
        .map(|(_, e)| e)
        .collect())
}

/// [`load_strict`] with each example's line (or element, or row) in the file, so that a
/// later check of its text can name `file:line`.
pub fn load_numbered(path: &Path, format: Format) -> Result<Vec<(usize, Example)>> {
    let mut out = Vec::new();
    for (line, v) in read::read_records(path)? {
        out.push((line, formats::to_example(path, line, &v, format)?));
    }
    if out.is_empty() {
        return Err(TaskError::Format {
            path: path.into(),
            problem: "no records".into(),
        });
    }
    Ok(out)
}

/// What [`dedupe`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DedupeReport {
    /// Examples read.
    pub input: usize,
    /// Examples kept.
    pub kept: usize,
    /// Repeats of a prompt already kept, with the same answer.
    pub dropped_duplicates: usize,
    /// Distinct prompts whose copies disagree on the answer.
    pub conflicting_prompts: usize,
    /// Examples dropped because their prompt had conflicting answers (every copy goes).
    pub dropped_conflicting: usize,
}

/// The key prompts are compared by: whitespace collapsed.
pub fn prompt_key(prompt: &str) -> String {
    prompt.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Keeps the first copy of each prompt (compared after collapsing whitespace). A prompt whose
/// copies have different answers (after math normalisation) is dropped entirely, since we cannot
/// know which answer is right.
pub fn dedupe(examples: Vec<Example>) -> (Vec<Example>, DedupeReport) {
    let mut report = DedupeReport {
        input: examples.len(),
        ..DedupeReport::default()
    };
    let mut answers: HashMap<String, Vec<String>> = HashMap::new();
    for e in &examples {
        let a = answers.entry(prompt_key(&e.prompt)).or_default();
        let n = normalize(&e.answer);
        if !a.contains(&n) {
            a.push(n);
        }
    }
    report.conflicting_prompts = answers.values().filter(|a| a.len() > 1).count();
    let mut seen = std::collections::HashSet::new();
    let mut kept = Vec::new();
    for e in examples {
        let key = prompt_key(&e.prompt);
        if answers.get(&key).is_some_and(|a| a.len() > 1) {
            report.dropped_conflicting += 1;
        } else if seen.insert(key) {
            kept.push(e);
        } else {
            report.dropped_duplicates += 1;
        }
    }
    report.kept = kept.len();
    (kept, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Verifier;

    fn ex(p: &str, a: &str) -> Example {
        Example {
            id: String::new(),
            prompt: p.into(),
            answer: a.into(),
            demonstration: None,
            verifier: Verifier::Math,
            entry_point: None,
        }
    }

    #[test]
    fn dedupe_drops_repeats_and_conflicts_and_counts_them() {
        let (kept, r) = dedupe(vec![
            ex("What is 1+1?", "2"),
            ex("What  is 1+1? ", "2.0".replace(".0", "").as_str()),
            ex("Q2", "3"),
            ex("Q2", "4"),
            ex("Q3", "\\dfrac{1}{2}"),
            ex("Q3", "\\frac{1}{2}"),
        ]);
        assert_eq!(kept.len(), 2);
        assert_eq!(r.dropped_duplicates, 2);
        assert_eq!(r.conflicting_prompts, 1);
        assert_eq!(r.dropped_conflicting, 2);
        assert_eq!(r.input, 6);
    }
}
