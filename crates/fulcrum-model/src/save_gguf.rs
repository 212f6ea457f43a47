//! Writing a policy as a GGUF file for llama.cpp to load (the disk transport of the weight
//! push to a llama.cpp server).
//!
//! GGUF carries the architecture and tokenizer as metadata, which fulcrum does not rebuild:
//! they are copied from a template file of the same model (the file the policy or the server
//! was loaded from), and only the tensors are replaced, under the template's names and in its
//! order. Llama-architecture q and k rows are permuted back into llama.cpp's interleaved-RoPE
//! order (the inverse of what loading undid). Matrices are written in the chosen float type,
//! 1-D tensors (norms, biases) in f32 as llama.cpp expects. A tensor missing on either side or
//! of another shape is an error naming it and the template.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use tch::{Kind, Tensor};

use crate::config::{Arch, ModelConfig};
use crate::error::{ModelError, Result};
use crate::load::gguf::hf_name;

fulcrum_core::closed_set! {
    /// The float type of a written GGUF file's matrices (config `rollout.push_dtype`).
    pub enum GgufDtype("GGUF dtype") {
        /// Half precision: half the size and load time of f32, about 3 significant digits.
        F16 = "f16",
        /// Full precision: the trainer's weights exactly.
        F32 = "f32",
    }
}

impl GgufDtype {
    fn ggml(self) -> GgmlDType {
        match self {
            GgufDtype::F16 => GgmlDType::F16,
            GgufDtype::F32 => GgmlDType::F32,
        }
    }

    /// GGUF's `general.file_type`: 0 all f32, 1 mostly f16.
    fn file_type(self) -> u32 {
        match self {
            GgufDtype::F16 => 1,
            GgufDtype::F32 => 0,
        }
    }
}

/// llama.cpp's q/k row order from HF's: `[rows, cols]` with `heads` heads.
fn permute(t: &Tensor, heads: i64) -> Tensor {
    let (rows, cols) = (t.size()[0], t.size()[1]);
    t.reshape([heads, 2, rows / heads / 2, cols])
        .transpose(1, 2)
        .reshape([rows, cols])
}

/// The metadata and tensor names of a GGUF file of the model, read once and kept (the file
/// itself may be replaced afterwards: a llama.cpp server reports the file it serves, which after
/// the first push is a pushed file).
#[derive(Debug)]
pub struct GgufTemplate {
    pub path: std::path::PathBuf,
    metadata: HashMap<String, Value>,
    /// Tensor names with their shapes, in file order.
    tensors: Vec<(String, Vec<usize>)>,
}

impl GgufTemplate {
    pub fn read(path: &Path) -> Result<Self> {
        let mut file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
        let content = Content::read(&mut file).map_err(|e| ModelError::Gguf {
            path: path.to_path_buf(),
            message: format!("reading the template: {e}"),
        })?;
        let mut infos: Vec<(&String, &gguf_file::TensorInfo)> =
            content.tensor_infos.iter().collect();
        infos.sort_by_key(|(_, info)| info.offset);
        let tensors = infos
            .into_iter()
            .map(|(n, info)| (n.clone(), info.shape.dims().to_vec()))
            .collect();
        Ok(GgufTemplate {
            path: path.to_path_buf(),
            metadata: content.metadata,
            tensors,
        })
    }

    /// A template made rather than read (`save_gguf_meta.rs`); `path` names it in errors.
    pub(crate) fn from_parts(
        path: std::path::PathBuf,
        metadata: HashMap<String, Value>,
        tensors: Vec<(String, Vec<usize>)>,
    ) -> Self {
        GgufTemplate {
            path,
            metadata,
            tensors,
        }
    }

    /// The metadata value of `key`, if the template has it.
    pub fn metadata(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }
}

/// Writes `weights` (HF names) of a model with `config` to `out`, as a GGUF file whose
/// metadata and tensor names come from `template`. The file is written beside `out` and
/// renamed into place, so a reader never sees half of it.
pub fn write_gguf(
    weights: &[(String, Tensor)],
    config: &ModelConfig,
    template: &GgufTemplate,
    out: &Path,
    dtype: GgufDtype,
) -> Result<()> {
    let err = |message: String| ModelError::Gguf {
        path: template.path.clone(),
        message,
    };
    let mut by_name: HashMap<&str, &Tensor> =
        weights.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut tensors: Vec<(String, QTensor)> = Vec::with_capacity(template.tensors.len());
    for (name, shape) in &template.tensors {
        let hf = hf_name(name).ok_or_else(|| err(format!("tensor `{name}` has no HF name")))?;
        let t = by_name.remove(hf.as_str()).ok_or_else(|| {
            err(format!(
                "the policy has no `{hf}` for the template's `{name}`"
            ))
        })?;
        let mut t = tch::no_grad(|| t.detach().to_device(tch::Device::Cpu).to_kind(Kind::Float));
        if config.arch == Arch::Llama && name.ends_with(".weight") {
            if name.contains(".attn_q.") {
                t = permute(&t, config.num_heads);
            } else if name.contains(".attn_k.") {
                t = permute(&t, config.num_kv_heads);
            }
        }
        let dims: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        if &dims != shape {
            return Err(err(format!(
                "`{name}`: the policy's `{hf}` is {dims:?}, the template's {shape:?}"
            )));
        }
        let ty = if dims.len() == 1 {
            GgmlDType::F32
        } else {
            dtype.ggml()
        };
        tensors.push((
            name.clone(),
            qtensor(&t, ty).map_err(|e| err(format!("`{name}`: {e}")))?,
        ));
    }
    // Tied heads have no tensor of their own in GGUF; anything else left over is lost weight.
    by_name
        .remove("lm_head.weight")
        .filter(|_| !config.tie_embeddings);
    if let Some(left) = by_name.keys().min() {
        return Err(err(format!(
            "the template has no tensor for the policy's `{left}` (another model's file?)"
        )));
    }
    let file_type = Value::U32(dtype.file_type());
    let mut metadata: Vec<(&str, &Value)> = template
        .metadata
        .iter()
        // The writer aligns to GGUF's default of 32 bytes; a template's own alignment would lie.
        .filter(|(k, _)| k.as_str() != "general.alignment" && k.as_str() != "general.file_type")
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    metadata.push(("general.file_type", &file_type));
    metadata.sort_by_key(|(k, _)| *k);
    write_file(out, &metadata, &tensors)
}

/// A CPU f32 tensor as a GGUF tensor of type `ty`.
fn qtensor(t: &Tensor, ty: GgmlDType) -> std::result::Result<QTensor, String> {
    let dims: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
    let data = Vec::<f32>::try_from(t.contiguous().flatten(0, -1)).map_err(|e| e.to_string())?;
    let ct = candle_core::Tensor::from_vec(data, dims.as_slice(), &candle_core::Device::Cpu)
        .map_err(|e| e.to_string())?;
    QTensor::quantize(&ct, ty).map_err(|e| e.to_string())
}

/// Writes a GGUF file beside `out` and renames it into place, so a reader never sees half of it.
fn write_file(
    out: &Path,
    metadata: &[(&str, &Value)],
    tensors: &[(String, QTensor)],
) -> Result<()> {
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, q)| (n.as_str(), q)).collect();
    let tmp = out.with_extension("gguf.partial");
    let write = || -> std::result::Result<(), String> {
        let f = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
        let mut w = std::io::BufWriter::new(f);
        gguf_file::write(&mut w, metadata, &refs).map_err(|e| e.to_string())?;
        use std::io::Write;
        w.flush().map_err(|e| e.to_string())
    };
    write().map_err(|e| ModelError::Gguf {
        path: tmp.clone(),
        message: format!("writing: {e}"),
    })?;
    std::fs::rename(&tmp, out).map_err(|e| ModelError::io(out, e))
}

/// Writes a model's LoRA adapters (`adapters`: the `...q_proj.lora_A` `[rank, in]` and
/// `...lora_B` `[out, rank]` variables) as a llama.cpp LoRA adapter file: for each targeted
/// weight of `template` (a GGUF of the base model), `<name>.lora_a` and `<name>.lora_b` in f32,
/// with `general.type = "adapter"`, `adapter.type = "lora"` and `adapter.lora.alpha` (llama.cpp
/// scales the update by alpha over the rank it reads from the shapes). Llama q/k rows of `B`
/// are permuted as the weights are. Loaded beside the base file, it makes the server compute
/// what the policy computes, for a file of the adapters' size.
pub fn write_gguf_adapter(
    adapters: &[(String, Tensor)],
    lora: &crate::lora::LoraConfig,
    config: &ModelConfig,
    template: &GgufTemplate,
    out: &Path,
) -> Result<()> {
    let err = |message: String| ModelError::Gguf {
        path: template.path.clone(),
        message,
    };
    let mut by_name: HashMap<&str, &Tensor> =
        adapters.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    for (name, _) in &template.tensors {
        let Some(base) = hf_name(name).and_then(|h| h.strip_suffix(".weight").map(String::from))
        else {
            continue;
        };
        let (Some(a), Some(b)) = (
            by_name.remove(format!("{base}.lora_A").as_str()),
            by_name.remove(format!("{base}.lora_B").as_str()),
        ) else {
            continue;
        };
        let cpu = |t: &Tensor| {
            tch::no_grad(|| t.detach().to_device(tch::Device::Cpu).to_kind(Kind::Float))
        };
        let (a, mut b) = (cpu(a), cpu(b));
        if config.arch == Arch::Llama {
            if name.contains(".attn_q.") {
                b = permute(&b, config.num_heads);
            } else if name.contains(".attn_k.") {
                b = permute(&b, config.num_kv_heads);
            }
        }
        for (suffix, t) in [("lora_a", &a), ("lora_b", &b)] {
            let q = qtensor(t, GgmlDType::F32).map_err(|e| err(format!("`{name}`: {e}")))?;
            tensors.push((format!("{name}.{suffix}"), q));
        }
    }
    if let Some(left) = by_name.keys().min() {
        return Err(err(format!(
            "the template has no weight for the adapter `{left}` (another model's file?)"
        )));
    }
    let arch = template
        .metadata
        .get("general.architecture")
        .cloned()
        .ok_or_else(|| err("no general.architecture in the template".into()))?;
    let general_type = Value::String("adapter".into());
    let adapter_type = Value::String("lora".into());
    let alpha = Value::F32(lora.alpha as f32);
    let metadata: Vec<(&str, &Value)> = vec![
        ("adapter.lora.alpha", &alpha),
        ("adapter.type", &adapter_type),
        ("general.architecture", &arch),
        ("general.type", &general_type),
    ];
    write_file(out, &metadata, &tensors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permute_is_the_inverse_of_loading() {
        let t = Tensor::arange(8 * 3, (Kind::Float, tch::Device::Cpu)).reshape([8, 3]);
        let back = crate::load::gguf::unpermute_rows(&permute(&t, 2), 2);
        assert!(back.equal(&t));
    }
}
