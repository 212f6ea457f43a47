//! A model file that lies is refused before any tensor is made: every hyper-parameter of an
//! HF `config.json` or of GGUF metadata is checked alone, against the others and against the
//! shapes the weight files declare, and the error names the field and the file, never a panic,
//! a wrapped-around number or an allocation of what the file claims.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use fulcrum_model::load_model;
use fulcrum_model::{HyperProblem, Model, ModelConfig, ModelError, ModelSpec};
use tch::Device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A copy of fixture `name` in a temporary folder, with `edit` applied to its config.json.
fn hf_copy(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture(name).join(f), dir.path().join(f)).unwrap();
    }
    let path = dir.path().join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(&path, cfg.to_string()).unwrap();
    dir
}

fn load_err(dir: &Path) -> ModelError {
    match Model::load_hf(dir, Device::Cpu) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e,
    }
}

#[test]
fn the_declared_shapes_are_exactly_what_the_transformer_creates() {
    let base = ModelConfig::tiny(128, 2);
    let configs = [
        base.clone(),
        ModelConfig {
            num_kv_heads: 2,
            qkv_bias: true,
            tie_embeddings: false,
            ..base.clone()
        },
        ModelConfig {
            qk_norm: true,
            head_dim: 32,
            num_heads: 8,
            num_kv_heads: 1,
            num_layers: 2,
            ..base
        },
    ];
    for cfg in configs {
        let model = Model::random(&cfg, Device::Cpu, 0);
        let made: BTreeMap<String, Vec<i64>> = model
            .var_store()
            .variables()
            .into_iter()
            .map(|(n, t)| (n, t.size()))
            .collect();
        let declared: BTreeMap<String, Vec<i64>> = cfg.parameter_shapes().into_iter().collect();
        assert_eq!(declared, made, "{cfg:?}");
    }
}

#[test]
fn every_fixture_still_loads() {
    for name in ["llama", "qwen2", "qwen3"] {
        let dir = hf_copy(name, |_| {});
        Model::load_hf(dir.path(), Device::Cpu).unwrap();
        load_model(dir.path(), Device::Cpu).unwrap();
    }
}

#[test]
fn an_absurd_or_inconsistent_config_json_is_refused_naming_the_field() {
    for (field, value, says) in [
        ("num_attention_heads", serde_json::json!(0), "at least 1"),
        ("num_key_value_heads", serde_json::json!(0), "at least 1"),
        (
            "num_key_value_heads",
            serde_json::json!(3),
            "does not divide",
        ),
        ("vocab_size", serde_json::json!(-96), "at least 1"),
        ("hidden_size", serde_json::json!(-64), "at least 1"),
        ("intermediate_size", serde_json::json!(0), "at least 1"),
        (
            "num_hidden_layers",
            serde_json::json!(1_000_000),
            "the most fulcrum accepts",
        ),
        ("num_hidden_layers", serde_json::json!(u64::MAX), "64-bit"),
        ("num_hidden_layers", serde_json::json!(-1), "at least 1"),
        ("head_dim", serde_json::json!(15), "even"),
        ("rms_norm_eps", serde_json::json!(0.0), "finite and > 0"),
        (
            "max_position_embeddings",
            serde_json::json!(0),
            "at least 1",
        ),
        ("vocab_size", serde_json::json!("96"), "expected an integer"),
    ] {
        let dir = hf_copy("llama", |c| c[field] = value.clone());
        let e = load_err(dir.path());
        assert!(
            matches!(&e, ModelError::HyperParameter { field: f, .. } if f == field),
            "{field} = {value}: {e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("config.json") && text.contains(field) && text.contains(says),
            "{field} = {value}: {text}"
        );
    }
    let dir = hf_copy("llama", |c| {
        c["rope_parameters"]["rope_theta"] = serde_json::json!(-1.0)
    });
    let e = load_err(dir.path());
    assert!(
        matches!(
            &e,
            ModelError::HyperParameter {
                problem: HyperProblem::NotPositiveFinite { .. },
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_config_the_weights_contradict_is_refused_before_reading_them() {
    for (field, value, found) in [
        ("num_hidden_layers", 5, "holds 2 layers"),
        ("vocab_size", 1000, "holds 96 rows"),
        ("intermediate_size", 128, "112 rows"),
        ("num_key_value_heads", 1, "32 rows"),
        ("num_attention_heads", 2, "64 rows"),
    ] {
        let dir = hf_copy("llama", |c| c[field] = serde_json::json!(value));
        let e = load_err(dir.path());
        assert!(
            matches!(&e, ModelError::WeightsDisagree { field: f, .. } if f == field),
            "{field} = {value}: {e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("config.json")
                && text.contains("model.safetensors")
                && text.contains(found),
            "{field} = {value}: {text}"
        );
    }
    // A tied head in the config, an untied one in the file: the leftover tensor is named.
    let dir = hf_copy("llama", |c| {
        c["tie_word_embeddings"] = serde_json::json!(true)
    });
    let e = load_err(dir.path());
    assert!(
        matches!(&e, ModelError::UnusedTensor { name, .. } if name == "lm_head.weight"),
        "{e:?}"
    );
}

/// A GGUF file of a tiny Llama (hidden 16, 2 heads, 2 layers, a vocabulary of 24), with
/// `edit` applied to its metadata.
fn gguf(dir: &Path, edit: impl FnOnce(&mut BTreeMap<String, Value>)) -> PathBuf {
    let (vocab, d, f, layers) = (24usize, 16usize, 32usize, 2usize);
    let mut md: BTreeMap<String, Value> = BTreeMap::new();
    let s = |x: &str| Value::String(x.to_string());
    md.insert("general.architecture".into(), s("llama"));
    md.insert("llama.embedding_length".into(), Value::U32(d as u32));
    md.insert("llama.feed_forward_length".into(), Value::U32(f as u32));
    md.insert("llama.block_count".into(), Value::U32(layers as u32));
    md.insert("llama.attention.head_count".into(), Value::U32(2));
    md.insert("llama.attention.head_count_kv".into(), Value::U32(2));
    md.insert(
        "llama.attention.layer_norm_rms_epsilon".into(),
        Value::F32(1e-5),
    );
    md.insert("llama.context_length".into(), Value::U32(256));
    md.insert("tokenizer.ggml.model".into(), s("gpt2"));
    let tokens: Vec<Value> = (0..vocab).map(|i| s(&format!("t{i}"))).collect();
    md.insert("tokenizer.ggml.tokens".into(), Value::Array(tokens));
    md.insert("tokenizer.ggml.merges".into(), Value::Array(vec![]));
    md.insert(
        "tokenizer.ggml.token_type".into(),
        Value::Array(vec![Value::I32(1); vocab]),
    );
    md.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(2));
    edit(&mut md);
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("token_embd.weight".into(), vec![vocab, d]),
        ("output_norm.weight".into(), vec![d]),
    ];
    for i in 0..layers {
        for (n, shape) in [
            ("attn_norm.weight", vec![d]),
            ("ffn_norm.weight", vec![d]),
            ("attn_q.weight", vec![d, d]),
            ("attn_k.weight", vec![d, d]),
            ("attn_v.weight", vec![d, d]),
            ("attn_output.weight", vec![d, d]),
            ("ffn_gate.weight", vec![f, d]),
            ("ffn_up.weight", vec![f, d]),
            ("ffn_down.weight", vec![d, f]),
        ] {
            shapes.push((format!("blk.{i}.{n}"), shape));
        }
    }
    let tensors: Vec<(String, QTensor)> = shapes
        .into_iter()
        .map(|(n, shape)| {
            let t = candle_core::Tensor::ones(
                shape,
                candle_core::DType::F32,
                &candle_core::Device::Cpu,
            )
            .unwrap();
            (n, QTensor::quantize(&t, GgmlDType::F32).unwrap())
        })
        .collect();
    let path = dir.join("m.gguf");
    let mut file = std::fs::File::create(&path).unwrap();
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    gguf_file::write(&mut file, &md_refs, &t_refs).unwrap();
    path
}

#[test]
fn a_gguf_file_with_lying_metadata_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let good = gguf(dir.path(), |_| {});
    let model = Model::load_gguf(&good, Device::Cpu).unwrap();
    assert_eq!(model.config().num_layers, 2);
    let encoder = ModelSpec::Gguf(good.clone()).prompt_encoder().unwrap();
    assert_eq!(encoder.max_positions, 256);
    for (key, value, says) in [
        // Zero heads divided by zero in the loader.
        ("llama.attention.head_count", Value::U32(0), "at least 1"),
        ("llama.attention.head_count_kv", Value::U32(0), "at least 1"),
        (
            "llama.attention.head_count_kv",
            Value::U32(3),
            "does not divide",
        ),
        (
            "llama.block_count",
            Value::U32(1_000_000),
            "the most fulcrum accepts",
        ),
        // A u64 that a cast would wrap around to -1.
        ("llama.block_count", Value::U64(u64::MAX), "64-bit"),
        ("llama.block_count", Value::I32(-2), "at least 1"),
        (
            "llama.block_count",
            Value::String("2".into()),
            "expected an integer",
        ),
        ("llama.block_count", Value::U32(3), "holds 2 layers"),
        ("llama.embedding_length", Value::U32(32), "wide"),
        ("llama.feed_forward_length", Value::U32(0), "at least 1"),
        (
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(-1.0),
            "finite and > 0",
        ),
        (
            "llama.rope.freq_base",
            Value::F32(f32::NAN),
            "finite and > 0",
        ),
        (
            "llama.context_length",
            Value::U64(1 << 40),
            "the most fulcrum accepts",
        ),
        (
            "tokenizer.ggml.eos_token_id",
            Value::U32(24),
            "outside the vocabulary",
        ),
        ("llama.attention.key_length", Value::U32(7), "even"),
    ] {
        let path = gguf(dir.path(), |md| {
            md.insert(key.to_string(), value.clone());
        });
        for e in [
            Model::load_gguf(&path, Device::Cpu).err(),
            ModelSpec::Gguf(path.clone()).prompt_encoder().err(),
        ] {
            let text = e
                .unwrap_or_else(|| panic!("{key} = {value:?} was accepted"))
                .to_string();
            assert!(
                text.contains("m.gguf") && text.contains(key) && text.contains(says),
                "{key} = {value:?}: {text}"
            );
        }
    }
    // A vocabulary that the embedding contradicts: the token list is the vocabulary.
    let path = gguf(dir.path(), |md| {
        let tokens: Vec<Value> = (0..30).map(|i| Value::String(format!("t{i}"))).collect();
        md.insert("tokenizer.ggml.tokens".into(), Value::Array(tokens));
        md.insert(
            "tokenizer.ggml.token_type".into(),
            Value::Array(vec![Value::I32(1); 30]),
        );
    });
    let text = Model::load_gguf(&path, Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("tokenizer.ggml.tokens") && text.contains("24 rows"),
        "{text}"
    );
}
