//! The policy being trained: the model, its optimizer, the frozen reference, and the one guarded
//! update that RL and SFT share (design.md steps 7-8).
//!
//! [`guarded_update`] zeroes the gradients, runs the caller's forward/backward, sums the
//! gradients over the ranks of a data-parallel job, and then either skips (non-finite loss or
//! gradient: weights and optimizer state untouched) or clips to the global norm and takes the
//! AdamW step. Both trainers count what it skipped and report it.

use fulcrum_model::optim::LrSchedule;
use fulcrum_model::optim::{
    clip_grad_norm, grad_norm, grads_are_finite, AdamW, AdamWConfig, Update,
};
use fulcrum_model::{Dtype, Model};
use tch::Kind;

use crate::config::{OptimConfig, ScheduleKind};
use crate::error::TrainError;
use crate::ranks::Ranks;
use crate::zero::Zero1;

/// The policy being trained, its optimizer, and the frozen reference (when KL is on).
pub struct Policy {
    pub model: Model,
    pub opt: Optimizer,
    pub reference: Option<Model>,
}

/// AdamW, whole on every rank or sharded across them.
pub enum Optimizer {
    /// The whole AdamW state on every rank (one process, or `dist.zero1 = false`), applied
    /// to the all-reduced gradient; fp32 master weights when the model computes in bf16.
    Replicated(AdamW),
    /// ZeRO-1 (`dist.zero1`, several ranks): each rank holds and updates a slice.
    Sharded(Zero1),
}

impl From<AdamW> for Optimizer {
    fn from(a: AdamW) -> Self {
        Optimizer::Replicated(a)
    }
}

impl Optimizer {
    pub fn config(&self) -> AdamWConfig {
        match self {
            Optimizer::Replicated(a) => a.config,
            Optimizer::Sharded(z) => z.config,
        }
    }

    pub fn step_count(&self) -> i64 {
        match self {
            Optimizer::Replicated(a) => a.step_count(),
            Optimizer::Sharded(z) => z.step_count(),
        }
    }

    pub fn zero_grad(&mut self) {
        match self {
            Optimizer::Replicated(a) => a.zero_grad(),
            Optimizer::Sharded(z) => z.zero_grad(),
        }
    }

    /// The replicated AdamW (one process), for code that reads its state directly.
    pub fn replicated(&self) -> Option<&AdamW> {
        match self {
            Optimizer::Replicated(a) => Some(a),
            Optimizer::Sharded(_) => None,
        }
    }
}

/// The AdamW hyper-parameters of `[optim]`.
pub fn adamw_config(o: &OptimConfig) -> AdamWConfig {
    AdamWConfig {
        beta1: o.beta1,
        beta2: o.beta2,
        eps: o.eps,
        weight_decay: o.weight_decay,
    }
}

/// A fresh AdamW over `model` with `[optim]`'s hyper-parameters (SFT, and RL in one process
/// at f32).
pub fn new_optimizer(o: &OptimConfig, model: &Model) -> AdamW {
    AdamW::new(model.var_store(), adamw_config(o))
}

/// The RL optimizer for `model` (still in f32) on `ranks` (`zero1`: `dist.zero1`), after which
/// the model is cast to the compute dtype `dtype` (`model.dtype`): `bf16` keeps fp32 master
/// weights in the optimizer, `bf16-pure` does not.
pub fn rl_optimizer(
    o: &OptimConfig,
    dtype: Dtype,
    zero1: bool,
    model: &mut Model,
    ranks: &Ranks,
) -> Optimizer {
    let c = adamw_config(o);
    let vs = model.var_store();
    let opt = if ranks.world() > 1 && zero1 {
        Optimizer::Sharded(Zero1::new(vs, c, ranks.rank(), ranks.world()))
    } else if dtype == Dtype::Bf16 {
        Optimizer::Replicated(AdamW::with_master_weights(vs, c))
    } else {
        Optimizer::Replicated(AdamW::new(vs, c))
    };
    if dtype != Dtype::F32 {
        model.set_kind(Kind::BFloat16);
    }
    opt
}

/// The RL learning-rate schedule: `optim.schedule` over the run's `steps`.
pub fn rl_schedule(o: &OptimConfig, steps: u64) -> LrSchedule {
    match o.schedule {
        ScheduleKind::Cosine => LrSchedule::Cosine {
            peak: o.lr,
            min: o.lr * o.min_lr_ratio,
            warmup: o.warmup_steps,
            total: steps,
        },
        ScheduleKind::Constant => LrSchedule::Constant {
            peak: o.lr,
            warmup: o.warmup_steps,
        },
    }
}

/// One optimizer step guarded against non-finite numbers. `backward` accumulates the gradients
/// of one update into the parameters of `model` and returns its statistics and loss; then the
/// step is skipped (gradients zeroed, nothing else touched) if the loss or any gradient is not
/// finite, else the gradients are clipped to `grad_clip` (0: off; the norm is measured either
/// way) and AdamW steps at `lr`.
pub fn guarded_update<S>(
    model: &Model,
    opt: &mut Optimizer,
    ranks: &mut Ranks,
    grad_clip: f64,
    lr: f64,
    backward: impl FnOnce() -> Result<(S, f64), TrainError>,
) -> Result<(S, Update), TrainError> {
    opt.zero_grad();
    let (stats, loss) = backward()?;
    // A rank's loss is its share of the step's: the sum is the global loss.
    let loss = ranks.sum(&[loss])?[0];
    let opt = match opt {
        Optimizer::Sharded(z) => return Ok((stats, z.update(ranks, loss, grad_clip, lr)?)),
        Optimizer::Replicated(a) => a,
    };
    let vs = model.var_store();
    ranks.all_reduce_grads(vs)?;
    if !loss.is_finite() || !grads_are_finite(vs) {
        opt.zero_grad();
        return Ok((stats, Update::Skipped));
    }
    let norm = if grad_clip > 0.0 {
        clip_grad_norm(vs, grad_clip)
    } else {
        grad_norm(vs)
    };
    opt.step(lr);
    opt.zero_grad();
    Ok((stats, Update::Applied { grad_norm: norm }))
}
