//! The code reward: extract Python from a response, run it against tests in the sandbox.
//!
//! [`extract_code`] takes the last ```` ```python ```` block of a response (else the last fenced
//! block, else the whole response). [`TestSpec`] is how the tests are given: assert statements
//! (MBPP), a `check(candidate)` function plus an entry point (HumanEval, LeetCode), or stdin /
//! stdout cases (Codeforces). [`CodeRunner`] runs programs in `crate::sandbox` with a bounded number
//! at a time, and turns each run into an [`Outcome`] with a pass fraction and a reason.
//!
//! A program passes only if the test code ran to its end: the harness prints a sentinel line
//! after the tests, so a program that calls `sys.exit(0)` or `os._exit(0)` before the tests
//! fails. (A program that reads its own source to find and print the sentinel could fool this;
//! that is a reward hack to look for in samples, not a sandbox escape.)
//!
//! Which sandbox runs the programs is chosen once per process (`crate::sandbox`'s
//! `sandbox_in_use`: a config key or flag via `set_sandbox_choice`, else `FULCRUM_SANDBOX`,
//! else `auto`). When no mode that contains file writes, network and processes works, code
//! rewards are refused: every code response scores 0 with the reason, which names what is
//! missing and how to get it. `spec.rs` holds [`TestSpec`] and the check that a test can fail.

use std::sync::{Condvar, Mutex};

use crate::sandbox::{run_python, sandbox_in_use, RunOutput, SandboxConfig, SandboxError};

mod spec;

pub use spec::{SpecField, SpecProblem, TestSpec};

/// The line the harness prints after the tests ran.
const SENTINEL: &str = "__fulcrum_tests_passed__";

/// The code in a model response: the last ```` ```python ```` block, else the last fenced
/// block, else the whole response.
pub fn extract_code(response: &str) -> String {
    let mut python = None;
    let mut any = None;
    let mut rest = response;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let (lang, body_start) = match after.find('\n') {
            Some(nl) => (after[..nl].trim(), nl + 1),
            None => break,
        };
        let body = &after[body_start..];
        let Some(close) = body.find("```") else {
            // An unclosed block runs to the end (the model hit its length limit).
            let code = body.to_string();
            if lang.eq_ignore_ascii_case("python") || lang.eq_ignore_ascii_case("py") {
                python = Some(code.clone());
            }
            any = Some(code);
            break;
        };
        let code = body[..close].to_string();
        if lang.eq_ignore_ascii_case("python")
            || lang.eq_ignore_ascii_case("py")
            || lang == "python3"
        {
            python = Some(code.clone());
        }
        any = Some(code);
        rest = &body[close + 3..];
    }
    python.or(any).unwrap_or_else(|| response.to_string())
}

/// The result of testing one program.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// All tests passed.
    pub passed: bool,
    /// Fraction of cases passed (0 or 1 for assert and check tests).
    pub fraction: f64,
    /// A short reason (which case failed, the last line of the error, the limit hit).
    pub reason: String,
}

fn describe_failure(out: &RunOutput) -> String {
    if out.timed_out {
        return "timeout".into();
    }
    if out.output_overflow {
        return "output limit exceeded".into();
    }
    let last = out
        .stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let last: String = last.chars().take(120).collect();
    match out.exit_code {
        Some(0) => "tests did not run to the end".into(),
        // bwrap and the namespaces mode report a child killed by signal n as exit 128 + n.
        Some(c) if c > 128 && out.stderr.trim().is_empty() => signal_reason(c - 128),
        Some(c) => format!("exit {c}: {last}"),
        None => out.signal.map_or_else(|| "killed".into(), signal_reason),
    }
}

fn signal_reason(sig: i32) -> String {
    match sig {
        libc::SIGXCPU => "CPU time limit (SIGXCPU)".into(),
        libc::SIGKILL => "killed (SIGKILL: CPU time or memory limit)".into(),
        libc::SIGXFSZ => "file size limit (SIGXFSZ)".into(),
        libc::SIGSEGV => "crashed (SIGSEGV)".into(),
        n => format!("killed by signal {n}"),
    }
}

/// Runs programs in the sandbox, at most `workers` at a time.
#[derive(Debug)]
pub struct CodeRunner {
    config: SandboxConfig,
    workers: usize,
    busy: Mutex<usize>,
    free: Condvar,
    /// Set when no sandbox works: every program is refused with this reason.
    refused: Option<String>,
}

/// How a sandbox that failed to start for want of processes or namespaces says so (bwrap's
/// message, and the OS error text of the built-in modes).
const SANDBOX_EAGAIN: &str = "Resource temporarily unavailable";

impl CodeRunner {
    /// A runner with the given sandbox settings and concurrency bound (at least 1).
    pub fn new(config: SandboxConfig, workers: usize) -> Self {
        CodeRunner {
            config,
            workers: workers.max(1),
            busy: Mutex::new(0),
            free: Condvar::new(),
            refused: None,
        }
    }

    /// A runner with default limits, this process's sandbox ([`sandbox_in_use`], printed
    /// once), and one worker per CPU; an error when no sandbox that contains programs works.
    pub fn try_detect() -> Result<Self, SandboxError> {
        let chosen = sandbox_in_use()?;
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        Ok(CodeRunner::new(
            SandboxConfig {
                mode: chosen.mode,
                ..SandboxConfig::default()
            },
            workers,
        ))
    }

    /// [`CodeRunner::try_detect`], or, when no sandbox works, a runner that refuses every
    /// program (score 0, the refusal as reason) rather than run it unconfined.
    /// The refusal is printed once per process.
    pub fn detect() -> Self {
        CodeRunner::try_detect().unwrap_or_else(|e| {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("fulcrum: {e}"));
            CodeRunner {
                refused: Some(e.to_string()),
                ..CodeRunner::new(SandboxConfig::default(), 1)
            }
        })
    }

    /// The sandbox settings.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// How many programs run at the same time at most.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Why this runner refuses every program, if it does.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// The same sandbox (or refusal) with another concurrency bound.
    pub fn with_workers(self, workers: usize) -> Self {
        CodeRunner {
            workers: workers.max(1),
            ..self
        }
    }

    /// The same sandbox (or refusal) with a wall-clock and CPU limit of `wall` per program.
    pub fn with_wall(mut self, wall: std::time::Duration) -> Self {
        self.config.wall = wall;
        self.config.cpu_seconds = wall.as_secs().max(1);
        self
    }

    /// Runs one program in the sandbox, at most [`CodeRunner::workers`] at a time; an error
    /// only when the sandbox could not run it (or refuses every program).
    pub fn run_program(&self, program: &str, stdin: &str) -> Result<RunOutput, String> {
        self.run_bounded(program, stdin)
    }

    fn run_bounded(&self, program: &str, stdin: &str) -> Result<RunOutput, String> {
        if let Some(why) = &self.refused {
            return Err(why.clone());
        }
        {
            let mut busy = self.busy.lock().map_err(|_| "runner lock poisoned")?;
            while *busy >= self.workers {
                busy = self.free.wait(busy).map_err(|_| "runner lock poisoned")?;
            }
            *busy += 1;
        }
        // A sandbox that could not even start because the kernel was short of processes or
        // namespaces for a moment (EAGAIN, e.g. right after another program's fork bomb was
        // killed) is started again, for up to two seconds, rather than scoring this program 0.
        let start = std::time::Instant::now();
        let out = loop {
            let out =
                run_python(&self.config, program, stdin).map_err(|e| format!("sandbox error: {e}"));
            let transient = match &out {
                Ok(o) => o.exit_code == Some(1) && o.stderr.contains(SANDBOX_EAGAIN),
                Err(e) => e.contains(SANDBOX_EAGAIN),
            };
            if !transient || start.elapsed() > std::time::Duration::from_secs(2) {
                break out;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        if let Ok(mut busy) = self.busy.lock() {
            *busy -= 1;
        }
        self.free.notify_one();
        out
    }

    /// Tests `code` (already extracted) against `spec`.
    pub fn run_code(&self, code: &str, spec: &TestSpec) -> Outcome {
        match spec {
            TestSpec::Asserts(test) | TestSpec::Check { test, .. } => {
                let call = match spec {
                    TestSpec::Check { entry_point, .. } => format!("check({entry_point})\n"),
                    _ => String::new(),
                };
                let program = format!("{code}\n\n{test}\n\n{call}print({SENTINEL:?})\n");
                match self.run_bounded(&program, "") {
                    Err(reason) => Outcome {
                        passed: false,
                        fraction: 0.0,
                        reason,
                    },
                    Ok(out) => {
                        let ran = out.stdout.lines().any(|l| l.trim() == SENTINEL);
                        let ok = out.success() && ran;
                        Outcome {
                            passed: ok,
                            fraction: if ok { 1.0 } else { 0.0 },
                            reason: if ok {
                                "all tests passed".into()
                            } else {
                                describe_failure(&out)
                            },
                        }
                    }
                }
            }
            TestSpec::Stdio(cases) => {
                let mut passed = 0;
                let mut first_fail = None;
                for (i, (input, expected)) in cases.iter().enumerate() {
                    let verdict = match self.run_bounded(code, input) {
                        Err(reason) => Err(reason),
                        Ok(out) if !out.success() => Err(describe_failure(&out)),
                        Ok(out) => {
                            let got: Vec<&str> = out.stdout.split_whitespace().collect();
                            let want: Vec<&str> = expected.split_whitespace().collect();
                            if got == want {
                                Ok(())
                            } else {
                                Err("wrong output".into())
                            }
                        }
                    };
                    match verdict {
                        Ok(()) => passed += 1,
                        Err(e) => {
                            first_fail.get_or_insert(format!("case {}: {e}", i + 1));
                        }
                    }
                }
                let n = cases.len().max(1);
                Outcome {
                    passed: passed == cases.len() && !cases.is_empty(),
                    fraction: passed as f64 / n as f64,
                    reason: first_fail
                        .unwrap_or_else(|| format!("{passed}/{} cases passed", cases.len())),
                }
            }
        }
    }

    /// Extracts the code of a model response and tests it.
    pub fn run_response(&self, response: &str, spec: &TestSpec) -> Outcome {
        self.run_code(&extract_code(response), spec)
    }

    /// Tests many programs, using up to the runner's worker count in parallel; results in
    /// input order.
    pub fn run_many(&self, jobs: &[(String, TestSpec)]) -> Vec<Outcome> {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; jobs.len()]);
        std::thread::scope(|s| {
            for _ in 0..self.workers.min(jobs.len()) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some((code, spec)) = jobs.get(i) else {
                        break;
                    };
                    let o = self.run_code(code, spec);
                    if let Ok(mut r) = results.lock() {
                        r[i] = Some(o);
                    }
                });
            }
        });
        results
            .into_inner()
            .unwrap_or_default()
            .into_iter()
            .map(|o| {
                o.unwrap_or(Outcome {
                    passed: false,
                    fraction: 0.0,
                    reason: "not run".into(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_python_block_is_extracted() {
        let r = "text\n```python\na = 1\n```\nmore\n```\nplain\n```\n```python\nb = 2\n```\n";
        assert_eq!(extract_code(r), "b = 2\n");
        assert_eq!(extract_code("```\nx = 1\n```"), "x = 1\n");
        assert_eq!(extract_code("def f(): pass"), "def f(): pass");
        assert_eq!(
            extract_code("```python\ndef f():\n    return 1\n"),
            "def f():\n    return 1\n"
        );
    }

    fn refused(answer: &str, entry_point: Option<&str>) -> SpecProblem {
        match TestSpec::checked(answer, entry_point) {
            Ok(spec) => panic!("{answer:?} accepted as {spec:?}"),
            Err(p) => p,
        }
    }

    #[test]
    fn tests_that_cannot_fail_are_refused() {
        use SpecField::{EntryPoint, Tests};
        for (answer, ep, field, want) in [
            ("", None, Tests, "empty"),
            ("   \n", Some("f"), Tests, "empty"),
            // Nothing that can fail, once comments and strings are set aside.
            ("x = f(1)\n", None, Tests, "no assertion"),
            ("# assert f(1) == 2\npass\n", None, Tests, "no assertion"),
            (
                "'''assert f(1) == 2'''\n\"assert\"\n",
                None,
                Tests,
                "no assertion",
            ),
            ("print(r'raise it')", None, Tests, "no assertion"),
            // check(candidate) without the entry point it is called with never runs.
            (
                "def check(c):\n    assert c(1) == 2\n",
                None,
                EntryPoint,
                "missing",
            ),
            // An entry point whose tests define no check, or check nothing.
            ("assert f(1) == 2", Some("f"), Tests, "defines no `check`"),
            (
                "def check(candidate):\n    candidate(1)\n",
                Some("f"),
                Tests,
                "no assertion",
            ),
            (
                "def check(c):\n    assert c(1)\n",
                Some("f(); import os"),
                EntryPoint,
                "not a function name",
            ),
            // stdin/stdout cases.
            ("[]", None, Tests, "empty list of stdin/stdout cases"),
            ("[{\"input\": \"1\"}]", None, Tests, "case 1"),
            (
                "[{\"input\": \"1\", \"output\": \" \\n\"}]",
                None,
                Tests,
                "empty output",
            ),
        ] {
            let p = refused(answer, ep);
            assert_eq!(p.field, field, "{answer:?}: {p:?}");
            assert!(p.problem.contains(want), "{answer:?}: {p:?}");
        }
    }

    #[test]
    fn tests_that_can_fail_are_accepted_as_before() {
        for (answer, ep) in [
            ("assert add(1, 2) == 3", None),
            ("import math\nassert math.isclose(f(2), 4.0)", None),
            ("def check(c):\n    assert c(1) == 2\ncheck(f)\n", None),
            ("if f(1) != 2:\n    raise AssertionError('f')", None),
            (
                "class T:\n    def test(self):\n        self.assertEqual(f(1), 2)",
                None,
            ),
            (
                "METADATA = {}\n\ndef check(candidate):\n    assert candidate(1) == 2\n",
                Some("f"),
            ),
            (
                "def check(candidate):\n    assert candidate([1]) == 1\n",
                Some("Solution().maxSum"),
            ),
            ("[{\"input\": \"1 2\\n\", \"output\": \"3\\n\"}]", None),
        ] {
            let spec =
                TestSpec::checked(answer, ep).unwrap_or_else(|p| panic!("{answer:?}: {p:?}"));
            assert_eq!(spec, TestSpec::from_answer(answer, ep));
        }
    }

    #[test]
    fn entry_point_selects_check_spec() {
        assert!(matches!(
            TestSpec::from_answer("assert 1", None),
            TestSpec::Asserts(_)
        ));
        assert!(matches!(
            TestSpec::from_answer("def check(c): pass", Some("f")),
            TestSpec::Check { .. }
        ));
    }
}
