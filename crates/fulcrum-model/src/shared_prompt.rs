//! Training log-probabilities of a group's responses with their common prompt forwarded once.
//!
//! The G responses of a GRPO group continue the same prompt, so the plain training forward
//! ([`crate::masked_logprobs`]) computes the prompt's activations G times. Here the prompt runs
//! once, as a one-row batch whose keys and values every layer keeps (with their graph); the
//! responses then run as a batch that attends to those keys and values before their own, and
//! back-propagation sums the rows' gradients into the one prompt forward. The first response
//! token is scored by the prompt's last position, the others by the responses' own positions.
//! Same values and gradients as the plain path up to float summation order (tested); the work
//! saved is `(G - 1) x prompt` tokens per group, which is most of a step when prompts are long.
//! Not with activation checkpointing (the trainer uses the plain path then).

use tch::{Kind, Tensor};

use crate::error::{ModelError, Result};
use crate::logprobs::{EntropyGrad, TokenLogprobs};
use crate::masked_logprobs::{head_on_mask, HeadBackward, HeadSettings, MemoryOptions};
use crate::transformer::{AttnMask, LayerKv, Transformer};

/// Log-probabilities and entropies `[B, R]` of right-padded `responses` `[B, R]` that all
/// continue `prompt` `[1, P]` (`P >= 1`): position `j` scores response token `j`, and only
/// where `mask` `[B, R]` is nonzero (elsewhere 0, without gradient). Back-propagate a loss built
/// from the outputs with the returned [`HeadBackward`].
pub fn shared_prompt_logprobs<'a>(
    net: &'a Transformer,
    prompt: &Tensor,
    responses: &Tensor,
    mask: &Tensor,
    temperature: f64,
    entropy_grad: EntropyGrad,
    memory: MemoryOptions,
) -> Result<(TokenLogprobs, HeadBackward<'a>)> {
    let (psize, size) = (prompt.size(), responses.size());
    if psize.len() != 2 || psize[0] != 1 || psize[1] < 1 {
        return Err(ModelError::Invalid(format!(
            "the shared prompt must be [1, P >= 1], got {psize:?}"
        )));
    }
    if size.len() != 2 || size[1] < 1 || mask.size() != size {
        return Err(ModelError::Invalid(format!(
            "responses must be [batch, R >= 1] and the mask the same shape, got {size:?} and {:?}",
            mask.size()
        )));
    }
    if memory.checkpoint_layers {
        return Err(ModelError::Invalid(
            "a shared prompt forward does not checkpoint layers: use the plain forward".into(),
        ));
    }
    let (b, r, p) = (size[0], size[1], psize[1]);
    let device = responses.device();

    // 1. The prompt, once: its layers' keys and values and its last position's hidden state.
    let mut kept = Vec::with_capacity(net.config().num_layers as usize);
    let positions = Tensor::arange(p, (Kind::Int64, device)).unsqueeze(0);
    let prompt_hidden = net.forward_layers(
        prompt,
        &positions,
        &AttnMask::Causal,
        LayerKv::Keep(&mut kept),
    )?;
    let last = prompt_hidden.narrow(1, p - 1, 1).expand([b, 1, -1], false);

    // 2. The responses but their last token (which scores nothing), after the prompt: each
    // query sees the whole prompt and its own earlier tokens.
    let hidden = if r > 1 {
        let positions = (Tensor::arange(r - 1, (Kind::Int64, device)) + p)
            .unsqueeze(0)
            .expand([b, r - 1], false);
        let query = Tensor::arange(r - 1, (Kind::Int64, device)).view([r - 1, 1]);
        let key = Tensor::arange(p + r - 1, (Kind::Int64, device)).view([1, p + r - 1]);
        let allowed = key.le_tensor(&(query + p)).view([1, 1, r - 1, p + r - 1]);
        let own = net.forward_layers(
            &responses.narrow(1, 0, r - 1),
            &positions,
            &AttnMask::Explicit(&allowed),
            LayerKv::After(&kept),
        )?;
        Tensor::cat(&[last, own], 1)
    } else {
        last
    };
    head_on_mask(
        net,
        hidden.reshape([b * r, -1]),
        responses,
        mask,
        HeadSettings {
            temperature,
            entropy_grad,
            logit_budget: memory.logit_budget,
        },
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::masked_logprobs::test_grads::{clear_grads, grads};
    use crate::masked_logprobs::{masked_sequence_logprobs_with, LOGIT_BUDGET};
    use crate::Model;
    use tch::Device;

    /// Three responses of different lengths (right-padded) after one prompt: the same
    /// log-probabilities, entropies and parameter gradients as the plain forward over
    /// prompt + response rows, with one head chunk and with recomputed chunks, and for a
    /// one-token batch.
    #[test]
    fn matches_the_plain_forward_and_gradient() {
        tch::set_num_threads(1);
        let mut model = Model::tiny(Device::Cpu, 11).unwrap();
        model.set_kind(Kind::Double);
        let net = model.net();
        let prompt = [5i64, 9, 14, 22];
        let responses: [&[i64]; 3] = [&[40, 41, 7, 3], &[12], &[13, 33]];
        let weights = [0.7f64, -0.4, 0.25];
        for (logit_budget, rows) in [(LOGIT_BUDGET, 3usize), (128, 3), (LOGIT_BUDGET, 1)] {
            let responses = &responses[..rows];
            let r = responses.iter().map(|x| x.len()).max().unwrap();
            let p = prompt.len();
            // Plain layout: [B, P + R] ids, [B, P + R - 1] positions.
            let width = p + r;
            let (mut ids, mut mask, mut w) = (
                vec![0i64; rows * width],
                vec![0f64; rows * (width - 1)],
                vec![0f64; rows * (width - 1)],
            );
            // Shared layout: [B, R].
            let (mut rids, mut rmask, mut rw) = (
                vec![0i64; rows * r],
                vec![0f64; rows * r],
                vec![0f64; rows * r],
            );
            for (i, resp) in responses.iter().enumerate() {
                ids[i * width..i * width + p].copy_from_slice(&prompt);
                ids[i * width + p..i * width + p + resp.len()].copy_from_slice(resp);
                rids[i * r..i * r + resp.len()].copy_from_slice(resp);
                for j in 0..resp.len() {
                    let wj = weights[i] * (1.0 + 0.1 * j as f64);
                    mask[i * (width - 1) + p + j - 1] = 1.0;
                    w[i * (width - 1) + p + j - 1] = wj;
                    rmask[i * r + j] = 1.0;
                    rw[i * r + j] = wj;
                }
            }
            let t = |v: &[f64], c: usize| Tensor::from_slice(v).reshape([rows as i64, c as i64]);
            let memory = MemoryOptions {
                logit_budget,
                checkpoint_layers: false,
            };
            let loss_of = |o: &TokenLogprobs, w: &Tensor, m: &Tensor| {
                (&o.logprobs * w).sum(Kind::Double) + (&o.entropy * m).sum(Kind::Double) * 0.1
            };

            clear_grads(&model);
            let ids_t = Tensor::from_slice(&ids).reshape([rows as i64, width as i64]);
            let (mask_t, w_t) = (t(&mask, width - 1), t(&w, width - 1));
            let (plain, head) =
                masked_sequence_logprobs_with(net, &ids_t, &mask_t, 0.7, EntropyGrad::Yes, memory)
                    .unwrap();
            head.backward(&loss_of(&plain, &w_t, &mask_t)).unwrap();
            let want = grads(&model);
            let plain_lp = plain.logprobs.detach().narrow(1, p as i64 - 1, r as i64);
            let plain_ent = plain.entropy.detach().narrow(1, p as i64 - 1, r as i64);

            clear_grads(&model);
            let prompt_t = Tensor::from_slice(&prompt).reshape([1, p as i64]);
            let rids_t = Tensor::from_slice(&rids).reshape([rows as i64, r as i64]);
            let (rmask_t, rw_t) = (t(&rmask, r), t(&rw, r));
            let (shared, head) = shared_prompt_logprobs(
                net,
                &prompt_t,
                &rids_t,
                &rmask_t,
                0.7,
                EntropyGrad::Yes,
                memory,
            )
            .unwrap();
            let lp_diff = (shared.logprobs.detach() - &plain_lp)
                .abs()
                .max()
                .double_value(&[]);
            let ent_diff = (shared.entropy.detach() * &rmask_t - &plain_ent * &rmask_t)
                .abs()
                .max()
                .double_value(&[]);
            assert!(
                lp_diff < 1e-10 && ent_diff < 1e-10,
                "({logit_budget}, {rows}): {lp_diff} {ent_diff}"
            );
            head.backward(&loss_of(&shared, &rw_t, &rmask_t)).unwrap();
            let mut compared = 0;
            for ((name, g), (_, h)) in grads(&model).iter().zip(&want) {
                let diff = (g - h).abs().max().double_value(&[]);
                let scale = h.abs().max().double_value(&[]);
                assert!(
                    diff <= 1e-9 * scale.max(1.0),
                    "({logit_budget}, {rows}): {name} differs by {diff}"
                );
                compared += usize::from(scale > 0.0);
            }
            assert!(compared > 10, "too few parameters received a gradient");
        }
    }

    #[test]
    fn refuses_bad_shapes_and_checkpointing() {
        let model = Model::tiny(Device::Cpu, 1).unwrap();
        let ids = Tensor::from_slice(&[1i64, 2]).reshape([1, 2]);
        let mask = Tensor::ones([1, 2], (Kind::Float, Device::Cpu));
        let empty = Tensor::zeros([1, 0], (Kind::Int64, Device::Cpu));
        let mem = MemoryOptions::default();
        assert!(shared_prompt_logprobs(
            model.net(),
            &empty,
            &ids,
            &mask,
            1.0,
            EntropyGrad::No,
            mem
        )
        .is_err());
        let bad_mask = Tensor::ones([1, 3], (Kind::Float, Device::Cpu));
        assert!(shared_prompt_logprobs(
            model.net(),
            &ids,
            &ids,
            &bad_mask,
            1.0,
            EntropyGrad::No,
            mem
        )
        .is_err());
        let ckpt = MemoryOptions {
            checkpoint_layers: true,
            ..mem
        };
        assert!(
            shared_prompt_logprobs(model.net(), &ids, &ids, &mask, 1.0, EntropyGrad::No, ckpt)
                .is_err()
        );
    }
}
