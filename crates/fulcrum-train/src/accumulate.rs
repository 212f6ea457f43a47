//! Gradient accumulation: forward and backward over one mini-batch, cut into micro-batches
//! (design.md step 6).
//!
//! Responses are ordered by total length before cutting, so each micro-batch pads little; the
//! order does not matter to the result because every weight was fixed for the whole step batch
//! (the invariance the spec requires, tested in `tests/invariance.rs`). With `ppo.share_prompt`
//! a micro-batch holds responses of one prompt, which is forwarded once for all of them
//! (`fulcrum_model::shared_prompt`). Gradients accumulate in the parameters' `.grad`; the
//! caller zeroes them before and steps after.

use fulcrum_core::KlEstimator;
use fulcrum_model::logprobs::{EntropyGrad, TokenLogprobs};
use fulcrum_model::masked_logprobs::{masked_sequence_logprobs_with, HeadBackward};
use fulcrum_model::shared_prompt::shared_prompt_logprobs;
use fulcrum_model::{sequence_logprobs, Model};
use tch::{Kind, Tensor};

use crate::config::{ForwardSettings, PpoConfig};
use crate::error::TrainError;
use crate::loss::{kl_estimate, policy_token_loss};
use crate::packing::{pack, pack_shared, Item, Packed};

/// Sums over the micro-batches of a mini-batch (plain numbers, for metrics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MicroStats {
    /// Total loss (policy + regularisers), as back-propagated.
    pub loss: f64,
    /// Policy part of the loss.
    pub policy_loss: f64,
    /// Tokens clipped low, high, dual-clipped, and chosen by Clip-Cov / KL-Cov.
    pub clipped: [f64; 4],
    /// Response tokens that took part.
    pub tokens: usize,
    /// Sum over tokens of the policy's entropy.
    pub entropy_sum: f64,
    /// Sum over tokens of the k3 KL between the sampling policy and the current one.
    pub kl_sampling_sum: f64,
    /// Sum over tokens of the KL estimator to the reference (0 when KL is off).
    pub kl_ref_sum: f64,
}

impl MicroStats {
    /// The sums over every rank of a data-parallel job (the same on each).
    pub fn summed(&self, ranks: &mut crate::ranks::Ranks) -> Result<MicroStats, TrainError> {
        if ranks.world() == 1 {
            return Ok(self.clone());
        }
        let c = self.clipped;
        let v = ranks.sum(&[
            self.loss,
            self.policy_loss,
            c[0],
            c[1],
            c[2],
            c[3],
            self.tokens as f64,
            self.entropy_sum,
            self.kl_sampling_sum,
            self.kl_ref_sum,
        ])?;
        Ok(MicroStats {
            loss: v[0],
            policy_loss: v[1],
            clipped: [v[2], v[3], v[4], v[5]],
            tokens: v[6] as usize,
            entropy_sum: v[7],
            kl_sampling_sum: v[8],
            kl_ref_sum: v[9],
        })
    }

    pub fn add(&mut self, o: &MicroStats) {
        self.loss += o.loss;
        self.policy_loss += o.policy_loss;
        for k in 0..4 {
            self.clipped[k] += o.clipped[k];
        }
        self.tokens += o.tokens;
        self.entropy_sum += o.entropy_sum;
        self.kl_sampling_sum += o.kl_sampling_sum;
        self.kl_ref_sum += o.kl_ref_sum;
    }
}

/// Runs forward and backward over `items` in micro-batches of `fwd.micro_batch_size`
/// responses, accumulating the gradients of `model` under the loss and regularisers of `ppo`
/// (`reference`: the frozen model of the KL term, when on).
pub fn backward_micro_batches(
    model: &Model,
    reference: Option<&Model>,
    items: &[Item<'_>],
    reg_weight: f64,
    fwd: &ForwardSettings,
    ppo: &PpoConfig,
) -> Result<MicroStats, TrainError> {
    // A zero-weight response contributes nothing to the gradient unless a regulariser (which
    // averages over every response token) is on.
    let regularised = ppo.entropy_coef > 0.0 || (ppo.kl_coef > 0.0 && reference.is_some());
    let skip_zero = ppo.skip_zero_weight && !regularised;
    let order: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].active && !(skip_zero && items[i].weight == 0.0))
        .collect();
    let device = model.device();
    let share = fwd.share_prompt;
    let mut stats = MicroStats::default();
    for chunk in micro_batches(items, order, fwd.micro_batch_size.max(1), share) {
        let mb: Vec<Item<'_>> = chunk.iter().map(|&i| items[i]).collect();
        let p = pack_micro_batch(&mb, share, device);
        if p.tokens == 0 {
            continue;
        }
        let entropy_grad = if ppo.entropy_coef > 0.0 {
            EntropyGrad::Yes
        } else {
            EntropyGrad::No
        };
        // Only response positions go through the LM head, in bounded chunks.
        let (out, head) = forward_logprobs(model, &p, entropy_grad, fwd)?;
        let (token_loss, counts) = policy_token_loss(ppo.loss, &out.logprobs, &p, &ppo.params);
        // Truncated importance weights (engine rollouts with `rollout.is_cap`) scale each
        // token's loss; they are constants, like the aggregation weights.
        let token_loss = match &p.is_weights {
            Some(w) => token_loss * w,
            None => token_loss,
        };
        let policy_loss = (&token_loss * &p.weights).sum(Kind::Float);
        let reg = &p.mask * reg_weight;
        // Terms are collected and summed out of place: an in-place update of a tensor that
        // shares storage with `policy_loss` would corrupt both the value and the graph.
        let mut terms = vec![policy_loss.shallow_clone()];
        if ppo.entropy_coef > 0.0 {
            terms.push((&out.entropy * &reg).sum(Kind::Float) * -ppo.entropy_coef);
        }
        let mut kl_ref_sum = 0.0;
        if let (Some(reference), true) = (reference, ppo.kl_coef > 0.0) {
            let ref_lp = tch::no_grad(|| match &p.prompt {
                Some(_) => forward_logprobs(reference, &p, EntropyGrad::No, fwd)
                    .map(|(out, _)| out.logprobs),
                None => sequence_logprobs(reference.net(), &p.input_ids, fwd.temperature)
                    .map(|out| out.logprobs)
                    .map_err(TrainError::from),
            })?;
            let kl = kl_estimate(&out.logprobs, &ref_lp, ppo.kl_estimator);
            kl_ref_sum = tch::no_grad(|| (&kl * &p.mask).sum(Kind::Float).double_value(&[]));
            terms.push((&kl * &reg).sum(Kind::Float) * ppo.kl_coef);
        }
        let total = Tensor::stack(&terms, 0).sum(Kind::Float);
        head.backward(&total)?;
        tch::no_grad(|| {
            let kl_sampling = kl_estimate(&out.logprobs, &p.old_logprobs, KlEstimator::K3);
            stats.add(&MicroStats {
                loss: total.double_value(&[]),
                policy_loss: policy_loss.double_value(&[]),
                clipped: counts,
                tokens: p.tokens,
                entropy_sum: (&out.entropy * &p.mask).sum(Kind::Float).double_value(&[]),
                kl_sampling_sum: (&kl_sampling * &p.mask).sum(Kind::Float).double_value(&[]),
                kl_ref_sum,
            })
        });
    }
    Ok(stats)
}

/// Packs one micro-batch of [`micro_batches`]: with `share`, the prompt once (a lone response
/// gains nothing from that and is packed whole).
pub(crate) fn pack_micro_batch(mb: &[Item<'_>], share: bool, device: tch::Device) -> Packed {
    if share && mb.len() > 1 {
        pack_shared(mb, device)
    } else {
        pack(mb, device)
    }
}

/// The micro-batches of `order` (indices into `items`), at most `micro` responses each: sorted
/// by total length so that rows pad little, or, with `share`, runs of responses to the same
/// prompt (sorted by prompt, then length), so that each micro-batch forwards one prompt.
pub(crate) fn micro_batches(
    items: &[Item<'_>],
    mut order: Vec<usize>,
    micro: usize,
    share: bool,
) -> Vec<Vec<usize>> {
    let total = |i: usize| items[i].rollout.prompt_ids.len() + items[i].rollout.response_ids.len();
    if !share {
        order.sort_by_key(|&i| (total(i), i));
        return order.chunks(micro).map(<[usize]>::to_vec).collect();
    }
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&items[a].rollout.prompt_ids, &items[b].rollout.prompt_ids);
        pa.cmp(pb).then((total(a), a).cmp(&(total(b), b)))
    });
    let mut out: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match out.last_mut() {
            Some(last)
                if last.len() < micro
                    && items[last[0]].rollout.prompt_ids == items[i].rollout.prompt_ids =>
            {
                last.push(i)
            }
            _ => out.push(vec![i]),
        }
    }
    out
}

/// The per-position log-probabilities of a packed micro-batch under `model` (the prompt once
/// when the micro-batch shares it), and how to back-propagate through them.
pub(crate) fn forward_logprobs<'a>(
    model: &'a Model,
    p: &Packed,
    entropy_grad: EntropyGrad,
    fwd: &ForwardSettings,
) -> Result<(TokenLogprobs, HeadBackward<'a>), TrainError> {
    let temperature = fwd.temperature;
    let net = model.net();
    Ok(match &p.prompt {
        Some(prompt) => shared_prompt_logprobs(
            net,
            prompt,
            &p.input_ids,
            &p.mask,
            temperature,
            entropy_grad,
            fwd.memory,
        )?,
        None => masked_sequence_logprobs_with(
            net,
            &p.input_ids,
            &p.mask,
            temperature,
            entropy_grad,
            fwd.memory,
        )?,
    })
}
