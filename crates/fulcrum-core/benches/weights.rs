//! Weights and diagnostics for every rule over a step batch of about one million tokens
//! (512 groups x 16 responses, lengths 1..=4096 with a long tail), and the same at a quarter,
//! half and double the responses to show the cost is linear in the number of responses.
//!
//! Run: `cargo bench -p fulcrum-core --bench weights`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fulcrum_core::{advantages, Diagnostics, Estimator, RuleParams, StepBatch};

struct Rollouts {
    groups: Vec<u32>,
    rewards: Vec<f64>,
    lengths: Vec<i64>,
}

/// Deterministic rollouts: binary rewards, lengths from a long-tailed law with mean ~128,
/// wrong answers ~1.6x longer than right ones, capped at 4096.
fn rollouts(n_groups: u32, g: u32) -> Rollouts {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut r = Rollouts {
        groups: vec![],
        rewards: vec![],
        lengths: vec![],
    };
    for group in 0..n_groups {
        let p = uniform();
        for _ in 0..g {
            let correct = uniform() < p;
            let mean = if correct { 100.0 } else { 160.0 };
            let len = (-mean * (1.0 - uniform()).ln()).ceil().clamp(1.0, 4096.0);
            r.groups.push(group);
            r.rewards.push(f64::from(u8::from(correct)));
            r.lengths.push(len as i64);
        }
    }
    r
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("advantages+weights+diagnostics, all rules");
    for n_groups in [128u32, 256, 512, 1024] {
        let r = rollouts(n_groups, 16);
        let tokens: i64 = r.lengths.iter().sum();
        let responses = r.groups.len() as u64;
        group.throughput(Throughput::Elements(responses));
        let id = BenchmarkId::from_parameter(format!("{responses} responses, {tokens} tokens"));
        group.bench_function(id, |b| {
            b.iter(|| {
                let adv = advantages::compute(Estimator::Grpo, &r.groups, &r.rewards, &r.lengths)
                    .unwrap();
                let batch = StepBatch::new(&r.groups, &r.lengths, &adv).unwrap();
                black_box(Diagnostics::compute(&batch, &r.rewards, &RuleParams::default()).unwrap())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
