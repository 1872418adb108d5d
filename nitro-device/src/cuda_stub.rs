//! The CUDA stand-in of a build without the `cuda` feature: the same entry
//! points, each answering [`DeviceError::BuiltWithoutCuda`], so code that
//! asks for a GPU compiles everywhere and gets an error that says the fix.

use crate::DeviceError;

fn without(what: &str) -> DeviceError {
    DeviceError::BuiltWithoutCuda(what.to_string())
}

/// Always an error: this build has no CUDA support.
pub fn probe_driver() -> Result<(), DeviceError> {
    Err(without("the CUDA driver"))
}

/// Always an error: this build has no CUDA support.
pub fn device_count() -> Result<usize, DeviceError> {
    Err(without("CUDA devices"))
}

/// A GPU handle; none can exist in this build.
#[derive(Clone, Debug)]
pub enum CudaDevice {}

impl CudaDevice {
    /// Always an error: this build has no CUDA support.
    pub fn open(ordinal: usize) -> Result<CudaDevice, DeviceError> {
        Err(without(&format!("cuda:{ordinal}")))
    }
}
