//! e^x for f32 registers, branch-free so the fused CPU loops vectorise
//! (the platform `expf` is a call per element: it was the largest cost of
//! the exact-GELU backward and of softmax). f64 keeps the platform `exp`.
//!
//! Method, all in f64 (the f32 input is exact there): x clamped to
//! [-104, 89] (beyond it e^x rounds to 0 or overflows to inf in f32 either
//! way), `n = round(x log2 e)` by the 1.5·2⁵² addition trick (round to
//! nearest even, no rounding instruction, identical in every build),
//! `r = x - n ln 2` (|r| <= 0.35, exact to ~1e-15), a degree-8 Taylor
//! polynomial for e^r (truncation 3e-10 relative), scaled by 2ⁿ built from
//! the exponent bits (n stays in f64's normal range), and one rounding to
//! f32, which also produces f32 subnormals and infinity correctly. The
//! result is the correctly rounded e^x except within ~3e-10 relative of a
//! rounding boundary (then one ulp off: about 2 inputs in 10⁴); NaN stays
//! NaN.
//!
//! The reduction and the Horner steps are fused multiply-adds
//! (`mul_add`): one rounding each, so the same in every build and on every
//! machine (a vector unit's FMA, or libm's `fma` where there is none), and
//! half the instructions of a multiply and an add where the CPU has FMA.
//! The CUDA prelude's `nitro_exp_f32` is the same sequence in C (`fma`).

/// 1.5 · 2⁵²: adding it rounds an |f64| < 2⁵¹ to an integer.
const ROUND: f64 = 6_755_399_441_055_744.0;

/// 1 / k! for k = 2..=8, highest first.
const INV_FACT: [f64; 7] = [
    1.0 / 40320.0,
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
];

/// e^x for f32 (see the module doc for the method and its accuracy).
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // `clamp` keeps NaN (it fails both comparisons) and compiles to blends.
    exp_core(x.clamp(-104.0, 89.0) as f64) as f32
}

/// e^x in f64 before the final rounding, to ~3e-10 relative, for x in
/// [-104, 89] (NaN stays NaN); [`super::tanh`] builds on it too.
#[inline(always)]
pub(crate) fn exp_core(x: f64) -> f64 {
    let t = x.mul_add(std::f64::consts::LOG2_E, ROUND);
    let n = t - ROUND;
    let r = (-n).mul_add(std::f64::consts::LN_2, x);
    let mut p = INV_FACT[0];
    for &c in &INV_FACT[1..] {
        p = p.mul_add(r, c);
    }
    let p = p.mul_add(r, 1.0).mul_add(r, 1.0);
    // t's low mantissa bits hold n (two's complement, |n| <= 151).
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f64::from_bits(n_bits.wrapping_add(1023) << 52);
    p * scale
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The f32 nearest e^x by the f64 platform exp (error ~1e-16, far
    /// below f32's half ulp except on near-ties).
    fn reference(x: f32) -> f32 {
        (x as f64).exp() as f32
    }

    /// Asserts `f` equals `reference` on `lo, lo + step, ... < hi`, or is
    /// one ulp off it on under 1 input in 10³ (near rounding ties).
    pub(in crate::semantics) fn within_one_ulp_of(
        name: &str,
        f: impl Fn(f32) -> f32,
        reference: impl Fn(f32) -> f32,
        (lo, hi, step): (f32, f32, f32),
    ) {
        let (mut ulps_off, mut n) = (0usize, 0usize);
        let mut x = lo;
        while x < hi {
            let (got, want) = (f(x), reference(x));
            if got != want {
                let d = (got.to_bits() as i64 - want.to_bits() as i64).abs();
                assert!(d <= 1, "{name}({x}) = {got:e}, want {want:e}");
                ulps_off += 1;
            }
            n += 1;
            x += step;
        }
        assert!(
            ulps_off * 1_000 < n,
            "{name}: {ulps_off} of {n} are one ulp off"
        );
    }

    #[test]
    fn matches_the_rounded_f64_exp() {
        within_one_ulp_of("exp", exp_f32, reference, (-110.0, 90.0, 0.000_731));
        for x in [
            0.0f32, -0.0, 1.0, -1.0, 1e-30, -1e-30, 88.72, -87.5, -100.0, -103.9,
        ] {
            assert_eq!(exp_f32(x), reference(x), "exp({x})");
        }
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(1.0), std::f32::consts::E);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-104.0), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        // Subnormal results round like the f64 value does.
        assert!(exp_f32(-100.0) > 0.0 && exp_f32(-100.0) < f32::MIN_POSITIVE);
    }
}
