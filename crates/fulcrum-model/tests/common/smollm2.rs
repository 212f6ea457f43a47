//! Where the SmolLM2-135M-Instruct GGUF of the model tests is, for the suites that use it
//! (included by path).

use std::path::PathBuf;

/// `FULCRUM_SMOLLM2_GGUF`, else `assets/SmolLM2-135M-Instruct.Q4_1.gguf`; `None` (said on
/// stderr) when it is not there.
pub fn gguf_path() -> Option<PathBuf> {
    let path = std::env::var_os("FULCRUM_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../assets/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "SKIPPED: SmolLM2 GGUF not found at {} (run `fulcrum fetch-assets --only smollm2` or set FULCRUM_SMOLLM2_GGUF)",
            path.display()
        );
        None
    }
}
