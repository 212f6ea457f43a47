//! Output of `fulcrum analyze`: the JSON document (exact keys, as documented in the README) and
//! the human report (rule table, length diagnostics, plain-language verdict).

use std::fmt::Write;

use anyhow::Result;
use fulcrum_core::{AnalysisReport, Diagnostics, Rule, RuleParams, StepBatch};

/// `{advantages, rules: {NAME: {weights, mass_pos, mass_neg, mass_ratio, len_weight_corr}},
/// diagnostics: {...}}` ([`AnalysisReport`], shared with the Python package); undefined values
/// are `null`.
pub fn json(advantages: &[f64], diag: &Diagnostics) -> Result<String> {
    Ok(serde_json::to_string(&AnalysisReport::new(advantages, diag))? + "\n")
}

fn num(x: f64) -> String {
    if x == 0.0 || (1e-3..1e6).contains(&x.abs()) {
        format!("{x:.4}")
    } else {
        format!("{x:.3e}")
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// Largest over smallest per-token weight among the responses that carry gradient, over the
/// whole batch (`whole`) or only within each (group, sign) subset (`!whole`).
fn per_token_spread(batch: &StepBatch, w: &[f64], whole: bool) -> Option<f64> {
    use std::collections::HashMap;
    let mut ranges: HashMap<(usize, bool), (f64, f64)> = HashMap::new();
    for (i, (&l, &a)) in batch.lengths().iter().zip(batch.advantages()).enumerate() {
        if l > 0.0 && a != 0.0 && w[i] > 0.0 {
            let key = if whole {
                (0, true)
            } else {
                (batch.group()[i], a > 0.0)
            };
            let e = ranges.entry(key).or_insert((f64::INFINITY, 0.0));
            e.0 = e.0.min(w[i]);
            e.1 = e.1.max(w[i]);
        }
    }
    ranges.values().map(|(lo, hi)| hi / lo).reduce(f64::max)
}

/// "the negative side 2.4x the push of the positive side", or "both sides the same push".
fn push_phrase(ratio: Option<f64>) -> String {
    match ratio {
        None => "a push to the positive side only (no negative mass)".into(),
        Some(r) if (r - 1.0).abs() <= 0.05 => {
            format!("both sides the same push (+/- mass ratio {r:.2})")
        }
        Some(r) if r < 1.0 => format!(
            "the negative side {:.1}x the push of the positive side",
            1.0 / r
        ),
        Some(r) => format!("the positive side {r:.1}x the push of the negative side"),
    }
}

pub fn human(
    batch: &StepBatch,
    diag: &Diagnostics,
    params: &RuleParams,
    adv_source: &str,
) -> String {
    let d = &diag.lengths;
    let mut s = String::new();
    let pct = |x: f64| format!("{:.0}%", 100.0 * x);
    let _ = writeln!(
        s,
        "{} responses in {} groups; advantages {adv_source}; ba count: {}; drgrpo L_norm: {}\n",
        batch.len(),
        batch.n_groups(),
        params.ba_count,
        params.l_norm
    );
    let _ = writeln!(s, "Lengths (tokens)");
    let _ = writeln!(s, "  mean                     {:.1}", d.len_mean);
    let _ = writeln!(s, "  within-group CV          {}", opt(d.len_cv, 3));
    let _ = writeln!(
        s,
        "  positive (A>0) mean      {}   (mixed groups)",
        opt(d.len_pos_mean, 1)
    );
    let _ = writeln!(s, "  negative (A<0) mean      {}", opt(d.len_neg_mean, 1));
    let _ = writeln!(
        s,
        "  gap (neg - pos)          {}   relative: {}",
        opt(d.len_gap, 1),
        opt(d.len_gap_rel, 3)
    );
    let _ = writeln!(
        s,
        "  groups                   {} mixed, {} all correct, {} all wrong\n",
        pct(d.frac_mixed),
        pct(d.frac_all_correct),
        pct(d.frac_all_wrong)
    );

    let _ = writeln!(
        s,
        "{:<16} {:>11} {:>11} {:>8} {:>12}",
        "rule", "mass+", "mass-", "+/-", "corr(L,wL)"
    );
    for r in &diag.rules {
        let name = match r.rule {
            Rule::Ba | Rule::BaBatch => format!("{}/{}", r.rule, params.ba_count),
            _ => r.rule.to_string(),
        };
        let _ = writeln!(
            s,
            "{:<16} {:>11} {:>11} {:>8} {:>12}",
            name,
            num(r.mass.mass_pos),
            num(r.mass.mass_neg),
            opt(r.mass.mass_ratio, 3),
            opt(r.mass.len_weight_corr, 3)
        );
    }
    let _ = writeln!(s, "\nVerdict");
    for line in verdict(batch, diag) {
        let _ = writeln!(s, "  - {line}");
    }
    s
}

fn verdict(batch: &StepBatch, diag: &Diagnostics) -> Vec<String> {
    let d = &diag.lengths;
    let mut out = Vec::new();
    let rule = |r: Rule| diag.rule(r).expect("every rule is in the diagnostics");
    let any_mass = diag
        .rules
        .iter()
        .any(|r| r.mass.mass_pos > 0.0 || r.mass.mass_neg > 0.0);
    if !any_mass {
        out.push(
            "no response carries a non-zero advantage over a non-empty response: every rule gives \
             this batch zero policy gradient (all-equal or singleton groups)"
                .into(),
        );
        return out;
    }
    if d.frac_mixed == 0.0 {
        out.push(
            "no group mixes positive and negative advantages: the sign-length coupling cannot show"
                .into(),
        );
    }
    let gap_line = match (d.len_pos_mean, d.len_neg_mean) {
        (Some(p), Some(n)) if p > 0.0 && n > 0.0 && (n / p - 1.0).abs() > 0.05 => {
            let (longer, shorter, x) = if n > p {
                ("wrong", "right", n / p)
            } else {
                ("right", "wrong", p / n)
            };
            Some(format!(
                "{longer} answers are {x:.1}x longer than {shorter} ones ({n:.0} vs {p:.0} tokens)"
            ))
        }
        (Some(p), Some(n)) if p > 0.0 && n > 0.0 => Some(format!(
            "right and wrong answers have about the same length ({p:.0} vs {n:.0} tokens)"
        )),
        _ => None,
    };
    let token = rule(Rule::Token);
    let token_line = format!("`token` gives {}", push_phrase(token.mass.mass_ratio));
    out.push(match gap_line {
        Some(g) => format!("{g}: {token_line}"),
        None => token_line,
    });
    out.push(format!(
        "`token-group` gives {}",
        push_phrase(rule(Rule::TokenGroup).mass.mass_ratio)
    ));

    let seq = rule(Rule::Seq);
    match per_token_spread(batch, &seq.weights, true) {
        Some(x) if x > 1.05 => out.push(format!(
            "`seq` weights the longest response {x:.1}x less per token than the shortest, so long answers learn slowly; it gives {}",
            push_phrase(seq.mass.mass_ratio)
        )),
        _ => out.push(format!("`seq` gives {}", push_phrase(seq.mass.mass_ratio))),
    }
    out.push(format!(
        "`seq-sum` and `drgrpo` let a response's total weight grow with its length (corr {}): `drgrpo` gives {}",
        opt(rule(Rule::DrGrpo).mass.len_weight_corr, 2),
        push_phrase(rule(Rule::DrGrpo).mass.mass_ratio)
    ));
    let ba = rule(Rule::Ba);
    let within = per_token_spread(batch, &ba.weights, false).unwrap_or(1.0);
    out.push(format!(
        "`ba` balances both: it gives {}, and within each sign subset of a group every token weighs the same (spread {within:.2}x)",
        push_phrase(ba.mass.mass_ratio)
    ));
    if let Some(cv) = d.len_cv {
        let level = if cv >= 0.5 {
            "high"
        } else if cv >= 0.2 {
            "moderate"
        } else {
            "low"
        };
        out.push(format!(
            "length variation within groups is {level} (CV {cv:.2}): the higher it is, the more `seq` \
             and `token` disagree; the larger the gap between the sides, the more `token` is biased"
        ));
    }
    out
}
