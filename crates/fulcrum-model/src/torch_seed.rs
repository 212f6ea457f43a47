//! The lock around libtorch's one global random generator.
//!
//! fulcrum's own random streams (sampling, data order, prompts) come from
//! [`fulcrum_core::SplitMix64`], owned by the caller; libtorch's generator is used only to draw
//! initial weights (the tiny model, fresh LoRA factors), and it is global to the process.

/// Holds libtorch's global random generator for the caller: seeding it and drawing initial
/// weights must not interleave with another thread doing the same (`fulcrum compare --jobs`
/// trains several models in one process), or the same seed would give different weights.
pub(crate) fn torch_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
