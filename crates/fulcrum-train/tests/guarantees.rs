//! The trainer's guarantees on the real loss path, on the built-in tiny model:
//! micro-batch invariance of the parameter gradient, and the non-finite guard.

use fulcrum_core::cov_selection::{cov_selection, CovInput};
use fulcrum_core::{advantages, Estimator, PolicyLoss, Rule, RuleParams, SplitMix64, StepBatch};
use fulcrum_model::optim::{AdamW, AdamWConfig, Update};
use fulcrum_model::Model;
use fulcrum_train::accumulate::{backward_micro_batches, MicroStats};
use fulcrum_train::packing::Item;
use fulcrum_train::policy::{guarded_update, Policy};
use fulcrum_train::ranks::Ranks;
use fulcrum_train::rollout::Rollout;
use fulcrum_train::{Config, ForwardSettings, TrainError};
use tch::{Device, Kind, Tensor};

/// Forward/backward over `items` in micro-batches of `micro`, accumulating gradients.
fn backward(
    p: &Policy,
    items: &[Item<'_>],
    reg_weight: f64,
    cfg: &Config,
    micro: usize,
) -> Result<MicroStats, TrainError> {
    let fwd = ForwardSettings {
        micro_batch_size: micro,
        ..cfg.forward()
    };
    backward_micro_batches(
        &p.model,
        p.reference.as_ref(),
        items,
        reg_weight,
        &fwd,
        &cfg.ppo,
    )
}

/// One guarded optimizer step over `items`, as the GRPO step takes it.
fn update(
    p: &mut Policy,
    items: &[Item<'_>],
    reg_weight: f64,
    cfg: &Config,
    lr: f64,
) -> Result<(MicroStats, Update), TrainError> {
    let Policy {
        model,
        opt,
        reference,
    } = p;
    guarded_update(
        model,
        opt,
        &mut Ranks::single(),
        cfg.optim.grad_clip,
        lr,
        || {
            let s = backward_micro_batches(
                model,
                reference.as_ref(),
                items,
                reg_weight,
                &cfg.forward(),
                &cfg.ppo,
            )?;
            let loss = s.loss;
            Ok((s, loss))
        },
    )
}

fn policy() -> Policy {
    // One kernel thread: the tests of this file run in parallel on a 2-core machine.
    tch::set_num_threads(1);
    let model = Model::tiny(Device::Cpu, 0).unwrap();
    let opt = AdamW::new(model.var_store(), AdamWConfig::default()).into();
    Policy {
        model,
        opt,
        reference: None,
    }
}

/// Two groups of four with varied prompt and response lengths and binary rewards.
fn rollouts() -> Vec<Rollout> {
    let mut out = Vec::new();
    let mut x = 12345u64;
    let mut next = |m: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    for g in 0..2 {
        let prompt: Vec<i64> = (0..3 + g * 2).map(|_| 4 + next(60) as i64).collect();
        for k in 0..4 {
            let len = 2 + next(9) as usize;
            let response: Vec<i64> = (0..len).map(|_| 4 + next(60) as i64).collect();
            out.push(Rollout {
                group: g,
                prompt_ids: prompt.clone(),
                old_logprobs: (0..len).map(|_| -3.0 - next(100) as f32 / 100.0).collect(),
                engine: None,
                is_weights: None,
                response_ids: response,
                truncated: false,
                text: String::new(),
                reward: ((k + g) % 2) as f64,
                correct: false,
                reason: String::new(),
                tool_mask: Vec::new(),
            });
        }
    }
    out
}

/// Every parameter (`grads: false`) or every defined gradient (`grads: true`), flattened in
/// name order.
fn flatten(p: &Policy, grads: bool) -> Vec<f64> {
    let mut vars = p
        .model
        .var_store()
        .variables()
        .into_iter()
        .collect::<Vec<_>>();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    let parts: Vec<Tensor> = vars
        .iter()
        .map(|(_, t)| if grads { t.grad() } else { t.shallow_clone() })
        .filter(|t| t.defined())
        .map(|t| t.to_kind(Kind::Double).flatten(0, -1))
        .collect();
    Vec::<f64>::try_from(Tensor::cat(&parts, 0)).unwrap()
}

fn flat_grads(p: &Policy) -> Vec<f64> {
    flatten(p, true)
}

#[test]
fn gradient_does_not_depend_on_the_micro_batch_size_under_any_loss() {
    let rs = rollouts();
    let groups: Vec<usize> = rs.iter().map(|r| r.group).collect();
    let rewards: Vec<f64> = rs.iter().map(|r| r.reward).collect();
    let lengths: Vec<i64> = rs.iter().map(|r| r.response_ids.len() as i64).collect();
    let adv = advantages::compute(Estimator::Grpo, &groups, &rewards, &lengths).unwrap();
    let batch = StepBatch::new(&groups, &lengths, &adv).unwrap();
    // Every policy loss, under three rules; Clip-Cov and KL-Cov with fractions large enough
    // to choose tokens in both groups.
    for loss in PolicyLoss::ALL.iter().copied() {
        let mut cfg = Config::default();
        cfg.ppo.loss = loss;
        cfg.ppo.params.clip_cov_frac = 0.2;
        cfg.ppo.params.clip_cov_lb = -10.0;
        cfg.ppo.params.kl_cov_frac = 0.2;
        let logp: Vec<Vec<f64>> = rs
            .iter()
            .map(|r| r.old_logprobs.iter().map(|&v| v as f64).collect())
            .collect();
        let inputs: Vec<CovInput<'_>> = logp
            .iter()
            .zip(&adv)
            .map(|(logp, &adv)| CovInput { logp, adv })
            .collect();
        let mut rng = SplitMix64::seeded(7);
        let selection = cov_selection(loss, &inputs, &cfg.ppo.params, &mut rng);
        if loss.uses_cov_selection() {
            assert!(
                selection.iter().flatten().any(|&s| s),
                "{loss}: nothing chosen"
            );
        }
        for rule in [Rule::Ba, Rule::Seq, Rule::Token] {
            let w = rule.weights(&batch, &RuleParams::default());
            let items: Vec<Item<'_>> = rs
                .iter()
                .enumerate()
                .map(|(i, r)| Item {
                    rollout: r,
                    advantage: adv[i],
                    weight: w[i],
                    active: true,
                    selected: selection.get(i).map(Vec::as_slice),
                })
                .collect();
            let mut p = policy();
            let mut grads = Vec::new();
            for micro in [1, 3, items.len()] {
                p.opt.zero_grad();
                backward(&p, &items, 0.0, &cfg, micro).unwrap();
                grads.push(flat_grads(&p));
            }
            let norm = grads[2].iter().map(|g| g * g).sum::<f64>().sqrt();
            assert!(
                norm > 0.0,
                "{loss} {rule}: the test needs a non-zero gradient"
            );
            for (k, g) in grads.iter().enumerate().take(2) {
                let diff = g
                    .iter()
                    .zip(&grads[2])
                    .map(|(a, b)| (a - b).powi(2))
                    .sum::<f64>()
                    .sqrt();
                assert!(
                    diff <= 1e-5 * norm,
                    "{loss} {rule}: micro-batch case {k}: |diff| {diff:e} vs |g| {norm:e}"
                );
            }
        }
    }
}

fn snapshot(p: &Policy) -> Vec<f64> {
    flatten(p, false)
}

#[test]
fn non_finite_loss_skips_the_step_and_touches_nothing() {
    let rs = rollouts();
    let cfg = Config::default();
    let mut p = policy();
    // One ordinary step first, so the optimizer has state to protect.
    let good: Vec<Item<'_>> = rs
        .iter()
        .map(|r| Item {
            rollout: r,
            advantage: 1.0,
            weight: 0.01,
            active: true,
            selected: None,
        })
        .collect();
    let (_, outcome) = update(&mut p, &good, 0.0, &cfg, 1e-3).unwrap();
    assert!(matches!(outcome, Update::Applied { .. }));
    let before = snapshot(&p);
    let opt_before = p.opt.step_count();
    let (moments_before, _) = p.opt.replicated().unwrap().state();
    // Inject a NaN weight: the loss is NaN.
    let mut bad = good.clone();
    bad[3].weight = f64::NAN;
    let (stats, outcome) = update(&mut p, &bad, 0.0, &cfg, 1e-3).unwrap();
    assert_eq!(outcome, Update::Skipped);
    assert!(!stats.loss.is_finite());
    assert_eq!(snapshot(&p), before, "weights changed on a skipped step");
    assert_eq!(p.opt.step_count(), opt_before);
    let (moments_after, _) = p.opt.replicated().unwrap().state();
    for ((n1, a), (n2, b)) in moments_before.iter().zip(&moments_after) {
        assert_eq!(n1, n2);
        assert!(a.equal(b), "optimizer state {n1} changed on a skipped step");
    }
    // And training goes on afterwards.
    let (_, outcome) = update(&mut p, &good, 0.0, &cfg, 1e-3).unwrap();
    assert!(matches!(outcome, Update::Applied { .. }));
    assert_ne!(snapshot(&p), before);
}

#[test]
fn entropy_bonus_has_a_gradient() {
    let rs = rollouts();
    let mut cfg = Config::default();
    cfg.ppo.entropy_coef = 0.01;
    // Zero advantages and weights: any gradient comes from the entropy term alone.
    let items: Vec<Item<'_>> = rs
        .iter()
        .map(|r| Item {
            rollout: r,
            advantage: 0.0,
            weight: 0.0,
            active: true,
            selected: None,
        })
        .collect();
    let mut p = policy();
    p.opt.zero_grad();
    backward(&p, &items, 0.01, &cfg, 4).unwrap();
    let norm = flat_grads(&p).iter().map(|g| g * g).sum::<f64>().sqrt();
    assert!(norm > 0.0, "the entropy bonus did not reach the parameters");
}

#[test]
fn skipping_zero_weight_responses_keeps_the_gradient() {
    let rs = rollouts();
    // Group 0 carries weight 0 (as an all-equal group would); group 1 carries the update.
    let items: Vec<Item<'_>> = rs
        .iter()
        .map(|r| Item {
            rollout: r,
            advantage: if r.reward > 0.0 { 1.0 } else { -1.0 },
            weight: if r.group == 0 { 0.0 } else { 0.05 },
            active: true,
            selected: None,
        })
        .collect();
    let mut grads = Vec::new();
    let mut tokens = Vec::new();
    for skip in [false, true] {
        let mut cfg = Config::default();
        cfg.ppo.skip_zero_weight = skip;
        let mut p = policy();
        p.opt.zero_grad();
        let s = backward(&p, &items, 0.0, &cfg, 3).unwrap();
        grads.push(flat_grads(&p));
        tokens.push(s.tokens);
    }
    assert!(tokens[1] < tokens[0], "nothing was skipped: {tokens:?}");
    let norm = grads[0].iter().map(|g| g * g).sum::<f64>().sqrt();
    let diff = grads[0]
        .iter()
        .zip(&grads[1])
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        .sqrt();
    assert!(
        norm > 0.0 && diff <= 1e-5 * norm,
        "|diff| {diff:e} vs |g| {norm:e}"
    );

    // With an entropy bonus every response matters, so nothing may be skipped.
    let mut cfg = Config::default();
    cfg.ppo.skip_zero_weight = true;
    cfg.ppo.entropy_coef = 0.01;
    let p = policy();
    let s = backward(&p, &items, 0.01, &cfg, 3).unwrap();
    assert_eq!(s.tokens, tokens[0]);
}

#[test]
fn sharing_the_prompt_keeps_the_loss_and_the_gradient() {
    let rs = rollouts();
    let items: Vec<Item<'_>> = rs
        .iter()
        .enumerate()
        .map(|(i, r)| Item {
            rollout: r,
            advantage: if r.reward > 0.0 { 0.8 } else { -1.1 },
            weight: 0.03 + 0.01 * i as f64,
            active: true,
            selected: None,
        })
        .collect();
    // Whole groups, groups cut into pieces, one response per micro-batch; with the entropy
    // bonus (which needs every position's entropy) and with KL to a reference model.
    for (micro, entropy_coef, kl_coef) in [
        (4, 0.0, 0.0),
        (3, 0.0, 0.0),
        (1, 0.0, 0.0),
        (4, 0.01, 0.0),
        (3, 0.0, 0.05),
    ] {
        let mut runs = Vec::new();
        for share in [false, true] {
            let mut cfg = Config::default();
            cfg.ppo.share_prompt = share;
            cfg.ppo.entropy_coef = entropy_coef;
            cfg.ppo.kl_coef = kl_coef;
            let mut p = policy();
            if kl_coef > 0.0 {
                p.reference = Some(Model::tiny(Device::Cpu, 7).unwrap());
            }
            p.opt.zero_grad();
            let s = backward(&p, &items, 0.01, &cfg, micro).unwrap();
            runs.push((s, flat_grads(&p)));
        }
        let ((plain, g0), (shared, g1)) = (&runs[0], &runs[1]);
        assert_eq!(plain.tokens, shared.tokens);
        assert_eq!(plain.clipped, shared.clipped);
        for (name, a, b) in [
            ("loss", plain.loss, shared.loss),
            ("entropy", plain.entropy_sum, shared.entropy_sum),
            ("kl", plain.kl_sampling_sum, shared.kl_sampling_sum),
            ("kl_ref", plain.kl_ref_sum, shared.kl_ref_sum),
        ] {
            assert!(
                (a - b).abs() <= 1e-5 * a.abs().max(1e-3),
                "micro {micro}: {name} {a} vs {b}"
            );
        }
        let norm = g0.iter().map(|g| g * g).sum::<f64>().sqrt();
        let diff = g0
            .iter()
            .zip(g1)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(
            norm > 0.0 && diff <= 1e-5 * norm,
            "micro {micro}, entropy {entropy_coef}: |diff| {diff:e} vs |g| {norm:e}"
        );
    }
}

#[test]
fn recomputed_old_logprobs_are_the_models_own_with_or_without_a_shared_prompt() {
    let p = policy();
    let temperature = 0.7;
    // The reference: each response forwarded alone with its prompt, by the plain forward.
    let want: Vec<Vec<f32>> = rollouts()
        .iter()
        .map(|r| {
            let ids: Vec<i64> = r
                .prompt_ids
                .iter()
                .chain(&r.response_ids)
                .copied()
                .collect();
            let ids = Tensor::from_slice(&ids).view([1, ids.len() as i64]);
            let lp =
                tch::no_grad(|| fulcrum_model::sequence_logprobs(p.model.net(), &ids, temperature))
                    .unwrap()
                    .logprobs;
            let all = Vec::<f32>::try_from(lp.flatten(0, -1)).unwrap();
            let first = r.prompt_ids.len() - 1;
            all[first..first + r.response_ids.len()].to_vec()
        })
        .collect();
    for (share, micro) in [(false, 3), (true, 3), (true, 4), (true, 1)] {
        let mut cfg = Config::default();
        cfg.ppo.share_prompt = share;
        cfg.ppo.micro_batch_size = micro;
        cfg.rollout.temperature = temperature;
        let mut rs = rollouts();
        fulcrum_train::offpolicy::recompute_old_logprobs(&p.model, &mut rs, &cfg.forward())
            .unwrap();
        for (i, (r, w)) in rs.iter().zip(&want).enumerate() {
            assert_eq!(r.old_logprobs.len(), w.len(), "share {share}, response {i}");
            for (a, b) in r.old_logprobs.iter().zip(w) {
                assert!(
                    (a - b).abs() < 1e-4,
                    "share {share}, micro {micro}, response {i}: {a} vs {b}"
                );
            }
        }
    }
}
