//! Waiting on an engine call that a signal may cut short: the call runs on a thread of its
//! own while the caller waits in steps of [`CANCEL_POLL`], asking its [`Cancel`] each time;
//! once it says stop, the wait is given up and the abandoned call ends on its own (at its reply
//! or its HTTP timeout), its result dropped. ureq's timeouts are fixed per request and a blocked
//! read cannot be woken, so abandoning the call is the only way to stop within a poll.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{EngineError, Result};

/// How often a wait on an engine asks its [`Cancel`] whether to give up.
pub const CANCEL_POLL: Duration = Duration::from_millis(100);

/// Says when to stop waiting on the engines (the trainer's SIGINT/SIGTERM flag): asked every
/// [`CANCEL_POLL`] while a call is in flight, and before each new one.
#[derive(Clone)]
pub struct Cancel(Arc<dyn Fn() -> bool + Send + Sync>);

impl Cancel {
    /// Stop once `asked()` returns true.
    pub fn new(asked: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Cancel(Arc::new(asked))
    }

    /// Stop once `flag` is set.
    pub fn flag(flag: Arc<AtomicBool>) -> Self {
        Cancel::new(move || flag.load(Ordering::SeqCst))
    }

    pub fn is_set(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cancel(set: {})", self.is_set())
    }
}

pub(crate) fn interrupted(waiting_on: impl Into<String>) -> EngineError {
    EngineError::Interrupted {
        waiting_on: waiting_on.into(),
    }
}

/// How a call waited on by [`call_unless`] ended.
pub(crate) enum Waited<T> {
    Done(T),
    /// `cancel` said stop.
    Cancelled,
    /// `moot` said the result is no longer wanted.
    Moot,
}

/// Runs `call`; with a `cancel`, on a thread of its own, waited for in steps of [`CANCEL_POLL`]
/// and abandoned (left to end by itself) once `cancel` says stop or `moot()` says its result is
/// not wanted any more. Without a `cancel`, `call` runs on this thread, to its end.
pub(crate) fn call_unless<T: Send + 'static>(
    cancel: Option<&Cancel>,
    moot: impl Fn() -> bool,
    call: impl FnOnce() -> Result<T> + Send + 'static,
) -> Waited<Result<T>> {
    let Some(cancel) = cancel else {
        return Waited::Done(call());
    };
    if cancel.is_set() {
        return Waited::Cancelled;
    }
    let (tx, rx) = sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("fulcrum-engine-call".into())
        .spawn(move || {
            // The receiver is gone when the wait was given up: nothing to tell.
            let _ = tx.send(call());
        });
    if let Err(e) = spawned {
        return Waited::Done(Err(EngineError::Config(format!(
            "starting a thread for an engine call: {e}"
        ))));
    }
    loop {
        match rx.recv_timeout(CANCEL_POLL) {
            Ok(result) => return Waited::Done(result),
            Err(RecvTimeoutError::Timeout) if cancel.is_set() => return Waited::Cancelled,
            Err(RecvTimeoutError::Timeout) if moot() => return Waited::Moot,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Waited::Done(Err(EngineError::Config("an engine call panicked".into())))
            }
        }
    }
}
