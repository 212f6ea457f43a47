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
/// `.parquet` file. Bytes that are not UTF-8 are an error naming the line and the byte offset
/// in the file (in the decompressed stream for `.gz`).
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
        let mut bytes = Vec::new();
        reader
            .read_to_end(&mut bytes)
            .map_err(|e| TaskError::io(path, e))?;
        let text = utf8(path, &bytes, 1, 0)?;
        if text.trim_start().starts_with('[') {
            let v: Value = serde_json::from_str(text).map_err(|e| TaskError::Record {
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
    let mut line = 0usize;
    let mut offset = 0usize;
    let lines = std::iter::from_fn(move || {
        let mut buf = Vec::new();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => None,
            Ok(n) => {
                line += 1;
                let at = offset;
                offset += n;
                Some(utf8(path, &buf, line, at).map(|l| {
                    let l = l.strip_suffix('\n').unwrap_or(l);
                    l.strip_suffix('\r').unwrap_or(l).to_string()
                }))
            }
            Err(e) => Some(Err(TaskError::io(path, e))),
        }
    });
    parse_lines(path, lines)
}

/// `bytes` (starting on 1-based `line`, at byte `offset` of the file) as text; bytes that are
/// not UTF-8 are an error naming their line and their offset in the file.
fn utf8<'a>(path: &Path, bytes: &'a [u8], line: usize, offset: usize) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| {
        let good = &bytes[..e.valid_up_to()];
        let newlines = good.iter().filter(|&&b| b == b'\n').count();
        TaskError::record(
            path,
            line + newlines,
            "(text)",
            format!("not valid UTF-8 (byte offset {})", offset + e.valid_up_to()),
        )
    })
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
    fn bytes_that_are_not_utf8_name_the_line_and_the_offset() {
        let err = |name: &str, bytes: &[u8]| {
            read_records(&temp(name, bytes))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        // Line 2 starts at byte 8; its bad byte is at 8 + 9.
        let jsonl = b"{\"a\":1}\n{\"a\":\"caf\xe9\"}\n";
        let e = err("u.jsonl", jsonl);
        assert!(
            e.contains("u.jsonl:2:") && e.contains("not valid UTF-8 (byte offset 17)"),
            "{e}"
        );
        let e = err("u.json", b"[{\"a\":1},\n{\"a\":\"\xff\"}]");
        assert!(
            e.contains("u.json:2:") && e.contains("not valid UTF-8 (byte offset 16)"),
            "{e}"
        );
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(jsonl).unwrap_or_default();
        let e = err("u.jsonl.gz", &gz.finish().unwrap_or_default());
        assert!(
            e.contains("u.jsonl.gz:2:") && e.contains("byte offset 17"),
            "{e}"
        );
        // Windows line ends are still line ends.
        let ok = read_records(&temp("crlf.jsonl", b"{\"a\":1}\r\n{\"a\":2}\r\n"));
        assert_eq!(ok.map(|r| r.len()).unwrap_or(0), 2);
    }

    #[test]
    fn non_parquet_file_is_a_format_error() {
        let p = temp("e.parquet", b"not parquet");
        assert!(matches!(read_records(&p), Err(TaskError::Format { .. })));
    }
}
