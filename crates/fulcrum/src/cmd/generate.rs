//! `fulcrum generate`: complete one prompt with a model and print the continuation.
//!
//! For people and tests: loads `tiny`, an HF folder, a GGUF file or a run directory's final
//! checkpoint, optionally wraps the prompt
//! in the model's chat template, samples with the KV-cache sampler and prints the text to stdout
//! (the number of tokens and the reason it stopped go to stderr).
use std::process::ExitCode;

use anyhow::Context;
use fulcrum_model::limits::{model::MAX_VOCAB, MAX_SEQUENCE_TOKENS};
use fulcrum_model::tch::Kind;
use fulcrum_model::{generate, Message, ModelSpec, PromptTokens, SampleRequest, Sampling};

use super::runtime::bounded;

/// Flags of `fulcrum generate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model: `tiny`, an HF folder, a .gguf file, or a run directory (its final checkpoint).
    #[arg(long)]
    pub model: String,
    /// Prompt text.
    #[arg(long)]
    pub prompt: String,
    /// Wrap the prompt as a user message in the model's chat template (ChatML).
    #[arg(long)]
    pub chat: bool,
    /// Most tokens to generate (1 to 1048576; the prompt and these must fit the model's
    /// context).
    #[arg(long, default_value_t = 128, value_parser = bounded(1, MAX_SEQUENCE_TOKENS))]
    pub max_new_tokens: usize,
    /// Sampling temperature; 0 means greedy decoding.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Keep only the k most likely tokens when sampling.
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=MAX_VOCAB))]
    pub top_k: Option<i64>,
    /// Keep only the smallest set of tokens whose probability reaches p when sampling.
    #[arg(long)]
    pub top_p: Option<f64>,
    #[command(flatten)]
    pub runtime: super::runtime::RuntimeArgs,
    /// Run in bfloat16 (CUDA only).
    #[arg(long)]
    pub bf16: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !(args.temperature >= 0.0 && args.temperature.is_finite()) {
        anyhow::bail!(
            "--temperature must be finite and >= 0, got {}",
            args.temperature
        );
    }
    if let Some(p) = args.top_p {
        if !(p > 0.0 && p <= 1.0) {
            anyhow::bail!("--top-p must be in (0, 1], got {p}");
        }
    }
    let device = args.runtime.resolve()?.device;
    let spec = ModelSpec::parse(&args.model).with_context(|| format!("--model {}", args.model))?;
    // The prompt must fit the model's context beside the response: known from the tokenizer
    // alone, before the model is loaded.
    let encoder = spec
        .prompt_encoder()
        .with_context(|| format!("--model {}", args.model))?;
    let room = encoder.max_positions.saturating_sub(args.max_new_tokens);
    let chat = if args.chat {
        encoder.chat.as_ref()
    } else {
        None
    };
    if args.chat && chat.is_none() {
        anyhow::bail!("--chat: the model {spec} has no chat template");
    }
    if let PromptTokens::TooLong { .. } =
        fulcrum_model::encode_within(&encoder.tokenizer, chat, &args.prompt, room)?
    {
        anyhow::bail!(
            "--prompt: longer than the {room} tokens the model's context of {} \
             (max_position_embeddings) leaves beside --max-new-tokens {}",
            encoder.max_positions,
            args.max_new_tokens
        );
    }
    let mut model = spec.load(device, 0)?;
    if args.bf16 {
        if !device.is_cuda() {
            anyhow::bail!("--bf16 needs a CUDA device (got {device:?})");
        }
        model.set_kind(Kind::BFloat16);
    }
    let tokenizer = model.tokenizer()?;
    let text = if args.chat {
        model
            .chat_template()?
            .render(&[Message::user(&args.prompt)], true)
    } else {
        args.prompt.clone()
    };
    let prompt = tokenizer.encode(&text)?;
    let sampling = if args.temperature == 0.0 {
        Sampling::Greedy
    } else {
        Sampling::Sample {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
        }
    };
    let req = SampleRequest {
        first_prompt: 0,
        prompts: vec![prompt],
        samples_per_prompt: 1,
        max_new_tokens: args.max_new_tokens,
        sampling,
        seed: args.runtime.seed,
        stop_token_ids: model.stop_token_ids(),
        stop_strings: vec![],
    };
    let start = std::time::Instant::now();
    let out = generate(model.net(), &req, Some(tokenizer))?;
    let completion = out.first().context("the sampler returned no completion")?;
    println!("{}", tokenizer.decode(&completion.tokens, false)?);
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "fulcrum: {} tokens in {secs:.2} s ({:.1} tokens/s), finish: {:?}",
        completion.tokens.len(),
        completion.tokens.len() as f64 / secs,
        completion.finish
    );
    Ok(ExitCode::SUCCESS)
}
