//! A policy written as sharded safetensors, the layout vLLM and SGLang read from an HF folder:
//! `model-0000K-of-0000N.safetensors` and `model.safetensors.index.json` (`metadata.total_size`,
//! `weight_map`: tensor name -> shard file). A weight push of a large model is mostly this
//! write, so it is split: the tensors are dealt into `N` shards of about equal size by a plan
//! every rank computes alike from the same weights, each rank writes its own shards, and a rank
//! writes its shards on a thread each.

use std::collections::BTreeMap;
use std::path::Path;

use tch::{Device, Tensor};

use crate::error::{ModelError, Result, TorchContext};

/// The index file beside the shards.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Which tensors go into which shard.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPlan {
    /// Tensor names of each shard, in name order within it.
    pub shards: Vec<Vec<String>>,
    /// Bytes of all tensors.
    pub total_bytes: u64,
}

impl ShardPlan {
    /// Deals `weights` (name, bytes) into `n` shards (at least 1, at most one per tensor):
    /// names in order, a new shard started once the current one holds its share of the bytes,
    /// so the shards are contiguous in name order and about equal in size.
    pub fn new(weights: &[(String, u64)], n: usize) -> ShardPlan {
        let mut sorted: Vec<&(String, u64)> = weights.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let n = n.clamp(1, sorted.len().max(1));
        let total: u64 = sorted.iter().map(|w| w.1).sum();
        let mut shards: Vec<Vec<String>> = vec![Vec::new(); n];
        let mut done = 0u64;
        let mut k = 0;
        for (i, (name, bytes)) in sorted.iter().enumerate() {
            // Move on when this shard has its share, keeping a tensor for each later shard.
            let left = sorted.len() - i;
            let share = total * (k as u64 + 1) / n as u64;
            if k + 1 < n && !shards[k].is_empty() && (done >= share || left <= n - 1 - k) {
                k += 1;
            }
            shards[k].push(name.clone());
            done += bytes;
        }
        ShardPlan {
            shards,
            total_bytes: total,
        }
    }

    /// The file name of shard `k` (0-based), as HF names them.
    pub fn file_name(&self, k: usize) -> String {
        format!("model-{:05}-of-{:05}.safetensors", k + 1, self.shards.len())
    }

    /// The `model.safetensors.index.json` of the plan.
    pub fn index(&self) -> serde_json::Value {
        let map: BTreeMap<&str, String> = self
            .shards
            .iter()
            .enumerate()
            .flat_map(|(k, names)| names.iter().map(move |n| (n.as_str(), self.file_name(k))))
            .collect();
        serde_json::json!({
            "metadata": { "total_size": self.total_bytes },
            "weight_map": map,
        })
    }
}

/// The bytes a tensor takes in a safetensors file.
pub fn tensor_bytes(t: &Tensor) -> u64 {
    t.numel() as u64 * t.kind().elt_size_in_bytes() as u64
}

/// Writes the shards `mine` of `plan` into `dir` (which exists), one thread per shard; with
/// `index`, also the index file. `weights` holds every tensor of the plan.
pub fn write_shards(
    weights: &[(String, Tensor)],
    plan: &ShardPlan,
    mine: &[usize],
    dir: &Path,
    index: bool,
) -> Result<()> {
    let by_name: BTreeMap<&str, &Tensor> = weights.iter().map(|(n, t)| (n.as_str(), t)).collect();
    // Each thread gets its shard's tensors, copied to the CPU and made contiguous here (tch
    // tensors move between threads; the copies are what the file holds).
    let mut jobs = Vec::new();
    for &k in mine {
        let names = plan.shards.get(k).ok_or_else(|| ModelError::Config {
            path: dir.to_path_buf(),
            field: "shard".into(),
            message: format!("shard {k} of a plan of {}", plan.shards.len()),
        })?;
        let mut tensors = Vec::with_capacity(names.len());
        for n in names {
            let t = by_name.get(n.as_str()).ok_or_else(|| ModelError::Config {
                path: dir.to_path_buf(),
                field: n.clone(),
                message: "a tensor of the shard plan that the model does not have".into(),
            })?;
            tensors.push((n.clone(), t.detach().to_device(Device::Cpu).contiguous()));
        }
        jobs.push((dir.join(plan.file_name(k)), tensors));
    }
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(path, tensors)| {
                scope.spawn(move || {
                    Tensor::write_safetensors(&tensors, &path)
                        .ctx(|| format!("writing {}", path.display()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(ModelError::Config {
                        path: dir.to_path_buf(),
                        field: "shard".into(),
                        message: "the thread writing a shard panicked".into(),
                    })
                })
            })
            .collect()
    });
    results.into_iter().collect::<Result<()>>()?;
    if index {
        let path = dir.join(INDEX_FILE);
        let text = serde_json::to_string_pretty(&plan.index()).map_err(|e| ModelError::Json {
            path: path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, text).map_err(|e| ModelError::io(&path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(list: &[(&str, u64)]) -> Vec<(String, u64)> {
        list.iter().map(|(n, b)| (n.to_string(), *b)).collect()
    }

    #[test]
    fn tensors_are_dealt_in_name_order_into_shards_of_about_equal_size() {
        let w = sizes(&[("d", 10), ("a", 10), ("c", 10), ("b", 10), ("e", 40)]);
        let plan = ShardPlan::new(&w, 2);
        assert_eq!(plan.shards, vec![vec!["a", "b", "c", "d"], vec!["e"]]);
        assert_eq!(plan.total_bytes, 80);
        // Never an empty shard: more shards than tensors gives one tensor each.
        let plan = ShardPlan::new(&w, 9);
        assert_eq!(plan.shards.len(), 5);
        assert!(plan.shards.iter().all(|s| s.len() == 1));
        // One big tensor first still leaves a tensor for each later shard.
        let w = sizes(&[("a", 100), ("b", 1), ("c", 1)]);
        let plan = ShardPlan::new(&w, 3);
        assert_eq!(plan.shards, vec![vec!["a"], vec!["b"], vec!["c"]]);
        assert_eq!(plan.file_name(2), "model-00003-of-00003.safetensors");
        let index = plan.index();
        assert_eq!(index["weight_map"]["b"], "model-00002-of-00003.safetensors");
        assert_eq!(index["metadata"]["total_size"], 102);
    }
}
