//! The CUDA backend's stand-in when nitro-graph is built without the `cuda`
//! feature (Candle's dummy backend): [`CudaProgram`] with the signatures of
//! the real one, so callers (nitro-run's executables, placement, export)
//! compile in every build with no `cfg`. Compiling answers "built without
//! CUDA" with the fix; the type is uninhabited, so no method below can run.

use crate::error::{GraphError, Result};
use crate::ir::{Graph, TensorSpec};
use crate::lower::{CompileOptions, ProgramDesc};
use crate::trace::{Tensor, Tracer};
use nitro_device::cuda::{CudaBuffer, CudaDevice, NcclCommunicator};
use nitro_device::HostArray as Array;
use nitro_device::{Device, DeviceError};

/// A program lowered to CUDA; none can exist in this build.
#[derive(Debug)]
pub enum CudaProgram {}

fn without(device: Device) -> GraphError {
    GraphError::Backend(DeviceError::BuiltWithoutCuda(device.to_string()).to_string())
}

impl CudaProgram {
    /// Always an error: this build has no CUDA support.
    pub fn compile_graph(
        _graph: Graph,
        _options: CompileOptions,
        device: Device,
    ) -> Result<CudaProgram> {
        Err(without(device))
    }

    /// Always an error: this build has no CUDA support.
    pub fn compile<F>(
        _inputs: &[(&str, TensorSpec)],
        _options: CompileOptions,
        _f: F,
        device: Device,
    ) -> Result<CudaProgram>
    where
        F: FnOnce(&Tracer, &[Tensor]) -> Result<Vec<(String, Tensor)>>,
    {
        Err(without(device))
    }

    /// The device-neutral description.
    pub fn desc(&self) -> &ProgramDesc {
        match *self {}
    }

    /// The device it was loaded on.
    pub fn device(&self) -> Option<&CudaDevice> {
        match *self {}
    }

    /// The generated CUDA C module.
    pub fn source(&self) -> &str {
        match *self {}
    }

    /// Text listing.
    pub fn listing(&self) -> String {
        match *self {}
    }

    /// Run with device-resident inputs.
    pub fn run_device(&self, _inputs: &mut [CudaBuffer]) -> Result<Vec<CudaBuffer>> {
        match *self {}
    }

    /// Run with device-resident inputs in a process group (NCCL).
    pub fn run_device_with(
        &self,
        _inputs: &mut [CudaBuffer],
        _nccl: &NcclCommunicator,
    ) -> Result<Vec<CudaBuffer>> {
        match *self {}
    }

    /// Check the program's world against a communicator (or none).
    pub fn check_world(&self, _nccl: Option<&NcclCommunicator>) -> Result<()> {
        match *self {}
    }

    /// Upload, run, copy back.
    pub fn run(&self, _inputs: &mut [Array]) -> Result<Vec<Array>> {
        match *self {}
    }

    /// Upload, run in a process group (NCCL), copy back.
    pub fn run_with(&self, _inputs: &mut [Array], _nccl: &NcclCommunicator) -> Result<Vec<Array>> {
        match *self {}
    }
}
