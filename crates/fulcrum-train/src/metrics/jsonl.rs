//! The run directory's JSONL streams: one JSON object per line, flushed line by line so a crash
//! loses at most the line being written, and cut back to a checkpoint's step on resume so that a
//! resumed run's files equal those of a run never interrupted.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::TrainError;

/// An append-only JSONL file.
pub struct JsonlWriter {
    path: PathBuf,
    file: File,
}

impl JsonlWriter {
    /// Opens (creating if needed) `path` for appending.
    pub fn append(path: &Path) -> Result<Self, TrainError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(TrainError::io(path))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Writes one record as one line and flushes it.
    pub fn write<T: Serialize>(&mut self, record: &T) -> Result<(), TrainError> {
        let mut line = serde_json::to_string(record).map_err(|e| TrainError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .map_err(TrainError::io(&self.path))?;
        self.file.flush().map_err(TrainError::io(&self.path))
    }
}

/// Keeps only the complete lines of `path` whose `key` field is `<= last` (and drops a last,
/// partial line left by a crash). A missing file is fine.
pub fn truncate_after(path: &Path, key: &str, last: u64) -> Result<(), TrainError> {
    if !path.exists() {
        return Ok(());
    }
    let reader = BufReader::new(File::open(path).map_err(TrainError::io(path))?);
    let mut kept = String::new();
    for line in reader.lines() {
        let line = line.map_err(TrainError::io(path))?;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            break; // a torn last line
        };
        match v.get(key).and_then(|s| s.as_u64()) {
            Some(s) if s <= last => {
                kept.push_str(&line);
                kept.push('\n');
            }
            Some(_) => {}
            None => {
                kept.push_str(&line);
                kept.push('\n');
            }
        }
    }
    let tmp = path.with_extension("jsonl.tmp");
    std::fs::write(&tmp, kept).map_err(TrainError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(TrainError::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_lines_up_to_the_step_and_drops_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("metrics.jsonl");
        let mut w = JsonlWriter::append(&p).unwrap();
        for step in 1..=5u64 {
            w.write(&serde_json::json!({"step": step, "x": step * 2}))
                .unwrap();
        }
        drop(w);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"step\": 6, \"x\"").unwrap();
        truncate_after(&p, "step", 3).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(text.ends_with("{\"step\":3,\"x\":6}\n"), "{text}");
    }
}
