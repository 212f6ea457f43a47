//! The two pieces of the real-model race (`bench/grpo_real.sh`) that need fulcrum's own code
//! besides `fulcrum train`, which times fulcrum's side:
//!
//!   grpo-real-bench prompts --config C [--set K=V]... --steps N --out FILE
//!       the training prompts `fulcrum train` draws for steps 1..N of that config, in order (one
//!       JSON line each: step, id, prompt, answer), so that TRL is fed the very same ones;
//!   grpo-real-bench check --config C [--set K=V]... --batch FILE --out FILE
//!       the arithmetic check: the batch TRL generated and trained on in its first step (prompt
//!       and completion token ids, TRL's advantages, its completions' text), replayed through
//!       fulcrum's update path (old log-probabilities, the rule's weights, the micro-batched
//!       forward and backward); writes the gradient of every parameter to FILE (safetensors,
//!       fulcrum's parameter names) and prints one JSON line: whether fulcrum renders every
//!       prompt to the same token ids, whether fulcrum's verifier gives TRL's rewards, and the
//!       tokens and loss. The Python side compares the gradients with TRL's.

use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use fulcrum_core::{RuleParams, StepBatch};
use fulcrum_model::tch::{self, Tensor};
use fulcrum_model::ModelSpec;
use fulcrum_train::accumulate::backward_micro_batches;
use fulcrum_train::offpolicy::recompute_old_logprobs;
use fulcrum_train::packing::Item;
use fulcrum_train::rollout::Rollout;
use fulcrum_train::{encode_prompts, Config, DataPosition, DataStream};
use serde::Deserialize;
use serde_json::json;

/// One response of TRL's first step, as `bench/trl_grpo_real.py --check` writes it.
#[derive(Deserialize)]
struct Row {
    /// Index of its prompt among the step's (rows come group by group).
    group: usize,
    /// The user message (the chat template is applied by each side).
    prompt: String,
    answer: String,
    prompt_ids: Vec<i64>,
    completion_ids: Vec<i64>,
    completion: String,
    advantage: f64,
    reward: f64,
}

#[derive(Deserialize)]
struct Batch {
    group_size: usize,
    rows: Vec<Row>,
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn config(args: &[String]) -> Result<Config> {
    let path = arg(args, "--config").context("--config FILE is required")?;
    let sets: Vec<String> = args
        .windows(2)
        .filter(|w| w[0] == "--set")
        .map(|w| w[1].clone())
        .collect();
    Ok(Config::load(Some(Path::new(path)), &sets)?)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("prompts") => prompts(&args),
        Some("check") => check(&args),
        _ => bail!("usage: grpo-real-bench prompts|check --config C [--set K=V]... (see the file's header)"),
    }
}

fn prompts(args: &[String]) -> Result<()> {
    let cfg = config(args)?;
    let steps: usize = arg(args, "--steps").context("--steps N")?.parse()?;
    let out = arg(args, "--out").context("--out FILE")?;
    let task = fulcrum_tasks::create_task(&cfg.task)?;
    // The stream `fulcrum train` starts with (run/mod.rs: seed and position 0).
    let mut data = DataStream::new(
        cfg.seed,
        DataPosition {
            chunk: 0,
            offset: 0,
        },
    );
    let mut file = fs::File::create(out).with_context(|| format!("creating {out}"))?;
    for step in 1..=steps {
        for ex in data.take(task.as_ref(), cfg.rollout.prompts_per_step)? {
            let line = json!({"step": step, "id": ex.id, "prompt": ex.prompt, "answer": ex.answer});
            writeln!(file, "{line}")?;
        }
    }
    Ok(())
}

fn check(args: &[String]) -> Result<()> {
    let cfg = config(args)?;
    let batch_path = arg(args, "--batch").context("--batch FILE")?;
    let out = arg(args, "--out").context("--out FILE")?;
    let text = fs::read_to_string(batch_path).with_context(|| format!("reading {batch_path}"))?;
    let batch: Batch =
        serde_json::from_str(&text).with_context(|| format!("parsing {batch_path}"))?;
    let whole = batch.rows.len().is_multiple_of(batch.group_size.max(1));
    let grouped = batch
        .rows
        .iter()
        .enumerate()
        .all(|(i, r)| r.group == i / batch.group_size.max(1));
    if batch.group_size == 0 || !whole || !grouped {
        bail!(
            "{batch_path}: the rows are not whole groups of {} in order",
            batch.group_size
        );
    }
    tch::set_num_threads(cfg.threads.max(1) as i32);
    // In f32, as TRL's side: the config's `model.dtype` is not applied here.
    let model = ModelSpec::parse(&cfg.model.path)?.load(tch::Device::Cpu, cfg.seed)?;
    let task = fulcrum_tasks::create_task(&cfg.task)?;

    // The prompts as fulcrum renders them, and fulcrum's verdict on TRL's completions.
    let mut same_prompt = 0;
    let mut same_reward = 0;
    let mut rollouts = Vec::with_capacity(batch.rows.len());
    for (i, row) in batch.rows.iter().enumerate() {
        let example = fulcrum_tasks::Example {
            id: format!("trl-{i}"),
            prompt: row.prompt.clone(),
            answer: row.answer.clone(),
            demonstration: None,
            verifier: fulcrum_tasks::Verifier::Math,
            entry_point: None,
        };
        let ids = encode_prompts(&model, std::slice::from_ref(&example), usize::MAX, None)?;
        same_prompt += usize::from(ids[0] == row.prompt_ids);
        let score = task.score(&example, &row.completion);
        same_reward += usize::from(score.reward == row.reward);
        rollouts.push(Rollout {
            group: row.group,
            prompt_ids: row.prompt_ids.clone(),
            response_ids: row.completion_ids.clone(),
            old_logprobs: Vec::new(),
            engine: None,
            is_weights: None,
            truncated: false,
            text: row.completion.clone(),
            reward: row.reward,
            correct: row.reward > 0.0,
            reason: String::new(),
            tool_mask: Vec::new(),
        });
    }

    // On-policy, as TRL's first step: the old log-probabilities are the policy's own.
    let fwd = cfg.forward();
    recompute_old_logprobs(&model, &mut rollouts, &fwd)?;
    let groups: Vec<usize> = rollouts.iter().map(|x| x.group).collect();
    let lengths: Vec<i64> = rollouts.iter().map(|x| x.model_len() as i64).collect();
    let adv: Vec<f64> = batch.rows.iter().map(|r| r.advantage).collect();
    let step_batch = StepBatch::new(&groups, &lengths, &adv)?;
    let params = RuleParams {
        ba_count: cfg.ba_count,
        l_norm: cfg.l_norm(),
        ba_pos_scale: cfg.ba_pos_scale,
    };
    let weights = cfg.rule.weights(&step_batch, &params);
    let items: Vec<Item<'_>> = rollouts
        .iter()
        .enumerate()
        .map(|(i, rollout)| Item {
            rollout,
            advantage: adv[i],
            weight: weights[i],
            active: lengths[i] > 0,
            selected: None,
        })
        .collect();
    // A freshly loaded model holds no gradients: the backward's are the batch's alone.
    let stats = backward_micro_batches(&model, None, &items, 0.0, &fwd, &cfg.ppo)?;
    let grads: Vec<(String, Tensor)> = {
        let mut named: Vec<_> = model
            .var_store()
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .map(|(name, t)| {
                let g = t.grad();
                let g = if g.defined() { g } else { t.zeros_like() };
                (name, g.to_kind(tch::Kind::Float).contiguous())
            })
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named
    };
    Tensor::write_safetensors(&grads, out).with_context(|| format!("writing {out}"))?;
    println!(
        "{}",
        json!({
            "rows": batch.rows.len(),
            "prompts_identical": same_prompt,
            "rewards_identical": same_reward,
            "tokens": lengths.iter().sum::<i64>(),
            "loss": stats.loss,
            "rule": cfg.rule.to_string(),
        })
    );
    Ok(())
}
