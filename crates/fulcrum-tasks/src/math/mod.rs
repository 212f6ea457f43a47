//! The math answer checker: extraction, normalisation, equivalence.
//!
//! [`check`] takes a model response and a gold answer and says whether the response's final
//! answer is equivalent to the gold, with a reason. The pieces:
//! - [`extract`]: the final answer of a response (`Answer:` line, `\boxed{}`, `####`, last number);
//! - [`normalize`]: lm-eval / verl MATH normalisation;
//! - [`expr`]: a LaTeX expression parser evaluated exactly (rationals) or numerically;
//! - [`equivalent`] (this file): tuples, intervals, unordered sets and unions, equations, and
//!   scalar comparison: equal strings after normalising, else equal values (exact when both are
//!   rational, relative tolerance [`REL_TOL`] otherwise; with variables, equal values at
//!   several sample points).
//!
//! Agreement with HF Math-Verify is measured on `tests/fixtures/math_pairs.jsonl` (see
//! `docs/math-checker.md`). Work is bounded: answers longer than [`MAX_ANSWER`] bytes are only
//! compared as exact text, and the parser refuses deep nesting, so no input makes the checker slow.

pub mod expr;
pub mod extract;
pub mod latex;
pub mod normalize;

pub use extract::{extract, last_boxed, Source};
pub use normalize::normalize;

use expr::{eval, variables, Val};
use latex::parse;

/// Relative tolerance for comparing inexact values.
pub const REL_TOL: f64 = 1e-8;
/// Answers longer than this (bytes) are compared as exact (trimmed) text only.
pub const MAX_ANSWER: usize = 2_000;

/// Options of the checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MathOptions {
    /// Use the last number in the response when there is no `Answer:`, `\boxed{}` or `####`.
    pub fallback_last_number: bool,
}

impl Default for MathOptions {
    fn default() -> Self {
        MathOptions {
            fallback_last_number: true,
        }
    }
}

/// The verdict on one response.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckResult {
    /// Whether the extracted answer is equivalent to the gold.
    pub equivalent: bool,
    /// The extracted answer, if one was found.
    pub extracted: Option<String>,
    /// A short human-readable reason.
    pub reason: String,
}

fn short(s: &str) -> String {
    let mut t: String = s.chars().take(60).collect();
    if t.len() < s.len() {
        t.push_str("...");
    }
    t
}

/// Checks a response against a gold answer.
pub fn check(response: &str, gold: &str, opts: &MathOptions) -> CheckResult {
    let Some((answer, source)) = extract(response, opts.fallback_last_number) else {
        return CheckResult {
            equivalent: false,
            extracted: None,
            reason: "no answer found".into(),
        };
    };
    let gold = last_boxed(gold).unwrap_or(gold);
    let ok = equivalent(gold, answer);
    CheckResult {
        equivalent: ok,
        extracted: Some(answer.to_string()),
        reason: format!(
            "{} \"{}\" {} \"{}\"",
            source.name(),
            short(answer),
            if ok { "matches" } else { "does not match" },
            short(gold)
        ),
    }
}

/// True when two answers (not responses) are mathematically the same.
pub fn equivalent(gold: &str, pred: &str) -> bool {
    if gold.len() > MAX_ANSWER || pred.len() > MAX_ANSWER {
        return gold.trim() == pred.trim();
    }
    let (g, p) = (normalize(gold), normalize(pred));
    if g == p {
        return true;
    }
    if g.is_empty() || p.is_empty() {
        return false;
    }
    if structured_equal(&g, &p) {
        return true;
    }
    // A percentage equals both its number and its fraction: `50\%` is `50` and `0.5`.
    let as_fraction = |s: &str| format!("\\frac{{({s})}}{{100}}");
    (gold.contains('%') && structured_equal(&as_fraction(&g), &p))
        || (pred.contains('%') && structured_equal(&g, &as_fraction(&p)))
}

/// Splits at top-level occurrences of `sep` (outside brackets and braces).
fn split_top(s: &str, sep: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
        if depth == 0 && b[i..].starts_with(sep.as_bytes()) {
            parts.push(s[start..i].to_string());
            i += sep.len();
            start = i;
            continue;
        }
        i += 1;
    }
    parts.push(s[start..].to_string());
    parts
}

/// `(a,b]` style: the brackets, when the first bracket closes at the very end.
fn outer_brackets(s: &str) -> Option<(char, char, &str)> {
    let open = s.chars().next()?;
    let close = s.chars().next_back()?;
    if !matches!(open, '(' | '[') || !matches!(close, ')' | ']') || s.len() < 2 {
        return None;
    }
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 && i != s.len() - 1 {
                    return None;
                }
            }
            _ => {}
        }
    }
    Some((open, close, &s[1..s.len() - 1]))
}

fn unordered_equal(a: &[String], b: &[String]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut used = vec![false; b.len()];
    a.iter().all(|x| {
        let hit = (0..b.len()).find(|&j| !used[j] && structured_equal(x, &b[j]));
        hit.map(|j| used[j] = true).is_some()
    })
}

fn structured_equal(g: &str, p: &str) -> bool {
    if g == p {
        return true;
    }
    // Unions of intervals or sets: unordered.
    let (gu, pu) = (split_top(g, "\\cup"), split_top(p, "\\cup"));
    if gu.len() > 1 || pu.len() > 1 {
        return unordered_equal(&gu, &pu);
    }
    // Tuples and intervals: brackets must agree, elements in order.
    let gb = outer_brackets(g).filter(|(_, _, inner)| split_top(inner, ",").len() > 1);
    let pb = outer_brackets(p).filter(|(_, _, inner)| split_top(inner, ",").len() > 1);
    match (gb, pb) {
        (Some((go, gc, gi)), Some((po, pc, pi))) => {
            let (ge, pe) = (split_top(gi, ","), split_top(pi, ","));
            return go == po
                && gc == pc
                && ge.len() == pe.len()
                && ge.iter().zip(&pe).all(|(x, y)| structured_equal(x, y));
        }
        (Some(_), None) | (None, Some(_)) => {
            // A tuple against a bare list: same elements in the same order.
            let strip = |s: &str, b: Option<(char, char, &str)>| match b {
                Some((_, _, inner)) => split_top(inner, ","),
                None => split_top(s, ","),
            };
            let (ge, pe) = (strip(g, gb), strip(p, pb));
            return ge.len() > 1
                && ge.len() == pe.len()
                && ge.iter().zip(&pe).all(|(x, y)| structured_equal(x, y));
        }
        (None, None) => {}
    }
    // Bare comma lists and `{a,b}` sets: unordered.
    let unbrace = |s: &str| -> String {
        if s.starts_with('{') && s.ends_with('}') {
            s[1..s.len() - 1].to_string()
        } else {
            s.to_string()
        }
    };
    let (gs, ps) = (split_top(&unbrace(g), ","), split_top(&unbrace(p), ","));
    if gs.len() > 1 || ps.len() > 1 {
        return unordered_equal(&gs, &ps);
    }
    scalar_equal(g, p)
}

fn values_equal(a: Val, b: Val) -> bool {
    match (a, b) {
        (Val::Rat(p, q), Val::Rat(r, s)) => p == r && q == s,
        _ => {
            let (x, y) = (a.f(), b.f());
            x == y || (x - y).abs() <= REL_TOL * x.abs().max(y.abs()).max(1e-300)
        }
    }
}

/// Sample value of a variable at point `k`, distinct per name.
fn sample(name: &str, k: usize) -> f64 {
    let h = name
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    0.31 + 0.53 * k as f64 + (h % 97) as f64 / 131.0
}

fn scalar_equal(g: &str, p: &str) -> bool {
    if g == p {
        return true;
    }
    // Multiple-choice letters: `(C)` and `C`.
    let letter = |s: &str| s.trim_matches(|c| c == '(' || c == ')').to_string();
    if g.len() <= 3 && p.len() <= 3 && letter(g) == letter(p) && letter(g).len() == 1 {
        return true;
    }
    // Equations: both sides in order (or swapped).
    let (ge, pe) = (split_top(g, "="), split_top(p, "="));
    if ge.len() == 2 && pe.len() == 2 {
        return (expr_equal(&ge[0], &pe[0]) && expr_equal(&ge[1], &pe[1]))
            || (expr_equal(&ge[0], &pe[1]) && expr_equal(&ge[1], &pe[0]));
    }
    if ge.len() != pe.len() {
        return false;
    }
    expr_equal(g, p)
}

fn expr_equal(g: &str, p: &str) -> bool {
    if g == p {
        return true;
    }
    let (Some(ge), Some(pe)) = (parse(g), parse(p)) else {
        return false;
    };
    let mut vars = Vec::new();
    variables(&ge, &mut vars);
    variables(&pe, &mut vars);
    if vars.is_empty() {
        return match (eval(&ge, &|_| 0.0), eval(&pe, &|_| 0.0)) {
            (Some(a), Some(b)) => values_equal(a, b),
            _ => false,
        };
    }
    // Identity testing at sample points: every point where both sides evaluate must agree,
    // and at least two must evaluate.
    let mut agreed = 0;
    for k in 0..4 {
        let at = |v: &str| sample(v, k);
        match (eval(&ge, &at), eval(&pe, &at)) {
            (Some(a), Some(b)) => {
                if !values_equal(a, b) {
                    return false;
                }
                agreed += 1;
            }
            _ => continue,
        }
    }
    agreed >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_different_forms_are_equivalent() {
        for (g, p) in [
            ("204", "204.0"),
            ("\\frac{1}{2}", "0.5"),
            ("\\frac{1}{2}", "1/2"),
            ("-\\frac{24}{25}", "\\dfrac{-24}{25}"),
            ("1000", "1,000"),
            ("4.4e7", "44000000"),
            ("3.2\\times 10^{-5}", "0.000032"),
            ("336^\\circ", "336"),
            ("2\\sqrt{113}", "\\sqrt{452}"),
            ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"),
            ("7\\pi", "\\pi\\cdot 7"),
            ("x = 3", "3"),
            ("\\$18.90", "18.9"),
            ("50\\%", "50"),
            ("50\\%", "0.5"),
            ("0.1", "10\\%"),
            ("1\\frac{4}{5}", "\\frac{9}{5}"),
        ] {
            assert!(equivalent(g, p), "{g} vs {p}");
        }
    }

    #[test]
    fn near_misses_are_not_equivalent() {
        for (g, p) in [
            ("204", "205"),
            ("\\frac{1}{3}", "0.333"),
            ("\\frac{2}{3}", "\\frac{3}{2}"),
            ("\\pi", "3.14"),
            ("(1,2)", "(2,1)"),
            ("[1,2)", "(1,2)"),
            ("2x+1", "2x-1"),
            ("10", "1"),
            ("50\\%", "5"),
            ("1\\frac{4}{5}", "\\frac{4}{5}"),
        ] {
            assert!(!equivalent(g, p), "{g} vs {p}");
        }
    }

    #[test]
    fn structures_compare_by_their_rules() {
        assert!(equivalent(
            "\\left( 3, \\frac{\\pi}{2} \\right)",
            "(3,\\frac{\\pi}{2})"
        ));
        assert!(equivalent("1,3,5", "5, 3, 1"));
        assert!(equivalent("\\{1,2\\}", "\\{2,1\\}"));
        assert!(equivalent(
            "(-\\infty,1)\\cup(2,\\infty)",
            "(2,\\infty)\\cup(-\\infty,1)"
        ));
        assert!(equivalent("(a+5)(b+2)", "(b+2)(a+5)"));
        assert!(equivalent("15x - 80", "-80+15x"));
        assert!(equivalent("y=2x+1", "2x+1"));
        assert!(!equivalent("1,3,5", "1,3"));
    }

    #[test]
    fn check_reports_extracted_answer_and_source() {
        let r = check("so \\boxed{\\frac{1}{2}}.", "0.5", &MathOptions::default());
        assert!(r.equivalent);
        assert_eq!(r.extracted.as_deref(), Some("\\frac{1}{2}"));
        assert!(r.reason.contains("boxed"));
        let r = check("no numbers here", "5", &MathOptions::default());
        assert!(!r.equivalent && r.reason.contains("no answer"));
        let r = check(
            "I think 5",
            "5",
            &MathOptions {
                fallback_last_number: false,
            },
        );
        assert!(!r.equivalent);
    }
}
