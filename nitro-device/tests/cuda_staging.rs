//! Staged uploads (pinned slots on a copy stream, ordered by events). Where
//! there is no driver, the only way in (`CudaDevice::open`) is a clear error
//! and the GPU tests print one "skipped: no CUDA driver" line and pass; the
//! slot policy itself is unit-tested in the crate without a GPU.

use nitro_device::cuda::CudaDevice;
use nitro_device::DeviceError;

#[test]
fn staged_uploads_need_a_device_and_say_why_there_is_none() {
    let open = std::panic::catch_unwind(|| CudaDevice::open(0).map(|_| ()))
        .expect("asking for a GPU must never panic");
    if let Err(e) = open {
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                DeviceError::NoDriver(_)
                    | DeviceError::BuiltWithoutCuda(_)
                    | DeviceError::Cuda { .. }
            ),
            "{msg}"
        );
        assert!(
            msg.starts_with("no CUDA driver found")
                || msg.starts_with("nitro was built without CUDA")
                || msg.starts_with("CUDA error"),
            "{msg}"
        );
    }
}

#[cfg(feature = "cuda")]
mod gpu_only {
    use super::*;
    use nitro_device::cuda::{
        CudaBuffer, GemmShape, GemmTypes, KernelArg, PendingUpload, STAGING_MAX_SLOTS,
    };
    use nitro_device::{DType, HostBuffer};

    /// The tests read device-wide figures: one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn gpu(test: &str) -> Option<(CudaDevice, std::sync::MutexGuard<'static, ()>)> {
        let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        match CudaDevice::open(0) {
            Ok(d) => Some((d, guard)),
            Err(e) => {
                eprintln!("{test}: skipped: no CUDA driver ({e})");
                None
            }
        }
    }

    fn ramp(len: usize, seed: f64) -> HostBuffer {
        HostBuffer::from(
            (0..len)
                .map(|i| ((i * 7 + seed as usize) % 200) as f64 - 50.0 + seed)
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn staged_uploads_round_trip_every_dtype() {
        let Some((dev, _serial)) = gpu("staged_uploads_round_trip_every_dtype") else {
            return;
        };
        for dtype in DType::ALL {
            for len in [0usize, 1, 7, 1000, 70_000] {
                let host = ramp(len, 3.0).cast(dtype);
                let pending = dev.upload_staged(&host).unwrap();
                assert_eq!((pending.dtype(), pending.len()), (dtype, len));
                let buf = pending.ready().unwrap();
                assert_eq!(buf.download().unwrap(), host, "{dtype}[{len}]");
            }
        }
        let stats = dev.staging_stats();
        assert!(stats.uploads > 0 && stats.pinned_slots > 0, "{stats:?}");
    }

    #[test]
    fn many_uploads_in_flight_never_overwrite_a_slot() {
        let Some((dev, _serial)) = gpu("many_uploads_in_flight_never_overwrite_a_slot") else {
            return;
        };
        // More uploads in flight than slots, of growing sizes: slots are
        // added, regrown and waited for, and every buffer keeps its bytes.
        let hosts: Vec<HostBuffer> = (0..4 * STAGING_MAX_SLOTS)
            .map(|i| ramp(1000 + i * 40_000, i as f64))
            .collect();
        let pending: Vec<PendingUpload> = hosts
            .iter()
            .map(|h| dev.upload_staged(h).unwrap())
            .collect();
        let bufs: Vec<CudaBuffer> = pending.into_iter().map(|p| p.ready().unwrap()).collect();
        for (i, (h, b)) in hosts.iter().zip(&bufs).enumerate() {
            assert_eq!(&b.download().unwrap(), h, "upload {i}");
        }
        assert!(dev.staging_stats().pinned_slots <= STAGING_MAX_SLOTS);
        // A dropped, never-ready upload is harmless.
        drop(dev.upload_staged(&hosts[0]).unwrap());
        dev.synchronize().unwrap();
    }

    #[test]
    fn uploads_overlapping_gemms_and_kernels_stay_correct() {
        let Some((dev, _serial)) = gpu("uploads_overlapping_gemms_and_kernels_stay_correct") else {
            return;
        };
        let src = "extern \"C\" __global__ void twice_into(const float* x, float* y, long long n) {\n\
                   for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = 2.0f * x[i];\n}\n";
        let ptx = dev.compile("twice_into", src).unwrap();
        let kernel = dev
            .load_kernels(&ptx, &["twice_into".to_string()])
            .unwrap()
            .remove(0);
        // A slow main stream: a large gemm before each use, so an unordered
        // copy would race ahead of the kernels still reading a block.
        let n = 1024;
        let a = dev.upload(&HostBuffer::F32(vec![0.5; n * n])).unwrap();
        let c = dev.alloc(DType::F32, n * n).unwrap();
        let shape = GemmShape {
            batch: 1,
            m: n,
            n,
            k: n,
            ta: false,
            tb: false,
        };
        let len = 300_000;
        let steps = 24;
        let mut outputs = Vec::new();
        let mut next = Some(dev.upload_staged(&ramp(len, 0.0)).unwrap());
        for step in 0..steps {
            let x = next.take().unwrap().ready().unwrap();
            // Queue the next batch's copy before this step's work.
            if step + 1 < steps {
                next = Some(dev.upload_staged(&ramp(len, (step + 1) as f64)).unwrap());
            }
            // SAFETY: square f32 matrices of n*n elements; c is distinct.
            unsafe {
                dev.gemm(
                    GemmTypes::F32,
                    shape,
                    a.device_ptr(),
                    a.device_ptr(),
                    c.device_ptr(),
                )
            }
            .unwrap();
            let y = dev.alloc(DType::F32, len).unwrap();
            // SAFETY: (const float*, float*, long long) as declared; both
            // buffers hold `len` floats.
            unsafe {
                kernel.launch(
                    64,
                    256,
                    0,
                    &[
                        KernelArg::Ptr(x.device_ptr()),
                        KernelArg::Ptr(y.device_ptr()),
                        KernelArg::I64(len as i64),
                    ],
                )
            }
            .unwrap();
            // Dropped while the kernel may still read it: the block is
            // fenced before the copy stream may write it again.
            drop(x);
            outputs.push(y);
        }
        for (step, y) in outputs.iter().enumerate() {
            let want: Vec<f64> = ramp(len, step as f64)
                .to_f64_vec()
                .iter()
                .map(|v| 2.0 * (*v as f32) as f64)
                .collect();
            assert_eq!(y.download().unwrap().to_f64_vec(), want, "step {step}");
        }
        let gemm = c.download().unwrap().to_f64_vec();
        assert!(gemm.iter().all(|&v| (v - 0.25 * n as f64).abs() < 1e-3));
        let stats = dev.staging_stats();
        assert!(
            stats.block_reuses > 0,
            "steady state reuses blocks: {stats:?}"
        );
        // Releasing the cache hands the stager's blocks back too.
        dev.empty_cache();
        assert_eq!(dev.staging_stats().cached_block_bytes, 0);
        assert_eq!(dev.pool_stats().cached_bytes, 0);
    }
}
