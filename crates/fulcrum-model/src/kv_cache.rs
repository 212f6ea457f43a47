//! The preallocated key/value cache used by the sampler.
//!
//! One `[batch, kv_heads, capacity, head_dim]` tensor per layer for keys and one for values,
//! allocated once; each forward writes its new positions in place and attends to a view of the
//! filled prefix, so decoding never re-concatenates. All rows share one write position `len`:
//! the sampler left-pads prompts so that they end together, and masks the padding.
//! Rows can be dropped (finished sequences) or replicated (G samples per prompt) by indexing
//! the batch dimension.

use tch::{Device, Kind, Tensor};

use crate::config::ModelConfig;
use crate::error::{ModelError, Result, TorchContext};

/// Keys and values of every layer for a batch of sequences.
#[derive(Debug)]
pub struct KvCache {
    pub(crate) keys: Vec<Tensor>,
    pub(crate) values: Vec<Tensor>,
    len: i64,
    capacity: i64,
}

impl KvCache {
    /// Allocate a cache for `batch` rows of up to `capacity` positions.
    pub fn new(
        cfg: &ModelConfig,
        batch: i64,
        capacity: i64,
        kind: Kind,
        device: Device,
    ) -> Result<Self> {
        let shape = [batch, cfg.num_kv_heads, capacity, cfg.head_dim];
        let mut keys = Vec::with_capacity(cfg.num_layers as usize);
        let mut values = Vec::with_capacity(cfg.num_layers as usize);
        for layer in 0..cfg.num_layers {
            let ctx = || format!("allocating the KV cache of layer {layer} with shape {shape:?}");
            keys.push(Tensor::f_zeros(shape, (kind, device)).ctx(ctx)?);
            values.push(Tensor::f_zeros(shape, (kind, device)).ctx(ctx)?);
        }
        Ok(KvCache {
            keys,
            values,
            len: 0,
            capacity,
        })
    }

    /// Positions filled so far (the same for every row).
    pub fn len(&self) -> i64 {
        self.len
    }

    /// True before the first forward.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the cache can hold.
    pub fn capacity(&self) -> i64 {
        self.capacity
    }

    /// Rows in the cache.
    pub fn batch(&self) -> i64 {
        self.keys.first().map_or(0, |k| k.size()[0])
    }

    /// Check that `n` more positions fit.
    pub(crate) fn reserve(&self, n: i64) -> Result<()> {
        if self.len + n > self.capacity {
            return Err(ModelError::Invalid(format!(
                "KV cache full: {} positions filled, {n} more requested, capacity {}",
                self.len, self.capacity
            )));
        }
        Ok(())
    }

    /// Write `k`, `v` (`[batch, kv_heads, n, head_dim]`) of `layer` at the current position and
    /// return views of the filled prefix including them.
    pub(crate) fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> (Tensor, Tensor) {
        let n = k.size()[2];
        self.keys[layer].narrow(2, self.len, n).copy_(k);
        self.values[layer].narrow(2, self.len, n).copy_(v);
        (
            self.keys[layer].narrow(2, 0, self.len + n),
            self.values[layer].narrow(2, 0, self.len + n),
        )
    }

    /// Advance the write position after every layer has appended `n` positions.
    pub(crate) fn advance(&mut self, n: i64) {
        self.len += n;
    }

    /// Room for `capacity` positions (more than now), the filled ones kept: a multi-turn
    /// response's tool answers may outgrow the budget the cache was sized for.
    pub fn grow(&mut self, capacity: i64) -> Result<()> {
        if capacity <= self.capacity {
            return Ok(());
        }
        for t in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let mut shape = t.size();
            shape[2] = capacity;
            let bigger = Tensor::f_zeros(&shape, (t.kind(), t.device()))
                .ctx(|| format!("growing the KV cache to {capacity} positions"))?;
            bigger
                .narrow(2, 0, self.len)
                .copy_(&t.narrow(2, 0, self.len));
            *t = bigger;
        }
        self.capacity = capacity;
        Ok(())
    }

    /// Keep only the rows in `index` (an int64 tensor on the cache's device), in that order.
    /// Used both to drop finished rows and to replicate a prefilled prompt into G rows.
    pub fn select_rows(&mut self, index: &Tensor) -> Result<()> {
        for t in self.keys.iter_mut().chain(self.values.iter_mut()) {
            *t = t
                .f_index_select(0, index)
                .ctx(|| "selecting KV cache rows".into())?;
        }
        Ok(())
    }
}
