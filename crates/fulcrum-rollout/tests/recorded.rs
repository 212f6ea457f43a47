//! The vLLM and SGLang clients against recorded requests and replies (tests/fixtures/, built
//! from each engine's released code: SOURCES.md says where each comes from), and the whole
//! client path (HTTP, status codes, weight reload calls) against a loopback server that plays
//! the recordings back.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fulcrum_rollout::engines::{sglang, vllm};
use fulcrum_rollout::{
    connect, EngineError, EngineKind, FinishReason, GenerateRequest, SamplingParams, WeightFiles,
    WeightFormat,
};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

fn req(n: usize) -> GenerateRequest {
    GenerateRequest {
        prompt_ids: vec![151644, 872, 198],
        n,
        max_tokens: 4,
        sampling: SamplingParams {
            temperature: 1.0,
            top_k: None,
            top_p: None,
        },
        seed: 1234,
        stop_token_ids: vec![151643, 151645],
        adapter: None,
    }
}

/// Fields of the engines' request types that the recordings do not show but fulcrum sends
/// (each is a field of vLLM's `CompletionRequest` / SGLang's `SamplingParams`).
const PENALTIES: [&str; 3] = [
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
];

#[test]
fn vllm_request_uses_only_the_documented_fields_with_their_types() {
    let recorded = fixture("vllm/completions_request.json");
    let ours = vllm::build_request(&req(2));
    let allowed: BTreeSet<String> = keys(&recorded)
        .into_iter()
        .chain(PENALTIES.iter().map(|s| s.to_string()))
        .collect();
    let extra: Vec<_> = keys(&ours).difference(&allowed).cloned().collect();
    assert!(extra.is_empty(), "fields vLLM does not document: {extra:?}");
    for k in keys(&ours).intersection(&keys(&recorded)) {
        let (a, b) = (&ours[k], &recorded[k]);
        let same = a.is_number() == b.is_number()
            && a.is_boolean() == b.is_boolean()
            && a.is_array() == b.is_array();
        assert!(same, "{k}: ours {a}, recorded {b}");
    }
    assert_eq!(ours["top_k"], -1, "off is -1 on every vLLM version");
    assert_eq!(ours["logprobs"], 0);
    assert_eq!(ours["return_token_ids"], true);
}

#[test]
fn vllm_reply_maps_tokens_logprobs_and_finish() {
    let reply = fixture("vllm/completions_response.json");
    let out = vllm::parse_response(&reply, &req(2), "http://vllm").unwrap();
    assert_eq!(
        out[0].tokens,
        vec![19, 13, 151645],
        "the stop token is kept"
    );
    assert_eq!(out[0].finish, FinishReason::Stop);
    assert_eq!(out[0].logprobs, vec![-0.0123, -0.4417, -0.0021]);
    assert_eq!(out[1].finish, FinishReason::Length);
    assert_eq!(out[1].tokens.len(), 4);
    // A reply for another n, or with a broken field, is malformed (and so retried elsewhere).
    assert!(vllm::parse_response(&reply, &req(3), "u")
        .unwrap_err()
        .is_transient());
    let mut broken = reply.clone();
    broken["choices"][0]["logprobs"]["token_logprobs"] = serde_json::json!([-0.1]);
    assert!(vllm::parse_response(&broken, &req(2), "u").is_err());
}

#[test]
fn sglang_request_uses_only_the_documented_fields() {
    let recorded = fixture("sglang/generate_request.json");
    let ours = sglang::build_request(&req(2));
    let top: Vec<_> = keys(&ours).difference(&keys(&recorded)).cloned().collect();
    assert!(
        top.is_empty(),
        "top-level fields SGLang does not document: {top:?}"
    );
    // SGLang answers 400 to an unknown sampling parameter: every one must be known.
    let allowed: BTreeSet<String> = keys(&recorded["sampling_params"])
        .into_iter()
        .chain(["n".to_string()])
        .chain(PENALTIES.iter().map(|s| s.to_string()))
        .collect();
    let extra: Vec<_> = keys(&ours["sampling_params"])
        .difference(&allowed)
        .cloned()
        .collect();
    assert!(
        extra.is_empty(),
        "sampling params SGLang would refuse: {extra:?}"
    );
    assert_eq!(
        ours["sampling_params"]["top_k"], -1,
        "SGLang refuses top_k = 0"
    );
    assert_eq!(ours["return_logprob"], true);
}

#[test]
fn sglang_reply_maps_tokens_logprobs_finish_and_version() {
    let reply = fixture("sglang/generate_response.json");
    // The recording is two prompts x n = 2, prompt-major: one request's reply is two of them.
    let first: Value = Value::Array(reply.as_array().unwrap()[..2].to_vec());
    let out = sglang::parse_response(&first, &req(2), "http://sglang").unwrap();
    assert_eq!(out[0].tokens, vec![19, 13, 151645]);
    assert_eq!(out[0].finish, FinishReason::Stop);
    assert_eq!(out[0].logprobs, vec![-0.0123, -0.4417, -0.0021]);
    assert_eq!(out[1].finish, FinishReason::Length);
    assert_eq!(
        out[0].weight_version, None,
        "\"default\" is no version number"
    );
    let mut pushed = first.clone();
    pushed[0]["meta_info"]["weight_version"] = "7".into();
    let out = sglang::parse_response(&pushed, &req(2), "u").unwrap();
    assert_eq!(out[0].weight_version, Some(7));
    assert!(
        sglang::parse_response(&reply, &req(2), "u").is_err(),
        "4 outputs for n = 2"
    );
}

#[test]
fn sglang_weight_update_body_matches_the_recording() {
    let recorded = fixture("sglang/update_weights_from_disk_request.json");
    let files = WeightFiles {
        format: WeightFormat::HfFolder,
        path: "/ckpt/weights-v3".into(),
    };
    let ours = sglang::weight_update_request(&files, 3);
    assert_eq!(keys(&ours), keys(&recorded));
    assert_eq!(ours["weight_version"], "3");
}

/// A loopback server answering each request with the next canned `(status, body)` and
/// recording `(method and path, body)` of what it was sent.
/// What a playback server was sent: `("POST /path", body)` per request.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

fn playback(replies: Vec<(u16, Value)>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for (status, body) in replies {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let mut len = 0;
            loop {
                let mut h = String::new();
                r.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut buf = vec![0; len];
            r.read_exact(&mut buf).unwrap();
            let sent = serde_json::from_slice(&buf).unwrap_or(Value::Null);
            let target = line
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ");
            log.lock().unwrap().push((target, sent));
            let text = body.to_string();
            let mut w = stream;
            write!(
                w,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            )
            .unwrap();
        }
    });
    (url, seen)
}

#[test]
fn vllm_client_end_to_end_on_playback() {
    let (url, seen) = playback(vec![
        (200, fixture("vllm/completions_response.json")),
        (400, fixture("vllm/error_response.json")),
    ]);
    let c = connect(EngineKind::Vllm, &url, Duration::from_secs(5)).unwrap();
    let out = c.generate(&req(2)).unwrap();
    assert_eq!(out[0].engine, url);
    let e = c.generate(&req(2)).unwrap_err();
    assert!(
        matches!(e, EngineError::Rejected { status: 400, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("maximum context length"), "{e}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].0, "POST /v1/completions");
    assert_eq!(seen[0].1["prompt"], serde_json::json!([151644, 872, 198]));
}

#[test]
fn vllm_weight_push_pauses_reloads_and_resumes() {
    let ok = serde_json::json!({"status": "ok"});
    let (url, seen) = playback(vec![(200, ok.clone()); 4]);
    let c = connect(EngineKind::Vllm, &url, Duration::from_secs(5)).unwrap();
    let files = WeightFiles {
        format: WeightFormat::HfFolder,
        path: "/ckpt/weights-v1".into(),
    };
    c.load_weights(&files, 1).unwrap();
    let seen = seen.lock().unwrap();
    let paths: Vec<&str> = seen.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "POST /pause?mode=wait",
            "POST /collective_rpc",
            "POST /reset_prefix_cache",
            "POST /resume"
        ]
    );
    assert_eq!(seen[1].1["method"], "reload_weights");
    assert_eq!(seen[1].1["kwargs"]["weights_path"], "/ckpt/weights-v1");
}

#[test]
fn sglang_client_and_a_failed_update_on_playback() {
    let (url, _) = playback(vec![
        (
            200,
            Value::Array(
                fixture("sglang/generate_response.json").as_array().unwrap()[..2].to_vec(),
            ),
        ),
        (
            400,
            fixture("sglang/update_weights_from_disk_error_response.json"),
        ),
    ]);
    let c = connect(EngineKind::Sglang, &url, Duration::from_secs(5)).unwrap();
    assert_eq!(c.generate(&req(2)).unwrap().len(), 2);
    let files = WeightFiles {
        format: WeightFormat::HfFolder,
        path: "/ckpt".into(),
    };
    let e = c.load_weights(&files, 2).unwrap_err();
    assert!(!e.is_transient(), "a refused update is not retried: {e}");
    assert!(e.to_string().contains("cache was not flushed"), "{e}");
}

fn hf_files(path: &str) -> WeightFiles {
    WeightFiles {
        format: WeightFormat::HfFolder,
        path: path.into(),
    }
}

#[test]
fn vllm_colocation_sleeps_then_wakes_weights_reloads_and_wakes_the_cache() {
    let (url, seen) = playback(vec![
        (200, fixture("vllm/sleep_response.json")),
        (200, fixture("vllm/wake_up_partial_response.json")),
        (200, serde_json::json!({"status": "ok"})),
        (200, fixture("vllm/wake_up_response.json")),
        // A server that stays asleep after the last wake-up is an error.
        (200, fixture("vllm/wake_up_partial_response.json")),
        (200, serde_json::json!({"status": "ok"})),
        (200, fixture("vllm/wake_up_partial_response.json")),
    ]);
    let c = connect(EngineKind::Vllm, &url, Duration::from_secs(5)).unwrap();
    c.release_memory().unwrap();
    c.load_weights_released(&hf_files("/ckpt/weights-v3"), 3)
        .unwrap();
    let e = c
        .load_weights_released(&hf_files("/ckpt/weights-v4"), 4)
        .unwrap_err();
    assert!(e.to_string().contains("still asleep"), "{e}");
    let seen = seen.lock().unwrap();
    let paths: Vec<&str> = seen.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths[..4],
        [
            "POST /sleep?level=2&mode=wait",
            "POST /wake_up?tags=weights",
            "POST /collective_rpc",
            "POST /wake_up?tags=kv_cache",
        ]
    );
    assert_eq!(seen[2].1["kwargs"]["weights_path"], "/ckpt/weights-v3");
}

#[test]
fn vllm_colocation_without_dev_mode_says_how_to_start_the_server() {
    let (url, _) = playback(vec![(404, serde_json::json!({"detail": "Not Found"}))]);
    let c = connect(EngineKind::Vllm, &url, Duration::from_secs(5)).unwrap();
    let e = c.release_memory().unwrap_err();
    assert!(matches!(e, EngineError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("--enable-sleep-mode"), "{e}");
}

#[test]
fn sglang_colocation_releases_then_resumes_weights_updates_and_resumes_the_cache() {
    let null = fixture("sglang/memory_occupation_response.json");
    let (url, seen) = playback(vec![
        (200, null.clone()),
        (200, null.clone()),
        (
            200,
            fixture("sglang/update_weights_from_disk_response.json"),
        ),
        (200, null),
        (400, fixture("sglang/memory_occupation_error_response.json")),
    ]);
    let c = connect(EngineKind::Sglang, &url, Duration::from_secs(5)).unwrap();
    c.release_memory().unwrap();
    c.load_weights_released(&hf_files("/ckpt/weights-v2"), 2)
        .unwrap();
    let e = c.release_memory().unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(e.to_string().contains("--enable-memory-saver"), "{e}");
    let seen = seen.lock().unwrap();
    let paths: Vec<&str> = seen.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths[..4],
        [
            "POST /release_memory_occupation",
            "POST /resume_memory_occupation",
            "POST /update_weights_from_disk",
            "POST /resume_memory_occupation",
        ]
    );
    assert_eq!(seen[0].1, serde_json::json!({}), "every part released");
    assert_eq!(
        seen[1].1,
        fixture("sglang/resume_memory_occupation_request.json")
    );
    assert_eq!(seen[2].1["weight_version"], "2");
    assert_eq!(seen[3].1["tags"], serde_json::json!(["kv_cache"]));
}

#[test]
fn llamacpp_has_no_colocation() {
    let c = connect(
        EngineKind::Llamacpp,
        "http://127.0.0.1:9",
        Duration::from_secs(1),
    )
    .unwrap();
    let e = c.release_memory().unwrap_err();
    assert!(e.to_string().contains("rollout.colocate"), "{e}");
}

fn adapter_files() -> WeightFiles {
    WeightFiles {
        format: WeightFormat::PeftAdapter,
        path: "/ckpt/adapter-v1".into(),
    }
}

#[test]
fn vllm_adapter_push_loads_in_place_and_requests_name_the_adapter() {
    let (url, seen) = playback(vec![(200, fixture("vllm/load_lora_adapter_response.json"))]);
    let c = connect(EngineKind::Vllm, &url, Duration::from_secs(5)).unwrap();
    c.load_weights(&adapter_files(), 1).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].0, "POST /v1/load_lora_adapter");
    assert_eq!(seen[0].1, fixture("vllm/load_lora_adapter_request.json"));
    let mut with = req(2);
    with.adapter = Some(fulcrum_rollout::ADAPTER_NAME.into());
    assert_eq!(vllm::build_request(&with)["model"], "fulcrum-policy");
    assert!(vllm::build_request(&req(2)).get("model").is_none());
}

#[test]
fn sglang_adapter_push_replaces_the_adapter_and_requests_name_it() {
    let ok = fixture("sglang/load_lora_adapter_response.json");
    let (url, seen) = playback(vec![(200, ok.clone()); 3]);
    let c = connect(EngineKind::Sglang, &url, Duration::from_secs(5)).unwrap();
    c.load_weights(&adapter_files(), 1).unwrap();
    c.load_weights(&adapter_files(), 2).unwrap();
    let seen = seen.lock().unwrap();
    let paths: Vec<&str> = seen.iter().map(|(p, _)| p.as_str()).collect();
    // The first push loads; a later one unloads the name first (SGLang refuses it twice).
    assert_eq!(
        paths,
        [
            "POST /load_lora_adapter",
            "POST /unload_lora_adapter",
            "POST /load_lora_adapter"
        ]
    );
    assert_eq!(seen[0].1, fixture("sglang/load_lora_adapter_request.json"));
    assert_eq!(seen[1].1["lora_name"], "fulcrum-policy");
    let mut with = req(2);
    with.adapter = Some(fulcrum_rollout::ADAPTER_NAME.into());
    assert_eq!(sglang::build_request(&with)["lora_path"], "fulcrum-policy");
}
