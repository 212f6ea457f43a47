//! How a program is tested ([`TestSpec`]), and the check that its tests can fail: a test
//! without an assertion would give reward 1 to any program that runs (a reward hole), so it is
//! refused when the data is read.

/// How a program is tested.
#[derive(Debug, Clone, PartialEq)]
pub enum TestSpec {
    /// Test code run after the program (assert statements).
    Asserts(String),
    /// Test code defining `check(candidate)`, called with the program's `entry_point`.
    Check {
        /// The test code.
        test: String,
        /// The function under test.
        entry_point: String,
    },
    /// Input/output cases: each runs the program with `input` on stdin and compares stdout.
    Stdio(Vec<(String, String)>),
}

impl TestSpec {
    /// The spec for an `answer` field: `check(candidate)` when an entry point is given,
    /// stdin/stdout cases when the answer is a JSON list of `{"input", "output"}` objects,
    /// assert statements otherwise.
    pub fn from_answer(answer: &str, entry_point: Option<&str>) -> TestSpec {
        if entry_point.is_none() && answer.trim_start().starts_with('[') {
            if let Some(cases) = stdio_cases(answer) {
                return TestSpec::Stdio(cases);
            }
        }
        match entry_point {
            Some(ep) if !ep.trim().is_empty() => TestSpec::Check {
                test: answer.to_string(),
                entry_point: ep.trim().to_string(),
            },
            _ => TestSpec::Asserts(answer.to_string()),
        }
    }
}

/// Which field of a code item a [`SpecProblem`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecField {
    /// The tests (`answer` of a generic record, `test`, `test_list`, `tests`, ...).
    Tests,
    /// The function under test.
    EntryPoint,
}

/// Why a code item's tests are refused: they would reward any program that runs, or could
/// not test one at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    pub field: SpecField,
    pub problem: String,
}

impl SpecProblem {
    fn tests(problem: impl Into<String>) -> Self {
        SpecProblem {
            field: SpecField::Tests,
            problem: problem.into(),
        }
    }

    fn entry_point(problem: impl Into<String>) -> Self {
        SpecProblem {
            field: SpecField::EntryPoint,
            problem: problem.into(),
        }
    }
}

impl TestSpec {
    /// The spec of a code item read from data ([`TestSpec::from_answer`]), refused when it could
    /// not tell a right program from a wrong one: a program passes when its tests run to their
    /// end, so tests with nothing that can fail give reward 1 to any program that runs.
    ///
    /// - stdin/stdout cases (a JSON list, no entry point): at least one case, each
    ///   `{"input": string, "output": string}`, not every one expecting empty output;
    /// - with an entry point: a Python name (`add`, `Solution().maxSum`), and tests that
    ///   define `check` (the runner calls `check(<entry point>)`) and assert something;
    /// - assert statements: at least one assertion, and tests that define `check(candidate)`
    ///   need the entry point it is called with.
    ///
    /// An assertion is an `assert` statement, a `raise`, or a call of an `assert...` function
    /// (`self.assertEqual`, `np.testing.assert_allclose`), found outside comments and strings.
    pub fn checked(answer: &str, entry_point: Option<&str>) -> Result<TestSpec, SpecProblem> {
        if answer.trim().is_empty() {
            return Err(SpecProblem::tests("empty: no tests to run"));
        }
        let entry_point = entry_point.map(str::trim).filter(|e| !e.is_empty());
        if entry_point.is_none() && answer.trim_start().starts_with('[') {
            if let Ok(serde_json::Value::Array(cases)) = serde_json::from_str(answer) {
                return check_cases(&cases);
            }
        }
        let code = python_code_only(answer);
        let tokens = python_tokens(&code);
        let defines_check = tokens.windows(2).any(|w| w[0] == "def" && w[1] == "check");
        let asserts = tokens
            .iter()
            .any(|t| *t == "raise" || t.starts_with("assert"));
        match entry_point {
            Some(ep) => {
                if !is_entry_point(ep) {
                    return Err(SpecProblem::entry_point(format!(
                        "{ep:?} is not a function name (expected a Python name such as \
                         `add` or `Solution().add`)"
                    )));
                }
                if !defines_check {
                    return Err(SpecProblem::tests(format!(
                        "defines no `check` function: the runner calls `check({ep})`, so \
                         these tests would never run"
                    )));
                }
                if !asserts {
                    return Err(SpecProblem::tests(
                        "no assertion (no `assert` statement): any program that runs would pass",
                    ));
                }
            }
            None => {
                if !asserts {
                    return Err(SpecProblem::tests(
                        "no assertion (no `assert` statement): any program that runs would pass",
                    ));
                }
                let calls_check = (0..tokens.len()).any(|i| {
                    tokens[i] == "check"
                        && tokens.get(i + 1) == Some(&"(")
                        && (i == 0 || tokens[i - 1] != "def")
                });
                if defines_check && !calls_check {
                    return Err(SpecProblem::entry_point(
                        "missing: the tests define `check`, which runs only when called with \
                         the function under test (give its name as the entry point)",
                    ));
                }
            }
        }
        Ok(TestSpec::from_answer(answer, entry_point))
    }
}

/// stdin/stdout cases, as [`TestSpec::checked`] accepts them.
fn check_cases(cases: &[serde_json::Value]) -> Result<TestSpec, SpecProblem> {
    if cases.is_empty() {
        return Err(SpecProblem::tests(
            "an empty list of stdin/stdout cases: any program would pass",
        ));
    }
    let mut out = Vec::with_capacity(cases.len());
    for (i, c) in cases.iter().enumerate() {
        let field = |k: &str| c.get(k).and_then(serde_json::Value::as_str);
        match (field("input"), field("output")) {
            (Some(input), Some(output)) => out.push((input.to_string(), output.to_string())),
            _ => {
                return Err(SpecProblem::tests(format!(
                    "case {}: expected {{\"input\": string, \"output\": string}}",
                    i + 1
                )))
            }
        }
    }
    if out.iter().all(|(_, o)| o.trim().is_empty()) {
        return Err(SpecProblem::tests(
            "every stdin/stdout case expects empty output: a program that prints nothing would pass",
        ));
    }
    Ok(TestSpec::Stdio(out))
}

/// A Python name the harness can call `check` with: dotted names, each part optionally called
/// with no arguments (`add`, `mod.add`, `Solution().maxSum`).
fn is_entry_point(ep: &str) -> bool {
    ep.split('.').all(|part| {
        let name = part.strip_suffix("()").unwrap_or(part);
        let mut chars = name.chars();
        chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
            && chars.all(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Python source with comments removed and every string literal (any prefix, any quotes,
/// triple-quoted included) replaced by `""`, so that words inside them are not taken for code.
fn python_code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '"' || c == '\'' {
            let triple = i + 2 < chars.len() && chars[i + 1] == c && chars[i + 2] == c;
            i += if triple { 3 } else { 1 };
            while i < chars.len() {
                if chars[i] == '\\' {
                    i += 2;
                    continue;
                }
                if !triple && chars[i] == '\n' {
                    break;
                }
                let closes = chars[i] == c
                    && (!triple || (i + 2 < chars.len() && chars[i + 1] == c && chars[i + 2] == c));
                if closes {
                    i += if triple { 3 } else { 1 };
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The words and single punctuation characters of Python code (after [`python_code_only`]).
fn python_tokens(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in code.char_indices() {
        let word = c.is_alphanumeric() || c == '_';
        match (word, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push(&code[s..i]);
                start = None;
            }
            _ => {}
        }
        if !word && !c.is_whitespace() {
            out.push(&code[i..i + c.len_utf8()]);
        }
    }
    if let Some(s) = start {
        out.push(&code[s..]);
    }
    out
}

/// Parses `[{"input": .., "output": ..}, ...]`.
fn stdio_cases(answer: &str) -> Option<Vec<(String, String)>> {
    let v: serde_json::Value = serde_json::from_str(answer).ok()?;
    v.as_array()?
        .iter()
        .map(|c| {
            Some((
                c.get("input")?.as_str()?.to_string(),
                c.get("output")?.as_str()?.to_string(),
            ))
        })
        .collect::<Option<Vec<_>>>()
        .filter(|c| !c.is_empty())
}
