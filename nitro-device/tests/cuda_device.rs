//! The CUDA side of nitro-device. On a machine without a driver (or a build
//! without the `cuda` feature) asking for a GPU is a clear error, never a
//! panic; where a driver exists, buffers round-trip every dtype and the
//! pool reuses blocks. GPU tests print one "skipped: no CUDA driver" line
//! and pass when there is no driver.

use nitro_device::cuda::{self, CudaDevice};
use nitro_device::{Device, DeviceError};

/// The GPU, or `None` after printing one skip line.
#[cfg(feature = "cuda")]
fn gpu(test: &str) -> Option<CudaDevice> {
    match CudaDevice::open(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("{test}: skipped: no CUDA driver ({e})");
            None
        }
    }
}

#[test]
fn asking_for_cuda_without_a_driver_is_an_error_not_a_panic() {
    let result =
        std::panic::catch_unwind(|| (CudaDevice::open(0).map(|_| ()), Device::Cuda(0).check()));
    let (open, check) = result.expect("asking for a GPU must never panic");
    match (open, cuda::probe_driver()) {
        (Ok(()), Ok(())) => {
            assert!(check.is_ok());
            assert_eq!(Device::best_available(), Device::Cuda(0));
        }
        (Err(e), _) => {
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
            if cfg!(feature = "cuda") {
                assert!(
                    msg.starts_with("no CUDA driver found") || msg.starts_with("CUDA error"),
                    "{msg}"
                );
            } else {
                assert!(msg.starts_with("nitro was built without CUDA"), "{msg}");
            }
            assert!(check.is_err());
            assert_eq!(Device::best_available(), Device::Cpu);
            assert_eq!(Device::Cuda(0).best_or_cpu(), Device::Cpu);
            // A second ask answers the same, still without panicking.
            assert!(CudaDevice::open(0).is_err());
        }
        (Ok(()), Err(e)) => panic!("opened a device although the probe says {e}"),
    }
}

#[test]
fn a_missing_device_ordinal_is_an_error() {
    assert!(CudaDevice::open(4096).is_err());
}

#[cfg(feature = "cuda")]
mod gpu_only {
    use super::*;
    use nitro_device::cuda::{GemmShape, GemmTypes};
    use nitro_device::{DType, HostBuffer};

    #[test]
    fn cuda_buffers_round_trip_every_dtype() {
        let Some(dev) = gpu("cuda_buffers_round_trip_every_dtype") else {
            return;
        };
        for dtype in DType::ALL {
            for len in [0usize, 1, 7, 1000, 4097] {
                let host = HostBuffer::from(
                    (0..len)
                        .map(|i| (i % 200) as f64 - 50.0)
                        .collect::<Vec<_>>(),
                )
                .cast(dtype);
                let buf = dev.upload(&host).unwrap();
                assert_eq!((buf.dtype(), buf.len()), (dtype, len));
                assert_eq!(buf.download().unwrap(), host, "{dtype}[{len}]");
                let copy = buf.try_clone().unwrap();
                assert_eq!(copy.download().unwrap(), host, "dtod {dtype}[{len}]");
                let zeros = dev.alloc_zeros(dtype, len).unwrap();
                assert_eq!(zeros.download().unwrap(), HostBuffer::zeros(dtype, len));
            }
        }
    }

    #[test]
    fn cuda_buffers_carry_a_shape_that_must_fit_their_length() {
        let Some(dev) = gpu("cuda_buffers_carry_a_shape_that_must_fit_their_length") else {
            return;
        };
        let flat = dev.upload(&HostBuffer::F32(vec![1.0; 12])).unwrap();
        assert_eq!(flat.shape(), &[12]);
        let shaped = flat.reshape(&[3, 4]).unwrap();
        assert_eq!(shaped.shape(), &[3, 4]);
        assert_eq!(shaped.try_clone().unwrap().shape(), &[3, 4]);
        let e = shaped.reshape(&[5, 2]).unwrap_err();
        assert!(e.to_string().contains("[5, 2]"), "{e}");
        assert_eq!(dev.alloc_shaped(DType::I32, &[2, 0, 7]).unwrap().len(), 0);
    }

    #[test]
    fn cuda_copy_checks_dtype_and_length() {
        let Some(dev) = gpu("cuda_copy_checks_dtype_and_length") else {
            return;
        };
        let mut buf = dev.alloc(DType::F32, 4).unwrap();
        assert!(buf.copy_from_host(&HostBuffer::F64(vec![0.0; 4])).is_err());
        assert!(buf.copy_from_host(&HostBuffer::F32(vec![0.0; 5])).is_err());
    }

    #[test]
    fn cuda_pool_reuses_freed_blocks() {
        let Some(dev) = gpu("cuda_pool_reuses_freed_blocks") else {
            return;
        };
        let before = dev.pool_stats();
        drop(dev.alloc(DType::F32, 12345).unwrap());
        let b = dev.alloc(DType::F32, 12345).unwrap();
        let after = dev.pool_stats();
        assert!(after.hits > before.hits, "{before:?} -> {after:?}");
        drop(b);
        assert!(dev.empty_cache() > 0);
        assert_eq!(dev.pool_stats().cached_bytes, 0);
    }

    #[test]
    fn cuda_oom_is_reported_after_releasing_the_cache() {
        let Some(dev) = gpu("cuda_oom_is_reported_after_releasing_the_cache") else {
            return;
        };
        let (_, total) = dev.memory_info().unwrap();
        let err = dev.alloc(DType::U8, total * 4).unwrap_err();
        assert!(matches!(err, DeviceError::OutOfMemory { .. }), "{err}");
        assert!(err.to_string().contains("out of memory"), "{err}");
        // The device still works afterwards.
        dev.upload(&HostBuffer::F32(vec![1.0; 16])).unwrap();
    }

    #[test]
    fn cuda_gemm_matches_a_naive_product_for_every_transpose() {
        let Some(dev) = gpu("cuda_gemm_matches_a_naive_product_for_every_transpose") else {
            return;
        };
        let (batch, m, n, k) = (2, 5, 3, 4);
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a: Vec<f32> = (0..batch * m * k)
                .map(|i| (i as f32 * 0.37).sin())
                .collect();
            let b: Vec<f32> = (0..batch * k * n)
                .map(|i| (i as f32 * 0.11).cos())
                .collect();
            let at = |bi: usize, i: usize, p: usize| {
                if ta {
                    a[bi * m * k + p * m + i]
                } else {
                    a[bi * m * k + i * k + p]
                }
            };
            let bt = |bi: usize, p: usize, j: usize| {
                if tb {
                    b[bi * k * n + j * k + p]
                } else {
                    b[bi * k * n + p * n + j]
                }
            };
            let da = dev.upload(&HostBuffer::F32(a.clone())).unwrap();
            let db = dev.upload(&HostBuffer::F32(b.clone())).unwrap();
            let dc = dev.alloc(DType::F32, batch * m * n).unwrap();
            let shape = GemmShape {
                batch,
                m,
                n,
                k,
                ta,
                tb,
            };
            // SAFETY: sizes match the shape; c is a distinct buffer.
            unsafe {
                dev.gemm(
                    GemmTypes::F32,
                    shape,
                    da.device_ptr(),
                    db.device_ptr(),
                    dc.device_ptr(),
                )
            }
            .unwrap();
            let c = dev.download_f64(&dc);
            for bi in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let want: f32 = (0..k).map(|p| at(bi, i, p) * bt(bi, p, j)).sum();
                        let got = c[bi * m * n + i * n + j];
                        assert!(
                            (got - want as f64).abs() < 1e-4,
                            "ta={ta} tb={tb} ({bi},{i},{j}): {got} vs {want}"
                        );
                    }
                }
            }
            // bf16 inputs, f32 accumulation and output.
            let da16 = dev
                .upload(&HostBuffer::F32(a.clone()).cast(DType::BF16))
                .unwrap();
            let db16 = dev
                .upload(&HostBuffer::F32(b.clone()).cast(DType::BF16))
                .unwrap();
            // SAFETY: as above.
            unsafe {
                dev.gemm(
                    GemmTypes::BF16,
                    shape,
                    da16.device_ptr(),
                    db16.device_ptr(),
                    dc.device_ptr(),
                )
            }
            .unwrap();
            let c16 = dev.download_f64(&dc);
            for (x, y) in c16.iter().zip(&c) {
                assert!((x - y).abs() < 5e-2, "bf16 gemm {x} vs {y}");
            }
        }
    }

    #[test]
    fn cuda_nvrtc_compiles_once_and_launches() {
        let Some(dev) = gpu("cuda_nvrtc_compiles_once_and_launches") else {
            return;
        };
        use nitro_device::cuda::{KernelArg, PtxCache};
        let src = "extern \"C\" __global__ void twice(float* x, long long n) {\n\
                   for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) x[i] *= 2.0f;\n}\n";
        let ptx = dev.compile("twice", src).unwrap();
        let compiles = PtxCache::global().compiles();
        let again = dev.compile("twice", src).unwrap();
        assert_eq!(ptx, again);
        assert_eq!(
            PtxCache::global().compiles(),
            compiles,
            "second compile hits the cache"
        );
        let k = dev
            .load_kernels(&ptx, &["twice".to_string()])
            .unwrap()
            .remove(0);
        let buf = dev.upload(&HostBuffer::F32(vec![1.5; 1000])).unwrap();
        // SAFETY: (float*, long long) as the kernel declares.
        unsafe {
            k.launch(
                4,
                128,
                0,
                &[KernelArg::Ptr(buf.device_ptr()), KernelArg::I64(1000)],
            )
        }
        .unwrap();
        assert_eq!(buf.download().unwrap(), HostBuffer::F32(vec![3.0; 1000]));
        let bad = dev.compile(
            "bad",
            "extern \"C\" __global__ void bad() { undeclared(); }",
        );
        assert!(matches!(bad, Err(DeviceError::Compile { .. })), "{bad:?}");
    }

    trait DownloadF64 {
        fn download_f64(&self, b: &nitro_device::cuda::CudaBuffer) -> Vec<f64>;
    }
    impl DownloadF64 for CudaDevice {
        fn download_f64(&self, b: &nitro_device::cuda::CudaBuffer) -> Vec<f64> {
            b.download().unwrap().to_f64_vec()
        }
    }
}
