//! vLLM's OpenAI-compatible server: `POST /v1/completions` with a token-id prompt, `n = G`,
//! `logprobs = 0` (the sampled token's log-probability only) and `return_token_ids`.
//!
//! vLLM's sampling defaults are neutral, but everything is sent anyway. Its log-probabilities
//! are the raw model's unless the server runs with `--logprobs-mode processed_logprobs`; start
//! it so when sampling at a temperature other than 1 or with top-k/top-p, or `kl/engine` also
//! measures the difference between the two distributions. A stop token that ended a choice is
//! in its `token_ids` (`finish_reason = "stop"`).
//!
//! Weight push (disk): vLLM 0.34 has no disk weight-transfer backend, but a server started with
//! `VLLM_SERVER_DEV_MODE=1` reloads a folder of the same architecture's weights in place through
//! `collective_rpc("reload_weights")` ([`weight_update_calls`]).

use std::time::Duration;

use serde_json::{json, Value};

use super::{check_completion, expect_format, field, ids, EngineClient};
use crate::error::{EngineError, Result};
use crate::http::Http;
use crate::request::{EngineCompletion, FinishReason, GenerateRequest, WeightFiles, WeightFormat};

pub struct Vllm {
    http: Http,
}

impl Vllm {
    pub fn new(url: &str, timeout: Duration) -> Self {
        Vllm {
            http: Http::new(url, timeout),
        }
    }
}

/// The `/v1/completions` body for `req`.
pub fn build_request(req: &GenerateRequest) -> Value {
    let s = &req.sampling;
    json!({
        "prompt": req.prompt_ids,
        "n": req.n,
        "max_tokens": req.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p.unwrap_or(1.0),
        "top_k": s.top_k.unwrap_or(-1),
        "min_p": 0.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "repetition_penalty": 1.0,
        "seed": req.seed as i64 & i64::MAX,
        "logprobs": 0,
        "return_token_ids": true,
        "stop_token_ids": req.stop_token_ids,
        "ignore_eos": false,
        "skip_special_tokens": false,
        "include_stop_str_in_output": true,
        "stream": false,
    })
}

/// The completions of a `/v1/completions` reply, in `index` order.
pub fn parse_response(
    reply: &Value,
    req: &GenerateRequest,
    url: &str,
) -> Result<Vec<EngineCompletion>> {
    let choices =
        field(reply, url, "/choices")?
            .as_array()
            .ok_or_else(|| EngineError::Malformed {
                url: url.into(),
                what: "`choices` is not a list".into(),
            })?;
    if choices.len() != req.n {
        return Err(EngineError::Malformed {
            url: url.into(),
            what: format!("{} choices for n = {}", choices.len(), req.n),
        });
    }
    let mut out = Vec::with_capacity(choices.len());
    for (k, ch) in choices.iter().enumerate() {
        let index = ch.get("index").and_then(Value::as_u64).unwrap_or(k as u64);
        let tokens = ids(field(ch, url, "/token_ids")?, url, "token_ids")?;
        let lps = field(ch, url, "/logprobs/token_logprobs")?
            .as_array()
            .ok_or_else(|| EngineError::Malformed {
                url: url.into(),
                what: "`logprobs.token_logprobs` is not a list".into(),
            })?;
        let logprobs = lps
            .iter()
            .map(|v| v.as_f64().map(|x| x as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| EngineError::Malformed {
                url: url.into(),
                what: "`logprobs.token_logprobs` has a value that is not a number".into(),
            })?;
        let finish = match ch.get("finish_reason").and_then(Value::as_str) {
            Some("stop") => FinishReason::Stop,
            Some("length") => FinishReason::Length,
            other => {
                return Err(EngineError::Malformed {
                    url: url.into(),
                    what: format!("finish_reason {other:?} (expected stop or length)"),
                })
            }
        };
        let c = EngineCompletion {
            tokens,
            logprobs,
            finish,
            weight_version: None,
            engine: url.to_string(),
        };
        check_completion(&c, req.max_tokens)?;
        out.push((index, c));
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, c)| c).collect())
}

impl EngineClient for Vllm {
    fn http(&self) -> &Http {
        &self.http
    }

    fn generate(&self, req: &GenerateRequest) -> Result<Vec<EngineCompletion>> {
        let reply = self.http.post("/v1/completions", &build_request(req))?;
        parse_response(&reply.json, req, self.url())
    }

    /// vLLM's replies carry no weight version: the pool tracks the version it pushed.
    fn load_weights(&self, files: &WeightFiles, _version: u64) -> Result<()> {
        expect_format(self.url(), "vLLM", files, WeightFormat::HfFolder)?;
        let calls = weight_update_calls(files);
        for (k, (path, body)) in calls.iter().enumerate() {
            match self.http.post(path, body) {
                Ok(_) => {}
                // Never leave the engine paused: a failed reload still resumes it.
                Err(e) if k > 0 => {
                    let _ = self.http.post("/resume", &json!({}));
                    return Err(e);
                }
                Err(EngineError::Rejected { status: 404, .. }) => {
                    return Err(EngineError::Unsupported {
                        url: self.url().into(),
                        what: format!(
                            "{path} is not served: start vLLM with VLLM_SERVER_DEV_MODE=1 \
                             (see the README's vLLM section)"
                        ),
                    })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The HTTP calls of one disk weight push, in order (vLLM 0.34, `VLLM_SERVER_DEV_MODE=1`):
/// finish the requests in flight and pause, reload every weight file of the folder in place,
/// drop the prefix cache (its keys were computed by the old weights), resume.
pub fn weight_update_calls(files: &WeightFiles) -> Vec<(&'static str, Value)> {
    vec![
        ("/pause?mode=wait", json!({})),
        (
            "/collective_rpc",
            json!({"method": "reload_weights", "kwargs": {"weights_path": files.path}}),
        ),
        ("/reset_prefix_cache", json!({})),
        ("/resume", json!({})),
    ]
}
