//! Progress of the long commands (`train`, `sft`, `compare`) on stderr: indicatif's bar on a
//! terminal; without one (a log file, a CI job, a scheduler's output), a plain line now and then
//! (at the first and the last position, and at most every [`LINE_EVERY`] in between), so a run
//! that is not watched on a terminal still says where it is and how long it has left. `--quiet`
//! turns both off; log lines ([`Progress::say`]) go above the bar, or plainly, always.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The most time between two plain progress lines.
pub const LINE_EVERY: Duration = Duration::from_secs(10);

/// Where a phase started, for its rate and its time left.
struct Phase {
    name: String,
    started: Instant,
    start_pos: u64,
    last_line: Option<Instant>,
}

/// A progress display on stderr (see the module documentation).
pub struct Progress {
    bar: ProgressBar,
    /// Plain lines instead of the bar (stderr is not a terminal).
    plain: bool,
    phase: Mutex<Option<Phase>>,
}

impl Progress {
    /// A bar when stderr is a terminal, plain lines otherwise, nothing with `quiet`.
    pub fn new(quiet: bool) -> Progress {
        Progress::with_terminal(quiet, std::io::stderr().is_terminal())
    }

    fn with_terminal(quiet: bool, terminal: bool) -> Progress {
        let target = if quiet || !terminal {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>5} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Progress {
            bar,
            plain: !quiet && !terminal,
            phase: Mutex::new(None),
        }
    }

    /// Phase `name` is at `pos` of `total`, with `message` (the step's numbers).
    pub fn set(&self, name: &str, pos: u64, total: u64, message: String) {
        self.bar.set_prefix(name.to_string());
        self.bar.set_length(total);
        self.bar.set_position(pos);
        self.show(name, pos, total, message);
    }

    /// One phase over the whole command (`compare`'s grid): `delta` more done, of `total`.
    pub fn advance(&self, name: &str, delta: u64, total: u64, message: String) {
        self.bar.set_prefix(name.to_string());
        self.bar.set_length(total);
        self.bar.inc(delta);
        self.show(name, self.bar.position(), total, message);
    }

    /// A log line (an evaluation, a finished run): above the bar, else plainly, with `--quiet`
    /// too (it silences progress, not what happened; a hidden bar would drop the line).
    pub fn say(&self, line: String) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn show(&self, name: &str, pos: u64, total: u64, message: String) {
        self.bar.set_message(message.clone());
        if !self.plain {
            return;
        }
        let now = Instant::now();
        let mut guard = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_none_or(|p| p.name != name) {
            // The phase starts where its first report finds it: a resumed run's first step.
            *guard = Some(Phase {
                name: name.to_string(),
                started: now,
                start_pos: pos.saturating_sub(1),
                last_line: None,
            });
        }
        let Some(phase) = guard.as_mut() else { return };
        let due = phase
            .last_line
            .is_none_or(|t| now.duration_since(t) >= LINE_EVERY)
            || pos >= total;
        if !due {
            return;
        }
        phase.last_line = Some(now);
        let elapsed = now.duration_since(phase.started).as_secs_f64();
        let done = pos.saturating_sub(phase.start_pos).max(1) as f64;
        let left = elapsed / done * total.saturating_sub(pos) as f64;
        eprintln!("{}", line(name, pos, total, &message, elapsed, left));
    }
}

/// One plain progress line.
fn line(name: &str, pos: u64, total: u64, message: &str, elapsed: f64, left: f64) -> String {
    let numbers = if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    };
    format!(
        "{name} {pos}/{total}{numbers}, {} elapsed, ~{} left",
        clock(elapsed),
        clock(left)
    )
}

/// `1h02m03s`, `4m05s`, `6s`.
pub fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_line_says_where_the_phase_is_and_how_long_it_has_left() {
        assert_eq!(
            line("grpo", 12, 60, "reward 0.412", 62.0, 248.0),
            "grpo 12/60: reward 0.412, 1m02s elapsed, ~4m08s left"
        );
        assert_eq!(
            line("sft", 1, 2, "", 6.2, 6.2),
            "sft 1/2, 6s elapsed, ~6s left"
        );
        assert_eq!(clock(3723.0), "1h02m03s");
    }

    #[test]
    fn without_a_terminal_lines_are_plain_and_quiet_silences_them() {
        let p = Progress::with_terminal(false, false);
        assert!(p.plain && p.bar.is_hidden());
        let q = Progress::with_terminal(true, false);
        assert!(!q.plain && q.bar.is_hidden());
        // The phase's first position is due at once, the next one within LINE_EVERY is not.
        p.set("grpo", 1, 3, String::new());
        let first = p.phase.lock().unwrap().as_ref().and_then(|ph| ph.last_line);
        p.set("grpo", 2, 3, String::new());
        let second = p.phase.lock().unwrap().as_ref().and_then(|ph| ph.last_line);
        assert!(first.is_some() && first == second);
        p.set("grpo", 3, 3, String::new());
        let last = p.phase.lock().unwrap().as_ref().and_then(|ph| ph.last_line);
        assert_ne!(last, first, "the last position always gets its line");
    }
}
