//! SGLang's server: `POST /generate` with `input_ids`, `sampling_params` (`n = G`) and
//! `return_logprob`; `output_token_logprobs` holds `[logprob, token_id, text]` per output
//! token, `meta_info.weight_version` the weights that produced it.
//!
//! Sampling is not seeded: SGLang's `sampling_seed` works only under
//! `--enable-deterministic-inference` and then gives every sample of a prompt the same seed.
//!
//! Weight push (disk): `POST /update_weights_from_disk {model_path, weight_version, ...}`; a
//! load that fails keeps the old weights and answers `success: false`.

use std::time::Duration;

use serde_json::{json, Value};

use super::{check_completion, expect_format, field, one_or_many, EngineClient};
use crate::error::{EngineError, Result};
use crate::http::Http;
use crate::request::{EngineCompletion, FinishReason, GenerateRequest, WeightFiles, WeightFormat};

pub struct Sglang {
    http: Http,
}

impl Sglang {
    pub fn new(url: &str, timeout: Duration) -> Self {
        Sglang {
            http: Http::new(url, timeout),
        }
    }
}

/// The `/generate` body for `req`.
pub fn build_request(req: &GenerateRequest) -> Value {
    let s = &req.sampling;
    json!({
        "input_ids": req.prompt_ids,
        "sampling_params": {
            "n": req.n,
            "max_new_tokens": req.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p.unwrap_or(1.0),
            "top_k": s.top_k.unwrap_or(-1),
            "min_p": 0.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "repetition_penalty": 1.0,
            "stop_token_ids": req.stop_token_ids,
            "ignore_eos": false,
            "skip_special_tokens": false,
            "no_stop_trim": true,
        },
        "return_logprob": true,
        "logprob_start_len": -1,
        "stream": false,
    })
}

/// The completions of a `/generate` reply (a list of `n` entries, or one object for `n = 1`).
pub fn parse_response(
    reply: &Value,
    req: &GenerateRequest,
    url: &str,
) -> Result<Vec<EngineCompletion>> {
    let items = one_or_many(reply, req.n, url)?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let entries = field(item, url, "/meta_info/output_token_logprobs")?
            .as_array()
            .ok_or_else(|| EngineError::Malformed {
                url: url.into(),
                what: "`meta_info.output_token_logprobs` is not a list".into(),
            })?;
        let mut tokens = Vec::with_capacity(entries.len());
        let mut logprobs = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let lp = e.get(0).and_then(Value::as_f64);
            let id = e.get(1).and_then(Value::as_i64);
            match (lp, id) {
                (Some(lp), Some(id)) => {
                    logprobs.push(lp as f32);
                    tokens.push(id);
                }
                _ => {
                    return Err(EngineError::Malformed {
                        url: url.into(),
                        what: format!("output_token_logprobs[{i}] is not [logprob, token_id, ..]"),
                    })
                }
            }
        }
        if let Some(output_ids) = item.get("output_ids").and_then(Value::as_array) {
            let same = output_ids.len() == tokens.len()
                && output_ids
                    .iter()
                    .zip(&tokens)
                    .all(|(a, b)| a.as_i64() == Some(*b));
            if !same {
                return Err(EngineError::Malformed {
                    url: url.into(),
                    what: "output_ids and output_token_logprobs disagree".into(),
                });
            }
        }
        let finish = match item
            .pointer("/meta_info/finish_reason/type")
            .and_then(Value::as_str)
        {
            Some("stop") => FinishReason::Stop,
            Some("length") => FinishReason::Length,
            other => {
                return Err(EngineError::Malformed {
                    url: url.into(),
                    what: format!(
                        "meta_info.finish_reason.type {other:?} (expected stop or length)"
                    ),
                })
            }
        };
        let weight_version = item.pointer("/meta_info/weight_version").and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        });
        let c = EngineCompletion {
            tokens,
            logprobs,
            finish,
            weight_version,
            engine: url.to_string(),
        };
        check_completion(&c, req.max_tokens)?;
        out.push(c);
    }
    Ok(out)
}

impl EngineClient for Sglang {
    fn http(&self) -> &Http {
        &self.http
    }

    fn generate(&self, req: &GenerateRequest) -> Result<Vec<EngineCompletion>> {
        let reply = self.http.post("/generate", &build_request(req))?;
        parse_response(&reply.json, req, self.url())
    }

    fn load_weights(&self, files: &WeightFiles, version: u64) -> Result<()> {
        expect_format(self.url(), "SGLang", files, WeightFormat::HfFolder)?;
        let body = weight_update_request(files, version);
        let reply = self.http.post("/update_weights_from_disk", &body)?;
        match reply.json.get("success").and_then(Value::as_bool) {
            Some(true) => Ok(()),
            _ => Err(EngineError::Malformed {
                url: self.url().into(),
                what: format!("update_weights_from_disk answered {}", reply.json),
            }),
        }
    }
}

/// The `/update_weights_from_disk` body.
pub fn weight_update_request(files: &WeightFiles, version: u64) -> Value {
    json!({
        "model_path": files.path,
        "load_format": "auto",
        "weight_version": version.to_string(),
        "flush_cache": true,
        "abort_all_requests": false,
    })
}
