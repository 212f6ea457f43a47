//! `steps`: write every step of a Collatz trajectory; shortcuts are wrong.
//!
//! Prompt `collatz 7 steps 5\n`. The answer is every value after each step
//! (`Answer: 22 11 34 17 52`): a response that only states the final value, or skips a step, is
//! wrong. A demonstration writes one line per step (`7 odd 3*7+1=22`, `22 even 22/2=11`), and
//! with `length >= 2` also restates the trajectory so far.
//!
//! Difficulty d: 2 + 2d steps from a start in 2..=10d+20.
//!
//! Length profile: right answers are longer than wrong ones. An injected mistake skips a step
//! (drops its line and its value from the answer), the natural shortcut, so a wrong demonstration
//! is shorter than a right one.

use super::{Knobs, Problem};
use fulcrum_core::SplitMix64;

fn join(xs: &[u64]) -> String {
    xs.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

/// Generates one trajectory problem.
pub(super) fn generate(rng: &mut SplitMix64, knobs: &Knobs) -> Problem {
    let d = u64::from(knobs.difficulty);
    let steps = 2 + 2 * d as usize;
    let start = rng.range(2, 10 * d + 20);
    let mut values = Vec::with_capacity(steps);
    let mut lines = Vec::with_capacity(steps);
    let mut x = start;
    for _ in 0..steps {
        let next = if x.is_multiple_of(2) {
            x / 2
        } else {
            3 * x + 1
        };
        lines.push(if x.is_multiple_of(2) {
            format!("{x} even {x}/2={next}")
        } else {
            format!("{x} odd 3*{x}+1={next}")
        });
        values.push(next);
        x = next;
    }
    let mistaken = rng.chance(knobs.mistake_rate);
    let (mut shown_lines, mut shown) = (lines.clone(), values.clone());
    if mistaken {
        // Skip one step (never the last: the last value alone would be the full shortcut).
        let i = rng.range(0, steps as u64 - 2) as usize;
        shown_lines.remove(i);
        shown.remove(i);
    }
    let mut demonstration = String::new();
    if knobs.length >= 0.5 {
        for (i, l) in shown_lines.iter().enumerate() {
            demonstration.push_str(l);
            if knobs.length >= 2.0 {
                demonstration.push_str(&format!(" so far {}", join(&shown[..=i])));
            }
            demonstration.push('\n');
        }
    }
    demonstration.push_str(&format!("Answer: {}", join(&shown)));
    Problem {
        prompt: format!("collatz {start} steps {steps}\n"),
        answer: join(&values),
        demonstration,
        mistaken,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{demo_lengths, mean, Family};
    use super::*;
    use crate::verify::{score_exact, RewardMode};

    #[test]
    fn right_demonstrations_are_longer_than_wrong_ones() {
        let k = Knobs {
            difficulty: 3,
            length: 1.0,
            mistake_rate: 0.4,
        };
        let l = demo_lengths(Family::Steps, &k, 600);
        let right: Vec<f64> = l.iter().filter(|x| !x.1).map(|x| x.0 as f64).collect();
        let wrong: Vec<f64> = l.iter().filter(|x| x.1).map(|x| x.0 as f64).collect();
        assert!(
            mean(&right) > 1.05 * mean(&wrong),
            "{} vs {}",
            mean(&right),
            mean(&wrong)
        );
    }

    #[test]
    fn final_value_alone_is_wrong() {
        let k = Knobs {
            difficulty: 2,
            length: 1.0,
            mistake_rate: 0.0,
        };
        let p = generate(&mut SplitMix64::seeded(4), &k);
        let last = p.answer.split(' ').next_back().unwrap_or("");
        let s = score_exact(&format!("Answer: {last}"), &p.answer, RewardMode::ZeroOne);
        assert!(!s.correct);
        assert!(score_exact(&p.demonstration, &p.answer, RewardMode::ZeroOne).correct);
    }
}
