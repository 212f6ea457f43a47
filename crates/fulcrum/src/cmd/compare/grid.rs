//! The grid of a comparison: task specs (as on the command line) x rules (x policy losses, with
//! `--losses`) x seeds, each cell a
//! resolved config and a run directory under `OUT/runs/<task>/<rule>-seed<S>`. All runs of a task
//! share one parent directory, so that they share its `sft-cache/`: the rules of a task and seed
//! start from the same warm-up checkpoint.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use fulcrum_tasks::TaskConfig;
use fulcrum_train::Config;

use crate::results::arm::Arm;

/// Splits the values of a task flag (`--tasks`, `--bench`; `flag` names it in errors) into
/// task specs. A spec's own settings are comma-separated too
/// (`countdown:difficulty=2,length=0.5`), so a piece of the form `key=value` with no `:` before
/// the `=` continues the spec before it; any other piece starts a new spec.
/// A bare path to a data file (`my.jsonl`, `train.parquet`) is the `jsonl` task on it and is
/// spelled `jsonl:path=...` from here on.
pub fn split_task_specs(flag: &str, values: &[String]) -> Result<Vec<String>> {
    let mut specs: Vec<String> = Vec::new();
    for value in values {
        let mut new_value = true;
        for piece in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let is_setting = match (piece.find('='), piece.find(':')) {
                (Some(eq), None) => eq > 0,
                (Some(eq), Some(colon)) => eq < colon,
                _ => false,
            };
            match specs.last_mut() {
                Some(last) if is_setting && !new_value => {
                    last.push(if last.contains(':') { ',' } else { ':' });
                    last.push_str(piece);
                }
                _ if is_setting => {
                    anyhow::bail!("{flag}: {piece:?} is a setting with no task name before it")
                }
                _ => specs.push(fulcrum_tasks::expand_data_file(piece)),
            }
            new_value = false;
        }
    }
    for s in &specs {
        s.parse::<TaskConfig>()
            .with_context(|| format!("{flag}: task spec {s:?}"))?;
    }
    Ok(specs)
}

/// The `--set` overrides that turn a config's `[task]` into the spec: its name and the keys it
/// gives (the config's other task keys stay).
pub fn task_overrides(spec: &str) -> Vec<String> {
    let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let mut out = vec![format!("task.name={}", toml_quote(name.trim()))];
    for kv in rest.split(',').filter(|kv| !kv.trim().is_empty()) {
        if let Some((k, v)) = kv.split_once('=') {
            let (k, v) = (k.trim(), v.trim());
            let v = match k {
                "path" | "reward" | "verbose_levels" => toml_quote(v),
                _ => v.to_string(),
            };
            out.push(format!("task.{k}={v}"));
        }
    }
    out
}

/// A TOML basic string.
fn toml_quote(s: &str) -> String {
    let mut q = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A file-name-safe label for a task spec (`countdown:difficulty=2` -> `countdown-difficulty=2`).
pub fn task_label(spec: &str) -> String {
    let mut out = String::new();
    for c in spec.chars() {
        match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '=' | '_' | '-' => out.push(c),
            ':' | ',' => out.push('-'),
            _ => out.push('_'),
        }
    }
    out
}

/// One run of the grid.
#[derive(Debug, Clone)]
pub struct Cell {
    pub task: String,
    /// What the tables call this run: the rule, or `rule+loss` in a grid over losses.
    pub arm: String,
    pub seed: u64,
    pub config: Config,
}

impl Cell {
    pub fn dir(&self) -> &Path {
        self.config.run_dir.as_deref().unwrap_or(Path::new("."))
    }
}

/// The directory holding the runs of one task.
pub fn task_dir(out: &Path, spec: &str) -> PathBuf {
    out.join("runs").join(task_label(spec))
}

/// What a grid varies: task specs, rules, policy losses (empty: the config's) and seeds.
#[derive(Debug, Clone, Copy)]
pub struct Axes<'a> {
    pub tasks: &'a [String],
    pub rules: &'a [String],
    pub losses: &'a [String],
    pub seeds: &'a [u64],
}

/// Resolves every cell's config: `config` < `--set` < the task spec < rule, loss, seed, steps.
pub fn plan(
    config: Option<&Path>,
    sets: &[String],
    axes: &Axes<'_>,
    steps: Option<u64>,
    out: &Path,
) -> Result<Vec<Cell>> {
    let Axes {
        tasks,
        rules,
        losses,
        seeds,
    } = *axes;
    // No `--losses`: the config's loss, and the directory names of a rule grid.
    let losses: Vec<Option<&String>> = if losses.is_empty() {
        vec![None]
    } else {
        losses.iter().map(Some).collect()
    };
    let mut cells = Vec::new();
    let mut task_dirs = std::collections::BTreeSet::new();
    for task in tasks {
        // Runs are keyed on disk by the task's label: two specs with one label would overwrite
        // each other's runs and share a warm-up cache.
        let dir = task_dir(out, task);
        if !task_dirs.insert(dir.clone()) {
            anyhow::bail!(
                "--tasks: {task:?} is named twice (its runs would share {})",
                dir.display()
            );
        }
        for seed in seeds {
            for loss in &losses {
                for rule in rules {
                    let mut o = sets.to_vec();
                    o.extend(task_overrides(task));
                    o.push(format!("rule={}", toml_quote(rule)));
                    if let Some(l) = loss {
                        o.push(format!("ppo.loss={}", toml_quote(l)));
                    }
                    o.push(format!("seed={seed}"));
                    if let Some(n) = steps {
                        o.push(format!("steps={n}"));
                    }
                    let mut cfg = Config::load(config, &o).with_context(|| {
                        format!("task {task:?}, rule {rule:?}, loss {loss:?}, seed {seed}")
                    })?;
                    let arm = Arm {
                        rule,
                        loss: loss.map(String::as_str),
                    };
                    let name = arm.run_dir_name(*seed);
                    cfg.run_name = format!("{}-{name}", task_label(task));
                    cfg.run_dir = Some(dir.join(name));
                    cells.push(Cell {
                        task: task.clone(),
                        arm: arm.label(),
                        seed: *seed,
                        config: cfg,
                    });
                }
            }
        }
    }
    Ok(cells)
}

/// Where a cell stands on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellState {
    /// Not started (or stopped before its first step): train from scratch.
    New,
    /// Stopped after some steps: resume from its latest checkpoint.
    Partial,
    /// `summary.json` written: skipped.
    Done,
}

/// The state of `cell`, refusing a directory that holds a run of a different config (a changed
/// command line pointed at an old `--out`).
pub fn state(cell: &Cell) -> Result<CellState> {
    let dir = cell.dir();
    let cfg_path = dir.join("config.toml");
    if !dir.join("metrics.jsonl").exists() {
        return Ok(if dir.join("summary.json").exists() {
            CellState::Done
        } else {
            CellState::New
        });
    }
    let old = Config::load(Some(&cfg_path), &[])
        .with_context(|| format!("{} holds a run without a readable config", dir.display()))?;
    // A run records its automatic choices (threads, device) resolved: compare like with like.
    let (old, _) = fulcrum_train::resolve_runtime(&old)?;
    let (mut new, _) = fulcrum_train::resolve_runtime(&cell.config)?;
    // So does the sandbox of a run that scores code: `auto` is what the run resolved it to.
    if new.sandbox == fulcrum_tasks::SandboxChoice::Auto {
        new.sandbox = old.sandbox;
    }
    if old.to_toml() != new.to_toml() {
        anyhow::bail!(
            "{} holds a run with a different config than this command asks for; \
             use another --out, or the original command to resume it",
            dir.display()
        );
    }
    Ok(if dir.join("summary.json").exists() {
        CellState::Done
    } else {
        CellState::Partial
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_specs_keep_their_own_settings_together() -> Result<()> {
        let specs = split_task_specs(
            "--tasks",
            &[
                "countdown:difficulty=2,length=0.5,lists,steps:mistake_rate=0.1".into(),
                "arithmetic".into(),
            ],
        )?;
        assert_eq!(
            specs,
            [
                "countdown:difficulty=2,length=0.5",
                "lists",
                "steps:mistake_rate=0.1",
                "arithmetic"
            ]
        );
        Ok(())
    }

    #[test]
    fn bad_task_specs_are_errors() {
        // A bare path to a data file is the jsonl task on it, its settings following.
        let specs = split_task_specs(
            "--tasks",
            &["arithmetic,data/my.jsonl,reward=plus-minus,train.parquet".into()],
        )
        .unwrap();
        assert_eq!(
            specs,
            vec![
                "arithmetic",
                "jsonl:path=data/my.jsonl,reward=plus-minus",
                "jsonl:path=train.parquet"
            ]
        );
        assert!(split_task_specs("--tasks", &["difficulty=2".into()]).is_err());
        assert!(split_task_specs("--tasks", &["lists:colour=red".into()]).is_err());
    }

    #[test]
    fn task_overrides_quote_strings() {
        assert_eq!(
            task_overrides("jsonl:path=data/my tasks.jsonl,reward=plus-minus"),
            [
                "task.name=\"jsonl\"",
                "task.path=\"data/my tasks.jsonl\"",
                "task.reward=\"plus-minus\""
            ]
        );
        assert_eq!(task_label("jsonl:path=a/b.jsonl"), "jsonl-path=a_b.jsonl");
    }

    #[test]
    fn a_loss_grid_names_every_rule_and_loss_and_a_rule_grid_keeps_its_names() -> Result<()> {
        let out = Path::new("/tmp/unused");
        let rules = ["ba".to_string(), "token".to_string()];
        let losses = ["ppo".to_string(), "gspo".to_string()];
        let tasks = ["arithmetic".to_string()];
        let mut axes = Axes {
            tasks: &tasks,
            rules: &rules,
            losses: &losses,
            seeds: &[3],
        };
        let cells = plan(None, &[], &axes, Some(2), out)?;
        let names: Vec<(String, String, fulcrum_core::PolicyLoss)> = cells
            .iter()
            .map(|c| {
                let dir = c.dir().file_name().unwrap().to_string_lossy().into_owned();
                (dir, c.arm.clone(), c.config.ppo.loss)
            })
            .collect();
        use fulcrum_core::PolicyLoss::{Gspo, Ppo};
        assert_eq!(
            names,
            [
                ("ba-ppo-seed3".into(), "ba+ppo".into(), Ppo),
                ("token-ppo-seed3".into(), "token+ppo".into(), Ppo),
                ("ba-gspo-seed3".into(), "ba+gspo".into(), Gspo),
                ("token-gspo-seed3".into(), "token+gspo".into(), Gspo),
            ]
        );
        axes.losses = &[];
        let cells = plan(None, &[], &axes, Some(2), out)?;
        assert_eq!(cells[0].dir().file_name().unwrap(), "ba-seed3");
        assert_eq!(cells[0].arm, "ba");
        Ok(())
    }

    #[test]
    fn loss_grids_contrast_rules_within_a_loss_and_losses_within_a_rule() {
        use crate::results::summary::contrast_pairs;
        let arms: Vec<String> = ["ba+ppo", "token+ppo", "ba+gspo", "token+gspo"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let pairs: Vec<(String, String)> = contrast_pairs(&arms);
        let want = [
            ("ba+ppo", "token+ppo"),
            ("ba+gspo", "token+gspo"),
            ("ba+gspo", "ba+ppo"),
            ("token+gspo", "token+ppo"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(pairs, want);
        let rules: Vec<String> = ["token", "seq", "ba"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            contrast_pairs(&rules),
            [
                ("token".to_string(), "seq".to_string()),
                ("ba".to_string(), "token".to_string()),
                ("ba".to_string(), "seq".to_string())
            ]
        );
    }
}
