//! The pool on fake engines: sharing out, retries, dropping, interrupts.

use super::*;
use crate::request::{FinishReason, SamplingParams};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

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
            adapter: None,
        })
        .collect()
}

fn quick() -> PoolOptions {
    PoolOptions {
        requests_per_engine: 2,
        max_failures: 2,
        retry_pause: Duration::from_millis(1),
        cancel: None,
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
    let mut pool = EnginePool::new(vec![fake("dead", usize::MAX), fake("ok", 0)], quick()).unwrap();
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

/// An engine that never answers a generation or a push (each call sleeps a minute).
struct Hang {
    http: crate::http::Http,
}

impl EngineClient for Hang {
    fn http(&self) -> &crate::http::Http {
        &self.http
    }
    fn generate(&self, _: &GenerateRequest) -> Result<Vec<EngineCompletion>> {
        std::thread::sleep(Duration::from_secs(60));
        Err(EngineError::Config("hung".into()))
    }
    fn load_weights(&self, _: &WeightFiles, _: u64) -> Result<()> {
        std::thread::sleep(Duration::from_secs(60));
        Err(EngineError::Config("hung".into()))
    }
}

fn hang(url: &str) -> Box<dyn EngineClient> {
    Box::new(Hang {
        http: crate::http::Http::new(url, Duration::from_secs(600)),
    })
}

/// Options whose cancel is `flag`.
fn cancellable(flag: &Arc<AtomicBool>) -> PoolOptions {
    PoolOptions {
        cancel: Some(Cancel::flag(Arc::clone(flag))),
        ..quick()
    }
}

/// Sets `flag` after `after`; returns when it was set.
fn set_later(flag: &Arc<AtomicBool>, after: Duration) -> std::sync::mpsc::Receiver<Instant> {
    let (tx, rx) = std::sync::mpsc::channel();
    let flag = Arc::clone(flag);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        flag.store(true, Ordering::SeqCst);
        let _ = tx.send(Instant::now());
    });
    rx
}

#[test]
fn a_hung_generation_is_given_up_soon_after_the_cancel() {
    let flag = Arc::new(AtomicBool::new(false));
    let mut pool = EnginePool::new(vec![hang("h1"), hang("h2")], cancellable(&flag)).unwrap();
    let set = set_later(&flag, Duration::from_millis(300));
    let e = pool.generate(&reqs(5)).unwrap_err();
    let waited = set.recv().unwrap().elapsed();
    assert!(matches!(e, EngineError::Interrupted { .. }), "{e}");
    assert!(!e.is_transient());
    assert!(
        waited < CANCEL_POLL * 5,
        "gave up {waited:?} after the cancel"
    );
    // The engines are not blamed for it, and a call once stopped does not start.
    assert_eq!(pool.live_urls().len(), 2);
    let t0 = Instant::now();
    assert!(matches!(
        pool.generate(&reqs(1)),
        Err(EngineError::Interrupted { .. })
    ));
    assert!(t0.elapsed() < CANCEL_POLL);
}

#[test]
fn a_hung_weight_push_is_given_up_soon_after_the_cancel() {
    let flag = Arc::new(AtomicBool::new(false));
    let mut pool = EnginePool::new(vec![hang("h"), fake("ok", 0)], cancellable(&flag)).unwrap();
    let files = WeightFiles {
        format: crate::WeightFormat::Gguf,
        path: "/x".into(),
    };
    let set = set_later(&flag, Duration::from_millis(300));
    let e = pool.push_weights(&files, 2).unwrap_err();
    let waited = set.recv().unwrap().elapsed();
    assert!(matches!(e, EngineError::Interrupted { .. }), "{e}");
    assert!(e.to_string().contains("h asked to load weights v2"), "{e}");
    assert!(
        waited < CANCEL_POLL * 5,
        "gave up {waited:?} after the cancel"
    );
    assert_eq!(pool.live_urls().len(), 2);
}

#[test]
fn with_a_cancel_that_stays_unset_every_result_is_the_same() {
    let flag = Arc::new(AtomicBool::new(false));
    let mut pool = EnginePool::new(
        vec![fake("dead", usize::MAX), fake("ok", 0)],
        cancellable(&flag),
    )
    .unwrap();
    let out = pool.generate(&reqs(6)).unwrap();
    assert!(out.iter().flatten().all(|c| c.engine == "ok"));
    assert_eq!(pool.live_urls(), vec!["ok".to_string()]);
}

#[test]
fn a_rejection_does_not_wait_for_a_hung_engine_when_calls_can_be_abandoned() {
    let reject = Box::new(Fake {
        url: "r".into(),
        http: crate::http::Http::new("r", Duration::from_secs(1)),
        fail_first: 0,
        reject: true,
        calls: AtomicUsize::new(0),
    });
    let flag = Arc::new(AtomicBool::new(false));
    let mut pool = EnginePool::new(vec![hang("h"), reject], cancellable(&flag)).unwrap();
    let t0 = Instant::now();
    let e = pool.generate(&reqs(4)).unwrap_err();
    assert!(e.to_string().contains("prompt too long"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

#[test]
fn an_engine_that_does_not_take_weights_is_dropped() {
    let mut pool = EnginePool::new(vec![fake("down", usize::MAX), fake("ok", 0)], quick()).unwrap();
    let files = WeightFiles {
        format: crate::WeightFormat::Gguf,
        path: "/x".into(),
    };
    pool.push_weights(&files, 3).unwrap();
    assert_eq!(pool.live_urls(), vec!["ok".to_string()]);
}
