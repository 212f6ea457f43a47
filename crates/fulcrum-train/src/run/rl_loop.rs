//! The GRPO loop of a run (nanoGPT's outer loop with its "once in a while" `if`s), in stages:
//! take a step ([`RlLoop::take_step`]), record it, evaluate and checkpoint when they are due,
//! and at the end write the final checkpoint and `summary.json` ([`RlLoop::finish`]).
//!
//! Every rank of a data-parallel job runs it; rank 0 alone writes the run's files and reports
//! events. Whether to checkpoint is decided from the schedule and the signal, never from the
//! disk, because every rank takes part in saving a sharded optimizer; a signal that reaches the
//! ranks at different steps stops them together.
//!
//! A signal also cuts short what the loop waits on ([`TrainError::Stopped`]): a step waiting on
//! the engines is abandoned whole and the policy it started from (the previous step's) is
//! checkpointed; an evaluation is abandoned unrecorded, the step's checkpoint is written, and
//! the resumed run evaluates that step first. Either way the resumed run ends as the
//! uninterrupted one would.

use std::path::Path;
use std::time::Instant;

use fulcrum_model::ModelSpec;
use fulcrum_tasks::Task;

use super::resume::CheckpointMeta;
use super::run_dir::{has_eval, record_eval, write_summary, RunSummary};
use crate::checkpoint;
use crate::config::Config;
use crate::data::DataStream;
use crate::engine::RolloutEngine;
use crate::error::TrainError;
use crate::eval::{evaluate, evaluate_configured, EvalResult, EvalSettings};
use crate::event::Event;
use crate::interrupt::stop_requested;
use crate::metrics::{Dashboards, JsonlWriter, LengthsBySign, StepMetrics};
use crate::policy::{rl_schedule, Policy};
use crate::ranks::Ranks;
use crate::step::{grpo_step, StepReport};

/// What a run is, as the loop reads it.
pub struct RunParts<'a> {
    pub cfg: &'a Config,
    pub dir: &'a Path,
    pub model: &'a ModelSpec,
    pub task: &'a dyn Task,
    pub eval_task: &'a dyn Task,
}

/// Where the loop starts: the policy, the prompt stream and the steps already taken.
pub struct LoopStart {
    pub policy: Policy,
    pub data: DataStream,
    pub step: u64,
    pub sft_accuracy: Option<f64>,
    /// When the run (or this resume of it) started.
    pub t0: Instant,
    /// TensorBoard and W&B, opened before the warm-up (rank 0).
    pub dashboards: Option<Dashboards>,
}

/// The loop's state between steps.
struct RlLoop<'a, 'o> {
    run: &'a RunParts<'a>,
    ranks: &'a mut Ranks,
    on: &'o mut dyn FnMut(Event<'_>),
    policy: Policy,
    data: DataStream,
    engine: RolloutEngine,
    sft_accuracy: Option<f64>,
    /// `metrics.jsonl` and `samples.jsonl`, on rank 0 only.
    writers: Option<(JsonlWriter, JsonlWriter)>,
    /// TensorBoard and W&B (rank 0).
    dashboards: Option<Dashboards>,
    skips: SkipGuard,
    last_eval: Option<EvalResult>,
    /// The evaluation of the latest step was cut short by a signal (not recorded).
    eval_cut: bool,
    sample_tokens: f64,
    sample_secs: f64,
}

/// Steps `start.step + 1 ..= steps` of the run, then the final checkpoint and `summary.json`.
pub fn rl_loop(
    run: &RunParts<'_>,
    ranks: &mut Ranks,
    start: LoopStart,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<RunSummary, TrainError> {
    let cfg = run.cfg;
    let main = ranks.is_main();
    let mut quiet = |_: Event<'_>| {};
    let on: &mut dyn FnMut(Event<'_>) = if main { on } else { &mut quiet };
    // Rank 0 writes the run's streams; the other ranks write nothing.
    let writers = if main {
        Some((
            JsonlWriter::append(&run.dir.join("metrics.jsonl"))?,
            JsonlWriter::append(&run.dir.join("samples.jsonl"))?,
        ))
    } else {
        None
    };
    let tools = crate::tools::ToolSetup::for_task(&cfg.task, cfg.rollout.max_turns);
    let policy = (&start.policy.model, run.model);
    let mut lp = RlLoop {
        engine: RolloutEngine::open(&cfg.rollout, run.dir, policy, main, tools)?,
        run,
        ranks,
        on,
        policy: start.policy,
        data: start.data,
        sft_accuracy: start.sft_accuracy,
        writers,
        dashboards: start.dashboards,
        skips: SkipGuard::new(cfg.max_consecutive_skips),
        last_eval: None,
        eval_cut: false,
        sample_tokens: 0.0,
        sample_secs: 0.0,
    };
    // A resumed run whose checkpointed step's evaluation was cut short does it first.
    if start.step > 0 && eval_due(cfg, start.step) && !has_eval(run.dir, start.step)? {
        lp.evaluate(start.step)?;
    }
    let lr = rl_schedule(&cfg.optim, cfg.steps);
    for step in start.step + 1..=cfg.steps {
        let before = lp.meta(step - 1);
        let report = match lp.take_step(step, lr.lr(step - 1)) {
            Err(TrainError::Stopped { during }) => {
                return Err(lp.stop_mid_step(step, before, &during))
            }
            other => other?,
        };
        lp.record(step, &report)?;
        if eval_due(cfg, step) {
            lp.evaluate(step)?;
        }
        lp.checkpoint_if_due(step)?;
    }
    lp.finish(start.t0)
}

/// Whether step `step` is evaluated: every `eval_every` steps and at the last.
fn eval_due(cfg: &Config, step: u64) -> bool {
    (cfg.eval_every > 0 && step.is_multiple_of(cfg.eval_every)) || step == cfg.steps
}

impl RlLoop<'_, '_> {
    /// One GRPO step at rate `rate`; a step where nothing could be sampled is skipped as a
    /// whole, with its reason.
    fn take_step(&mut self, step: u64, rate: f64) -> Result<StepReport, TrainError> {
        let cfg = self.run.cfg;
        let report = grpo_step(
            &mut self.engine,
            &mut self.policy,
            self.ranks,
            self.run.task,
            cfg,
            step,
            &mut self.data,
            rate,
        );
        match report {
            Ok(r) => Ok(r),
            Err(TrainError::Model(e @ fulcrum_model::ModelError::NonFiniteLogits)) => {
                eprintln!("fulcrum: step {step} skipped: {e}");
                Ok(StepReport {
                    metrics: StepMetrics::skipped_step(step, rate, e.to_string()),
                    samples: Vec::new(),
                    lengths: LengthsBySign::default(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// The step's warnings, its skip (counted in a row), its metrics line and samples (rank
    /// 0), and its event.
    fn record(&mut self, step: u64, report: &StepReport) -> Result<(), TrainError> {
        for w in self.engine.take_warnings() {
            eprintln!("fulcrum: step {step}: {w}");
        }
        self.skips
            .record(step, report.metrics.skipped, self.run.dir)?;
        self.sample_tokens += report.metrics.sample_tokens as f64;
        self.sample_secs += report.metrics.time_sample;
        if let Some((metrics, samples)) = self.writers.as_mut() {
            let line =
                serde_json::to_value(&report.metrics).map_err(|source| TrainError::Encode {
                    what: format!("the metrics of step {step}"),
                    source,
                })?;
            metrics.write(&line)?;
            for x in &report.samples {
                samples.write(x)?;
            }
            if let Some(d) = self.dashboards.as_mut() {
                d.step(&line, &report.lengths);
            }
        }
        (self.on)(Event::Step {
            step,
            total: self.run.cfg.steps,
            metrics: &report.metrics,
        });
        Ok(())
    }

    /// The held-out evaluation of step `step`, on rank 0. One cut short by a signal is left
    /// unrecorded; the checkpoint that follows stops the run ([`RlLoop::checkpoint_if_due`]).
    fn evaluate(&mut self, step: u64) -> Result<(), TrainError> {
        if !self.ranks.is_main() {
            return Ok(());
        }
        let result = match evaluate_configured(&self.policy.model, self.run.eval_task, self.run.cfg)
        {
            Err(TrainError::Stopped { .. }) => {
                self.eval_cut = true;
                return Ok(());
            }
            other => other?,
        };
        let rec = record_eval(self.run.dir, step, None, &result)?;
        if let Some(d) = self.dashboards.as_mut() {
            d.eval(&rec);
        }
        (self.on)(Event::Eval {
            step,
            result: &result,
        });
        self.last_eval = Some(result);
        Ok(())
    }

    /// The meta of a checkpoint written now. A draw sampling ahead (`rollout.overlap`) has
    /// taken prompts not yet trained on: the checkpoint resumes the stream before them.
    fn meta(&self, step: u64) -> CheckpointMeta {
        let at = self
            .engine
            .resume_position()
            .unwrap_or(self.data.position());
        CheckpointMeta::new(step, at, self.sft_accuracy, self.run.cfg)
    }

    /// A checkpoint when the schedule asks for one, or when a stop was requested (then the run
    /// ends here with [`TrainError::Interrupted`]).
    fn checkpoint_if_due(&mut self, step: u64) -> Result<(), TrainError> {
        let cfg = self.run.cfg;
        let due = (cfg.checkpoint_every > 0 && step.is_multiple_of(cfg.checkpoint_every))
            || step == cfg.steps;
        // A signal may reach the ranks at different steps: they stop together.
        let stop = self.ranks.sum(&[f64::from(u8::from(stop_requested()))])?[0] > 0.0;
        let interrupted = stop && (step < cfg.steps || self.eval_cut);
        if !(due || interrupted) {
            return Ok(());
        }
        let meta = self.meta(step).to_json()?;
        let dest = checkpoint::save_step(
            &self.run.dir.join("checkpoints"),
            step,
            &self.policy,
            self.ranks,
            meta,
            cfg.checkpoint_keep,
        )?;
        (self.on)(Event::Checkpoint { path: &dest });
        if interrupted {
            let cut = if self.eval_cut {
                format!("the evaluation of step {step} was cut short and is not recorded (the resumed run does it first); ")
            } else {
                String::new()
            };
            return Err(TrainError::Interrupted {
                phase: "GRPO",
                step,
                hint: format!(
                    "{cut}checkpoint {} written; continue with `fulcrum train --resume {}`",
                    dest.display(),
                    self.run.dir.display()
                ),
            });
        }
        Ok(())
    }

    /// Step `step` was cut short by a signal while waiting (on the engines): nothing of it is
    /// kept. The policy is still step `step - 1`'s, which is checkpointed with `before` (the
    /// meta it would have had) unless that checkpoint exists; returns the error that ends the
    /// run. (Engine rollouts run in one process, so no other rank waits on a collective.)
    fn stop_mid_step(&mut self, step: u64, before: CheckpointMeta, during: &str) -> TrainError {
        let last = step - 1;
        let ckpts = self.run.dir.join("checkpoints");
        let dest = ckpts.join(format!("step-{last}"));
        let saved = if dest.exists() {
            Ok(dest)
        } else {
            before.to_json().and_then(|meta| {
                let keep = self.run.cfg.checkpoint_keep;
                checkpoint::save_step(&ckpts, last, &self.policy, self.ranks, meta, keep)
            })
        };
        let dest = match saved {
            Ok(d) => d,
            Err(e) => return e,
        };
        (self.on)(Event::Checkpoint { path: &dest });
        TrainError::Interrupted {
            phase: "GRPO",
            step: last,
            hint: format!(
                "step {step} was cut short while {during}, and nothing of it is kept; checkpoint \
                 {} written; continue with `fulcrum train --resume {}`",
                dest.display(),
                self.run.dir.display()
            ),
        }
    }

    /// The final checkpoint, the final accuracy (rank 0's, shared with every rank) and
    /// `summary.json`.
    fn finish(mut self, t0: Instant) -> Result<RunSummary, TrainError> {
        let (cfg, dir) = (self.run.cfg, self.run.dir);
        let meta = self.meta(cfg.steps).to_json()?;
        let final_dir = dir.join("checkpoints").join("final");
        let exports = crate::export::ExportPlan::of(cfg, self.run.model);
        crate::export::save_final(&final_dir, &self.policy, self.ranks, meta, &exports)?;
        let main = self.ranks.is_main();
        // Rank 0 evaluates; every rank reports its accuracy (the others add 0).
        let final_accuracy = match (self.last_eval.take(), main) {
            (_, false) => 0.0,
            (Some(r), true) => r.accuracy,
            (None, true) => {
                let es = EvalSettings::of(cfg);
                evaluate(&self.policy.model, self.run.eval_task, &es)?.accuracy
            }
        };
        let final_accuracy = self.ranks.sum(&[final_accuracy])?[0];
        let summary = RunSummary {
            run_dir: dir.to_path_buf(),
            rule: cfg.rule.name().to_string(),
            loss: cfg.ppo.loss.name().to_string(),
            seed: cfg.seed,
            sft_accuracy: self.sft_accuracy,
            final_accuracy,
            steps: cfg.steps,
            wall_seconds: t0.elapsed().as_secs_f64(),
            sample_tokens_per_s: self.sample_tokens / self.sample_secs.max(1e-9),
        };
        if main {
            write_summary(dir, &summary)?;
        }
        if let Some(d) = self.dashboards.take() {
            d.finish(serde_json::to_value(&summary).unwrap_or_default());
        }
        self.ranks.barrier()?;
        Ok(summary)
    }
}

/// Counts the steps skipped in a row (non-finite logits, loss or gradient) and stops the run
/// once there are `limit` of them (0: never): a policy that keeps producing non-finite numbers
/// has diverged, and more steps would only repeat the failure.
struct SkipGuard {
    limit: u64,
    in_a_row: u64,
}

impl SkipGuard {
    fn new(limit: u64) -> Self {
        SkipGuard { limit, in_a_row: 0 }
    }

    fn record(&mut self, step: u64, skipped: bool, run_dir: &Path) -> Result<(), TrainError> {
        self.in_a_row = if skipped { self.in_a_row + 1 } else { 0 };
        if self.limit > 0 && self.in_a_row >= self.limit {
            return Err(TrainError::TooManySkips {
                step,
                in_a_row: self.in_a_row,
                limit: self.limit,
                checkpoints: run_dir.join("checkpoints"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_stops_after_the_configured_number_of_skips_in_a_row() {
        let dir = Path::new("r");
        let mut g = SkipGuard::new(3);
        for (step, skipped) in [(1, true), (2, true), (3, false), (4, true), (5, true)] {
            g.record(step, skipped, dir).unwrap();
        }
        let err = g.record(6, true, dir).unwrap_err().to_string();
        assert!(
            err.contains("stopped at step 6") && err.contains("3 steps in a row"),
            "{err}"
        );
        let mut never = SkipGuard::new(0);
        for step in 1..100 {
            never.record(step, true, dir).unwrap();
        }
    }
}
