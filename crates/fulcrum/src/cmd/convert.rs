//! `fulcrum convert MODEL OUT_DIR`: write a GGUF model, or an HF folder saved with LoRA adapters
//! (a LoRA run's checkpoint), as a plain HF folder (adapters folded into the weights).
//!
//! The weights are dequantised to f32 (`model.safetensors`), the tokenizer rebuilt from the
//! GGUF vocabulary is written as `tokenizer.json`, the chat template as `tokenizer_config.json`.
//! The folder loads back to the same logits. It is written under a temporary name and renamed,
//! so an interrupted conversion leaves no half folder; an existing OUT_DIR is refused.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use fulcrum_model::tch::Device;

/// Flags of `fulcrum convert`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GGUF file, or an HF folder (with LoRA adapters: they are merged), to convert.
    pub model: PathBuf,
    /// The HF folder to create (must not exist).
    pub out_dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.out_dir.exists() {
        anyhow::bail!(
            "{}: already exists (refusing to overwrite)",
            args.out_dir.display()
        );
    }
    let model =
        fulcrum_model::ModelSpec::parse(&args.model.to_string_lossy())?.load(Device::Cpu, 0)?;
    let name = args
        .out_dir
        .file_name()
        .context("OUT_DIR has no folder name")?
        .to_string_lossy()
        .into_owned();
    let tmp = args.out_dir.with_file_name(format!(".{name}.partial"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
    }
    model.save_merged(&tmp)?;
    std::fs::rename(&tmp, &args.out_dir)
        .with_context(|| format!("renaming {} to {}", tmp.display(), args.out_dir.display()))?;
    eprintln!(
        "fulcrum: wrote {} ({} parameters, f32)",
        args.out_dir.display(),
        model.config().num_parameters()
    );
    Ok(ExitCode::SUCCESS)
}
