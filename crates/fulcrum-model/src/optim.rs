//! Optimisation: AdamW with decoupled weight decay, gradient-norm clipping, a finiteness check
//! for gradients, and learning-rate schedules.
//!
//! AdamW keeps its moments as plain tensors beside each parameter and updates everything in
//! place (no per-step allocation beyond libtorch's temporaries), so its state can be saved and
//! restored exactly (`checkpoint.rs`). Weight decay is decoupled (`p -= lr * wd * p`) and applies
//! only to matrices: biases and norm scales (1-D parameters) are never decayed.
//!
//! Mixed precision ([`AdamW::with_master_weights`]): the model computes in bf16 while AdamW keeps
//! an fp32 master copy of every parameter, updates that, and copies it back rounded; updates far
//! below a bf16 ulp (lr 1e-6 on weights of order 1) accumulate in the master instead of rounding
//! away.

use std::collections::BTreeMap;

use tch::nn::VarStore;
use tch::{Kind, Tensor};

use crate::error::{ModelError, Result};

/// AdamW hyper-parameters (the learning rate comes per step from a schedule).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

struct Slot {
    param: Tensor,
    /// The fp32 master copy the update applies to (mixed precision), else `None`.
    master: Option<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    decay: bool,
}

/// AdamW over every trainable variable of a VarStore.
pub struct AdamW {
    pub config: AdamWConfig,
    slots: BTreeMap<String, Slot>,
    step: i64,
}

impl std::fmt::Debug for AdamW {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AdamW({:?}, {} tensors, step {})",
            self.config,
            self.slots.len(),
            self.step
        )
    }
}

impl AdamW {
    pub fn new(vs: &VarStore, config: AdamWConfig) -> Self {
        Self::build(vs, config, false)
    }

    /// AdamW over fp32 master copies of the parameters as they are now (call it before casting
    /// the model to bf16): every step updates the masters and copies them into the parameters.
    pub fn with_master_weights(vs: &VarStore, config: AdamWConfig) -> Self {
        Self::build(vs, config, true)
    }

    fn build(vs: &VarStore, config: AdamWConfig, masters: bool) -> Self {
        let slots = vs
            .variables()
            .into_iter()
            .filter(|(_, p)| p.requires_grad())
            .map(|(name, param)| {
                let decay = param.dim() >= 2;
                let slot = Slot {
                    master: masters.then(|| param.detach().to_kind(Kind::Float).copy()),
                    exp_avg: param.zeros_like().to_kind(Kind::Float),
                    exp_avg_sq: param.zeros_like().to_kind(Kind::Float),
                    param,
                    decay,
                };
                (name, slot)
            })
            .collect();
        AdamW {
            config,
            slots,
            step: 0,
        }
    }

    /// The device of the optimizer state (that of the parameters).
    pub fn device(&self) -> tch::Device {
        self.slots
            .values()
            .next()
            .map_or(tch::Device::Cpu, |s| s.exp_avg.device())
    }

    /// Optimizer steps taken so far.
    pub fn step_count(&self) -> i64 {
        self.step
    }

    /// Names of parameters that receive weight decay (matrices only).
    pub fn decayed(&self) -> Vec<&str> {
        self.slots
            .iter()
            .filter(|(_, s)| s.decay)
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// Set every gradient to zero (in place).
    pub fn zero_grad(&mut self) {
        for s in self.slots.values_mut() {
            let mut g = s.param.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }

    /// One AdamW update with learning rate `lr`. Parameters without a gradient are skipped.
    pub fn step(&mut self, lr: f64) {
        self.step += 1;
        let c = self.config;
        tch::no_grad(|| {
            for s in self.slots.values_mut() {
                let g = s.param.grad();
                if !g.defined() {
                    continue;
                }
                let g = g.to_kind(Kind::Float);
                let target = s.master.as_mut().unwrap_or(&mut s.param);
                if s.decay && c.weight_decay != 0.0 {
                    let _ = target.g_mul_scalar_(1.0 - lr * c.weight_decay);
                }
                let update = adam_update(&mut s.exp_avg, &mut s.exp_avg_sq, &g, &c, self.step, lr);
                match &mut s.master {
                    Some(m) => {
                        let _ = m.g_add_(&update);
                        s.param.copy_(m);
                    }
                    None => {
                        let _ = s.param.g_add_(&update.to_kind(s.param.kind()));
                    }
                }
            }
        });
    }

    /// The optimizer state as named tensors (`exp_avg.<param>`, `exp_avg_sq.<param>`) and the
    /// step count, for checkpoints.
    pub fn state(&self) -> (Vec<(String, Tensor)>, i64) {
        let mut out = Vec::with_capacity(2 * self.slots.len());
        for (name, s) in &self.slots {
            out.push((format!("exp_avg.{name}"), s.exp_avg.shallow_clone()));
            out.push((format!("exp_avg_sq.{name}"), s.exp_avg_sq.shallow_clone()));
        }
        (out, self.step)
    }

    /// The fp32 master weights by parameter name, when this optimizer keeps them.
    pub fn master_weights(&self) -> Option<Vec<(String, Tensor)>> {
        self.slots
            .iter()
            .map(|(n, s)| s.master.as_ref().map(|m| (n.clone(), m.shallow_clone())))
            .collect()
    }

    /// Restores master weights (from [`AdamW::master_weights`] of a checkpoint) and copies
    /// them into the parameters; every master must be present with its shape.
    pub fn load_master_weights(
        &mut self,
        named: Vec<(String, Tensor)>,
        source: &std::path::Path,
    ) -> Result<()> {
        let mut named: BTreeMap<String, Tensor> = named.into_iter().collect();
        for (name, s) in self.slots.iter_mut() {
            let Some(m) = s.master.as_mut() else {
                continue;
            };
            let t = take_named(&mut named, name, &m.size(), source)?;
            tch::no_grad(|| {
                m.copy_(&t);
                s.param.copy_(m);
            });
        }
        nothing_left(named, source)
    }

    /// Restore state written by [`AdamW::state`]; every moment must be present with the right
    /// shape and nothing else may be.
    pub fn load_state(
        &mut self,
        named: Vec<(String, Tensor)>,
        step: i64,
        source: &std::path::Path,
    ) -> Result<()> {
        let mut named: BTreeMap<String, Tensor> = named.into_iter().collect();
        for (name, s) in self.slots.iter_mut() {
            for (prefix, dst) in [
                ("exp_avg", &mut s.exp_avg),
                ("exp_avg_sq", &mut s.exp_avg_sq),
            ] {
                let t = take_named(&mut named, &format!("{prefix}.{name}"), &dst.size(), source)?;
                tch::no_grad(|| dst.copy_(&t));
            }
        }
        nothing_left(named, source)?;
        self.step = step;
        Ok(())
    }
}

/// Adam's moment updates for gradient `g` (fp32) at step `step` (1-based), in place, and the
/// parameter increment they give at rate `lr` (weight decay is the caller's). Shared by
/// [`AdamW`] and the sharded AdamW of data-parallel training, so both do the same arithmetic.
pub fn adam_update(
    exp_avg: &mut Tensor,
    exp_avg_sq: &mut Tensor,
    g: &Tensor,
    c: &AdamWConfig,
    step: i64,
    lr: f64,
) -> Tensor {
    let bc1 = 1.0 - c.beta1.powi(step as i32);
    let bc2 = 1.0 - c.beta2.powi(step as i32);
    let _ = exp_avg.lerp_(g, 1.0 - c.beta1);
    let _ = exp_avg_sq.g_mul_scalar_(c.beta2);
    let _ = exp_avg_sq.addcmul_(&(g.g_mul_scalar(1.0 - c.beta2)), g);
    let denom = exp_avg_sq
        .sqrt()
        .g_div_scalar_(bc2.sqrt())
        .g_add_scalar_(c.eps);
    exp_avg.g_div(&denom).g_mul_scalar_(-lr / bc1)
}

/// Removes `key` from `named`, checking it has `shape`: a missing or misshapen tensor of a
/// checkpoint file (`source`) is an error naming it.
pub fn take_named(
    named: &mut BTreeMap<String, Tensor>,
    key: &str,
    shape: &[i64],
    source: &std::path::Path,
) -> Result<Tensor> {
    let t = named.remove(key).ok_or_else(|| ModelError::MissingTensor {
        path: source.to_path_buf(),
        name: key.to_string(),
    })?;
    if t.size() != shape {
        return Err(ModelError::Shape {
            path: source.to_path_buf(),
            name: key.to_string(),
            expected: shape.to_vec(),
            got: t.size(),
        });
    }
    Ok(t)
}

/// An error naming the first tensor of `named` nothing took (a file for another model).
pub fn nothing_left(named: BTreeMap<String, Tensor>, source: &std::path::Path) -> Result<()> {
    match named.into_keys().next() {
        Some(name) => Err(ModelError::UnusedTensor {
            path: source.to_path_buf(),
            name,
        }),
        None => Ok(()),
    }
}

/// The global L2 norm of all gradients of `vs` (f64, computed on the device, one sync).
pub fn grad_norm(vs: &VarStore) -> f64 {
    let squares: Vec<Tensor> = vs
        .trainable_variables()
        .iter()
        .map(|p| p.grad())
        .filter(|g| g.defined())
        .map(|g| g.to_kind(Kind::Float).square().sum(Kind::Float))
        .collect();
    if squares.is_empty() {
        return 0.0;
    }
    Tensor::stack(&squares, 0)
        .sum(Kind::Float)
        .sqrt()
        .double_value(&[])
}

/// Scale gradients so their global norm is at most `max_norm`; returns the norm before
/// clipping. A non-finite norm leaves the gradients untouched (check [`grads_are_finite`]).
pub fn clip_grad_norm(vs: &VarStore, max_norm: f64) -> f64 {
    let norm = grad_norm(vs);
    if norm.is_finite() && norm > max_norm {
        let scale = max_norm / (norm + 1e-6);
        tch::no_grad(|| {
            for p in vs.trainable_variables() {
                let mut g = p.grad();
                if g.defined() {
                    let _ = g.g_mul_scalar_(scale);
                }
            }
        });
    }
    norm
}

/// True when every gradient entry is finite: the trainer skips the step otherwise.
pub fn grads_are_finite(vs: &VarStore) -> bool {
    grad_norm(vs).is_finite()
}

/// What happened to one optimizer step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Update {
    /// Gradients were finite: clipped and applied.
    Applied { grad_norm: f64 },
    /// The loss or a gradient was not finite: nothing was changed.
    Skipped,
}

/// The trainable variables of `vs`, sorted by name (the same order in every process of a
/// data-parallel job).
pub fn trainable_by_name(vs: &VarStore) -> Vec<(String, Tensor)> {
    let mut v: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .filter(|(_, p)| p.requires_grad())
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The gradients of `params`, every one defined (a parameter the backward did not reach gets
/// a zero gradient, from one backward of zero through those parameters only; summing before
/// scaling keeps it free of parameter-sized temporaries), so that every process of a job
/// reduces the same tensors.
pub fn defined_grads(params: &[(String, Tensor)]) -> Vec<Tensor> {
    let zero: Vec<Tensor> = params
        .iter()
        .filter(|(_, p)| !p.grad().defined())
        .map(|(_, p)| p.sum(Kind::Float) * 0.0)
        .collect();
    if !zero.is_empty() {
        Tensor::stack(&zero, 0).sum(Kind::Float).backward();
    }
    params.iter().map(|(_, p)| p.grad()).collect()
}

/// Learning rate as a function of the step (0-based).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LrSchedule {
    /// `peak` after a linear warm-up over `warmup` steps.
    Constant { peak: f64, warmup: u64 },
    /// Linear warm-up over `warmup` steps, then a cosine from `peak` down to `min` at `total`.
    Cosine {
        peak: f64,
        min: f64,
        warmup: u64,
        total: u64,
    },
}

impl LrSchedule {
    pub fn lr(&self, step: u64) -> f64 {
        let warm = |peak: f64, warmup: u64| {
            if step < warmup {
                Some(peak * (step + 1) as f64 / warmup as f64)
            } else {
                None
            }
        };
        match *self {
            LrSchedule::Constant { peak, warmup } => warm(peak, warmup).unwrap_or(peak),
            LrSchedule::Cosine {
                peak,
                min,
                warmup,
                total,
            } => warm(peak, warmup).unwrap_or_else(|| {
                let span = total.saturating_sub(warmup).max(1) as f64;
                let t = ((step - warmup) as f64 / span).min(1.0);
                min + 0.5 * (peak - min) * (1.0 + (std::f64::consts::PI * t).cos())
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{nn, Device};

    #[test]
    fn schedules_warm_up_then_hold_or_decay() {
        let c = LrSchedule::Constant {
            peak: 1.0,
            warmup: 4,
        };
        assert_eq!(c.lr(0), 0.25);
        assert_eq!(c.lr(3), 1.0);
        assert_eq!(c.lr(100), 1.0);
        let cos = LrSchedule::Cosine {
            peak: 1.0,
            min: 0.1,
            warmup: 2,
            total: 12,
        };
        assert_eq!(cos.lr(1), 1.0);
        assert!((cos.lr(2) - 1.0).abs() < 1e-12);
        assert!((cos.lr(7) - 0.55).abs() < 1e-12);
        assert!((cos.lr(12) - 0.1).abs() < 1e-12);
        assert!((cos.lr(50) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn adamw_first_step_moves_each_weight_by_lr_and_decays_only_matrices() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().var("w", &[2, 2], nn::Init::Const(1.0));
        let b = vs.root().var("b", &[2], nn::Init::Const(1.0));
        let mut opt = AdamW::new(
            &vs,
            AdamWConfig {
                weight_decay: 0.5,
                ..Default::default()
            },
        );
        assert_eq!(opt.decayed(), vec!["w"]);
        let loss = (&w * 3.0).sum(Kind::Float) - (&b * 2.0).sum(Kind::Float);
        loss.backward();
        opt.step(0.1);
        // Adam's first step is lr * sign(g); decay multiplies w by 1 - 0.1 * 0.5 first.
        assert!((w.double_value(&[0, 0]) - (0.95 - 0.1)).abs() < 1e-6);
        assert!((b.double_value(&[0]) - 1.1).abs() < 1e-6);
    }

    #[test]
    fn master_weights_keep_an_update_that_bf16_parameters_round_away() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().var("w", &[4, 4], nn::Init::Const(1.0));
        let mut mixed = AdamW::with_master_weights(&vs, AdamWConfig::default());
        let mut vs = vs;
        vs.set_kind(Kind::BFloat16);
        for _ in 0..3 {
            mixed.zero_grad();
            w.sum(Kind::Float).backward();
            mixed.step(1e-6);
        }
        let masters = mixed.master_weights().unwrap();
        let m = masters[0].1.double_value(&[0, 0]);
        // Three steps of lr * sign(g) (Adam's first steps), to f32 precision (ulp 6e-8 at 1).
        assert!((m - (1.0 - 3e-6)).abs() < 2e-7, "master {m}");
        // The bf16 parameter still reads 1 (1 - 3e-6 rounds to 1), but nothing is lost.
        assert_eq!(w.double_value(&[0, 0]), 1.0);
        assert_eq!(w.kind(), Kind::BFloat16);
        let pure = nn::VarStore::new(Device::Cpu);
        let _ = pure.root().var("w", &[4, 4], nn::Init::Const(1.0));
        assert!(AdamW::new(&pure, AdamWConfig::default())
            .master_weights()
            .is_none());
    }

    #[test]
    fn clipping_scales_the_global_norm_and_non_finite_grads_are_detected() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().var("w", &[2], nn::Init::Const(1.0));
        (&w * Tensor::from_slice(&[3.0f32, 4.0]))
            .sum(Kind::Float)
            .backward();
        assert!((clip_grad_norm(&vs, 1.0) - 5.0).abs() < 1e-6);
        assert!((grad_norm(&vs) - 1.0).abs() < 1e-5);
        assert!(grads_are_finite(&vs));
        (&w * f64::NAN).sum(Kind::Float).backward();
        assert!(!grads_are_finite(&vs));
    }
}
