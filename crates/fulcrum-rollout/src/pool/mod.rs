//! Several engines at once. Requests (whole groups) are shared out over every live engine,
//! `requests_per_engine` in flight on each, so a fast engine takes more of them. A request that
//! fails for a transient reason (unreachable, timed out, a 5xx, a malformed reply) goes back
//! to the queue for any engine to take; an engine with `max_failures` failures in a row is
//! dropped for the rest of the run with a warning, and the call fails (cleanly, naming every
//! engine's last error) only when no engine is left. A request the engine rejects (4xx) fails
//! the call at once: no other engine would take it. Every call is bounded by the HTTP timeout,
//! so nothing here waits forever.
//!
//! Interrupts: with a [`Cancel`] in [`PoolOptions`], every engine call (a generation, a weight
//! reload) runs on a thread of its own while the pool's worker waits for it in steps of
//! [`CANCEL_POLL`], asking the cancel each time; once it says stop, the wait is given up with
//! [`EngineError::Interrupted`] (the abandoned call ends on its own, at its reply or its HTTP
//! timeout, and its result is dropped). ureq's timeouts are fixed per request and a blocked
//! read cannot be woken, so abandoning the call is the only way to stop within a poll; cutting
//! requests short with a small timeout instead would turn every long generation into retries
//! that start over, and break the retry and failover rules above. The same waits also give up
//! when another worker has already failed the call, as nothing would use their result.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::cancel::{call_unless, interrupted, Cancel, Waited, CANCEL_POLL};
use crate::engines::EngineClient;
use crate::error::{EngineError, Result};
use crate::request::{EngineCompletion, GenerateRequest, WeightFiles};

/// How the pool uses its engines.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Requests in flight on each engine at once.
    pub requests_per_engine: usize,
    /// Failures in a row after which an engine is dropped.
    pub max_failures: u32,
    /// Pause after a failed request before that worker tries again.
    pub retry_pause: Duration,
    /// When to give up waiting ([`EngineError::Interrupted`]); `None`: every call runs to its
    /// reply or its timeout.
    pub cancel: Option<Cancel>,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            requests_per_engine: 4,
            max_failures: 3,
            retry_pause: Duration::from_millis(500),
            cancel: None,
        }
    }
}

impl PoolOptions {
    fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(Cancel::is_set)
    }
}

/// What the pool knows of one engine.
struct Slot {
    url: String,
    alive: bool,
    failures: u32,
    /// The weight version last pushed to this engine.
    version: Option<u64>,
    last_error: String,
}

/// The engines of a run.
pub struct EnginePool {
    clients: Vec<Arc<dyn EngineClient>>,
    slots: Vec<Slot>,
    opts: PoolOptions,
    warnings: Vec<String>,
}

/// What the workers of one [`EnginePool::generate`] share.
struct Shared {
    queue: VecDeque<usize>,
    in_flight: usize,
    results: Vec<Option<Vec<EngineCompletion>>>,
    attempts: Vec<u32>,
    fatal: Option<EngineError>,
}

impl EnginePool {
    pub fn new(clients: Vec<Box<dyn EngineClient>>, opts: PoolOptions) -> Result<Self> {
        if clients.is_empty() {
            return Err(EngineError::Config(
                "rollout.engine_urls is empty: give at least one engine URL".into(),
            ));
        }
        let clients: Vec<Arc<dyn EngineClient>> = clients.into_iter().map(Arc::from).collect();
        let slots = clients
            .iter()
            .map(|client| Slot {
                url: client.url().to_string(),
                alive: true,
                failures: 0,
                version: None,
                last_error: String::new(),
            })
            .collect();
        Ok(EnginePool {
            clients,
            slots,
            opts: PoolOptions {
                requests_per_engine: opts.requests_per_engine.max(1),
                max_failures: opts.max_failures.max(1),
                ..opts
            },
            warnings: Vec::new(),
        })
    }

    /// URLs of the engines still in use.
    pub fn live_urls(&self) -> Vec<String> {
        self.slots
            .iter()
            .filter(|s| s.alive)
            .map(|s| s.url.clone())
            .collect()
    }

    /// Warnings since the last call (engines dropped, requests retried), to show the user.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Asks every engine, all at once, whether it is up (a probe: each answer is awaited for
    /// at most [`crate::PROBE_TIMEOUT`]); one that is not is dropped with a warning naming it.
    pub fn check_health(&mut self) -> Result<()> {
        let answers: Vec<(usize, Result<()>)> = std::thread::scope(|scope| {
            let probes: Vec<_> = self
                .clients
                .iter()
                .enumerate()
                .filter(|(i, _)| self.slots[*i].alive)
                .map(|(i, client)| (i, scope.spawn(move || client.health())))
                .collect();
            probes
                .into_iter()
                .map(|(i, probe)| {
                    let answer = probe.join().unwrap_or_else(|_| {
                        Err(EngineError::Config("the health probe panicked".into()))
                    });
                    (i, answer)
                })
                .collect()
        });
        for (i, answer) in answers {
            if let Err(e) = answer {
                let s = &mut self.slots[i];
                s.alive = false;
                s.last_error = e.to_string();
                self.warnings
                    .push(format!("rollout engine {} is down, not used: {e}", s.url));
            }
        }
        self.require_one()
    }

    /// The model file the first live engine that says serves (the template of a GGUF push).
    pub fn model_path(&self) -> Option<String> {
        self.slots
            .iter()
            .zip(&self.clients)
            .filter(|(s, _)| s.alive)
            .find_map(|(_, c)| c.model_path().ok().flatten())
    }

    fn require_one(&self) -> Result<()> {
        if self.slots.iter().any(|s| s.alive) {
            return Ok(());
        }
        let why: Vec<String> = self
            .slots
            .iter()
            .map(|s| format!("{}: {}", s.url, s.last_error))
            .collect();
        Err(EngineError::NoEngineLeft(why.join("; ")))
    }

    /// Completes every request; results in request order. With a cancel that says stop, fails
    /// with [`EngineError::Interrupted`] within about [`CANCEL_POLL`].
    pub fn generate(&mut self, reqs: &[GenerateRequest]) -> Result<Vec<Vec<EngineCompletion>>> {
        self.require_one()?;
        if self.opts.cancelled() {
            return Err(interrupted("a rollout draw (not sent)"));
        }
        let max_attempts = self.opts.max_failures * self.slots.len() as u32 + 1;
        let shared = Mutex::new(Shared {
            queue: (0..reqs.len()).collect(),
            in_flight: 0,
            results: vec![None; reqs.len()],
            attempts: vec![0; reqs.len()],
            fatal: None,
        });
        let wake = Condvar::new();
        let clients = &self.clients;
        let slots = Mutex::new(&mut self.slots);
        let warnings = Mutex::new(Vec::new());
        let opts = &self.opts;
        std::thread::scope(|scope| {
            for (si, client) in clients.iter().enumerate() {
                for _ in 0..opts.requests_per_engine {
                    let (shared, wake, slots, warnings) = (&shared, &wake, &slots, &warnings);
                    scope.spawn(move || {
                        let w = Worker {
                            si,
                            client,
                            shared,
                            wake,
                            slots,
                            warnings,
                            opts,
                            max_attempts,
                        };
                        w.run(reqs)
                    });
                }
            }
        });
        self.warnings
            .extend(warnings.into_inner().unwrap_or_default());
        let shared = shared
            .into_inner()
            .map_err(|_| EngineError::Config("a rollout worker panicked".into()))?;
        if let Some(e) = shared.fatal {
            return Err(e);
        }
        shared
            .results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.ok_or_else(|| EngineError::Config(format!("request {i} was never completed")))
            })
            .collect()
    }

    /// Has every live engine load `files` as weight version `version`. An engine that fails
    /// for a transient reason is tried once more and then dropped (sampling from it would give
    /// stale rollouts); an engine that cannot load such files at all fails the push. With a
    /// cancel that says stop, fails with [`EngineError::Interrupted`] within about
    /// [`CANCEL_POLL`] (an engine may then hold either version: the next push sets it).
    pub fn push_weights(&mut self, files: &WeightFiles, version: u64) -> Result<()> {
        let what = format!("load weights v{version}");
        let files = files.clone();
        let loaded =
            self.on_every_engine(&what, Arc::new(move |c| c.load_weights(&files, version)))?;
        self.set_version(&loaded, version);
        Ok(())
    }

    /// Colocation (`rollout.colocate`): every live engine frees its accelerator memory for
    /// the trainer's update; one that cannot is dropped as [`EnginePool::push_weights`] does.
    pub fn release_memory(&mut self) -> Result<()> {
        self.on_every_engine("free its memory", Arc::new(|c| c.release_memory()))?;
        Ok(())
    }

    /// Colocation: [`EnginePool::push_weights`] into engines whose memory was released (each
    /// takes its memory back around the load).
    pub fn push_weights_released(&mut self, files: &WeightFiles, version: u64) -> Result<()> {
        let what = format!("take its memory back and load weights v{version}");
        let files = files.clone();
        let load = move |c: &dyn EngineClient| c.load_weights_released(&files, version);
        let loaded = self.on_every_engine(&what, Arc::new(load))?;
        self.set_version(&loaded, version);
        Ok(())
    }

    fn set_version(&mut self, engines: &[usize], version: u64) {
        for &i in engines {
            self.slots[i].version = Some(version);
        }
    }

    /// Runs `call` on every live engine at once (a transient failure is tried once more),
    /// drops the engines that still fail transiently (with a warning saying they did not
    /// `what`), and returns the engines that succeeded; any other failure is the error.
    fn on_every_engine(&mut self, what: &str, call: EngineCall) -> Result<Vec<usize>> {
        self.require_one()?;
        if self.opts.cancelled() {
            return Err(interrupted(format!(
                "the engines asked to {what} (not sent)"
            )));
        }
        let pause = self.opts.retry_pause;
        let cancel = self.opts.cancel.as_ref();
        let mut results: Vec<(usize, Result<()>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .clients
                .iter()
                .enumerate()
                .filter(|(i, _)| self.slots[*i].alive)
                .map(|(i, client)| {
                    let client = Arc::clone(client);
                    let call = Arc::clone(&call);
                    scope.spawn(move || {
                        let url = client.url().to_string();
                        let once = move || match call(client.as_ref()) {
                            Err(e) if e.is_transient() => {
                                std::thread::sleep(pause);
                                call(client.as_ref())
                            }
                            other => other,
                        };
                        let out = match call_unless(cancel, || false, once) {
                            Waited::Done(r) => r,
                            Waited::Cancelled | Waited::Moot => {
                                Err(interrupted(format!("{url} asked to {what}")))
                            }
                        };
                        (i, out)
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        if let Some(k) = results
            .iter()
            .position(|(_, r)| matches!(r, Err(EngineError::Interrupted { .. })))
        {
            return Err(results
                .swap_remove(k)
                .1
                .err()
                .unwrap_or_else(|| interrupted(what)));
        }
        let mut done = Vec::new();
        for (i, r) in results {
            let s = &mut self.slots[i];
            match r {
                Ok(()) => {
                    s.failures = 0;
                    done.push(i);
                }
                Err(e) if e.is_transient() => {
                    s.alive = false;
                    s.last_error = e.to_string();
                    self.warnings.push(format!(
                        "rollout engine {} dropped: it did not {what}: {e}",
                        s.url
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        self.require_one()?;
        Ok(done)
    }
}

/// A call made on every engine at once.
type EngineCall = Arc<dyn Fn(&dyn EngineClient) -> Result<()> + Send + Sync>;

/// One worker of engine `si`: takes requests off the queue until the queue is done, the
/// engine is dropped, or the call has failed.
struct Worker<'a> {
    si: usize,
    client: &'a Arc<dyn EngineClient>,
    shared: &'a Mutex<Shared>,
    wake: &'a Condvar,
    slots: &'a Mutex<&'a mut Vec<Slot>>,
    warnings: &'a Mutex<Vec<String>>,
    opts: &'a PoolOptions,
    max_attempts: u32,
}

impl Worker<'_> {
    fn run(&self, reqs: &[GenerateRequest]) {
        while let Some(i) = self.next_request() {
            let version = match self.slots.lock() {
                Ok(s) => s[self.si].version,
                Err(_) => return,
            };
            let client = Arc::clone(self.client);
            let req = reqs[i].clone();
            let failed = || self.shared.lock().map_or(true, |st| st.fatal.is_some());
            let result = match call_unless(self.opts.cancel.as_ref(), failed, move || {
                client.generate(&req)
            }) {
                Waited::Done(r) => r,
                // Stopped, or the call has failed elsewhere (this result would not be used).
                Waited::Cancelled | Waited::Moot => {
                    if let Ok(mut st) = self.shared.lock() {
                        st.in_flight -= 1;
                        self.interrupt_if_cancelled(&mut st);
                    }
                    self.wake.notify_all();
                    return;
                }
            };
            let Ok(mut st) = self.shared.lock() else {
                return;
            };
            st.in_flight -= 1;
            match result {
                Ok(mut done) => {
                    for c in &mut done {
                        c.weight_version = c.weight_version.or(version);
                    }
                    st.results[i] = Some(done);
                    if let Ok(mut s) = self.slots.lock() {
                        s[self.si].failures = 0;
                    }
                    self.wake.notify_all();
                }
                Err(e) if e.is_transient() => {
                    st.attempts[i] += 1;
                    if st.attempts[i] >= self.max_attempts {
                        st.fatal = Some(e);
                        self.wake.notify_all();
                        return;
                    }
                    st.queue.push_front(i);
                    let dropped = self.strike(&e, &mut st);
                    self.wake.notify_all();
                    drop(st);
                    if dropped {
                        return;
                    }
                    std::thread::sleep(self.opts.retry_pause);
                }
                Err(e) => {
                    st.fatal = Some(e);
                    self.wake.notify_all();
                    return;
                }
            }
        }
    }

    /// Counts a failure against this engine; drops it after `max_failures` in a row (and fails
    /// the call when none is left). Returns whether it was dropped.
    fn strike(&self, e: &EngineError, st: &mut Shared) -> bool {
        let Ok(mut s) = self.slots.lock() else {
            return true;
        };
        let slot = &mut s[self.si];
        slot.failures += 1;
        slot.last_error = e.to_string();
        let dropped = slot.alive && slot.failures >= self.opts.max_failures;
        if dropped {
            slot.alive = false;
            if let Ok(mut w) = self.warnings.lock() {
                w.push(format!(
                    "rollout engine {} dropped after {} failures in a row: {e}",
                    slot.url, slot.failures
                ));
            }
        }
        if !s.iter().any(|x| x.alive) {
            let why: Vec<String> = s
                .iter()
                .map(|x| format!("{}: {}", x.url, x.last_error))
                .collect();
            st.fatal = Some(EngineError::NoEngineLeft(why.join("; ")));
        }
        dropped || !s[self.si].alive
    }

    /// Fails the call with [`EngineError::Interrupted`] (naming the engines and the requests
    /// left) when the cancel says stop and nothing has failed it yet; returns whether it did.
    fn interrupt_if_cancelled(&self, st: &mut Shared) -> bool {
        if st.fatal.is_some() || !self.opts.cancelled() {
            return false;
        }
        let urls: Vec<String> = self
            .slots
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|x| x.alive)
                    .map(|x| x.url.clone())
                    .collect()
            })
            .unwrap_or_default();
        st.fatal = Some(interrupted(format!(
            "the rollout engines {} ({} of {} requests not done)",
            urls.join(", "),
            st.results.iter().filter(|r| r.is_none()).count(),
            st.results.len()
        )));
        true
    }

    /// The next request, waiting while others are in flight (a failed one comes back to the
    /// queue); `None` when the work is done, the call failed or the engine is dropped.
    fn next_request(&self) -> Option<usize> {
        let mut st = self.shared.lock().ok()?;
        loop {
            let alive = self.slots.lock().ok().is_some_and(|s| s[self.si].alive);
            if self.interrupt_if_cancelled(&mut st) {
                self.wake.notify_all();
            }
            if st.fatal.is_some() || !alive {
                return None;
            }
            if let Some(i) = st.queue.pop_front() {
                st.in_flight += 1;
                return Some(i);
            }
            if st.in_flight == 0 {
                return None;
            }
            // Woken by any change; the timeout only keeps the cancel asked.
            st = self.wake.wait_timeout(st, CANCEL_POLL).ok()?.0;
        }
    }
}

#[cfg(test)]
mod tests;
