//! Two ranks on loopback (Gloo): each collective against what it must compute, in f32, bf16 and
//! i64; a dead peer ends the survivor's collective with an error within the timeout; and rank 1
//! played by PyTorch itself (`torch.distributed.ProcessGroupGloo` in the project's venv) agrees
//! bit for bit, which shows the shim drives the same engine.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use fulcrum_dist::{ProcessGroup, ReduceOp};
use tch::{Device, Kind, Tensor};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Runs `f(rank, group)` on `world` threads, one rank each; returns their results in rank order.
fn ranks<T: Send + 'static>(
    world: usize,
    timeout: Duration,
    f: impl Fn(usize, &mut ProcessGroup) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let port = free_port();
    let handles: Vec<_> = (0..world)
        .map(|r| {
            let f = f.clone();
            std::thread::spawn(move || {
                let mut g = ProcessGroup::join(Device::Cpu, "127.0.0.1", port, r, world, timeout)
                    .expect("join");
                f(r, &mut g)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread"))
        .collect()
}

#[test]
fn collectives_compute_what_they_should_in_f32_bf16_and_i64() {
    let out = ranks(2, Duration::from_secs(60), |r, g| {
        let mut checks = Vec::new();
        for kind in [Kind::Float, Kind::BFloat16, Kind::Int64] {
            let base = Tensor::arange(6, (Kind::Int64, Device::Cpu)).to_kind(kind);
            // all_reduce SUM / MAX: rank r holds base * (r + 1).
            let mut t = &base * (r as i64 + 1);
            g.all_reduce(&mut t, ReduceOp::Sum).unwrap();
            checks.push(t.equal(&(&base * 3)));
            let mut t = &base * (r as i64 + 1);
            g.all_reduce(&mut t, ReduceOp::Max).unwrap();
            checks.push(t.equal(&(&base * 2)));
            // broadcast from rank 1.
            let mut t = &base + r as i64 * 10;
            g.broadcast(&mut t, 1).unwrap();
            checks.push(t.equal(&(&base + 10)));
            // all_gather: [base, base + 10].
            let got = g.all_gather(&(&base + r as i64 * 10)).unwrap();
            checks.push(got.equal(&Tensor::stack(&[&base, &(&base + 10)], 0)));
            // reduce_scatter of 6 elements: rank r gets the sum of chunk r.
            let got = g
                .reduce_scatter(&(&base * (r as i64 + 1)), ReduceOp::Sum)
                .unwrap();
            checks.push(got.equal(&(base.narrow(0, 3 * r as i64, 3) * 3)));
        }
        g.barrier().unwrap();
        let bytes = g.all_gather_bytes(&vec![r as u8 + 1; 3 + 5 * r]).unwrap();
        checks.push(bytes == vec![vec![1u8; 3], vec![2u8; 8]]);
        checks.push(g.sum_f64(&[0.5, r as f64]).unwrap() == vec![1.0, 1.0]);
        checks
    });
    for (r, checks) in out.iter().enumerate() {
        assert!(checks.iter().all(|&c| c), "rank {r}: {checks:?}");
    }
}

#[test]
fn a_bad_rank_or_an_empty_world_is_refused() {
    let e = ProcessGroup::join(Device::Cpu, "127.0.0.1", 1, 2, 2, Duration::from_secs(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 2") && e.contains("world size 2"), "{e}");
    assert!(ProcessGroup::join(Device::Cpu, "127.0.0.1", 1, 0, 0, Duration::from_secs(1)).is_err());
}

#[test]
fn a_rank_that_never_comes_ends_the_rendezvous_within_the_timeout() {
    let t0 = Instant::now();
    let e = ProcessGroup::join(
        Device::Cpu,
        "127.0.0.1",
        free_port(),
        0,
        2,
        Duration::from_secs(3),
    )
    .unwrap_err()
    .to_string();
    let secs = t0.elapsed().as_secs_f64();
    assert!(secs < 30.0, "took {secs} s: {e}");
    assert!(e.contains("rendezvous"), "{e}");
}

/// The child half of the dead-peer test: joins as rank 1, then exits without a collective.
#[test]
fn dead_peer_child() {
    let Ok(port) = std::env::var("FULCRUM_DIST_TEST_PORT") else {
        return;
    };
    let port: u16 = port.parse().expect("port");
    let _g = ProcessGroup::join(
        Device::Cpu,
        "127.0.0.1",
        port,
        1,
        2,
        Duration::from_secs(30),
    )
    .expect("child join");
    // Killed: no destructor, no goodbye.
    std::process::abort();
}

#[test]
fn a_peer_that_dies_ends_the_survivors_collective_with_an_error() {
    let port = free_port();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "dead_peer_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("FULCRUM_DIST_TEST_PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn the peer");
    let timeout = Duration::from_secs(10);
    let mut g = ProcessGroup::join(Device::Cpu, "127.0.0.1", port, 0, 2, timeout).expect("join");
    let _ = child.wait();
    let t0 = Instant::now();
    let mut t = Tensor::ones([4], (Kind::Float, Device::Cpu));
    let e = g.all_reduce(&mut t, ReduceOp::Sum).unwrap_err().to_string();
    let secs = t0.elapsed().as_secs_f64();
    assert!(secs < 3.0 * timeout.as_secs_f64(), "took {secs} s");
    assert!(e.contains("all_reduce") && e.contains("rank 0 of 2"), "{e}");
}

/// Rank 1 is PyTorch's own `ProcessGroupGloo` (the venv's python), on the same store.
#[test]
fn pytorch_as_the_other_rank_agrees_bit_for_bit() -> anyhow::Result<()> {
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.venv/bin/python");
    if !std::path::Path::new(python).exists() {
        eprintln!("skipped: no {python}");
        return Ok(());
    }
    let port = free_port();
    let script = format!(
        r#"
import datetime, torch, torch.distributed as dist
store = dist.TCPStore("127.0.0.1", {port}, 2, False, timeout=datetime.timedelta(seconds=60))
store = dist.PrefixStore("fulcrum", store)
pg = dist.ProcessGroupGloo(store, 1, 2, datetime.timedelta(seconds=60))
g = torch.Generator().manual_seed(7)
x = torch.randn(1000, generator=g) * 1e3
pg.allreduce([x]).wait()
print(x.sum().item().hex(), x.double().pow(2).sum().item().hex())
"#
    );
    let child = std::process::Command::new(python)
        .args(["-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut g = ProcessGroup::join(
        Device::Cpu,
        "127.0.0.1",
        port,
        0,
        2,
        Duration::from_secs(60),
    )?;
    tch::manual_seed(11);
    let mut x = Tensor::randn([1000], (Kind::Float, Device::Cpu)) * 1e3;
    let mine = x.copy();
    g.all_reduce(&mut x, ReduceOp::Sum)?;
    let out = child.wait_with_output()?;
    let printed = String::from_utf8(out.stdout)?;
    // Python's rank 1 used torch.randn with seed 7; recompute its tensor here to check the sum.
    let theirs = &x - &mine;
    let theirs_sum = theirs.sum(Kind::Float).double_value(&[]);
    let py: Vec<f64> = printed
        .split_whitespace()
        .map(f64_from_hex)
        .collect::<Option<_>>()
        .ok_or_else(|| anyhow::anyhow!("python printed {printed:?}"))?;
    let ours = (
        x.sum(Kind::Float).double_value(&[]),
        x.to_kind(Kind::Double)
            .square()
            .sum(Kind::Double)
            .double_value(&[]),
    );
    assert_eq!(
        (ours.0, ours.1),
        (py[0], py[1]),
        "theirs summed to {theirs_sum}"
    );
    Ok(())
}

/// Parses Python's `float.hex()` (`0x1.8p+1`, `-0x0.0p+0`).
fn f64_from_hex(s: &str) -> Option<f64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let s = s.strip_prefix("0x")?;
    let (mant, exp) = s.split_once('p')?;
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let mut v = u64::from_str_radix(int, 16).ok()? as f64;
    for (i, c) in frac.chars().enumerate() {
        v += c.to_digit(16)? as f64 / 16f64.powi(i as i32 + 1);
    }
    let v = v * 2f64.powi(exp.parse().ok()?);
    Some(if neg { -v } else { v })
}
