//! Where and how a model runs: the device (`cpu`, `cuda`, `cuda:N`, `auto`), the parameter
//! dtype (`f32`, `bf16`) and libtorch's CPU thread count, resolved once by [`Runtime::resolve`]
//! for `train`, `eval` and `generate` alike.
//!
//! `auto` picks CUDA when libtorch sees a GPU; `threads = 0` means one per core. Both automatic
//! choices are said once on stderr with their reason, and the resolved values are what a run
//! records. Asking for CUDA on a machine without one is an error, never a silent fall-back.

use std::str::FromStr;

use tch::{Device, Kind};

use crate::error::{ModelError, Result};

/// The device a user asked for (config `device`, flag `--device`), serialised by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    Cpu,
    Cuda(usize),
    Auto,
}

impl FromStr for DeviceChoice {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda(0)),
            "auto" => Ok(DeviceChoice::Auto),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceChoice::Cuda(n)),
                _ => Err(ModelError::Device {
                    requested: s.to_string(),
                    message: "expected one of cpu, cuda, cuda:N, auto".into(),
                }),
            },
        }
    }
}

impl std::fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceChoice::Cpu => f.write_str("cpu"),
            DeviceChoice::Cuda(0) => f.write_str("cuda"),
            DeviceChoice::Cuda(n) => write!(f, "cuda:{n}"),
            DeviceChoice::Auto => f.write_str("auto"),
        }
    }
}

impl serde::Serialize for DeviceChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for DeviceChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl DeviceChoice {
    /// The choice that names `device` exactly (what a run records once `auto` is resolved).
    pub fn of(device: Device) -> DeviceChoice {
        match device {
            Device::Cuda(n) => DeviceChoice::Cuda(n),
            _ => DeviceChoice::Cpu,
        }
    }

    /// Resolve to a libtorch device, checking that it exists; `auto` says what it picked.
    pub fn resolve(self) -> Result<Device> {
        match self {
            DeviceChoice::Cpu => Ok(Device::Cpu),
            DeviceChoice::Cuda(n) => {
                let count = tch::Cuda::device_count();
                if (n as i64) < count {
                    Ok(Device::Cuda(n))
                } else {
                    Err(ModelError::Device {
                        requested: format!("cuda:{n}"),
                        message: format!("libtorch sees {count} CUDA device(s)"),
                    })
                }
            }
            DeviceChoice::Auto => {
                if tch::Cuda::is_available() {
                    say_once("fulcrum: device auto -> cuda:0 (libtorch sees a CUDA device)");
                    Ok(Device::Cuda(0))
                } else {
                    say_once("fulcrum: device auto -> cpu (libtorch sees no CUDA device)");
                    Ok(Device::Cpu)
                }
            }
        }
    }
}

fulcrum_core::closed_set! {
    /// The training precision (config `model.dtype`).
    pub enum Dtype("dtype") {
        /// 32-bit floats, everywhere.
        F32 = "f32",
        /// Mixed precision: bf16 forward/backward (and sampling), fp32 master weights and
        /// AdamW state; log-probabilities, the loss and the aggregation in fp32.
        Bf16 = "bf16",
        /// bf16 parameters updated in bf16, no fp32 copy: half the memory of masters, but an
        /// update below a bf16 ulp of its weight (lr 1e-6 on weights of order 1) is lost.
        Bf16Pure = "bf16-pure",
    }
}

impl Dtype {
    /// The libtorch kind.
    pub fn kind(self) -> Kind {
        match self {
            Dtype::F32 => Kind::Float,
            Dtype::Bf16 | Dtype::Bf16Pure => Kind::BFloat16,
        }
    }
}

/// Says an automatic choice on stderr, once per process: `compare` resolves the runtime of
/// every cell (and of the cells' stored configs), which would otherwise repeat the same line.
fn say_once(line: &str) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if !said.iter().any(|l| l == line) {
        eprintln!("{line}");
        said.push(line.to_string());
    }
}

/// A resolved device and thread count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Runtime {
    pub device: Device,
    /// libtorch's intra-op CPU threads, as set.
    pub threads: usize,
}

impl Runtime {
    /// Resolves `device` and `threads` (0: one per core), sets libtorch's thread count, and
    /// says on stderr what an automatic choice picked.
    /// More than [`crate::limits::MAX_THREADS`] threads is an error.
    pub fn resolve(device: DeviceChoice, threads: usize) -> Result<Runtime> {
        let max = crate::limits::MAX_THREADS;
        if threads > max {
            return Err(ModelError::Invalid(format!(
                "threads = {threads} is more than {max}, the most fulcrum starts (more than any \
                 machine's cores; 0 means one per core)"
            )));
        }
        let threads = if threads > 0 {
            threads
        } else {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            say_once(&format!("fulcrum: threads 0 -> {n} (one per core)"));
            n
        };
        tch::set_num_threads(threads as i32);
        Ok(Runtime {
            device: device.resolve()?,
            threads,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_spelling_and_rejects_others() {
        assert_eq!("cpu".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cpu);
        assert_eq!(
            "cuda".parse::<DeviceChoice>().unwrap(),
            DeviceChoice::Cuda(0)
        );
        assert_eq!(
            "cuda:3".parse::<DeviceChoice>().unwrap(),
            DeviceChoice::Cuda(3)
        );
        assert_eq!("auto".parse::<DeviceChoice>().unwrap(), DeviceChoice::Auto);
        assert!("gpu".parse::<DeviceChoice>().is_err());
        assert!("cuda:x".parse::<DeviceChoice>().is_err());
        for s in ["cpu", "cuda", "cuda:3", "auto"] {
            assert_eq!(s.parse::<DeviceChoice>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn cuda_without_a_gpu_is_an_error_not_a_fallback() {
        if tch::Cuda::device_count() == 0 {
            assert!(DeviceChoice::Cuda(0).resolve().is_err());
        }
        assert!(DeviceChoice::Cuda(10_000).resolve().is_err());
    }

    #[test]
    fn automatic_threads_resolve_to_a_count() {
        let r = Runtime::resolve(DeviceChoice::Cpu, 0).unwrap();
        assert!(r.threads >= 1);
        assert_eq!(Runtime::resolve(DeviceChoice::Cpu, 2).unwrap().threads, 2);
        let e = Runtime::resolve(DeviceChoice::Cpu, 1 << 40)
            .unwrap_err()
            .to_string();
        assert!(e.contains("threads") && e.contains("4096"), "{e}");
        assert!("bf17"
            .parse::<Dtype>()
            .unwrap_err()
            .to_string()
            .contains("did you mean bf16?"));
    }
}
