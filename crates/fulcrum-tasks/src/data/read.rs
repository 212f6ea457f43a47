//! Reading raw records: JSONL, gzipped JSONL, JSON arrays and parquet, by file extension.
//!
//! Each record comes back as a `serde_json::Value` with its position (1-based line of a JSONL
//! file, 1-based element of a JSON array, 1-based parquet row), so that every later error can
//! name `file:line`. Parquet files are read with the `parquet` crate's record API (no Arrow), and
//! each row is turned into the same JSON shape pyarrow would give (nested lists and structs).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde_json::Value;

use crate::error::{Result, TaskError};

/// A raw record and its 1-based position in the file.
pub type RawRecord = (usize, Value);

/// Reads every record of a `.jsonl`, `.jsonl.gz`, `.json` (array, or one object per line) or
/// `.parquet` file.
pub fn read_records(path: &Path) -> Result<Vec<RawRecord>> {
    let name = path.to_string_lossy().to_lowercase();
    if name.ends_with(".parquet") {
        return read_parquet(path);
    }
    let file = File::open(path).map_err(|e| TaskError::io(path, e))?;
    let reader: Box<dyn Read> = if name.ends_with(".gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut reader = BufReader::new(reader);
    if name.ends_with(".json") || name.ends_with(".json.gz") {
        let mut text = String::new();
        reader
            .read_to_string(&mut text)
            .map_err(|e| TaskError::io(path, e))?;
        if text.trim_start().starts_with('[') {
            let v: Value = serde_json::from_str(&text).map_err(|e| TaskError::Record {
                path: path.into(),
                line: e.line(),
                field: "(json)".into(),
                problem: e.to_string(),
            })?;
            let Value::Array(items) = v else {
                return Err(TaskError::Format {
                    path: path.into(),
                    problem: "expected a JSON array".into(),
                });
            };
            return Ok(items
                .into_iter()
                .enumerate()
                .map(|(i, v)| (i + 1, v))
                .collect());
        }
        return parse_lines(path, text.lines().map(|l| Ok(l.to_string())));
    }
    parse_lines(
        path,
        (&mut reader)
            .lines()
            .map(|l| l.map_err(|e| TaskError::io(path, e))),
    )
}

fn parse_lines(path: &Path, lines: impl Iterator<Item = Result<String>>) -> Result<Vec<RawRecord>> {
    let mut out = Vec::new();
    for (i, line) in lines.enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| TaskError::record(path, i + 1, "(json)", e.to_string()))?;
        out.push((i + 1, v));
    }
    Ok(out)
}

/// Reads a parquet file row by row into JSON values.
pub fn read_parquet(path: &Path) -> Result<Vec<RawRecord>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = File::open(path).map_err(|e| TaskError::io(path, e))?;
    let bad = |e: parquet::errors::ParquetError| TaskError::Format {
        path: path.into(),
        problem: format!("not a readable parquet file: {e}"),
    };
    let reader = SerializedFileReader::new(file).map_err(bad)?;
    let rows = reader.get_row_iter(None).map_err(bad)?;
    let mut out = Vec::new();
    for (i, row) in rows.enumerate() {
        let row = row.map_err(|e| TaskError::record(path, i + 1, "(row)", e.to_string()))?;
        out.push((i + 1, row.to_json_value()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("fulcrum-read-{}-{name}", std::process::id()));
        let _ = std::fs::write(&p, bytes);
        p
    }

    #[test]
    fn jsonl_lines_keep_their_numbers_and_skip_blanks() -> Result<()> {
        let p = temp("a.jsonl", b"{\"a\":1}\n\n{\"a\":2}\n");
        let r = read_records(&p)?;
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3]);
        Ok(())
    }

    #[test]
    fn malformed_line_names_file_and_line() {
        let p = temp("b.jsonl", b"{\"a\":1}\n{oops\n");
        let e = read_records(&p)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("b.jsonl:2:"), "{e}");
    }

    #[test]
    fn gzipped_jsonl_and_json_arrays_are_read() -> Result<()> {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"{\"a\":1}\n{\"a\":2}\n")
            .map_err(|e| TaskError::io("gz", e))?;
        let bytes = gz.finish().map_err(|e| TaskError::io("gz", e))?;
        assert_eq!(read_records(&temp("c.jsonl.gz", &bytes))?.len(), 2);
        assert_eq!(
            read_records(&temp("d.json", b"[{\"a\":1},{\"a\":2},{}]"))?.len(),
            3
        );
        Ok(())
    }

    #[test]
    fn non_parquet_file_is_a_format_error() {
        let p = temp("e.parquet", b"not parquet");
        assert!(matches!(read_records(&p), Err(TaskError::Format { .. })));
    }
}
