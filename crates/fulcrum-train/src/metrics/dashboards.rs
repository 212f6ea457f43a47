//! The dashboards a run feeds besides its JSONL files (`[logging]`): a TensorBoard event file
//! under `<run_dir>/tb/` (`fulcrum-tensorboard`) and Weights & Biases (`wandb.rs`). They get the
//! same records as `metrics.jsonl` and `eval.jsonl`, under the same keys, on rank 0 only.
//!
//! The JSONL files are the run's record; a dashboard is a view of it. A dashboard that fails to
//! write (a full disk, a W&B sidecar that died) is said once and dropped, and training goes on.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use fulcrum_tensorboard::EventWriter;
use serde_json::{json, Map, Value};

use super::wandb::Wandb;
use crate::config::Config;
use crate::error::TrainError;

/// How the program draws a run's report charts (`fulcrum report`, in the binary), for the
/// dashboards that show them at the end of a run.
static CHART_DRAWER: OnceLock<fn(&Path) -> Vec<PathBuf>> = OnceLock::new();

/// Gives the dashboards a way to draw a finished run's charts (the images' paths).
pub fn set_chart_drawer(draw: fn(&Path) -> Vec<PathBuf>) {
    let _ = CHART_DRAWER.set(draw);
}

/// Buckets of the per-step length histograms.
const LENGTH_BUCKETS: usize = 30;

/// Response lengths (model tokens) of one step, by the sign of their advantage: what the
/// aggregation rules treat differently.
#[derive(Debug, Clone, Default)]
pub struct LengthsBySign {
    pub positive: Vec<f64>,
    pub negative: Vec<f64>,
}

/// A run's dashboards, as configured.
pub struct Dashboards {
    tb: Option<EventWriter>,
    wandb: Option<Wandb>,
    dir: PathBuf,
}

impl Dashboards {
    /// The dashboards of the run at `dir` that starts after step `start` (0: a fresh run, whose
    /// config is logged first; else a resumed one, whose event file is cut back to `start`).
    /// Opened before the warm-up, so that a W&B set-up that cannot work stops the run at once.
    pub fn open(cfg: &Config, dir: &Path, start: u64) -> Result<Dashboards, TrainError> {
        let mut d = Dashboards {
            tb: None,
            wandb: None,
            dir: dir.to_path_buf(),
        };
        if cfg.logging.tensorboard {
            let tb_dir = dir.join("tb");
            // A run started again from step 0 (stopped before its first checkpoint) starts a
            // new event file, like its JSONL streams.
            let opened = if start == 0 {
                EventWriter::restart(&tb_dir)
            } else {
                EventWriter::resume(&tb_dir, start)
            };
            d.tb = Some(opened.map_err(|e| TrainError::Io {
                path: e.path,
                source: e.source,
            })?);
        }
        if cfg.logging.wandb {
            let config = serde_json::to_value(cfg).map_err(|source| TrainError::Encode {
                what: "the config for W&B".into(),
                source,
            })?;
            let name = dir
                .file_name()
                .map_or("run".into(), |n| n.to_string_lossy());
            d.wandb = Some(Wandb::start(&cfg.logging, dir, &name, &config, start > 0)?);
        }
        if start == 0 {
            d.tb_do(|tb| tb.text("config", 0, &markdown_code(&cfg.to_toml())));
        }
        Ok(d)
    }

    /// One step's metrics line (as written to `metrics.jsonl`) and its lengths by sign.
    pub fn step(&mut self, line: &Value, lengths: &LengthsBySign) {
        let Some(step) = line.get("step").and_then(Value::as_u64) else {
            return;
        };
        let scalars = flatten(line, "");
        self.tb_do(|tb| {
            let values: Vec<(&str, f64)> = scalars.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            tb.scalars(step, &values)?;
            tb.histogram(
                "len/positive_advantage",
                step,
                &lengths.positive,
                LENGTH_BUCKETS,
            )?;
            tb.histogram(
                "len/negative_advantage",
                step,
                &lengths.negative,
                LENGTH_BUCKETS,
            )
        });
        self.wandb_send(json!({
            "step": step,
            "log": as_map(&scalars),
            "histograms": {
                "len/positive_advantage": lengths.positive,
                "len/negative_advantage": lengths.negative,
            },
        }));
    }

    /// One held-out evaluation (as written to `eval.jsonl`), its numbers as `eval/<key>`.
    pub fn eval(&mut self, rec: &Value) {
        let Some(step) = rec.get("step").and_then(Value::as_u64) else {
            return;
        };
        let scalars: Vec<(String, f64)> = flatten(rec, "")
            .into_iter()
            .map(|(k, v)| (format!("eval/{k}"), v))
            .collect();
        self.tb_do(|tb| {
            let values: Vec<(&str, f64)> = scalars.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            tb.scalars(step, &values)
        });
        self.wandb_send(json!({"step": step, "log": as_map(&scalars)}));
    }

    /// The end of the run: its summary and, for W&B, the report's charts.
    pub fn finish(mut self, summary: Value) {
        let Some(w) = self.wandb.take() else {
            return;
        };
        let charts = CHART_DRAWER
            .get()
            .map(|draw| draw(&self.dir))
            .unwrap_or_default();
        let images: Map<String, Value> = charts
            .iter()
            .filter_map(|p| {
                let name = p.file_stem()?.to_string_lossy().into_owned();
                Some((format!("charts/{name}"), json!(p)))
            })
            .collect();
        w.finish(summary, Value::Object(images));
    }

    /// Sends a record to W&B; a sidecar that is gone is said once and dropped.
    fn wandb_send(&mut self, record: Value) {
        if let Some(w) = self.wandb.as_mut() {
            if !w.send(record) {
                eprintln!(
                    "fulcrum: the W&B sidecar has stopped; the run goes on without it                      (metrics.jsonl and eval.jsonl are complete)"
                );
                self.wandb = None;
            }
        }
    }

    /// Runs `write` on the event file; a failure is said and the event file dropped.
    fn tb_do(
        &mut self,
        write: impl FnOnce(&mut EventWriter) -> Result<(), fulcrum_tensorboard::TbError>,
    ) {
        if let Some(tb) = self.tb.as_mut() {
            if let Err(e) = write(tb) {
                eprintln!(
                    "fulcrum: TensorBoard: {e}; no more events are written (metrics.jsonl and \
                     eval.jsonl go on)"
                );
                self.tb = None;
            }
        }
    }
}

/// The numbers of a JSON record as `(key, value)`, nested keys joined by `/`; `step`, text,
/// booleans and nulls (a value that was not finite) left out.
fn flatten(v: &Value, prefix: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    if let Value::Object(map) = v {
        for (k, x) in map {
            if prefix.is_empty() && k == "step" {
                continue;
            }
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}/{k}")
            };
            match x {
                Value::Number(n) => out.extend(n.as_f64().map(|f| (key, f))),
                Value::Object(_) => out.extend(flatten(x, &key)),
                _ => {}
            }
        }
    }
    out
}

fn as_map(scalars: &[(String, f64)]) -> Map<String, Value> {
    scalars.iter().map(|(k, v)| (k.clone(), json!(v))).collect()
}

/// `text` as a markdown code block (TensorBoard's text plugin renders markdown).
fn markdown_code(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_flatten_to_their_numbers_under_their_keys() {
        let line = json!({"step": 3, "loss": 0.5, "reward/mean": 1, "skipped": false,
            "reason": "x", "kl": null, "mass": {"ba": 0.25, "token": {"pos": 2}}});
        let mut got = flatten(&line, "");
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let want = [
            ("loss", 0.5),
            ("mass/ba", 0.25),
            ("mass/token/pos", 2.0),
            ("reward/mean", 1.0),
        ];
        let want: Vec<(String, f64)> = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(got, want);
    }
}
