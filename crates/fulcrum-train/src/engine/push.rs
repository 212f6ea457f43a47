//! The files of a weight push: a GGUF file for llama.cpp (written by the rank that drives the
//! engines), or an HF folder of safetensors shards for vLLM and SGLang, written by every rank
//! at once (each its share of the shards, each shard on a thread of its own) so that the
//! write, most of a large model's push, shrinks with the rank count. The folder must be one
//! that every rank and every engine can reach (`rollout.push_dir`: on several machines, a
//! shared filesystem).
//!
//! A LoRA policy pushes its adapter alone (a llama.cpp adapter GGUF, or a PEFT folder for vLLM
//! and SGLang), written by rank 0: the engines keep their base weights, which LoRA never changes.
//!
//! Every rank keeps the newest version written, so that all agree whether a push is due and
//! meet at the same barrier after writing: no engine is asked to load a folder before every
//! rank has finished its shards.

use std::path::PathBuf;

use fulcrum_model::save_gguf::GgufTemplate;
use fulcrum_model::{GgufDtype, Model};
use fulcrum_rollout::{WeightFiles, WeightFormat};

use crate::error::TrainError;
use crate::ranks::Ranks;

/// Shards each rank writes (on a thread each) in an HF push.
const SHARDS_PER_RANK: usize = 2;

/// Where and how a run's weight pushes are written.
pub struct PushFiles {
    format: WeightFormat,
    dir: PathBuf,
    dtype: GgufDtype,
    /// The GGUF a GGUF push copies its metadata from (on the rank that writes it).
    template_path: Option<PathBuf>,
    template: Option<GgufTemplate>,
    /// The newest version written.
    version: Option<u64>,
}

impl PushFiles {
    pub fn new(
        format: WeightFormat,
        dir: PathBuf,
        dtype: GgufDtype,
        template_path: Option<PathBuf>,
    ) -> PushFiles {
        PushFiles {
            format,
            dir,
            dtype,
            template_path,
            template: None,
            version: None,
        }
    }

    /// Whether the engines do not hold version `version` yet.
    pub fn due(&self, version: u64) -> bool {
        self.version != Some(version)
    }

    /// The path of version `version`'s files.
    pub fn path(&self, version: u64) -> PathBuf {
        match self.format {
            WeightFormat::Gguf => self.dir.join(format!("weights-v{version}.gguf")),
            WeightFormat::HfFolder => self.dir.join(format!("weights-v{version}")),
            WeightFormat::GgufAdapter => self.dir.join(format!("adapter-v{version}.gguf")),
            WeightFormat::PeftAdapter => self.dir.join(format!("adapter-v{version}")),
        }
    }

    /// Writes the policy (LoRA adapters folded in) as version `version`, on every rank of the
    /// job: a GGUF file by rank 0; an HF folder of `SHARDS_PER_RANK` shards per rank, each rank
    /// its own, then a barrier. Returns the files on rank 0.
    pub fn write(
        &mut self,
        model: &Model,
        version: u64,
        ranks: &mut Ranks,
    ) -> Result<Option<WeightFiles>, TrainError> {
        let path = self.path(version);
        match self.format {
            WeightFormat::Gguf if ranks.is_main() => {
                let dtype = self.dtype;
                model.save_gguf(self.gguf_template()?, &path, dtype)?;
            }
            WeightFormat::Gguf => {}
            // An adapter is small: rank 0 writes it alone.
            WeightFormat::GgufAdapter if ranks.is_main() => {
                model.save_gguf_adapter(self.gguf_template()?, &path)?;
            }
            WeightFormat::PeftAdapter if ranks.is_main() => model.save_peft_adapter(&path)?,
            WeightFormat::GgufAdapter | WeightFormat::PeftAdapter => {}
            WeightFormat::HfFolder => {
                let per = SHARDS_PER_RANK;
                let mine: Vec<usize> = (ranks.rank() * per..(ranks.rank() + 1) * per).collect();
                let shards = per * ranks.world();
                model.save_merged_shards(&path, shards, &mine, ranks.is_main())?;
                ranks.barrier()?;
            }
        }
        self.version = Some(version);
        Ok(ranks.is_main().then_some(WeightFiles {
            format: self.format,
            path,
        }))
    }

    /// The GGUF whose metadata a push copies (read once).
    fn gguf_template(&mut self) -> Result<&GgufTemplate, TrainError> {
        if self.template.is_none() {
            let path = self
                .template_path
                .clone()
                .ok_or(TrainError::NoGgufTemplate)?;
            self.template = Some(GgufTemplate::read(&path)?);
        }
        self.template.as_ref().ok_or(TrainError::NoGgufTemplate)
    }
}
