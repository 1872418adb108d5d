//! The CPU kernels of [`crate::ir::Op::LayerNorm`] and its input
//! gradient [`crate::ir::Op::LayerNormGrad`]: rows of the last axis, a
//! block of rows per task, each row read into cache once and every pass
//! over it (sum, centred squares, the output) run from there.
//!
//! A row's sums run in [`LANES`] interleaved partial results combined in
//! lane order, so they vectorise and depend on the row length only (never
//! on the thread count). The passes are separate loops over the row, each
//! one a map or a fold the compiler vectorises; the whole kernel is built
//! for AVX-512, for AVX2 and for the baseline, chosen at run time (the
//! fused loops' scheme). f16 and bf16 run in f32 and are rounded once.
//!
//! What it does not own: the op's definition (`ir`), the gradients of the
//! scale and shift (sums over rows, built from ops by `autodiff`), the
//! CUDA kernels.

use super::raw::{in_register_type, Raw};
use crate::semantics::FloatElem;
use nitro_device::DType;
use rayon::prelude::*;

/// Partial sums per row fold.
const LANES: usize = 16;
/// Elements per task (rows are never split).
const TASK: usize = 16 * 1024;

/// The register types the kernels run in.
trait Elem: FloatElem + Send + Sync {
    /// The value nearest `x`.
    fn of(x: f64) -> Self;
}

impl Elem for f32 {
    fn of(x: f64) -> f32 {
        x as f32
    }
}

impl Elem for f64 {
    fn of(x: f64) -> f64 {
        x
    }
}

/// `out = layer_norm(x, scale, shift)` over rows of `n` (x's last axis).
pub(super) fn layer_norm(x: Raw, scale: Raw, shift: Raw, out: Raw, n: usize, eps: f64) {
    in_register_type(&[x, scale, shift], out, |a, out| match out.dtype {
        DType::F64 => run::<f64>(a, out, n, eps, false),
        _ => run::<f32>(a, out, n, eps, false),
    });
}

/// `out = dx`, the input gradient of [`layer_norm`] for cotangent `dy`.
pub(super) fn layer_norm_grad(x: Raw, scale: Raw, dy: Raw, out: Raw, n: usize, eps: f64) {
    in_register_type(&[x, scale, dy], out, |a, out| match out.dtype {
        DType::F64 => run::<f64>(a, out, n, eps, true),
        _ => run::<f32>(a, out, n, eps, true),
    });
}

/// Rows of `n` over tasks of about [`TASK`] elements; `args` are (x,
/// scale, shift) for the forward and (x, scale, dy) for the gradient.
fn run<T: Elem>(args: &[Raw], out: Raw, n: usize, eps: f64, grad: bool) {
    if n == 0 || out.len == 0 {
        return;
    }
    // SAFETY: the buffers hold elements of T: x, dy and out `len`, scale
    // and shift `n` (the op's shape rules); `out` overlaps no argument
    // (a distinct planned buffer).
    let (x, scale, third, out) = unsafe {
        (
            args[0].slice::<T>(),
            args[1].slice::<T>(),
            args[2].slice::<T>(),
            out.slice_mut::<T>(),
        )
    };
    let eps = T::of(eps);
    let per = (TASK / n).max(1) * n;
    let block = |(b, dst): (usize, &mut [T])| {
        let at = b * per;
        let x = &x[at..at + dst.len()];
        let third = if grad {
            &third[at..at + dst.len()]
        } else {
            third
        };
        rows_wide(Rows {
            x,
            scale,
            third,
            dst,
            n,
            eps,
            grad,
        });
    };
    if out.len() > TASK {
        out.par_chunks_mut(per).enumerate().for_each(block);
    } else {
        out.chunks_mut(per).enumerate().for_each(block);
    }
}

/// One task's rows: `x` and `dst` (and `third`, for the gradient: dy) the
/// block's, `scale` (and `third`, for the forward: shift) whole.
struct Rows<'a, T> {
    x: &'a [T],
    scale: &'a [T],
    third: &'a [T],
    dst: &'a mut [T],
    n: usize,
    eps: T,
    grad: bool,
}

/// [`rows`] in the widest build this CPU runs.
fn rows_wide<T: Elem>(r: Rows<'_, T>) {
    super::simd::widest!([T: Elem] (r: Rows<'_, T> = r) { rows(r) })
}

/// Every row of a task, forward or gradient.
#[inline(always)]
fn rows<T: Elem>(r: Rows<'_, T>) {
    let Rows {
        x,
        scale,
        third,
        dst,
        n,
        eps,
        grad,
    } = r;
    let count = T::of(n as f64);
    let mut g = vec![T::ZERO; if grad { n } else { 0 }];
    for (i, (x, d)) in x.chunks_exact(n).zip(dst.chunks_exact_mut(n)).enumerate() {
        // d = x - mean; sd = sqrt(mean of d^2 + eps).
        let mean = sum_lanes(x) / count;
        d.iter_mut().zip(x).for_each(|(d, &v)| *d = v - mean);
        let sd = (dot_lanes(d, d) / count + eps).sqrt();
        if !grad {
            for ((d, &s), &b) in d.iter_mut().zip(scale).zip(third) {
                *d = *d / sd * s + b;
            }
            continue;
        }
        // xhat = d / sd, g = dy scale: dx = (g - mean(g) - xhat mean(g xhat)) / sd.
        let dy = &third[i * n..(i + 1) * n];
        d.iter_mut().for_each(|d| *d = *d / sd);
        g.iter_mut()
            .zip(dy)
            .zip(scale)
            .for_each(|((g, &y), &s)| *g = y * s);
        let (mg, mgx) = (sum_lanes(&g) / count, dot_lanes(&g, d) / count);
        for (d, &g) in d.iter_mut().zip(&g) {
            *d = (g - mg - *d * mgx) / sd;
        }
    }
}

/// Σ xs, in [`LANES`] interleaved partial sums added in lane order.
#[inline(always)]
fn sum_lanes<T: Elem>(xs: &[T]) -> T {
    let mut lanes = [T::ZERO; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        lanes.iter_mut().zip(c).for_each(|(l, &x)| *l = *l + x);
    }
    lanes
        .iter_mut()
        .zip(chunks.remainder())
        .for_each(|(l, &x)| *l = *l + x);
    lanes.iter().fold(T::ZERO, |a, &l| a + l)
}

/// Σ a b, lane by lane as [`sum_lanes`].
#[inline(always)]
fn dot_lanes<T: Elem>(a: &[T], b: &[T]) -> T {
    let mut lanes = [T::ZERO; LANES];
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for ((l, &x), &y) in lanes.iter_mut().zip(x).zip(y) {
            *l = *l + x * y;
        }
    }
    for ((l, &x), &y) in lanes.iter_mut().zip(ca.remainder()).zip(cb.remainder()) {
        *l = *l + x * y;
    }
    lanes.iter().fold(T::ZERO, |a, &l| a + l)
}
