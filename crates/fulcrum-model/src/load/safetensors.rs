//! Safetensors files, their header checked before any tensor is made or any byte of data read:
//! the header's size within the file, every tensor's dtype, shape and data offsets, its offsets
//! inside the data, its byte length equal to its shape's, and no two tensors over the same bytes.
//! Every error names the file and, past the header's JSON, the tensor. [`read_header`] reads the
//! header alone (the shapes are compared with the config before any weight is read);
//! [`read_safetensors`] reads the whole file.
//!
//! The format: an 8-byte little-endian header length `n`, `n` bytes of JSON
//! (`{"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": ..}`),
//! then the data, offsets counting from its start.

use std::io::Read;
use std::path::Path;

use tch::{Kind, Tensor};

use crate::error::{ModelError, Result, TorchContext};

/// The largest header read: the `safetensors` crate's own bound (100 MB of JSON describes
/// millions of tensors).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor of a safetensors header.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub kind: Kind,
    pub shape: Vec<i64>,
    /// Byte range within the data that follows the header.
    pub begin: usize,
    pub end: usize,
}

fn kind_of(dtype: &str) -> Option<Kind> {
    Some(match dtype {
        "BOOL" => Kind::Bool,
        "U8" => Kind::Uint8,
        "I8" => Kind::Int8,
        "I16" => Kind::Int16,
        "I32" => Kind::Int,
        "I64" => Kind::Int64,
        "BF16" => Kind::BFloat16,
        "F16" => Kind::Half,
        "F32" => Kind::Float,
        "F64" => Kind::Double,
        _ => return None,
    })
}

/// The header of a safetensors file's `bytes`, checked against them: the header size within the
/// file, every tensor's dtype, shape and data offsets, its offsets inside the data, its byte
/// length equal to its shape's, and no two tensors over the same bytes. Returns the tensors and
/// where the data starts. Every error names the file and, past the header's JSON, the tensor.
pub fn header_of(path: &Path, bytes: &[u8]) -> Result<(Vec<TensorInfo>, usize)> {
    let bad = |message: String| ModelError::Header {
        path: path.to_path_buf(),
        message,
    };
    let Some(size) = bytes.get(..8) else {
        return Err(bad(format!(
            "the file is {} bytes, too short for the 8-byte header size",
            bytes.len()
        )));
    };
    let size = u64::from_le_bytes(size.try_into().unwrap_or([0; 8]));
    let start = usize::try_from(size)
        .ok()
        .and_then(|s| s.checked_add(8))
        .filter(|&s| s <= bytes.len())
        .ok_or_else(|| {
            bad(format!(
                "header size {size} runs past the end of the file ({} bytes)",
                bytes.len()
            ))
        })?;
    let infos = check_header(path, &bytes[8..start], (bytes.len() - start) as u64)?;
    Ok((infos, start))
}

/// The header of the safetensors file `path`, read alone (without its data), checked as by
/// [`header_of`].
pub fn read_header(path: &Path) -> Result<Vec<TensorInfo>> {
    let bad = |message: String| ModelError::Header {
        path: path.to_path_buf(),
        message,
    };
    let mut file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
    let file_len = file.metadata().map_err(|e| ModelError::io(path, e))?.len();
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(|_| {
        bad(format!(
            "the file is {file_len} bytes, too short for the 8-byte header size"
        ))
    })?;
    let size = u64::from_le_bytes(len);
    if size > MAX_HEADER_BYTES || size > file_len - 8 {
        return Err(bad(format!(
            "header size {size} runs past the end of the file ({file_len} bytes) or over \
             {MAX_HEADER_BYTES} bytes"
        )));
    }
    let mut json = vec![0u8; size as usize];
    file.read_exact(&mut json)
        .map_err(|e| ModelError::io(path, e))?;
    check_header(path, &json, file_len - 8 - size)
}

/// The tensors a header's `json` declares over `data_len` bytes of data, every one checked,
/// sorted by name.
fn check_header(path: &Path, json: &[u8], data_len: u64) -> Result<Vec<TensorInfo>> {
    let bad = |message: String| ModelError::Header {
        path: path.to_path_buf(),
        message,
    };
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| bad(format!("not a JSON object: {e}")))?;
    let mut infos = Vec::new();
    for (name, v) in &header {
        if name == "__metadata__" {
            continue;
        }
        let tbad = |m: String| bad(format!("tensor `{name}`: {m}"));
        let dtype = v.get("dtype").and_then(|d| d.as_str()).unwrap_or("");
        let kind = kind_of(dtype).ok_or_else(|| {
            tbad(if dtype.is_empty() {
                "no dtype".into()
            } else {
                format!("dtype {dtype} is not supported")
            })
        })?;
        let shape: Vec<i64> = v
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|s| {
                s.iter()
                    .map(|d| d.as_u64().and_then(|d| i64::try_from(d).ok()))
                    .collect()
            })
            .ok_or_else(|| tbad("shape: expected a list of sizes".into()))?;
        let offsets: Vec<u64> = v
            .get("data_offsets")
            .and_then(|o| o.as_array())
            .and_then(|o| o.iter().map(|x| x.as_u64()).collect::<Option<Vec<_>>>())
            .filter(|o| o.len() == 2)
            .ok_or_else(|| tbad("data_offsets: expected [begin, end]".into()))?;
        let (b, e) = (offsets[0], offsets[1]);
        if b > e {
            return Err(tbad(format!("data offsets {b}..{e} end before they begin")));
        }
        if e > data_len {
            return Err(tbad(format!(
                "data offsets {b}..{e} run past the end of the data ({data_len} bytes after the header)"
            )));
        }
        let need = shape
            .iter()
            .try_fold(kind.elt_size_in_bytes() as u64, |n, &d| {
                n.checked_mul(d as u64)
            });
        if need != Some(e - b) {
            let need = need.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string());
            return Err(tbad(format!(
                "shape {shape:?} of {dtype} needs {need} bytes, its data offsets {b}..{e} hold {}",
                e - b
            )));
        }
        infos.push(TensorInfo {
            name: name.clone(),
            kind,
            shape,
            begin: b as usize,
            end: e as usize,
        });
    }
    let mut by_offset: Vec<&TensorInfo> = infos.iter().filter(|t| t.end > t.begin).collect();
    by_offset.sort_by_key(|t| (t.begin, t.end));
    for w in by_offset.windows(2) {
        if w[1].begin < w[0].end {
            return Err(bad(format!(
                "tensor `{}`: data offsets {}..{} overlap those of tensor `{}` ({}..{})",
                w[1].name, w[1].begin, w[1].end, w[0].name, w[0].begin, w[0].end
            )));
        }
    }
    infos.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(infos)
}

/// The named tensors of a safetensors file (on the CPU, sorted by name), its header checked
/// first ([`header_of`]).
pub fn read_safetensors(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let bytes = std::fs::read(path).map_err(|e| ModelError::io(path, e))?;
    let (infos, start) = header_of(path, &bytes)?;
    let data = &bytes[start..];
    infos
        .into_iter()
        .map(|t| {
            let tensor = Tensor::f_from_data_size(&data[t.begin..t.end], &t.shape, t.kind)
                .ctx(|| format!("{}: tensor `{}`", path.display(), t.name))?;
            Ok((t.name, tensor))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A safetensors file of `header` (tensor entries) and `data` bytes.
    fn file(header: serde_json::Value, data: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let h = header.to_string().into_bytes();
        let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
        bytes.extend(h);
        bytes.extend(data);
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    fn err(path: &Path) -> String {
        match read_safetensors(path) {
            Ok(t) => format!("read {} tensors", t.len()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_true_header_reads_every_tensor() {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let (_d, p) = file(
            serde_json::json!({
                "__metadata__": {"format": "pt"},
                "b": {"dtype": "F32", "shape": [1, 2], "data_offsets": [4, 12]},
                "a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
            }),
            &data,
        );
        let t = read_safetensors(&p).unwrap();
        assert_eq!(t[0].0, "a");
        assert_eq!(t[1].1.size(), [1, 2]);
        assert_eq!(t[1].1.double_value(&[0, 1]), 3.0);
    }

    #[test]
    fn a_lying_header_names_the_tensor_and_the_file() {
        let f32s = |b: u64, e: u64, shape: serde_json::Value| serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [b, e]});
        for (header, data_len, want) in [
            (
                serde_json::json!({"w": f32s(0, 16, serde_json::json!([4]))}),
                8,
                "tensor `w`: data offsets 0..16 run past the end of the data (8 bytes",
            ),
            (
                serde_json::json!({"a": f32s(0, 8, serde_json::json!([2])), "b": f32s(4, 12, serde_json::json!([2]))}),
                12,
                "tensor `b`: data offsets 4..12 overlap those of tensor `a` (0..8)",
            ),
            (
                serde_json::json!({"w": f32s(0, 8, serde_json::json!([3]))}),
                8,
                "tensor `w`: shape [3] of F32 needs 12 bytes, its data offsets 0..8 hold 8",
            ),
            (
                serde_json::json!({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}),
                8,
                "tensor `w`: data offsets 8..0 end before they begin",
            ),
            (
                serde_json::json!({"w": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}}),
                8,
                "tensor `w`: dtype Q9 is not supported",
            ),
        ] {
            let (_d, p) = file(header, &vec![0u8; data_len]);
            let e = err(&p);
            assert!(
                e.contains(&p.display().to_string()) && e.contains(want),
                "{e}"
            );
        }
        // A header size past the end of the file, and a file too short for one.
        let (_d, p) = file(serde_json::json!({}), b"");
        std::fs::write(&p, 1000u64.to_le_bytes()).unwrap();
        assert!(
            err(&p).contains("header size 1000 runs past the end of the file"),
            "{}",
            err(&p)
        );
        std::fs::write(&p, b"abc").unwrap();
        assert!(err(&p).contains("too short"), "{}", err(&p));
    }

    #[test]
    fn the_header_alone_is_read_and_checked_the_same_way() {
        let (_d, p) = file(
            serde_json::json!({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}),
            &[0u8; 24],
        );
        let infos = read_header(&p).unwrap();
        assert_eq!(
            (infos[0].name.as_str(), infos[0].shape.clone()),
            ("a", vec![2, 3])
        );
        let (_d, p) = file(
            serde_json::json!({"a": {"dtype": "F32", "shape": [1000000, 1000000], "data_offsets": [0, 24]}}),
            &[0u8; 24],
        );
        let e = read_header(&p).unwrap_err().to_string();
        assert!(e.contains("tensor `a`") && e.contains("needs"), "{e}");
        std::fs::write(&p, u64::MAX.to_le_bytes()).unwrap();
        let e = read_header(&p).unwrap_err().to_string();
        assert!(e.contains("runs past the end"), "{e}");
    }
}
