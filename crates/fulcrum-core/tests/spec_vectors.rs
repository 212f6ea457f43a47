//! Reproduces every expected value of `shared/spec/aggregation-vectors.json` (copied to
//! `tests/fixtures/`): advantages, token losses, and for every rule and BA setting the weights,
//! the aggregated loss and the two masses, within the file's tolerance (1e-9 relative).

use fulcrum_core::{
    advantages, diagnostics::rule_mass, ppo_loss, weighted_loss, BaCount, ClipParams, Estimator,
    Rule, RuleParams, StepBatch,
};
use serde_json::Value;

const FIXTURE: &str = include_str!("fixtures/aggregation-vectors.json");

fn close(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * want.abs().max(1e-12) || (got - want).abs() <= 1e-15
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

fn assert_all_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(close(*g, *w, tol), "{what}[{k}]: got {g:e}, want {w:e}");
    }
}

/// `"ba/signed"` -> (Rule::Ba, Signed); plain names use the default count.
fn parse_rule_key(key: &str) -> (Rule, BaCount) {
    match key.split_once('/') {
        Some((r, c)) => (r.parse().expect("rule"), c.parse().expect("ba count")),
        None => (key.parse().expect("rule"), BaCount::Group),
    }
}

#[test]
fn every_case_of_the_spec_vectors_is_reproduced() {
    let doc: Value = serde_json::from_str(FIXTURE).expect("fixture parses");
    let tol = doc["tolerance"].as_f64().expect("tolerance");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 7, "fixture lost cases");
    let mut checked_rules = 0;
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let groups: Vec<u64> = case["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .map(|g| g.as_u64().expect("group"))
            .collect();
        let rewards = f64s(&case["rewards"]);
        let lengths: Vec<i64> = case["lengths"]
            .as_array()
            .expect("lengths")
            .iter()
            .map(|l| l.as_i64().expect("length"))
            .collect();
        let estimator: Estimator = case["advantage"]
            .as_str()
            .expect("advantage")
            .parse()
            .expect("estimator");
        let clip = ClipParams {
            eps_low: case["eps_low"].as_f64().expect("eps_low"),
            eps_high: case["eps_high"].as_f64().expect("eps_high"),
            dual_clip_c: case["dual_clip_c"].as_f64().expect("c"),
        };
        let l_norm = case["l_norm"].as_f64().expect("l_norm");
        let expected = &case["expected"];

        let adv = advantages::compute(estimator, &groups, &rewards, &lengths).expect("advantages");
        assert_all_close(
            &format!("{name}: advantages"),
            &adv,
            &f64s(&expected["advantages"]),
            tol,
        );

        let logp_old = case["logp_old"].as_array().expect("logp_old");
        let logp_new = case["logp_new"].as_array().expect("logp_new");
        let want_losses = expected["token_loss"].as_array().expect("token_loss");
        let mut token_losses = Vec::new();
        for i in 0..groups.len() {
            let losses =
                ppo_loss::response_losses(&f64s(&logp_new[i]), &f64s(&logp_old[i]), adv[i], &clip)
                    .expect("token losses");
            let values: Vec<f64> = losses.iter().map(|l| l.loss).collect();
            assert_eq!(
                values.len() as i64,
                lengths[i],
                "{name}: response {i} token count"
            );
            assert_all_close(
                &format!("{name}: token_loss[{i}]"),
                &values,
                &f64s(&want_losses[i]),
                tol,
            );
            token_losses.push(values);
        }

        let batch = StepBatch::new(&groups, &lengths, &adv).expect("batch");
        let rules = expected["rules"].as_object().expect("rules");
        for (key, want) in rules {
            let (rule, ba_count) = parse_rule_key(key);
            let params = RuleParams {
                ba_count,
                l_norm,
                ..RuleParams::default()
            };
            let w = rule.weights(&batch, &params);
            assert_all_close(
                &format!("{name}: {key}: weights"),
                &w,
                &f64s(&want["weights"]),
                tol,
            );
            let loss = weighted_loss(&w, &token_losses).expect("loss");
            let want_loss = want["loss"].as_f64().expect("loss");
            assert!(
                close(loss, want_loss, tol),
                "{name}: {key}: loss {loss:e} vs {want_loss:e}"
            );
            let mass = rule_mass(&batch, &w);
            for (field, got) in [("mass_pos", mass.mass_pos), ("mass_neg", mass.mass_neg)] {
                let want_m = want[field].as_f64().expect(field);
                assert!(
                    close(got, want_m, tol),
                    "{name}: {key}: {field} {got:e} vs {want_m:e}"
                );
            }
            checked_rules += 1;
        }
    }
    // 7 cases x 9 rule settings: nothing silently skipped.
    assert_eq!(checked_rules, cases.len() * 9);
}
