//! Out-of-place transposes of one row-major matrix, for `matmul`: a product
//! whose right operand is transposed (`A @ B^T`, every linear layer's input
//! gradient) reaches `gemm` with a row-major left panel once `gemm` turns
//! the row-major output around, and `gemm` packs that panel by a strided
//! gather. On a Zen 4 (AVX-512, 2 threads) `[256, 512] @ [512, 512]^T` ran
//! at 97-115 GFLOPS against 190-210 for the same product untransposed;
//! transposing `B` first (~0.09 ms for 512x512) and running the plain
//! product recovers nearly all of it. What it does not own: when that pays
//! (`matmul` decides).
//!
//! The f32 kernel moves 4x4 blocks through SSE registers (baseline on
//! x86_64, so no run-time dispatch); other element types and the ragged
//! edges go element by element. Both walk the matrix in square tiles so a
//! tile's source rows and destination rows stay in L1. Large matrices split
//! their destination rows over the rayon pool.

use rayon::prelude::*;
use std::cell::RefCell;
use std::thread::LocalKey;

/// Side of the square tiles both loops walk. Layer widths are powers of
/// two, so a tile's source rows (and its destination rows) lie 2-4 KB
/// apart and fall into the same few L1 sets: a tile of 32 rows asked one
/// set for 32 or more lines, more than any L1 holds (8-12 ways), and
/// evicted its own lines. 8 rows stay within 8 ways at a 2 KB stride.
/// Measured on an Intel Xeon (avx512, 2 threads), `[256,512] @ [512,512]^T`
/// with its flip, 3 alternated runs: 32 rows 0.614-0.646 ms, 16 rows
/// 0.567-0.583, 8 rows 0.560-0.632 (the flip's share of the product, by
/// `perf`, 16% -> 10%); the GPT's `[2048,1024] @ [256,1024]^T` 3.67-3.77
/// at 8 and 16 rows.
const TILE: usize = 8;
/// A matrix with at least this many elements splits over the rayon pool
/// (below, waking a worker costs more than the copy).
const PARALLEL_MIN: usize = 1 << 17;

/// Element types the transposes move. f32 has a vector kernel.
pub(super) trait Elem: Copy + Default + Send + Sync + 'static {
    /// This thread's reused destination buffer for the element type.
    fn scratch() -> &'static LocalKey<RefCell<Vec<Self>>>;

    /// Transpose the whole tiles of source columns `c0..c1` of `src`
    /// (`rows x cols`, row-major) into `dst` (destination rows `c0..c1` of
    /// the `cols x rows` result, row-major).
    fn band(src: &[Self], dst: &mut [Self], rows: usize, cols: usize, c0: usize, c1: usize) {
        scalar_band(src, dst, rows, cols, c0, c1);
    }
}

thread_local! {
    static F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

impl Elem for f64 {
    fn scratch() -> &'static LocalKey<RefCell<Vec<f64>>> {
        &F64
    }
}

impl Elem for f32 {
    fn scratch() -> &'static LocalKey<RefCell<Vec<f32>>> {
        &F32
    }

    fn band(src: &[f32], dst: &mut [f32], rows: usize, cols: usize, c0: usize, c1: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            sse_band(src, dst, rows, cols, c0, c1);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            scalar_band(src, dst, rows, cols, c0, c1);
        }
    }
}

/// `f` of the transpose of `src` (`rows x cols`, row-major), held in this
/// thread's scratch buffer, which later calls reuse (a product per step
/// would otherwise allocate and fault in a fresh buffer every step). The
/// buffer is taken out for the call, so a nested call on the same thread
/// (rayon work stealing) gets a buffer of its own.
pub(super) fn with_transpose<T: Elem, R>(
    src: &[T],
    rows: usize,
    cols: usize,
    f: impl FnOnce(&[T]) -> R,
) -> R {
    let key = T::scratch();
    let mut buf = key.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if buf.len() < rows * cols {
        buf.resize(rows * cols, T::default());
    }
    transpose(src, &mut buf, rows, cols);
    let r = f(&buf[..rows * cols]);
    key.with(|c| {
        let mut kept = c.borrow_mut();
        if kept.len() < buf.len() {
            *kept = buf;
        }
    });
    r
}

/// `dst[c * rows + r] = src[r * cols + c]` for a `rows x cols` row-major
/// `src`; `dst` must hold `rows * cols` elements.
pub(super) fn transpose<T: Elem>(src: &[T], dst: &mut [T], rows: usize, cols: usize) {
    assert!(src.len() >= rows * cols && dst.len() >= rows * cols);
    let dst = &mut dst[..rows * cols];
    if rows * cols < PARALLEL_MIN || rayon::current_num_threads() < 2 || rows == 0 {
        T::band(src, dst, rows, cols, 0, cols);
        return;
    }
    // Bands of destination rows (source columns), whole tiles each.
    let per = cols.div_ceil(rayon::current_num_threads()).div_ceil(TILE) * TILE;
    dst.par_chunks_mut(per * rows)
        .enumerate()
        .for_each(|(i, part)| {
            let c0 = i * per;
            let c1 = (c0 + per).min(cols);
            T::band(src, part, rows, cols, c0, c1);
        });
}

/// The element-by-element band: `dst` starts at destination row `c0`.
fn scalar_band<T: Copy>(src: &[T], dst: &mut [T], rows: usize, cols: usize, c0: usize, c1: usize) {
    for cb in (c0..c1).step_by(TILE) {
        let ce = (cb + TILE).min(c1);
        for rb in (0..rows).step_by(TILE) {
            let re = (rb + TILE).min(rows);
            for c in cb..ce {
                let d = &mut dst[(c - c0) * rows..(c - c0 + 1) * rows];
                for r in rb..re {
                    d[r] = src[r * cols + c];
                }
            }
        }
    }
}

/// The SSE band: 4x4 blocks through registers, the ragged right and bottom
/// edges element by element.
#[cfg(target_arch = "x86_64")]
fn sse_band(src: &[f32], dst: &mut [f32], rows: usize, cols: usize, c0: usize, c1: usize) {
    use std::arch::x86_64::*;
    let (r4, c4) = (rows / 4 * 4, c0 + (c1 - c0) / 4 * 4);
    for cb in (c0..c4).step_by(TILE) {
        let ce = (cb + TILE).min(c4);
        for rb in (0..r4).step_by(TILE) {
            let re = (rb + TILE).min(r4);
            for r in (rb..re).step_by(4) {
                for c in (cb..ce).step_by(4) {
                    // SAFETY: r + 3 < rows and c + 3 < c1 <= cols, so the four
                    // source loads (src holds rows * cols) and the four
                    // destination stores (dst holds (c1 - c0) * rows from
                    // destination row c0) are in bounds.
                    unsafe {
                        let s = src.as_ptr().add(r * cols + c);
                        let mut x0 = _mm_loadu_ps(s);
                        let mut x1 = _mm_loadu_ps(s.add(cols));
                        let mut x2 = _mm_loadu_ps(s.add(2 * cols));
                        let mut x3 = _mm_loadu_ps(s.add(3 * cols));
                        _MM_TRANSPOSE4_PS(&mut x0, &mut x1, &mut x2, &mut x3);
                        let d = dst.as_mut_ptr().add((c - c0) * rows + r);
                        _mm_storeu_ps(d, x0);
                        _mm_storeu_ps(d.add(rows), x1);
                        _mm_storeu_ps(d.add(2 * rows), x2);
                        _mm_storeu_ps(d.add(3 * rows), x3);
                    }
                }
            }
        }
    }
    // The bottom rows r4.. of the vector columns, then the right columns.
    for c in c0..c4 {
        for r in r4..rows {
            dst[(c - c0) * rows + r] = src[r * cols + c];
        }
    }
    scalar_band(src, &mut dst[(c4 - c0) * rows..], rows, cols, c4, c1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference<T: Copy + Default>(src: &[T], rows: usize, cols: usize) -> Vec<T> {
        let mut out = vec![T::default(); rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                out[c * rows + r] = src[r * cols + c];
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Every shape, ragged edges and the parallel split included, puts
        /// each element where the index formula says (f32 through the
        /// vector kernel, f64 through the scalar one).
        #[test]
        fn matches_the_index_formula(rows in 0usize..90, cols in 0usize..90, big in any::<bool>()) {
            let (rows, cols) = if big { (rows * 3 + 300, cols * 3 + 450) } else { (rows, cols) };
            let a: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let mut t = vec![-1.0f32; rows * cols];
            transpose(&a, &mut t, rows, cols);
            prop_assert_eq!(&t, &reference(&a, rows, cols));
            let a: Vec<f64> = a.iter().map(|&v| v as f64 * 0.5).collect();
            let mut t = vec![-1.0f64; rows * cols];
            transpose(&a, &mut t, rows, cols);
            prop_assert_eq!(&t, &reference(&a, rows, cols));
        }
    }
}
