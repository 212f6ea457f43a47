//! LoRA adapters: attaching them changes nothing until they learn, only they get gradients and
//! optimizer slots, training them lowers the loss, and saving / loading / merging keep the
//! function the model computes.

use fulcrum_model::{
    sequence_logprobs, weighted_sum, AdamW, AdamWConfig, LoraConfig, Model, ModelConfig,
};
use tch::{Device, Kind, Tensor};

/// A small Qwen2-style config (q/k/v biases, GQA, untied head).
fn small_config() -> ModelConfig {
    ModelConfig {
        vocab_size: 40,
        hidden_size: 32,
        intermediate_size: 48,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 8,
        qkv_bias: true,
        tie_embeddings: false,
        ..ModelConfig::tiny(40, 2)
    }
}

fn lora(targets: &[&str]) -> LoraConfig {
    LoraConfig {
        rank: 4,
        alpha: 8.0,
        targets: targets.iter().map(|s| s.to_string()).collect(),
    }
}

fn ids() -> Tensor {
    Tensor::from_slice(&[3i64, 7, 1, 30, 12, 5, 9, 9, 4, 22, 17, 0, 11, 38, 2, 6]).view([2, 8])
}

fn loss(model: &Model, ids: &Tensor) -> anyhow::Result<Tensor> {
    let lp = sequence_logprobs(model.net(), ids, 1.0)?;
    let w = Tensor::ones([2, 7], (Kind::Float, Device::Cpu));
    Ok(-weighted_sum(&lp.logprobs, &w)?)
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[test]
fn adapters_with_zero_b_leave_the_logits_unchanged() -> anyhow::Result<()> {
    let mut model = Model::random(&small_config(), Device::Cpu, 1);
    let before = tch::no_grad(|| model.net().forward(&ids()))?;
    let all = [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ];
    model.attach_lora(&lora(&all))?;
    let after = tch::no_grad(|| model.net().forward(&ids()))?;
    assert_eq!(max_abs_diff(&before, &after), 0.0);
    Ok(())
}

#[test]
fn only_adapters_are_trainable_and_get_gradients() -> anyhow::Result<()> {
    let mut model = Model::random(&small_config(), Device::Cpu, 2);
    let cfg = small_config();
    let n = model.attach_lora(&lora(&["q_proj", "v_proj"]))?;
    let (d, q, kv) = (
        cfg.hidden_size,
        cfg.num_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
    );
    let per_layer = 4 * (d + q) + 4 * (d + kv);
    assert_eq!(n, cfg.num_layers * per_layer);
    let opt = AdamW::new(model.var_store(), AdamWConfig::default());
    assert_eq!(
        opt.decayed().len(),
        2 * 2 * cfg.num_layers as usize,
        "adapters only in AdamW"
    );
    loss(&model, &ids())?.backward();
    let mut adapters_with_grad = 0;
    for (name, var) in model.var_store().variables() {
        let is_adapter = name.ends_with(".lora_A") || name.ends_with(".lora_B");
        assert_eq!(var.requires_grad(), is_adapter, "{name}");
        if is_adapter {
            assert!(var.grad().defined(), "{name} has no gradient");
            // With B = 0 the gradient reaches B (A's gradient goes through B and is zero).
            if name.ends_with(".lora_B") {
                assert!(
                    var.grad().abs().sum(Kind::Float).double_value(&[]) > 0.0,
                    "{name}"
                );
                adapters_with_grad += 1;
            }
        } else {
            assert!(!var.grad().defined(), "frozen {name} got a gradient");
        }
    }
    assert_eq!(adapters_with_grad, 2 * cfg.num_layers as usize);
    Ok(())
}

#[test]
fn a_few_adapter_steps_reduce_the_loss_and_leave_the_base_alone() -> anyhow::Result<()> {
    let mut model = Model::random(&small_config(), Device::Cpu, 3);
    model.attach_lora(&lora(&["q_proj", "v_proj", "up_proj", "down_proj"]))?;
    let base: Vec<(String, Tensor)> = model
        .var_store()
        .variables()
        .into_iter()
        .filter(|(n, _)| !n.contains(".lora_"))
        .map(|(n, t)| (n, t.detach().copy()))
        .collect();
    let mut opt = AdamW::new(model.var_store(), AdamWConfig::default());
    let first = loss(&model, &ids())?.double_value(&[]);
    let mut last = first;
    for _ in 0..20 {
        opt.zero_grad();
        let l = loss(&model, &ids())?;
        l.backward();
        opt.step(1e-2);
        last = l.double_value(&[]);
    }
    assert!(last < 0.9 * first, "loss {first} -> {last}");
    let vars = model.var_store().variables();
    for (name, t) in base {
        assert_eq!(
            max_abs_diff(&t, &vars[&name]),
            0.0,
            "base weight {name} moved"
        );
    }
    Ok(())
}

#[test]
fn saved_adapters_reload_exactly_and_merge_to_the_same_function() -> anyhow::Result<()> {
    let mut model = Model::random(&small_config(), Device::Cpu, 4);
    model.attach_lora(&lora(&["q_proj", "o_proj", "gate_proj"]))?;
    // Move the adapters off B = 0 so that merging has something to fold in.
    tch::no_grad(|| {
        for (name, mut v) in model.var_store().variables() {
            if name.ends_with(".lora_B") {
                v.copy_(&(Tensor::randn(v.size(), (Kind::Float, Device::Cpu)) * 0.1));
            }
        }
    });
    let want = tch::no_grad(|| model.net().forward(&ids()))?;
    let dir = tempfile::tempdir()?;
    let kept = dir.path().join("with-adapters");
    model.save(&kept)?;
    assert!(kept.join("adapter_model.safetensors").is_file());
    let back = Model::load_hf(&kept, Device::Cpu)?;
    assert_eq!(back.lora(), model.lora());
    let got = tch::no_grad(|| back.net().forward(&ids()))?;
    assert_eq!(max_abs_diff(&want, &got), 0.0, "reloaded adapters differ");

    let merged = dir.path().join("merged");
    model.save_merged(&merged)?;
    assert!(!merged.join("adapter_model.safetensors").exists());
    let plain = Model::load_hf(&merged, Device::Cpu)?;
    assert!(plain.lora().is_none());
    let got = tch::no_grad(|| plain.net().forward(&ids()))?;
    let diff = max_abs_diff(&want, &got);
    assert!(diff < 1e-4, "merged model differs by {diff}");
    Ok(())
}

#[test]
fn bad_settings_are_errors_naming_the_field() {
    let mut model = Model::random(&small_config(), Device::Cpu, 5);
    let err = model.attach_lora(&lora(&["qkv"])).unwrap_err().to_string();
    assert!(
        err.contains("lora.targets") && err.contains("q_proj"),
        "{err}"
    );
    let mut bad = lora(&["q_proj"]);
    bad.rank = 0;
    let err = model.attach_lora(&bad).unwrap_err().to_string();
    assert!(err.contains("lora.rank"), "{err}");
    model.attach_lora(&lora(&["q_proj"])).unwrap();
    assert!(
        model.attach_lora(&lora(&["v_proj"])).is_err(),
        "attaching twice"
    );
}

#[test]
fn a_peft_adapter_folder_holds_the_adapters_under_peft_names() -> anyhow::Result<()> {
    let mut model = Model::random(&small_config(), Device::Cpu, 3);
    model.attach_lora(&lora(&["q_proj", "down_proj"]))?;
    let dir = tempfile::tempdir()?;
    model.save_peft_adapter(dir.path())?;
    let tensors = Tensor::read_safetensors(dir.path().join("adapter_model.safetensors"))?;
    let mut names: Vec<String> = tensors.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    // Two layers, two targets, A and B each: the names vLLM's and PEFT's loaders parse.
    assert_eq!(names.len(), 8);
    assert!(names.contains(&"base_model.model.model.layers.1.mlp.down_proj.lora_B.weight".into()));
    for (n, t) in &tensors {
        let var = n
            .strip_prefix("base_model.model.")
            .and_then(|n| n.strip_suffix(".weight"))
            .unwrap();
        let ours = &model.var_store().variables()[var];
        assert!(t.equal(ours), "{n}");
    }
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        dir.path().join("adapter_config.json"),
    )?)?;
    assert_eq!(config["peft_type"], "LORA");
    assert_eq!(
        (config["r"].as_i64(), config["lora_alpha"].as_i64()),
        (Some(4), Some(8))
    );
    assert_eq!(
        config["target_modules"],
        serde_json::json!(["q_proj", "down_proj"])
    );
    // Without adapters there is nothing to push alone.
    let plain = Model::random(&small_config(), Device::Cpu, 3);
    assert!(plain.save_peft_adapter(dir.path()).is_err());
    Ok(())
}
