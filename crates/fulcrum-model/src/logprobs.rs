//! Training-side log-probabilities: per-token log-probabilities of given target tokens (with
//! gradients) and entropies (detached), and the masked sums a token-level loss is built from.
//!
//! `token_logprobs(logits, targets, temperature)` uses the same formula as the sampler
//! (log-softmax of logits / temperature, then the target's entry), so the sampler's old
//! log-probabilities and the trainer's new ones agree when the weights are the same. Loss
//! normalisation is not decided here: `weighted_sum` takes the per-token weights that
//! fulcrum-core computed for the whole step batch.

use tch::{Kind, Tensor};

use crate::error::{ModelError, Result};
use crate::transformer::Transformer;

/// Per-token log-probabilities (with gradients) and entropies (detached, for metrics), both
/// `[batch, positions]`.
#[derive(Debug)]
pub struct TokenLogprobs {
    pub logprobs: Tensor,
    pub entropy: Tensor,
}

/// Log-probability of `targets` `[B, T]` (int64) under `logits` `[B, T, V]` scaled by
/// `1 / temperature`, and the entropy of each position's distribution (detached). Computed in
/// f32 (f64 when the logits are f64).
pub fn token_logprobs(
    logits: &Tensor,
    targets: &Tensor,
    temperature: f64,
) -> Result<TokenLogprobs> {
    token_logprobs_entropy(logits, targets, temperature, EntropyGrad::No)
}

/// Whether the entropy keeps its graph: only for an entropy bonus in the loss, since it holds
/// `[B, T, V]` temporaries until backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntropyGrad {
    No,
    Yes,
}

/// As [`token_logprobs`], with the entropy differentiable when `entropy_grad` is `Yes`.
pub fn token_logprobs_entropy(
    logits: &Tensor,
    targets: &Tensor,
    temperature: f64,
    entropy_grad: EntropyGrad,
) -> Result<TokenLogprobs> {
    let (ls, ts) = (logits.size(), targets.size());
    if ls.len() != 3 || ts.len() != 2 || ls[..2] != ts[..] {
        return Err(ModelError::Invalid(format!(
            "logits must be [B, T, V] and targets [B, T], got {ls:?} and {ts:?}"
        )));
    }
    if temperature.is_nan() || temperature <= 0.0 {
        return Err(ModelError::Invalid(format!(
            "temperature must be > 0, got {temperature}"
        )));
    }
    // f32 at least (f64 stays f64, for gradient checks). Out of place: `to_kind` returns the
    // caller's tensor itself when the kind already matches.
    let kind = if logits.kind() == Kind::Double {
        Kind::Double
    } else {
        Kind::Float
    };
    let scaled = if temperature == 1.0 {
        logits.to_kind(kind)
    } else {
        logits.to_kind(kind) / temperature
    };
    let logp_all = scaled.log_softmax(-1, kind);
    let logprobs = logp_all
        .gather(2, &targets.unsqueeze(-1), false)
        .squeeze_dim(-1);
    // Entropy is a metric: computed without a graph, so that its [B, T, V] temporaries are
    // freed at once instead of living until backward (about 1 GB for SmolLM2 at batch 8 x 256).
    let entropy_of = || -(logp_all.exp() * &logp_all).sum_dim_intlist(-1, false, kind);
    let entropy = match entropy_grad {
        EntropyGrad::Yes => entropy_of(),
        EntropyGrad::No => tch::no_grad(entropy_of),
    };
    Ok(TokenLogprobs { logprobs, entropy })
}

/// Log-probabilities of `input_ids[:, 1..]` given their prefixes: one full causal forward of
/// right-padded sequences `[B, T]`, returning `[B, T - 1]` tensors (position t scores token
/// t + 1). Gradients flow to the model's parameters unless called under `no_grad`.
pub fn sequence_logprobs(
    net: &Transformer,
    input_ids: &Tensor,
    temperature: f64,
) -> Result<TokenLogprobs> {
    sequence_logprobs_entropy(net, input_ids, temperature, EntropyGrad::No)
}

/// As [`sequence_logprobs`], with the entropy differentiable when `entropy_grad` is `Yes`.
pub fn sequence_logprobs_entropy(
    net: &Transformer,
    input_ids: &Tensor,
    temperature: f64,
    entropy_grad: EntropyGrad,
) -> Result<TokenLogprobs> {
    let t = input_ids.size().get(1).copied().unwrap_or(0);
    if t < 2 {
        return Err(ModelError::Invalid(format!(
            "need at least 2 tokens per sequence, got {t}"
        )));
    }
    let logits = net.forward(&input_ids.narrow(1, 0, t - 1))?;
    token_logprobs_entropy(
        &logits,
        &input_ids.narrow(1, 1, t - 1),
        temperature,
        entropy_grad,
    )
}

/// `Σ values · weights` over all positions: the loss of a micro-batch when `weights` carries
/// the aggregation rule's per-token weight (zero on prompt and padding positions).
pub fn weighted_sum(values: &Tensor, weights: &Tensor) -> Result<Tensor> {
    if values.size() != weights.size() {
        return Err(ModelError::Invalid(format!(
            "values {:?} and weights {:?} differ in shape",
            values.size(),
            weights.size()
        )));
    }
    let kind = if values.kind() == Kind::Double {
        Kind::Double
    } else {
        Kind::Float
    };
    Ok((values * weights.to_kind(values.kind())).sum(kind))
}

/// Mean of `values` over positions where `mask` is nonzero (0 when the mask is empty): for
/// metrics such as mean entropy, not for losses (its denominator is the batch's own count).
pub fn masked_mean(values: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let w = mask.to_kind(Kind::Float);
    let total = weighted_sum(values, &w)?;
    Ok(total / w.sum(Kind::Float).clamp_min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn logprobs_of_uniform_logits_are_minus_log_vocab() {
        let logits = Tensor::zeros([1, 2, 4], (Kind::Float, Device::Cpu));
        let targets = Tensor::from_slice(&[1i64, 3]).view([1, 2]);
        let out = token_logprobs(&logits, &targets, 1.0).unwrap();
        let want = -(4f64).ln();
        assert!((out.logprobs.double_value(&[0, 1]) - want).abs() < 1e-6);
        assert!((out.entropy.double_value(&[0, 0]) + want).abs() < 1e-6);
    }

    #[test]
    fn temperature_sharpens_the_distribution() {
        let logits = Tensor::from_slice(&[2.0f32, 0.0]).view([1, 1, 2]);
        let t = Tensor::from_slice(&[0i64]).view([1, 1]);
        let hot = token_logprobs(&logits, &t, 2.0)
            .unwrap()
            .logprobs
            .double_value(&[0, 0]);
        let cold = token_logprobs(&logits, &t, 0.5)
            .unwrap()
            .logprobs
            .double_value(&[0, 0]);
        assert!(cold > hot);
        // softmax([4, 0])[0] at temperature 0.5.
        assert!((cold - (-(1.0f64 + (-4.0f64).exp()).ln())).abs() < 1e-6);
    }

    #[test]
    fn weighted_sum_ignores_zero_weights_and_rejects_shape_mismatch() {
        let v = Tensor::from_slice(&[1.0f32, 2.0, 3.0]).view([1, 3]);
        let w = Tensor::from_slice(&[0.5f32, 0.0, 2.0]).view([1, 3]);
        assert!((weighted_sum(&v, &w).unwrap().double_value(&[]) - 6.5).abs() < 1e-6);
        assert!(weighted_sum(&v, &w.view([3, 1])).is_err());
        let m = Tensor::from_slice(&[1i64, 0, 1]).view([1, 3]);
        assert!((masked_mean(&v, &m).unwrap().double_value(&[]) - 2.0).abs() < 1e-6);
    }
}
