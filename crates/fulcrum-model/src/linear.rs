//! The linear layer and its optional LoRA adapter.
//!
//! [`Linear`] is `y = x W^T + b` with the weight `[out, in]` as in HF checkpoints; an
//! [`Adapter`] adds the low-rank term `scale * (x A^T) B^T` (Hu et al. 2021). Both live here,
//! below the transformer, so that `lora.rs` (which attaches, saves and merges adapters) depends
//! on the transformer and never the other way.

use tch::nn::{self, Init};
use tch::Tensor;

/// Standard deviation of the random initialisation (as HF's `initializer_range`).
pub(crate) const INIT_STD: f64 = 0.02;

/// `y = x W^T + b`, weight `[out, in]` as in HF checkpoints, plus an optional LoRA adapter's
/// low-rank term.
#[derive(Debug)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
    adapter: Option<Adapter>,
}

impl Linear {
    pub fn new(p: nn::Path, in_dim: i64, out_dim: i64, bias: bool) -> Self {
        let init = Init::Randn {
            mean: 0.0,
            stdev: INIT_STD,
        };
        Linear {
            weight: p.var("weight", &[out_dim, in_dim], init),
            bias: bias.then(|| p.var("bias", &[out_dim], Init::Const(0.0))),
            adapter: None,
        }
    }

    pub fn forward(&self, xs: &Tensor) -> Tensor {
        let ys = xs.linear(&self.weight, self.bias.as_ref());
        match &self.adapter {
            Some(a) => ys + a.forward(xs),
            None => ys,
        }
    }

    /// `(out, in)`.
    pub fn shape(&self) -> (i64, i64) {
        let s = self.weight.size();
        (s[0], s[1])
    }

    pub fn adapter(&self) -> Option<&Adapter> {
        self.adapter.as_ref()
    }

    pub(crate) fn set_adapter(&mut self, adapter: Adapter) {
        self.adapter = Some(adapter);
    }
}

/// One adapter: the trainable pair `(A, B)` and its scale.
#[derive(Debug)]
pub struct Adapter {
    a: Tensor,
    b: Tensor,
    scale: f64,
}

impl Adapter {
    /// An adapter from its factors `A` (`[rank, in]`) and `B` (`[out, rank]`).
    pub(crate) fn new(a: Tensor, b: Tensor, scale: f64) -> Self {
        Adapter { a, b, scale }
    }

    /// `scale * (x A^T) B^T`: two thin GEMMs, never the full `[out, in]` product.
    pub fn forward(&self, xs: &Tensor) -> Tensor {
        xs.linear::<Tensor>(&self.a, None)
            .linear::<Tensor>(&self.b, None)
            * self.scale
    }

    /// `scale * B A`, the update folded into the weight when merging.
    pub fn delta(&self) -> Tensor {
        self.b.matmul(&self.a) * self.scale
    }
}
