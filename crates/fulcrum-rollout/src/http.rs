//! The blocking JSON-over-HTTP client every engine uses: one connection pool per engine, a
//! connect timeout and a total timeout on every call, replies read up to a size limit, and
//! errors sorted into [`EngineError`]'s transient and permanent kinds.
//!
//! Two limits: work (a generation, a weight reload) may take the engine's whole request
//! timeout (`rollout.engine_timeout_s`); a probe (`/health`, `/props`: "are you there, what do
//! you serve") gets [`PROBE_TIMEOUT`], so that a server that accepts connections and never
//! answers is found out in seconds, not minutes.

use std::time::Duration;

use serde_json::Value;
use ureq::Agent;

use crate::error::{EngineError, Result};

/// Largest reply read (G completions with per-token log-probabilities are a few MB).
const MAX_REPLY_BYTES: u64 = 512 << 20;

/// How long a probe (`/health`, `/props`) may take. A live engine answers these from its HTTP
/// thread in milliseconds, even while every slot is generating or a reload is under way (vLLM,
/// SGLang and llama.cpp's server all serve them outside the generation queue), so a few seconds
/// is ample on any network; a server that says nothing for that long is hung, and waiting the
/// generation timeout (600 s by default) for it would only stall the run.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A reply: its JSON and the `X-Weight-Version` header, if any.
#[derive(Debug)]
pub struct Reply {
    pub json: Value,
    pub weight_version: Option<u64>,
}

/// An HTTP client for one engine's base URL.
#[derive(Debug, Clone)]
pub struct Http {
    base: String,
    agent: Agent,
    timeout: Duration,
    /// The agent of probes, bounded by `probe_timeout`.
    probe: Agent,
    probe_timeout: Duration,
}

/// An agent whose calls end after `timeout`, connecting included.
fn agent(timeout: Duration) -> Agent {
    Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(timeout.min(Duration::from_secs(10))))
        .http_status_as_error(false)
        .build()
        .into()
}

impl Http {
    /// `base` like `http://127.0.0.1:8000` (a trailing `/` is dropped); `timeout` bounds a
    /// whole call, connecting included; probes ([`Http::probe`]) end after [`PROBE_TIMEOUT`]
    /// (or `timeout`, if shorter).
    pub fn new(base: &str, timeout: Duration) -> Self {
        let probe_timeout = PROBE_TIMEOUT.min(timeout);
        Http {
            base: base.trim_end_matches('/').to_string(),
            agent: agent(timeout),
            timeout,
            probe: agent(probe_timeout),
            probe_timeout,
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST base+path` with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> Result<Reply> {
        let (url, resp) = self.send_json(path, body)?;
        self.finish(&url, resp, self.timeout)
    }

    /// `POST base+path` with a JSON body, for a route that answers plain text on success
    /// (vLLM's `/v1/load_lora_adapter`): the reply's text.
    pub fn post_text(&self, path: &str, body: &Value) -> Result<String> {
        let (url, resp) = self.send_json(path, body)?;
        Ok(self.finish_text(&url, resp, self.timeout)?.0)
    }

    /// Sends `body` to `base+path`; returns the URL and what came back.
    fn send_json(&self, path: &str, body: &Value) -> Result<(String, Sent)> {
        let url = format!("{}{}", self.base, path);
        let bytes = serde_json::to_vec(body).map_err(|e| EngineError::Config(e.to_string()))?;
        let resp = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(&bytes[..]);
        Ok((url, resp))
    }

    /// `GET base+path`.
    pub fn get(&self, path: &str) -> Result<Reply> {
        let url = format!("{}{}", self.base, path);
        let resp = self.agent.get(&url).call();
        self.finish(&url, resp, self.timeout)
    }

    /// `GET base+path` as a probe: bounded by the probe timeout, not the request timeout.
    pub fn probe(&self, path: &str) -> Result<Reply> {
        let url = format!("{}{}", self.base, path);
        let resp = self.probe.get(&url).call();
        self.finish(&url, resp, self.probe_timeout)
    }

    fn finish(&self, url: &str, resp: Sent, limit: Duration) -> Result<Reply> {
        let (text, weight_version) = self.finish_text(url, resp, limit)?;
        let json = serde_json::from_str(&text).map_err(|e| EngineError::Malformed {
            url: url.to_string(),
            what: format!("not JSON ({e}): {}", clip(&text)),
        })?;
        Ok(Reply {
            json,
            weight_version,
        })
    }

    /// A reply's text and `X-Weight-Version`, or the error its status says.
    fn finish_text(&self, url: &str, resp: Sent, limit: Duration) -> Result<(String, Option<u64>)> {
        let mut resp = resp.map_err(|e| transport_error(url, e, limit))?;
        let status = resp.status().as_u16();
        let weight_version = resp
            .headers()
            .get("x-weight-version")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_REPLY_BYTES)
            .read_to_string()
            .map_err(|e| transport_error(url, e, limit))?;
        if !(200..300).contains(&status) {
            let message = error_message(&text);
            let url = url.to_string();
            return Err(
                if (400..500).contains(&status) && status != 408 && status != 429 {
                    EngineError::Rejected {
                        url,
                        status,
                        message,
                    }
                } else {
                    EngineError::Server {
                        url,
                        status,
                        message,
                    }
                },
            );
        }
        Ok((text, weight_version))
    }
}

/// What a request brought back, before its status is looked at.
type Sent = std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>;

/// A failure below HTTP: a timeout (after `limit`) or no connection.
fn transport_error(url: &str, e: ureq::Error, limit: Duration) -> EngineError {
    match e {
        ureq::Error::Timeout(_) => EngineError::Timeout {
            url: url.to_string(),
            secs: limit.as_secs_f64(),
        },
        other => EngineError::Unreachable {
            url: url.to_string(),
            cause: other.to_string(),
        },
    }
}

/// The message of an engine's error body: OpenAI-style `{"error": {"message"}}` (vLLM,
/// llama.cpp), `{"message"}` / `{"detail"}` (SGLang, FastAPI), else the text itself.
pub fn error_message(text: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let found = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("detail"))
            .or_else(|| v.get("error"))
            .map(|m| {
                m.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| m.to_string())
            })
    });
    found.unwrap_or_else(|| clip(text))
}

fn clip(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &t[..i]),
        None => t.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_of_each_engine_shape() {
        assert_eq!(
            error_message(r#"{"error":{"code":400,"message":"too long","type":"x"}}"#),
            "too long"
        );
        assert_eq!(error_message(r#"{"object":"error","message":"m"}"#), "m");
        assert_eq!(error_message(r#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(error_message("plain text"), "plain text");
    }

    #[test]
    fn a_closed_port_is_unreachable_and_transient() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let h = Http::new(&format!("http://127.0.0.1:{port}/"), Duration::from_secs(2));
        let e = h.get("/health").unwrap_err();
        assert!(matches!(e, EngineError::Unreachable { .. }), "{e}");
        assert!(e.is_transient());
    }

    #[test]
    fn a_server_that_never_answers_times_out() {
        // Accepts the connection and says nothing: the call must end at its timeout.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            std::thread::sleep(Duration::from_secs(3));
            drop(s);
        });
        let h = Http::new(
            &format!("http://127.0.0.1:{port}"),
            Duration::from_millis(500),
        );
        let t0 = std::time::Instant::now();
        let e = h.post("/completion", &serde_json::json!({})).unwrap_err();
        assert!(matches!(e, EngineError::Timeout { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2));
        hold.join().unwrap();
    }

    #[test]
    fn a_probe_gives_up_after_the_probe_timeout_not_the_request_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            std::thread::sleep(PROBE_TIMEOUT + Duration::from_secs(2));
            drop(s);
        });
        let url = format!("http://127.0.0.1:{port}");
        let h = Http::new(&url, Duration::from_secs(600));
        let t0 = std::time::Instant::now();
        let e = h.probe("/health").unwrap_err();
        let took = t0.elapsed();
        assert!(matches!(e, EngineError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains(&format!("{url}/health")), "{e}");
        assert!(
            took >= PROBE_TIMEOUT - Duration::from_millis(100)
                && took < PROBE_TIMEOUT + Duration::from_secs(1),
            "{took:?}"
        );
        hold.join().unwrap();
    }
}
