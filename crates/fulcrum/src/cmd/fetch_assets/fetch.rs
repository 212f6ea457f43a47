//! Making one asset file present and verified: skip it when its sha256 already matches,
//! otherwise pull each part out of its package archive, concatenate the parts into a temporary
//! file beside the destination while hashing, check size and sha256, and only then rename it
//! into place. A failure at any point removes the temporary file, so the destination is either
//! absent, the old file, or the verified new one; never half written.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use super::archive::copy_member;
use super::registry::{Index, Package, Source};

/// One part of a file: a member of a package archive.
#[derive(Debug, Clone)]
pub struct Part {
    pub package: Package,
    pub member: String,
}

/// A file to put in place: the concatenation of its parts, in order.
#[derive(Debug, Clone)]
pub struct AssetFile {
    pub dest: PathBuf,
    pub size: u64,
    /// Lowercase hex.
    pub sha256: String,
    pub parts: Vec<Part>,
}

/// What `ensure` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The file was there with the right hash; nothing was downloaded.
    Present,
    /// The file was assembled and verified.
    Fetched,
}

/// Fetches and verifies files, downloading each package at most once while it lives.
pub struct Fetcher<'a> {
    source: &'a dyn Source,
    /// Downloaded archives, by package, in per-package folders of `work`.
    archives: HashMap<Package, PathBuf>,
    work: Option<tempfile::TempDir>,
    log: &'a mut dyn FnMut(&str),
}

impl<'a> Fetcher<'a> {
    pub fn new(source: &'a dyn Source, log: &'a mut dyn FnMut(&str)) -> Self {
        Fetcher {
            source,
            archives: HashMap::new(),
            work: None,
            log,
        }
    }

    /// Makes `file` present and verified.
    pub fn ensure(&mut self, file: &AssetFile) -> Result<Outcome> {
        let shown = file.dest.display().to_string();
        if file.dest.is_file() {
            let (size, sha) = hash_file(&file.dest)?;
            if size == file.size && sha == file.sha256 {
                (self.log)(&format!("{shown}: present, sha256 ok"));
                return Ok(Outcome::Present);
            }
            (self.log)(&format!(
                "{shown}: present but differs (sha256 {sha}), fetching it again"
            ));
        }
        let parent = file
            .dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(parent)
            .with_context(|| format!("{}: cannot create", parent.display()))?;
        let file_name = file
            .dest
            .file_name()
            .with_context(|| format!("{shown}: not a file path"))?
            .to_string_lossy();
        let partial = Partial {
            path: parent.join(format!(".{file_name}.partial-{}", std::process::id())),
        };
        let out = File::create(&partial.path)
            .with_context(|| format!("{}: cannot create", partial.path.display()))?;
        let mut out = HashingWriter::new(BufWriter::new(out));
        for (i, part) in file.parts.iter().enumerate() {
            let archive = self.archive(&part.package)?;
            if file.parts.len() > 1 {
                (self.log)(&format!(
                    "{shown}: part {}/{} from {}",
                    i + 1,
                    file.parts.len(),
                    part.package.spec()
                ));
            }
            copy_member(&archive, &part.member, &mut out)
                .with_context(|| format!("{shown}: part {} ({})", i + 1, part.package.spec()))?;
        }
        let (size, sha, inner) = out.finish();
        let inner = inner
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("{}: write failed", partial.path.display()))?;
        inner
            .sync_all()
            .with_context(|| format!("{}: write failed", partial.path.display()))?;
        if size != file.size || sha != file.sha256 {
            bail!(
                "{shown}: verification failed: expected {} bytes with sha256 {}, got {size} bytes \
                 with sha256 {sha} (from {}); nothing was written",
                file.size,
                file.sha256,
                sources(file)
            );
        }
        fs::rename(&partial.path, &file.dest)
            .with_context(|| format!("{shown}: cannot move the verified file into place"))?;
        std::mem::forget(partial);
        (self.log)(&format!(
            "{shown}: fetched, {}, sha256 ok",
            human_size(size)
        ));
        Ok(Outcome::Fetched)
    }

    /// Drops the downloaded archives (call between assets to bound disk use).
    pub fn clear(&mut self) {
        self.archives.clear();
        self.work = None;
    }

    fn archive(&mut self, pkg: &Package) -> Result<PathBuf> {
        if let Some(p) = self.archives.get(pkg) {
            return Ok(p.clone());
        }
        if self.work.is_none() {
            self.work = Some(
                tempfile::Builder::new()
                    .prefix("fulcrum-fetch-")
                    .tempdir()?,
            );
        }
        let work = self.work.as_ref().map(|w| w.path().to_path_buf());
        let into = work
            .context("no work folder")?
            .join(self.archives.len().to_string());
        fs::create_dir_all(&into)?;
        let index = match pkg.index {
            Index::PyPi => "PyPI",
            Index::Npm => "npm",
        };
        (self.log)(&format!("downloading {} from {index}", pkg.spec()));
        let path = self.source.fetch(pkg, &into)?;
        self.archives.insert(pkg.clone(), path.clone());
        Ok(path)
    }
}

fn human_size(bytes: u64) -> String {
    if bytes >= 1_000_000 {
        format!("{:.1} MB", bytes as f64 / 1e6)
    } else {
        format!("{:.1} kB", bytes as f64 / 1e3)
    }
}

fn sources(file: &AssetFile) -> String {
    let specs: Vec<String> = file.parts.iter().map(|p| p.package.spec()).collect();
    specs.join(", ")
}

/// Removes the temporary file unless it was renamed into place.
struct Partial {
    path: PathBuf,
}

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Size and lowercase-hex sha256 of a file.
pub fn hash_file(path: &Path) -> Result<(u64, String)> {
    let mut f = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut h = HashingWriter::new(io::sink());
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("{}: read failed", path.display()))?;
        if n == 0 {
            break;
        }
        h.write_all(&buf[..n])?;
    }
    let (size, sha, _) = h.finish();
    Ok((size, sha))
}

/// A writer that hashes and counts what passes through it.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    size: u64,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            size: 0,
        }
    }

    fn finish(self) -> (u64, String, W) {
        let digest = self.hasher.finalize();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        (self.size, hex, self.inner)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::fetch_assets::archive::tests::{write_tgz, write_zip};
    use crate::cmd::fetch_assets::registry::LocalArchives;
    use std::cell::Cell;

    /// A local source that counts downloads.
    struct Counting {
        inner: LocalArchives,
        calls: Cell<usize>,
    }

    impl Source for Counting {
        fn fetch(&self, pkg: &Package, into: &Path) -> Result<PathBuf> {
            self.calls.set(self.calls.get() + 1);
            self.inner.fetch(pkg, into)
        }
    }

    fn sha_hex(data: &[u8]) -> String {
        Sha256::digest(data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Two wheels holding the halves of a file, and an npm tarball holding another.
    fn fake_registry(dir: &Path) -> Result<(Vec<u8>, Vec<u8>)> {
        let whole: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let (a, b) = whole.split_at(123_457);
        write_zip(
            &dir.join("blob_part1-1.0-py3-none-any.whl"),
            &[("blob_part1/data/part01.bin", a)],
        )?;
        write_zip(
            &dir.join("blob_part2-1.0-py3-none-any.whl"),
            &[("blob_part2/data/part02.bin", b)],
        )?;
        let tok = b"{\"model\": {}}".to_vec();
        write_tgz(
            &dir.join("scope-tok-2.0.tgz"),
            &[("package/models/tokenizer.json", &tok)],
        )?;
        Ok((whole, tok))
    }

    fn two_part_file(dest: PathBuf, whole: &[u8]) -> AssetFile {
        AssetFile {
            dest,
            size: whole.len() as u64,
            sha256: sha_hex(whole),
            parts: vec![
                Part {
                    package: Package::pypi("blob-part1", "1.0"),
                    member: "blob_part1/data/part01.bin".into(),
                },
                Part {
                    package: Package::pypi("blob-part2", "1.0"),
                    member: "blob_part2/data/part02.bin".into(),
                },
            ],
        }
    }

    #[test]
    fn parts_are_concatenated_in_order_and_verified() -> Result<()> {
        let reg = tempfile::tempdir()?;
        let out = tempfile::tempdir()?;
        let (whole, tok) = fake_registry(reg.path())?;
        let src = LocalArchives {
            dir: reg.path().to_path_buf(),
        };
        let mut log = |_: &str| {};
        let mut f = Fetcher::new(&src, &mut log);
        let dest = out.path().join("models/blob.gguf");
        assert_eq!(
            f.ensure(&two_part_file(dest.clone(), &whole))?,
            Outcome::Fetched
        );
        assert_eq!(fs::read(&dest)?, whole);
        let tok_file = AssetFile {
            dest: out.path().join("tok/tokenizer.json"),
            size: tok.len() as u64,
            sha256: sha_hex(&tok),
            parts: vec![Part {
                package: Package::npm("@scope/tok", "2.0"),
                member: "package/models/tokenizer.json".into(),
            }],
        };
        assert_eq!(f.ensure(&tok_file)?, Outcome::Fetched);
        assert_eq!(fs::read(out.path().join("tok/tokenizer.json"))?, tok);
        Ok(())
    }

    #[test]
    fn a_verified_file_is_not_fetched_again_and_a_damaged_one_is() -> Result<()> {
        let reg = tempfile::tempdir()?;
        let out = tempfile::tempdir()?;
        let (whole, _) = fake_registry(reg.path())?;
        let src = Counting {
            inner: LocalArchives {
                dir: reg.path().to_path_buf(),
            },
            calls: Cell::new(0),
        };
        let file = two_part_file(out.path().join("blob.gguf"), &whole);
        let mut log = |_: &str| {};
        Fetcher::new(&src, &mut log).ensure(&file)?;
        assert_eq!(src.calls.get(), 2);
        let mut log = |_: &str| {};
        assert_eq!(
            Fetcher::new(&src, &mut log).ensure(&file)?,
            Outcome::Present
        );
        assert_eq!(
            src.calls.get(),
            2,
            "a verified file must not be downloaded again"
        );
        fs::write(&file.dest, b"damaged")?;
        let mut log = |_: &str| {};
        assert_eq!(
            Fetcher::new(&src, &mut log).ensure(&file)?,
            Outcome::Fetched
        );
        assert_eq!(src.calls.get(), 4);
        assert_eq!(fs::read(&file.dest)?, whole);
        Ok(())
    }

    #[test]
    fn a_hash_mismatch_fails_and_leaves_no_file() -> Result<()> {
        let reg = tempfile::tempdir()?;
        let out = tempfile::tempdir()?;
        let (whole, _) = fake_registry(reg.path())?;
        let src = LocalArchives {
            dir: reg.path().to_path_buf(),
        };
        let mut file = two_part_file(out.path().join("blob.gguf"), &whole);
        file.sha256 = sha_hex(b"something else");
        let mut log = |_: &str| {};
        let err = Fetcher::new(&src, &mut log).ensure(&file).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("verification failed"), "{msg}");
        assert!(msg.contains("blob-part1==1.0"), "{msg}");
        let left: Vec<_> = fs::read_dir(out.path())?.collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        Ok(())
    }

    #[test]
    fn a_missing_package_fails_naming_it_and_leaves_no_file() -> Result<()> {
        let reg = tempfile::tempdir()?;
        let out = tempfile::tempdir()?;
        let (whole, _) = fake_registry(reg.path())?;
        fs::remove_file(reg.path().join("blob_part2-1.0-py3-none-any.whl"))?;
        let src = LocalArchives {
            dir: reg.path().to_path_buf(),
        };
        let file = two_part_file(out.path().join("blob.gguf"), &whole);
        let mut log = |_: &str| {};
        let err = Fetcher::new(&src, &mut log).ensure(&file).unwrap_err();
        assert!(format!("{err:#}").contains("blob-part2==1.0"), "{err:#}");
        assert_eq!(fs::read_dir(out.path())?.count(), 0);
        Ok(())
    }

    #[test]
    fn hash_file_matches_a_known_digest() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("abc");
        fs::write(&p, b"abc")?;
        let (size, sha) = hash_file(&p)?;
        assert_eq!(size, 3);
        // FIPS 180-2 test vector for "abc".
        assert_eq!(
            sha,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        Ok(())
    }
}
