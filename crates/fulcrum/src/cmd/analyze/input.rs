//! Reading a rollout dump for `fulcrum analyze`: JSONL, one response per line, with a group id,
//! a reward, a length and optionally an advantage, under configurable key names.
//!
//! Every problem stops the read with `FILE:LINE: FIELD: problem`; a blank line is skipped, an
//! empty file is an error.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

/// Which JSON key holds each field. `None` means "look for the usual names".
#[derive(Debug, Clone, Default)]
pub struct Keys {
    pub group: Option<String>,
    pub reward: Option<String>,
    pub length: Option<String>,
    pub advantage: Option<String>,
}

/// Names tried, in order, when a key is not given: ours first, then verl's and TRL-style dumps.
const GROUP_KEYS: &[&str] = &["group", "group_id", "uid", "prompt_id"];
const REWARD_KEYS: &[&str] = &["reward", "score", "rewards"];
const LENGTH_KEYS: &[&str] = &["length", "response_length", "num_tokens"];
const ADVANTAGE_KEYS: &[&str] = &["advantage", "advantages"];

/// The columns of a dump, one entry per response in file order.
#[derive(Debug, Default)]
pub struct Rollouts {
    /// Dense group index per response (ids are strings or integers in the file).
    pub groups: Vec<usize>,
    pub rewards: Vec<f64>,
    pub lengths: Vec<i64>,
    /// Present when the dump carries advantages (then on every line).
    pub advantages: Option<Vec<f64>>,
    /// The key names used, for the log line.
    pub keys_used: [String; 4],
}

/// Resolves the key for one field from the first record: the given one, or the first of the
/// usual names present.
fn resolve_key(given: &Option<String>, usual: &[&str], first: &Map<String, Value>) -> String {
    match given {
        Some(k) => k.clone(),
        None => usual
            .iter()
            .find(|k| first.contains_key(**k))
            .unwrap_or(&usual[0])
            .to_string(),
    }
}

pub fn read(path: &Path, keys: &Keys) -> Result<Rollouts> {
    let shown = path.display();
    let file = File::open(path).with_context(|| format!("{shown}: cannot open"))?;
    let mut out = Rollouts::default();
    let mut group_ids: HashMap<String, usize> = HashMap::new();
    let mut resolved: Option<[String; 4]> = None;
    let mut advantages = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let lineno = n + 1;
        let line = line.with_context(|| format!("{shown}:{lineno}: cannot read line"))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Value = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("{shown}:{lineno}: malformed JSON: {e}"))?;
        let Value::Object(obj) = record else {
            bail!(
                "{shown}:{lineno}: expected a JSON object, got {}",
                kind(&record)
            );
        };
        let [gk, rk, lk, ak] = resolved.get_or_insert_with(|| {
            [
                resolve_key(&keys.group, GROUP_KEYS, &obj),
                resolve_key(&keys.reward, REWARD_KEYS, &obj),
                resolve_key(&keys.length, LENGTH_KEYS, &obj),
                resolve_key(&keys.advantage, ADVANTAGE_KEYS, &obj),
            ]
        });
        let at = |field: &str| format!("{shown}:{lineno}: {field}");

        let group = match obj.get(gk.as_str()) {
            Some(Value::String(s)) => format!("s:{s}"),
            Some(Value::Number(x)) if x.is_i64() || x.is_u64() => format!("i:{x}"),
            Some(other) => bail!(
                "{}: expected a string or integer group id, got {}",
                at(gk),
                kind(other)
            ),
            None => bail!("{}: missing field", at(gk)),
        };
        let next = group_ids.len();
        out.groups.push(*group_ids.entry(group).or_insert(next));

        let reward =
            number(obj.get(rk.as_str())).map_err(|p| anyhow::anyhow!("{}: {p}", at(rk)))?;
        out.rewards.push(reward);

        let length = match obj.get(lk.as_str()) {
            None => bail!("{}: missing field", at(lk)),
            Some(Value::Number(x)) => match (x.as_i64(), x.as_f64()) {
                (Some(l), _) => l,
                // 12.0 is an integer written as a float; 12.5 is not a token count.
                (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => f as i64,
                _ => bail!("{}: expected an integer token count, got {x}", at(lk)),
            },
            Some(other) => bail!(
                "{}: expected an integer token count, got {}",
                at(lk),
                kind(other)
            ),
        };
        if length < 0 {
            bail!("{}: negative length {length}", at(lk));
        }
        out.lengths.push(length);

        let has_adv = obj.contains_key(ak.as_str());
        if out.rewards.len() == 1 {
            out.advantages = has_adv.then(Vec::new);
        }
        match (&out.advantages, has_adv) {
            (Some(_), true) => advantages.push(
                number(obj.get(ak.as_str())).map_err(|p| anyhow::anyhow!("{}: {p}", at(ak)))?,
            ),
            (Some(_), false) => bail!(
                "{}: missing field (earlier lines have it: give it on every line or on none)",
                at(ak)
            ),
            (None, true) => bail!(
                "{}: present here but not on the first line (give it on every line or on none)",
                at(ak)
            ),
            (None, false) => {}
        }
    }
    let Some(keys_used) = resolved else {
        bail!("{shown}: empty file: no responses to analyze");
    };
    if out.advantages.is_some() {
        out.advantages = Some(advantages);
    }
    out.keys_used = keys_used;
    Ok(out)
}

/// A finite JSON number, or the problem with the value.
fn number(v: Option<&Value>) -> std::result::Result<f64, String> {
    match v {
        None => Err("missing field".into()),
        Some(Value::Number(x)) => match x.as_f64() {
            Some(f) if f.is_finite() => Ok(f),
            _ => Err(format!("not a finite number: {x}")),
        },
        Some(other) => Err(format!("expected a number, got {}", kind(other))),
    }
}

fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(x) => format!("a number ({x})"),
        Value::String(s) if s.chars().count() > 40 => "a string".into(),
        Value::String(s) => format!("a string ({s:?})"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}
