//! `lists`: sort, reverse or dedupe a list of small numbers.
//!
//! Prompt `sort: 5 3 9 1\n` (or `reverse:`, `dedupe:`). The answer is the resulting list
//! (`Answer: 1 3 5 9`). A demonstration either answers at once or, with probability one half
//! (when `length > 0`), writes a trace first: for `sort` a selection sort (`min 1 rest 5 3 9`),
//! for `reverse` the elements taken from the end, for `dedupe` each element marked `new` or `seen`.
//! With `length >= 2` the trace is always written.
//!
//! Difficulty d: list length uniform in 2..=2+4d, values in 0..=9+5d.
//!
//! Length profile: large length variation inside a group. The same prompt is answered both with
//! and without a trace (a model fitted to the demonstrations does both), and sort traces grow
//! quadratically with the list length. Injected mistake: two neighbouring answer elements swap
//! (or one is dropped when they are equal), so right and wrong answers are about equally long.

use super::{Knobs, Problem};
use fulcrum_core::SplitMix64;

fn join(xs: &[u64]) -> String {
    xs.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

/// Generates one list problem.
pub(super) fn generate(rng: &mut SplitMix64, knobs: &Knobs) -> Problem {
    let d = u64::from(knobs.difficulty);
    let len = rng.range(2, 2 + 4 * d) as usize;
    let hi = 9 + 5 * d;
    let op = rng.range(0, 2);
    let mut xs: Vec<u64> = (0..len).map(|_| rng.range(0, hi)).collect();
    if op == 2 && len > 2 {
        // Make sure dedupe has something to remove.
        let i = rng.range(1, len as u64 - 1) as usize;
        xs[i] = xs[rng.range(0, i as u64 - 1) as usize];
    }
    let with_trace = knobs.length >= 2.0 || (knobs.length > 0.0 && rng.chance(0.5));
    let mut trace = Vec::new();
    let (name, result) = match op {
        0 => {
            let mut rest = xs.clone();
            let mut out = Vec::new();
            while !rest.is_empty() {
                let (i, &m) = rest
                    .iter()
                    .enumerate()
                    .min_by_key(|&(_, v)| *v)
                    .unwrap_or((0, &0));
                rest.remove(i);
                trace.push(format!("min {m} rest {}", join(&rest)));
                out.push(m);
            }
            ("sort", out)
        }
        1 => {
            let out: Vec<u64> = xs.iter().rev().copied().collect();
            for (i, v) in out.iter().enumerate() {
                trace.push(format!("take {v} from {}", len - i));
            }
            ("reverse", out)
        }
        _ => {
            let mut out: Vec<u64> = Vec::new();
            for v in &xs {
                if out.contains(v) {
                    trace.push(format!("{v} seen"));
                } else {
                    trace.push(format!("{v} new"));
                    out.push(*v);
                }
            }
            ("dedupe", out)
        }
    };
    let mistaken = rng.chance(knobs.mistake_rate);
    let mut shown = result.clone();
    if mistaken && shown.len() < 2 {
        shown.push(shown.first().map_or(0, |v| v + 1));
    } else if mistaken {
        let i = rng.range(0, shown.len() as u64 - 2) as usize;
        if shown[i] != shown[i + 1] {
            shown.swap(i, i + 1);
        } else {
            shown.remove(i);
        }
    }
    let mut demonstration = String::new();
    if with_trace {
        for t in &trace {
            demonstration.push_str(t.trim_end());
            demonstration.push('\n');
        }
    }
    demonstration.push_str(&format!("Answer: {}", join(&shown)));
    Problem {
        prompt: format!("{name}: {}\n", join(&xs)),
        answer: join(&result),
        demonstration,
        mistaken,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{demo_lengths, mean, Family};
    use super::*;

    fn cv(xs: &[f64]) -> f64 {
        let m = mean(xs);
        let var = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64;
        var.sqrt() / m
    }

    #[test]
    fn same_prompt_is_answered_with_very_different_lengths() {
        // Groups: demonstrations that share a prompt (short lists repeat often at difficulty 1).
        let k = Knobs {
            difficulty: 1,
            length: 1.0,
            mistake_rate: 0.0,
        };
        let mut by_prompt: std::collections::HashMap<String, Vec<f64>> = Default::default();
        for i in 0..20_000 {
            let p = generate(&mut SplitMix64::derive(1, "group", i), &k);
            by_prompt
                .entry(p.prompt)
                .or_default()
                .push(p.demonstration.len() as f64);
        }
        let spreads: Vec<f64> = by_prompt
            .values()
            .filter(|v| v.len() >= 4)
            .map(|v| {
                let max = v.iter().cloned().fold(f64::MIN, f64::max);
                let min = v.iter().cloned().fold(f64::MAX, f64::min);
                max / min
            })
            .collect();
        assert!(
            spreads.len() >= 20,
            "only {} repeated prompts",
            spreads.len()
        );
        // Inside a group the longest demonstration is typically several times the shortest.
        assert!(
            mean(&spreads) > 2.0,
            "mean max/min length in a group {}",
            mean(&spreads)
        );
    }

    #[test]
    fn lengths_vary_widely_across_prompts() {
        let k = Knobs {
            difficulty: 5,
            length: 1.0,
            mistake_rate: 0.0,
        };
        let all: Vec<f64> = demo_lengths(Family::Lists, &k, 400)
            .iter()
            .map(|x| x.0 as f64)
            .collect();
        assert!(cv(&all) > 0.5, "coefficient of variation {}", cv(&all));
    }

    #[test]
    fn mistakes_keep_length_about_the_same() {
        let k = Knobs {
            difficulty: 5,
            length: 0.0,
            mistake_rate: 0.5,
        };
        let l = demo_lengths(Family::Lists, &k, 600);
        let right: Vec<f64> = l.iter().filter(|x| !x.1).map(|x| x.0 as f64).collect();
        let wrong: Vec<f64> = l.iter().filter(|x| x.1).map(|x| x.0 as f64).collect();
        let ratio = mean(&wrong) / mean(&right);
        assert!((0.85..1.15).contains(&ratio), "{ratio}");
    }
}
