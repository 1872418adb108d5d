//! What the CPU offers, detected at run time: the crate is built for the
//! architecture's baseline (no `target-cpu`), so one binary runs on every
//! machine kind. gemm dispatches its own microkernels; our loops are
//! compiled again inside `#[target_feature]` entry points and take the
//! widest this CPU has: the fused loops, attention and layer norm through
//! `widest!` (AVX-512, AVX2+FMA or baseline), the reductions through
//! their own AVX2-or-baseline `wide!` (`reduce`). Only the vector width
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

/// Runs `$body` in the widest build of it this CPU has: the body is
/// compiled three times, as named functions over the listed parameters
/// (a closure would not inherit a `#[target_feature]`), for AVX-512 (F,
/// BW, DQ, VL and FMA), for AVX2 with FMA, and for the architecture's
/// baseline; [`avx512`] and [`avx2`] choose at run time. The one place the
/// loops' feature sets are written.
///
/// `widest!([generics] (name: Type = value, ...) { body })`: each value is
/// evaluated once, bound to its name, and passed to the chosen build. The
/// body is what the feature builds are for: calls of `#[inline(always)]`
/// functions, compiled into each build.
macro_rules! widest {
    ([$($g:tt)*] ($($p:ident: $t:ty = $v:expr),* $(,)?) $body:block) => {{
        let ($($p,)*) = ($($v,)*);
        #[cfg(target_arch = "x86_64")]
        let out = 'chosen: {
            #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
            unsafe fn avx512<$($g)*>($($p: $t),*) $body
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2<$($g)*>($($p: $t),*) $body
            if super::simd::avx512() {
                // SAFETY: the CPU has these features (checked).
                break 'chosen unsafe { avx512($($p),*) };
            }
            if super::simd::avx2() {
                // SAFETY: as above.
                break 'chosen unsafe { avx2($($p),*) };
            }
            fn base<$($g)*>($($p: $t),*) $body
            base($($p),*)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let out = {
            fn base<$($g)*>($($p: $t),*) $body
            base($($p),*)
        };
        out
    }};
}
pub(crate) use widest;
