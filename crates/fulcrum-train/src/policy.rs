//! The policy being trained: the model, its optimizer, the frozen reference, and the one guarded
//! update that RL and SFT share (design.md steps 7-8).
//!
//! [`guarded_update`] zeroes the gradients, runs the caller's forward/backward, and then either
//! skips (non-finite loss or gradient: weights and optimizer state untouched) or clips and takes
//! the AdamW step. Both trainers count what it skipped and report it.

use fulcrum_model::optim::LrSchedule;
use fulcrum_model::optim::{clip_grad_norm, grad_norm, grads_are_finite, AdamW, AdamWConfig};
use fulcrum_model::Model;

use crate::config::{Config, ScheduleKind};
use crate::error::TrainError;

/// The policy being trained, its optimizer, and the frozen reference (when KL is on).
pub struct Policy {
    pub model: Model,
    pub opt: AdamW,
    pub reference: Option<Model>,
}

/// A fresh AdamW over `model` with the config's hyper-parameters (RL and SFT alike).
pub fn new_optimizer(cfg: &Config, model: &Model) -> AdamW {
    AdamW::new(
        model.var_store(),
        AdamWConfig {
            beta1: cfg.optim.beta1,
            beta2: cfg.optim.beta2,
            eps: cfg.optim.eps,
            weight_decay: cfg.optim.weight_decay,
        },
    )
}

/// The RL learning-rate schedule (`optim.schedule` over `steps`).
pub fn rl_schedule(cfg: &Config) -> LrSchedule {
    let o = &cfg.optim;
    match o.schedule {
        ScheduleKind::Cosine => LrSchedule::Cosine {
            peak: o.lr,
            min: o.lr * o.min_lr_ratio,
            warmup: o.warmup_steps,
            total: cfg.steps,
        },
        ScheduleKind::Constant => LrSchedule::Constant {
            peak: o.lr,
            warmup: o.warmup_steps,
        },
    }
}

/// What happened to one optimizer step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Update {
    /// Gradients were finite: clipped and applied.
    Applied { grad_norm: f64 },
    /// The loss or a gradient was not finite: nothing was changed.
    Skipped,
}

/// One optimizer step guarded against non-finite numbers. `backward` accumulates the gradients
/// of one update into the parameters of `model` and returns its statistics and loss; then the
/// step is skipped (gradients zeroed, nothing else touched) if the loss or any gradient is not
/// finite, else the gradients are clipped to `grad_clip` (0: off; the norm is measured either
/// way) and AdamW steps at `lr`.
pub fn guarded_update<S>(
    model: &Model,
    opt: &mut AdamW,
    grad_clip: f64,
    lr: f64,
    backward: impl FnOnce() -> Result<(S, f64), TrainError>,
) -> Result<(S, Update), TrainError> {
    opt.zero_grad();
    let (stats, loss) = backward()?;
    let vs = model.var_store();
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
