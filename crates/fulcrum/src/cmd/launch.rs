//! `fulcrum train --nproc N`: starts N ranks of the same command on this machine, with the
//! environment a standard launcher sets (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`,
//! `MASTER_PORT`), and watches them: the first rank to fail stops the others, so a job never
//! lingers half-dead. Jobs over several machines use torchrun or Slurm instead (fulcrum joins
//! from the same variables); this is not a cluster manager.

use std::net::TcpListener;
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Runs `args` (this binary's arguments without `--nproc`) as `nproc` ranks; returns when all
/// have ended, with the first failure's exit code.
pub fn run_ranks(
    nproc: usize,
    args: &[String],
    threads_per_rank: Option<usize>,
) -> Result<ExitCode> {
    if nproc == 0 {
        bail!("--nproc must be at least 1");
    }
    let exe = std::env::current_exe().context("finding this binary to start the ranks")?;
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .context("finding a free port for the ranks' rendezvous")?;
    let mut extra = Vec::new();
    if let Some(t) = threads_per_rank {
        extra = vec!["--set".to_string(), format!("threads={t}")];
    }
    let mut children: Vec<Option<Child>> = Vec::with_capacity(nproc);
    for rank in 0..nproc {
        let child = Command::new(&exe)
            .args(args)
            .args(&extra)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", nproc.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .spawn()
            .with_context(|| format!("starting rank {rank} ({})", exe.display()))?;
        children.push(Some(child));
    }
    let mut first_failure: Option<(usize, ExitStatus)> = None;
    while children.iter().any(Option::is_some) {
        for (rank, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            if let Some(status) = child.try_wait().context("waiting for a rank")? {
                *slot = None;
                if !status.success() && first_failure.is_none() {
                    first_failure = Some((rank, status));
                }
            }
        }
        if let Some((rank, status)) = first_failure {
            let left: Vec<usize> = (0..nproc).filter(|&r| children[r].is_some()).collect();
            if !left.is_empty() {
                eprintln!(
                    "fulcrum: rank {rank} ended with {status}; stopping rank(s) {left:?} (resume with --resume)"
                );
            }
            for child in children.iter_mut().flatten() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let code = status.code().map_or(1, |c| c.clamp(1, 255)) as u8;
            return Ok(ExitCode::from(code));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(ExitCode::SUCCESS)
}

/// This process's arguments without `--nproc N` / `--nproc=N`.
pub fn args_without_nproc() -> Vec<String> {
    let mut out = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--nproc" {
            it.next();
        } else if !a.starts_with("--nproc=") {
            out.push(a);
        }
    }
    out
}
