//! The error function of the semantics table, per register type.
//!
//! f32: the odd rational minimax fit Eigen and XLA use for f32,
//! `erf(x) = x P(x²) / Q(x²)` on x clamped to [-4, 4] (beyond it erf is ±1
//! to f32 precision), evaluated in f64. It is branch-free, so the fused CPU loops that call
//! it vectorise (the libm `erff` does not, and exact GELU runs it over
//! every MLP activation twice a step). f64: the libm `erf` (the fdlibm
//! algorithm, under 1 ulp), scalar; f64 programs are checks, not hot paths.
//!
//! Owns only these two functions; which ops call them is
//! [`crate::semantics::float_unary`]'s table.

/// Numerator coefficients of the fit, highest power of x² first.
const ALPHA: [f64; 7] = [
    -2.726_142_258_013_06e-10,
    2.770_681_424_959_02e-8,
    -2.101_024_020_825_08e-6,
    -5.692_506_394_623_46e-5,
    -7.349_906_303_268_55e-4,
    -2.954_599_808_540_25e-3,
    -1.609_603_332_624_15e-2,
];

/// Denominator coefficients of the fit, highest power of x² first.
const BETA: [f64; 5] = [
    -1.456_607_184_649_96e-5,
    -2.133_740_552_789_05e-4,
    -1.682_826_974_382_03e-3,
    -7.373_329_167_204_68e-3,
    -1.426_473_905_141_89e-2,
];

/// erf x for f32: the fit (its own error is about 6e-8, one ulp at 1)
/// evaluated in f64 (its Horner steps fused multiply-adds, see
/// [`super::exp`]), where the eleven Horner steps of an f32 evaluation
/// would add up to 4e-7, and rounded once. The quotient is `x p · (1/q)`
/// with 1/q an f32 division refined by one Newton step in f64 (relative
/// error ~1e-14, far under f32's half ulp of 3e-8): an f64 division was
/// most of the function's time (16 lanes of f32 divide for the price of
/// about 5 of f64), and the result rounds to the same f32 as `x p / q` on
/// every input of a 768k-point sweep of [-5, 5]. Absolute error below 1.2e-7 on
/// every input, relative error below 2e-7 near 0, never outside [-1, 1];
/// NaN stays NaN, ±inf give ±1. Still branch-free, so it vectorises (four
/// lanes of f64 under AVX2).
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    // `clamp` keeps NaN (it fails both comparisons) and compiles to blends.
    let x = x.clamp(-4.0, 4.0) as f64;
    let x2 = x * x;
    let mut p = ALPHA[0];
    for &c in &ALPHA[1..] {
        p = p.mul_add(x2, c);
    }
    let mut q = BETA[0];
    for &c in &BETA[1..] {
        q = q.mul_add(x2, c);
    }
    // q <= -0.014 on the clamped range: never 0, never out of f32's range.
    let r0 = (1.0f32 / q as f32) as f64;
    let r = r0.mul_add((-q).mul_add(r0, 1.0), r0);
    // The fit overshoots ±1 by a hair near the clamp; erf never does.
    ((x * p * r) as f32).clamp(-1.0, 1.0)
}

/// erf x in f64 (libm's, under 1 ulp).
#[inline(always)]
pub fn erf_f64(x: f64) -> f64 {
    libm::erf(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf by the series `2/√π e^(-x²) Σ_n 2ⁿ x^(2n+1) / (1·3·…·(2n+1))`,
    /// whose terms are all of one sign (no cancellation), in f64.
    fn erf_series(x: f64) -> f64 {
        let (mut term, mut sum, mut n) = (x, x, 0.0);
        while term.abs() > 1e-18 * sum.abs() {
            n += 1.0;
            term *= 2.0 * x * x / (2.0 * n + 1.0);
            sum += term;
        }
        2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp() * sum
    }

    fn grid() -> impl Iterator<Item = f64> {
        (-6000..=6000).map(|i| i as f64 * 1e-3)
    }

    #[test]
    fn f64_erf_matches_the_series_and_closed_forms() {
        for x in grid().filter(|x| x.abs() <= 5.0) {
            let (got, want) = (erf_f64(x), erf_series(x));
            // The series sums ~e^(x²) terms before scaling: 2e-15 is its own rounding.
            assert!(
                (got - want).abs() <= 2e-15 * want.abs().max(1e-300),
                "erf({x}): {got} vs {want}"
            );
        }
        assert_eq!(erf_f64(0.0), 0.0);
        assert!(erf_f64(-0.0).is_sign_negative());
        assert_eq!(erf_f64(f64::INFINITY), 1.0);
        assert_eq!(erf_f64(f64::NEG_INFINITY), -1.0);
        assert!(erf_f64(f64::NAN).is_nan());
        // Odd, and erf(x) -> 2x/√π at 0.
        assert_eq!(erf_f64(-0.7), -erf_f64(0.7));
        let tiny = 1e-10;
        assert!((erf_f64(tiny) - 2.0 * tiny / std::f64::consts::PI.sqrt()).abs() < 1e-25);
    }

    /// The fit with the quotient taken by an f64 division, as the f32 erf
    /// computed it before the Newton reciprocal.
    fn erf_f32_by_division(x: f32) -> f32 {
        let x = x.clamp(-4.0, 4.0) as f64;
        let x2 = x * x;
        let p = ALPHA[1..].iter().fold(ALPHA[0], |p, &c| p.mul_add(x2, c));
        let q = BETA[1..].iter().fold(BETA[0], |q, &c| q.mul_add(x2, c));
        ((x * p / q) as f32).clamp(-1.0, 1.0)
    }

    #[test]
    fn the_newton_reciprocal_rounds_like_the_division() {
        let mut x = -5.0f32;
        while x < 5.0 {
            assert_eq!(erf_f32(x), erf_f32_by_division(x), "erf({x})");
            x += 1.3e-5;
        }
    }

    #[test]
    fn f32_erf_is_accurate_to_f32() {
        let (mut abs, mut rel) = (0.0f64, 0.0f64);
        for x in grid() {
            let x32 = x as f32;
            let want = erf_series(x32 as f64);
            let got = erf_f32(x32) as f64;
            abs = abs.max((got - want).abs());
            if x.abs() < 1.0 && x != 0.0 {
                rel = rel.max(((got - want) / want).abs());
            }
            assert!(got.abs() <= 1.0, "erf({x32}) = {got} leaves [-1, 1]");
        }
        assert!(abs < 1.2e-7, "max absolute error {abs}");
        assert!(rel < 2e-7, "max relative error near 0 {rel}");
        assert_eq!(erf_f32(0.0), 0.0);
        assert_eq!(erf_f32(f32::INFINITY), 1.0);
        assert_eq!(erf_f32(f32::NEG_INFINITY), -1.0);
        assert!(erf_f32(f32::NAN).is_nan());
        assert_eq!(erf_f32(-1.5), -erf_f32(1.5));
    }
}
