//! Which machine a program runs on.

use crate::DeviceError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A device programs can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Device {
    /// The host CPU (multithreaded with rayon).
    Cpu,
    /// An NVIDIA GPU by ordinal.
    Cuda(usize),
}

impl Device {
    /// The best device this process can use: CUDA 0 where the `cuda`
    /// feature is on and a driver with a device is found, else the CPU.
    pub fn best_available() -> Device {
        match Device::Cuda(0).check() {
            Ok(()) => Device::Cuda(0),
            Err(_) => Device::Cpu,
        }
    }

    /// `self` if it is usable, else the CPU.
    pub fn best_or_cpu(self) -> Device {
        if self.check().is_ok() {
            self
        } else {
            Device::Cpu
        }
    }

    /// Whether this device can be used here; the error says why not.
    pub fn check(self) -> Result<(), DeviceError> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(_) => cuda_available(self),
        }
    }

    /// Parse `cpu`, `cuda` or `cuda:N` (as given on a command line).
    pub fn parse(text: &str) -> Option<Device> {
        match text {
            "cpu" => Some(Device::Cpu),
            "cuda" | "gpu" => Some(Device::Cuda(0)),
            _ => text.strip_prefix("cuda:")?.parse().ok().map(Device::Cuda),
        }
    }
}

fn cuda_available(device: Device) -> Result<(), DeviceError> {
    match device {
        Device::Cuda(n) => crate::cuda::CudaDevice::open(n).map(|_| ()),
        Device::Cpu => Ok(()),
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}
