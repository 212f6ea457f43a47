//! The files others open, on the real SmolLM2-135M-Instruct GGUF: an HF folder written from it
//! has a complete `tokenizer_config.json` and `generation_config.json` (the GGUF's own special
//! tokens, by text and id), which survive a load and a save unchanged; and a GGUF file made
//! from that HF folder without a template has llama.cpp's metadata as llama.cpp's own
//! converter wrote it for the original (tokens, types, merges, pre-tokenizer, special ids,
//! hyper-parameters) and loads back to the same tokenizer and logits.
//!
//! The file is not in the repository: `fulcrum fetch-assets --only smollm2`, or set
//! `FULCRUM_SMOLLM2_GGUF`. Without it each test prints that it was skipped and passes (the
//! llama.cpp and Python suites, which need it, fail instead).

#[path = "common/smollm2.rs"]
mod smollm2_asset;
use smollm2_asset::gguf_path;

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use fulcrum_model::save_gguf::GgufTemplate;
use fulcrum_model::{GgufDtype, Model};
use tch::{Device, Tensor};

fn json(path: &Path) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

fn metadata(path: &Path) -> anyhow::Result<HashMap<String, Value>> {
    let mut f = std::fs::File::open(path)?;
    Ok(Content::read(&mut f)?.metadata)
}

/// Last-position logits of `ids`.
fn logits(model: &Model, ids: &[i64]) -> anyhow::Result<Tensor> {
    let input = Tensor::from_slice(ids).view([1, ids.len() as i64]);
    Ok(tch::no_grad(|| model.net().forward(&input))?.get(0).get(-1))
}

#[test]
fn an_hf_folder_from_a_gguf_declares_its_special_tokens_and_keeps_them() -> anyhow::Result<()> {
    let Some(path) = gguf_path() else {
        return Ok(());
    };
    let model = Model::load_gguf(&path, Device::Cpu)?;
    let dir = tempfile::tempdir()?;
    let hf = dir.path().join("hf");
    model.save_merged(&hf)?;
    let tc = json(&hf.join("tokenizer_config.json"))?;
    // SmolLM2's GGUF: bos 1, eos 2, padding 2, unknown 0.
    assert_eq!(tc["bos_token"], "<|im_start|>");
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert_eq!(tc["pad_token"], "<|im_end|>");
    assert_eq!(tc["unk_token"], "<|endoftext|>");
    assert_eq!(tc["tokenizer_class"], "PreTrainedTokenizerFast");
    assert_eq!(tc["model_max_length"], 8192);
    assert_eq!(tc["add_bos_token"], false);
    assert_eq!(tc["added_tokens_decoder"]["2"]["content"], "<|im_end|>");
    assert_eq!(tc["added_tokens_decoder"]["2"]["special"], true);
    assert!(tc["chat_template"]
        .as_str()
        .is_some_and(|t| t.contains("<|im_start|>")));
    let gc = json(&hf.join("generation_config.json"))?;
    assert_eq!(gc["bos_token_id"], 1);
    assert_eq!(gc["eos_token_id"], 2);
    assert_eq!(gc["pad_token_id"], 2);
    // Through a load and a save (a checkpoint of a checkpoint), nothing changes.
    let again = dir.path().join("again");
    Model::load_hf(&hf, Device::Cpu)?.save(&again)?;
    for f in [
        "tokenizer_config.json",
        "generation_config.json",
        "config.json",
    ] {
        assert_eq!(json(&hf.join(f))?, json(&again.join(f))?, "{f}");
    }
    Ok(())
}

#[test]
fn a_gguf_made_without_a_template_matches_llama_cpps_own_conversion() -> anyhow::Result<()> {
    let Some(path) = gguf_path() else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let hf = dir.path().join("hf");
    Model::load_gguf(&path, Device::Cpu)?.save_merged(&hf)?;
    let model = Model::load_hf(&hf, Device::Cpu)?;
    let out = dir.path().join("made.gguf");
    let template = GgufTemplate::for_model(&model, &out)?;
    model.save_gguf(&template, &out, GgufDtype::F32)?;

    let (orig, made) = (metadata(&path)?, metadata(&out)?);
    let keys = [
        "general.architecture",
        "llama.block_count",
        "llama.context_length",
        "llama.embedding_length",
        "llama.feed_forward_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.attention.layer_norm_rms_epsilon",
        "llama.rope.freq_base",
        "llama.rope.dimension_count",
        "llama.vocab_size",
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.add_bos_token",
        "tokenizer.chat_template",
    ];
    for key in keys {
        // Integer widths may differ (the converter's u32 and ours), the values may not.
        let show = |v: Option<&Value>| {
            format!("{v:?}")
                .replace("U32(", "(")
                .replace("I32(", "(")
                .replace("U64(", "(")
        };
        assert_eq!(show(orig.get(key)), show(made.get(key)), "{key}");
    }

    let back = Model::load_gguf(&out, Device::Cpu)?;
    let (t0, t1) = (model.tokenizer()?, back.tokenizer()?);
    for text in [
        "What is 12345 + 678?",
        "<|im_start|>user\nHello, world!<|im_end|>\n",
        "naïve café — 3.14159",
    ] {
        assert_eq!(t0.encode(text)?, t1.encode(text)?, "{text:?}");
    }
    let ids = t0.encode("<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n")?;
    let diff = (logits(&model, &ids)? - logits(&back, &ids)?)
        .abs()
        .max()
        .double_value(&[]);
    eprintln!("made GGUF (f32) vs the HF folder: max |logit diff| {diff:e}");
    assert!(diff < 1e-4, "{diff}");
    Ok(())
}
