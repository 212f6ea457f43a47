//! Batched autoregressive sampling with a preallocated KV cache.
//!
//! Steps (numbered as in the code): 1 left-pad the distinct prompts so they end together,
//! 2 prefill them once, 3 replicate each prompt's cache rows into its G samples, 4 decode all
//! rows together, one token per step, sampling the whole batch at once, 5 drop finished rows
//! from the batch (and the cache) once they are a quarter of it. Padding is masked and positions start at each prompt's first
//! real token, so a prompt's output does not depend on what else is in the batch.
//!
//! Returned per completion: the sampled token ids (including the stop token that ended it), and
//! the log-probability of each under the distribution actually sampled from (temperature,
//! top-k and top-p applied). With temperature 1 and no top-k/top-p this is exactly what
//! `logprobs::token_logprobs` computes in training. Greedy decoding reports the log-probability
//! under the untempered softmax. The sampler knows token ids only; stop strings need a tokenizer.

use tch::{Kind, Tensor};

use crate::error::{ModelError, Result, TorchContext};
use crate::kv_cache::KvCache;
use crate::tokenizer::Tokenizer;
use crate::transformer::{AttnMask, Transformer};
use crate::turns::{feed_answers, Slots, Turns};
use fulcrum_core::SplitMix64;

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The most likely token.
    Greedy,
    /// Draw from softmax(logits / temperature), optionally restricted to the `top_k` most likely
    /// tokens and then to the smallest set whose probability reaches `top_p`.
    Sample {
        temperature: f64,
        top_k: Option<i64>,
        top_p: Option<f64>,
    },
}

impl Sampling {
    fn validate(&self) -> Result<()> {
        if let Sampling::Sample {
            temperature,
            top_k,
            top_p,
        } = *self
        {
            if !(temperature > 0.0 && temperature.is_finite()) {
                return Err(ModelError::Invalid(format!(
                    "temperature must be > 0, got {temperature}"
                )));
            }
            if top_k.is_some_and(|k| k < 1) {
                return Err(ModelError::Invalid(format!(
                    "top_k must be >= 1, got {top_k:?}"
                )));
            }
            if top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
                return Err(ModelError::Invalid(format!(
                    "top_p must be in (0, 1], got {top_p:?}"
                )));
            }
        }
        Ok(())
    }
}

/// A batch of prompts to complete.
#[derive(Debug, Clone)]
pub struct SampleRequest {
    /// Token ids of each distinct prompt.
    pub prompts: Vec<Vec<i64>>,
    /// Completions per prompt (G in GRPO).
    pub samples_per_prompt: usize,
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Row (prompt p, sample g) draws from the stream seeded by (seed, first_prompt + p, g).
    pub seed: u64,
    /// The index of the first prompt in the batch it belongs to: a rank sampling its share of
    /// a step's prompts draws the streams the whole batch would (same tokens at any rank count).
    pub first_prompt: usize,
    /// A sampled token in this list ends its sequence (it is kept in the output).
    pub stop_token_ids: Vec<i64>,
    /// A decoded completion containing one of these ends (needs a tokenizer).
    pub stop_strings: Vec<String>,
}

/// Why a completion ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    StopToken(i64),
    StopString(String),
    Length,
}

/// One sampled completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub prompt_index: usize,
    pub sample_index: usize,
    /// The response: sampled tokens and, in a multi-turn response, the tools' answers.
    pub tokens: Vec<i64>,
    /// Per token: its log-probability when sampled, 0 for a tool's token.
    pub logprobs: Vec<f32>,
    /// Per token: whether a tool wrote it (empty: none did; see [`crate::turns`]).
    pub tool: Vec<bool>,
    pub finish: Finish,
}

/// Choose the next token of every row: `(tokens [B] int64, logprobs [B] f32)` for float
/// `logits` `[B, V]`, drawing one uniform per row from `rngs`.
pub fn sample_next(
    logits: &Tensor,
    sampling: Sampling,
    rngs: &mut [SplitMix64],
) -> Result<(Tensor, Tensor)> {
    let (tokens, logp) = draw(&logits.to_kind(Kind::Float), sampling, rngs);
    // A NaN or +inf logit makes the chosen token's log-probability NaN or -inf (the whole row's
    // log-softmax is NaN), so checking the `[B]` chosen values finds every bad row without a
    // pass over the `[B, V]` logits: refused, so that the trainer can skip the step with a reason.
    if !bool::try_from(logp.isfinite().all()).unwrap_or(false) {
        return Err(ModelError::NonFiniteLogits);
    }
    Ok((tokens, logp))
}

/// The draw of [`sample_next`], before its check: `(tokens [B], logprobs [B])`.
fn draw(logits: &Tensor, sampling: Sampling, rngs: &mut [SplitMix64]) -> (Tensor, Tensor) {
    match sampling {
        Sampling::Greedy => {
            let tokens = logits.argmax(-1, true);
            let logp = logits
                .log_softmax(-1, Kind::Float)
                .gather(1, &tokens, false);
            (tokens.squeeze_dim(1), logp.squeeze_dim(1))
        }
        Sampling::Sample {
            temperature,
            top_k,
            top_p,
        } => {
            let vocab = logits.size()[1];
            let mut scaled = logits / temperature;
            if let Some(k) = top_k.filter(|&k| k < vocab) {
                let (top, _) = scaled.topk(k, -1, true, true);
                let kth = top.narrow(1, k - 1, 1);
                scaled = scaled.masked_fill(&scaled.lt_tensor(&kth), f64::NEG_INFINITY);
            }
            if let Some(p) = top_p.filter(|&p| p < 1.0) {
                let (sorted, order) = scaled.sort(-1, true);
                let probs = sorted.softmax(-1, Kind::Float);
                // Drop a token when the tokens before it already reach p (the first always stays).
                let before = probs.cumsum(-1, Kind::Float) - &probs;
                let drop_sorted = before.ge(p);
                let drop = drop_sorted.scatter(1, &order, &drop_sorted);
                scaled = scaled.masked_fill(&drop, f64::NEG_INFINITY);
            }
            let logp_all = scaled.log_softmax(-1, Kind::Float);
            let cdf = logp_all
                .exp()
                .to_kind(Kind::Double)
                .cumsum(-1, Kind::Double);
            let u: Vec<f64> = rngs.iter_mut().map(|r| r.uniform()).collect();
            let u = Tensor::from_slice(&u)
                .to_device(logits.device())
                .unsqueeze(1);
            // Scale u to the total so that rounding in the cumulative sum cannot pick a
            // zero-probability token at the end.
            let u = u * cdf.narrow(1, vocab - 1, 1);
            let tokens = cdf
                .lt_tensor(&u)
                .sum_dim_intlist(-1, true, Kind::Int64)
                .clamp_max(vocab - 1);
            let logp = logp_all.gather(1, &tokens, false);
            (tokens.squeeze_dim(1), logp.squeeze_dim(1))
        }
    }
}

/// Sample completions for every prompt (see the module header). Runs under `no_grad`.
/// Completions come back prompt-major: `[p0 g0, p0 g1, ..., p1 g0, ...]`.
pub fn generate(
    net: &Transformer,
    req: &SampleRequest,
    tokenizer: Option<&Tokenizer>,
) -> Result<Vec<Completion>> {
    if !check(net, req, tokenizer)? {
        return Ok(vec![]);
    }
    tch::no_grad(|| run(net, req, tokenizer, None))
}

/// [`generate`] with tool calls in the middle of a response ([`crate::turns`]): a row whose
/// response completes a call waits for its answer, which is written after it (the KV cache is
/// extended) before it samples on. `max_new_tokens` bounds each response, answers included: a
/// row whose answer would reach it ends there, cut (`Finish::Length`).
pub fn generate_turns(
    net: &Transformer,
    req: &SampleRequest,
    tokenizer: Option<&Tokenizer>,
    turns: &mut dyn Turns,
) -> Result<Vec<Completion>> {
    if !check(net, req, tokenizer)? {
        return Ok(vec![]);
    }
    tch::no_grad(|| run(net, req, tokenizer, Some(turns)))
}

/// Refuses a request the sampler cannot serve; false when there is nothing to sample.
fn check(net: &Transformer, req: &SampleRequest, tokenizer: Option<&Tokenizer>) -> Result<bool> {
    req.sampling.validate()?;
    if req.prompts.is_empty() || req.samples_per_prompt == 0 {
        return Ok(false);
    }
    if let Some(i) = req.prompts.iter().position(|p| p.is_empty()) {
        return Err(ModelError::Invalid(format!("prompt {i} is empty")));
    }
    // Backstops of the bounds every command checks on its own flags and keys.
    use crate::limits::{MAX_SAMPLES_PER_PROMPT, MAX_SEQUENCE_TOKENS};
    if req.max_new_tokens > MAX_SEQUENCE_TOKENS {
        return Err(ModelError::Invalid(format!(
            "max_new_tokens {} is more than {MAX_SEQUENCE_TOKENS}, the most fulcrum samples",
            req.max_new_tokens
        )));
    }
    if req.samples_per_prompt > MAX_SAMPLES_PER_PROMPT {
        return Err(ModelError::Invalid(format!(
            "{} samples per prompt is more than {MAX_SAMPLES_PER_PROMPT}, the most fulcrum samples",
            req.samples_per_prompt
        )));
    }
    let vocab = net.config().vocab_size;
    for (i, p) in req.prompts.iter().enumerate() {
        if let Some(bad) = p.iter().find(|&&t| t < 0 || t >= vocab) {
            return Err(ModelError::Invalid(format!(
                "prompt {i} has token id {bad} outside the vocabulary (size {vocab})"
            )));
        }
    }
    if !req.stop_strings.is_empty() && tokenizer.is_none() {
        return Err(ModelError::Invalid("stop strings need a tokenizer".into()));
    }
    Ok(true)
}

fn run(
    net: &Transformer,
    req: &SampleRequest,
    tokenizer: Option<&Tokenizer>,
    mut turns: Option<&mut dyn Turns>,
) -> Result<Vec<Completion>> {
    let device = net.device();
    let n_prompts = req.prompts.len() as i64;
    let g = req.samples_per_prompt as i64;
    let max_len = req.prompts.iter().map(Vec::len).max().unwrap_or(0) as i64;
    let capacity = max_len + req.max_new_tokens as i64;

    // 1. Left-pad so every prompt ends at position max_len - 1.
    let pads: Vec<i64> = req
        .prompts
        .iter()
        .map(|p| max_len - p.len() as i64)
        .collect();
    let mut ids = vec![0i64; (n_prompts * max_len) as usize];
    for (r, p) in req.prompts.iter().enumerate() {
        let start = r * max_len as usize + pads[r] as usize;
        ids[start..start + p.len()].copy_from_slice(p);
    }
    let ids = Tensor::from_slice(&ids)
        .view([n_prompts, max_len])
        .to_device(device);
    let pad = Tensor::from_slice(&pads).to_device(device);
    let steps = Tensor::arange(max_len, (Kind::Int64, device));
    let positions = (steps.unsqueeze(0) - pad.unsqueeze(1)).clamp_min(0);
    let any_pad = pads.iter().any(|&p| p > 0);

    // 2. Prefill each distinct prompt once.
    let mut cache = KvCache::new(net.config(), n_prompts, capacity, net.kind(), device)?;
    let prefill_mask;
    let mask = if any_pad {
        let q = steps.view([1, max_len, 1]);
        let k = steps.view([1, 1, max_len]);
        let allowed = k
            .le_tensor(&q)
            .logical_and(&k.ge_tensor(&pad.view([n_prompts, 1, 1])));
        prefill_mask = allowed.logical_or(&k.eq_tensor(&q)).unsqueeze(1);
        AttnMask::Explicit(&prefill_mask)
    } else {
        AttnMask::Causal
    };
    let hidden = net.forward_hidden(&ids, &positions, &mask, Some(&mut cache))?;
    let mut logits = net.logits(&hidden.select(1, max_len - 1));

    // 3. Replicate each prompt into its G rows.
    let rows = Tensor::arange(n_prompts, (Kind::Int64, device)).repeat_interleave_self_int(
        g,
        0,
        None::<i64>,
    );
    cache.select_rows(&rows)?;
    logits = logits.index_select(0, &rows);
    let pad = pad.index_select(0, &rows);
    let key_valid = Tensor::arange(capacity, (Kind::Int64, device))
        .unsqueeze(0)
        .ge_tensor(&pad.unsqueeze(1));
    let mut slots = Slots {
        pad,
        key_valid,
        any_pad,
    };
    let mut active: Vec<usize> = (0..(n_prompts * g) as usize).collect();
    let mut rngs: Vec<SplitMix64> = active
        .iter()
        .map(|&r| {
            SplitMix64::for_stream(
                req.seed,
                (req.first_prompt + r / g as usize) as u64,
                (r % g as usize) as u64,
            )
        })
        .collect();
    let mut out: Vec<Completion> = active
        .iter()
        .map(|&r| Completion {
            prompt_index: r / g as usize,
            sample_index: r % g as usize,
            tokens: vec![],
            logprobs: vec![],
            tool: vec![],
            finish: Finish::Length,
        })
        .collect();

    // 4. Decode. `done[i]`: batch row i has finished but is still in the batch (see 5);
    // `waiting[i]`: it has completed a tool call and waits for its answer (see 6).
    let max_new = req.max_new_tokens;
    let mut done = vec![false; active.len()];
    let mut waiting = vec![false; active.len()];
    // `fresh[i]`: row i began waiting at this step: its last token (the end of its call) is
    // its own and not in the cache yet.
    let mut fresh = vec![false; active.len()];
    if max_new == 0 {
        return Ok(out);
    }
    loop {
        let (tokens, logp) = sample_next(&logits, req.sampling, &mut rngs)?;
        let tok_host = Vec::<i64>::try_from(&tokens).ctx(|| "reading sampled tokens".into())?;
        let logp_host = Vec::<f32>::try_from(&logp.to_kind(Kind::Float))
            .ctx(|| "reading log-probabilities".into())?;
        for (i, &row) in active.iter().enumerate() {
            if done[i] || waiting[i] {
                continue;
            }
            let c = &mut out[row];
            c.tokens.push(tok_host[i]);
            c.logprobs.push(logp_host[i]);
            if turns.is_some() {
                c.tool.push(false);
            }
            if req.stop_token_ids.contains(&tok_host[i]) {
                c.finish = Finish::StopToken(tok_host[i]);
                done[i] = true;
            } else if let Some(s) = stop_string_hit(tokenizer, &c.tokens, &req.stop_strings)? {
                c.finish = Finish::StopString(s);
                done[i] = true;
            } else if c.tokens.len() >= max_new {
                done[i] = true; // Finish::Length
            } else if let Some(t) = turns.as_deref_mut() {
                waiting[i] = t.call_ended(row, &c.tokens, &c.tool)?;
                fresh[i] = waiting[i];
            }
        }
        let n_done = done.iter().filter(|&&d| d).count();
        let n_waiting = waiting.iter().filter(|&&w| w).count();
        if n_done == active.len() {
            break;
        }
        let mut next = tokens;
        if n_done + n_waiting == active.len() {
            // 6. Every row has finished or waits: answer the calls, drop the finished rows,
            // and write the answers into the cache (turns.rs).
            let Some(t) = turns.as_deref_mut() else {
                break;
            };
            let calls: Vec<(usize, &[i64])> = (0..active.len())
                .filter(|&i| waiting[i])
                .map(|i| (active[i], out[active[i]].tokens.as_slice()))
                .collect();
            let answers = t.respond(&calls)?;
            let n_calls = calls.len();
            let mut keep = Vec::new();
            let mut fed = Vec::new();
            for (k, i) in (0..active.len()).filter(|&i| waiting[i]).enumerate() {
                let answer = answers.get(k).ok_or_else(|| {
                    ModelError::Invalid(format!(
                        "{} tool answers for {n_calls} calls",
                        answers.len()
                    ))
                })?;
                let c = &mut out[active[i]];
                // An answer that would fill the budget ends the response before it, cut.
                if answer.is_empty() || c.tokens.len() + answer.len() >= max_new {
                    continue;
                }
                // The call's last token goes into the cache with the answer when it is not there.
                let mut block = Vec::with_capacity(answer.len() + 1);
                if fresh[i] {
                    block.extend(c.tokens.last());
                }
                block.extend_from_slice(answer);
                c.tokens.extend_from_slice(answer);
                c.logprobs.extend(std::iter::repeat_n(0.0, answer.len()));
                c.tool.extend(std::iter::repeat_n(true, answer.len()));
                keep.push(i as i64);
                fed.push(block);
            }
            if keep.is_empty() {
                break;
            }
            let idx = Tensor::from_slice(&keep).to_device(device);
            cache.select_rows(&idx)?;
            slots.pad = slots.pad.index_select(0, &idx);
            slots.key_valid = slots.key_valid.index_select(0, &idx);
            active = keep.iter().map(|&i| active[i as usize]).collect();
            rngs = keep.iter().map(|&i| rngs[i as usize].clone()).collect();
            done = vec![false; active.len()];
            waiting = vec![false; active.len()];
            fresh = vec![false; active.len()];
            logits = feed_answers(net, &mut cache, &mut slots, &fed)?;
            continue;
        }
        // 5. Drop finished rows from the batch and the cache, once they are a quarter of it:
        // compacting copies the whole cache, so doing it for every finished row would cost
        // more than decoding a few dead rows (their tokens are ignored; each row has its own
        // random stream, so they do not disturb the others).
        if n_done * 4 >= active.len() {
            let keep: Vec<i64> = (0..active.len() as i64)
                .filter(|&i| !done[i as usize])
                .collect();
            let idx = Tensor::from_slice(&keep).to_device(device);
            cache.select_rows(&idx)?;
            slots.pad = slots.pad.index_select(0, &idx);
            slots.key_valid = slots.key_valid.index_select(0, &idx);
            next = next.index_select(0, &idx);
            active = keep.iter().map(|&i| active[i as usize]).collect();
            rngs = keep.iter().map(|&i| rngs[i as usize].clone()).collect();
            waiting = keep.iter().map(|&i| waiting[i as usize]).collect();
            fresh = keep.iter().map(|&i| fresh[i as usize]).collect();
            done = vec![false; active.len()];
            slots.any_pad = slots.pad.max().int64_value(&[]) > 0;
        }
        // A row that waits since an earlier step is fed a token it did not take: its slot is
        // masked (a row that began waiting now is fed its own last token).
        let idle: Vec<bool> = waiting.iter().zip(&fresh).map(|(&w, &f)| w && !f).collect();
        fresh = vec![false; active.len()];
        let b = active.len() as i64;
        let len = cache.len();
        if len + 1 > cache.capacity() {
            cache.grow(cache.capacity() + max_new as i64)?;
            let more = Tensor::ones([b, max_new as i64], (Kind::Bool, device));
            slots.key_valid = Tensor::cat(&[&slots.key_valid, &more], 1);
        }
        slots.mask_next(&cache, &idle)?;
        let pos = (Tensor::full([b], len, (Kind::Int64, device)) - &slots.pad).unsqueeze(1);
        let step_mask;
        let mask = if slots.any_pad {
            step_mask = slots
                .key_valid
                .narrow(1, 0, len + 1)
                .view([b, 1, 1, len + 1]);
            AttnMask::Explicit(&step_mask)
        } else {
            AttnMask::None
        };
        let hidden = net.forward_hidden(&next.unsqueeze(1), &pos, &mask, Some(&mut cache))?;
        logits = net.logits(&hidden.select(1, 0));
    }
    Ok(out)
}

fn stop_string_hit(
    tokenizer: Option<&Tokenizer>,
    tokens: &[i64],
    stops: &[String],
) -> Result<Option<String>> {
    let Some(tok) = tokenizer.filter(|_| !stops.is_empty()) else {
        return Ok(None);
    };
    let text = tok.decode(tokens, true)?;
    Ok(stops.iter().find(|s| text.contains(s.as_str())).cloned())
}
