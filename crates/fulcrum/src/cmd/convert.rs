//! `fulcrum convert MODEL OUT`: write any model fulcrum opens (a GGUF file, an HF folder, a
//! checkpoint such as `runs/NAME/checkpoints/step-N`, a run directory) as a plain HF folder, or
//! as a GGUF file for llama.cpp when OUT ends in `.gguf`; LoRA adapters are folded in.
//!
//! The HF folder holds the weights in f32 (a GGUF dequantised) as
//! `model.safetensors`, `config.json`, `tokenizer.json` (from a GGUF: rebuilt from its
//! vocabulary), and complete `tokenizer_config.json` and `generation_config.json`: the special
//! tokens the source declares, by text and id, the chat template (`fulcrum_model::hf_meta`).
//! A GGUF copies its metadata from `--gguf-template` when given, else makes it from the model
//! (`GgufTemplate::for_model`). Both load back to the same logits. The output is written under a
//! temporary name and renamed, so an interrupted conversion leaves nothing half-written; an
//! existing OUT is refused.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use fulcrum_model::save_gguf::GgufTemplate;
use fulcrum_model::tch::Device;
use fulcrum_model::GgufDtype;

/// Flags of `fulcrum convert`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model to convert: a GGUF file, an HF folder or checkpoint (LoRA adapters are merged),
    /// or a run directory (its final checkpoint).
    pub model: PathBuf,
    /// What to create (must not exist): an HF folder, or a GGUF file when it ends in `.gguf`.
    #[arg(value_name = "OUT")]
    pub out_dir: PathBuf,
    /// Float type of a GGUF output's matrices: f16 or f32 (norms are always f32).
    #[arg(long, default_value = "f16", value_parser = parse_dtype)]
    pub gguf_dtype: GgufDtype,
    /// A GGUF file of the same model whose metadata (tokenizer, chat template, names) a GGUF
    /// output copies; by default it is made from the model's config and tokenizer.
    #[arg(long, value_name = "FILE.gguf")]
    pub gguf_template: Option<PathBuf>,
}

fn parse_dtype(s: &str) -> Result<GgufDtype, String> {
    s.parse().map_err(|e| format!("{e}"))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let out = &args.out_dir;
    if out.exists() {
        anyhow::bail!("{}: already exists (refusing to overwrite)", out.display());
    }
    let gguf = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if args.gguf_template.is_some() && !gguf {
        anyhow::bail!(
            "--gguf-template: {} is an HF folder, not a .gguf file (the template is for GGUF output)",
            out.display()
        );
    }
    let model =
        fulcrum_model::ModelSpec::parse(&args.model.to_string_lossy())?.load(Device::Cpu, 0)?;
    let name = out
        .file_name()
        .context("OUT has no file or folder name")?
        .to_string_lossy()
        .into_owned();
    if gguf {
        let template = match &args.gguf_template {
            Some(t) => GgufTemplate::read(t)?,
            None => GgufTemplate::for_model(&model, out)?,
        };
        // `save_gguf` writes beside OUT and renames.
        model.save_gguf(&template, out, args.gguf_dtype)?;
        eprintln!(
            "fulcrum: wrote {} ({} parameters, {} matrices)",
            out.display(),
            model.config().num_parameters(),
            args.gguf_dtype
        );
        return Ok(ExitCode::SUCCESS);
    }
    let tmp = out.with_file_name(format!(".{name}.partial"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
    }
    model.save_merged(&tmp)?;
    std::fs::rename(&tmp, out)
        .with_context(|| format!("renaming {} to {}", tmp.display(), out.display()))?;
    // Loaded on the CPU, every model is f32 (a GGUF dequantised).
    eprintln!(
        "fulcrum: wrote {} ({} parameters, f32)",
        out.display(),
        model.config().num_parameters()
    );
    Ok(ExitCode::SUCCESS)
}
