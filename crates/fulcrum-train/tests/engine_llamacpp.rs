//! Rollouts on a real llama.cpp server (scripts/llamacpp-server.sh, SmolLM2-135M Q4_1): the
//! slower suite, run by `.ci/run` with `--ignored` after `fulcrum fetch-assets --only smollm2`.
//! Each test starts its own server(s) on a free loopback port and kills them at the end.
//!
//! The model file comes from `FULCRUM_SMOLLM2_GGUF` or `assets/`; the engine is installed by the
//! script into `.venv-engine` (`FULCRUM_ENGINE_VENV`) on first use. Missing either is a failure
//! here, not a skip: these tests are only run when asked for.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fulcrum_model::save_gguf::GgufTemplate;
use fulcrum_model::{GgufDtype, Message, Model};
use fulcrum_rollout::engines::llamacpp::LlamaCpp;
use fulcrum_rollout::{
    EngineClient, FinishReason, GenerateRequest, SamplingParams, WeightFiles, WeightFormat,
};
use tch::{Device, Kind, Tensor};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn gguf() -> Result<PathBuf> {
    let p = std::env::var_os("FULCRUM_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("assets/SmolLM2-135M-Instruct.Q4_1.gguf"));
    if !p.is_file() {
        bail!(
            "{}: missing (fulcrum fetch-assets --only smollm2)",
            p.display()
        );
    }
    Ok(p)
}

/// A server started by scripts/llamacpp-server.sh, killed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(model: &Path) -> Result<Server> {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            l.local_addr()?.port()
        };
        let child = Command::new(root().join("scripts/llamacpp-server.sh"))
            .arg(model)
            .arg(port.to_string())
            .args([
                "--slots",
                "4",
                "--ctx",
                "1024",
                "--threads",
                "2",
                "--verbosity",
                "0",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting scripts/llamacpp-server.sh")?;
        let url = format!("http://127.0.0.1:{port}");
        let client = LlamaCpp::new(&url, Duration::from_secs(5));
        let t0 = Instant::now();
        // The first start may install the engine (a pip install).
        while client.health().is_err() {
            if t0.elapsed() > Duration::from_secs(300) {
                bail!("{url} did not come up within 300 s");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(Server { child, url })
    }

    fn client(&self) -> LlamaCpp {
        LlamaCpp::new(&self.url, Duration::from_secs(120))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

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

/// A run against the server(s), from the library: `steps` steps of the one-digit additions.
fn engine_config(urls: &[&str], steps: u64, run_dir: &Path) -> Result<fulcrum_train::Config> {
    let gguf = gguf()?;
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    let sets = [
        format!("model.path={:?}", gguf.display().to_string()),
        format!("run_dir={:?}", run_dir.display().to_string()),
        format!(
            "task.path={:?}",
            root()
                .join("data/arith/add_1digit.jsonl")
                .display()
                .to_string()
        ),
        "task.name=\"jsonl\"".into(),
        format!("steps={steps}"),
        "sft.steps=0".into(),
        "rollout.engine=\"llamacpp\"".into(),
        format!("rollout.engine_urls=[{}]", urls.join(",")),
        "rollout.engine_max_failures=1".into(),
        "rollout.engine_timeout_s=120".into(),
        "rollout.prompts_per_step=4".into(),
        "rollout.group_size=4".into(),
        "rollout.max_prompt_len=64".into(),
        "rollout.max_response_len=24".into(),
        "rollout.is_cap=2.0".into(),
        "ppo.micro_batch_size=8".into(),
        "optim.lr=2e-5".into(),
        "eval.prompts=4".into(),
        "eval_every=0".into(),
        "checkpoint_every=0".into(),
        "threads=2".into(),
    ];
    Ok(fulcrum_train::Config::load(None, &sets)?)
}

fn run_metrics(dir: &Path) -> Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl"))?;
    Ok(text
        .lines()
        .map(serde_json::from_str)
        .collect::<std::result::Result<_, _>>()?)
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
    let kept: Vec<_> = std::fs::read_dir(run.dir().join("engine-weights"))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert_eq!(kept, vec!["weights-v1.gguf".to_string()]);
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
        &[&server_gone(), &server_gone()],
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

fn server_gone() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
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

/// A scratch folder beside the build, not in /tmp: every weight push writes a full f16 GGUF
/// (270 MB for SmolLM2-135M), and /tmp may be a small tmpfs.
fn scratch() -> std::io::Result<tempfile::TempDir> {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))
}
