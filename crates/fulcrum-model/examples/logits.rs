//! fulcrum's side of the export tests (`python/tests/test_export.py`): what fulcrum computes for
//! a few chat prompts, for transformers, PEFT and llama.cpp to be compared with.
//!
//! `cargo run --release -p fulcrum-model --example logits -- MODEL PROMPTS.json OUT.safetensors`
//!
//! MODEL is anything fulcrum opens (an HF folder, a checkpoint with its LoRA adapters, a GGUF
//! file, a run directory); PROMPTS.json a list of texts, each rendered as one user message in
//! the model's chat template with the assistant header after it. OUT gets, for prompt K,
//! `ids.K` (the token ids of fulcrum's tokenizer) and `logits.K` (`[tokens, vocab]`, f32: the
//! next-token logits at every position); stdout gets the rendered texts as a JSON list.

use std::path::PathBuf;

use anyhow::Context;
use fulcrum_model::{Message, ModelSpec};
use tch::{Device, Kind, Tensor};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, prompts, out] = args.as_slice() else {
        anyhow::bail!("usage: logits MODEL PROMPTS.json OUT.safetensors");
    };
    let model = ModelSpec::parse(model)?.load(Device::Cpu, 0)?;
    let text = std::fs::read_to_string(prompts).with_context(|| prompts.clone())?;
    let prompts: Vec<String> =
        serde_json::from_str(&text).with_context(|| format!("{prompts}: a list of texts"))?;
    let (tok, chat) = (model.tokenizer()?, model.chat_template()?);
    let mut rendered = Vec::new();
    let mut named = Vec::new();
    for (k, p) in prompts.iter().enumerate() {
        let text = chat.render(&[Message::user(p.as_str())], true);
        let ids = tok.encode(&text)?;
        let input = Tensor::from_slice(&ids).view([1, ids.len() as i64]);
        let logits = tch::no_grad(|| model.net().forward(&input))?;
        named.push((format!("ids.{k}"), Tensor::from_slice(&ids)));
        named.push((format!("logits.{k}"), logits.get(0).to_kind(Kind::Float)));
        rendered.push(text);
    }
    Tensor::write_safetensors(&named, PathBuf::from(out))?;
    println!("{}", serde_json::to_string(&rendered)?);
    Ok(())
}
