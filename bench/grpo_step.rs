//! fulcrum's side of the reference GRPO step (`../shared/bench-workload.md`), run through the
//! trainer's own `grpo_step`: the Qwen2-shaped 3.2M model written by `bench/trl_grpo_step.py
//! --build` (the very weights TRL loads), 16 digit-sum prompts x 8 samples, at most 64 new
//! tokens, temperature 1, group-normalised advantages, one PPO epoch and one AdamW step over all
//! 128 completions, clip 0.2, lr 1e-5, gradient clip 1.0, no KL.
//!
//! Usage: grpo-step-bench --model DIR [--rule ba|token] [--warmup 2] [--steps 10] [--threads N]
//!        [--micro 16] [--skip-zero-weight] [--share-prompt]
//! `--skip-zero-weight`: leave weight-0 responses (equal-reward groups) out of training;
//! `--share-prompt`: forward each prompt once for its group's responses. Both are the trainer's
//! defaults and both leave the gradient as it is; the bench turns them on only when asked, so
//! that the comparison with TRL does the same work.
//! `--micro`: responses per forward/backward; they are sorted by length first, so small
//! micro-batches pad little (the gradient is the same for any size).
//! Prints one JSON line: every timed step's seconds, their median and the split into sampling,
//! scoring and training.

use std::path::Path;

use anyhow::{bail, Context, Result};
use fulcrum_core::SplitMix64;
use fulcrum_model::{tch, Model};
use fulcrum_tasks::{Example, Score, Split, Task, Verifier};
use fulcrum_train::policy::{new_optimizer, Policy};
use fulcrum_train::step::grpo_step;
use fulcrum_train::{Config, DataPosition, DataStream};
use serde_json::json;

/// The workload's task: `S <n digits>:` (n from 3 to 9); the answer is the sum of the digits,
/// read after the completion's last `A` (the whole completion when it has none).
struct DigitSum;

impl Task for DigitSum {
    fn name(&self) -> &str {
        "digit-sum"
    }

    fn examples(
        &self,
        _split: Split,
        seed: u64,
        count: usize,
    ) -> fulcrum_tasks::Result<Vec<Example>> {
        let mut rng = SplitMix64::seeded(seed);
        Ok((0..count)
            .map(|i| {
                let n = rng.range(3, 9);
                let digits: Vec<u64> = (0..n).map(|_| rng.range(0, 9)).collect();
                let text: String = digits.iter().map(|d| d.to_string()).collect();
                Example {
                    id: format!("digit-sum-{seed}-{i}"),
                    prompt: format!("S {text}:"),
                    answer: digits.iter().sum::<u64>().to_string(),
                    demonstration: None,
                    verifier: Verifier::Exact,
                    entry_point: None,
                }
            })
            .collect())
    }

    fn score(&self, example: &Example, response: &str) -> Score {
        let got = response.rfind('A').map_or(response, |i| &response[i + 1..]);
        let correct = got.trim() == example.answer;
        Score {
            reward: f64::from(u8::from(correct)),
            correct,
            reason: format!("got {:?}", got.trim()),
        }
    }
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let model_dir = arg(&args, "--model").context("--model DIR is required")?;
    let warmup: u64 = arg(&args, "--warmup").unwrap_or("2").parse()?;
    let steps: u64 = arg(&args, "--steps").unwrap_or("10").parse()?;
    let threads: usize = arg(&args, "--threads").unwrap_or("0").parse()?;
    let rule = arg(&args, "--rule").unwrap_or("ba");
    let micro = arg(&args, "--micro").unwrap_or("16");

    let set = |cfg: &Config, kv: &[&str]| -> Result<Config> {
        let mut table: toml::Table = toml::from_str(&cfg.to_toml())?;
        for s in kv {
            fulcrum_train::apply_override(&mut table, s)?;
        }
        Ok(Config::from_table(table, "grpo-step-bench")?)
    };
    let cfg = set(
        &Config::default(),
        &[
            &format!("rule={rule}"),
            "seed=0",
            &format!("threads={threads}"),
            "advantage=grpo",
            "rollout.prompts_per_step=16",
            "rollout.group_size=8",
            "rollout.max_response_len=64",
            "rollout.temperature=1.0",
            "rollout.top_p=1.0",
            "rollout.top_k=0",
            "ppo.epochs=1",
            "ppo.mini_batches=1",
            &format!("ppo.micro_batch_size={micro}"),
            "ppo.eps_low=0.2",
            "ppo.eps_high=0.2",
            "ppo.dual_clip_c=1000.0",
            "ppo.kl_coef=0.0",
            "ppo.entropy_coef=0.0",
            &format!(
                "ppo.skip_zero_weight={}",
                args.iter().any(|a| a == "--skip-zero-weight")
            ),
            &format!(
                "ppo.share_prompt={}",
                args.iter().any(|a| a == "--share-prompt")
            ),
            "optim.lr=0.00001",
            "optim.weight_decay=0.0",
            "optim.grad_clip=1.0",
        ],
    )?;
    let (resolved, _) = fulcrum_train::resolve_runtime(&cfg)?;
    let threads = resolved.threads;
    let model = Model::load_hf(Path::new(model_dir), tch::Device::Cpu)
        .with_context(|| format!("loading the bench model from {model_dir}"))?;
    if !Path::new(model_dir).join("model.safetensors").exists() {
        bail!("{model_dir} is not the bench model folder (run bench/trl_grpo_step.py --build)");
    }
    let opt = new_optimizer(&cfg.optim, &model).into();
    let mut ranks = fulcrum_train::ranks::Ranks::single();
    let mut policy = Policy {
        model,
        opt,
        reference: None,
    };
    let mut data = DataStream::new(
        0,
        DataPosition {
            chunk: 0,
            offset: 0,
        },
    );
    let (mut step_s, mut sample_s, mut score_s, mut train_s) = (vec![], vec![], vec![], vec![]);
    let (mut tokens, mut reward, mut mixed) = (0f64, 0f64, 0f64);
    for step in 0..warmup + steps {
        let t0 = std::time::Instant::now();
        let report = grpo_step(
            &mut fulcrum_train::engine::RolloutEngine::Native(None),
            &mut policy,
            &mut ranks,
            &DigitSum,
            &cfg,
            step,
            &mut data,
            cfg.optim.lr,
        )?;
        let secs = t0.elapsed().as_secs_f64();
        if step < warmup {
            continue;
        }
        let m = &report.metrics;
        step_s.push(secs);
        sample_s.push(m.time_sample);
        score_s.push(m.time_score);
        train_s.push(m.time_train);
        tokens += m.sample_tokens as f64;
        reward += m.reward_mean;
        mixed += m.groups_mixed;
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let n = steps.max(1) as f64;
    println!(
        "{}",
        json!({
            "side": "fulcrum",
            "rule": rule,
            "micro_batch_size": cfg.ppo.micro_batch_size,
            "skip_zero_weight": cfg.ppo.skip_zero_weight,
            "share_prompt": cfg.ppo.share_prompt,
            "threads": threads,
            "step_s": step_s,
            "median_s": median(&step_s),
            "median_sample_s": median(&sample_s),
            "median_score_s": median(&score_s),
            "median_train_s": median(&train_s),
            "mean_completion_tokens": tokens / n / 128.0,
            "mean_reward": reward / n,
            "mean_groups_mixed": mixed / n,
        })
    );
    Ok(())
}
