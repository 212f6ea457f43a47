//! Loading weights into a [`crate::Model`]: HF folders (`hf.rs`) and GGUF files (`gguf.rs`).
//!
//! Both end in [`copy_weights`], which copies named tensors into the VarStore and fails on a
//! missing, misshapen or unused tensor, naming it and the file. The only tensors ignored are
//! RoPE frequency buffers that some exporters write (`rotary_emb.inv_freq`), which we recompute.

pub mod gguf;
pub mod hf;

use std::collections::HashMap;
use std::path::Path;

use tch::{nn::VarStore, Tensor};

use crate::error::{ModelError, Result, TorchContext};

/// Copy `tensors` (HF names) into the variables of `vs`, converting to each variable's dtype.
pub(crate) fn copy_weights(
    vs: &VarStore,
    mut tensors: HashMap<String, Tensor>,
    source: &Path,
) -> Result<()> {
    tensors.retain(|name, _| !name.ends_with("rotary_emb.inv_freq"));
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
