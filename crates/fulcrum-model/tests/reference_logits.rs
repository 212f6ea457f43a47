//! Logits parity with HF `transformers` on tiny random Llama, Qwen2 and Qwen3 folders
//! (fixtures written by `tools/make_fixtures.py`): same weights, same inputs, within 1e-4.

use std::path::PathBuf;

use fulcrum_model::Model;
use tch::{Device, Tensor};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn reference(name: &str, key: &str) -> anyhow::Result<Tensor> {
    let named = Tensor::read_safetensors(fixture(name).join("reference.safetensors"))?;
    named
        .into_iter()
        .find(|(n, _)| n == key)
        .map(|(_, t)| t)
        .ok_or_else(|| anyhow::anyhow!("{name}: reference has no `{key}`"))
}

fn max_abs_diff_against_hf(name: &str) -> anyhow::Result<f64> {
    let model = Model::load_hf(&fixture(name), Device::Cpu)?;
    let ids = reference(name, "input_ids")?;
    let want = reference(name, "logits")?;
    let got = tch::no_grad(|| model.net().forward(&ids))?;
    assert_eq!(got.size(), want.size());
    Ok((got - want).abs().max().double_value(&[]))
}

#[test]
fn llama_logits_match_transformers() -> anyhow::Result<()> {
    let diff = max_abs_diff_against_hf("llama")?;
    assert!(diff < 1e-4, "max |diff| {diff}");
    Ok(())
}

#[test]
fn qwen2_logits_match_transformers() -> anyhow::Result<()> {
    let diff = max_abs_diff_against_hf("qwen2")?;
    assert!(diff < 1e-4, "max |diff| {diff}");
    Ok(())
}

#[test]
fn qwen3_logits_match_transformers() -> anyhow::Result<()> {
    let diff = max_abs_diff_against_hf("qwen3")?;
    assert!(diff < 1e-4, "max |diff| {diff}");
    Ok(())
}

#[test]
fn logits_are_not_trivially_flat() -> anyhow::Result<()> {
    // Guards the parity tests: the reference logits must vary enough to tell models apart.
    let want = reference("llama", "logits")?;
    assert!(want.std(true).double_value(&[]) > 0.05);
    Ok(())
}

#[test]
fn saved_folder_loads_back_to_the_same_logits() -> anyhow::Result<()> {
    let model = Model::load_hf(&fixture("qwen3"), Device::Cpu)?;
    let dir = std::env::temp_dir().join(format!("fulcrum-save-{}", std::process::id()));
    model.save(&dir)?;
    let back = Model::load_hf(&dir, Device::Cpu)?;
    let ids = reference("qwen3", "input_ids")?;
    let (a, b) = tch::no_grad(|| -> anyhow::Result<_> {
        Ok((model.net().forward(&ids)?, back.net().forward(&ids)?))
    })?;
    assert!(a.equal(&b));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn shards_written_by_two_writers_load_to_the_same_logits_as_one_file() -> anyhow::Result<()> {
    // What a weight push by two ranks writes: writer 0 its two shards with the index and the
    // config, writer 1 the other two; the folder is the model, as the single file is.
    let model = Model::load_hf(&fixture("qwen3"), Device::Cpu)?;
    let dir = tempfile::tempdir()?;
    let (one, sharded) = (dir.path().join("one"), dir.path().join("sharded"));
    model.save_merged(&one)?;
    model.save_merged_shards(&sharded, 4, &[0, 1], true)?;
    assert!(!sharded.join("model-00003-of-00004.safetensors").exists());
    model.save_merged_shards(&sharded, 4, &[2, 3], false)?;
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        sharded.join("model.safetensors.index.json"),
    )?)?;
    let files: std::collections::BTreeSet<&str> = index["weight_map"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(files.len(), 4, "{files:?}");
    let ids = reference("qwen3", "input_ids")?;
    let (a, b) = tch::no_grad(|| -> anyhow::Result<_> {
        let a = Model::load_hf(&one, Device::Cpu)?.net().forward(&ids)?;
        let b = Model::load_hf(&sharded, Device::Cpu)?.net().forward(&ids)?;
        Ok((a, b))
    })?;
    assert!(a.equal(&b));
    Ok(())
}

#[test]
fn a_missing_tensor_is_an_error_naming_it() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("fulcrum-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(
        fixture("llama").join("config.json"),
        dir.join("config.json"),
    )?;
    let named: Vec<(String, Tensor)> =
        Tensor::read_safetensors(fixture("llama").join("model.safetensors"))?
            .into_iter()
            .filter(|(n, _)| n != "model.norm.weight")
            .collect();
    Tensor::write_safetensors(&named, dir.join("model.safetensors"))?;
    let err = Model::load_hf(&dir, Device::Cpu).unwrap_err().to_string();
    assert!(err.contains("model.norm.weight"), "{err}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
