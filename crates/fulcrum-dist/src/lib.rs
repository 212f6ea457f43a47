//! Collectives on libtorch's own c10d, the engine `torch.distributed` runs on: a `TCPStore`
//! rendezvous and a `ProcessGroupGloo` (CPU tensors) or `ProcessGroupNCCL` (CUDA tensors, with
//! the `nccl` feature), reached through a small C++ shim (`csrc/c10d_shim.cpp`).
//!
//! Every call blocks until the collective is done on this rank, and every one is bounded by the
//! group's timeout: a rank that died or hangs makes the others fail with an error naming the
//! operation, never wait forever. All ranks must issue the same collectives in the same order.

mod launch;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::time::Duration;

use tch::{Device, Kind, Tensor};

pub use launch::{Launch, LaunchError};

/// A collective failed, or the group could not be formed.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    #[error("c10d {op} (rank {rank} of {world}): {message}")]
    Collective {
        op: &'static str,
        rank: usize,
        world: usize,
        message: String,
    },
    #[error("c10d rendezvous at {addr} as rank {rank} of {world}: {message}")]
    Rendezvous {
        addr: String,
        rank: usize,
        world: usize,
        message: String,
    },
    #[error("c10d {op}: {message}")]
    Argument { op: &'static str, message: String },
}

pub type Result<T> = std::result::Result<T, DistError>;

/// Which c10d backend carries the collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// ProcessGroupGloo: CPU tensors.
    Gloo,
    /// ProcessGroupNCCL: CUDA tensors (build with the `nccl` feature).
    Nccl,
}

impl Backend {
    /// The backend for tensors on `device`: NCCL on CUDA, Gloo otherwise.
    pub fn for_device(device: Device) -> Backend {
        match device {
            Device::Cuda(_) => Backend::Nccl,
            _ => Backend::Gloo,
        }
    }
}

/// Reductions (Gloo has no AVG: sums are divided by the caller where wanted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum = 0,
    Max = 1,
    Min = 2,
}

extern "C" {
    fn fc_free_error(err: *mut c_char);
    fn fc_group_new(
        backend: c_int,
        host: *const c_char,
        port: u16,
        rank: c_int,
        world: c_int,
        timeout_ms: i64,
        err: *mut *mut c_char,
    ) -> *mut c_void;
    fn fc_group_free(g: *mut c_void);
    fn fc_all_reduce(g: *mut c_void, t: *mut c_void, op: c_int, err: *mut *mut c_char) -> c_int;
    fn fc_broadcast(g: *mut c_void, t: *mut c_void, root: c_int, err: *mut *mut c_char) -> c_int;
    fn fc_all_gather(
        g: *mut c_void,
        out: *mut c_void,
        input: *mut c_void,
        err: *mut *mut c_char,
    ) -> c_int;
    fn fc_reduce_scatter(
        g: *mut c_void,
        out: *mut c_void,
        input: *mut c_void,
        op: c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    fn fc_barrier(g: *mut c_void, err: *mut *mut c_char) -> c_int;
}

/// Takes the shim's error message (and frees it).
fn take_error(err: *mut c_char) -> String {
    if err.is_null() {
        return "failed without a message".into();
    }
    // SAFETY: the shim hands over a NUL-terminated malloc'd string that only we free.
    let s = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    unsafe { fc_free_error(err) };
    s
}

/// One rank's membership of a c10d process group.
pub struct ProcessGroup {
    raw: *mut c_void,
    rank: usize,
    world: usize,
    backend: Backend,
    /// Where the group's tensors live (small helper tensors are made there).
    device: Device,
}

// SAFETY: a c10d backend may be used from any thread (one call at a time, which `&mut self`
// on every collective guarantees).
unsafe impl Send for ProcessGroup {}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ProcessGroup({:?}, rank {} of {})",
            self.backend, self.rank, self.world
        )
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: `raw` came from fc_group_new and is freed once.
        unsafe { fc_group_free(self.raw) }
    }
}

impl ProcessGroup {
    /// Joins the group of `world` ranks whose store rank 0 serves at `host:port`, with the
    /// backend for tensors on `device` (NCCL on CUDA, Gloo on CPU); waits for every rank up to
    /// `timeout`, which then bounds each collective.
    pub fn join(
        device: Device,
        host: &str,
        port: u16,
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<ProcessGroup> {
        let backend = Backend::for_device(device);
        let addr = format!("{host}:{port}");
        let fail = |message: String| DistError::Rendezvous {
            addr: addr.clone(),
            rank,
            world,
            message,
        };
        if world == 0 || rank >= world {
            return Err(fail(format!("rank {rank} is not below world size {world}")));
        }
        let host_c = CString::new(host).map_err(|_| fail("the host name holds a NUL".into()))?;
        let mut err = std::ptr::null_mut();
        let timeout_ms = timeout.as_millis().clamp(1, i64::MAX as u128) as i64;
        // SAFETY: valid C string and out-pointer; the shim catches every exception.
        let raw = unsafe {
            fc_group_new(
                backend as c_int,
                host_c.as_ptr(),
                port,
                rank as c_int,
                world as c_int,
                timeout_ms,
                &mut err,
            )
        };
        if raw.is_null() {
            return Err(fail(take_error(err)));
        }
        Ok(ProcessGroup {
            raw,
            rank,
            world,
            backend,
            device,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Runs one shim call `f(group, &mut err)` and turns its failure into an error naming `op`.
    fn call(
        &self,
        op: &'static str,
        f: impl FnOnce(*mut c_void, *mut *mut c_char) -> c_int,
    ) -> Result<()> {
        let mut err = std::ptr::null_mut();
        if f(self.raw, &mut err) == 0 {
            return Ok(());
        }
        Err(DistError::Collective {
            op,
            rank: self.rank,
            world: self.world,
            message: take_error(err),
        })
    }

    /// Reduces `t` over every rank, in place (all ranks end with the result).
    pub fn all_reduce(&mut self, t: &mut Tensor, op: ReduceOp) -> Result<()> {
        contiguous("all_reduce", t)?;
        let t = t.as_mut_ptr().cast();
        // SAFETY: `t` is a live contiguous tensor (tch's handle is an `at::Tensor*`).
        self.call("all_reduce", |g, err| unsafe {
            fc_all_reduce(g, t, op as c_int, err)
        })
    }

    /// Copies rank `root`'s `t` into every rank's `t`.
    pub fn broadcast(&mut self, t: &mut Tensor, root: usize) -> Result<()> {
        contiguous("broadcast", t)?;
        let t = t.as_mut_ptr().cast();
        // SAFETY: as in all_reduce.
        self.call("broadcast", |g, err| unsafe {
            fc_broadcast(g, t, root as c_int, err)
        })
    }

    /// Every rank's `input` (same shape on all ranks), concatenated in rank order along a new
    /// leading dimension of size `world`.
    pub fn all_gather(&mut self, input: &Tensor) -> Result<Tensor> {
        // c10d's flat form: a 1-D input and a 1-D output of world times its length.
        let mut shape = vec![self.world as i64];
        shape.extend(input.size());
        let mut input = input.contiguous().flatten(0, -1);
        let n = input.numel() as i64;
        let mut out = Tensor::empty([self.world as i64 * n], (input.kind(), input.device()));
        let (o, i) = (out.as_mut_ptr().cast(), input.as_mut_ptr().cast());
        // SAFETY: both tensors live and contiguous; `out` has world * numel(input) elements.
        self.call("all_gather", |g, err| unsafe {
            fc_all_gather(g, o, i, err)
        })?;
        Ok(out.reshape(shape))
    }

    /// Reduces `input` (a multiple of `world` elements, flat) over every rank and leaves rank
    /// r with the r-th of `world` equal chunks of the result.
    pub fn reduce_scatter(&mut self, input: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let n = input.numel();
        if input.dim() != 1 || !n.is_multiple_of(self.world) {
            return Err(DistError::Argument {
                op: "reduce_scatter",
                message: format!(
                    "needs a flat tensor of a multiple of {} elements, got shape {:?}",
                    self.world,
                    input.size()
                ),
            });
        }
        let mut input = input.contiguous();
        let chunk = (n / self.world) as i64;
        let mut out = Tensor::empty([chunk], (input.kind(), input.device()));
        let (o, i) = (out.as_mut_ptr().cast(), input.as_mut_ptr().cast());
        // SAFETY: both tensors live and contiguous, sizes checked above.
        self.call("reduce_scatter", |g, err| unsafe {
            fc_reduce_scatter(g, o, i, op as c_int, err)
        })?;
        Ok(out)
    }

    /// Returns once every rank has reached it.
    pub fn barrier(&mut self) -> Result<()> {
        // SAFETY: a live group.
        self.call("barrier", |g, err| unsafe { fc_barrier(g, err) })
    }

    /// Every rank's byte string, in rank order (lengths may differ): one all-gather of the
    /// lengths, one of the payloads padded to the longest.
    pub fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let len = Tensor::from_slice(&[bytes.len() as i64]).to_device(self.device);
        let lens: Vec<i64> =
            Vec::<i64>::try_from(self.all_gather(&len)?.flatten(0, -1).to_device(Device::Cpu))
                .map_err(|e| self.argument("all_gather_bytes", e))?;
        let longest = lens.iter().copied().max().unwrap_or(0).max(1);
        let mut padded = vec![0u8; longest as usize];
        padded[..bytes.len()].copy_from_slice(bytes);
        let all = self.all_gather(&Tensor::from_slice(&padded).to_device(self.device))?;
        let flat: Vec<u8> = Vec::<u8>::try_from(all.flatten(0, -1).to_device(Device::Cpu))
            .map_err(|e| self.argument("all_gather_bytes", e))?;
        Ok(lens
            .iter()
            .enumerate()
            .map(|(r, &l)| flat[r * longest as usize..r * longest as usize + l as usize].to_vec())
            .collect())
    }

    /// A sum over ranks of a few numbers (metrics, flags), in f64.
    pub fn sum_f64(&mut self, values: &[f64]) -> Result<Vec<f64>> {
        let mut t = Tensor::from_slice(values)
            .to_kind(Kind::Double)
            .to_device(self.device);
        self.all_reduce(&mut t, ReduceOp::Sum)?;
        Vec::<f64>::try_from(t.to_device(Device::Cpu)).map_err(|e| self.argument("sum_f64", e))
    }

    fn argument(&self, op: &'static str, e: impl std::fmt::Display) -> DistError {
        DistError::Argument {
            op,
            message: e.to_string(),
        }
    }
}

fn contiguous(op: &'static str, t: &Tensor) -> Result<()> {
    if t.is_contiguous() {
        Ok(())
    } else {
        Err(DistError::Argument {
            op,
            message: "the tensor is not contiguous (collectives work in place on its storage)"
                .into(),
        })
    }
}
