//! Supervised warm-up on a task's demonstrations, so that a model trained from scratch (the
//! built-in tiny model) starts RL able to answer some prompts: token-mean negative
//! log-likelihood of the demonstration (and its stop token) given the prompt. Each step goes
//! through the same guarded update as RL (`policy.rs`), so a non-finite step is skipped, counted
//! and reported. The cache of warmed-up models is in `warmup.rs`.

use fulcrum_core::rng::mix;
use fulcrum_model::logprobs::EntropyGrad;
use fulcrum_model::masked_logprobs::masked_sequence_logprobs_with;
use fulcrum_model::optim::{LrSchedule, Update};
use fulcrum_model::Model;
use fulcrum_tasks::Task;
use tch::Kind;

use crate::config::Config;
use crate::data::{DataPosition, DataStream};
use crate::error::TrainError;
use crate::interrupt::stop_requested;
use crate::packing::{pack, Item};
use crate::policy::{guarded_update, new_optimizer, Optimizer};
use crate::ranks::Ranks;
use crate::rollout::Rollout;
use crate::score::encode_prompt;

/// Progress of SFT, reported after every step.
pub struct SftProgress {
    pub step: u64,
    pub loss: f64,
    /// Steps skipped so far (non-finite loss or gradient).
    pub skipped: u64,
}

/// Runs `cfg.sft.steps` steps of SFT on `model` in place; calls `on_step` after each. Returns
/// the number of steps skipped by the non-finite guard.
pub fn run_sft(
    model: &mut Model,
    task: &dyn Task,
    cfg: &Config,
    mut on_step: impl FnMut(SftProgress),
) -> Result<u64, TrainError> {
    let s = &cfg.sft;
    let mut opt: Optimizer = new_optimizer(&cfg.optim, model).into();
    // The warm-up runs in one process (rank 0 of a job), so it and its cache are the same at
    // any rank count.
    let mut alone = Ranks::single();
    let mut skipped = 0;
    let schedule = LrSchedule::Cosine {
        peak: s.lr,
        min: s.lr * 0.1,
        warmup: s.warmup_steps,
        total: s.steps,
    };
    // A stream of its own, so SFT and RL prompts are drawn independently.
    let mut data = DataStream::new(
        mix(cfg.sft_seed(), 0x5f7),
        DataPosition {
            chunk: 0,
            offset: 0,
        },
    );
    let eos = *model
        .stop_token_ids()
        .first()
        .ok_or(TrainError::NoStopToken)?;
    for step in 0..s.steps {
        let examples = data.take(task, s.batch_size)?;
        let tok = model.tokenizer()?;
        let mut demos = Vec::with_capacity(examples.len());
        for ex in &examples {
            let demo = ex
                .demonstration
                .as_deref()
                .ok_or_else(|| TrainError::NoDemonstration {
                    task: task.name().to_string(),
                    example: ex.id.clone(),
                })?;
            let mut response_ids = tok.encode(demo)?;
            response_ids.push(eos);
            let n = response_ids.len();
            demos.push(Rollout {
                group: 0,
                prompt_ids: encode_prompt(model, &ex.prompt)?,
                response_ids,
                old_logprobs: vec![0.0; n],
                engine: None,
                is_weights: None,
                truncated: false,
                text: String::new(),
                reward: 0.0,
                correct: false,
                reason: String::new(),
                tool_mask: Vec::new(),
            });
        }
        let tokens: usize = demos.iter().map(|d| d.response_ids.len()).sum();
        let weight = 1.0 / tokens.max(1) as f64;
        // Longest first, cut into micro-batches: each pads only to its own longest sequence.
        // (A batch that fits one micro-batch keeps its order.)
        let mut order: Vec<usize> = (0..demos.len()).collect();
        if demos.len() > s.micro_batch_size {
            order.sort_by_key(|&i| {
                std::cmp::Reverse(demos[i].prompt_ids.len() + demos[i].response_ids.len())
            });
        }
        let micro = s.micro_batch_size.max(1);
        let (value, update) = guarded_update(
            model,
            &mut opt,
            &mut alone,
            cfg.optim.grad_clip,
            schedule.lr(step),
            || {
                let mut value = 0.0;
                for chunk in order.chunks(micro) {
                    let items: Vec<Item<'_>> = chunk
                        .iter()
                        .map(|&i| Item {
                            rollout: &demos[i],
                            advantage: 0.0,
                            weight,
                            active: true,
                            selected: None,
                        })
                        .collect();
                    let p = pack(&items, model.device());
                    let (out, head) = masked_sequence_logprobs_with(
                        model.net(),
                        &p.input_ids,
                        &p.mask,
                        1.0,
                        EntropyGrad::No,
                        cfg.memory(),
                    )?;
                    let loss = -(&out.logprobs * &p.weights).sum(Kind::Float);
                    head.backward(&loss)?;
                    value += loss.double_value(&[]);
                }
                Ok((value, value))
            },
        )?;
        if update == Update::Skipped {
            skipped += 1;
        }
        on_step(SftProgress {
            step: step + 1,
            loss: value,
            skipped,
        });
        if stop_requested() && step + 1 < s.steps {
            return Err(TrainError::Interrupted {
                phase: "SFT",
                step: step + 1,
                hint: "the warm-up was not finished, nothing of it is kept".into(),
            });
        }
    }
    Ok(skipped)
}
