//! llama.cpp's server: `POST /completion` with a token-id prompt and `n_cmpl = G`.
//!
//! Every sampler setting is sent, because the server's defaults are not neutral (top-k 40,
//! top-p 0.95, min-p 0.05, temperature 0.8, and a chain with penalties, DRY and XTC): the chain
//! is set to top-k, top-p, temperature and the rest switched off. `n_probs = 1` returns the
//! sampled token's probability: the raw softmax's log-probability at temperature 1 without
//! truncation, and under other settings the distribution actually sampled from
//! (`post_sampling_probs`), which is also what the trainer's temperature-scaled log-probability
//! measures. The server seeds completion `j` of a request with `seed + j`, so a fixed seed
//! reproduces a group. It stops on its vocabulary's end-of-generation tokens; a completion is
//! also cut after the first of the request's stop tokens, should the two lists differ.
//!
//! The server reports probabilities per complete UTF-8 character: the byte-level tokens inside
//! a character split over several tokens have none, and come back as NaN (the trainer leaves
//! them out of `kl/engine` and gives them importance weight 1).
//!
//! Weight push: the server cannot swap its model in place, so scripts/llamacpp-server.sh puts a
//! front before it with `POST /reload_model {model_path, weight_version}` (a second server, a
//! process of its own, loads the new file, then takes the traffic) and an `X-Weight-Version`
//! header on every reply.

use std::time::Duration;

use serde_json::{json, Value};

use super::{check_completion, expect_format, field, ids, one_or_many, EngineClient};
use crate::error::{EngineError, Result};
use crate::http::Http;
use crate::request::{EngineCompletion, FinishReason, GenerateRequest, WeightFiles, WeightFormat};

/// llama.cpp's "pick a random seed" value; seeds are 32-bit and kept clear of it.
const RANDOM_SEED: u64 = 0xFFFF_FFFF;

pub struct LlamaCpp {
    http: Http,
    /// The server's slot count (`/props` `total_slots`, a probe), read on first use: one
    /// request may ask for at most that many completions.
    slots: std::sync::OnceLock<usize>,
}

impl LlamaCpp {
    pub fn new(url: &str, timeout: Duration) -> Self {
        LlamaCpp {
            http: Http::new(url, timeout),
            slots: std::sync::OnceLock::new(),
        }
    }

    fn slots(&self) -> Result<usize> {
        if let Some(&n) = self.slots.get() {
            return Ok(n);
        }
        let props = self.http.probe("/props")?;
        let n = props
            .json
            .get("total_slots")
            .and_then(Value::as_u64)
            .filter(|&n| n > 0)
            .ok_or_else(|| EngineError::Malformed {
                url: self.url().into(),
                what: "/props has no total_slots".into(),
            })? as usize;
        Ok(*self.slots.get_or_init(|| n))
    }
}

/// `req` cut into requests of at most `slots` completions, completion `j` of the whole still
/// seeded `seed + j` (the server seeds a request's completions from its seed upwards).
pub fn split_request(req: &GenerateRequest, slots: usize) -> Vec<GenerateRequest> {
    let slots = slots.max(1);
    (0..req.n)
        .step_by(slots)
        .map(|first| GenerateRequest {
            n: slots.min(req.n - first),
            seed: req.seed % (RANDOM_SEED - 1 - req.n as u64) + first as u64,
            ..req.clone()
        })
        .collect()
}

/// The `/completion` body for `req`.
pub fn build_request(req: &GenerateRequest) -> Value {
    let s = &req.sampling;
    json!({
        "prompt": req.prompt_ids,
        "n_predict": req.max_tokens,
        "n_cmpl": req.n,
        "temperature": s.temperature,
        "top_k": s.top_k.unwrap_or(0),
        "top_p": s.top_p.unwrap_or(1.0),
        "min_p": 0.0,
        "typical_p": 1.0,
        "top_n_sigma": -1.0,
        "xtc_probability": 0.0,
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "dry_multiplier": 0.0,
        "mirostat": 0,
        "dynatemp_range": 0.0,
        "samplers": ["top_k", "top_p", "temperature"],
        // Completion j is seeded seed + j: leave room below the random-seed value.
        "seed": req.seed % (RANDOM_SEED - 1 - req.n as u64),
        "n_probs": 1,
        "post_sampling_probs": !s.is_plain(),
        "return_tokens": true,
        "cache_prompt": true,
        "stream": false,
        "ignore_eos": false,
        "stop": [],
    })
}

/// The completions of a `/completion` reply (one object for `n = 1`, a list otherwise), in
/// request order.
pub fn parse_response(
    reply: &Value,
    req: &GenerateRequest,
    url: &str,
    weight_version: Option<u64>,
) -> Result<Vec<EngineCompletion>> {
    let items = one_or_many(reply, req.n, url)?;
    let mut out: Vec<(i64, EngineCompletion)> = Vec::with_capacity(items.len());
    for (k, item) in items.into_iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_i64)
            .unwrap_or(k as i64);
        let mut tokens = ids(field(item, url, "/tokens")?, url, "tokens")?;
        let probs = field(item, url, "/completion_probabilities")?
            .as_array()
            .ok_or_else(|| EngineError::Malformed {
                url: url.into(),
                what: "`completion_probabilities` is not a list".into(),
            })?;
        // One entry per complete UTF-8 character, not per token: a character split over
        // several byte-level tokens (an emoji, CJK) gets one entry, for its last token, and the
        // tokens before it none (NaN here). Entries are matched to tokens in order.
        let mut logprobs = vec![f32::NAN; tokens.len()];
        let mut next = 0;
        for (i, p) in probs.iter().enumerate() {
            let id = p.get("id").and_then(Value::as_i64);
            let at = tokens[next..]
                .iter()
                .position(|t| Some(*t) == id)
                .map(|k| next + k)
                .ok_or_else(|| EngineError::Malformed {
                    url: url.into(),
                    what: format!(
                        "completion_probabilities[{i}].id = {id:?} is not among the tokens from {next} on"
                    ),
                })?;
            let lp = match (p.get("logprob"), p.get("prob")) {
                (Some(lp), _) => lp.as_f64(),
                (None, Some(pr)) => pr.as_f64().map(f64::ln),
                (None, None) => None,
            };
            logprobs[at] = lp.ok_or_else(|| EngineError::Malformed {
                url: url.into(),
                what: format!("completion_probabilities[{i}] has no logprob or prob"),
            })? as f32;
            next = at + 1;
        }
        let mut finish = match item.get("stop_type").and_then(Value::as_str) {
            Some("limit") => FinishReason::Length,
            Some("eos") | Some("word") => FinishReason::Stop,
            other => {
                return Err(EngineError::Malformed {
                    url: url.into(),
                    what: format!("stop_type {other:?} (expected eos, word or limit)"),
                })
            }
        };
        if let Some(cut) = tokens.iter().position(|t| req.stop_token_ids.contains(t)) {
            if cut + 1 < tokens.len() || finish == FinishReason::Length {
                tokens.truncate(cut + 1);
                logprobs.truncate(cut + 1);
                finish = FinishReason::Stop;
            }
        }
        let c = EngineCompletion {
            tokens,
            logprobs,
            finish,
            weight_version,
            engine: url.to_string(),
        };
        check_completion(&c, req.max_tokens)?;
        out.push((index, c));
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, c)| c).collect())
}

impl EngineClient for LlamaCpp {
    fn http(&self) -> &Http {
        &self.http
    }

    fn generate(&self, req: &GenerateRequest) -> Result<Vec<EngineCompletion>> {
        let mut out = Vec::with_capacity(req.n);
        for part in split_request(req, self.slots()?) {
            let reply = self.http.post("/completion", &build_request(&part))?;
            out.extend(parse_response(
                &reply.json,
                &part,
                self.url(),
                reply.weight_version,
            )?);
        }
        Ok(out)
    }

    fn load_weights(&self, files: &WeightFiles, version: u64) -> Result<()> {
        // A LoRA push: the adapter on the base file the server was started with.
        let body = match files.format {
            WeightFormat::GgufAdapter => {
                json!({"lora_path": files.path, "weight_version": version})
            }
            _ => {
                expect_format(self.url(), "llama.cpp", files, WeightFormat::Gguf)?;
                json!({"model_path": files.path, "weight_version": version})
            }
        };
        match self.http.post("/reload_model", &body) {
            Ok(r) if r.json.get("success").and_then(Value::as_bool) == Some(true) => Ok(()),
            Ok(r) => Err(EngineError::Malformed {
                url: self.url().into(),
                what: format!("reload answered {}", r.json),
            }),
            Err(EngineError::Rejected { status: 404, .. }) => Err(EngineError::Unsupported {
                url: self.url().into(),
                what: "this llama.cpp server cannot reload weights (no /reload_model): start it \
                       with scripts/llamacpp-server.sh MODEL.gguf PORT"
                    .into(),
            }),
            Err(e) => Err(e),
        }
    }

    fn model_path(&self) -> Result<Option<String>> {
        let props = self.http.probe("/props")?;
        Ok(props
            .json
            .get("model_path")
            .and_then(Value::as_str)
            .map(str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::SamplingParams;

    fn req(n: usize, stop: Vec<i64>) -> GenerateRequest {
        GenerateRequest {
            prompt_ids: vec![1, 2, 3],
            n,
            max_tokens: 4,
            sampling: SamplingParams {
                temperature: 1.0,
                top_k: None,
                top_p: None,
            },
            seed: 7,
            stop_token_ids: stop,
            adapter: None,
        }
    }

    #[test]
    fn every_sampler_setting_is_sent_and_neutral() {
        let b = build_request(&req(4, vec![2]));
        assert_eq!(b["prompt"], json!([1, 2, 3]));
        assert_eq!(b["n_cmpl"], 4);
        assert_eq!(b["top_k"], 0);
        assert_eq!(b["top_p"], 1.0);
        assert_eq!(b["min_p"], 0.0);
        assert_eq!(b["post_sampling_probs"], false);
        assert_eq!(b["samplers"], json!(["top_k", "top_p", "temperature"]));
        let mut r = req(2, vec![]);
        r.sampling.temperature = 0.7;
        assert_eq!(build_request(&r)["post_sampling_probs"], true);
        r.seed = u64::MAX;
        assert!(build_request(&r)["seed"].as_u64().unwrap() + 2 < RANDOM_SEED);
    }

    #[test]
    fn a_reply_maps_to_completions_in_order() {
        // Shaped as llama-server answered for n_cmpl = 2 (trimmed to the fields read).
        let reply = json!([
            {"index": 1, "tokens": [5, 6, 7, 8], "stop_type": "limit",
             "completion_probabilities": [{"id": 5, "logprob": -1.0}, {"id": 6, "logprob": -2.0},
                                          {"id": 7, "logprob": -0.5}, {"id": 8, "logprob": -0.1}]},
            {"index": 0, "tokens": [9, 2], "stop_type": "eos",
             "completion_probabilities": [{"id": 9, "prob": 0.5}, {"id": 2, "prob": 1.0}]}
        ]);
        let out = parse_response(&reply, &req(2, vec![2]), "u", Some(3)).unwrap();
        assert_eq!(out[0].tokens, vec![9, 2]);
        assert_eq!(out[0].finish, FinishReason::Stop);
        assert!((out[0].logprobs[0] - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(out[1].finish, FinishReason::Length);
        assert_eq!(out[1].weight_version, Some(3));
        // A stop token of ours that the server did not stop on ends the completion there.
        let out = parse_response(&reply, &req(2, vec![6]), "u", None).unwrap();
        assert_eq!(out[1].tokens, vec![5, 6]);
        assert_eq!(out[1].finish, FinishReason::Stop);
    }

    #[test]
    fn a_group_larger_than_the_slots_is_split_with_seeds_continuing() {
        let mut r = req(10, vec![]);
        r.seed = 100;
        let parts = split_request(&r, 4);
        let shape: Vec<(usize, u64)> = parts.iter().map(|p| (p.n, p.seed)).collect();
        assert_eq!(shape, vec![(4, 100), (4, 104), (2, 108)]);
        // Each part's own seed survives build_request unchanged.
        assert_eq!(build_request(&parts[2])["seed"], 108);
    }

    #[test]
    fn a_character_split_over_tokens_has_one_probability() {
        // As llama-server answers for an emoji made of byte tokens 10813, 230, 126 followed by
        // one more whole token 31752.
        let reply = json!({"tokens": [10813, 230, 126, 31752], "stop_type": "limit",
                           "completion_probabilities": [{"id": 126, "logprob": -0.5},
                                                        {"id": 31752, "logprob": -1.5}]});
        let out = parse_response(&reply, &req(1, vec![]), "u", None).unwrap();
        let lp = &out[0].logprobs;
        assert!(lp[0].is_nan() && lp[1].is_nan());
        assert_eq!((lp[2], lp[3]), (-0.5, -1.5));
    }

    #[test]
    fn mismatched_or_partial_replies_are_malformed() {
        let wrong_id = json!({"tokens": [5], "stop_type": "eos",
                              "completion_probabilities": [{"id": 4, "logprob": -1.0}]});
        let e = parse_response(&wrong_id, &req(1, vec![]), "u", None).unwrap_err();
        assert!(e.to_string().contains("not among the tokens"), "{e}");
        let extra = json!({"tokens": [5], "stop_type": "eos",
                           "completion_probabilities": [{"id": 5, "logprob": -1.0},
                                                        {"id": 5, "logprob": -1.0}]});
        assert!(parse_response(&extra, &req(1, vec![]), "u", None).is_err());
        let too_few = json!([{"tokens": [], "stop_type": "eos", "completion_probabilities": []}]);
        assert!(parse_response(&too_few, &req(2, vec![]), "u", None).is_err());
        assert!(parse_response(&json!("x"), &req(1, vec![]), "u", None)
            .unwrap_err()
            .is_transient());
    }
}
