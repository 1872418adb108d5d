//! [`Array`]: the concrete values programs consume and produce. It is
//! nitro-device's [`HostArray`](nitro_device::HostArray), the one shaped
//! host value of the workspace, under the name nitro-graph has always used;
//! nitro-data's batches and nitro-ckpt's files hold the same type, so no
//! conversion sits between a dataset, a program and a checkpoint.

pub use nitro_device::HostArray as Array;

impl From<nitro_device::DeviceError> for crate::error::GraphError {
    /// A shape, length or row error of a host array.
    fn from(e: nitro_device::DeviceError) -> Self {
        crate::error::GraphError::Array(e.to_string())
    }
}
