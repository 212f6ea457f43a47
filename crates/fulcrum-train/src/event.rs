//! What a run reports as it goes: the CLI draws its progress bars and log lines from these.

use std::path::Path;

use crate::eval::EvalResult;
use crate::metrics::StepMetrics;

/// What the loop reports as it goes (the CLI draws progress bars from these).
pub enum Event<'a> {
    Sft {
        step: u64,
        total: u64,
        loss: f64,
        /// SFT steps skipped so far by the non-finite guard.
        skipped: u64,
    },
    SftCached {
        path: &'a Path,
    },
    Eval {
        step: u64,
        result: &'a EvalResult,
    },
    Step {
        step: u64,
        total: u64,
        metrics: &'a StepMetrics,
    },
    Checkpoint {
        path: &'a Path,
    },
}
