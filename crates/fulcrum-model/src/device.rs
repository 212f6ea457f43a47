//! Device selection: `cpu`, `cuda`, `cuda:N` or `auto`.
//!
//! `auto` picks CUDA when libtorch sees a GPU and says so on stderr with the reason; asking for
//! CUDA on a machine without one is an error, never a silent fall-back to the CPU.

use std::str::FromStr;

use tch::Device;

use crate::error::{ModelError, Result};

/// What the user asked for.
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

impl DeviceChoice {
    /// Resolve to a libtorch device, checking that it exists.
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
                    eprintln!("fulcrum: device auto -> cuda:0 (libtorch sees a CUDA device)");
                    Ok(Device::Cuda(0))
                } else {
                    eprintln!("fulcrum: device auto -> cpu (libtorch sees no CUDA device)");
                    Ok(Device::Cpu)
                }
            }
        }
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
    }

    #[test]
    fn cuda_without_a_gpu_is_an_error_not_a_fallback() {
        if tch::Cuda::device_count() == 0 {
            assert!(DeviceChoice::Cuda(0).resolve().is_err());
        }
        assert!(DeviceChoice::Cuda(10_000).resolve().is_err());
    }
}
