//! Reading a config: defaults < TOML file < `--set` overrides, with errors naming the file and
//! the key path (or the `--set` that gave the key its value); and writing the resolved config
//! back as TOML.

use std::path::Path;

use fulcrum_core::LossParams;

use super::{Config, PpoConfig};
use crate::TrainError;

impl Config {
    /// Reads `path` (or only the defaults when `None`), applies `--set` overrides in order,
    /// and validates. Messages name the key and where its value came from: the `--set` that
    /// gave it, else the file, or `(defaults)` when there is none.
    pub fn load(path: Option<&Path>, overrides: &[String]) -> Result<Self, TrainError> {
        let (file, mut table) = match path {
            Some(p) => {
                let shown = p.display().to_string();
                let text = std::fs::read_to_string(p).map_err(TrainError::io(p))?;
                let table: toml::Table =
                    text.parse()
                        .map_err(|e: toml::de::Error| TrainError::ConfigSyntax {
                            file: shown.clone(),
                            message: e.to_string().trim_end().to_string(),
                        })?;
                (shown, table)
            }
            None => ("(defaults)".to_string(), toml::Table::new()),
        };
        for o in overrides {
            apply_override(&mut table, o)?;
        }
        Self::from_table(table, &file).map_err(|e| blame_override(e, overrides))
    }

    /// Deserialises a table over the defaults, naming the key path of any error.
    pub fn from_table(mut table: toml::Table, file: &str) -> Result<Self, TrainError> {
        let params = take_loss_params(&mut table, file)?;
        let mut cfg: Config =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                let path = e.path().to_string();
                let (key, message) = key_and_message(&path, &e.into_inner().to_string());
                TrainError::ConfigKey {
                    file: file.to_string(),
                    key,
                    message,
                }
            })?;
        cfg.ppo.params = params;
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// The resolved config as TOML, for `runs/<name>/config.toml`.
    pub fn to_toml(&self) -> String {
        // Every field is a TOML-representable type; `None`s are simply left out.
        toml::to_string_pretty(self)
            .unwrap_or_else(|e| format!("# config could not be written: {e}\n"))
    }
}

/// Takes the policy loss's settings (`fulcrum_core::LossParams`'s keys) out of the `[ppo]` table
/// and reads them, after refusing any `[ppo]` key that is neither one of them nor one of
/// `PpoConfig`'s own. What is left of `[ppo]` is `PpoConfig`'s.
fn take_loss_params(table: &mut toml::Table, file: &str) -> Result<LossParams, TrainError> {
    let key_error = |key: String, message: String| TrainError::ConfigKey {
        file: file.to_string(),
        key,
        message,
    };
    let Some(ppo) = table.get_mut("ppo").and_then(toml::Value::as_table_mut) else {
        // No table, or not a table (which reading `PpoConfig` reports).
        return Ok(LossParams::default());
    };
    let keys_of = |value: toml::Table| value.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
    let known = keys_of(toml::Table::try_from(PpoConfig::default()).unwrap_or_default());
    if let Some(k) = ppo.keys().find(|k| !known.contains(k)) {
        let expected: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
        return Err(key_error(
            format!("ppo.{k}"),
            format!(
                "unknown field `{k}`, expected one of {}",
                expected.join(", ")
            ),
        ));
    }
    let mut mine = toml::Table::new();
    for k in keys_of(toml::Table::try_from(LossParams::default()).unwrap_or_default()) {
        if let Some(v) = ppo.remove(&k) {
            mine.insert(k, v);
        }
    }
    serde_path_to_error::deserialize(toml::Value::Table(mine)).map_err(|e| {
        let path = format!("ppo.{}", e.path());
        let (key, message) = key_and_message(&path, &e.into_inner().to_string());
        key_error(key, message)
    })
}

/// The dotted key and the message of a deserialisation error at `path`: an unknown field is
/// named in full (`rollout.grup_size`, not `rollout`), and an integer outside its key's type
/// says so (`-1` for a count: "must be >= 0", not serde's "expected usize").
fn key_and_message(path: &str, message: &str) -> (String, String) {
    let message = message.trim_end();
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field);
    let key = match (path, unknown) {
        (".", Some(field)) => field.to_string(),
        (".", None) => "(top level)".to_string(),
        (p, Some(field)) if !p.ends_with(&format!(".{field}")) && p != field => {
            format!("{p}.{field}")
        }
        (p, _) => p.to_string(),
    };
    (
        key,
        integer_range_message(message).unwrap_or(message.to_string()),
    )
}

/// serde's "invalid value: integer `-3`, expected usize" as what the key takes.
fn integer_range_message(message: &str) -> Option<String> {
    let rest = message.strip_prefix("invalid value: integer `")?;
    let (value, rest) = rest.split_once('`')?;
    let ty = rest
        .strip_prefix(", expected ")?
        .split_whitespace()
        .next()?;
    let max: u64 = match ty {
        "u8" => u8::MAX.into(),
        "u16" => u16::MAX.into(),
        "u32" => u32::MAX.into(),
        "u64" | "usize" => u64::MAX,
        _ => return None,
    };
    Some(if value.starts_with('-') {
        format!("must be a whole number >= 0, got {value}")
    } else {
        format!("{value} is out of range: this key takes a whole number from 0 to {max}")
    })
}

/// The key of an override, `key.path` of `key.path=value`.
fn override_key(given: &str) -> &str {
    given.split_once('=').map_or(given, |(k, _)| k).trim()
}

/// An error about a key that a `--set` gave its value names that `--set` instead of the file:
/// the key itself, a key inside a table it set, or the table holding a key it set.
fn blame_override(e: TrainError, overrides: &[String]) -> TrainError {
    let TrainError::ConfigKey { file, key, message } = e else {
        return e;
    };
    let covers = |set: &str| {
        set == key || key.starts_with(&format!("{set}.")) || set.starts_with(&format!("{key}."))
    };
    let file = match overrides.iter().rev().find(|o| covers(override_key(o))) {
        Some(given) => format!("--set {given}"),
        None => file,
    };
    TrainError::ConfigKey { file, key, message }
}

/// Applies one `key.path=value` override to the raw table. The value is read as TOML (so
/// `8`, `0.28`, `true`, `[1, 2]` keep their types) and otherwise taken as a plain string (so
/// `rule=ba` works without quotes).
pub fn apply_override(table: &mut toml::Table, given: &str) -> Result<(), TrainError> {
    let bad = |message: &str| TrainError::BadOverride {
        given: given.to_string(),
        message: message.to_string(),
    };
    let (key, raw) = given
        .split_once('=')
        .ok_or_else(|| bad("expected key=value"))?;
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(bad("empty key"));
    }
    let value = parse_value(raw.trim()).map_err(|message| TrainError::ConfigKey {
        file: format!("--set {given}"),
        key: key.to_string(),
        message,
    })?;
    let mut node = table;
    for p in &parts[..parts.len() - 1] {
        let entry = node
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        node = entry
            .as_table_mut()
            .ok_or_else(|| bad(&format!("`{p}` is not a table")))?;
    }
    node.insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}

/// A `--set` value: TOML when it reads as TOML, else a plain string; but an integer that TOML
/// cannot hold is an error saying so, never the string a key of numbers would then call "a
/// string".
fn parse_value(raw: &str) -> Result<toml::Value, String> {
    let doc = format!("v = {raw}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => Ok(t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string()))),
        Err(_) if looks_like_integer(raw) => Err(format!(
            "the number {raw} is out of range: a config integer is at most {}",
            i64::MAX
        )),
        Err(_) => Ok(toml::Value::String(raw.to_string())),
    }
}

/// Whether `raw` is spelled as a decimal integer (a sign, digits, TOML's `_` separators).
fn looks_like_integer(raw: &str) -> bool {
    let digits = raw.strip_prefix(['+', '-']).unwrap_or(raw);
    digits.starts_with(|c: char| c.is_ascii_digit())
        && digits.chars().all(|c| c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use fulcrum_core::Rule;
    use std::path::PathBuf;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("c.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        let c = Config::default();
        c.validate("(defaults)").unwrap();
        let text = c.to_toml();
        let back = Config::from_table(text.parse().unwrap(), "x").unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn engine_settings_are_checked_naming_the_key() {
        let err = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            Config::load(None, &sets).unwrap_err().to_string()
        };
        let url = "rollout.engine_urls=[\"http://127.0.0.1:8080\"]";
        assert!(err(&["rollout.engine=\"vllm\""]).contains("rollout.engine_urls"));
        assert!(err(&[url]).contains("native"));
        assert!(err(&[
            "rollout.engine=\"llamacpp\"",
            "rollout.engine_urls=[\"127.0.0.1:80\"]"
        ])
        .contains("not an http"));
        let e = err(&["rollout.engine=\"llamacpp\"", url, "rollout.overlap=true"]);
        assert!(e.contains("rollout.overlap") && e.contains("is_cap"), "{e}");
        assert!(err(&["rollout.engine=\"sglang\"", url, "rollout.is_cap=0.5"]).contains(">= 1"));
        assert!(err(&["rollout.engine=\"vlm\""]).contains("did you mean vllm"));
        let ok: Vec<String> = [
            "rollout.engine=\"llamacpp\"",
            url,
            "rollout.overlap=true",
            "rollout.is_cap=2.0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let c = Config::load(None, &ok).unwrap();
        assert_eq!(
            c.rollout.engine_urls,
            vec!["http://127.0.0.1:8080".to_string()]
        );
    }

    #[test]
    fn the_demo_preset_is_the_defaults() {
        let preset = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/demo.toml");
        let c = Config::load(Some(&preset), &[]).unwrap();
        assert_eq!(
            c,
            Config::default(),
            "regenerate with `fulcrum train --print-config`"
        );
    }

    #[test]
    fn file_then_overrides_take_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "steps = 5\nrule = \"seq\"\n[ppo]\neps_high = 0.3\n",
        );
        let c = Config::load(
            Some(&p),
            &[
                "steps=8".into(),
                "ppo.eps_low=0.1".into(),
                "rule=ba-batch".into(),
            ],
        )
        .unwrap();
        assert_eq!(c.steps, 8);
        assert_eq!(c.rule, Rule::BaBatch);
        assert_eq!(c.ppo.params.eps_high, 0.3);
        assert_eq!(c.ppo.params.eps_low, 0.1);
        let c = Config::load(None, &["task.difficulty=4".into()]).unwrap();
        assert_eq!(c.task.difficulty, 4);
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "[ppo]\neps_hgh = 0.3\n");
        let err = Config::load(Some(&p), &[]).unwrap_err().to_string();
        assert!(
            err.contains("c.toml: ppo") && err.contains("eps_hgh"),
            "{err}"
        );
        let err = Config::load(None, &["stepz=3".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("stepz"), "{err}");
    }

    #[test]
    fn wrong_type_and_bad_names_are_errors_with_the_key() {
        let err = Config::load(None, &["steps=many".into()])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--set steps=many: steps:"), "{err}");
        let err = Config::load(None, &["rule=ba_batch".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rule:") && err.contains("did you mean ba-batch?"),
            "{err}"
        );
        let err = Config::load(None, &["ppo.dual_clip_c=0.5".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("ppo.dual_clip_c"), "{err}");
        let err = Config::load(None, &["rollout.group_size=1".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("rollout.group_size"), "{err}");
        let err = Config::load(None, &["steps".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected key=value"), "{err}");
    }

    #[test]
    fn every_closed_set_is_typed_and_a_typo_names_key_and_nearest_name() {
        for (set, key, near) in [
            (
                "optim.schedule=cosin",
                "optim.schedule",
                "did you mean cosine?",
            ),
            (
                "ppo.kl_estimator=k2",
                "ppo.kl_estimator",
                "valid kl estimators: k1, k3",
            ),
            ("model.dtype=bf61", "model.dtype", "did you mean bf16?"),
            ("advantage=rlo", "advantage", "did you mean rloo?"),
            ("device=gpu", "device", "cpu, cuda, cuda:N, auto"),
        ] {
            let err = Config::load(None, &[set.into()]).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(near), "{set}: {err}");
        }
        let c = Config::load(
            None,
            &[
                "optim.schedule=cosine".into(),
                "ppo.kl_estimator=k1".into(),
                "device=cuda:1".into(),
            ],
        )
        .unwrap();
        assert_eq!(c.optim.schedule, crate::ScheduleKind::Cosine);
        assert_eq!(c.ppo.kl_estimator, fulcrum_core::KlEstimator::K1);
        assert_eq!(c.device, fulcrum_model::DeviceChoice::Cuda(1));
        assert!(
            c.to_toml().contains("device = \"cuda:1\""),
            "{}",
            c.to_toml()
        );
    }

    #[test]
    fn syntax_error_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "steps = 5\nrule = \n");
        let err = Config::load(Some(&p), &[]).unwrap_err().to_string();
        assert!(err.contains("c.toml") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn an_error_names_the_set_that_gave_the_key_its_value_else_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "[rollout]\ngroup_size = 1\n");
        let err = Config::load(Some(&p), &["steps=3".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("c.toml: rollout.group_size:"), "{err}");
        let err = Config::load(Some(&p), &["rollout.group_size=0".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--set rollout.group_size=0: rollout.group_size:"),
            "{err}"
        );
        // An unknown key is named in full, and by the --set that typed it.
        let err = Config::load(None, &["rollout.grup_size=4".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--set rollout.grup_size=4: rollout.grup_size:"),
            "{err}"
        );
        let err = Config::load(None, &["ppo.eps_hgh=0.3".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--set ppo.eps_hgh=0.3: ppo.eps_hgh:"),
            "{err}"
        );
        let err = Config::load(None, &["stepz=3".into()])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--set stepz=3: stepz:"), "{err}");
    }

    #[test]
    fn a_number_out_of_range_is_said_so_not_called_a_string() {
        let err = Config::load(None, &["steps=99999999999999999999".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("steps")
                && err.contains("out of range")
                && err.contains("--set")
                && !err.contains("string"),
            "{err}"
        );
        for (set, key, says) in [
            (
                "rollout.group_size=-4",
                "rollout.group_size",
                ">= 0, got -4",
            ),
            ("task.difficulty=-1", "task.difficulty", ">= 0, got -1"),
            (
                "task.difficulty=99999999999",
                "task.difficulty",
                "out of range",
            ),
            (
                "rollout.engine_max_failures=-1",
                "rollout.engine_max_failures",
                ">= 0",
            ),
        ] {
            let err = Config::load(None, &[set.into()]).unwrap_err().to_string();
            assert!(
                err.contains(&format!("--set {set}: {key}:")) && err.contains(says),
                "{set}: {err}"
            );
        }
        // A string where a string belongs still needs no quotes.
        let c = Config::load(None, &["rule=seq".into(), "run_name=123abc".into()]).unwrap();
        assert_eq!(c.run_name, "123abc");
    }
}
