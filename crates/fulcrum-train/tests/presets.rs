//! Every preset under `configs/` loads (known keys, right types, valid ranges), and the paper
//! presets keep the DAPO recipe's settings they document.

use std::path::{Path, PathBuf};

use fulcrum_train::Config;

fn presets() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("configs/ is readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_preset_loads() {
    let files = presets();
    assert!(
        files.len() >= 4,
        "expected demo, smollm2 and two paper presets: {files:?}"
    );
    for f in files {
        if let Err(e) = Config::load(Some(&f), &[]) {
            panic!("{}: {e}", f.display());
        }
    }
}

#[test]
fn paper_presets_follow_the_dapo_recipe() -> Result<(), Box<dyn std::error::Error>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    for name in ["dapo17k-qwen2.5-math-7b.toml", "polaris-qwen3-1.7b.toml"] {
        let c = Config::load(Some(&dir.join(name)), &[])?;
        assert_eq!(c.optim.lr, 1e-6, "{name}");
        assert_eq!(
            (c.rollout.prompts_per_step, c.rollout.group_size),
            (512, 16),
            "{name}"
        );
        assert_eq!(
            c.rollout.prompts_per_step / c.ppo.mini_batches,
            32,
            "{name}: mini-batch of 32 prompts"
        );
        assert_eq!(c.rollout.max_response_len, 8192, "{name}");
        assert_eq!(
            (
                c.ppo.params.eps_low,
                c.ppo.params.eps_high,
                c.ppo.params.dual_clip_c
            ),
            (0.2, 0.28, 10.0)
        );
        assert_eq!((c.ppo.kl_coef, c.ppo.entropy_coef), (0.0, 0.0), "{name}");
        assert_eq!(c.rollout.temperature, 1.0, "{name}");
        assert_eq!(c.device.to_string(), "cuda", "{name}: meant for GPUs");
    }
    Ok(())
}

#[test]
fn the_smollm2_preset_trains_on_math_and_evaluates_on_gsm8k(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let c = Config::load(Some(&dir.join("smollm2-gsm8k.toml")), &[])?;
    assert!(c.model.path.ends_with(".gguf"));
    assert_eq!(c.eval.task.as_ref().map(|t| t.name.as_str()), Some("gsm8k"));
    assert!(c.eval.at_start);
    let data = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(c.task.path.as_ref().ok_or("no task.path")?);
    assert!(data.is_file(), "{} is missing", data.display());
    Ok(())
}
