//! Stopping a run cleanly on Ctrl-C or SIGTERM (a cluster scheduler's pre-emption).
//!
//! [`install_signal_handlers`] makes the first SIGINT or SIGTERM set a flag; the trainer looks at
//! it between steps, writes a checkpoint of the step it has finished and returns
//! [`crate::TrainError::Interrupted`] naming how to resume (a run resumed from that checkpoint
//! ends as the uninterrupted run would). Waits that can last minutes look at it too: a wait on
//! rollout engines (a generation, a weight push, a background draw; `engine.rs` hands the flag
//! to the engine pool, which asks it every 100 ms) gives the step up within a fraction of a
//! second, the evaluation stops between its batches of prompts, and the SFT warm-up between its
//! steps; each ends in the same error, saying what a resume continues from (the latest
//! checkpoint). A second signal exits at once with status 130: every
//! file a run writes is either appended line by line or renamed into place, so an exit at any
//! moment leaves at most a torn last line (cut on resume) or a `.tmp-*` directory (ignored).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::TrainError;

/// Set by the first signal; read between steps and by every long wait (see the module doc).
static STOP: AtomicBool = AtomicBool::new(false);

/// The exit status of a run stopped by a signal (128 + SIGINT, as shells report Ctrl-C).
pub const INTERRUPTED_EXIT: u8 = 130;

/// Installs the SIGINT and SIGTERM handlers (the CLI does, once, before training).
pub fn install_signal_handlers() -> Result<(), TrainError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for sig in [SIGINT, SIGTERM] {
        // The exit goes first: with the flag already set (a second signal) it ends the process
        // before the flag is set again.
        signal_hook::flag::register_conditional_shutdown(sig, i32::from(INTERRUPTED_EXIT), &STOP)
            .and_then(|_| signal_hook::flag::register(sig, &STOP))
            .map_err(|source| TrainError::Signals {
                signal: sig,
                source,
            })?;
    }
    Ok(())
}

/// Whether a stop was asked for (by a signal or [`request_stop`]).
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Asks the running trainer to stop, as a signal does: after its current step, or sooner where
/// it is waiting on rollout engines or evaluating (for programs that embed the trainer and have
/// their own way of being told to stop).
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}
