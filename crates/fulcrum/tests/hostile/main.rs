//! What a hostile or careless user can type, class by class: every case asserts the exit status,
//! that no panic message appears, that the culprit (key, file, line, field) is named, and that
//! nothing already recorded was lost. Every case runs in the default suite in seconds (the
//! 10 MB prompt included: it is refused before it is encoded).
//!
//! One module per class of failure: `run_dirs` (runs that would destroy each other),
//! `validation` (checked before anything is allocated), `disk` (trusting what is on disk),
//! `errors` (errors that name the right thing), `engines` (servers that hang, and signals).

use std::path::Path;
use std::process::{Command, Output};

mod disk;
mod engines;
mod errors;
mod run_dirs;
mod validation;

/// A small, fast training config on the built-in model (a few seconds a run).
pub const SMALL: &[&str] = &[
    "--set",
    "steps=3",
    "--set",
    "checkpoint_every=1",
    "--set",
    "eval_every=0",
    "--set",
    "sft.steps=4",
    "--set",
    "sft.batch_size=8",
    "--set",
    "rollout.prompts_per_step=2",
    "--set",
    "rollout.group_size=4",
    "--set",
    "rollout.max_response_len=16",
    "--set",
    "eval.prompts=4",
    "--set",
    "task.difficulty=1",
    "--set",
    "threads=1",
];

/// `fulcrum ARGS` in `cwd`.
pub fn fulcrum(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("the fulcrum binary runs")
}

/// `fulcrum train --quiet` with the small config, then `extra`.
pub fn train(cwd: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["train", "--quiet"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    fulcrum(cwd, &args)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The command was refused as bad input: exit status 2, no panic, and every one of `names` in
/// its message.
#[track_caller]
pub fn refused(o: &Output, names: &[&str]) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "exit status {:?}: {e}", o.status);
    assert!(!e.contains("panicked"), "a panic: {e}");
    for n in names {
        assert!(e.contains(n), "{n:?} is not named in: {e}");
    }
}

/// The command succeeded, with no panic message.
#[track_caller]
pub fn succeeded(o: &Output) {
    let e = stderr(o);
    assert!(o.status.success(), "exit status {:?}: {e}", o.status);
    assert!(!e.contains("panicked"), "a panic: {e}");
}
