//! Reading one member out of a package archive: a wheel or zip (PyPI), or a gzipped tar (an
//! sdist on PyPI, every npm package).
//!
//! The tar reader is deliberately small: it understands the ustar header fields a package
//! tarball uses (name, prefix, size, type) and the GNU long-name record, and streams the member
//! it is asked for into a writer. It does not unpack anything to disk, so a hostile archive
//! cannot write outside the destination.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use flate2::read::GzDecoder;

/// Copies the member `member` of the archive at `archive` into `out`; returns its size in bytes.
/// The format is chosen by the file name: `.whl` / `.zip`, or `.tar.gz` / `.tgz`.
pub fn copy_member(archive: &Path, member: &str, out: &mut dyn Write) -> Result<u64> {
    let name = archive.to_string_lossy();
    if name.ends_with(".whl") || name.ends_with(".zip") {
        copy_zip_member(archive, member, out)
    } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        let file = File::open(archive).with_context(|| format!("{}: cannot open", name))?;
        copy_tar_member(GzDecoder::new(file), member, out)
            .with_context(|| format!("{name}: reading {member}"))
    } else {
        bail!("{name}: unknown archive type (expected .whl, .zip, .tar.gz or .tgz)")
    }
}

fn copy_zip_member(archive: &Path, member: &str, out: &mut dyn Write) -> Result<u64> {
    let shown = archive.display();
    let file = File::open(archive).with_context(|| format!("{shown}: cannot open"))?;
    let mut zip =
        zip::ZipArchive::new(file).with_context(|| format!("{shown}: not a zip archive"))?;
    let mut entry = zip
        .by_name(member)
        .with_context(|| format!("{shown}: no member {member}"))?;
    io::copy(&mut entry, out).with_context(|| format!("{shown}: reading {member}"))
}

const BLOCK: usize = 512;

/// Streams the member whose path is `member` (or ends in `/member`, to tolerate a leading
/// `./` or package folder the caller did not name) out of an uncompressed tar stream.
pub fn copy_tar_member(mut tar: impl Read, member: &str, out: &mut dyn Write) -> Result<u64> {
    let mut header = [0u8; BLOCK];
    let mut long_name: Option<String> = None;
    loop {
        if !read_block(&mut tar, &mut header)? || header.iter().all(|b| *b == 0) {
            bail!("no member {member}");
        }
        let size = octal(&header[124..136]).context("bad size field in a tar header")?;
        let kind = header[156];
        let padded = size.div_ceil(BLOCK as u64) * BLOCK as u64;
        if kind == b'L' {
            // GNU long name: the next header's name is this record's contents.
            let mut buf = vec![0u8; padded as usize];
            tar.read_exact(&mut buf)
                .context("truncated tar long-name record")?;
            buf.truncate(size as usize);
            long_name = Some(cstr(&buf));
            continue;
        }
        let path = match long_name.take() {
            Some(n) => n,
            None => {
                let name = cstr(&header[0..100]);
                let prefix = cstr(&header[345..500]);
                if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}/{name}")
                }
            }
        };
        let is_file = kind == b'0' || kind == 0;
        let matches = path == member || path.ends_with(&format!("/{member}"));
        if is_file && matches {
            let copied = io::copy(&mut (&mut tar).take(size), out)?;
            if copied != size {
                bail!("member {member} is truncated ({copied} of {size} bytes)");
            }
            return Ok(size);
        }
        io::copy(&mut (&mut tar).take(padded), &mut io::sink())?;
    }
}

/// Reads one 512-byte block; false at a clean end of stream.
fn read_block(r: &mut impl Read, buf: &mut [u8; BLOCK]) -> Result<bool> {
    let mut got = 0;
    while got < BLOCK {
        match r.read(&mut buf[got..])? {
            0 if got == 0 => return Ok(false),
            0 => bail!("truncated tar header"),
            n => got += n,
        }
    }
    Ok(true)
}

fn cstr(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn octal(field: &[u8]) -> Option<u64> {
    let text = cstr(field);
    let text = text.trim();
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use flate2::write::GzEncoder;

    /// A ustar archive of `(path, contents)` entries, as `tar` writes them.
    pub fn tar_bytes(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (path, data) in entries {
            let mut h = [0u8; BLOCK];
            h[..path.len()].copy_from_slice(path.as_bytes());
            h[100..108].copy_from_slice(b"0000644\0");
            let size = format!("{:011o}\0", data.len());
            h[124..136].copy_from_slice(size.as_bytes());
            h[156] = b'0';
            h[257..263].copy_from_slice(b"ustar\0");
            h[148..156].copy_from_slice(b"        ");
            let sum: u32 = h.iter().map(|b| *b as u32).sum();
            h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
            out.extend_from_slice(&h);
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        }
        out.resize(out.len() + 2 * BLOCK, 0);
        out
    }

    pub fn write_tgz(path: &Path, entries: &[(&str, &[u8])]) -> Result<()> {
        let mut gz = GzEncoder::new(File::create(path)?, flate2::Compression::fast());
        gz.write_all(&tar_bytes(entries))?;
        gz.finish()?;
        Ok(())
    }

    pub fn write_zip(path: &Path, entries: &[(&str, &[u8])]) -> Result<()> {
        let mut z = zip::ZipWriter::new(File::create(path)?);
        for (name, data) in entries {
            z.start_file(*name, zip::write::FileOptions::default())?;
            z.write_all(data)?;
        }
        z.finish()?;
        Ok(())
    }

    #[test]
    fn tar_member_is_found_among_others_and_by_suffix() -> Result<()> {
        let big = vec![7u8; 1500];
        let tar = tar_bytes(&[("package/a.txt", b"alpha"), ("package/models/t.json", &big)]);
        let mut out = Vec::new();
        assert_eq!(copy_tar_member(&tar[..], "models/t.json", &mut out)?, 1500);
        assert_eq!(out, big);
        let mut out = Vec::new();
        copy_tar_member(&tar[..], "package/a.txt", &mut out)?;
        assert_eq!(out, b"alpha");
        Ok(())
    }

    #[test]
    fn tar_missing_member_is_an_error_naming_it() {
        let tar = tar_bytes(&[("package/a.txt", b"alpha")]);
        let err = copy_tar_member(&tar[..], "b.txt", &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("no member b.txt"), "{err}");
    }

    #[test]
    fn truncated_tar_is_an_error() {
        let tar = tar_bytes(&[("package/a.txt", &[1u8; 2000])]);
        let err = copy_tar_member(&tar[..700], "a.txt", &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    #[test]
    fn zip_and_tgz_members_are_read_by_extension() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let whl = dir.path().join("p-1.0-py3-none-any.whl");
        write_zip(&whl, &[("p/data/x.bin", b"zipped")])?;
        let tgz = dir.path().join("p-1.0.tgz");
        write_tgz(&tgz, &[("package/x.bin", b"tarred")])?;
        let mut out = Vec::new();
        copy_member(&whl, "p/data/x.bin", &mut out)?;
        assert_eq!(out, b"zipped");
        let mut out = Vec::new();
        copy_member(&tgz, "x.bin", &mut out)?;
        assert_eq!(out, b"tarred");
        assert!(copy_member(&dir.path().join("p.rar"), "x", &mut Vec::new()).is_err());
        Ok(())
    }
}
