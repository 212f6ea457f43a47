//! Property tests for the six properties listed in `shared/spec/aggregation.md` ("Properties
//! that tests must check"), the split invariance for every policy loss, on random batches: random group sizes, binary and real rewards,
//! lengths including zero, singleton and all-equal groups, and arbitrary micro-batch splits.

use fulcrum_core::cov_selection::{cov_selection, CovInput};
use fulcrum_core::policy_loss;
use fulcrum_core::{
    advantages, diagnostics::rule_mass, ppo_loss, weighted_loss, BaCount, ClipParams, Estimator,
    LossLevel, LossParams, PolicyLoss, Rule, RuleParams, StepBatch,
};
use proptest::prelude::*;

const REL: f64 = 1e-9;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= REL * a.abs().max(b.abs()).max(1e-12)
}

/// A batch as plain columns.
#[derive(Debug, Clone)]
struct Rollouts {
    groups: Vec<u32>,
    rewards: Vec<f64>,
    lengths: Vec<i64>,
}

impl Rollouts {
    fn from_groups(gs: Vec<Vec<(f64, i64)>>) -> Self {
        let mut r = Rollouts {
            groups: vec![],
            rewards: vec![],
            lengths: vec![],
        };
        for (g, members) in gs.into_iter().enumerate() {
            for (reward, len) in members {
                r.groups.push(g as u32);
                r.rewards.push(reward);
                r.lengths.push(len);
            }
        }
        r
    }

    fn batch(&self, est: Estimator) -> (StepBatch, Vec<f64>) {
        let adv = advantages::compute(est, &self.groups, &self.rewards, &self.lengths).unwrap();
        (
            StepBatch::new(&self.groups, &self.lengths, &adv).unwrap(),
            adv,
        )
    }
}

/// Groups of binary rewards; `min_len` 0 allows empty responses.
fn binary_groups(min_len: i64, max_groups: usize) -> impl Strategy<Value = Rollouts> {
    prop::collection::vec(
        prop::collection::vec((prop::bool::ANY.prop_map(f64::from), min_len..200i64), 1..9),
        1..max_groups,
    )
    .prop_map(Rollouts::from_groups)
}

/// Groups of arbitrary real rewards (some repeated, so ties and all-equal groups occur).
fn real_groups() -> impl Strategy<Value = Rollouts> {
    let reward = prop_oneof![Just(0.0), Just(1.0), -3.0..3.0f64];
    prop::collection::vec(prop::collection::vec((reward, 0..300i64), 1..9), 1..12)
        .prop_map(Rollouts::from_groups)
}

fn any_estimator() -> impl Strategy<Value = Estimator> {
    prop::sample::select(Estimator::ALL.to_vec())
}

fn any_count() -> impl Strategy<Value = BaCount> {
    prop::sample::select(BaCount::ALL.to_vec())
}

/// Per-group masses `(sum_{P_g} w L |A|, sum_{N_g} w L |A|)`.
fn group_masses(r: &Rollouts, adv: &[f64], w: &[f64]) -> Vec<(f64, f64)> {
    let n_groups = r.groups.iter().max().map_or(0, |g| *g as usize + 1);
    let mut out = vec![(0.0, 0.0); n_groups];
    for i in 0..r.groups.len() {
        let m = w[i] * r.lengths[i] as f64 * adv[i].abs();
        let slot = &mut out[r.groups[i] as usize];
        if adv[i] > 0.0 {
            slot.0 += m;
        } else if adv[i] < 0.0 {
            slot.1 += m;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Property 1: sign balance under `ba` and `seq`; under `token` the mass ratio of a group is
    /// `Lbar+ / Lbar-` (the sign-length coupling).
    #[test]
    fn sign_balance(r in binary_groups(1, 10), est in prop::sample::select(vec![Estimator::Grpo, Estimator::Mean]), count in any_count()) {
        let (batch, adv) = r.batch(est);
        for rule in [Rule::Ba, Rule::Seq] {
            let w = rule.weights(&batch, &RuleParams { ba_count: count, l_norm: 1.0, ba_pos_scale: 1.0 });
            for (g, (pos, neg)) in group_masses(&r, &adv, &w).into_iter().enumerate() {
                prop_assert!(close(pos, neg), "{rule} group {g}: {pos} vs {neg}");
            }
        }
        // token, one group at a time: ratio = Lbar+ / Lbar-.
        for g in 0..=*r.groups.iter().max().unwrap() {
            let idx: Vec<usize> = (0..r.groups.len()).filter(|&i| r.groups[i] == g).collect();
            let lens: Vec<i64> = idx.iter().map(|&i| r.lengths[i]).collect();
            let a: Vec<f64> = idx.iter().map(|&i| adv[i]).collect();
            let b = StepBatch::new(&vec![0; idx.len()], &lens, &a).unwrap();
            let m = rule_mass(&b, &Rule::Token.weights(&b, &RuleParams::default()));
            let mean = |pred: &dyn Fn(f64) -> bool| {
                let v: Vec<f64> = lens.iter().zip(&a).filter(|(_, x)| pred(**x)).map(|(l, _)| *l as f64).collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            if let (Some(lp), Some(ln), Some(ratio)) = (mean(&|x| x > 0.0), mean(&|x| x < 0.0), m.mass_ratio) {
                prop_assert!(close(ratio, lp / ln), "token ratio {ratio} vs {}", lp / ln);
            }
        }
    }

    /// Property 2: within a sign subset of a group, `ba` gives every token the same weight.
    #[test]
    fn ba_weighs_tokens_equally_within_a_sign_subset(r in real_groups(), est in any_estimator(), count in any_count()) {
        let (batch, adv) = r.batch(est);
        let w = Rule::Ba.weights(&batch, &RuleParams { ba_count: count, l_norm: 1.0, ba_pos_scale: 1.0 });
        for i in 0..w.len() {
            for j in 0..w.len() {
                let same_subset = r.groups[i] == r.groups[j]
                    && adv[i].signum() == adv[j].signum() && adv[i] != 0.0
                    && r.lengths[i] > 0 && r.lengths[j] > 0;
                if same_subset {
                    prop_assert!(close(w[i], w[j]), "{i} {j}: {} vs {}", w[i], w[j]);
                }
            }
        }
    }

    /// Property 3a: equal lengths (and equal group sizes) make `ba`, `seq`, `token` and
    /// `token-group` identical on every response that carries an advantage.
    #[test]
    fn equal_lengths_make_the_rules_agree(
        rewards in prop::collection::vec(prop::collection::vec(prop::bool::ANY.prop_map(f64::from), 4), 1..8),
        len in 1..500i64,
        count in any_count(),
    ) {
        let r = Rollouts::from_groups(rewards.into_iter().map(|g| g.into_iter().map(|x| (x, len)).collect()).collect());
        let (batch, adv) = r.batch(Estimator::Grpo);
        let p = RuleParams { ba_count: count, l_norm: 1.0, ba_pos_scale: 1.0 };
        let token = Rule::Token.weights(&batch, &p);
        for rule in [Rule::Ba, Rule::Seq, Rule::TokenGroup] {
            let w = rule.weights(&batch, &p);
            for i in (0..w.len()).filter(|&i| adv[i] != 0.0) {
                prop_assert!(close(w[i], token[i]), "{rule}[{i}]: {} vs {}", w[i], token[i]);
            }
        }
    }

    /// Property 3b: `Lbar+_g = Lbar-_g` in every group and no zero advantage: `ba` equals
    /// `token-group`.
    #[test]
    fn equal_subset_means_make_ba_equal_token_group(
        spec in prop::collection::vec((prop::collection::vec(1..100i64, 1..4), 1..4usize, 1..4usize), 1..8),
    ) {
        // Positive side: the base lengths repeated `a` times; negative side: `b` times. Both
        // subset means equal the base mean.
        let groups = spec.into_iter().map(|(base, a, b)| {
            let mut g: Vec<(f64, i64)> = Vec::new();
            for _ in 0..a { g.extend(base.iter().map(|&l| (1.0, l))); }
            for _ in 0..b { g.extend(base.iter().map(|&l| (0.0, l))); }
            g
        }).collect();
        let r = Rollouts::from_groups(groups);
        let (batch, _) = r.batch(Estimator::Grpo);
        let ba = Rule::Ba.weights(&batch, &RuleParams::default());
        let tg = Rule::TokenGroup.weights(&batch, &RuleParams::default());
        for i in 0..ba.len() {
            prop_assert!(close(ba[i], tg[i]), "[{i}] {} vs {}", ba[i], tg[i]);
        }
    }

    /// Property 4: a mixed group with no zero advantage and `W_g = G_g` has
    /// `sum_{i in g} w_i L_i = 1/M`.
    #[test]
    fn ba_group_total_weight_is_one_over_m(r in binary_groups(1, 10)) {
        let (batch, adv) = r.batch(Estimator::Grpo);
        let w = Rule::Ba.weights(&batch, &RuleParams::default());
        let m = batch.n_groups() as f64;
        for g in 0..batch.n_groups() as u32 {
            let idx: Vec<usize> = (0..w.len()).filter(|&i| r.groups[i] == g).collect();
            let mixed = idx.iter().any(|&i| adv[i] > 0.0) && idx.iter().any(|&i| adv[i] < 0.0);
            if mixed && idx.iter().all(|&i| adv[i] != 0.0) {
                let total: f64 = idx.iter().map(|&i| w[i] * r.lengths[i] as f64).sum();
                prop_assert!(close(total, 1.0 / m), "group {g}: {total} vs {}", 1.0 / m);
            }
        }
    }

    /// Property 5: a group whose rewards are all equal has `A_i = 0` and contributes nothing to
    /// the policy loss, under every rule and estimator.
    #[test]
    fn all_equal_groups_contribute_nothing(
        r in real_groups(), est in any_estimator(), count in any_count(),
        reward in -2.0..2.0f64, lens in prop::collection::vec(0..50i64, 1..6), seed in 0u64..1000,
    ) {
        let mut r = r;
        let g = r.groups.iter().max().unwrap() + 1;
        for &l in &lens { r.groups.push(g); r.rewards.push(reward); r.lengths.push(l); }
        let (batch, adv) = r.batch(est);
        let losses = token_losses(&r.lengths, &adv, seed);
        for i in (0..adv.len()).filter(|&i| r.groups[i] == g) {
            prop_assert_eq!(adv[i], 0.0);
            prop_assert!(losses[i].iter().all(|l| *l == 0.0));
        }
        for &rule in Rule::ALL {
            let w = rule.weights(&batch, &RuleParams { ba_count: count, l_norm: 64.0, ba_pos_scale: 1.0 });
            let only_g: Vec<f64> = (0..w.len()).map(|i| if r.groups[i] == g { w[i] } else { 0.0 }).collect();
            prop_assert_eq!(weighted_loss(&only_g, &losses).unwrap(), 0.0);
        }
    }

    /// Property 6: cutting the batch into micro-batches in any way (even through groups, with
    /// empty parts) leaves the loss and its gradient unchanged.
    #[test]
    fn micro_batch_split_leaves_loss_and_gradient_unchanged(
        r in real_groups(), est in any_estimator(), count in any_count(),
        parts in 1..6usize, assign_seed in 0u64..10_000, seed in 0u64..1000,
    ) {
        let (batch, adv) = r.batch(est);
        let n = adv.len();
        let clip = ClipParams::default();
        let (new, old) = logprobs(&r.lengths, seed);
        let assign: Vec<usize> = (0..n).map(|i| (splitmix(assign_seed ^ i as u64) % parts as u64) as usize).collect();
        for &rule in Rule::ALL {
            let w = rule.weights(&batch, &RuleParams { ba_count: count, l_norm: 300.0, ba_pos_scale: 1.0 });
            let mut full_grad = vec![];
            let mut full_losses = vec![];
            for i in 0..n {
                let tl = ppo_loss::response_losses(&new[i], &old[i], adv[i], &clip).unwrap();
                full_grad.push(tl.iter().map(|t| w[i] * t.grad_logp_new).collect::<Vec<_>>());
                full_losses.push(tl.iter().map(|t| t.loss).collect::<Vec<_>>());
            }
            let full = weighted_loss(&w, &full_losses).unwrap();
            // Each part sees only its own responses and the whole-batch weights.
            let mut split = 0.0;
            let mut split_grad = vec![vec![]; n];
            for p in 0..parts {
                let idx: Vec<usize> = (0..n).filter(|&i| assign[i] == p).collect();
                let pw: Vec<f64> = idx.iter().map(|&i| w[i]).collect();
                let pl: Vec<Vec<f64>> = idx.iter().map(|&i| full_losses[i].clone()).collect();
                split += weighted_loss(&pw, &pl).unwrap();
                for &i in &idx {
                    let tl = ppo_loss::response_losses(&new[i], &old[i], adv[i], &clip).unwrap();
                    split_grad[i] = tl.iter().map(|t| pw[idx.iter().position(|&j| j == i).unwrap()] * t.grad_logp_new).collect();
                }
            }
            prop_assert!((split - full).abs() <= 1e-12 * full.abs().max(1.0), "{rule}: {split} vs {full}");
            prop_assert_eq!(&split_grad, &full_grad);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Property 6 for every policy loss: with the rule's weights and the Clip-Cov / KL-Cov
    /// choice made once for the whole batch, any micro-batch split gives the same loss and
    /// gradient; a sequence-level loss puts `n_i w_i L_i` on its response.
    #[test]
    fn every_policy_loss_is_split_invariant(
        r in real_groups(), est in any_estimator(), parts in 1..6usize,
        assign_seed in 0u64..10_000, seed in 0u64..1000, sel_seed in 0u64..1000,
    ) {
        let (batch, adv) = r.batch(est);
        let n = adv.len();
        let (new, old) = logprobs(&r.lengths, seed);
        let assign: Vec<usize> = (0..n).map(|i| (splitmix(assign_seed ^ i as u64) % parts as u64) as usize).collect();
        let params = LossParams { clip_cov_frac: 0.1, clip_cov_lb: -5.0, kl_cov_frac: 0.1, ..LossParams::default() };
        for &loss in PolicyLoss::ALL {
            let inputs: Vec<CovInput<'_>> = old.iter().zip(&adv).map(|(logp, &adv)| CovInput { logp, adv }).collect();
            let selection = cov_selection(loss, &inputs, &params, &mut fulcrum_core::SplitMix64::seeded(sel_seed));
            let no_sel: Vec<Vec<bool>> = old.iter().map(|o| vec![false; o.len()]).collect();
            let selection = if loss.uses_cov_selection() { selection } else { no_sel };
            let w = Rule::Ba.weights(&batch, &RuleParams::default());
            let terms = |i: usize| policy_loss::response_terms(loss, &new[i], &old[i], adv[i], &selection[i], &params).unwrap();
            let full_losses: Vec<Vec<f64>> = (0..n).map(|i| terms(i).iter().map(|t| t.loss).collect()).collect();
            let full = weighted_loss(&w, &full_losses).unwrap();
            let full_grad: Vec<Vec<f64>> = (0..n).map(|i| terms(i).iter().map(|t| w[i] * t.grad).collect()).collect();
            let mut split = 0.0;
            let mut split_grad = vec![vec![]; n];
            for p in 0..parts {
                let idx: Vec<usize> = (0..n).filter(|&i| assign[i] == p).collect();
                let pw: Vec<f64> = idx.iter().map(|&i| w[i]).collect();
                let pl: Vec<Vec<f64>> = idx.iter().map(|&i| terms(i).iter().map(|t| t.loss).collect()).collect();
                split += weighted_loss(&pw, &pl).unwrap();
                for &i in &idx {
                    split_grad[i] = terms(i).iter().map(|t| w[i] * t.grad).collect();
                }
            }
            prop_assert!((split - full).abs() <= 1e-12 * full.abs().max(1.0), "{loss}: {split} vs {full}");
            prop_assert_eq!(&split_grad, &full_grad);
            if loss.level() == LossLevel::Sequence {
                for (i, &wi) in w.iter().enumerate() {
                    let t = terms(i);
                    if let Some(first) = t.first() {
                        let sum: f64 = t.iter().map(|x| wi * x.loss).sum();
                        prop_assert!(close(sum, wi * t.len() as f64 * first.loss), "{loss}: W_i = n_i w_i");
                    }
                }
            }
        }
    }
}

/// The bug the design rule forbids, shown to exist: recomputing `token` weights per micro-batch
/// changes the loss. (So the invariance test above would catch a per-micro-batch denominator.)
#[test]
fn per_micro_batch_denominators_would_change_the_loss() {
    let r = Rollouts::from_groups(vec![vec![(1.0, 3), (0.0, 30)], vec![(1.0, 5), (0.0, 7)]]);
    let (batch, adv) = r.batch(Estimator::Grpo);
    let losses = token_losses(&r.lengths, &adv, 7);
    let full = weighted_loss(
        &Rule::Token.weights(&batch, &RuleParams::default()),
        &losses,
    )
    .unwrap();
    let mut per_part = 0.0;
    for part in [[0usize, 1], [2, 3]] {
        let g: Vec<u32> = part.iter().map(|&i| r.groups[i]).collect();
        let l: Vec<i64> = part.iter().map(|&i| r.lengths[i]).collect();
        let a: Vec<f64> = part.iter().map(|&i| adv[i]).collect();
        let b = StepBatch::new(&g, &l, &a).unwrap();
        let pl: Vec<Vec<f64>> = part.iter().map(|&i| losses[i].clone()).collect();
        per_part +=
            weighted_loss(&Rule::Token.weights(&b, &RuleParams::default()), &pl).unwrap() / 2.0;
    }
    assert!((per_part - full).abs() > 1e-3, "{per_part} vs {full}");
}

/// A zero-length response never makes a weight non-finite, whatever the rule.
#[test]
fn zero_length_responses_never_divide_by_zero() {
    let r = Rollouts::from_groups(vec![
        vec![(1.0, 0), (0.0, 0)],
        vec![(1.0, 0), (0.0, 4)],
        vec![(0.5, 0)],
    ]);
    let (batch, _) = r.batch(Estimator::Grpo);
    for &rule in Rule::ALL {
        for &count in BaCount::ALL {
            let w = rule.weights(
                &batch,
                &RuleParams {
                    ba_count: count,
                    l_norm: 8.0,
                    ba_pos_scale: 1.0,
                },
            );
            assert!(
                w.iter().all(|x| x.is_finite() && *x >= 0.0),
                "{rule}/{count}: {w:?}"
            );
            assert_eq!(
                (w[0], w[1], w[2], w[4]),
                (0.0, 0.0, 0.0, 0.0),
                "{rule}/{count}"
            );
        }
    }
}

/// The first output of SplitMix64 from state `x`.
fn splitmix(x: u64) -> u64 {
    fulcrum_core::SplitMix64::new(x).next_u64()
}

/// Deterministic pseudo-random `(logp_new, logp_old)` per response, ratios both inside and
/// outside the clip range.
fn logprobs(lengths: &[i64], seed: u64) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let u =
        |k: u64| (splitmix(seed.wrapping_mul(1_000_003) ^ k) >> 11) as f64 / (1u64 << 53) as f64;
    let mut k = 0;
    let mut new = vec![];
    let mut old = vec![];
    for &l in lengths {
        let (mut n, mut o) = (vec![], vec![]);
        for _ in 0..l {
            let lo = -3.0 * u(k);
            let hi = lo + (u(k + 1) - 0.5) * 1.5;
            k += 2;
            o.push(lo);
            n.push(hi);
        }
        new.push(n);
        old.push(o);
    }
    (new, old)
}

fn token_losses(lengths: &[i64], adv: &[f64], seed: u64) -> Vec<Vec<f64>> {
    let (new, old) = logprobs(lengths, seed);
    (0..lengths.len())
        .map(|i| {
            ppo_loss::response_losses(&new[i], &old[i], adv[i], &ClipParams::default())
                .unwrap()
                .iter()
                .map(|t| t.loss)
                .collect()
        })
        .collect()
}
