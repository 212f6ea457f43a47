//! `countdown`: reach a target from given numbers with `+`, `-` and `*`; demonstrations search.
//!
//! Prompt `reach 26 with 3 5 2 4\n`. A demonstration writes the chains it tries, one per line
//! (`3+5=8 8*2=16 16-4=12 no`), until one reaches the target (`... yes`), then
//! `Answer: ((3+5)*4)-2`-style expression. Any expression that uses each given number at most once
//! and evaluates to the target is right, so scoring parses and evaluates the answer rather than
//! comparing text.
//!
//! Difficulty d: 3 + d/4 numbers (3 to 5), each from 1 to 5 + 2d. Knob `length` scales the search
//! budget: up to `ceil(3 * length * (1 + d/3))` failed tries before the success.
//!
//! Length profile: a successful demonstration writes a uniform 0..budget failed tries first; an
//! injected mistake is a failed search, which writes the whole budget of tries and then answers
//! with its last (wrong) try, so failed searches are longer than successful ones.

use super::{Knobs, Problem};
use crate::verify::Score;
use crate::verify::{answer_line, RewardMode};
use fulcrum_core::SplitMix64;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Add,
    Sub,
    Mul,
}

impl Op {
    fn symbol(self) -> char {
        match self {
            Op::Add => '+',
            Op::Sub => '-',
            Op::Mul => '*',
        }
    }
    fn apply(self, a: i64, b: i64) -> i64 {
        match self {
            Op::Add => a + b,
            Op::Sub => a - b,
            Op::Mul => a * b,
        }
    }
}

/// A left-nested chain: order of the numbers and the ops between them.
#[derive(Debug, Clone, PartialEq)]
struct Chain {
    numbers: Vec<i64>,
    ops: Vec<Op>,
}

impl Chain {
    fn random(rng: &mut SplitMix64, numbers: &[i64]) -> Chain {
        let mut numbers = numbers.to_vec();
        rng.shuffle(&mut numbers);
        let ops = (1..numbers.len())
            .map(|_| match rng.range(0, 2) {
                0 => Op::Add,
                1 => Op::Sub,
                _ => Op::Mul,
            })
            .collect();
        Chain { numbers, ops }
    }

    fn value(&self) -> i64 {
        let mut acc = self.numbers[0];
        for (op, &n) in self.ops.iter().zip(&self.numbers[1..]) {
            acc = op.apply(acc, n);
        }
        acc
    }

    /// `3+5=8 8*2=16 16-4=12`
    fn trace(&self) -> String {
        let mut acc = self.numbers[0];
        let mut parts = Vec::new();
        for (op, &n) in self.ops.iter().zip(&self.numbers[1..]) {
            let next = op.apply(acc, n);
            parts.push(format!("{acc}{}{n}={next}", op.symbol()));
            acc = next;
        }
        parts.join(" ")
    }

    /// `((3+5)*2)-4`
    fn expression(&self) -> String {
        let mut s = self.numbers[0].to_string();
        for (i, (op, n)) in self.ops.iter().zip(&self.numbers[1..]).enumerate() {
            s = if i + 1 == self.ops.len() {
                format!("{s}{}{n}", op.symbol())
            } else {
                format!("({s}{}{n})", op.symbol())
            };
        }
        s
    }
}

/// Generates one countdown problem.
pub(super) fn generate(rng: &mut SplitMix64, knobs: &Knobs) -> Problem {
    let d = u64::from(knobs.difficulty);
    let count = 3 + d / 4;
    let (numbers, solution) = loop {
        let numbers: Vec<i64> = (0..count).map(|_| rng.range(1, 5 + 2 * d) as i64).collect();
        let chain = Chain::random(rng, &numbers);
        let v = chain.value();
        if v > 0 && v <= 999 {
            break (numbers, chain);
        }
    };
    let target = solution.value();
    let budget = (3.0 * knobs.length * (1.0 + d as f64 / 3.0)).ceil() as u64;
    let mistaken = rng.chance(knobs.mistake_rate);
    let failures = if mistaken {
        budget.max(1)
    } else {
        rng.range(0, budget)
    };
    let mut demonstration = String::new();
    let mut last_wrong = None;
    for _ in 0..failures {
        let mut tries = 0;
        let wrong = loop {
            let c = Chain::random(rng, &numbers);
            tries += 1;
            if c.value() != target || tries > 50 {
                break c;
            }
        };
        if knobs.length > 0.0 {
            demonstration.push_str(&format!("{} no\n", wrong.trace()));
        }
        last_wrong = Some(wrong);
    }
    let answer_chain = match (&last_wrong, mistaken) {
        (Some(w), true) if w.value() != target => w.clone(),
        _ => {
            if knobs.length > 0.0 {
                demonstration.push_str(&format!("{} yes\n", solution.trace()));
            }
            solution.clone()
        }
    };
    demonstration.push_str(&format!("Answer: {}", answer_chain.expression()));
    let listed: Vec<String> = numbers.iter().map(|n| n.to_string()).collect();
    Problem {
        prompt: format!("reach {target} with {}\n", listed.join(" ")),
        answer: solution.expression(),
        demonstration,
        mistaken: answer_chain.value() != target,
    }
}

/// Parses `reach T with a b c` back into the target and the numbers.
fn parse_prompt(prompt: &str) -> Option<(i64, Vec<i64>)> {
    let rest = prompt.trim().strip_prefix("reach ")?;
    let (t, nums) = rest.split_once(" with ")?;
    let numbers = nums
        .split_whitespace()
        .map(|n| n.parse().ok())
        .collect::<Option<Vec<i64>>>()?;
    Some((t.trim().parse().ok()?, numbers))
}

/// A tiny evaluator for `+ - * /` and parentheses over integers, in exact rationals (i128),
/// recording the numbers it reads. Depth and length are bounded by the caller.
struct Eval<'a> {
    s: &'a [u8],
    i: usize,
    used: Vec<i64>,
    depth: usize,
}

type Q = (i128, i128);

fn norm(n: i128, d: i128) -> Option<Q> {
    if d == 0 {
        return None;
    }
    let (mut a, mut b) = (n.abs(), d.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let g = a.max(1);
    let sign = if d < 0 { -1 } else { 1 };
    Some((sign * n / g, d.abs() / g))
}

impl Eval<'_> {
    fn peek(&mut self) -> Option<u8> {
        while self.s.get(self.i) == Some(&b' ') {
            self.i += 1;
        }
        self.s.get(self.i).copied()
    }
    fn expr(&mut self) -> Option<Q> {
        let mut acc = self.term()?;
        while let Some(c @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            let r = self.term()?;
            let n = if c == b'+' {
                acc.0
                    .checked_mul(r.1)?
                    .checked_add(r.0.checked_mul(acc.1)?)?
            } else {
                acc.0
                    .checked_mul(r.1)?
                    .checked_sub(r.0.checked_mul(acc.1)?)?
            };
            acc = norm(n, acc.1.checked_mul(r.1)?)?;
        }
        Some(acc)
    }
    fn term(&mut self) -> Option<Q> {
        let mut acc = self.atom()?;
        while let Some(c @ (b'*' | b'/')) = self.peek() {
            self.i += 1;
            let r = self.atom()?;
            acc = if c == b'*' {
                norm(acc.0.checked_mul(r.0)?, acc.1.checked_mul(r.1)?)?
            } else {
                norm(acc.0.checked_mul(r.1)?, acc.1.checked_mul(r.0)?)?
            };
        }
        Some(acc)
    }
    fn atom(&mut self) -> Option<Q> {
        match self.peek()? {
            b'(' => {
                self.depth += 1;
                if self.depth > 32 {
                    return None;
                }
                self.i += 1;
                let v = self.expr()?;
                if self.peek()? != b')' {
                    return None;
                }
                self.i += 1;
                self.depth -= 1;
                Some(v)
            }
            b'0'..=b'9' => {
                let start = self.i;
                while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).ok()?;
                let n: i64 = text.parse().ok()?;
                self.used.push(n);
                Some((i128::from(n), 1))
            }
            _ => None,
        }
    }
}

/// Scores a countdown response: the answer must use each given number at most once and
/// evaluate to the target.
pub(super) fn score(prompt: &str, response: &str, mode: RewardMode) -> Score {
    let Some((target, numbers)) = parse_prompt(prompt) else {
        return Score::from_outcome(mode, false, "prompt is not a countdown prompt");
    };
    let Some(expr) = answer_line(response) else {
        return Score::from_outcome(mode, false, "no Answer: line");
    };
    if expr.len() > 200 {
        return Score::from_outcome(mode, false, "answer expression too long");
    }
    let mut ev = Eval {
        s: expr.as_bytes(),
        i: 0,
        used: Vec::new(),
        depth: 0,
    };
    let value = ev.expr();
    let complete = ev.peek().is_none();
    let Some(value) = value.filter(|_| complete) else {
        return Score::from_outcome(mode, false, format!("cannot evaluate \"{expr}\""));
    };
    let mut pool = numbers.clone();
    for n in &ev.used {
        match pool.iter().position(|x| x == n) {
            Some(i) => {
                pool.swap_remove(i);
            }
            None => {
                return Score::from_outcome(
                    mode,
                    false,
                    format!("\"{expr}\" uses {n}, which is not available"),
                )
            }
        }
    }
    if value != (i128::from(target), 1) {
        let shown = if value.1 == 1 {
            value.0.to_string()
        } else {
            format!("{}/{}", value.0, value.1)
        };
        return Score::from_outcome(mode, false, format!("\"{expr}\" = {shown}, not {target}"));
    }
    Score::from_outcome(mode, true, format!("\"{expr}\" = {target}"))
}

#[cfg(test)]
mod tests {
    use super::super::{demo_lengths, mean, Family};
    use super::*;

    #[test]
    fn failed_searches_are_longer_than_successful_ones() {
        let k = Knobs {
            difficulty: 4,
            length: 1.0,
            mistake_rate: 0.3,
        };
        let l = demo_lengths(Family::Countdown, &k, 600);
        let right: Vec<f64> = l.iter().filter(|x| !x.1).map(|x| x.0 as f64).collect();
        let wrong: Vec<f64> = l.iter().filter(|x| x.1).map(|x| x.0 as f64).collect();
        assert!(
            mean(&wrong) > 1.4 * mean(&right),
            "{} vs {}",
            mean(&wrong),
            mean(&right)
        );
    }

    #[test]
    fn any_valid_expression_scores_and_reused_numbers_do_not() {
        let p = "reach 26 with 3 5 2 4\n";
        let m = RewardMode::ZeroOne;
        assert!(score(p, "Answer: (3+5)*4-2*3", m)
            .reason
            .contains("not available"));
        assert!(score(p, "Answer: ((3+5)*4)-2*3", m).reward == 0.0);
        assert!(score(p, "Answer: (5+3)*4-(2*3)", m).reward == 0.0);
        assert!(score(p, "Answer: 5*4+2*3", m).correct);
        assert!(!score(p, "Answer: 5*4+2", m).correct);
        assert!(!score(p, "Answer: 5*4+", m).correct);
        assert!(!score(p, "Answer: 7*4-2", m).correct);
    }

    #[test]
    fn deep_or_huge_expressions_are_rejected_without_panic() {
        let p = "reach 1 with 1\n";
        let deep = format!("Answer: {}1{}", "(".repeat(100), ")".repeat(100));
        assert!(!score(p, &deep, RewardMode::ZeroOne).correct);
        let huge = "Answer: 99999999999999999999999*99999999999999999999";
        assert!(!score(p, huge, RewardMode::ZeroOne).correct);
    }
}
