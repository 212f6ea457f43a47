//! Rollouts to tensors: a micro-batch of responses as right-padded `[B, T]` token ids plus
//! per-position tensors aligned with the `[B, T-1]` next-token log-probabilities.
//!
//! Position `t` of the log-probabilities scores token `t + 1`, so response token `j` of a
//! sequence whose prompt has `P` tokens sits at position `P + j - 1`. Prompt and padding
//! positions carry weight 0 and mask 0. The aggregation weight `w_i` comes from the whole step
//! batch (fulcrum-core), never from this micro-batch, which is why any split gives the same loss.
//! [`pack_shared`] is the layout of a micro-batch whose responses share one prompt: the prompt
//! once, the responses as `[B, R]`, and position `j` aligned with response token `j`.
//! The loss on these tensors is in `loss.rs`.

use tch::{Device, Tensor};

use crate::rollout::Rollout;

/// One micro-batch, on the model's device.
#[derive(Debug)]
pub struct Packed {
    /// `[B, T]` int64, right-padded with 0: prompt and response (or, with `prompt`, the
    /// response only).
    pub input_ids: Tensor,
    /// `[1, P]` int64: the prompt every row continues, forwarded once ([`pack_shared`]).
    pub prompt: Option<Tensor>,
    /// `[B, T-1]` f32: sampling-time log-probabilities on response positions.
    pub old_logprobs: Tensor,
    /// `[B, T-1]` f32: per-token importance weights of the policy loss, when any response of
    /// the micro-batch has them (1 elsewhere); `None`: all 1.
    pub is_weights: Option<Tensor>,
    /// `[B, T-1]` f32: the response's advantage on its positions.
    pub advantages: Tensor,
    /// `[B, T-1]` f32: the rule's weight `w_i` on response positions.
    pub weights: Tensor,
    /// `[B, T-1]` f32: 1 on response positions that take part in the loss.
    pub mask: Tensor,
    /// `[B, T-1]` f32: 1 on the tokens Clip-Cov or KL-Cov chose for the step
    /// (`fulcrum_core::cov_selection`); `None` when the loss chooses none.
    pub selected: Option<Tensor>,
    /// Response tokens in the micro-batch (the sum of `mask`).
    pub tokens: usize,
}

/// One response of a micro-batch with its step-level numbers.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    pub rollout: &'a Rollout,
    pub advantage: f64,
    pub weight: f64,
    /// False for a response masked out entirely (overlong filtering).
    pub active: bool,
    /// Per response token, whether the step's Clip-Cov / KL-Cov selection chose it.
    pub selected: Option<&'a [bool]>,
}

/// Packs the items (at least one) into tensors on `device`.
pub fn pack(items: &[Item<'_>], device: Device) -> Packed {
    let width = items
        .iter()
        .map(|it| it.rollout.prompt_ids.len() + it.rollout.response_ids.len())
        .max()
        .unwrap_or(2)
        .max(2);
    pack_layout(items, device, Layout::Full { width })
}

/// Packs items that all continue the same prompt (at least one item, a non-empty prompt) with
/// the prompt once: rows hold responses, position `j` scores response token `j`.
pub fn pack_shared(items: &[Item<'_>], device: Device) -> Packed {
    let width = items
        .iter()
        .map(|it| it.rollout.response_ids.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let prompt = &items[0].rollout.prompt_ids;
    debug_assert!(items.iter().all(|it| &it.rollout.prompt_ids == prompt));
    let mut p = pack_layout(items, device, Layout::ResponsesOnly { width });
    p.prompt = Some(
        Tensor::from_slice(prompt)
            .view([1, prompt.len() as i64])
            .to_device(device),
    );
    p
}

/// The inverse of packing for one per-position tensor (`[B, T-1]`, or `[B, R]` when `p` shares
/// its prompt) aligned with `p`: each item's values on its response tokens, in order.
pub fn response_values(
    p: &Packed,
    items: &[Item<'_>],
    values: &Tensor,
) -> Result<Vec<Vec<f32>>, tch::TchError> {
    let width = values.size().get(1).copied().unwrap_or(0) as usize;
    let all = Vec::<f32>::try_from(
        values
            .detach()
            .to_device(Device::Cpu)
            .to_kind(tch::Kind::Float)
            .flatten(0, -1),
    )?;
    Ok(items
        .iter()
        .enumerate()
        .map(|(row, it)| {
            let start = row * width + first_response_position(it.rollout, p.prompt.is_some());
            all[start..start + it.rollout.response_ids.len()].to_vec()
        })
        .collect())
}

/// The position that scores response token 0 (the module's layout note): `P - 1` in a full
/// row, 0 when the prompt is shared and rows hold responses only.
fn first_response_position(r: &Rollout, shared_prompt: bool) -> usize {
    if shared_prompt {
        0
    } else {
        r.prompt_ids.len() - 1
    }
}

/// Where a micro-batch's rows start and how wide they are.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// Prompt then response in each row of `width` ids; `width - 1` scored positions.
    Full { width: usize },
    /// The response alone in each row of `width` ids, each position scoring its own token.
    ResponsesOnly { width: usize },
}

fn pack_layout(items: &[Item<'_>], device: Device, layout: Layout) -> Packed {
    let (width, t1) = match layout {
        Layout::Full { width } => (width, width - 1),
        Layout::ResponsesOnly { width } => (width, width),
    };
    let b = items.len();
    let mut ids = vec![0i64; b * width];
    let mut old = vec![0f32; b * t1];
    let mut adv = vec![0f32; b * t1];
    let mut w = vec![0f32; b * t1];
    let mut mask = vec![0f32; b * t1];
    let mut is_w = vec![1f32; b * t1];
    let any_is = items.iter().any(|it| it.rollout.is_weights.is_some());
    let mut sel = vec![0f32; b * t1];
    let any_sel = items.iter().any(|it| it.selected.is_some());
    let mut tokens = 0;
    for (row, it) in items.iter().enumerate() {
        let r = it.rollout;
        let seq = &mut ids[row * width..(row + 1) * width];
        let shared_prompt = match layout {
            Layout::Full { .. } => {
                let p = r.prompt_ids.len();
                seq[..p].copy_from_slice(&r.prompt_ids);
                seq[p..p + r.response_ids.len()].copy_from_slice(&r.response_ids);
                false
            }
            Layout::ResponsesOnly { .. } => {
                seq[..r.response_ids.len()].copy_from_slice(&r.response_ids);
                true
            }
        };
        let first = first_response_position(r, shared_prompt);
        if !it.active {
            continue;
        }
        // The response defines the positions; its old log-probabilities may still be missing
        // (engine rollouts before the trainer's forward fills them in) and count as 0 then.
        for j in 0..r.response_ids.len() {
            // A tool's tokens are context: no loss, no old log-probability, no count.
            if r.is_tool(j) {
                continue;
            }
            let pos = row * t1 + first + j;
            old[pos] = r.old_logprobs.get(j).copied().unwrap_or(0.0);
            adv[pos] = it.advantage as f32;
            w[pos] = it.weight as f32;
            mask[pos] = 1.0;
            if let Some(w) = r.is_weights.as_ref().and_then(|w| w.get(j)) {
                is_w[pos] = *w;
            }
            if it.selected.and_then(|s| s.get(j)).copied().unwrap_or(false) {
                sel[pos] = 1.0;
            }
            tokens += 1;
        }
    }
    let to = |v: &[f32]| {
        Tensor::from_slice(v)
            .view([b as i64, t1 as i64])
            .to_device(device)
    };
    Packed {
        input_ids: Tensor::from_slice(&ids)
            .view([b as i64, width as i64])
            .to_device(device),
        prompt: None,
        old_logprobs: to(&old),
        is_weights: any_is.then(|| to(&is_w)),
        advantages: to(&adv),
        weights: to(&w),
        mask: to(&mask),
        selected: any_sel.then(|| to(&sel)),
        tokens,
    }
}

/// A rollout for tests: `prompt` prompt tokens, `resp` response tokens with made-up
/// sampling log-probabilities.
#[cfg(test)]
pub(crate) fn test_rollout(prompt: usize, resp: usize) -> Rollout {
    Rollout {
        group: 0,
        prompt_ids: (1..=prompt as i64).collect(),
        response_ids: (10..10 + resp as i64).collect(),
        old_logprobs: (0..resp).map(|j| -0.5 - 0.1 * j as f32).collect(),
        engine: None,
        is_weights: None,
        truncated: false,
        text: String::new(),
        reward: 0.0,
        correct: false,
        reason: String::new(),
        tool_mask: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::test_rollout as rollout;
    use super::*;
    use tch::Kind;

    #[test]
    fn positions_come_from_the_response_even_before_old_logprobs_exist() {
        // An engine rollout before the trainer's forward: tokens, no old log-probabilities.
        let mut r = test_rollout(2, 3);
        r.old_logprobs.clear();
        let items = [Item {
            rollout: &r,
            advantage: 1.0,
            weight: 1.0,
            active: true,
            selected: None,
        }];
        let p = pack(&items, Device::Cpu);
        assert_eq!(p.tokens, 3);
        let mask: Vec<f32> = Vec::try_from(p.mask.flatten(0, -1)).unwrap();
        assert_eq!(mask, vec![0.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn a_tools_tokens_are_context_with_no_loss_and_no_length() {
        // Model, model, tool, tool, model: the tool's answer sits in the sequence (the model
        // reads it) but carries no loss, and the response's length is its 3 own tokens.
        let mut r = test_rollout(2, 5);
        r.tool_mask = vec![false, false, true, true, false];
        assert_eq!(r.model_len(), 3);
        let items = [Item {
            rollout: &r,
            advantage: 1.0,
            weight: 0.5,
            active: true,
            selected: None,
        }];
        let p = pack(&items, Device::Cpu);
        assert_eq!(p.tokens, 3);
        let ids: Vec<i64> = Vec::try_from(p.input_ids.flatten(0, -1)).unwrap();
        assert_eq!(ids, vec![1, 2, 10, 11, 12, 13, 14]);
        let mask: Vec<f32> = Vec::try_from(p.mask.flatten(0, -1)).unwrap();
        assert_eq!(mask, vec![0.0, 1.0, 1.0, 0.0, 0.0, 1.0]);
        let w: Vec<f32> = Vec::try_from(p.weights.flatten(0, -1)).unwrap();
        assert_eq!(w, vec![0.0, 0.5, 0.5, 0.0, 0.0, 0.5]);
    }

    #[test]
    fn packing_aligns_response_tokens_with_next_token_positions() {
        let (a, b) = (rollout(3, 2), rollout(1, 4));
        let items = [
            Item {
                rollout: &a,
                advantage: 1.5,
                weight: 0.25,
                active: true,
                selected: None,
            },
            Item {
                rollout: &b,
                advantage: -1.0,
                weight: 0.5,
                active: true,
                selected: None,
            },
        ];
        let p = pack(&items, Device::Cpu);
        assert_eq!(p.input_ids.size(), vec![2, 5]);
        assert_eq!(p.tokens, 6);
        let mask: Vec<f32> = Vec::try_from(p.mask.flatten(0, -1)).unwrap();
        assert_eq!(mask, vec![0., 0., 1., 1., 1., 1., 1., 1.]);
        let w: Vec<f32> = Vec::try_from(p.weights.flatten(0, -1)).unwrap();
        assert_eq!(w, vec![0., 0., 0.25, 0.25, 0.5, 0.5, 0.5, 0.5]);
        let ids: Vec<i64> = Vec::try_from(p.input_ids.flatten(0, -1)).unwrap();
        assert_eq!(ids, vec![1, 2, 3, 10, 11, 1, 10, 11, 12, 13]);
    }

    #[test]
    fn shared_packing_scores_response_tokens_in_place() {
        let (a, b) = (rollout(3, 2), rollout(3, 4));
        let item = |r, weight| Item {
            rollout: r,
            advantage: 1.0,
            weight,
            active: true,
            selected: None,
        };
        let p = pack_shared(&[item(&a, 0.25), item(&b, 0.5)], Device::Cpu);
        let prompt: Vec<i64> = Vec::try_from(p.prompt.unwrap().flatten(0, -1)).unwrap();
        assert_eq!(prompt, vec![1, 2, 3]);
        assert_eq!(p.input_ids.size(), vec![2, 4]);
        assert_eq!(p.tokens, 6);
        let ids: Vec<i64> = Vec::try_from(p.input_ids.flatten(0, -1)).unwrap();
        assert_eq!(ids, vec![10, 11, 0, 0, 10, 11, 12, 13]);
        let w: Vec<f32> = Vec::try_from(p.weights.flatten(0, -1)).unwrap();
        assert_eq!(w, vec![0.25, 0.25, 0., 0., 0.5, 0.5, 0.5, 0.5]);
        let old: Vec<f32> = Vec::try_from(p.old_logprobs.flatten(0, -1)).unwrap();
        assert_eq!(old[..2], a.old_logprobs[..]);
        assert_eq!(old[4..], b.old_logprobs[..]);
    }

    #[test]
    fn inactive_responses_carry_no_weight() {
        let a = rollout(2, 3);
        let p = pack(
            &[Item {
                rollout: &a,
                advantage: 1.0,
                weight: 1.0,
                active: false,
                selected: None,
            }],
            Device::Cpu,
        );
        assert_eq!(p.tokens, 0);
        assert_eq!(p.weights.sum(Kind::Float).double_value(&[]), 0.0);
    }
}
