//! The KV-cache sampler: agreement with naive decoding and with HF `generate`, independence
//! from batch composition, seeding, stopping, and log-probabilities consistent with training.

use std::path::PathBuf;

use fulcrum_model::{generate, sequence_logprobs, Finish, Model, SampleRequest, Sampling};
use tch::{Device, Kind, Tensor};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn reference_ids(name: &str, key: &str) -> anyhow::Result<Vec<i64>> {
    let t = Tensor::read_safetensors(fixture(name).join("reference.safetensors"))?
        .into_iter()
        .find(|(n, _)| n == key)
        .map(|(_, t)| t)
        .ok_or_else(|| anyhow::anyhow!("no {key}"))?;
    Ok(Vec::<i64>::try_from(&t.flatten(0, -1))?)
}

fn request(prompts: Vec<Vec<i64>>, g: usize, n: usize, sampling: Sampling) -> SampleRequest {
    SampleRequest {
        first_prompt: 0,
        prompts,
        samples_per_prompt: g,
        max_new_tokens: n,
        sampling,
        seed: 17,
        stop_token_ids: vec![],
        stop_strings: vec![],
    }
}

/// Greedy decoding without a cache: a full forward over the growing sequence each step.
fn naive_greedy(model: &Model, prompt: &[i64], n: usize) -> anyhow::Result<Vec<i64>> {
    let mut seq = prompt.to_vec();
    for _ in 0..n {
        let ids = Tensor::from_slice(&seq).view([1, -1]);
        let logits = tch::no_grad(|| model.net().forward(&ids))?;
        seq.push(logits.select(1, -1).argmax(-1, false).int64_value(&[0]));
    }
    Ok(seq[prompt.len()..].to_vec())
}

const SAMPLE: Sampling = Sampling::Sample {
    temperature: 1.0,
    top_k: None,
    top_p: None,
};

#[test]
fn greedy_matches_transformers_generate_for_every_architecture() -> anyhow::Result<()> {
    for name in ["llama", "qwen2", "qwen3"] {
        let model = Model::load_hf(&fixture(name), Device::Cpu)?;
        let prompt = reference_ids(name, "generate_prompt")?;
        let want = reference_ids(name, "generate_tokens")?;
        let out = generate(
            model.net(),
            &request(vec![prompt], 1, want.len(), Sampling::Greedy),
            None,
        )?;
        assert_eq!(out[0].tokens, want, "{name}");
    }
    Ok(())
}

#[test]
fn cached_greedy_equals_naive_greedy() -> anyhow::Result<()> {
    let model = Model::load_hf(&fixture("qwen2"), Device::Cpu)?;
    let prompt = vec![5, 9, 33, 2, 71, 8, 8];
    let out = generate(
        model.net(),
        &request(vec![prompt.clone()], 1, 20, Sampling::Greedy),
        None,
    )?;
    assert_eq!(out[0].tokens, naive_greedy(&model, &prompt, 20)?);
    Ok(())
}

#[test]
fn greedy_output_does_not_depend_on_the_rest_of_the_batch() -> anyhow::Result<()> {
    let model = Model::load_hf(&fixture("llama"), Device::Cpu)?;
    let short = vec![11, 12, 13];
    let long = vec![40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50];
    let mid = vec![7, 70, 17, 27, 37];
    let alone = generate(
        model.net(),
        &request(vec![short.clone()], 1, 16, Sampling::Greedy),
        None,
    )?;
    let batch = generate(
        model.net(),
        &request(
            vec![long.clone(), short, mid.clone()],
            2,
            16,
            Sampling::Greedy,
        ),
        None,
    )?;
    assert_eq!(batch.len(), 6);
    assert_eq!(batch[2].tokens, alone[0].tokens);
    assert_eq!(batch[3].tokens, alone[0].tokens);
    assert_eq!(batch[0].tokens, naive_greedy(&model, &long, 16)?);
    assert_eq!(batch[4].tokens, naive_greedy(&model, &mid, 16)?);
    Ok(())
}

#[test]
fn the_same_seed_gives_the_same_samples_and_another_seed_differs() -> anyhow::Result<()> {
    let model = Model::load_hf(&fixture("llama"), Device::Cpu)?;
    let req = request(vec![vec![3, 4, 5], vec![6]], 4, 12, SAMPLE);
    let a = generate(model.net(), &req, None)?;
    let b = generate(model.net(), &req, None)?;
    assert_eq!(a, b);
    let c = generate(model.net(), &SampleRequest { seed: 18, ..req }, None)?;
    assert_ne!(a, c);
    // The G samples of one prompt differ from each other.
    assert_ne!(a[0].tokens, a[1].tokens);
    Ok(())
}

#[test]
fn a_row_continues_the_same_way_when_other_rows_stop_early() -> anyhow::Result<()> {
    let model = Model::load_hf(&fixture("llama"), Device::Cpu)?;
    let req = request(vec![vec![3, 4, 5], vec![6, 7]], 3, 12, SAMPLE);
    let free = generate(model.net(), &req, None)?;
    // Stop on the third token of row 0: that row (and any other sampling it) ends early.
    let stop = free[0].tokens[2];
    let stopped = generate(
        model.net(),
        &SampleRequest {
            stop_token_ids: vec![stop],
            ..req
        },
        None,
    )?;
    assert_eq!(stopped[0].finish, Finish::StopToken(stop));
    assert_eq!(stopped[0].tokens, free[0].tokens[..3]);
    for (s, f) in stopped.iter().zip(&free) {
        match s.finish {
            Finish::Length => assert_eq!(s.tokens, f.tokens),
            _ => assert_eq!(s.tokens[..], f.tokens[..s.tokens.len()]),
        }
    }
    Ok(())
}

#[test]
fn top_k_of_one_is_greedy() -> anyhow::Result<()> {
    let model = Model::load_hf(&fixture("qwen3"), Device::Cpu)?;
    let prompts = vec![vec![3, 4, 5, 6], vec![9]];
    let greedy = generate(
        model.net(),
        &request(prompts.clone(), 1, 10, Sampling::Greedy),
        None,
    )?;
    let k1 = Sampling::Sample {
        temperature: 0.7,
        top_k: Some(1),
        top_p: None,
    };
    let sampled = generate(model.net(), &request(prompts, 1, 10, k1), None)?;
    for (a, b) in greedy.iter().zip(&sampled) {
        assert_eq!(a.tokens, b.tokens);
        // The sampled distribution has one token: log-probability 0.
        assert!(b.logprobs.iter().all(|&l| l.abs() < 1e-6));
    }
    Ok(())
}

#[test]
fn sampler_logprobs_equal_training_logprobs() -> anyhow::Result<()> {
    let model = Model::load_hf(&fixture("qwen2"), Device::Cpu)?;
    for temperature in [1.0, 0.6] {
        let sampling = Sampling::Sample {
            temperature,
            top_k: None,
            top_p: None,
        };
        let prompts = vec![vec![3, 4, 5, 6, 7], vec![20, 21]];
        let out = generate(model.net(), &request(prompts.clone(), 2, 8, sampling), None)?;
        for c in &out {
            let mut seq = prompts[c.prompt_index].clone();
            seq.extend(&c.tokens);
            let ids = Tensor::from_slice(&seq).view([1, -1]);
            let lp = tch::no_grad(|| sequence_logprobs(model.net(), &ids, temperature))?;
            let p = prompts[c.prompt_index].len() as i64;
            let train = lp
                .logprobs
                .narrow(1, p - 1, c.tokens.len() as i64)
                .to_kind(Kind::Float);
            let train = Vec::<f32>::try_from(&train.flatten(0, -1))?;
            for (a, b) in train.iter().zip(&c.logprobs) {
                assert!((a - b).abs() < 1e-4, "T={temperature}: {a} vs {b}");
            }
        }
    }
    Ok(())
}

#[test]
fn top_p_keeps_only_the_nucleus() -> anyhow::Result<()> {
    let logits = Tensor::from_slice(&[3.0f32, 2.0, -5.0, -6.0]).view([1, 4]);
    let sampling = Sampling::Sample {
        temperature: 1.0,
        top_k: None,
        top_p: Some(0.9),
    };
    let mut rngs = vec![fulcrum_core::SplitMix64::new(1)];
    for _ in 0..200 {
        let (tok, _) = fulcrum_model::sampler::sample_next(&logits, sampling, &mut rngs)?;
        assert!(tok.int64_value(&[0]) < 2);
    }
    Ok(())
}

#[test]
fn stop_strings_end_a_completion() -> anyhow::Result<()> {
    let model = Model::tiny(Device::Cpu, 3)?;
    let tok = model.tokenizer()?;
    let prompt = tok.encode("abc")?;
    let free = generate(
        model.net(),
        &request(vec![prompt.clone()], 1, 12, Sampling::Greedy),
        Some(tok),
    )?;
    let stop = tok.decode(&free[0].tokens[3..5], true)?;
    let req = SampleRequest {
        stop_strings: vec![stop.clone()],
        ..request(vec![prompt], 1, 12, Sampling::Greedy)
    };
    let out = generate(model.net(), &req, Some(tok))?;
    assert_eq!(out[0].finish, Finish::StopString(stop.clone()));
    assert!(tok.decode(&out[0].tokens, true)?.contains(&stop));
    assert!(out[0].tokens.len() <= 5);
    Ok(())
}

#[test]
fn non_finite_logits_are_refused_not_sampled() {
    let mut rngs = vec![fulcrum_core::SplitMix64::new(1)];
    for bad in [f32::NAN, f32::INFINITY] {
        let logits = Tensor::from_slice(&[1.0f32, bad, 0.5]).view([1, 3]);
        for sampling in [
            Sampling::Greedy,
            Sampling::Sample {
                temperature: 1.0,
                top_k: None,
                top_p: None,
            },
        ] {
            let err = fulcrum_model::sampler::sample_next(&logits, sampling, &mut rngs)
                .unwrap_err()
                .to_string();
            assert!(err.contains("non-finite logits"), "{err}");
        }
    }
    // One bad row among good ones is found; good rows alone still sample.
    let mut rngs = vec![fulcrum_core::SplitMix64::new(2); 2];
    let sampling = Sampling::Sample {
        temperature: 1.0,
        top_k: Some(2),
        top_p: Some(0.9),
    };
    let mixed = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 0.0, f32::NAN, 0.0]).view([2, 3]);
    assert!(fulcrum_model::sampler::sample_next(&mixed, sampling, &mut rngs).is_err());
    let good = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 0.0, f32::NEG_INFINITY, 0.0]).view([2, 3]);
    assert!(fulcrum_model::sampler::sample_next(&good, sampling, &mut rngs).is_ok());
}
