//! Rollouts on a real llama.cpp server (scripts/llamacpp-server.sh, SmolLM2-135M Q4_1): the
//! slower suite, run by `.ci/run` with `--ignored` after `fulcrum fetch-assets --only smollm2`.
//! Each test starts its own server(s) on a free loopback port and kills them at the end. One
//! serves the GGUF a final checkpoint is exported as (`export.gguf`), from a GGUF and an HF source.
//!
//! The model file comes from `FULCRUM_SMOLLM2_GGUF` or `assets/`; the engine is installed by the
//! script into `.venv-engine` (`FULCRUM_ENGINE_VENV`) on first use. Missing either is a failure
//! here, not a skip: these tests are only run when asked for.

mod common;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use common::llamacpp::{
    engine_sets, gguf, pushed_files, root, run_metrics, scratch, server_gone, Server,
};
use fulcrum_model::save_gguf::GgufTemplate;
use fulcrum_model::{GgufDtype, Message, Model};
use fulcrum_rollout::{
    EngineClient, FinishReason, GenerateRequest, SamplingParams, WeightFiles, WeightFormat,
};
use tch::{Device, Kind, Tensor};

fn prompt(model: &Model, text: &str) -> Result<Vec<i64>> {
    let rendered = model.chat_template()?.render(&[Message::user(text)], true);
    Ok(model.tokenizer()?.encode(&rendered)?)
}

fn request(
    model: &Model,
    ids: Vec<i64>,
    n: usize,
    max_tokens: usize,
    seed: u64,
) -> GenerateRequest {
    GenerateRequest {
        prompt_ids: ids,
        n,
        max_tokens,
        sampling: SamplingParams {
            temperature: 1.0,
            top_k: None,
            top_p: None,
        },
        seed,
        stop_token_ids: model.stop_token_ids(),
        adapter: None,
    }
}

/// The trainer's log-probabilities of `tokens` after `prompt`.
fn trainer_logprobs(model: &Model, prompt: &[i64], tokens: &[i64]) -> Result<Vec<f32>> {
    let ids: Vec<i64> = prompt.iter().chain(tokens).copied().collect();
    let input = Tensor::from_slice(&ids).view([1, ids.len() as i64]);
    let lp = tch::no_grad(|| fulcrum_model::sequence_logprobs(model.net(), &input, 1.0))?;
    let all = Vec::<f32>::try_from(lp.logprobs.to_kind(Kind::Float).flatten(0, -1))?;
    Ok(all[prompt.len() - 1..prompt.len() - 1 + tokens.len()].to_vec())
}

/// Mean |engine - trainer| and the k3 KL(engine || trainer) over every token.
fn mismatch(
    model: &Model,
    prompt: &[i64],
    done: &[fulcrum_rollout::EngineCompletion],
) -> Result<(f64, f64)> {
    let (mut abs, mut kl, mut n) = (0.0, 0.0, 0usize);
    for c in done {
        let t = trainer_logprobs(model, prompt, &c.tokens)?;
        for (a, b) in t.iter().zip(&c.logprobs).filter(|(_, b)| !b.is_nan()) {
            let d = f64::from(*a) - f64::from(*b);
            abs += d.abs();
            kl += d.exp() - 1.0 - d;
            n += 1;
        }
    }
    Ok((abs / n.max(1) as f64, kl / n.max(1) as f64))
}

#[test]
#[ignore = "slow: starts a llama.cpp server (run with --ignored)"]
fn token_ids_in_g_completions_out_reproducible_and_truncation_mapped() -> Result<()> {
    let path = gguf()?;
    let model = Model::load_gguf(&path, Device::Cpu)?;
    let server = Server::start(&path)?;
    let c = server.client();
    let ids = prompt(&model, "Name three colours.")?;
    let done = c.generate(&request(&model, ids.clone(), 4, 48, 11))?;
    assert_eq!(done.len(), 4);
    for d in &done {
        assert_eq!(d.tokens.len(), d.logprobs.len());
        assert!(!d.tokens.is_empty() && d.tokens.len() <= 48);
        if d.finish == FinishReason::Stop {
            assert!(model.stop_token_ids().contains(d.tokens.last().unwrap()));
        }
    }
    // The same seed gives the same completions; another seed other ones.
    let again = c.generate(&request(&model, ids.clone(), 4, 48, 11))?;
    assert_eq!(
        done.iter().map(|d| &d.tokens).collect::<Vec<_>>(),
        again.iter().map(|d| &d.tokens).collect::<Vec<_>>()
    );
    // (Completion j is seeded seed + j, so seeds a few apart share completions.)
    let other = c.generate(&request(&model, ids.clone(), 4, 48, 1011))?;
    assert_ne!(done[0].tokens, other[0].tokens);
    // Three tokens cannot finish this answer: every completion is cut, and says so.
    let short = c.generate(&request(&model, ids, 3, 3, 5))?;
    assert!(short
        .iter()
        .all(|d| d.finish == FinishReason::Length && d.tokens.len() == 3));
    Ok(())
}

#[test]
#[ignore = "slow: starts a llama.cpp server (run with --ignored)"]
fn trainer_logprobs_agree_with_the_engine_and_follow_a_weight_push() -> Result<()> {
    let path = gguf()?;
    let model = Model::load_gguf(&path, Device::Cpu)?;
    let server = Server::start(&path)?;
    let c = server.client();
    let ids = prompt(&model, "What is 7 + 5? Answer with just the number.")?;
    let done = c.generate(&request(&model, ids.clone(), 4, 32, 3))?;
    let (abs, kl) = mismatch(&model, &ids, &done)?;
    eprintln!("Q4_1 file: engine vs trainer: mean |d| {abs:.4} nats, kl/engine {kl:.5}");
    // Calibrated on this file: llama.cpp's Q4_1 kernels quantise activations to 8 bits, the
    // trainer runs the dequantised weights in f32 (measured about 0.03 nats, KL about 0.001).
    assert!(abs < 0.15 && kl < 0.02, "mean |d| {abs}, kl {kl}");

    // Perturb the policy, push it, and the engine must follow the new weights.
    tch::no_grad(|| {
        for (name, mut v) in model.var_store().variables() {
            if name == "model.norm.weight" {
                let _ = v.g_mul_scalar_(1.6);
            }
        }
    });
    let template = GgufTemplate::read(&path)?;
    let dir = scratch()?;
    let pushed = dir.path().join("weights-v1.gguf");
    model.save_gguf(&template, &pushed, GgufDtype::F16)?;
    c.load_weights(
        &WeightFiles {
            format: WeightFormat::Gguf,
            path: pushed,
        },
        1,
    )?;
    let after = c.generate(&request(&model, ids.clone(), 4, 32, 3))?;
    assert!(after.iter().all(|d| d.weight_version == Some(1)));
    let (abs_new, kl_new) = mismatch(&model, &ids, &after)?;
    let original = Model::load_gguf(&path, Device::Cpu)?;
    let (abs_old, _) = mismatch(&original, &ids, &after)?;
    eprintln!(
        "after the push: vs the pushed policy {abs_new:.4} nats (kl {kl_new:.5}), vs the old one {abs_old:.4}"
    );
    assert!(
        abs_new < 0.15 && kl_new < 0.02,
        "engine does not follow the push: {abs_new}"
    );
    assert!(
        abs_old > 3.0 * abs_new,
        "the push changed nothing: {abs_old} vs {abs_new}"
    );
    Ok(())
}

#[test]
#[ignore = "slow: starts a llama.cpp server (run with --ignored)"]
fn a_push_that_does_not_load_keeps_the_old_model_and_a_dead_model_ends_the_front() -> Result<()> {
    let path = gguf()?;
    let model = Model::load_gguf(&path, Device::Cpu)?;
    let mut server = Server::start(&path)?;
    let c = server.client();
    let ids = prompt(&model, "What is 2 + 3?")?;
    let tokens = |done: &[fulcrum_rollout::EngineCompletion]| -> Vec<Vec<i64>> {
        done.iter().map(|d| d.tokens.clone()).collect()
    };
    let before = c.generate(&request(&model, ids.clone(), 2, 8, 7))?;
    // Not a GGUF: the reload fails with its reason, and the old model goes on answering.
    let dir = scratch()?;
    let junk = dir.path().join("weights-v1.gguf");
    std::fs::write(&junk, b"not a gguf")?;
    let files = WeightFiles {
        format: WeightFormat::Gguf,
        path: junk,
    };
    let e = c.load_weights(&files, 1).unwrap_err().to_string();
    assert!(e.contains("did not load"), "{e}");
    let after = c.generate(&request(&model, ids, 2, 8, 7))?;
    assert_eq!(tokens(&before), tokens(&after));
    assert!(after.iter().all(|d| d.weight_version.is_none()));
    // The failed load's process is gone; the serving model's process dies: the front ends
    // with it (a front answering 502s would hide that the model is gone).
    let children = server.children()?;
    assert_eq!(children.len(), 1, "llama-server processes: {children:?}");
    // SAFETY: signalling a process this test's server started.
    let rc = unsafe { libc::kill(children[0] as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill {}", children[0]);
    let status = server.exit_within(std::time::Duration::from_secs(30))?;
    assert!(!status.success(), "{status}");
    assert!(c.health().is_err());
    Ok(())
}

#[test]
#[ignore = "slow: starts a llama.cpp server (run with --ignored)"]
fn an_adapter_push_is_followed_by_the_engine_for_a_fraction_of_the_bytes() -> Result<()> {
    let path = gguf()?;
    let mut model = Model::load_gguf(&path, Device::Cpu)?;
    let lora = fulcrum_model::LoraConfig {
        rank: 8,
        alpha: 16.0,
        targets: fulcrum_model::lora::TARGETS.map(String::from).to_vec(),
    };
    model.attach_lora(&lora)?;
    // A trained adapter: B away from its zero start, enough to move the policy visibly.
    tch::manual_seed(5);
    tch::no_grad(|| {
        for (name, mut v) in model.var_store().variables() {
            if name.ends_with(".lora_B") {
                v.copy_(&(Tensor::randn(v.size(), (Kind::Float, Device::Cpu)) * 0.02));
            }
        }
    });
    // The server serves the base in f16 (as after a first push), so that what is left between
    // engine and trainer is the adapter's doing, not Q4_1's 0.05 nats.
    let template = GgufTemplate::read(&path)?;
    let dir = scratch()?;
    let base_f16 = dir.path().join("base.gguf");
    Model::load_gguf(&path, Device::Cpu)?.save_gguf(&template, &base_f16, GgufDtype::F16)?;
    let server = Server::start(&base_f16)?;
    let c = server.client();
    let ids = prompt(&model, "What is 7 + 5? Answer with just the number.")?;
    let (adapter, merged) = (
        dir.path().join("adapter-v1.gguf"),
        dir.path().join("w-v2.gguf"),
    );
    let t0 = std::time::Instant::now();
    model.save_gguf_adapter(&template, &adapter)?;
    let write_adapter = t0.elapsed().as_secs_f64();
    let t0 = std::time::Instant::now();
    c.load_weights(
        &WeightFiles {
            format: WeightFormat::GgufAdapter,
            path: adapter.clone(),
        },
        1,
    )?;
    let load_adapter = t0.elapsed().as_secs_f64();
    let after = c.generate(&request(&model, ids.clone(), 4, 32, 3))?;
    assert!(after.iter().all(|d| d.weight_version == Some(1)));
    let (abs_new, kl_new) = mismatch(&model, &ids, &after)?;
    let base = Model::load_gguf(&path, Device::Cpu)?;
    let (abs_base, _) = mismatch(&base, &ids, &after)?;
    // The merged push of the same policy, for its cost.
    let t0 = std::time::Instant::now();
    model.save_gguf(&template, &merged, GgufDtype::F16)?;
    let write_merged = t0.elapsed().as_secs_f64();
    let t0 = std::time::Instant::now();
    c.load_weights(
        &WeightFiles {
            format: WeightFormat::Gguf,
            path: merged.clone(),
        },
        2,
    )?;
    let load_merged = t0.elapsed().as_secs_f64();
    let (a_bytes, m_bytes) = (adapter.metadata()?.len(), merged.metadata()?.len());
    eprintln!(
        "adapter push: {a_bytes} bytes, write {write_adapter:.2} s, load {load_adapter:.2} s; \
         merged push: {m_bytes} bytes, write {write_merged:.2} s, load {load_merged:.2} s; \
         engine vs the LoRA policy {abs_new:.4} nats (kl {kl_new:.5}), vs the base {abs_base:.4}"
    );
    // An f16 push alone differs from the trainer by about 0.003 nats.
    assert!(abs_new < 0.02 && kl_new < 0.001, "{abs_new} {kl_new}");
    assert!(
        abs_base > 3.0 * abs_new,
        "the adapter changed nothing: {abs_base} vs {abs_new}"
    );
    assert!(a_bytes * 5 < m_bytes, "{a_bytes} vs {m_bytes}");
    Ok(())
}

/// A one-step run from `model` (a GGUF file or an HF folder) in `dir`, its final checkpoint
/// exported as GGUF (`export.gguf`; `export.hf` off, to spare the disk): the final policy as
/// fulcrum loads it, and the path of its `model.gguf`. An entropy bonus gives the step a
/// gradient whatever the rewards, and lr 1e-4 makes it visible.
fn exported_gguf(model: &Path, dir: &Path) -> Result<(Model, PathBuf)> {
    let data = root().join("data/arith/add_1digit.jsonl");
    let run_dir = dir.join("run");
    let sets = [
        format!("model.path={:?}", model.display().to_string()),
        format!("task.path={:?}", data.display().to_string()),
        format!("run_dir={:?}", run_dir.display().to_string()),
        "task.name=\"jsonl\"".into(),
        "steps=1".into(),
        "sft.steps=0".into(),
        "ppo.entropy_coef=0.01".into(),
        "optim.lr=1e-4".into(),
        "rollout.prompts_per_step=2".into(),
        "rollout.group_size=2".into(),
        "rollout.max_prompt_len=64".into(),
        "rollout.max_response_len=8".into(),
        "ppo.micro_batch_size=4".into(),
        "eval.prompts=2".into(),
        "eval_every=0".into(),
        "checkpoint_every=0".into(),
        "threads=2".into(),
        "logging.tensorboard=false".into(),
        "export.gguf=true".into(),
        "export.hf=false".into(),
    ];
    let cfg = fulcrum_train::Config::load(None, &sets)?;
    fulcrum_train::Run::create(&cfg)?.train(&mut |_| {})?;
    let ckpts = run_dir.join("checkpoints");
    for e in std::fs::read_dir(&ckpts)? {
        let p = e?.path();
        if p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("step-"))
        {
            std::fs::remove_dir_all(p)?;
        }
    }
    let last = ckpts.join("final");
    Ok((Model::load_hf(&last, Device::Cpu)?, last.join("model.gguf")))
}

#[test]
#[ignore = "slow: starts llama.cpp servers (run with --ignored)"]
fn the_exported_gguf_serves_the_final_policy_from_a_gguf_or_an_hf_source() -> Result<()> {
    let path = gguf()?;
    let start = Model::load_gguf(&path, Device::Cpu)?;
    let dir = scratch()?;
    let hf = dir.path().join("source-hf");
    start.save_merged(&hf)?;
    for (source, what) in [
        (path.clone(), "GGUF source, its metadata copied"),
        (hf, "HF source, metadata made"),
    ] {
        let sub = dir.path().join(if source == path {
            "from-gguf"
        } else {
            "from-hf"
        });
        let (policy, exported) = exported_gguf(&source, &sub)?;
        let server = Server::start(&exported)?;
        let c = server.client();
        let ids = prompt(&policy, "What is 7 + 5? Answer with just the number.")?;
        let done = c.generate(&request(&policy, ids.clone(), 4, 32, 3))?;
        let (abs, kl) = mismatch(&policy, &ids, &done)?;
        let (abs_start, _) = mismatch(&start, &ids, &done)?;
        eprintln!(
            "{what}: llama.cpp on the exported model.gguf (f16) vs fulcrum's final policy: mean \
             |d logprob| {abs:.4} nats (kl {kl:.5}); vs the starting model {abs_start:.4}"
        );
        // An f16 file alone differs from the trainer by about 0.003 nats (the adapter test).
        assert!(abs < 0.02 && kl < 0.001, "{what}: {abs} {kl}");
        assert!(
            abs_start > 3.0 * abs,
            "{what}: the step changed nothing: {abs_start}"
        );
        drop(server);
        std::fs::remove_dir_all(&sub)?;
    }
    Ok(())
}

/// A run against the server(s), from the library: `steps` steps of the one-digit additions.
fn engine_config(urls: &[&str], steps: u64, run_dir: &Path) -> Result<fulcrum_train::Config> {
    let mut sets = engine_sets(urls, steps)?;
    sets.push(format!("run_dir={:?}", run_dir.display().to_string()));
    sets.push("threads=2".into());
    Ok(fulcrum_train::Config::load(None, &sets)?)
}

#[test]
#[ignore = "slow: starts a llama.cpp server (run with --ignored)"]
fn grpo_trains_end_to_end_on_the_server_with_a_push_every_step() -> Result<()> {
    let server = Server::start(&gguf()?)?;
    let dir = scratch()?;
    let cfg = engine_config(&[&server.url], 2, &dir.path().join("run"))?;
    let mut run = fulcrum_train::Run::create(&cfg)?;
    run.train(&mut |_| {})?;
    let m = run_metrics(run.dir())?;
    assert_eq!(m.len(), 2);
    for line in &m {
        assert!(line["time/weight_push"].as_f64().unwrap() > 0.0, "{line}");
        assert_eq!(line["rollout/stale"].as_u64(), Some(0), "{line}");
        let kl = line["kl/engine"].as_f64().unwrap();
        assert!(kl > 0.0 && kl < 0.05, "kl/engine {kl}");
        assert!(line["opt/steps"].as_u64() >= Some(1), "{line}");
    }
    // The engine holds the last pushed version, and only that version's file is kept.
    assert_eq!(
        pushed_files(run.dir())?,
        vec!["weights-v1.gguf".to_string()]
    );
    Ok(())
}

#[test]
#[ignore = "slow: starts a llama.cpp server (run with --ignored)"]
fn a_run_with_tools_trains_on_the_server_with_the_tool_metrics() -> Result<()> {
    // The turn loop itself (cut after a call, the answer, the continuation's context) is tested
    // on a scripted engine (engine/turns.rs); here the whole path runs on a real server, in the
    // code format, whether or not the small model calls the tool.
    let server = Server::start(&gguf()?)?;
    let dir = scratch()?;
    let mut sets = engine_sets(&[&server.url], 1)?;
    sets.push(format!(
        "run_dir={:?}",
        dir.path().join("run").display().to_string()
    ));
    sets.extend(
        [
            "threads=2",
            "task.tools=[\"python\"]",
            "task.tool_format=\"code\"",
            "rollout.max_turns=2",
            "rollout.max_response_len=48",
            "rollout.max_prompt_len=256",
        ]
        .map(String::from),
    );
    let cfg = fulcrum_train::Config::load(None, &sets)?;
    let mut run = fulcrum_train::Run::create(&cfg)?;
    run.train(&mut |_| {})?;
    let m = run_metrics(run.dir())?;
    assert_eq!(m.len(), 1);
    let line = &m[0];
    for key in [
        "tool/calls_mean",
        "turns/mean",
        "len/model_tokens",
        "len/tool_tokens",
    ] {
        assert!(line[key].as_f64().is_some(), "{key}: {line}");
    }
    assert!(line["turns/mean"].as_f64() >= Some(1.0), "{line}");
    let kl = line["kl/engine"].as_f64().unwrap();
    assert!(
        kl.is_finite() && kl < 0.05,
        "kl/engine over model tokens {kl}"
    );
    Ok(())
}

#[test]
#[ignore = "slow: starts two llama.cpp servers (run with --ignored)"]
fn a_run_survives_one_of_two_servers_dying_and_says_so() -> Result<()> {
    let path = gguf()?;
    let a = Server::start(&path)?;
    let mut b = Server::start(&path)?;
    let dir = scratch()?;
    let cfg = engine_config(&[&a.url, &b.url], 2, &dir.path().join("run"))?;
    let mut run = fulcrum_train::Run::create(&cfg)?;
    let mut killed = false;
    run.train(&mut |e| {
        if let fulcrum_train::Event::Step { step: 1, .. } = e {
            b.kill();
            killed = true;
        }
    })?;
    assert!(killed);
    let m = run_metrics(run.dir())?;
    assert_eq!(m.len(), 2, "the run went on with the other server");
    // And with both gone, the run fails cleanly, naming the servers.
    drop(a);
    let cfg = engine_config(
        &[&server_gone()?, &server_gone()?],
        1,
        &dir.path().join("run2"),
    )?;
    let e = fulcrum_train::Run::create(&cfg)?
        .train(&mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("no rollout engine is left"), "{e}");
    Ok(())
}

#[test]
#[ignore = "slow: starts a llama.cpp server (run with --ignored)"]
fn overlap_samples_one_step_behind_and_checkpoints_resume_before_the_prefetch() -> Result<()> {
    let server = Server::start(&gguf()?)?;
    let dir = scratch()?;
    let mut cfg = engine_config(&[&server.url], 3, &dir.path().join("run"))?;
    cfg.rollout.overlap = true;
    cfg.checkpoint_every = 1;
    let mut run = fulcrum_train::Run::create(&cfg)?;
    run.train(&mut |_| {})?;
    let m = run_metrics(run.dir())?;
    let stale: Vec<u64> = m
        .iter()
        .map(|l| l["rollout/stale"].as_u64().unwrap())
        .collect();
    // Step 1 samples on its own weights; steps 2 and 3 were sampled during the previous update.
    assert_eq!(stale, vec![0, 16, 16]);
    for line in &m[1..] {
        // One step behind at lr 2e-5: still close to the trainer's policy.
        let kl = line["kl/engine"].as_f64().unwrap();
        assert!(kl > 0.0 && kl < 0.05, "{line}");
    }
    // Step 2's checkpoint resumes the prompt stream before step 3's prefetched prompts.
    let offset = |step: &str| -> Result<u64> {
        let path = run
            .dir()
            .join("checkpoints")
            .join(step)
            .join("checkpoint.json");
        let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
        meta.pointer("/trainer/data/offset")
            .and_then(serde_json::Value::as_u64)
            .context("no data offset in checkpoint.json")
    };
    assert_eq!(offset("step-2")?, 8, "4 prompts for each of steps 1 and 2");
    assert_eq!(offset("final")?, 12);
    Ok(())
}
