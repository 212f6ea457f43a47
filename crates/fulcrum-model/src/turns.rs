//! Multi-turn sampling: a response that calls a tool in its middle. The sampler asks a
//! [`Turns`] after every token whether the row has just completed a call; such a row waits
//! (its cache slot of each later decode step is masked) until every row of the batch has
//! finished or is waiting, then the calls are answered together and each answer's tokens are
//! written into the KV cache after the row's own tokens, in one forward of the whole batch:
//! the cache is extended, never recomputed from the start.
//!
//! Rows answer with different numbers of tokens, and the cache has one write position for all
//! rows, so each answer is right-aligned in a block as long as the longest and the slots before
//! it are masked, like a prompt's left padding: a row's positions count only its unmasked
//! slots (`pad` holds how many masked slots each row has so far), so what a row samples does
//! not depend on the other rows, as for single-turn sampling.

use tch::{Device, Kind, Tensor};

use crate::error::{ModelError, Result};
use crate::kv_cache::KvCache;
use crate::transformer::{AttnMask, Transformer};

/// The tool side of a multi-turn sampling.
pub trait Turns {
    /// Whether row `row` (prompt `row / G`, sample `row % G` of the batch) has just completed
    /// a tool call, given its response so far: `tokens` (answers included) and `tool` (true
    /// for the tokens that were an answer).
    fn call_ended(&mut self, row: usize, tokens: &[i64], tool: &[bool]) -> Result<bool>;
    /// The tokens that answer each call `(row, response so far)`, in the order given: the
    /// tool's output as the model's template renders a tool turn. Never empty.
    fn respond(&mut self, calls: &[(usize, &[i64])]) -> Result<Vec<Vec<i64>>>;
}

/// The per-row bookkeeping of the batch being decoded that masking mid-sequence slots needs.
pub(crate) struct Slots {
    /// `[batch]` int64: masked slots of each row so far (its positions are slot - pad).
    pub pad: Tensor,
    /// `[batch, capacity]` bool: which cache slots a row may attend to.
    pub key_valid: Tensor,
    /// Some slot of some row is masked.
    pub any_pad: bool,
}

impl Slots {
    /// Masks the slot about to be written (`cache.len()`) of the rows marked in `idle`: a
    /// waiting row is fed a token it did not sample, which must not enter its context.
    pub(crate) fn mask_next(&mut self, cache: &KvCache, idle: &[bool]) -> Result<()> {
        if !idle.iter().any(|&w| w) {
            return Ok(());
        }
        let device = self.pad.device();
        let keep: Vec<bool> = idle.iter().map(|&w| !w).collect();
        let keep = Tensor::from_slice(&keep)
            .view([idle.len() as i64, 1])
            .to_device(device);
        self.key_valid.narrow(1, cache.len(), 1).copy_(&keep);
        let add: Vec<i64> = idle.iter().map(|&w| i64::from(w)).collect();
        self.pad = &self.pad + Tensor::from_slice(&add).to_device(device);
        self.any_pad = true;
        Ok(())
    }
}

/// Writes `answers[i]` (row `i` of the cache's batch; none empty) into the cache after each
/// row's tokens, right-aligned in one block, and returns the logits `[batch, vocab]` of the
/// next token of every row.
pub(crate) fn feed_answers(
    net: &Transformer,
    cache: &mut KvCache,
    slots: &mut Slots,
    answers: &[Vec<i64>],
) -> Result<Tensor> {
    let b = answers.len();
    if b as i64 != cache.batch() {
        return Err(ModelError::Invalid(format!(
            "{b} tool answers for a batch of {}",
            cache.batch()
        )));
    }
    let t = answers.iter().map(Vec::len).max().unwrap_or(0);
    if answers.iter().any(Vec::is_empty) {
        return Err(ModelError::Invalid("an empty tool answer".into()));
    }
    let device: Device = slots.pad.device();
    let len = cache.len();
    let t = t as i64;
    if len + t > cache.capacity() {
        // Answers are longer than the budget the cache was sized for: room for this block and
        // as much again, so that a few more turns do not each copy the cache.
        let extra = (len + t - cache.capacity()).max(t);
        cache.grow(cache.capacity() + extra)?;
        let more = Tensor::ones([b as i64, extra], (Kind::Bool, device));
        slots.key_valid = Tensor::cat(&[&slots.key_valid, &more], 1);
    }
    // Right-align each answer; the slots before it are masked.
    let mut ids = vec![0i64; b * t as usize];
    let mut valid = vec![false; b * t as usize];
    let mut skipped = vec![0i64; b];
    for (i, a) in answers.iter().enumerate() {
        let start = t as usize - a.len();
        ids[i * t as usize + start..(i + 1) * t as usize].copy_from_slice(a);
        for v in &mut valid[i * t as usize + start..(i + 1) * t as usize] {
            *v = true;
        }
        skipped[i] = start as i64;
    }
    let ids = Tensor::from_slice(&ids)
        .view([b as i64, t])
        .to_device(device);
    let valid = Tensor::from_slice(&valid)
        .view([b as i64, t])
        .to_device(device);
    slots.key_valid.narrow(1, len, t).copy_(&valid);
    slots.pad = &slots.pad + Tensor::from_slice(&skipped).to_device(device);
    slots.any_pad = true;
    let q_slots = Tensor::arange_start(len, len + t, (Kind::Int64, device));
    let positions = (q_slots.unsqueeze(0) - slots.pad.unsqueeze(1)).clamp_min(0);
    // Query slot q may see key slot k when k is valid and k <= q; a masked query sees itself
    // (so that its softmax has a key; its output is never used).
    let keys = Tensor::arange(len + t, (Kind::Int64, device));
    let causal = keys
        .view([1, 1, len + t])
        .le_tensor(&q_slots.view([1, t, 1]));
    let own = keys
        .view([1, 1, len + t])
        .eq_tensor(&q_slots.view([1, t, 1]));
    let kv = slots.key_valid.narrow(1, 0, len + t).unsqueeze(1);
    let mask = causal.logical_and(&kv).logical_or(&own).unsqueeze(1);
    let hidden = net.forward_hidden(&ids, &positions, &AttnMask::Explicit(&mask), Some(cache))?;
    Ok(net.logits(&hidden.select(1, t - 1)))
}
