//! Two length knobs shared by every family, for experiments on aggregation bias.
//!
//! The families' own length profiles mix difficulty, length and correctness in ways fixed by the
//! task. These two knobs set the two quantities the aggregation rules are sensitive to directly,
//! on any family, by rewriting a demonstration's working lines (everything before its `Answer:`
//! line) after the family has generated it:
//!
//! - `verbose_rate` (within-group length variation): the fraction of demonstrations, right or
//!   wrong alike, that follow every working line with a `check` line restating it. A model fitted
//!   to them answers the same prompt sometimes tersely and sometimes at about twice the length,
//!   whatever the outcome, so the within-group length CV rises and the ± gap does not move.
//! - `mistake_length` (the ± length gap): the length of a mistaken demonstration's working
//!   relative to a right one's. Below 1 a mistaken demonstration drops working lines (a rushed
//!   answer: wrong answers shorter, `L- < L+`); above 1 it repeats them as `again` lines (dithering
//!   before a wrong answer: `L- > L+`). At 1 (the default) nothing changes.
//!
//! Both only draw from the generator after the family is done, and only when they are not at
//! their defaults, so prompts and answers never change and default problems are identical to
//! those of a task without the knobs. With `length = 0` there is no working to reshape.

use super::Problem;
use fulcrum_core::SplitMix64;

/// The two knobs (validated by `TaskConfig::validate`: `verbose_rate` in 0..=1,
/// `mistake_length` in 0..=4).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub verbose_rate: f64,
    pub mistake_length: f64,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            verbose_rate: 0.0,
            mistake_length: 1.0,
        }
    }
}

impl Shape {
    /// Rewrites `p.demonstration` in place, drawing from `rng` only for non-default knobs.
    pub fn apply(&self, p: &mut Problem, rng: &mut SplitMix64) {
        let resize = p.mistaken && self.mistake_length != 1.0;
        let verbose = self.verbose_rate > 0.0 && rng.chance(self.verbose_rate);
        if !resize && !verbose {
            return;
        }
        let Some((working, answer)) = split_working(&p.demonstration) else {
            return;
        };
        let mut lines: Vec<String> = working.lines().map(str::to_string).collect();
        if lines.is_empty() {
            return;
        }
        if resize {
            lines = resize_working(lines, self.mistake_length, rng);
        }
        if verbose {
            lines = lines
                .into_iter()
                .flat_map(|l| {
                    let check = format!("check {l}");
                    [l, check]
                })
                .collect();
        }
        let mut out = String::new();
        for l in &lines {
            out.push_str(l);
            out.push('\n');
        }
        out.push_str(answer);
        p.demonstration = out;
    }
}

/// Splits a demonstration at its last `Answer:` line: (working text, answer line).
fn split_working(demo: &str) -> Option<(&str, &str)> {
    let at = demo.rfind("Answer:")?;
    Some((&demo[..at], &demo[at..]))
}

/// Scales `lines` to `round(n * factor)` lines: dropping randomly chosen ones (order kept), or
/// appending `again` repeats of the lines in order, cycling.
fn resize_working(lines: Vec<String>, factor: f64, rng: &mut SplitMix64) -> Vec<String> {
    let n = lines.len();
    let target = (n as f64 * factor).round() as usize;
    if target < n {
        let mut keep: Vec<usize> = (0..n).collect();
        rng.shuffle(&mut keep);
        keep.truncate(target);
        keep.sort_unstable();
        return keep.into_iter().map(|i| lines[i].clone()).collect();
    }
    let extra: Vec<String> = (0..target - n)
        .map(|k| format!("again {}", lines[k % n]))
        .collect();
    lines.into_iter().chain(extra).collect()
}

#[cfg(test)]
mod tests {
    use super::super::{generate, mean, Family, Knobs};
    use super::*;

    fn knobs() -> Knobs {
        Knobs {
            difficulty: 2,
            length: 1.0,
            mistake_rate: 0.3,
        }
    }

    /// Mean demonstration length of right and of wrong problems under `shape`.
    fn lengths(family: Family, shape: Shape) -> (f64, f64, Vec<Problem>) {
        let mut right = Vec::new();
        let mut wrong = Vec::new();
        let mut all = Vec::new();
        for i in 0..600 {
            let mut rng = SplitMix64::derive(3, "shape", i);
            let mut p = generate(family, &mut rng, &knobs());
            shape.apply(&mut p, &mut rng);
            let l = p.demonstration.chars().count() as f64;
            if p.mistaken {
                wrong.push(l)
            } else {
                right.push(l)
            }
            all.push(p);
        }
        (mean(&right), mean(&wrong), all)
    }

    #[test]
    fn defaults_change_nothing() {
        for &f in Family::ALL {
            let (_, _, plain) = lengths(f, Shape::default());
            for (i, p) in plain.iter().enumerate() {
                let q = generate(f, &mut SplitMix64::derive(3, "shape", i as u64), &knobs());
                assert_eq!(p, &q);
            }
        }
    }

    #[test]
    fn mistake_length_sets_the_sign_of_the_gap() {
        for &f in Family::ALL {
            let (r, w, _) = lengths(
                f,
                Shape {
                    mistake_length: 2.0,
                    ..Shape::default()
                },
            );
            assert!(w > 1.3 * r, "{}: wrong {w} right {r}", f.name());
            let (r, w, _) = lengths(
                f,
                Shape {
                    mistake_length: 0.3,
                    ..Shape::default()
                },
            );
            assert!(w < 0.85 * r, "{}: wrong {w} right {r}", f.name());
        }
    }

    #[test]
    fn verbose_rate_adds_variation_but_no_gap() {
        let f = Family::Arithmetic;
        let (r0, w0, plain) = lengths(f, Shape::default());
        let (r, w, verbose) = lengths(
            f,
            Shape {
                verbose_rate: 0.5,
                ..Shape::default()
            },
        );
        // About half of them doubled their working, right and wrong alike.
        let longer = plain
            .iter()
            .zip(&verbose)
            .filter(|(a, b)| b.demonstration.len() > a.demonstration.len())
            .count() as f64
            / plain.len() as f64;
        assert!((0.4..0.6).contains(&longer), "{longer}");
        assert!(r > 1.2 * r0 && w > 1.2 * w0);
        assert!((w / r - w0 / r0).abs() < 0.1, "{w}/{r} vs {w0}/{r0}");
        // Same prompts and answers; a verbose working line is followed by its check line.
        for (a, b) in plain.iter().zip(&verbose) {
            assert_eq!((&a.prompt, &a.answer), (&b.prompt, &b.answer));
            assert!(b
                .demonstration
                .ends_with(a.demonstration.lines().last().unwrap_or("")));
        }
    }

    #[test]
    fn reshaped_demonstrations_keep_their_answer_and_fit_the_vocabulary() {
        let v = crate::vocab::CharVocab;
        let shape = Shape {
            verbose_rate: 0.5,
            mistake_length: 3.0,
        };
        for &f in Family::ALL {
            let (_, _, all) = lengths(f, shape);
            for p in all {
                assert!(v.covers(&p.demonstration), "{}", p.demonstration);
                let last = p.demonstration.lines().last().unwrap_or("");
                assert!(last.starts_with("Answer:"), "{}", p.demonstration);
            }
        }
    }
}
