//! ZeRO-1: AdamW whose state is sharded across the ranks of a data-parallel job.
//!
//! The trainable parameters, sorted by name, are laid end to end in one flat fp32 vector
//! (padded to a multiple of the world size); rank r owns the r-th equal slice. A step
//! reduce-scatters the flat gradient (each rank receives the summed gradient of its slice only),
//! takes the global gradient norm from one scalar all-reduce, updates its slice of the fp32
//! master weights and both moments, and all-gathers the updated masters into every rank's
//! parameters. Optimizer memory per rank is `3 * 4 bytes * P / world`; the fp32 masters also make
//! this the mixed-precision optimizer when the model computes in bf16.
//!
//! The arithmetic is [`fulcrum_model::optim::AdamW`]'s, element for element (decoupled weight
//! decay on matrices only), so the weights match replicated AdamW up to the order of the norm's
//! summation.

use std::collections::BTreeMap;
use std::path::Path;

use fulcrum_model::optim::{
    adam_update, defined_grads, nothing_left, take_named, trainable_by_name, AdamWConfig, Update,
};
use fulcrum_model::ModelError;
use tch::nn::VarStore;
use tch::{Kind, Tensor};

use crate::error::TrainError;
use crate::ranks::Ranks;

/// AdamW over this rank's slice of the flat parameters.
pub struct Zero1 {
    pub config: AdamWConfig,
    params: Vec<(String, Tensor)>,
    /// Padded length of the flat vector and this rank's slice of it.
    padded: i64,
    start: i64,
    len: i64,
    master: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    /// 1 where weight decay applies (matrices), 0 elsewhere.
    decay: Tensor,
    step: i64,
}

impl std::fmt::Debug for Zero1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Zero1(slice {}+{} of {}, step {})",
            self.start, self.len, self.padded, self.step
        )
    }
}

impl Zero1 {
    /// Shards AdamW over the trainable variables of `vs` as they are now (fp32 masters are
    /// taken from them: build it before casting the model to bf16).
    pub fn new(vs: &VarStore, config: AdamWConfig, rank: usize, world: usize) -> Zero1 {
        let params = trainable_by_name(vs);
        let total: i64 = params.iter().map(|(_, p)| p.numel() as i64).sum();
        let world = world as i64;
        let len = (total + world - 1) / world;
        let padded = len * world;
        let start = rank as i64 * len;
        let device = vs.device();
        let (flat, decay) = tch::no_grad(|| {
            let flat = flatten(params.iter().map(|(_, p)| p.shallow_clone()), padded);
            let masks: Vec<Tensor> = params
                .iter()
                .map(|(_, p)| {
                    let v = if p.dim() >= 2 { 1.0 } else { 0.0 };
                    Tensor::full([p.numel() as i64], v, (Kind::Float, device))
                })
                .collect();
            (flat, pad(Tensor::cat(&masks, 0), padded))
        });
        let master = flat.narrow(0, start, len).copy();
        Zero1 {
            config,
            params,
            padded,
            start,
            len,
            exp_avg: master.zeros_like(),
            exp_avg_sq: master.zeros_like(),
            decay: decay.narrow(0, start, len).copy(),
            master,
            step: 0,
        }
    }

    pub fn step_count(&self) -> i64 {
        self.step
    }

    /// Sets every gradient to zero.
    pub fn zero_grad(&mut self) {
        for (_, p) in &self.params {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }

    /// One guarded update from the gradients back-propagated on this rank: skipped when
    /// `loss` (summed over ranks) or the global gradient is not finite, else clipped to
    /// `grad_clip` (0: off) and applied at `lr`.
    pub fn update(
        &mut self,
        ranks: &mut Ranks,
        loss: f64,
        grad_clip: f64,
        lr: f64,
    ) -> Result<Update, TrainError> {
        let vs_grads = defined_grads(&self.params);
        let flat = flatten(vs_grads.into_iter(), self.padded);
        let mut g = match ranks.group() {
            Some(pg) => pg.reduce_scatter(&flat, fulcrum_dist::ReduceOp::Sum)?,
            None => flat,
        };
        let sumsq = tch::no_grad(|| g.square().sum(Kind::Double).double_value(&[]));
        let norm = ranks.sum(&[sumsq])?[0].sqrt();
        if !loss.is_finite() || !norm.is_finite() {
            self.zero_grad();
            return Ok(Update::Skipped);
        }
        if grad_clip > 0.0 && norm > grad_clip {
            let _ = g.g_mul_scalar_(grad_clip / (norm + 1e-6));
        }
        self.step += 1;
        let c = self.config;
        tch::no_grad(|| {
            if c.weight_decay != 0.0 {
                let factor = (&self.decay * (-lr * c.weight_decay)).g_add_scalar_(1.0);
                let _ = self.master.g_mul_(&factor);
            }
            let update = adam_update(
                &mut self.exp_avg,
                &mut self.exp_avg_sq,
                &g,
                &c,
                self.step,
                lr,
            );
            let _ = self.master.g_add_(&update);
        });
        let full = self.gather(ranks, &self.master.shallow_clone())?;
        self.copy_into_params(&full);
        self.zero_grad();
        Ok(Update::Applied { grad_norm: norm })
    }

    /// The whole flat vector from every rank's slice `part` (collective).
    fn gather(&self, ranks: &mut Ranks, part: &Tensor) -> Result<Tensor, TrainError> {
        Ok(match ranks.group() {
            Some(pg) => pg.all_gather(part)?.flatten(0, -1),
            None => part.shallow_clone(),
        })
    }

    /// Splits a full flat vector into tensors named `{prefix}{param}` shaped like the params.
    fn unflatten(&self, full: &Tensor, prefix: &str) -> Vec<(String, Tensor)> {
        let mut at = 0;
        self.params
            .iter()
            .map(|(name, p)| {
                let n = p.numel() as i64;
                let t = full.narrow(0, at, n).view_as(p).copy();
                at += n;
                (format!("{prefix}{name}"), t)
            })
            .collect()
    }

    /// The whole optimizer state as [`fulcrum_model::optim::AdamW::state`] names it, gathered
    /// from every rank (collective: every rank must call it), and the step count.
    pub fn full_state(
        &self,
        ranks: &mut Ranks,
    ) -> Result<(Vec<(String, Tensor)>, i64), TrainError> {
        let m = self.gather(ranks, &self.exp_avg)?;
        let v = self.gather(ranks, &self.exp_avg_sq)?;
        let mut out = self.unflatten(&m, "exp_avg.");
        out.extend(self.unflatten(&v, "exp_avg_sq."));
        Ok((out, self.step))
    }

    /// The fp32 master weights by parameter name (collective).
    pub fn master_weights(&self, ranks: &mut Ranks) -> Result<Vec<(String, Tensor)>, TrainError> {
        let full = self.gather(ranks, &self.master)?;
        Ok(self.unflatten(&full, ""))
    }

    /// Takes this rank's slice of a whole optimizer state (written at any rank count).
    pub fn load_state(
        &mut self,
        named: Vec<(String, Tensor)>,
        step: i64,
        source: &Path,
    ) -> Result<(), ModelError> {
        let mut named: BTreeMap<String, Tensor> = named.into_iter().collect();
        let exp_avg = self.take_whole(&mut named, "exp_avg.", source)?;
        let exp_avg_sq = self.take_whole(&mut named, "exp_avg_sq.", source)?;
        nothing_left(named, source)?;
        tch::no_grad(|| {
            self.exp_avg.copy_(&exp_avg.narrow(0, self.start, self.len));
            self.exp_avg_sq
                .copy_(&exp_avg_sq.narrow(0, self.start, self.len));
        });
        self.step = step;
        Ok(())
    }

    /// Takes this rank's slice of whole master weights and copies all of them into the
    /// parameters.
    pub fn load_master_weights(
        &mut self,
        named: Vec<(String, Tensor)>,
        source: &Path,
    ) -> Result<(), ModelError> {
        let mut named: BTreeMap<String, Tensor> = named.into_iter().collect();
        let whole = self.take_whole(&mut named, "", source)?;
        nothing_left(named, source)?;
        self.copy_into_params(&whole);
        tch::no_grad(|| self.master.copy_(&whole.narrow(0, self.start, self.len)));
        Ok(())
    }

    /// Copies a whole flat vector into the parameters (rounded to their dtype).
    fn copy_into_params(&self, whole: &Tensor) {
        tch::no_grad(|| {
            let mut at = 0;
            for (_, p) in &self.params {
                let n = p.numel() as i64;
                p.shallow_clone().copy_(&whole.narrow(0, at, n).view_as(p));
                at += n;
            }
        });
    }

    /// The whole flat vector made of the tensors `{prefix}{param}` of `named`.
    fn take_whole(
        &self,
        named: &mut BTreeMap<String, Tensor>,
        prefix: &str,
        source: &Path,
    ) -> Result<Tensor, ModelError> {
        let mut parts = Vec::with_capacity(self.params.len());
        for (name, p) in &self.params {
            let t = take_named(named, &format!("{prefix}{name}"), &p.size(), source)?;
            parts.push(t.to_device(p.device()));
        }
        Ok(flatten(parts.into_iter(), self.padded))
    }
}

/// Tensors laid end to end as one fp32 vector, zero-padded to `padded` elements.
fn flatten(ts: impl Iterator<Item = Tensor>, padded: i64) -> Tensor {
    let flats: Vec<Tensor> = ts
        .map(|t| t.detach().flatten(0, -1).to_kind(Kind::Float))
        .collect();
    pad(Tensor::cat(&flats, 0), padded)
}

fn pad(flat: Tensor, padded: i64) -> Tensor {
    let n = flat.size()[0];
    if n == padded {
        return flat;
    }
    let zeros = Tensor::zeros([padded - n], (flat.kind(), flat.device()));
    Tensor::cat(&[flat, zeros], 0)
}
