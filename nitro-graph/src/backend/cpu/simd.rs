//! What the CPU offers, detected at run time: the crate is built for the
//! architecture's baseline (no `target-cpu`), so one binary runs on every
//! machine kind. gemm dispatches its own microkernels; our loops (fused
//! kernels, reductions) are compiled a second time inside a
//! `#[target_feature(enable = "avx2")]` entry point (the fused loops with
//! `fma` too) and take it where [`avx2`] says so (the fused loops a third
//! time for AVX-512, where [`avx512`] says so). Only the vector width
//! changes: no FMA contraction, no reassociation, so results are
//! bit-identical to the baseline build. The fused multiply-adds the
//! semantics spell out (`mul_add`, in exp, erf and tanh) are one rounding
//! in every build: an FMA instruction here, a call to libm's `fma` in the
//! baseline (slower, but only a CPU without AVX2 runs it).

/// The SIMD level the gemm kernels dispatch to on this CPU: `"avx512"`
/// (the x86-v4 set gemm needs: F, BW, CD, DQ, VL), `"avx2"` (AVX2 + FMA),
/// or the architecture's baseline.
pub fn simd_level() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        let v4 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512cd")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl");
        if v4 {
            return "avx512";
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return "avx2";
        }
        "sse2"
    }
    #[cfg(target_arch = "aarch64")]
    {
        "neon"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "scalar"
    }
}

/// Whether the AVX-512 build of the fused loops may run here (F, BW, DQ,
/// VL and FMA: what its `#[target_feature]` enables).
#[inline]
pub(crate) fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the AVX2 builds of our loops may run here: AVX2 and FMA (every
/// AVX2 CPU has both; the fused loops' build enables FMA for `mul_add`).
/// std caches the detection, so this is two relaxed loads.
#[inline]
pub(crate) fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
