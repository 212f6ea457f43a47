//! The run directory's JSONL streams: one JSON object per line, flushed line by line so a crash
//! loses at most the line being written, and cut back to a checkpoint's step on resume so that a
//! resumed run's files equal those of a run never interrupted.

use std::fs::{File, OpenOptions};
use std::io::Write;
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

/// Keeps only the complete lines of `path` whose `key` field is `<= last`, and drops what a
/// crash or a full disk left unfinished: a last line without its newline or not valid JSON
/// (bytes, not text, are read, so a write cut inside a UTF-8 character is no obstacle). Returns
/// how many such torn lines were dropped, for the caller to say so. A missing file is fine.
pub fn truncate_after(path: &Path, key: &str, last: u64) -> Result<usize, TrainError> {
    if !path.exists() {
        return Ok(0);
    }
    let bytes = std::fs::read(path).map_err(TrainError::io(path))?;
    let mut kept = Vec::with_capacity(bytes.len());
    let mut torn = 0;
    let mut rest: &[u8] = &bytes;
    while !rest.is_empty() {
        let (line, complete) = match rest.iter().position(|&b| b == b'\n') {
            Some(n) => (&rest[..n], true),
            None => (rest, false),
        };
        rest = &rest[(line.len() + 1).min(rest.len())..];
        let parsed = serde_json::from_slice::<serde_json::Value>(line);
        let Some(v) = parsed.as_ref().ok().filter(|_| complete) else {
            torn += 1;
            continue;
        };
        if v.get(key)
            .and_then(|s| s.as_u64())
            .is_none_or(|s| s <= last)
        {
            kept.extend_from_slice(line);
            kept.push(b'\n');
        }
    }
    let tmp = path.with_extension("jsonl.tmp");
    std::fs::write(&tmp, kept).map_err(TrainError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(TrainError::io(path))?;
    Ok(torn)
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
        assert_eq!(truncate_after(&p, "step", 3).unwrap(), 1);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(text.ends_with("{\"step\":3,\"x\":6}\n"), "{text}");
    }

    #[test]
    fn a_full_disk_is_an_error_naming_the_file() {
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let mut w = JsonlWriter::append(full).unwrap();
        let err = w
            .write(&serde_json::json!({"step": 1}))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("/dev/full:") && err.contains("space"),
            "{err}"
        );
    }

    #[test]
    fn a_line_cut_inside_a_character_is_dropped_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("samples.jsonl");
        let mut bytes = b"{\"step\":1,\"r\":\"ok\"}\n{\"step\":2,\"r\":\"".to_vec();
        bytes.extend_from_slice(&"é".as_bytes()[..1]);
        std::fs::write(&p, bytes).unwrap();
        assert_eq!(truncate_after(&p, "step", 5).unwrap(), 1);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"step\":1,\"r\":\"ok\"}\n"
        );
    }
}
