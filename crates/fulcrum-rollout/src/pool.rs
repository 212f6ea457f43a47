//! Several engines at once. Requests (whole groups) are shared out over every live engine,
//! `requests_per_engine` in flight on each, so a fast engine takes more of them. A request that
//! fails for a transient reason (unreachable, timed out, a 5xx, a malformed reply) goes back
//! to the queue for any engine to take; an engine with `max_failures` failures in a row is
//! dropped for the rest of the run with a warning, and the call fails (cleanly, naming every
//! engine's last error) only when no engine is left. A request the engine rejects (4xx) fails
//! the call at once: no other engine would take it. Every call is bounded by the HTTP timeout,
//! so nothing here waits forever.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::engines::EngineClient;
use crate::error::{EngineError, Result};
use crate::request::{EngineCompletion, GenerateRequest, WeightFiles};

/// How the pool uses its engines.
#[derive(Debug, Clone, Copy)]
pub struct PoolOptions {
    /// Requests in flight on each engine at once.
    pub requests_per_engine: usize,
    /// Failures in a row after which an engine is dropped.
    pub max_failures: u32,
    /// Pause after a failed request before that worker tries again.
    pub retry_pause: Duration,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            requests_per_engine: 4,
            max_failures: 3,
            retry_pause: Duration::from_millis(500),
        }
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
    clients: Vec<Box<dyn EngineClient>>,
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

    /// Asks every engine whether it is up; one that is not is dropped with a warning.
    pub fn check_health(&mut self) -> Result<()> {
        for (s, client) in self.slots.iter_mut().zip(&self.clients) {
            if !s.alive {
                continue;
            }
            if let Err(e) = client.health() {
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

    /// Completes every request; results in request order.
    pub fn generate(&mut self, reqs: &[GenerateRequest]) -> Result<Vec<Vec<EngineCompletion>>> {
        self.require_one()?;
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
        let opts = self.opts;
        std::thread::scope(|scope| {
            for (si, client) in clients.iter().enumerate() {
                for _ in 0..opts.requests_per_engine {
                    let (shared, wake, slots, warnings) = (&shared, &wake, &slots, &warnings);
                    let client = &**client;
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
    /// stale rollouts); an engine that cannot load such files at all fails the push.
    pub fn push_weights(&mut self, files: &WeightFiles, version: u64) -> Result<()> {
        self.require_one()?;
        let pause = self.opts.retry_pause;
        let results: Vec<(usize, Result<()>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .clients
                .iter()
                .enumerate()
                .filter(|(i, _)| self.slots[*i].alive)
                .map(|(i, client)| {
                    scope.spawn(move || {
                        let first = client.load_weights(files, version);
                        let out = match first {
                            Err(e) if e.is_transient() => {
                                std::thread::sleep(pause);
                                client.load_weights(files, version)
                            }
                            other => other,
                        };
                        (i, out)
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        for (i, r) in results {
            let s = &mut self.slots[i];
            match r {
                Ok(()) => {
                    s.version = Some(version);
                    s.failures = 0;
                }
                Err(e) if e.is_transient() => {
                    s.alive = false;
                    s.last_error = e.to_string();
                    self.warnings.push(format!(
                        "rollout engine {} dropped: it did not load weights v{version}: {e}",
                        s.url
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        self.require_one()
    }
}

/// One worker of engine `si`: takes requests off the queue until the queue is done, the
/// engine is dropped, or the call has failed.
struct Worker<'a> {
    si: usize,
    client: &'a dyn EngineClient,
    shared: &'a Mutex<Shared>,
    wake: &'a Condvar,
    slots: &'a Mutex<&'a mut Vec<Slot>>,
    warnings: &'a Mutex<Vec<String>>,
    opts: PoolOptions,
    max_attempts: u32,
}

impl Worker<'_> {
    fn run(&self, reqs: &[GenerateRequest]) {
        while let Some(i) = self.next_request() {
            let version = match self.slots.lock() {
                Ok(s) => s[self.si].version,
                Err(_) => return,
            };
            let result = self.client.generate(&reqs[i]);
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

    /// The next request, waiting while others are in flight (a failed one comes back to the
    /// queue); `None` when the work is done, the call failed or the engine is dropped.
    fn next_request(&self) -> Option<usize> {
        let mut st = self.shared.lock().ok()?;
        loop {
            let alive = self.slots.lock().ok().is_some_and(|s| s[self.si].alive);
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
            st = self.wake.wait(st).ok()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{FinishReason, SamplingParams};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An engine that answers each request with its prompt's first id, or fails as told.
    struct Fake {
        url: String,
        http: crate::http::Http,
        /// Fail the first this many calls (transiently), then work.
        fail_first: usize,
        /// Fail every call, with a rejection instead of a transient error.
        reject: bool,
        calls: AtomicUsize,
    }

    fn fake(url: &str, fail_first: usize) -> Box<dyn EngineClient> {
        Box::new(Fake {
            url: url.into(),
            http: crate::http::Http::new(url, Duration::from_secs(1)),
            fail_first,
            reject: false,
            calls: AtomicUsize::new(0),
        })
    }

    impl EngineClient for Fake {
        fn http(&self) -> &crate::http::Http {
            &self.http
        }
        fn generate(&self, req: &GenerateRequest) -> Result<Vec<EngineCompletion>> {
            let k = self.calls.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(5));
            if self.reject {
                return Err(EngineError::Rejected {
                    url: self.url.clone(),
                    status: 400,
                    message: "prompt too long".into(),
                });
            }
            if k < self.fail_first {
                return Err(EngineError::Unreachable {
                    url: self.url.clone(),
                    cause: "connection refused".into(),
                });
            }
            Ok((0..req.n)
                .map(|_| EngineCompletion {
                    tokens: vec![req.prompt_ids[0]],
                    logprobs: vec![-1.0],
                    finish: FinishReason::Stop,
                    weight_version: None,
                    engine: self.url.clone(),
                })
                .collect())
        }
        fn load_weights(&self, _: &WeightFiles, _: u64) -> Result<()> {
            if self.fail_first == usize::MAX {
                return Err(EngineError::Unreachable {
                    url: self.url.clone(),
                    cause: "down".into(),
                });
            }
            Ok(())
        }
        fn health(&self) -> Result<()> {
            Ok(())
        }
    }

    fn reqs(n: usize) -> Vec<GenerateRequest> {
        (0..n)
            .map(|i| GenerateRequest {
                prompt_ids: vec![i as i64],
                n: 2,
                max_tokens: 4,
                sampling: SamplingParams {
                    temperature: 1.0,
                    top_k: None,
                    top_p: None,
                },
                seed: 0,
                stop_token_ids: vec![],
            })
            .collect()
    }

    fn quick() -> PoolOptions {
        PoolOptions {
            requests_per_engine: 2,
            max_failures: 2,
            retry_pause: Duration::from_millis(1),
        }
    }

    #[test]
    fn results_come_back_in_request_order_from_every_engine() {
        let mut pool = EnginePool::new(vec![fake("a", 0), fake("b", 0)], quick()).unwrap();
        let out = pool.generate(&reqs(9)).unwrap();
        for (i, group) in out.iter().enumerate() {
            assert_eq!(group.len(), 2);
            assert!(group.iter().all(|c| c.tokens == vec![i as i64]));
        }
        let served: std::collections::HashSet<&str> =
            out.iter().flatten().map(|c| c.engine.as_str()).collect();
        assert_eq!(served.len(), 2, "both engines took work");
    }

    #[test]
    fn a_dead_engine_is_dropped_and_the_other_does_the_work() {
        let mut pool =
            EnginePool::new(vec![fake("dead", usize::MAX), fake("ok", 0)], quick()).unwrap();
        let out = pool.generate(&reqs(6)).unwrap();
        assert!(out.iter().flatten().all(|c| c.engine == "ok"));
        assert_eq!(pool.live_urls(), vec!["ok".to_string()]);
        let w = pool.take_warnings();
        assert!(
            w.iter()
                .any(|m| m.contains("dead dropped after 2 failures")),
            "{w:?}"
        );
        // Pushing skips the dropped engine.
        let files = WeightFiles {
            format: crate::WeightFormat::Gguf,
            path: "/x".into(),
        };
        pool.push_weights(&files, 1).unwrap();
        let out = pool.generate(&reqs(2)).unwrap();
        assert!(out.iter().flatten().all(|c| c.weight_version == Some(1)));
    }

    #[test]
    fn a_transient_failure_is_retried() {
        let mut pool = EnginePool::new(vec![fake("flaky", 1)], quick()).unwrap();
        assert_eq!(pool.generate(&reqs(3)).unwrap().len(), 3);
        assert_eq!(pool.live_urls().len(), 1);
    }

    #[test]
    fn no_engine_left_fails_cleanly_naming_each() {
        let mut pool =
            EnginePool::new(vec![fake("a", usize::MAX), fake("b", usize::MAX)], quick()).unwrap();
        let e = pool.generate(&reqs(4)).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, EngineError::NoEngineLeft(_)), "{msg}");
        assert!(
            msg.contains("a: ") && msg.contains("b: ") && msg.contains("refused"),
            "{msg}"
        );
        // And stays failed without hanging.
        assert!(pool.generate(&reqs(1)).is_err());
    }

    #[test]
    fn a_rejected_request_fails_at_once() {
        let reject = Box::new(Fake {
            url: "r".into(),
            http: crate::http::Http::new("r", Duration::from_secs(1)),
            fail_first: 0,
            reject: true,
            calls: AtomicUsize::new(0),
        });
        let mut pool = EnginePool::new(vec![reject, fake("ok", usize::MAX)], quick()).unwrap();
        let e = pool.generate(&reqs(3)).unwrap_err();
        assert!(e.to_string().contains("prompt too long"), "{e}");
    }

    #[test]
    fn an_engine_that_does_not_take_weights_is_dropped() {
        let mut pool =
            EnginePool::new(vec![fake("down", usize::MAX), fake("ok", 0)], quick()).unwrap();
        let files = WeightFiles {
            format: crate::WeightFormat::Gguf,
            path: "/x".into(),
        };
        pool.push_weights(&files, 3).unwrap();
        assert_eq!(pool.live_urls(), vec!["ok".to_string()]);
    }
}
