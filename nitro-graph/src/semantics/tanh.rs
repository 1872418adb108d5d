//! tanh x for f32 registers, branch-free so the fused CPU loops vectorise
//! (the platform `tanhf` is a call per element: tanh-GELU over a
//! [2048, 1024] activation took 34 ms on two cores, ten times an exp).
//!
//! Method, in f64 on `a = min(|x|, 10)` (tanh rounds to 1 in f32 from
//! 9.01 on): `1 - 2 / (e^{2a} + 1)` with e^{2a} from the f32 exp's f64
//! core ([`super::exp`], ~3e-10 relative), and for a < 0.2, where that
//! difference cancels, the odd Taylor series to a¹¹ (truncation below
//! 3e-12 relative there). Both are computed and one selected, the result
//! rounded once to f32 and given x's sign (so tanh(-0) = -0); NaN stays
//! NaN, ±inf give ±1. Within ~1e-9 relative of tanh before rounding, so
//! the correctly rounded value except next to a rounding boundary.
//!
//! The CUDA prelude's `nitro_tanh_f32` is the same sequence in C. f64
//! registers keep the platform `tanh`.

use super::exp::exp_core;

/// The odd Taylor series `tanh a = a + a·a²·P(a²)`: P's coefficients,
/// highest power first (the a¹¹ term down to -a³/3).
const SERIES: [f64; 5] = [
    -1382.0 / 155_925.0,
    62.0 / 2835.0,
    -17.0 / 315.0,
    2.0 / 15.0,
    -1.0 / 3.0,
];

/// tanh x for f32 (see the module doc for the method and its accuracy).
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    // `clamp` keeps NaN (it fails both comparisons).
    let a = x.abs().clamp(0.0, 10.0) as f64;
    let a2 = a * a;
    let mut p = SERIES[0];
    for &c in &SERIES[1..] {
        p = p.mul_add(a2, c);
    }
    let small = (a * a2).mul_add(p, a);
    let big = 1.0 - 2.0 / (exp_core(2.0 * a) + 1.0);
    let t = if a < 0.2 { small } else { big };
    (t as f32).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::exp::tests::within_one_ulp_of;

    #[test]
    fn matches_the_rounded_f64_tanh() {
        let reference = |x: f32| (x as f64).tanh() as f32;
        within_one_ulp_of("tanh", tanh_f32, reference, (-12.0, 12.0, 0.000_173));
        // Tiny inputs (the series), the switch at 0.2, and the far tails.
        for x in [
            1e-30f32, 1e-8, 3e-4, 0.1, 0.199_999, 0.2, 0.200_001, 5.0, 9.0, 9.02, 30.0,
        ] {
            for x in [x, -x] {
                assert_eq!(tanh_f32(x), reference(x), "tanh({x})");
            }
        }
        assert_eq!(tanh_f32(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
    }
}
