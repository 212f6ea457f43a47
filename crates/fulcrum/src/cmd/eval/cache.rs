//! The `--samples` file of `fulcrum eval`: one JSON line per scored response, written after
//! every batch, and read back on the next run as a cache, so that an interrupted or extended
//! evaluation samples only the problems it has not finished.
//!
//! Each line names what determines its response (benchmark, problem index in the seeded order,
//! sample index, model, temperature, length limit, seed): a rerun with other settings would mix
//! two evaluations under one number, so it is refused unless `--fresh` starts the file over.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use fulcrum_tasks::Example;
use fulcrum_train::EvalSample;
use serde::{Deserialize, Serialize};

/// One line of a samples file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleLine {
    /// The benchmark as `--bench` named it.
    pub bench: String,
    /// The problem's position in the benchmark's seeded order (0-based).
    pub problem: usize,
    /// Which of the problem's responses (0-based): with the problem and the seed, it fixes
    /// the random stream the response was drawn from.
    pub sample: usize,
    pub model: String,
    pub temperature: f64,
    pub max_new_tokens: usize,
    pub seed: u64,
    /// The evaluation this line was written for: its problems, of how many.
    pub problems: usize,
    pub problems_total: Option<usize>,
    #[serde(flatten)]
    pub scored: EvalSample,
}

/// The settings a cached response must have been sampled with to be reused.
#[derive(Debug, Clone)]
pub struct Key<'a> {
    pub bench: &'a str,
    pub model: &'a str,
    pub temperature: f64,
    pub max_new_tokens: usize,
    pub seed: u64,
}

/// An open samples file with the lines it held when opened.
pub struct SamplesFile {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    lines: Vec<(usize, SampleLine)>,
}

impl SamplesFile {
    /// Opens `path` for appending, reading the lines already there (none with `fresh`, which
    /// empties the file). A torn last line (an interrupted write) is dropped with a message on
    /// stderr; any other unreadable line is an error naming the file and line.
    pub fn open(path: &Path, fresh: bool) -> Result<SamplesFile> {
        let at = || format!("--samples {}", path.display());
        let old = if fresh {
            Vec::new()
        } else {
            match std::fs::read(path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e).with_context(at),
            }
        };
        let (lines, keep) = parse(path, &old)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(fresh)
            .open(path)
            .with_context(at)?;
        // Cut a torn tail, so that new lines do not continue it.
        file.set_len(keep as u64).with_context(at)?;
        let mut out = std::io::BufWriter::new(file);
        use std::io::Seek;
        out.seek(std::io::SeekFrom::End(0)).with_context(at)?;
        if keep > 0 && old[keep - 1] != b'\n' {
            // A whole last line without its newline: end it before appending.
            writeln!(out).with_context(at)?;
        }
        Ok(SamplesFile {
            path: path.to_path_buf(),
            out,
            lines,
        })
    }

    /// The cached responses of one benchmark's evaluation over `examples` (its first problems
    /// in seeded order) with `n` responses each: `out[i][g]` is response g to problem i, when
    /// the file has it. Lines of other benchmarks, of problems past `examples` and of samples
    /// past `n` are left alone. A line of this benchmark sampled with other settings, or whose
    /// problem is not the one at its index now, is an error naming file, line and setting.
    pub fn cached(
        &self,
        key: &Key,
        examples: &[Example],
        n: usize,
    ) -> Result<Vec<Vec<Option<EvalSample>>>> {
        let mut out = vec![vec![None; n]; examples.len()];
        for (no, l) in self.lines.iter().filter(|(_, l)| l.bench == key.bench) {
            let differs = |what: &str, there: String, here: String| {
                anyhow::anyhow!(
                    "--samples {}:{no}: {} was sampled there with {what} {there}, here with \
                     {here}; rerun with the same settings to resume, or pass --fresh to start \
                     the file over (or give another --samples path)",
                    self.path.display(),
                    key.bench
                )
            };
            if !same_model(&l.model, key.model) {
                return Err(differs("model", l.model.clone(), key.model.to_string()));
            }
            if l.temperature != key.temperature {
                return Err(differs(
                    "temperature",
                    l.temperature.to_string(),
                    key.temperature.to_string(),
                ));
            }
            if l.max_new_tokens != key.max_new_tokens {
                return Err(differs(
                    "max new tokens",
                    l.max_new_tokens.to_string(),
                    key.max_new_tokens.to_string(),
                ));
            }
            if l.seed != key.seed {
                return Err(differs("seed", l.seed.to_string(), key.seed.to_string()));
            }
            let Some(ex) = examples.get(l.problem) else {
                continue;
            };
            if ex.id != l.scored.id || ex.prompt != l.scored.prompt {
                return Err(differs(
                    &format!("problem {} being", l.problem),
                    l.scored.id.clone(),
                    format!("{} (the data file or prompt changed)", ex.id),
                ));
            }
            // A duplicate (a batch written twice) keeps the first copy: both drew the same
            // stream.
            if let Some(slot) = out[l.problem].get_mut(l.sample) {
                slot.get_or_insert_with(|| l.scored.clone());
            }
        }
        Ok(out)
    }

    /// Appends lines and flushes them to the file.
    pub fn append(&mut self, lines: &[SampleLine]) -> Result<()> {
        let at = || format!("writing --samples {}", self.path.display());
        for l in lines {
            let text = serde_json::to_string(l).with_context(at)?;
            writeln!(self.out, "{text}").with_context(at)?;
        }
        self.out.flush().with_context(at)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The lines of a samples file's bytes, numbered from 1, and how many leading bytes to keep
/// (all but a torn last line).
fn parse(path: &Path, bytes: &[u8]) -> Result<(Vec<(usize, SampleLine)>, usize)> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut no = 0;
    while start < bytes.len() {
        no += 1;
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| start + i);
        let text = std::str::from_utf8(&bytes[start..end]).ok();
        let parsed = text.map(|t| (t.trim().is_empty(), serde_json::from_str::<SampleLine>(t)));
        match parsed {
            Some((true, _)) => {}
            Some((false, Ok(l))) => lines.push((no, l)),
            // The last line, without its newline: a write cut short by an interruption.
            _ if end == bytes.len() => {
                eprintln!(
                    "eval: --samples {}:{no}: dropping a torn last line (an interrupted write); \
                     its problem is sampled again",
                    path.display()
                );
                return Ok((lines, start));
            }
            Some((false, Err(e))) => bail!(
                "--samples {}:{no}: not a line of a `fulcrum eval` samples file ({e}); pass \
                 --fresh to start the file over, or give another --samples path",
                path.display()
            ),
            None => bail!(
                "--samples {}:{no}: not UTF-8 text; pass --fresh to start the file over",
                path.display()
            ),
        }
        start = end + 1;
    }
    Ok((lines, bytes.len()))
}

/// Whether two model names are the same model: the same text, or paths to the same file or
/// folder (a relative and an absolute path, or a run from another directory).
fn same_model(a: &str, b: &str) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// Counts the cached problems: those with all their responses.
pub fn finished(cached: &[Vec<Option<EvalSample>>]) -> usize {
    cached
        .iter()
        .filter(|p| p.iter().all(Option::is_some))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(problem: usize, sample: usize) -> SampleLine {
        SampleLine {
            bench: "b".into(),
            problem,
            sample,
            model: "tiny".into(),
            temperature: 1.0,
            max_new_tokens: 8,
            seed: 0,
            problems: 2,
            problems_total: Some(2),
            scored: EvalSample {
                id: format!("p{problem}"),
                prompt: format!("q{problem}"),
                response: "r".into(),
                tokens: 1,
                truncated: false,
                reward: 0.0,
                correct: false,
                reason: String::new(),
                tool_calls: 0,
            },
        }
    }

    fn text(lines: &[SampleLine]) -> String {
        lines
            .iter()
            .map(|l| serde_json::to_string(l).unwrap() + "\n")
            .collect()
    }

    fn examples() -> Vec<Example> {
        (0..2)
            .map(|i| Example {
                id: format!("p{i}"),
                prompt: format!("q{i}"),
                answer: "a".into(),
                demonstration: None,
                verifier: fulcrum_tasks::Verifier::Exact,
                entry_point: None,
            })
            .collect()
    }

    const KEY: Key = Key {
        bench: "b",
        model: "tiny",
        temperature: 1.0,
        max_new_tokens: 8,
        seed: 0,
    };

    #[test]
    fn a_torn_last_line_is_dropped_and_the_file_continues_cleanly() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("s.jsonl");
        let whole = text(&[line(0, 0), line(0, 1)]);
        std::fs::write(&p, format!("{whole}{{\"bench\": \"b\", \"probl"))?;
        let mut f = SamplesFile::open(&p, false)?;
        let cached = f.cached(&KEY, &examples(), 2)?;
        assert_eq!(finished(&cached), 1);
        assert!(cached[1].iter().all(Option::is_none));
        f.append(&[line(1, 0)])?;
        drop(f);
        assert_eq!(std::fs::read_to_string(&p)?, whole + &text(&[line(1, 0)]));
        Ok(())
    }

    #[test]
    fn a_whole_last_line_without_newline_is_kept_and_ended() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("s.jsonl");
        let whole = text(&[line(0, 0)]);
        std::fs::write(&p, whole.trim_end())?;
        let mut f = SamplesFile::open(&p, false)?;
        assert!(f.cached(&KEY, &examples(), 1)?[0][0].is_some());
        f.append(&[line(1, 0)])?;
        drop(f);
        assert_eq!(
            std::fs::read_to_string(&p)?,
            text(&[line(0, 0), line(1, 0)])
        );
        Ok(())
    }

    #[test]
    fn bad_lines_and_other_settings_are_refused_naming_file_and_line() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("s.jsonl");
        std::fs::write(
            &p,
            format!("{}not json\n{}", text(&[line(0, 0)]), text(&[line(1, 0)])),
        )?;
        let e = SamplesFile::open(&p, false).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("s.jsonl:2")),
            "{e:?}"
        );
        // --fresh starts over.
        assert!(SamplesFile::open(&p, true)?.cached(&KEY, &examples(), 1)?[0][0].is_none());
        std::fs::write(&p, text(&[line(0, 0), line(1, 0)]))?;
        let f = SamplesFile::open(&p, false)?;
        for (key, what) in [
            (
                Key {
                    temperature: 0.0,
                    ..KEY
                },
                "temperature 1, here with 0",
            ),
            (
                Key {
                    max_new_tokens: 9,
                    ..KEY
                },
                "max new tokens 8, here with 9",
            ),
            (Key { seed: 3, ..KEY }, "seed 0, here with 3"),
            (
                Key {
                    model: "other.gguf",
                    ..KEY
                },
                "model tiny",
            ),
        ] {
            let e = f.cached(&key, &examples(), 1).unwrap_err().to_string();
            assert!(e.contains("s.jsonl:1") && e.contains(what), "{e}");
        }
        // Another benchmark's lines are not this one's business.
        let other = Key {
            bench: "c",
            seed: 3,
            ..KEY
        };
        assert_eq!(finished(&f.cached(&other, &examples(), 1)?), 0);
        // A problem that is not the one at its index now.
        let mut swapped = examples();
        swapped.swap(0, 1);
        let e = f.cached(&KEY, &swapped, 1).unwrap_err().to_string();
        assert!(e.contains("problem 0") && e.contains("p0"), "{e}");
        Ok(())
    }
}
