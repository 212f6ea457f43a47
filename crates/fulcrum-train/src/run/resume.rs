//! What a GRPO checkpoint records about its run ([`CheckpointMeta`], the manifest's `meta`),
//! and the check that a resume continues the same run: the same config (its fingerprint) and
//! the same build.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::data::DataPosition;
use crate::error::TrainError;

/// The build that writes a checkpoint: the package version and the git commit.
pub const BUILD: &str = env!("FULCRUM_BUILD");

/// The `meta` of a GRPO checkpoint's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// The GRPO steps taken.
    pub step: u64,
    /// Where the prompt stream resumes.
    pub data: DataPosition,
    /// The held-out accuracy after the SFT warm-up (`None`: no warm-up).
    pub sft_accuracy: Option<f64>,
    /// The run's config as [`config_fingerprint`] writes it; `None` in checkpoints from before
    /// it was recorded.
    #[serde(default)]
    pub config: Option<String>,
    /// [`BUILD`] of the writer; `None` in checkpoints from before it was recorded.
    #[serde(default)]
    pub build: Option<String>,
}

impl CheckpointMeta {
    /// The meta of a checkpoint written now by this build, for `cfg`.
    pub fn new(
        step: u64,
        data: DataPosition,
        sft_accuracy: Option<f64>,
        cfg: &Config,
    ) -> CheckpointMeta {
        CheckpointMeta {
            step,
            data,
            sft_accuracy,
            config: Some(config_fingerprint(cfg)),
            build: Some(BUILD.to_string()),
        }
    }

    /// The manifest's `meta` as JSON.
    pub fn to_json(&self) -> Result<serde_json::Value, TrainError> {
        serde_json::to_value(self).map_err(|source| TrainError::Encode {
            what: format!("the meta of checkpoint step-{}", self.step),
            source,
        })
    }

    /// Reads the `meta` of the checkpoint in `dir`.
    pub fn from_json(dir: &Path, meta: &serde_json::Value) -> Result<CheckpointMeta, TrainError> {
        CheckpointMeta::deserialize(meta).map_err(|e| TrainError::Checkpoint {
            path: dir.to_path_buf(),
            message: format!("manifest meta: {e}"),
        })
    }

    /// Refuses (unless `force`) to resume `cfg` from this checkpoint (in `dir`) when it was
    /// written under another config or by another build; names the keys that differ.
    /// Checkpoints from before these were recorded carry neither and are taken as they are.
    pub fn check_same_run(&self, dir: &Path, cfg: &Config, force: bool) -> Result<(), TrainError> {
        let mut problems = Vec::new();
        if let Some(old) = &self.config {
            let keys = differing_keys(old, &config_fingerprint(cfg));
            if !keys.is_empty() {
                problems.push(format!(
                    "the run's config.toml differs from the one this checkpoint was written \
                     with, in {}",
                    keys.join(", ")
                ));
            }
        }
        if let Some(old) = &self.build {
            if old != BUILD {
                problems.push(format!(
                    "the checkpoint was written by fulcrum {old}, this is fulcrum {BUILD}"
                ));
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        let message = problems.join("; ");
        if force {
            eprintln!("fulcrum: resuming anyway (--force): {message}");
            return Ok(());
        }
        Err(TrainError::ResumeMismatch {
            path: dir.to_path_buf(),
            message,
        })
    }
}

/// The config as a checkpoint records it: its TOML without where the run lives (`run_dir`,
/// `run_name`), which may be spelled differently on resume.
pub fn config_fingerprint(cfg: &Config) -> String {
    let mut c = cfg.clone();
    c.run_dir = None;
    c.run_name = String::new();
    c.to_toml()
}

/// The dotted keys whose values differ between two TOML documents (a key present in one only
/// counts).
fn differing_keys(a: &str, b: &str) -> Vec<String> {
    fn flatten(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, String>) {
        for (k, v) in t {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(inner) => flatten(&key, inner, out),
                other => {
                    out.insert(key, other.to_string());
                }
            }
        }
    }
    let parse = |s: &str| {
        let mut out = BTreeMap::new();
        if let Ok(t) = s.parse::<toml::Table>() {
            flatten("", &t, &mut out);
        }
        out
    };
    let (a, b) = (parse(a), parse(b));
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meta_round_trips_and_old_checkpoints_without_config_or_build_are_read() {
        let cfg = Config::default();
        let pos = DataPosition {
            chunk: 2,
            offset: 7,
        };
        let meta = CheckpointMeta::new(5, pos, Some(0.5), &cfg);
        let back = CheckpointMeta::from_json(Path::new("c"), &meta.to_json().unwrap()).unwrap();
        assert_eq!(back, meta);
        back.check_same_run(Path::new("c"), &cfg, false).unwrap();
        let old = serde_json::json!({"step": 3, "data": pos, "sft_accuracy": null});
        let old = CheckpointMeta::from_json(Path::new("c"), &old).unwrap();
        assert_eq!((old.config, old.build), (None, None));
        let e = CheckpointMeta::from_json(Path::new("c"), &serde_json::json!({"step": 1}));
        assert!(e.unwrap_err().to_string().contains("manifest meta"));
    }

    #[test]
    fn another_config_is_refused_naming_the_keys_unless_forced() {
        let cfg = Config::default();
        let pos = DataPosition {
            chunk: 0,
            offset: 0,
        };
        let meta = CheckpointMeta::new(1, pos, None, &cfg);
        let mut other = cfg.clone();
        other.ppo.params.eps_high = 0.3;
        other.run_name = "elsewhere".into();
        let e = meta.check_same_run(Path::new("c"), &other, false);
        let e = e.unwrap_err().to_string();
        assert!(e.contains("ppo.eps_high") && !e.contains("run_name"), "{e}");
        meta.check_same_run(Path::new("c"), &other, true).unwrap();
    }
}
