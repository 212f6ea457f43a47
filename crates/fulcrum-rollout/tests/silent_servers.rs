//! Servers that accept a connection and never answer, on loopback: the probe gives up within
//! `PROBE_TIMEOUT` (not the request timeout) and names the server; a generation or a weight push
//! to such a server is given up within a poll of the pool's cancel being set.

#[path = "common/http_request.rs"]
mod http_request;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fulcrum_rollout::{
    connect, Cancel, EngineError, EngineKind, EnginePool, GenerateRequest, PoolOptions,
    SamplingParams, WeightFiles, WeightFormat, CANCEL_POLL, PROBE_TIMEOUT,
};
use http_request::read_request;

/// The generation timeout of these tests: the default of `rollout.engine_timeout_s`, so that a
/// wait that is not cut short fails the test by its duration.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// A listener that never accepts: the kernel completes the handshake and the request sits
/// unread. Kept alive by the caller.
fn silent() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    (l, url)
}

/// A server that answers the routes `answer` gives a JSON body for, and holds every other
/// request without a word until the client goes away.
fn serve(answer: fn(&str) -> Option<&'static str>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    std::thread::spawn(move || {
        for stream in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let Some(path) = read_request(&stream).map(|(path, _)| path) else {
                    return;
                };
                match answer(&path) {
                    Some(body) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    // Silent: wait for the client to close.
                    None => {
                        let _ = stream.read(&mut [0u8; 1]);
                    }
                }
            });
        }
    });
    url
}

/// llama.cpp's server answering its probes, silent on `/completion` and `/reload_model`.
fn llamacpp_probes_only(path: &str) -> Option<&'static str> {
    match path {
        "/health" => Some(r#"{"status":"ok"}"#),
        "/props" => Some(r#"{"total_slots":4,"model_path":"/m.gguf"}"#),
        _ => None,
    }
}

fn request() -> GenerateRequest {
    GenerateRequest {
        prompt_ids: vec![1, 2, 3],
        n: 4,
        max_tokens: 8,
        sampling: SamplingParams {
            temperature: 1.0,
            top_k: None,
            top_p: None,
        },
        seed: 1,
        stop_token_ids: vec![2],
        adapter: None,
    }
}

fn pool(urls: &[&str], cancel: Option<Cancel>) -> EnginePool {
    let clients = urls
        .iter()
        .map(|u| connect(EngineKind::Llamacpp, u, REQUEST_TIMEOUT).unwrap())
        .collect();
    let opts = PoolOptions {
        cancel,
        ..PoolOptions::default()
    };
    EnginePool::new(clients, opts).unwrap()
}

/// Sets `flag` after `after` on another thread; the receiver gets the moment it was set.
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
fn the_probe_drops_a_silent_server_within_its_own_timeout_and_names_it() {
    let (_hold, url) = silent();
    let mut p = pool(&[&url], None);
    let t0 = Instant::now();
    let e = p.check_health().unwrap_err();
    let took = t0.elapsed();
    assert!(took < PROBE_TIMEOUT + Duration::from_secs(2), "{took:?}");
    assert!(matches!(e, EngineError::NoEngineLeft(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&url) && msg.contains("no answer within 5 s"),
        "{msg}"
    );
    let w = p.take_warnings();
    assert!(
        w.len() == 1 && w[0].contains(&format!("rollout engine {url} is down")),
        "{w:?}"
    );
}

#[test]
fn silent_servers_are_probed_at_once_and_the_live_one_is_kept() {
    let (_a, silent_a) = silent();
    let (_b, silent_b) = silent();
    let live = serve(llamacpp_probes_only);
    let mut p = pool(&[&silent_a, &live, &silent_b], None);
    let t0 = Instant::now();
    p.check_health().unwrap();
    // All at once: two silent servers cost one probe timeout, not two.
    let took = t0.elapsed();
    assert!(took < PROBE_TIMEOUT + Duration::from_secs(2), "{took:?}");
    assert_eq!(p.live_urls(), vec![live]);
    let w = p.take_warnings().join("\n");
    assert!(w.contains(&silent_a) && w.contains(&silent_b), "{w}");
}

#[test]
fn reading_the_served_model_from_a_silent_server_ends_at_the_probe_timeout() {
    let (_hold, url) = silent();
    let p = pool(&[&url], None);
    let t0 = Instant::now();
    assert_eq!(p.model_path(), None);
    assert!(t0.elapsed() < PROBE_TIMEOUT + Duration::from_secs(2));
}

#[test]
fn a_generation_on_a_silent_server_is_given_up_soon_after_the_cancel() {
    let url = serve(llamacpp_probes_only);
    let flag = Arc::new(AtomicBool::new(false));
    let mut p = pool(&[&url], Some(Cancel::flag(Arc::clone(&flag))));
    p.check_health().unwrap();
    let set = set_later(&flag, Duration::from_millis(500));
    let e = p.generate(&[request(), request()]).unwrap_err();
    let after = set.recv().unwrap().elapsed();
    assert!(matches!(e, EngineError::Interrupted { .. }), "{e}");
    assert!(e.to_string().contains(&url), "{e}");
    assert!(
        after < Duration::from_secs(2),
        "given up {after:?} after the cancel"
    );
    eprintln!("generation given up {after:?} after the cancel (poll {CANCEL_POLL:?})");
}

#[test]
fn a_weight_push_to_a_silent_server_is_given_up_soon_after_the_cancel() {
    let url = serve(llamacpp_probes_only);
    let flag = Arc::new(AtomicBool::new(false));
    let mut p = pool(&[&url], Some(Cancel::flag(Arc::clone(&flag))));
    let files = WeightFiles {
        format: WeightFormat::Gguf,
        path: "/w.gguf".into(),
    };
    let set = set_later(&flag, Duration::from_millis(500));
    let e = p.push_weights(&files, 1).unwrap_err();
    let after = set.recv().unwrap().elapsed();
    assert!(matches!(e, EngineError::Interrupted { .. }), "{e}");
    assert!(
        after < Duration::from_secs(2),
        "given up {after:?} after the cancel"
    );
    assert_eq!(p.live_urls(), vec![url], "an interrupt drops no engine");
}
