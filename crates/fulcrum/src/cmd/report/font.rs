//! The one font the charts use. plotters draws text through `ab_glyph` (pure Rust), which needs
//! the bytes of a TrueType/OpenType file; we read one at run time rather than link a system
//! font library. Debian's `fonts-dejavu-core` (installed by `.ci/run`) provides the default.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result};
use plotters::style::FontStyle;

/// Looked for in this order when `--font` is not given (Debian / Ubuntu package paths).
const CANDIDATES: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/opentype/noto/NotoSans-Regular.ttf",
];

/// The family name the charts ask for.
pub const FAMILY: &str = "sans-serif";

static REGISTERED: OnceLock<PathBuf> = OnceLock::new();

/// Registers the font under [`FAMILY`] (once per process) and returns its path.
pub fn register(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = REGISTERED.get() {
        return Ok(p.clone());
    }
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => CANDIDATES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .with_context(|| {
                format!(
                    "no font for the charts: none of {} exists\n\
                     install one with `apt-get install fonts-dejavu-core`, or pass --font FILE.ttf",
                    CANDIDATES.join(", ")
                )
            })?,
    };
    let bytes = std::fs::read(&path).with_context(|| format!("reading font {}", path.display()))?;
    // plotters keeps registered fonts for the life of the process, as `&'static [u8]`; this is
    // done once, so leaking the one buffer is the intended lifetime.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("{}: not a TrueType/OpenType font", path.display()))?;
    Ok(REGISTERED.get_or_init(|| path).clone())
}
