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
//! `collective_rpc("reload_weights")` ([`weight_update_calls`]). A LoRA run pushes only its
//! adapter: `POST /v1/load_lora_adapter` in place (a server started with `--enable-lora` and
//! `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`), and every request names it as its `model`.

use std::time::Duration;

use serde_json::{json, Value};

use super::{check_completion, expect_format, field, ids, EngineClient};
use crate::error::{EngineError, Result};
use crate::http::Http;
use crate::request::{
    EngineCompletion, FinishReason, GenerateRequest, WeightFiles, WeightFormat, ADAPTER_NAME,
};

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
    let mut body = json!({
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
    });
    if let Some(name) = &req.adapter {
        body["model"] = json!(name);
    }
    body
}

/// The `/v1/load_lora_adapter` body: the policy's adapter under [`ADAPTER_NAME`], replacing the
/// one loaded under that name in place (each version has its own folder, so no prefix-cache
/// entry of an older adapter is reused).
pub fn adapter_request(files: &WeightFiles) -> Value {
    json!({ "lora_name": ADAPTER_NAME, "lora_path": files.path, "load_inplace": true })
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
        if files.format == WeightFormat::PeftAdapter {
            // vLLM answers plain text on success, an error object otherwise.
            const ROUTE: &str = "/v1/load_lora_adapter";
            return match self.http.post_text(ROUTE, &adapter_request(files)) {
                Ok(_) => Ok(()),
                Err(EngineError::Rejected { status: 404, .. }) => Err(EngineError::Unsupported {
                    url: self.url().into(),
                    what: format!(
                        "{ROUTE} is not served: start vLLM with --enable-lora and \
                         VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
                    ),
                }),
                Err(e) => Err(e),
            };
        }
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

    fn release_memory(&self) -> Result<()> {
        let reply = self
            .http
            .post(SLEEP_CALL, &json!({}))
            .map_err(|e| dev_mode(self.url(), SLEEP_CALL, e))?;
        match reply.json.get("status").and_then(Value::as_str) {
            Some("sleeping") => Ok(()),
            _ => Err(EngineError::Malformed {
                url: self.url().into(),
                what: format!("{SLEEP_CALL} answered {}", reply.json),
            }),
        }
    }

    fn load_weights_released(&self, files: &WeightFiles, _version: u64) -> Result<()> {
        expect_format(self.url(), "vLLM", files, WeightFormat::HfFolder)?;
        let mut last = Value::Null;
        for (path, body) in released_weight_update_calls(files) {
            last = self
                .http
                .post(path, &body)
                .map_err(|e| dev_mode(self.url(), path, e))?
                .json;
        }
        match last.get("status").and_then(Value::as_str) {
            Some("awake") => Ok(()),
            _ => Err(EngineError::Malformed {
                url: self.url().into(),
                what: format!("still asleep after waking the weights and the KV cache: {last}"),
            }),
        }
    }
}

/// A 404 on a development route: the server was not started to serve it.
fn dev_mode(url: &str, path: &str, e: EngineError) -> EngineError {
    match e {
        EngineError::Rejected { status: 404, .. } => EngineError::Unsupported {
            url: url.into(),
            what: format!(
                "{path} is not served: start vLLM with VLLM_SERVER_DEV_MODE=1 (and \
                 --enable-sleep-mode for rollout.colocate)"
            ),
        },
        other => other,
    }
}

/// Colocation in vLLM's sleep mode (a server started with `VLLM_SERVER_DEV_MODE=1` and
/// `--enable-sleep-mode`): level 2 discards the weights and the KV cache once the requests in
/// flight have finished (the weights are reloaded from the next push, so none are kept in CPU
/// memory); `/wake_up` takes back one part at a time, so that a weight load never competes
/// with the KV cache for memory. The engine schedules again once every part is awake.
pub const SLEEP_CALL: &str = "/sleep?level=2&mode=wait";

/// The HTTP calls of a push into a sleeping engine, in order: wake the weights, reload them
/// from the folder, wake the KV cache (which resumes scheduling; the prefix cache was dropped
/// by the sleep).
pub fn released_weight_update_calls(files: &WeightFiles) -> Vec<(&'static str, Value)> {
    vec![
        ("/wake_up?tags=weights", json!({})),
        (
            "/collective_rpc",
            json!({"method": "reload_weights", "kwargs": {"weights_path": files.path}}),
        ),
        ("/wake_up?tags=kv_cache", json!({})),
    ]
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
