//! Training log-probabilities that only pay for the positions that are scored, and never hold
//! `[batch, seq, vocab]` logits at once.
//!
//! A training batch scores only response tokens, yet a plain forward computes (and autograd
//! keeps) the LM head's logits and their log-softmax for every position: for SmolLM2 at
//! 8 x 256 tokens that is 2,048 x 49,152 floats, 400 MB per copy, several copies live until
//! backward. Here the trunk runs once with its graph; the head runs only on masked positions,
//! in chunks of at most [`LOGIT_BUDGET`] logits; and when that needs more than one chunk, the
//! head's graph is not kept: [`HeadBackward::backward`] recomputes each chunk's logits while
//! back-propagating (the gradient is the same; the head's forward is paid twice).

use tch::{Kind, Tensor};

use crate::error::{ModelError, Result};
use crate::logprobs::{token_logprobs_entropy, EntropyGrad, TokenLogprobs};
use crate::transformer::{CheckpointedTrunk, Transformer};

/// Logits computed at once: 2^24 floats (64 MB in f32) per chunk.
pub const LOGIT_BUDGET: i64 = 1 << 24;

/// How the training forward trades memory for compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryOptions {
    /// Logits computed at once (per chunk of positions).
    pub logit_budget: i64,
    /// Keep only each decoder layer's input and recompute its activations in backward.
    pub checkpoint_layers: bool,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            logit_budget: LOGIT_BUDGET,
            checkpoint_layers: false,
        }
    }
}

/// How to back-propagate a loss built from [`masked_sequence_logprobs`]' outputs.
pub struct HeadBackward<'a> {
    recompute: Option<Recompute<'a>>,
    /// With activation checkpointing: the layers, back-propagated after the head.
    trunk: Option<CheckpointedTrunk<'a>>,
}

/// What the chunked path needs to redo the head in backward.
struct Recompute<'a> {
    net: &'a Transformer,
    /// Trunk output `[N, hidden]` (flattened positions), with its graph.
    hidden: Tensor,
    /// The same values as a leaf: chunk gradients accumulate in its `.grad`.
    hidden_leaf: Tensor,
    /// Flat indices of the scored positions and their target tokens.
    index: Tensor,
    targets: Tensor,
    rows_per_chunk: i64,
    temperature: f64,
    entropy_grad: EntropyGrad,
    /// The leaves handed to the caller, whose `.grad` the loss's backward fills.
    logprobs_leaf: Tensor,
    entropy_leaf: Tensor,
}

impl HeadBackward<'_> {
    /// Back-propagates `loss` to the model's parameters (accumulating into `.grad`).
    pub fn backward(self, loss: &Tensor) -> Result<()> {
        let Some(r) = self.recompute else {
            loss.backward();
            if let Some(trunk) = self.trunk {
                trunk.backward();
            }
            return Ok(());
        };
        // 1. Gradient of the loss with respect to the per-position outputs.
        loss.backward();
        let flat_grad = |leaf: &Tensor| {
            let g = leaf.grad();
            g.defined()
                .then(|| g.reshape([-1]).index_select(0, &r.index))
        };
        let g_lp = flat_grad(&r.logprobs_leaf);
        let g_ent = match r.entropy_grad {
            EntropyGrad::Yes => flat_grad(&r.entropy_leaf),
            EntropyGrad::No => None,
        };
        if g_lp.is_none() && g_ent.is_none() {
            return Ok(());
        }
        let trunk = self.trunk;
        // 2. The head again, chunk by chunk, back-propagated into the hidden leaf and the head.
        let rows = r.index.size()[0];
        let mut start = 0;
        while start < rows {
            let n = r.rows_per_chunk.min(rows - start);
            let idx = r.index.narrow(0, start, n);
            let out = head_logprobs(
                r.net,
                &r.hidden_leaf.index_select(0, &idx),
                &r.targets.narrow(0, start, n),
                r.temperature,
                r.entropy_grad,
            )?;
            let mut terms = Vec::new();
            if let Some(g) = &g_lp {
                terms.push((&out.logprobs * g.narrow(0, start, n)).sum(Kind::Float));
            }
            if let Some(g) = &g_ent {
                terms.push((&out.entropy * g.narrow(0, start, n)).sum(Kind::Float));
            }
            let total = Tensor::stack(&terms, 0).sum(Kind::Float);
            // A frozen head (LoRA without adapters on it) has nothing to differentiate.
            if total.requires_grad() {
                total.backward();
            }
            start += n;
        }
        // 3. The trunk, from the accumulated gradient of its output.
        let g_hidden = r.hidden_leaf.grad();
        if g_hidden.defined() && r.hidden.requires_grad() {
            (&r.hidden * g_hidden.to_kind(r.hidden.kind()))
                .sum(Kind::Float)
                .backward();
        }
        if let Some(trunk) = trunk {
            trunk.backward();
        }
        Ok(())
    }
}

/// Log-probabilities and entropies `[rows]` of `targets` under the head applied to `hidden`
/// `[rows, hidden]`.
fn head_logprobs(
    net: &Transformer,
    hidden: &Tensor,
    targets: &Tensor,
    temperature: f64,
    entropy_grad: EntropyGrad,
) -> Result<TokenLogprobs> {
    let logits = net.logits(hidden).unsqueeze(0);
    let out = token_logprobs_entropy(&logits, &targets.unsqueeze(0), temperature, entropy_grad)?;
    Ok(TokenLogprobs {
        logprobs: out.logprobs.squeeze_dim(0),
        entropy: out.entropy.squeeze_dim(0),
    })
}

/// As [`crate::logprobs::sequence_logprobs_entropy`] over right-padded `input_ids` `[B, T]`,
/// but computed only where `mask` `[B, T - 1]` is nonzero (elsewhere log-probability and
/// entropy are 0, without gradient). Back-propagate a loss built from the outputs with the
/// returned [`HeadBackward`], not with `loss.backward()`.
pub fn masked_sequence_logprobs<'a>(
    net: &'a Transformer,
    input_ids: &Tensor,
    mask: &Tensor,
    temperature: f64,
    entropy_grad: EntropyGrad,
) -> Result<(TokenLogprobs, HeadBackward<'a>)> {
    masked_sequence_logprobs_with(
        net,
        input_ids,
        mask,
        temperature,
        entropy_grad,
        MemoryOptions::default(),
    )
}

/// [`masked_sequence_logprobs`] with explicit memory options (tests use tiny logit budgets).
pub fn masked_sequence_logprobs_with<'a>(
    net: &'a Transformer,
    input_ids: &Tensor,
    mask: &Tensor,
    temperature: f64,
    entropy_grad: EntropyGrad,
    memory: MemoryOptions,
) -> Result<(TokenLogprobs, HeadBackward<'a>)> {
    let logit_budget = memory.logit_budget;
    let size = input_ids.size();
    if size.len() != 2 || size[1] < 2 {
        return Err(ModelError::Invalid(format!(
            "input_ids must be [batch, seq >= 2], got {size:?}"
        )));
    }
    let (b, t) = (size[0], size[1] - 1);
    if mask.size() != [b, t] {
        return Err(ModelError::Invalid(format!(
            "mask must be [{b}, {t}], got {:?}",
            mask.size()
        )));
    }
    let device = input_ids.device();
    let (hidden, trunk) = if memory.checkpoint_layers {
        let trunk = net.forward_checkpointed(&input_ids.narrow(1, 0, t))?;
        (trunk.hidden.reshape([b * t, -1]), Some(trunk))
    } else {
        let positions = Tensor::arange(t, (Kind::Int64, device))
            .unsqueeze(0)
            .expand([b, t], false);
        let hidden = net.forward_hidden(
            &input_ids.narrow(1, 0, t),
            &positions,
            &crate::transformer::AttnMask::Causal,
            None,
        )?;
        (hidden.reshape([b * t, -1]), None)
    };
    head_on_mask(
        net,
        hidden,
        &input_ids.narrow(1, 1, t),
        mask,
        HeadSettings {
            temperature,
            entropy_grad,
            logit_budget,
        },
        trunk,
    )
}

/// How [`head_on_mask`] runs the LM head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadSettings {
    pub temperature: f64,
    pub entropy_grad: EntropyGrad,
    pub logit_budget: i64,
}

/// The head part of [`masked_sequence_logprobs_with`]: log-probabilities and entropies `[B, T]`
/// of `next_ids` `[B, T]` (the token each position scores) from the trunk's output `hidden`
/// `[B * T, hidden]`, only where `mask` `[B, T]` is nonzero, in chunks of at most
/// `logit_budget` logits (recomputed in backward when there are several).
pub(crate) fn head_on_mask<'a>(
    net: &'a Transformer,
    hidden: Tensor,
    next_ids: &Tensor,
    mask: &Tensor,
    settings: HeadSettings,
    trunk: Option<CheckpointedTrunk<'a>>,
) -> Result<(TokenLogprobs, HeadBackward<'a>)> {
    let HeadSettings {
        temperature,
        entropy_grad,
        logit_budget,
    } = settings;
    let (b, t) = (mask.size()[0], mask.size()[1]);
    let device = hidden.device();
    let index = mask.reshape([-1]).ne(0.0).nonzero().squeeze_dim(1);
    let targets = next_ids.reshape([-1]).index_select(0, &index);
    let rows = index.size()[0];
    let vocab = net.config().vocab_size.max(1);
    let rows_per_chunk = (logit_budget / vocab).max(1);
    let scatter = |values: &Tensor| {
        Tensor::zeros([b * t], (values.kind(), device))
            .index_copy(0, &index, values)
            .reshape([b, t])
    };

    if rows <= rows_per_chunk {
        // One chunk: ordinary autograd through the head (nothing to save by recomputing).
        let out = head_logprobs(
            net,
            &hidden.index_select(0, &index),
            &targets,
            temperature,
            entropy_grad,
        )?;
        let out = TokenLogprobs {
            logprobs: scatter(&out.logprobs),
            entropy: scatter(&out.entropy),
        };
        return Ok((
            out,
            HeadBackward {
                recompute: None,
                trunk,
            },
        ));
    }

    // Several chunks: values without the head's graph now, the graph again in backward.
    let hidden_leaf = hidden.detach().set_requires_grad(true);
    let (mut lps, mut ents) = (Vec::new(), Vec::new());
    tch::no_grad(|| -> Result<()> {
        let mut start = 0;
        while start < rows {
            let n = rows_per_chunk.min(rows - start);
            let out = head_logprobs(
                net,
                &hidden_leaf.index_select(0, &index.narrow(0, start, n)),
                &targets.narrow(0, start, n),
                temperature,
                EntropyGrad::No,
            )?;
            lps.push(out.logprobs);
            ents.push(out.entropy);
            start += n;
        }
        Ok(())
    })?;
    let (lp, ent) = tch::no_grad(|| {
        (
            scatter(&Tensor::cat(&lps, 0)),
            scatter(&Tensor::cat(&ents, 0)),
        )
    });
    let logprobs_leaf = lp.set_requires_grad(true);
    let entropy_leaf = match entropy_grad {
        EntropyGrad::Yes => ent.set_requires_grad(true),
        EntropyGrad::No => ent,
    };
    let out = TokenLogprobs {
        logprobs: logprobs_leaf.shallow_clone(),
        entropy: entropy_leaf.shallow_clone(),
    };
    let recompute = Recompute {
        net,
        hidden,
        hidden_leaf,
        index,
        targets,
        rows_per_chunk,
        temperature,
        entropy_grad,
        logprobs_leaf,
        entropy_leaf,
    };
    Ok((
        out,
        HeadBackward {
            recompute: Some(recompute),
            trunk,
        },
    ))
}

/// Parameter gradients for the tests that compare forward paths (here and `shared_prompt.rs`).
#[cfg(test)]
pub(crate) mod test_grads {
    use crate::Model;
    use tch::Tensor;

    /// Every parameter's gradient (zeros where none was computed), in name order.
    pub(crate) fn grads(model: &Model) -> Vec<(String, Tensor)> {
        let mut v: Vec<(String, Tensor)> = model
            .var_store()
            .variables()
            .into_iter()
            .map(|(n, t)| {
                let g = t.grad();
                (
                    n,
                    if g.defined() {
                        g.copy()
                    } else {
                        t.zeros_like()
                    },
                )
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Zeroes every defined gradient, leaving which weights train as it is.
    pub(crate) fn clear_grads(model: &Model) {
        for (_, t) in model.var_store().variables() {
            let mut g = t.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logprobs::sequence_logprobs_entropy;
    use crate::Model;
    use tch::Device;

    use super::test_grads::{clear_grads, grads};

    fn zero_grads(model: &Model) {
        clear_grads(model);
        for (_, mut t) in model.var_store().variables() {
            let _ = t.requires_grad_(true);
        }
    }

    /// Same values on masked positions and the same parameter gradient as the plain path, with
    /// one chunk and with many (recomputed) chunks, with and without activation checkpointing,
    /// entropy bonus included.
    #[test]
    fn matches_the_plain_forward_and_gradient() {
        tch::set_num_threads(1);
        let mut model = Model::tiny(Device::Cpu, 3).unwrap();
        model.set_kind(Kind::Double);
        let net = model.net();
        let ids = Tensor::from_slice(&[5i64, 9, 14, 22, 40, 41, 7, 3, 12, 13, 33, 2, 0, 0])
            .reshape([2, 7]);
        let mask = Tensor::from_slice(&[
            0.0f64, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0,
        ])
        .reshape([2, 6]);
        let w = Tensor::from_slice(&[
            0.0f64, 0.0, 0.3, -0.2, 0.5, 0.1, 0.0, 0.0, -0.4, 0.7, 0.0, 0.0,
        ])
        .reshape([2, 6]);
        let loss_of = |o: &TokenLogprobs| {
            (&o.logprobs * &w).sum(Kind::Double) + (&o.entropy * &mask).sum(Kind::Double) * 0.1
        };

        zero_grads(&model);
        let plain = sequence_logprobs_entropy(net, &ids, 0.7, EntropyGrad::Yes).unwrap();
        loss_of(&plain).backward();
        let want = grads(&model);
        let plain_lp = plain.logprobs.detach() * &mask;

        for (logit_budget, checkpoint_layers) in [
            (LOGIT_BUDGET, false),
            (2 * 128, false),
            (128, false),
            (LOGIT_BUDGET, true),
            (128, true),
        ] {
            let budget = (logit_budget, checkpoint_layers);
            let memory = MemoryOptions {
                logit_budget,
                checkpoint_layers,
            };
            zero_grads(&model);
            let (out, head) =
                masked_sequence_logprobs_with(net, &ids, &mask, 0.7, EntropyGrad::Yes, memory)
                    .unwrap();
            let lp_diff = (out.logprobs.detach() - &plain_lp)
                .abs()
                .max()
                .double_value(&[]);
            assert!(lp_diff < 1e-10, "{budget:?}: logprobs differ by {lp_diff}");
            head.backward(&loss_of(&out)).unwrap();
            for ((name, g), (_, h)) in grads(&model).iter().zip(&want) {
                let diff = (g - h).abs().max().double_value(&[]);
                let scale = h.abs().max().double_value(&[]).max(1e-12);
                assert!(
                    diff <= 1e-9 * scale.max(1.0),
                    "{budget:?}: {name} differs by {diff}"
                );
            }
        }
    }

    /// No scored position: zeros, and a backward that changes nothing.
    #[test]
    fn an_empty_mask_gives_zeros() {
        tch::set_num_threads(1);
        let model = Model::tiny(Device::Cpu, 3).unwrap();
        let ids = Tensor::from_slice(&[5i64, 9, 14, 22]).reshape([1, 4]);
        let mask = Tensor::zeros([1, 3], (Kind::Float, Device::Cpu));
        for checkpoint_layers in [false, true] {
            let memory = MemoryOptions {
                logit_budget: 128,
                checkpoint_layers,
            };
            zero_grads(&model);
            let (out, head) = masked_sequence_logprobs_with(
                model.net(),
                &ids,
                &mask,
                1.0,
                EntropyGrad::No,
                memory,
            )
            .unwrap();
            assert_eq!(out.logprobs.abs().sum(Kind::Float).double_value(&[]), 0.0);
            head.backward(&out.logprobs.sum(Kind::Float)).unwrap();
        }
    }

    /// Frozen base weights with adapters (LoRA): checkpointing and chunking give the adapters
    /// the plain path's gradient, and nothing tries to differentiate the frozen embeddings.
    #[test]
    fn frozen_weights_with_adapters() {
        tch::set_num_threads(1);
        let mut model = Model::tiny(Device::Cpu, 5).unwrap();
        model.set_kind(Kind::Double);
        model
            .attach_lora(&crate::lora::LoraConfig {
                rank: 2,
                alpha: 4.0,
                targets: vec!["q_proj".into(), "down_proj".into()],
            })
            .unwrap();
        // Non-zero B, so that the adapters' A matrices get a gradient too.
        for (name, mut t) in model.var_store().variables() {
            if name.contains("lora_B") {
                tch::no_grad(|| {
                    let _ = t.fill_(0.01);
                });
            }
        }
        let ids = Tensor::from_slice(&[5i64, 9, 14, 22, 40, 41]).reshape([1, 6]);
        let mask = Tensor::from_slice(&[0.0f64, 1.0, 1.0, 1.0, 1.0]).reshape([1, 5]);
        let mut results = Vec::new();
        for (logit_budget, checkpoint_layers) in [(LOGIT_BUDGET, false), (128, true)] {
            let memory = MemoryOptions {
                logit_budget,
                checkpoint_layers,
            };
            clear_grads(&model);
            let (out, head) = masked_sequence_logprobs_with(
                model.net(),
                &ids,
                &mask,
                1.0,
                EntropyGrad::No,
                memory,
            )
            .unwrap();
            head.backward(&out.logprobs.sum(Kind::Double)).unwrap();
            let mut got: Vec<(String, Tensor)> = model
                .var_store()
                .variables()
                .into_iter()
                .filter(|(_, t)| t.grad().defined())
                .map(|(n, t)| (n, t.grad().copy()))
                .collect();
            got.sort_by(|a, b| a.0.cmp(&b.0));
            results.push(got);
        }
        assert!(!results[0].is_empty(), "no adapter received a gradient");
        assert_eq!(results[0].len(), results[1].len());
        for ((name, a), (other, b)) in results[0].iter().zip(&results[1]) {
            assert_eq!(name, other);
            assert!(name.contains("lora_"), "frozen {name} got a gradient");
            let diff = (a - b).abs().max().double_value(&[]);
            assert!(diff < 1e-9, "{name} differs by {diff}");
        }
    }
}
