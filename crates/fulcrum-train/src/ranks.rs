//! The processes of a data-parallel job, as the step sees them: which share of a batch is this
//! rank's, and the few exchanges the step makes (fulcrum-dist's c10d collectives).
//!
//! Why the step stays exact under sharding: every rank samples and scores its share of the
//! prompts (whole groups), the rollouts are gathered so every rank holds the whole step batch,
//! and advantages and aggregation weights are then computed once for the global batch, the same
//! on every rank. Each rank back-propagates `sum over its responses of w_i * sum_t l_it`, so the
//! SUM of the ranks' gradients is the one-process gradient, with no `1/world` factor.

use std::ops::Range;
use std::time::Duration;

use fulcrum_dist::{Launch, ProcessGroup, ReduceOp};
use tch::nn::VarStore;
use tch::{Device, Tensor};

use fulcrum_model::optim::{defined_grads, trainable_by_name};

use crate::error::TrainError;

/// This process's place in the job: one process alone, or one rank of a c10d group.
pub struct Ranks {
    group: Option<ProcessGroup>,
    /// Gradients are all-reduced in buckets of about this many bytes.
    bucket_bytes: usize,
}

impl std::fmt::Debug for Ranks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ranks(rank {} of {})", self.rank(), self.world())
    }
}

impl Ranks {
    /// One process, no collectives.
    pub fn single() -> Ranks {
        Ranks {
            group: None,
            bucket_bytes: 25 << 20,
        }
    }

    /// Joins the job `launch` describes, with collectives for tensors on `device` (Gloo on
    /// CPU, NCCL on CUDA), each bounded by `timeout`.
    pub fn join(launch: &Launch, device: Device, timeout: Duration) -> Result<Ranks, TrainError> {
        let group = ProcessGroup::join(
            device,
            &launch.master_addr,
            launch.master_port,
            launch.rank,
            launch.world,
            timeout,
        )?;
        Ok(Ranks {
            group: Some(group),
            bucket_bytes: 25 << 20,
        })
    }

    /// Sets the gradient bucket size (`dist.bucket_mb`).
    pub fn with_bucket_mb(mut self, mb: usize) -> Ranks {
        self.bucket_bytes = mb.max(1) << 20;
        self
    }

    pub fn rank(&self) -> usize {
        self.group.as_ref().map_or(0, ProcessGroup::rank)
    }

    pub fn world(&self) -> usize {
        self.group.as_ref().map_or(1, ProcessGroup::world)
    }

    /// The device of the group's tensors (`None` alone).
    pub fn device(&self) -> Option<Device> {
        self.group.as_ref().map(ProcessGroup::device)
    }

    /// Rank 0 writes the run's files (metrics, samples, evaluations, checkpoints).
    pub fn is_main(&self) -> bool {
        self.rank() == 0
    }

    /// This rank's contiguous share of `n` items: the first `n % world` ranks take one more.
    pub fn share(&self, n: usize) -> Range<usize> {
        share(n, self.rank(), self.world())
    }

    /// The process group, when there is more than one process.
    pub fn group(&mut self) -> Option<&mut ProcessGroup> {
        self.group.as_mut()
    }

    /// Every rank's items, in rank order (each rank passes its share; all get the whole);
    /// `what` names them in an error.
    pub fn gather<T>(&mut self, mine: Vec<T>, what: &str) -> Result<Vec<T>, TrainError>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        let Some(g) = self.group.as_mut() else {
            return Ok(mine);
        };
        let mut bytes = Vec::new();
        ciborium::into_writer(&mine, &mut bytes).map_err(|e| TrainError::Exchange {
            what: what.to_string(),
            message: format!("encoding for the other ranks: {e}"),
        })?;
        let mut all = Vec::new();
        for (rank, b) in g.all_gather_bytes(&bytes)?.into_iter().enumerate() {
            let theirs: Vec<T> =
                ciborium::from_reader(b.as_slice()).map_err(|e| TrainError::Exchange {
                    what: what.to_string(),
                    message: format!("decoding what rank {rank} sent: {e}"),
                })?;
            all.extend(theirs);
        }
        Ok(all)
    }

    /// Sums of `values` over the ranks (the values themselves for one process).
    pub fn sum(&mut self, values: &[f64]) -> Result<Vec<f64>, TrainError> {
        match self.group.as_mut() {
            None => Ok(values.to_vec()),
            Some(g) => Ok(g.sum_f64(values)?),
        }
    }

    /// Waits for every rank (a no-op alone).
    pub fn barrier(&mut self) -> Result<(), TrainError> {
        match self.group.as_mut() {
            None => Ok(()),
            Some(g) => Ok(g.barrier()?),
        }
    }

    /// SUM-all-reduces the gradients of `vs`'s trainable variables in buckets. A rank whose
    /// share had nothing to back-propagate still takes part: every gradient is first defined
    /// (a zero backward), so all ranks reduce the same tensors.
    pub fn all_reduce_grads(&mut self, vs: &VarStore) -> Result<(), TrainError> {
        let bucket_bytes = self.bucket_bytes;
        let Some(g) = self.group.as_mut() else {
            return Ok(());
        };
        let grads = defined_grads(&trainable_by_name(vs));
        for bucket in buckets(&grads, bucket_bytes) {
            let flats: Vec<Tensor> = bucket.iter().map(|t| t.flatten(0, -1)).collect();
            let mut flat = Tensor::cat(&flats, 0);
            g.all_reduce(&mut flat, ReduceOp::Sum)?;
            let mut at = 0;
            tch::no_grad(|| {
                for t in bucket {
                    let n = t.numel() as i64;
                    let mut t = t.shallow_clone();
                    t.copy_(&flat.narrow(0, at, n).view_as(&t));
                    at += n;
                }
            });
        }
        Ok(())
    }
}

/// Consecutive runs of same-kind tensors of about `bytes` each.
fn buckets(ts: &[Tensor], bytes: usize) -> Vec<Vec<&Tensor>> {
    let mut out: Vec<Vec<&Tensor>> = Vec::new();
    let mut size = 0;
    for t in ts {
        let b = t.numel() * t.kind().elt_size_in_bytes();
        let same_kind = out
            .last()
            .and_then(|l| l.last())
            .is_some_and(|l| l.kind() == t.kind());
        if out.is_empty() || size + b > bytes || !same_kind {
            out.push(Vec::new());
            size = 0;
        }
        size += b;
        if let Some(last) = out.last_mut() {
            last.push(t);
        }
    }
    out
}

/// The contiguous share of `n` items of rank `rank` among `world`.
pub fn share(n: usize, rank: usize, world: usize) -> Range<usize> {
    let (base, extra) = (n / world, n % world);
    let start = rank * base + rank.min(extra);
    start..start + base + usize::from(rank < extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn shares_cover_the_batch_once_and_differ_by_at_most_one() {
        for world in 1..6 {
            for n in 0..20 {
                let shares: Vec<Range<usize>> = (0..world).map(|r| share(n, r, world)).collect();
                assert_eq!(shares[0].start, 0);
                assert_eq!(shares[world - 1].end, n);
                for w in shares.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                    assert!(w[0].len() >= w[1].len() && w[0].len() <= w[1].len() + 1);
                }
            }
        }
    }

    #[test]
    fn buckets_split_by_size_and_kind() {
        let f = |n: i64, k: Kind| Tensor::zeros([n], (k, Device::Cpu));
        let ts = [
            f(10, Kind::Float),
            f(10, Kind::Float),
            f(10, Kind::Float),
            f(4, Kind::BFloat16),
        ];
        let b = buckets(&ts, 80);
        let lens: Vec<usize> = b.iter().map(Vec::len).collect();
        assert_eq!(lens, vec![2, 1, 1]);
    }
}
