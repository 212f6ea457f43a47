//! SGLang's server: `POST /generate` with `input_ids`, `sampling_params` (`n = G`) and
//! `return_logprob`; `output_token_logprobs` holds `[logprob, token_id, text]` per output
//! token, `meta_info.weight_version` the weights that produced it.
//!
//! Sampling is not seeded: SGLang's `sampling_seed` works only under
//! `--enable-deterministic-inference` and then gives every sample of a prompt the same seed.
//!
//! Weight push (disk): `POST /update_weights_from_disk {model_path, weight_version, ...}`; a
//! load that fails keeps the old weights and answers `success: false`. A LoRA run pushes only its
//! adapter (`/load_lora_adapter`, a server started with `--enable-lora`), and every request
//! names it (`lora_path`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

use super::{check_completion, expect_format, field, one_or_many, EngineClient};
use crate::error::{EngineError, Result};
use crate::http::Http;
use crate::request::{
    EngineCompletion, FinishReason, GenerateRequest, WeightFiles, WeightFormat, ADAPTER_NAME,
};

pub struct Sglang {
    http: Http,
    /// An adapter was loaded under [`ADAPTER_NAME`] (a new one replaces it: unload, load).
    adapter_loaded: AtomicBool,
}

impl Sglang {
    pub fn new(url: &str, timeout: Duration) -> Self {
        Sglang {
            http: Http::new(url, timeout),
            adapter_loaded: AtomicBool::new(false),
        }
    }

    /// Replaces the policy's adapter: unload the one loaded under [`ADAPTER_NAME`] (SGLang
    /// refuses a name twice), load the new folder under it. Draws and pushes never overlap
    /// (the trainer queues them in order), so no request names the adapter in between.
    fn load_adapter(&self, files: &WeightFiles) -> Result<()> {
        if self.adapter_loaded.swap(false, Ordering::SeqCst) {
            let reply = self.http.post(
                "/unload_lora_adapter",
                &json!({ "lora_name": ADAPTER_NAME }),
            )?;
            lora_update_ok(&reply.json, self.url(), "unload_lora_adapter")?;
        }
        let reply = self
            .http
            .post("/load_lora_adapter", &adapter_request(files))?;
        lora_update_ok(&reply.json, self.url(), "load_lora_adapter")?;
        self.adapter_loaded.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// The `/load_lora_adapter` body: the policy's adapter folder under [`ADAPTER_NAME`].
pub fn adapter_request(files: &WeightFiles) -> Value {
    json!({ "lora_name": ADAPTER_NAME, "lora_path": files.path })
}

/// A `LoRAUpdateOutput` that says it succeeded.
fn lora_update_ok(reply: &Value, url: &str, route: &str) -> Result<()> {
    match reply.get("success").and_then(Value::as_bool) {
        Some(true) => Ok(()),
        _ => Err(EngineError::Malformed {
            url: url.into(),
            what: format!("{route} answered {reply}"),
        }),
    }
}

/// The `/generate` body for `req`.
pub fn build_request(req: &GenerateRequest) -> Value {
    let s = &req.sampling;
    let mut body = json!({
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
    });
    if let Some(name) = &req.adapter {
        body["lora_path"] = json!(name);
    }
    body
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
        if files.format == WeightFormat::PeftAdapter {
            return self.load_adapter(files);
        }
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

    /// SGLang answers `null` once the memory is released; a failure is an error reply.
    fn release_memory(&self) -> Result<()> {
        let body = memory_occupation_request(None);
        self.http.post("/release_memory_occupation", &body)?;
        Ok(())
    }

    /// Weights first, then the update, then the KV cache: the load never competes with the
    /// cache for memory.
    fn load_weights_released(&self, files: &WeightFiles, version: u64) -> Result<()> {
        let weights = memory_occupation_request(Some(&["weights"]));
        self.http.post("/resume_memory_occupation", &weights)?;
        self.load_weights(files, version)?;
        let cache = memory_occupation_request(Some(&["kv_cache"]));
        self.http.post("/resume_memory_occupation", &cache)?;
        Ok(())
    }
}

/// Colocation (a server started with `--enable-memory-saver`): the body that frees or takes
/// back memory: every part (`None`), or only `"weights"` or `"kv_cache"`.
pub fn memory_occupation_request(tags: Option<&[&str]>) -> Value {
    match tags {
        None => json!({}),
        Some(t) => json!({ "tags": t }),
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
