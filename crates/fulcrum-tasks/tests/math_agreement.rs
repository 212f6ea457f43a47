//! Agreement of the math checker with HF Math-Verify on a labelled fixture.
//!
//! `tests/fixtures/math_pairs.jsonl` holds (gold, response, Math-Verify label) triples built from
//! the answers of `../shared/data/math_eval` by `tools/label_math_pairs.py`: each real answer, an
//! equivalent rewriting and a near-miss wrong answer. The checker must agree on at least 98%;
//! every disagreement is printed (run with `--nocapture`) and discussed in
//! `docs/math-checker.md`.

use fulcrum_tasks::math::{check, MathOptions};

#[derive(serde::Deserialize)]
struct Pair {
    kind: String,
    gold: String,
    response: String,
    math_verify: bool,
}

#[test]
fn checker_agrees_with_math_verify_on_at_least_98_percent() -> Result<(), String> {
    let text = include_str!("fixtures/math_pairs.jsonl");
    let pairs: Vec<Pair> = text
        .lines()
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("fixture line {}: {e}", i + 1)))
        .collect::<Result<_, _>>()?;
    assert!(
        pairs.len() >= 1000,
        "fixture has only {} pairs",
        pairs.len()
    );
    let mut disagree = 0;
    for p in &pairs {
        let ours = check(&p.response, &p.gold, &MathOptions::default());
        if ours.equivalent != p.math_verify {
            disagree += 1;
            println!(
                "DISAGREE kind={} gold={:?} extracted={:?} ours={} math_verify={}",
                p.kind, p.gold, ours.extracted, ours.equivalent, p.math_verify
            );
        }
    }
    let agreement = 1.0 - disagree as f64 / pairs.len() as f64;
    println!(
        "agreement with Math-Verify: {:.2}% ({} of {} pairs disagree)",
        100.0 * agreement,
        disagree,
        pairs.len()
    );
    assert!(agreement >= 0.98, "agreement {:.4}", agreement);
    Ok(())
}
