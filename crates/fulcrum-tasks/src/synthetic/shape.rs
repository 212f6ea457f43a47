//! Length knobs shared by every family, for experiments on aggregation bias.
//!
//! The families' own length profiles mix difficulty, length and correctness in ways fixed by the
//! task. These knobs set the quantities the aggregation rules are sensitive to directly, on any
//! family, by rewriting a demonstration's working lines (everything before its `Answer:` line)
//! after the family has generated it:
//!
//! - `verbose_rate` (within-group length variation): the fraction of demonstrations, right or
//!   wrong alike, that follow every working line with a `check` line restating it. A model fitted
//!   to them answers the same prompt sometimes tersely and sometimes at about twice the length,
//!   whatever the outcome, so the within-group length CV rises and the ± gap does not move.
//! - `verbose_levels` (more within-side variation than one level can give): a distribution over
//!   k, drawn per demonstration independently of correctness, spelled `k:p/k:p/...`
//!   (`0:0.6/1:0.2/4:0.2`): after its `Answer:` line the demonstration restates its working k
//!   times as `check` lines (a verification pass). The restatements come after the answer because
//!   interleaved ones made the tiny model's answers wrong: 20 lines between the prompt and the
//!   last working line lose the operands (pilot of docs/study/preregistration.md: wrong answers
//!   2.3 times longer than right ones at step 1), which couples length to correctness, the
//!   opposite of what this knob is for. After the answer, the length cannot change the outcome.
//!   Exclusive with `verbose_rate` (interleaved, one level). Measured on `arithmetic` at difficulty 2 with
//!   `mistake_rate = 0.3` (600 demonstrations, the test below): `0:0.6/1:0.2/4:0.2` gives
//!   demonstrations of 36, 79 and 208 characters at k = 0, 1, 4, a mean of 76 on both sides and
//!   a length CV of 0.85 (right) and 0.87 (wrong).
//! - `mistake_length` (the ± length gap): the length of a mistaken demonstration's working
//!   relative to a right one's. Below 1 a mistaken demonstration drops working lines (a rushed
//!   answer: wrong answers shorter, `L- < L+`); above 1 it repeats them as `again` lines (dithering
//!   before a wrong answer: `L- > L+`). At 1 (the default) nothing changes.
//! - `loop_rate` (a gap that lasts as long as the mistakes do, with truncation): the fraction of
//!   mistaken demonstrations that never answer: their working is followed by `again` repeats of
//!   its lines, cycling, until the text is `loop_length` characters long (default 320, past the
//!   256-token limit of the study configs), with no `Answer:` line. A model fitted to them loops
//!   where it would have made the mistake: the response is cut at the length limit
//!   (`truncated`) and scores as wrong. Measured on `arithmetic` at difficulty 2 with
//!   `mistake_rate = 0.3, loop_rate = 1` (the test below): right demonstrations 36 characters on
//!   average, looping ones 320, so the wrong side is about 9 times longer, and the gap lasts
//!   until RL removes the loops.
//!
//! They only draw from the generator after the family is done, and only when they are not at
//! their defaults, so prompts and answers never change and default problems are identical to
//! those of a task without the knobs. With `length = 0` there is no working to reshape.

use std::fmt;
use std::str::FromStr;

use super::Problem;
use fulcrum_core::SplitMix64;

/// The default `loop_length`, in characters (= tokens of the char vocabulary).
pub const DEFAULT_LOOP_LENGTH: usize = 320;

/// The knobs (validated by `TaskConfig::validate`: `verbose_rate` in 0..=1, `mistake_length` in
/// 0..=4, `loop_rate` in 0..=1, `loop_length` in 16..=4096, and [`VerboseLevels::parse`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub verbose_rate: f64,
    pub verbose_levels: Option<VerboseLevels>,
    pub mistake_length: f64,
    pub loop_rate: f64,
    pub loop_length: usize,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            verbose_rate: 0.0,
            verbose_levels: None,
            mistake_length: 1.0,
            loop_rate: 0.0,
            loop_length: DEFAULT_LOOP_LENGTH,
        }
    }
}

/// A distribution over the number of `check` lines after each working line: `(k, probability)`
/// pairs with distinct k in 0..=8 and probabilities summing to 1. Spelled `k:p/k:p/...`.
#[derive(Debug, Clone, PartialEq)]
pub struct VerboseLevels(Vec<(u32, f64)>);

/// The largest k of [`VerboseLevels`]: 8 restatements already make a demonstration 9 times longer.
pub const MAX_VERBOSE_LEVEL: u32 = 8;

impl VerboseLevels {
    /// The (k, probability) pairs.
    pub fn levels(&self) -> &[(u32, f64)] {
        &self.0
    }

    /// Draws a k.
    fn draw(&self, rng: &mut SplitMix64) -> u32 {
        let u = rng.uniform();
        let mut acc = 0.0;
        for &(k, p) in &self.0 {
            acc += p;
            if u < acc {
                return k;
            }
        }
        self.0.last().map_or(0, |&(k, _)| k)
    }
}

impl FromStr for VerboseLevels {
    type Err = String;

    /// `0:0.6/1:0.2/4:0.2`. The error says what is wrong (the caller adds the key).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut levels: Vec<(u32, f64)> = Vec::new();
        for part in s.split('/').map(str::trim) {
            let (k, p) = part
                .split_once(':')
                .ok_or_else(|| format!("{part:?} is not k:probability (e.g. 0:0.6/1:0.2/4:0.2)"))?;
            let k: u32 = k
                .trim()
                .parse()
                .map_err(|_| format!("{k:?} in {part:?} is not a whole number of check lines"))?;
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("{p:?} in {part:?} is not a probability"))?;
            if k > MAX_VERBOSE_LEVEL {
                return Err(format!("k = {k} is above {MAX_VERBOSE_LEVEL}"));
            }
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("probability {p} of k = {k} is outside 0..=1"));
            }
            if levels.iter().any(|&(j, _)| j == k) {
                return Err(format!("k = {k} is given twice"));
            }
            levels.push((k, p));
        }
        let total: f64 = levels.iter().map(|&(_, p)| p).sum();
        if (total - 1.0).abs() > 1e-6 {
            return Err(format!("the probabilities sum to {total}, not 1"));
        }
        Ok(VerboseLevels(levels))
    }
}

impl fmt::Display for VerboseLevels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, p)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{k}:{p}")?;
        }
        Ok(())
    }
}

impl serde::Serialize for VerboseLevels {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for VerboseLevels {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Shape {
    /// Rewrites `p.demonstration` in place, drawing from `rng` only for non-default knobs.
    pub fn apply(&self, p: &mut Problem, rng: &mut SplitMix64) {
        let looping = p.mistaken && self.loop_rate > 0.0 && rng.chance(self.loop_rate);
        let resize = p.mistaken && !looping && self.mistake_length != 1.0;
        // `verbose_rate` interleaves one check line after each working line; `verbose_levels`
        // restates the working k times after the answer (see the module docs for why).
        let (checks, after_answer) = match &self.verbose_levels {
            Some(levels) => (levels.draw(rng), true),
            None => (
                u32::from(self.verbose_rate > 0.0 && rng.chance(self.verbose_rate)),
                false,
            ),
        };
        if !looping && !resize && checks == 0 {
            return;
        }
        let Some((working, answer)) = split_working(&p.demonstration) else {
            return;
        };
        let mut lines: Vec<String> = working.lines().map(str::to_string).collect();
        if lines.is_empty() {
            return;
        }
        if looping {
            p.demonstration = loop_working(&lines, self.loop_length);
            return;
        }
        if resize {
            lines = resize_working(lines, self.mistake_length, rng);
        }
        let mut trailer = Vec::new();
        if checks > 0 && after_answer {
            for _ in 0..checks {
                trailer.extend(lines.iter().map(|l| format!("check {l}")));
            }
        } else if checks > 0 {
            lines = lines
                .into_iter()
                .flat_map(|l| {
                    let check = format!("check {l}");
                    std::iter::once(l).chain(std::iter::repeat_n(check, checks as usize))
                })
                .collect();
        }
        let mut out = String::new();
        for l in &lines {
            out.push_str(l);
            out.push('\n');
        }
        out.push_str(answer.trim_end_matches('\n'));
        for l in &trailer {
            out.push('\n');
            out.push_str(l);
        }
        p.demonstration = out;
    }
}

/// The working lines, then `again` repeats of them in order, cycling, cut at `length`
/// characters: a response that never reaches an answer.
fn loop_working(lines: &[String], length: usize) -> String {
    let mut out = String::new();
    for l in lines {
        out.push_str(l);
        out.push('\n');
    }
    for l in lines.iter().cycle() {
        if out.chars().count() >= length {
            break;
        }
        out.push_str("again ");
        out.push_str(l);
        out.push('\n');
    }
    out.chars().take(length).collect()
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
    fn lengths(family: Family, shape: &Shape) -> (f64, f64, Vec<Problem>) {
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
            let (_, _, plain) = lengths(f, &Shape::default());
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
                &Shape {
                    mistake_length: 2.0,
                    ..Shape::default()
                },
            );
            assert!(w > 1.3 * r, "{}: wrong {w} right {r}", f.name());
            let (r, w, _) = lengths(
                f,
                &Shape {
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
        let (r0, w0, plain) = lengths(f, &Shape::default());
        let (r, w, verbose) = lengths(
            f,
            &Shape {
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
        let shapes = [
            Shape {
                verbose_rate: 0.5,
                mistake_length: 3.0,
                ..Shape::default()
            },
            Shape {
                verbose_levels: Some("0:0.5/3:0.3/8:0.2".parse().unwrap()),
                mistake_length: 0.5,
                ..Shape::default()
            },
        ];
        for shape in &shapes {
            for &f in Family::ALL {
                let (_, _, plain) = lengths(f, &Shape::default());
                let (_, _, all) = lengths(f, shape);
                for (a, p) in plain.iter().zip(all) {
                    assert!(v.covers(&p.demonstration), "{}", p.demonstration);
                    // One answer line, the family's own (last, or before the checks).
                    let answers: Vec<&str> = p
                        .demonstration
                        .lines()
                        .filter(|l| l.starts_with("Answer:"))
                        .collect();
                    let want = a.demonstration.lines().last().unwrap_or("");
                    assert_eq!(answers, [want], "{}", p.demonstration);
                    let after = p
                        .demonstration
                        .lines()
                        .skip_while(|l| !l.starts_with("Answer:"));
                    assert!(
                        after.skip(1).all(|l| l.starts_with("check ")),
                        "{}",
                        p.demonstration
                    );
                }
            }
        }
    }

    /// Coefficient of variation (population).
    fn cv(xs: &[f64]) -> f64 {
        let m = mean(xs);
        let var = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64;
        var.sqrt() / m
    }

    fn side_lengths(all: &[Problem]) -> (Vec<f64>, Vec<f64>) {
        let (mut right, mut wrong) = (Vec::new(), Vec::new());
        for p in all {
            let l = p.demonstration.chars().count() as f64;
            if p.mistaken {
                wrong.push(l)
            } else {
                right.push(l)
            }
        }
        (right, wrong)
    }

    /// The profile the module docs quote: `0:0.6/1:0.2/4:0.2` on arithmetic at difficulty 2.
    #[test]
    fn verbose_levels_give_a_high_within_side_cv_and_no_gap() {
        let shape = Shape {
            verbose_levels: Some("0:0.6/1:0.2/4:0.2".parse().unwrap()),
            ..Shape::default()
        };
        let f = Family::Arithmetic;
        let (_, _, plain) = lengths(f, &Shape::default());
        let (r, w, all) = lengths(f, &shape);
        let (right, wrong) = side_lengths(&all);
        let (cv_right, cv_wrong) = (cv(&right), cv(&wrong));
        // Per level: the working grows by k+1 times, the answer line stays.
        let mut by_level = [Vec::new(), Vec::new(), Vec::new()];
        for (a, b) in plain.iter().zip(&all) {
            let (la, lb) = (a.demonstration.len() as f64, b.demonstration.len() as f64);
            let level = if lb == la {
                0
            } else if lb < 3.0 * la {
                1
            } else {
                2
            };
            by_level[level].push(lb);
            assert_eq!((&a.prompt, &a.answer), (&b.prompt, &b.answer));
        }
        let share: Vec<f64> = by_level
            .iter()
            .map(|v| v.len() as f64 / all.len() as f64)
            .collect();
        let means: Vec<f64> = by_level.iter().map(|v| mean(v)).collect();
        eprintln!("levels 0/1/4: share {share:?}, mean length {means:?}; right {r:.1} (cv {cv_right:.2}), wrong {w:.1} (cv {cv_wrong:.2})");
        assert!(
            (share[0] - 0.6).abs() < 0.06 && (share[2] - 0.2).abs() < 0.05,
            "{share:?}"
        );
        assert!(
            means[0] < means[1] && 2.0 * means[1] < means[2],
            "{means:?}"
        );
        assert!(cv_right >= 0.7 && cv_wrong >= 0.7, "{cv_right} {cv_wrong}");
        assert!((w / r - 1.0).abs() < 0.15, "no gap: {w} vs {r}");
        // The same levels from the same draws whatever the family's own outcome.
        let (_, _, again) = lengths(f, &shape);
        assert_eq!(all, again);
        // The checks come after the answer: a demonstration scores as it did without them.
        use crate::task::Task;
        let task = super::super::SyntheticTask::new(
            f,
            knobs(),
            shape.clone(),
            crate::verify::RewardMode::ZeroOne,
        );
        for (a, b) in plain.iter().zip(&all) {
            let ex = crate::task::Example {
                id: "x".into(),
                prompt: a.prompt.clone(),
                answer: a.answer.clone(),
                demonstration: None,
                verifier: crate::verify::Verifier::Exact,
                entry_point: None,
            };
            let score = |d: &str| task.score(&ex, d).correct;
            assert_eq!(
                score(&a.demonstration),
                score(&b.demonstration),
                "{}",
                b.demonstration
            );
        }
    }

    #[test]
    fn loops_fill_the_length_limit_never_answer_and_score_wrong() {
        use crate::task::Task;
        let f = Family::Arithmetic;
        let shape = Shape {
            loop_rate: 1.0,
            ..Shape::default()
        };
        let (_, _, plain) = lengths(f, &Shape::default());
        let (r, w, all) = lengths(f, &shape);
        eprintln!("loop_rate 1: right {r:.1}, wrong {w:.1} characters");
        let mut loops = 0;
        for (a, b) in plain.iter().zip(&all) {
            assert_eq!(
                (&a.prompt, &a.answer, a.mistaken),
                (&b.prompt, &b.answer, b.mistaken)
            );
            if !b.mistaken {
                assert_eq!(a.demonstration, b.demonstration);
                continue;
            }
            loops += 1;
            assert_eq!(b.demonstration.chars().count(), DEFAULT_LOOP_LENGTH);
            assert!(!b.demonstration.contains("Answer:"), "{}", b.demonstration);
            assert!(b.demonstration.contains("\nagain "));
            let task = super::super::SyntheticTask::new(
                f,
                knobs(),
                shape.clone(),
                crate::verify::RewardMode::ZeroOne,
            );
            let ex = crate::task::Example {
                id: "x".into(),
                prompt: b.prompt.clone(),
                answer: b.answer.clone(),
                demonstration: None,
                verifier: crate::verify::Verifier::Exact,
                entry_point: None,
            };
            assert!(!task.score(&ex, &b.demonstration).correct);
        }
        assert!(loops > 100, "{loops}");
        assert!(w > 6.0 * r, "wrong {w} right {r}");
        // Half the mistakes loop at loop_rate 0.5; a shorter loop_length is honoured.
        let half = Shape {
            loop_rate: 0.5,
            loop_length: 100,
            ..Shape::default()
        };
        let (_, _, all) = lengths(f, &half);
        let wrong: Vec<&Problem> = all.iter().filter(|p| p.mistaken).collect();
        let looping = wrong
            .iter()
            .filter(|p| !p.demonstration.contains("Answer:"))
            .count() as f64
            / wrong.len() as f64;
        assert!((0.4..0.6).contains(&looping), "{looping}");
        assert!(wrong
            .iter()
            .filter(|p| !p.demonstration.contains("Answer:"))
            .all(|p| p.demonstration.chars().count() == 100));
    }

    #[test]
    fn verbose_levels_spelling() {
        let l: VerboseLevels = " 0:0.6 / 1:0.2/4:0.2".parse().unwrap();
        assert_eq!(l.levels(), &[(0, 0.6), (1, 0.2), (4, 0.2)]);
        assert_eq!(l.to_string(), "0:0.6/1:0.2/4:0.2");
        assert_eq!(l.to_string().parse::<VerboseLevels>().unwrap(), l);
        for (bad, says) in [
            ("0:0.6/1:0.2", "sum to"),
            ("0:0.5/0:0.5", "twice"),
            ("9:1", "above 8"),
            ("1=1", "not k:probability"),
            ("x:1", "whole number"),
            ("1:-0.5/2:1.5", "outside 0..=1"),
            ("", "not k:probability"),
        ] {
            let e = bad.parse::<VerboseLevels>().unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
