//! `arithmetic`: multi-digit addition with a written column-by-column scratchpad.
//!
//! Prompt `Q: 347+86\n`. The demonstration adds column by column from the right, one line per
//! column (`7+6+0=13`), carrying as it goes, then `Answer: 433`. With `length >= 2` each line also
//! says what is written and carried; with `length < 0.5` only the answer line is written.
//!
//! Difficulty d: the first number has d+1 digits, the second 1 to d+1 digits.
//!
//! Length profile: response length grows linearly with the number of digits (one line per
//! column), and a response with a slip is as long as a right one (no length gap between right and
//! wrong). Injected mistake: one column sum is off by one, and the error carries into the answer.

use super::{Knobs, Problem};
use fulcrum_core::SplitMix64;

fn random_number(rng: &mut SplitMix64, digits: u32) -> u64 {
    let lo = if digits <= 1 {
        0
    } else {
        10u64.pow(digits - 1)
    };
    rng.range(lo, 10u64.pow(digits) - 1)
}

fn digits_of(mut n: u64) -> Vec<u64> {
    let mut d = Vec::new();
    loop {
        d.push(n % 10);
        n /= 10;
        if n == 0 {
            return d;
        }
    }
}

/// Generates one addition problem.
pub(super) fn generate(rng: &mut SplitMix64, knobs: &Knobs) -> Problem {
    let width = knobs.difficulty + 1;
    let a = random_number(rng, width);
    let b_digits = rng.range(1, u64::from(width)) as u32;
    let b = random_number(rng, b_digits);
    let mistaken = rng.chance(knobs.mistake_rate);
    let (da, db) = (digits_of(a), digits_of(b));
    let columns = da.len().max(db.len());
    let slip_col = rng.range(0, columns as u64 - 1) as usize;
    let slip_up = rng.chance(0.5);

    let mut lines = Vec::new();
    let mut carry = 0u64;
    let mut written = Vec::new();
    for col in 0..columns {
        let x = da.get(col).copied().unwrap_or(0);
        let y = db.get(col).copied().unwrap_or(0);
        let mut s = x + y + carry;
        if mistaken && col == slip_col {
            s = if slip_up || s == 0 { s + 1 } else { s - 1 };
        }
        let line = if knobs.length >= 2.0 {
            format!(
                "col {}: {x}+{y}+{carry}={s}, write {}, carry {}",
                col + 1,
                s % 10,
                s / 10
            )
        } else {
            format!("{x}+{y}+{carry}={s}")
        };
        lines.push(line);
        written.push(s % 10);
        carry = s / 10;
    }
    if carry > 0 {
        written.push(carry);
    }
    let result: String = written.iter().rev().map(|d| d.to_string()).collect();
    let result = result.trim_start_matches('0');
    let result = if result.is_empty() { "0" } else { result };
    let mut demonstration = String::new();
    if knobs.length >= 0.5 {
        for l in &lines {
            demonstration.push_str(l);
            demonstration.push('\n');
        }
    }
    demonstration.push_str(&format!("Answer: {result}"));
    Problem {
        prompt: format!("Q: {a}+{b}\n"),
        answer: (a + b).to_string(),
        demonstration,
        mistaken,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{demo_lengths, mean, Family};
    use super::*;

    fn knobs(difficulty: u32) -> Knobs {
        Knobs {
            difficulty,
            length: 1.0,
            mistake_rate: 0.3,
        }
    }

    #[test]
    fn scratchpad_length_grows_with_digits() {
        let short: Vec<f64> = demo_lengths(Family::Arithmetic, &knobs(1), 200)
            .iter()
            .map(|x| x.0 as f64)
            .collect();
        let long: Vec<f64> = demo_lengths(Family::Arithmetic, &knobs(9), 200)
            .iter()
            .map(|x| x.0 as f64)
            .collect();
        // One line of about 8 characters per column: 2 columns vs 10 columns.
        assert!(
            mean(&long) > 3.0 * mean(&short),
            "{} vs {}",
            mean(&long),
            mean(&short)
        );
    }

    #[test]
    fn right_and_wrong_demonstrations_have_similar_length() {
        let l = demo_lengths(Family::Arithmetic, &knobs(5), 600);
        let right: Vec<f64> = l.iter().filter(|x| !x.1).map(|x| x.0 as f64).collect();
        let wrong: Vec<f64> = l.iter().filter(|x| x.1).map(|x| x.0 as f64).collect();
        let ratio = mean(&wrong) / mean(&right);
        assert!(
            (0.9..1.1).contains(&ratio),
            "wrong/right length ratio {ratio}"
        );
    }

    #[test]
    fn clean_scratchpad_adds_correctly() {
        let k = Knobs {
            mistake_rate: 0.0,
            ..knobs(6)
        };
        for i in 0..100 {
            let p = generate(&mut SplitMix64::seeded(i), &k);
            assert!(p.demonstration.ends_with(&format!("Answer: {}", p.answer)));
        }
    }
}
