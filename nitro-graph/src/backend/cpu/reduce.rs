//! Sum and max reductions. After dropping size-1 axes and merging
//! neighbours of the same kind, a reduction is a pattern of kept (K) and
//! reduced (R) runs; four fast layouts cover what networks do:
//! - `[K, R]` trailing (softmax rows, losses) and `[R, K]` leading (bias
//!   gradients of dense layers, over the batch);
//! - `[R, K, R]` middle (the bias gradient of a convolution, NCHW summed
//!   over n, h, w): contiguous rows summed into one output each, no copy;
//! - `[K, R, K, R]` pooling (`[n*c*oh, k, ow, k]`, max pooling and its tie
//!   counts): the window's rows combined elementwise, then each group of
//!   `k` neighbours.
//!
//! Other small interleaved windows read in place, anything else is first
//! permuted into the trailing layout. Row folds keep [`LANES`] independent
//! accumulators (combined in a fixed order at the end), so a sum
//! vectorises instead of waiting on one add chain; the result depends on
//! the shapes only, never on the thread count.

use super::movement;
use super::raw::Raw;
use crate::fusion::{runs, strides_of, RowLayout};
use nitro_device::{DType, HostBuffer};
use rayon::prelude::*;

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// Σ
    Sum,
    /// max
    Max,
}

const PARALLEL_MIN: usize = 64 * 1024;
/// Interleaved reductions over at most this many elements per output (a
/// pooling window) read the window in place instead of permuting first.
const SMALL_WINDOW: usize = 64;

trait Elem: Copy + Send + Sync + PartialOrd + std::ops::Add<Output = Self> {
    const ZERO: Self;
    const LOWEST: Self;
}
macro_rules! elem {
    ($($t:ty => $lowest:expr),*) => {$(impl Elem for $t {
        const ZERO: Self = 0 as $t;
        const LOWEST: Self = $lowest;
    })*};
}
elem!(f32 => f32::NEG_INFINITY, f64 => f64::NEG_INFINITY, i32 => i32::MIN, i64 => i64::MIN);

#[inline(always)]
fn combine<T: Elem>(kind: Reduction, a: T, b: T) -> T {
    match kind {
        Reduction::Sum => a + b,
        // NaN propagates: a max over a row holding NaN is NaN.
        Reduction::Max => {
            #[allow(clippy::eq_op)] // b != b is the NaN test for a generic element
            let b_is_nan = b != b;
            if b > a || b_is_nan {
                b
            } else {
                a
            }
        }
    }
}

#[inline(always)]
fn init<T: Elem>(kind: Reduction) -> T {
    match kind {
        Reduction::Sum => T::ZERO,
        Reduction::Max => T::LOWEST,
    }
}

/// Independent accumulators of a row fold.
const LANES: usize = 8;

/// `reduce(row)`: [`LANES`] interleaved partial folds, then the partials in
/// lane order, then the tail.
#[inline(always)]
fn fold_row<T: Elem>(kind: Reduction, row: &[T]) -> T {
    let mut acc = [init::<T>(kind); LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = combine(kind, *a, v);
        }
    }
    let total = acc.iter().fold(init(kind), |a, &b| combine(kind, a, b));
    chunks
        .remainder()
        .iter()
        .fold(total, |a, &b| combine(kind, a, b))
}

/// `acc[i] = combine(acc[i], row[i])`.
#[inline(always)]
fn combine_rows<T: Elem>(kind: Reduction, acc: &mut [T], row: &[T]) {
    for (a, &v) in acc.iter_mut().zip(row) {
        *a = combine(kind, *a, v);
    }
}

/// out[o] = reduce(src[o*inner .. (o+1)*inner])
fn trailing<T: Elem>(kind: Reduction, src: &[T], dst: &mut [T], inner: usize) {
    let f = |(o, out): (usize, &mut T)| {
        *out = fold_row(kind, &src[o * inner..(o + 1) * inner]);
    };
    if src.len() >= PARALLEL_MIN {
        dst.par_iter_mut().enumerate().for_each(f);
    } else {
        dst.iter_mut().enumerate().for_each(f);
    }
}

/// Rows per part of a large leading reduction: the parts' results are
/// combined in part order, so how the rows split depends on the shape
/// alone, never on the thread count.
const PART_ROWS: usize = 256;

/// out[j] = reduce_i(src[i*inner + j])
fn leading<T: Elem>(kind: Reduction, src: &[T], dst: &mut [T], inner: usize) {
    const COLS: usize = 1024;
    let rows = src.len() / inner.max(1);
    // A bias gradient ([2048, 1024] summed over rows) has one block of
    // columns: split its rows too, or it runs on one thread.
    if src.len() >= PARALLEL_MIN && inner <= COLS && rows > PART_ROWS {
        let mut partial = vec![init(kind); rows.div_ceil(PART_ROWS) * inner];
        partial
            .par_chunks_mut(inner)
            .zip(src.par_chunks(PART_ROWS * inner))
            .for_each(|(out, part)| {
                for row in part.chunks(inner) {
                    combine_rows(kind, out, row);
                }
            });
        let mut parts = partial.chunks(inner);
        dst.copy_from_slice(parts.next().expect("rows > PART_ROWS"));
        for part in parts {
            combine_rows(kind, dst, part);
        }
        return;
    }
    let f = |(c, out): (usize, &mut [T])| {
        out.fill(init(kind));
        let j0 = c * COLS;
        let width = out.len();
        for row in src.chunks(inner) {
            combine_rows(kind, out, &row[j0..j0 + width]);
        }
    };
    if src.len() >= PARALLEL_MIN {
        dst.par_chunks_mut(COLS).enumerate().for_each(f);
    } else {
        dst.chunks_mut(COLS).enumerate().for_each(f);
    }
}

/// Reduce `src` of `shape` over `axes` into `dst`.
pub fn reduce(kind: Reduction, src: Raw, dst: Raw, shape: &[usize], axes: &[usize]) {
    let r = shape.len();
    let kept: Vec<usize> = (0..r).filter(|a| !axes.contains(a)).collect();
    // Axes of size 1 do not change the layout; ignore them when classifying.
    let real = |a: &usize| shape[*a] != 1;
    let red_real: Vec<usize> = axes.iter().copied().filter(real).collect();
    let kept_real: Vec<usize> = kept.iter().copied().filter(real).collect();
    let reduced: usize = axes.iter().map(|&a| shape[a]).product();
    let out_n: usize = kept.iter().map(|&a| shape[a]).product();
    let is_trailing = kept_real.iter().all(|k| red_real.iter().all(|a| k < a));
    let is_leading = red_real.iter().all(|a| kept_real.iter().all(|k| a < k));
    if out_n == 0 {
        return;
    }
    if reduced == 0 {
        movement::fill(
            dst,
            if kind == Reduction::Sum {
                0.0
            } else {
                f64::NEG_INFINITY
            },
        );
        return;
    }
    if !is_trailing && !is_leading {
        match *runs(shape, axes).as_slice() {
            [(a, true), (k, false), (c, true)] => {
                return reduce_in(kind, src, dst, Layout::Middle { a, k, c });
            }
            [(k1, false), (r1, true), (k2, false), (r2, true)] => {
                return reduce_in(kind, src, dst, Layout::Pooling { k1, r1, k2, r2 });
            }
            _ => {}
        }
    }
    if !is_trailing && !is_leading && reduced <= SMALL_WINDOW {
        return reduce_windows(kind, src, dst, shape, axes);
    }
    if !is_trailing && !is_leading {
        // Permute to [kept..., reduced...] and reduce the trailing block.
        let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
        let base = strides_of(shape);
        let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let pstrides: Vec<usize> = perm.iter().map(|&p| base[p]).collect();
        let mut tmp = HostBuffer::zeros(src.dtype, src.len);
        let t = Raw::of(&mut tmp);
        movement::gather(src, t, &pshape, &pstrides, 0);
        return reduce_layout(kind, t, dst, reduced, true);
    }
    reduce_layout(
        kind,
        src,
        dst,
        if is_trailing { reduced } else { out_n },
        is_trailing,
    )
}

/// Reduce whole rows of a row-blocked reduction (`fusion::RowBlocks`):
/// `src` holds some number of rows of `layout`, `dst` their outputs. The
/// row kernels are those [`reduce`] picks for the whole array, so a block
/// reduced here equals the same rows reduced at once, bit for bit.
pub fn reduce_rows(kind: Reduction, layout: RowLayout, src: Raw, dst: Raw) {
    match layout {
        RowLayout::Trailing { r } => reduce_layout(kind, src, dst, r, true),
        RowLayout::Pooling { r1, k2, r2 } => {
            let k1 = dst.len / k2.max(1);
            reduce_in(kind, src, dst, Layout::Pooling { k1, r1, k2, r2 })
        }
    }
}

/// The two in-place layouts beyond trailing and leading.
#[derive(Clone, Copy)]
enum Layout {
    /// `[a, k, c]` reduced over `a` and `c`.
    Middle { a: usize, k: usize, c: usize },
    /// `[k1, r1, k2, r2]` reduced over `r1` and `r2`.
    Pooling {
        k1: usize,
        r1: usize,
        k2: usize,
        r2: usize,
    },
}

fn reduce_in(kind: Reduction, src: Raw, dst: Raw, layout: Layout) {
    macro_rules! go {
        ($t:ty) => {{
            // SAFETY: distinct live buffers of dtype $t.
            let (s, d) = unsafe { (src.slice::<$t>(), dst.slice_mut::<$t>()) };
            match layout {
                Layout::Middle { a, k, c } => middle(kind, s, d, a, k, c),
                Layout::Pooling { k1, r1, k2, r2 } => pooling(kind, s, d, k1, r1, k2, r2),
            }
        }};
    }
    match src.dtype {
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        DType::I32 => go!(i32),
        DType::I64 => go!(i64),
        other => unreachable!("reduction over {other} is refused at trace time"),
    }
}

/// Run a kernel body in the AVX2 build where the CPU has it (see
/// `super::simd`: the same loops at a wider vector, results bit-identical),
/// else in the baseline build. `$f(args)` names an `#[inline(always)]`
/// function; the macro defines the `#[target_feature]` entry around it.
macro_rules! wide {
    ($f:ident($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if super::simd::avx2() {
                // SAFETY: the CPU has AVX2 (checked just above).
                unsafe { $f::avx2($($arg),*) }
            } else {
                $f::base($($arg),*)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            $f::base($($arg),*)
        }
    }};
}

/// Partial outputs of the middle layout over rows `is` of `a`.
mod middle_rows {
    use super::{combine, fold_row, init, Elem, Reduction};
    use std::ops::Range;

    #[inline(always)]
    pub(super) fn base<T: Elem>(
        kind: Reduction,
        src: &[T],
        out: &mut [T],
        is: Range<usize>,
        k: usize,
        c: usize,
    ) {
        out.fill(init(kind));
        for i in is {
            for (j, o) in out.iter_mut().enumerate() {
                let at = (i * k + j) * c;
                *o = combine(kind, *o, fold_row(kind, &src[at..at + c]));
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2<T: Elem>(
        kind: Reduction,
        src: &[T],
        out: &mut [T],
        is: Range<usize>,
        k: usize,
        c: usize,
    ) {
        base(kind, src, out, is, k, c)
    }
}

/// Pooling outputs of blocks `first..`: per block the `r1` rows of
/// `k2*r2` elements combine elementwise, then every `r2` neighbours.
mod pooling_blocks {
    use super::{combine, combine_rows, init, Elem, Reduction};

    #[inline(always)]
    pub(super) fn base<T: Elem>(
        kind: Reduction,
        src: &[T],
        out: &mut [T],
        first: usize,
        r1: usize,
        k2: usize,
        r2: usize,
    ) {
        match (r1, r2) {
            (2, 2) => return fixed::<T, 2, 2>(kind, src, out, first, k2),
            (3, 3) => return fixed::<T, 3, 3>(kind, src, out, first, k2),
            _ => {}
        }
        let row = k2 * r2;
        let mut acc = vec![init::<T>(kind); row];
        for (b, block) in out.chunks_mut(k2).enumerate() {
            let base = (first + b) * r1 * row;
            acc.copy_from_slice(&src[base..base + row]);
            for i in 1..r1 {
                combine_rows(kind, &mut acc, &src[base + i * row..base + (i + 1) * row]);
            }
            for (x, w) in block.iter_mut().zip(acc.chunks_exact(r2)) {
                *x = w.iter().fold(init(kind), |a, &b| combine(kind, a, b));
            }
        }
    }

    /// The same combinations in the same order for a window size known at
    /// compile time (2x2 and 3x3 pooling), without the row buffer: each
    /// output folds its window's columns, each column combined over the
    /// rows first, as `base` does through `acc`. The loops unroll, and
    /// small windows no longer pay a row copy per block of outputs.
    #[inline(always)]
    fn fixed<T: Elem, const R1: usize, const R2: usize>(
        kind: Reduction,
        src: &[T],
        out: &mut [T],
        first: usize,
        k2: usize,
    ) {
        let row = k2 * R2;
        for (b, block) in out.chunks_mut(k2).enumerate() {
            let rows = &src[(first + b) * R1 * row..(first + b + 1) * R1 * row];
            for (j, x) in block.iter_mut().enumerate() {
                let mut acc = init::<T>(kind);
                for l in 0..R2 {
                    let mut col = rows[j * R2 + l];
                    for i in 1..R1 {
                        col = combine(kind, col, rows[i * row + j * R2 + l]);
                    }
                    acc = combine(kind, acc, col);
                }
                *x = acc;
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2<T: Elem>(
        kind: Reduction,
        src: &[T],
        out: &mut [T],
        first: usize,
        r1: usize,
        k2: usize,
        r2: usize,
    ) {
        base(kind, src, out, first, r1, k2, r2)
    }
}

/// `out[j] = reduce over i, l of src[(i*k + j)*c + l]`: each contiguous row
/// of `c` folds into one partial, the partials of output `j` combine in
/// order of `i`. Large inputs split `i` into a fixed number of parts (by
/// size, not by thread count, so the result never depends on the pool),
/// whose partial outputs combine in part order.
fn middle<T: Elem>(kind: Reduction, src: &[T], dst: &mut [T], a: usize, k: usize, c: usize) {
    let rows =
        |i0: usize, i1: usize, out: &mut [T]| wide!(middle_rows(kind, src, out, i0..i1, k, c));
    let parts = (src.len() / PARALLEL_MIN).clamp(1, a);
    if parts == 1 {
        return rows(0, a, dst);
    }
    let per = a.div_ceil(parts);
    let mut partial = vec![init::<T>(kind); parts * k];
    partial
        .par_chunks_mut(k)
        .enumerate()
        .for_each(|(p, out)| rows((p * per).min(a), ((p + 1) * per).min(a), out));
    dst.copy_from_slice(&partial[..k]);
    for p in partial[k..].chunks(k) {
        combine_rows(kind, dst, p);
    }
}

/// `out[o*k2 + j] = reduce over i, l of src[((o*r1 + i)*k2 + j)*r2 + l]`:
/// per `o`, the `r1` rows of `k2*r2` elements combine elementwise (a
/// vector loop), then every `r2` neighbours.
fn pooling<T: Elem>(
    kind: Reduction,
    src: &[T],
    dst: &mut [T],
    k1: usize,
    r1: usize,
    k2: usize,
    r2: usize,
) {
    let row = k2 * r2;
    // Outputs per task: whole `o` blocks of about PARALLEL_MIN/4 inputs.
    let per_task = (PARALLEL_MIN / 4 / (r1 * row).max(1)).max(1) * k2;
    let f = |(t, out): (usize, &mut [T])| {
        let first = t * (per_task / k2);
        wide!(pooling_blocks(kind, src, out, first, r1, k2, r2))
    };
    debug_assert_eq!(dst.len(), k1 * k2);
    if src.len() >= PARALLEL_MIN {
        dst.par_chunks_mut(per_task).enumerate().for_each(f);
    } else {
        dst.chunks_mut(per_task).enumerate().for_each(f);
    }
}

fn reduce_layout(kind: Reduction, src: Raw, dst: Raw, inner: usize, is_trailing: bool) {
    macro_rules! go {
        ($t:ty) => {{
            // SAFETY: distinct live buffers of dtype $t.
            let (s, d) = unsafe { (src.slice::<$t>(), dst.slice_mut::<$t>()) };
            if is_trailing {
                trailing(kind, s, d, inner)
            } else {
                leading(kind, s, d, inner)
            }
        }};
    }
    match src.dtype {
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        DType::I32 => go!(i32),
        DType::I64 => go!(i64),
        other => unreachable!("reduction over {other} is refused at trace time"),
    }
}

/// out[o] = reduce over a small window of offsets around base(o): the
/// pooling layout (`[n, c, h, k, w, k]` reduced over the two `k` axes).
fn reduce_windows(kind: Reduction, src: Raw, dst: Raw, shape: &[usize], axes: &[usize]) {
    let base = strides_of(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&a| shape[a]).collect();
    let kept_strides: Vec<usize> = kept.iter().map(|&a| base[a]).collect();
    let mut window = vec![0usize];
    for &a in axes {
        let (len, stride) = (shape[a], base[a]);
        window = window
            .iter()
            .flat_map(|&w| (0..len).map(move |i| w + i * stride))
            .collect();
    }
    // Outputs go row by row along the last kept axis: one multi-index
    // decomposition per row, then a fixed step per output.
    let r = kept_shape.len();
    let (row_len, row_step) = match r {
        0 => (1, 0),
        _ => (kept_shape[r - 1], kept_strides[r - 1]),
    };
    let outer = &kept_shape[..r.saturating_sub(1)];
    let outer_strides = &kept_strides[..r.saturating_sub(1)];
    macro_rules! go {
        ($t:ty) => {{
            // SAFETY: distinct live buffers of dtype $t.
            let (s, d) = unsafe { (src.slice::<$t>(), dst.slice_mut::<$t>()) };
            let f = |(row, out): (usize, &mut [$t])| {
                let b = movement::row_offset(row, outer, outer_strides);
                for (j, o) in out.iter_mut().enumerate() {
                    let at = b + j * row_step;
                    *o = window
                        .iter()
                        .fold(init(kind), |acc, &w| combine(kind, acc, s[at + w]));
                }
            };
            if d.len() >= PARALLEL_MIN / 4 {
                d.par_chunks_mut(row_len).enumerate().for_each(f);
            } else {
                d.chunks_mut(row_len).enumerate().for_each(f);
            }
        }};
    }
    match src.dtype {
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        DType::I32 => go!(i32),
        DType::I64 => go!(i64),
        other => unreachable!("reduction over {other} is refused at trace time"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bias gradient's shape, summed over its rows: split into parts of
    /// [`PART_ROWS`] rows, against an f64 sum, and bit for bit the same
    /// on 1 and 3 threads.
    #[test]
    fn a_split_leading_sum_is_exact_and_ignores_the_thread_count() {
        for (rows, inner) in [(2048, 1024), (1000, 300), (300, 256)] {
            let src: Vec<f32> = (0..rows * inner)
                .map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 97.0)
                .collect();
            let sum = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut dst = vec![0.0f32; inner];
                pool.install(|| leading(Reduction::Sum, &src, &mut dst, inner));
                dst
            };
            let (one, three) = (sum(1), sum(3));
            assert!(one
                .iter()
                .zip(&three)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            for j in 0..inner {
                let col = (0..rows).map(|i| src[i * inner + j] as f64);
                let (exact, size): (f64, f64) = (col.clone().sum(), col.map(f64::abs).sum());
                // f32 rounding: a few ulps of the terms' total magnitude.
                let err = (one[j] as f64 - exact).abs();
                assert!(
                    err <= 1e-6 * size,
                    "column {j} of [{rows}, {inner}]: off by {err}"
                );
            }
        }
    }
}
