//! NCCL, the GPU all-reduce. Without libnccl (or without the `cuda`
//! feature) asking for it is a named error, never a panic; on a GPU with
//! NCCL a world of one runs every summed dtype through `ncclAllReduce`.
//! Cases that need what this machine lacks print one "skipped:" line and
//! pass.

#[cfg(feature = "cuda")]
use nitro_device::collective::ProcessGroup;
use nitro_device::cuda;
#[cfg(feature = "cuda")]
use nitro_device::cuda::NcclCommunicator;
use nitro_device::DeviceError;
#[cfg(feature = "cuda")]
use nitro_device::{DType, HostBuffer};

#[test]
fn asking_for_nccl_without_it_is_a_named_error_not_a_panic() {
    let probe = std::panic::catch_unwind(cuda::probe_nccl).expect("probing NCCL must never panic");
    match probe {
        Ok(()) => {
            let (major, minor, patch) = cuda::nccl_version().unwrap();
            assert!(major >= 2, "NCCL {major}.{minor}.{patch}");
            println!(
                "asking_for_nccl_without_it: skipped: NCCL {major}.{minor}.{patch} loads here"
            );
        }
        Err(e) => {
            let msg = e.to_string();
            if cfg!(feature = "cuda") {
                assert!(matches!(e, DeviceError::NoNccl(_)), "{msg}");
                assert!(msg.starts_with("NCCL not found: "), "{msg}");
                assert!(msg.contains("install libnccl2"), "{msg}");
                assert!(msg.contains("run on the CPU"), "{msg}");
                // The cached verdict answers the same, again without a panic.
                let again = cuda::nccl_version().unwrap_err().to_string();
                assert_eq!(again, msg);
            } else {
                assert!(matches!(e, DeviceError::BuiltWithoutCuda(_)), "{msg}");
                assert!(msg.contains("--features cuda"), "{msg}");
            }
        }
    }
}

/// A GPU and NCCL, or `None` after one skip line.
#[cfg(feature = "cuda")]
fn nccl_world_of_one(test: &str) -> Option<NcclCommunicator> {
    let dev = match cuda::CudaDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("{test}: skipped: no CUDA driver ({e})");
            return None;
        }
    };
    match NcclCommunicator::init(&ProcessGroup::single(), &dev) {
        Ok(c) => Some(c),
        Err(e @ DeviceError::NoNccl(_)) => {
            println!("{test}: skipped: {e}");
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

#[cfg(feature = "cuda")]
#[test]
fn a_world_of_one_sums_to_itself_through_nccl() {
    let Some(comm) = nccl_world_of_one("a_world_of_one_sums_to_itself_through_nccl") else {
        return;
    };
    assert_eq!((comm.rank(), comm.world_size()), (0, 1));
    let dev = comm.device().clone();
    let n = 4099; // not a multiple of any chunk size
    let values: Vec<f64> = (0..n).map(|i| (i as f64 - 2049.0) * 0.37).collect();
    for dtype in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let host = HostBuffer::F64(values.clone()).cast(dtype);
        let mut buf = dev.upload(&host).unwrap();
        comm.all_reduce_sum(&mut buf).unwrap();
        assert_eq!(
            buf.download().unwrap(),
            host,
            "{dtype}: a sum over one rank is the identity"
        );
        // Out of place, by address, into another buffer.
        let mut dst = dev.alloc_zeros(dtype, n).unwrap();
        // SAFETY: both buffers hold n elements of dtype on this device.
        unsafe {
            comm.all_reduce_sum_raw(buf.device_ptr(), dst.device_ptr(), n, dtype)
                .unwrap()
        };
        assert_eq!(dst.download().unwrap(), host, "{dtype} out of place");
        dst.fill_zero().unwrap();
    }
    let mut flags = dev.upload(&HostBuffer::from(vec![true, false])).unwrap();
    let e = comm.all_reduce_sum(&mut flags).unwrap_err().to_string();
    assert!(e.contains("all_reduce_sum of bool"), "{e}");
}
