//! Loading weights into a [`crate::Model`]: HF folders (`hf.rs`) and GGUF files (`gguf.rs`).
//!
//! Both end in [`copy_weights`], which copies named tensors into the VarStore and fails on a
//! missing, misshapen or unused tensor, naming it and the file. The only tensors ignored are
//! RoPE frequency buffers that some exporters write (`rotary_emb.inv_freq`), which we recompute.
//!
//! Before that, and before any tensor is read or the model allocated, [`check_shapes`] holds
//! the config against the shapes the weight files declare (safetensors headers, GGUF tensor
//! infos): a config that lies about its vocabulary, layers or widths is refused naming the
//! field, the file and what the weights hold.

pub mod gguf;
pub mod hf;
pub(crate) mod safetensors;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use tch::{nn::VarStore, Tensor};

use crate::config::{Field, ModelConfig};
use crate::error::{ModelError, Result, TorchContext};

/// Tensors some exporters write that the model recomputes.
fn ignored(name: &str) -> bool {
    name.ends_with("rotary_emb.inv_freq")
}

/// Where the config and the weights of a model come from, for [`check_shapes`]'s errors.
pub(crate) struct Sources<'a> {
    /// The file of the hyper-parameters (`config.json`, or the GGUF file).
    pub config: &'a Path,
    /// How that file names each field.
    pub name: &'a dyn Fn(Field) -> String,
    /// The weights as a whole (the single file, the shard index, the GGUF file).
    pub weights: &'a Path,
}

/// Checks the shapes the weight files declare (`found`: HF name -> shape and the file holding
/// it) against `cfg`, before anything is read: first the hyper-parameters the files contradict
/// outright (embedding rows and the vocabulary, embedding width and the hidden size, the
/// layers present and the layer count, the first layer's projections and the widths and
/// heads), each an error naming the field; then every parameter: a missing, misshapen or
/// unused tensor is an error naming it and its file.
pub(crate) fn check_shapes(
    cfg: &ModelConfig,
    found: &BTreeMap<String, (Vec<i64>, PathBuf)>,
    src: &Sources,
) -> Result<()> {
    let disagree = |field: Field, value: i64, weights: &Path, what: String| {
        Err(ModelError::WeightsDisagree {
            config: src.config.to_path_buf(),
            field: (src.name)(field),
            value,
            weights: weights.to_path_buf(),
            found: what,
        })
    };
    let dim = |name: &str, axis: usize| {
        found
            .get(name)
            .and_then(|(shape, file)| Some((*shape.get(axis)?, file.as_path())))
    };
    let embed = "model.embed_tokens.weight";
    if let Some((rows, file)) = dim(embed, 0) {
        if rows != cfg.vocab_size {
            return disagree(
                Field::Vocab,
                cfg.vocab_size,
                file,
                format!("holds {rows} rows of `{embed}` (one per token)"),
            );
        }
    }
    if let Some((cols, file)) = dim(embed, 1) {
        if cols != cfg.hidden_size {
            return disagree(
                Field::Hidden,
                cfg.hidden_size,
                file,
                format!("holds `{embed}` {cols} wide"),
            );
        }
    }
    let layers: BTreeSet<i64> = found
        .keys()
        .filter_map(|n| {
            n.strip_prefix("model.layers.")?
                .split('.')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    let present = layers.len() as i64;
    let contiguous = layers.last().is_none_or(|&last| last + 1 == present);
    if present != cfg.num_layers || !contiguous {
        let what = match (layers.first(), layers.last()) {
            (Some(a), Some(b)) if contiguous => {
                format!("holds {present} layers (model.layers.{a} to model.layers.{b})")
            }
            (Some(_), Some(b)) => format!("holds {present} layers numbered up to {b}, with gaps"),
            _ => "holds no layers".to_string(),
        };
        return disagree(Field::Layers, cfg.num_layers, src.weights, what);
    }
    let first = |part: &str| dim(&format!("model.layers.0.{part}"), 0);
    if let Some((rows, file)) = first("mlp.gate_proj.weight") {
        if rows != cfg.intermediate_size {
            return disagree(
                Field::Intermediate,
                cfg.intermediate_size,
                file,
                format!("holds `model.layers.0.mlp.gate_proj.weight` with {rows} rows"),
            );
        }
    }
    for (part, field, heads) in [
        ("self_attn.q_proj.weight", Field::Heads, cfg.num_heads),
        ("self_attn.k_proj.weight", Field::KvHeads, cfg.num_kv_heads),
    ] {
        if let Some((rows, file)) = first(part) {
            if rows != heads * cfg.head_dim {
                return disagree(
                    field,
                    heads,
                    file,
                    format!(
                        "holds `model.layers.0.{part}` with {rows} rows, not {heads} heads x \
                         {} {} = {}",
                        (src.name)(Field::HeadDim),
                        cfg.head_dim,
                        heads * cfg.head_dim
                    ),
                );
            }
        }
    }
    let mut left: BTreeSet<&str> = found
        .keys()
        .map(String::as_str)
        .filter(|n| !ignored(n))
        .collect();
    for (name, expected) in cfg.parameter_shapes() {
        let Some((got, file)) = found.get(&name) else {
            return Err(ModelError::MissingTensor {
                path: src.weights.to_path_buf(),
                name,
            });
        };
        if *got != expected {
            return Err(ModelError::Shape {
                path: file.clone(),
                name,
                expected,
                got: got.clone(),
            });
        }
        left.remove(name.as_str());
    }
    match left.into_iter().next() {
        None => Ok(()),
        Some(name) => Err(ModelError::UnusedTensor {
            path: found[name].1.clone(),
            name: name.to_string(),
        }),
    }
}

/// Copy `tensors` (HF names) into the variables of `vs`, converting to each variable's dtype.
pub(crate) fn copy_weights(
    vs: &VarStore,
    mut tensors: HashMap<String, Tensor>,
    source: &Path,
) -> Result<()> {
    tensors.retain(|name, _| !ignored(name));
    copy_named(vs.variables().into_iter().collect(), tensors, source)
}

/// Copy each of `variables` from the tensor of the same name in `tensors` (read from `source`),
/// converting to the variable's dtype. A variable without its tensor, a tensor of another
/// shape, or a tensor left over is an error naming it and the file.
pub(crate) fn copy_named(
    mut variables: Vec<(String, Tensor)>,
    mut tensors: HashMap<String, Tensor>,
    source: &Path,
) -> Result<()> {
    variables.sort_by(|a, b| a.0.cmp(&b.0));
    tch::no_grad(|| -> Result<()> {
        for (name, mut var) in variables {
            let Some(t) = tensors.remove(&name) else {
                return Err(ModelError::MissingTensor {
                    path: source.to_path_buf(),
                    name,
                });
            };
            if t.size() != var.size() {
                return Err(ModelError::Shape {
                    path: source.to_path_buf(),
                    name,
                    expected: var.size(),
                    got: t.size(),
                });
            }
            var.f_copy_(&t)
                .ctx(|| format!("{}: copying tensor `{name}`", source.display()))?;
        }
        Ok(())
    })?;
    let mut unused: Vec<String> = tensors.into_keys().collect();
    unused.sort();
    match unused.into_iter().next() {
        None => Ok(()),
        Some(name) => Err(ModelError::UnusedTensor {
            path: source.to_path_buf(),
            name,
        }),
    }
}
