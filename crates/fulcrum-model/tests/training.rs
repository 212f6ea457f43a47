//! Training forward and optimisation: finite-difference gradient check, and a tiny model
//! learning a fixed sequence with AdamW.

use fulcrum_model::{
    sequence_logprobs, weighted_sum, AdamW, AdamWConfig, LrSchedule, Model, ModelConfig,
};
use tch::{Device, Kind, Tensor};

/// A small Qwen3-style config (q/k norms, GQA, biases) so the check covers every block type.
fn small_config() -> ModelConfig {
    ModelConfig {
        vocab_size: 32,
        hidden_size: 16,
        intermediate_size: 24,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 8,
        qkv_bias: true,
        qk_norm: true,
        tie_embeddings: false,
        ..ModelConfig::tiny(32, 2)
    }
}

fn loss(model: &Model, ids: &Tensor, weights: &Tensor) -> anyhow::Result<Tensor> {
    let lp = sequence_logprobs(model.net(), ids, 1.0)?;
    Ok(-weighted_sum(&lp.logprobs, weights)?)
}

#[test]
fn analytic_gradients_match_finite_differences() -> anyhow::Result<()> {
    let mut model = Model::random(&small_config(), Device::Cpu, 5);
    model.set_kind(Kind::Double);
    let ids = Tensor::from_slice(&[3i64, 7, 1, 30, 12, 5, 9, 9, 4, 22, 17, 0]).view([2, 6]);
    let weights = Tensor::from_slice(&[0.0, 0.5, 1.0, 1.0, 0.2, 1.0, 1.0, 0.0, 0.3, 0.7])
        .view([2, 5])
        .to_kind(Kind::Double);
    loss(&model, &ids, &weights)?.backward();
    let vars = model.var_store().variables();
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort();
    let mut checked = 0;
    for name in names {
        let p = &vars[name];
        let grad = p.grad();
        let n = p.numel() as i64;
        // Two entries per tensor, spread over the tensor.
        for idx in [0, n / 2 + 1].into_iter().filter(|&i| i < n) {
            let flat = p.view([-1]);
            let orig = flat.double_value(&[idx]);
            let h = 1e-5;
            let at = |x: f64| -> anyhow::Result<f64> {
                let _ = tch::no_grad(|| flat.get(idx).fill_(x));
                let l = tch::no_grad(|| loss(&model, &ids, &weights))?;
                Ok(l.double_value(&[]))
            };
            let numeric = (at(orig + h)? - at(orig - h)?) / (2.0 * h);
            at(orig)?;
            let analytic = grad.view([-1]).double_value(&[idx]);
            let tol = 1e-6 + 1e-5 * analytic.abs().max(numeric.abs());
            assert!(
                (analytic - numeric).abs() < tol,
                "{name}[{idx}]: analytic {analytic} vs numeric {numeric}"
            );
            checked += 1;
        }
    }
    assert!(checked > 30, "checked only {checked} entries");
    Ok(())
}

#[test]
fn adamw_makes_the_tiny_model_learn_a_sequence() -> anyhow::Result<()> {
    let model = Model::tiny(Device::Cpu, 1)?;
    let ids =
        Tensor::from_slice(&model.tokenizer()?.encode("the cat sat on the mat.")?).view([1, -1]);
    let t = ids.size()[1] - 1;
    let weights = Tensor::ones([1, t], (Kind::Float, Device::Cpu)) / t as f64;
    let mut opt = AdamW::new(
        model.var_store(),
        AdamWConfig {
            weight_decay: 0.01,
            ..Default::default()
        },
    );
    let sched = LrSchedule::Cosine {
        peak: 3e-3,
        min: 3e-4,
        warmup: 3,
        total: 40,
    };
    let first = loss(&model, &ids, &weights)?.double_value(&[]);
    let mut last = first;
    for step in 0..40 {
        opt.zero_grad();
        let l = loss(&model, &ids, &weights)?;
        l.backward();
        fulcrum_model::clip_grad_norm(model.var_store(), 1.0);
        opt.step(sched.lr(step));
        last = l.double_value(&[]);
    }
    assert!(last < 0.3 * first, "loss went from {first} to {last}");
    assert_eq!(opt.step_count(), 40);
    Ok(())
}

#[test]
fn a_checkpoint_restores_model_and_optimizer_so_training_continues_identically(
) -> anyhow::Result<()> {
    let model = Model::tiny(Device::Cpu, 2)?;
    let ids = Tensor::from_slice(&model.tokenizer()?.encode("1+2=3; 2+2=4")?).view([1, -1]);
    let t = ids.size()[1] - 1;
    let weights = Tensor::ones([1, t], (Kind::Float, Device::Cpu)) / t as f64;
    let mut opt = AdamW::new(
        model.var_store(),
        AdamWConfig {
            weight_decay: 0.1,
            ..Default::default()
        },
    );
    let train = |model: &Model, opt: &mut AdamW, steps: usize| -> anyhow::Result<f64> {
        let mut l = 0.0;
        for _ in 0..steps {
            opt.zero_grad();
            let loss = loss(model, &ids, &weights)?;
            loss.backward();
            opt.step(1e-3);
            l = loss.double_value(&[]);
        }
        Ok(l)
    };
    train(&model, &mut opt, 3)?;
    let dir = std::env::temp_dir().join(format!("fulcrum-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let step = fulcrum_model::save_model_and_optimizer(&dir, &model, &opt)?;
    assert_eq!(step, 3);
    let restored = fulcrum_model::load_model(&dir, Device::Cpu)?;
    let mut opt2 = AdamW::new(restored.var_store(), opt.config);
    fulcrum_model::load_optimizer(&dir, &mut opt2, step)?;
    assert_eq!(opt2.step_count(), 3);
    let a = train(&model, &mut opt, 2)?;
    let b = train(&restored, &mut opt2, 2)?;
    assert_eq!(a, b);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
