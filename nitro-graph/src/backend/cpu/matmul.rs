//! Matrix products: large f32 ones on AVX2 machines through our blocked
//! kernel (`sgemm`), the rest through the `gemm` crate (pure Rust,
//! rayon-parallel).
//! Transposed operands are passed as strides, never copied.
//!
//! The microkernels are chosen at run time by CPU detection (the `x86-v4`
//! feature of `gemm` adds the AVX-512 ones next to AVX2+FMA), so one binary
//! runs at the width of whatever machine it lands on; nothing here depends
//! on `target-cpu`. [`super::simd_level`] names what was detected.
//!
//! Threading: one product splits over the rayon pool once it has at least
//! [`PARALLEL_MIN_FLOPS`] multiply-adds; below that waking the workers
//! costs more than it saves, so it runs inline on the calling thread. A
//! batch of products each too small to split runs its batch entries in
//! parallel instead, one inline product per task (so does a batch of
//! mid-sized products with at least two per thread); a product with a small
//! output and a long contraction splits the contraction, and one with a
//! narrow output (under [`NARROW_MAX_COLS`] columns) or a tall one (at
//! least [`TALL_RATIO`] times as many rows as columns) splits its rows.

use super::raw::{widen, Raw};
use super::sgemm;
use super::transpose;
use nitro_device::DType;
use rayon::prelude::*;

/// Below this many multiply-adds one product runs on the calling thread:
/// waking a worker (~10-20 us) costs more than half the product saves
/// (at 2^18 it takes ~5 us at 100 GFLOPS on one core).
const PARALLEL_MIN_FLOPS: usize = 1 << 18;

/// A batch of at least two products per thread, each below this many
/// multiply-adds (attention's per-head `[128, 64] x [64, 128]`: 2^20),
/// runs one inline product per task even when each product could split:
/// splitting every product of the batch pays one wake-up and one join per
/// product, the batch split pays them once.
const BATCH_SPLIT_MAX_FLOPS: usize = 1 << 22;

/// A k-split product has at most this many outputs (each task holds a
/// partial copy of the output; beyond this gemm's own blocking shares out
/// the work well).
const SPLIT_K_MAX_OUTPUT: usize = 128 * 128;

/// Each part of a k-split product contracts at least this many terms, so a
/// part amortises its packing.
const SPLIT_K_MIN_DEPTH: usize = 512;

/// An unbatched product with a transposed right operand and at least this
/// many rows transposes that operand first (see `transpose`): the copy
/// moves `n * k` elements once, the product `m` times as many
/// multiply-adds, so from here it costs under ~6% of the product, which
/// it speeds up ~1.7x at m = 256 (Zen 4).
const FLIP_MIN_ROWS: usize = 64;

/// An unbatched product with an output narrower than this (a classifier
/// head: `[256, 512] x [512, 10]`) splits its rows over the threads itself,
/// one inline product per task: `gemm` splits a narrow output by column
/// blocks and row blocks of its own sizes and, on 2 threads, took about
/// twice as long (0.06 against 0.03 ms at m = 256, k = 512 on Zen 4).
const NARROW_MAX_COLS: usize = 16;

/// An unbatched product with at least 3/2 as many rows as columns splits
/// its rows over the threads too (as a narrow one does): each task packs
/// its own copy of B and runs one inline product, where `gemm`'s own
/// split of a tall output shared the work less well. Measured on an
/// Intel Xeon (AVX-512, 2 threads), `gemm`'s split against ours: a weight
/// gradient [1024,256] from k = 2048 (tn) 5.8-6.0 against 4.15 ms, the
/// QKV projection 2048x768x256 3.26-3.32 against 2.99, the MLP's
/// [784,512] weight gradient 0.95 against 0.85; no change at
/// 2048x256x1024 (nt); 256x512x784 (m < n, not split) 0.75 either way.
const TALL_RATIO: (usize, usize) = (3, 2);

/// `out[b] = op(a[b]) @ op(b[b])` for every batch index; shapes as in the IR.
/// f16/bf16 operands (mixed precision) are widened to f32 first, exactly,
/// and multiplied with f32 accumulation into the f32 result.
pub fn matmul(a: Raw, b: Raw, out: Raw, a_shape: &[usize], b_shape: &[usize], ta: bool, tb: bool) {
    matmul_then(a, b, out, a_shape, b_shape, ta, tb, None);
}

/// [`matmul`], then `epilogue(r0, r1)` on blocks of rows of the (single,
/// unbatched) product as they are finished, where the product runs on our
/// blocked kernel with whole rows per task (`sgemm`). Returns whether it
/// did; if not, the caller applies the epilogue to the whole product.
#[allow(clippy::too_many_arguments)]
pub fn matmul_then(
    a: Raw,
    b: Raw,
    out: Raw,
    a_shape: &[usize],
    b_shape: &[usize],
    ta: bool,
    tb: bool,
    epilogue: Option<&(dyn Fn(usize, usize) + Sync)>,
) -> bool {
    if matches!(a.dtype, DType::F16 | DType::BF16) {
        let (mut wa, mut wb) = (widen(a), widen(b));
        matmul(
            Raw::of(&mut wa),
            Raw::of(&mut wb),
            out,
            a_shape,
            b_shape,
            ta,
            tb,
        );
        return false;
    }
    let r = a_shape.len();
    let batch: usize = a_shape[..r - 2].iter().product();
    let (ar, ac) = (a_shape[r - 2], a_shape[r - 1]);
    let (br, bc) = (b_shape[r - 2], b_shape[r - 1]);
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let n = if tb { br } else { bc };
    // Row-major a[ar, ac]: element (i, j) at i*ac + j. op(a)(i, p):
    // untransposed (rs = ac, cs = 1); transposed (rs = 1, cs = ac).
    let (a_rs, a_cs) = if ta {
        (1, ac as isize)
    } else {
        (ac as isize, 1)
    };
    let (b_rs, b_cs) = if tb {
        (1, bc as isize)
    } else {
        (bc as isize, 1)
    };
    let flops = m * n * k;
    let whole = flops >= PARALLEL_MIN_FLOPS;
    // Small products of a large batch: parallel over the batch instead.
    let many = batch >= 2 * rayon::current_num_threads() && flops < BATCH_SPLIT_MAX_FLOPS;
    let over_batch = (!whole || many) && batch > 1 && flops * batch >= PARALLEL_MIN_FLOPS;
    // A small output with a long contraction (a weight gradient summed
    // over a batch: [16, 150] from k = 8192) leaves gemm, which splits the
    // output into blocks, nothing to share out: split k instead, each task
    // one inline partial product, summed in a fixed order afterwards.
    let k_parts = if whole && batch == 1 && m * n <= SPLIT_K_MAX_OUTPUT {
        rayon::current_num_threads().min(k / SPLIT_K_MIN_DEPTH)
    } else {
        1
    };
    let par = if whole && k_parts <= 1 && !over_batch {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // A large f32 product on an AVX2 machine without AVX-512 goes to our
    // own kernel (`sgemm`); everything else to `gemm`. The pointer casts below only
    // run when `fast`, i.e. when the element type is f32. A k-split product
    // (an output of at most 128x128) is never large, so it stays on `gemm`.
    let fast = out.dtype == DType::F32
        && flops >= sgemm::LARGE_MACS
        && m.min(n) >= sgemm::LARGE_SIDE
        && sgemm::preferred();
    let parallel = matches!(par, gemm::Parallelism::Rayon(_));
    // `A @ B^T` on `gemm`: handed over as is, `gemm` packs B by a strided
    // gather at about half speed; B transposed once runs at full speed.
    let alone = !fast && batch == 1 && k_parts <= 1 && whole;
    let threads = rayon::current_num_threads();
    let narrow = alone && n < NARROW_MAX_COLS;
    let tall = alone && m * TALL_RATIO.1 >= n * TALL_RATIO.0;
    let split_rows = (narrow || tall) && threads > 1 && m >= 8 * threads;
    // A narrow product that splits reads B in place (n < 16 columns: the
    // strided gather is short); one that does not split still flips.
    let flip = alone && !(narrow && split_rows) && tb && m >= FLIP_MIN_ROWS;
    if let (Some(e), true, 1, 1) = (epilogue, fast, batch, k_parts) {
        let a = sgemm::Operand::new(a.ptr::<f32>(), a_rs, a_cs);
        let b = sgemm::Operand::new(b.ptr::<f32>(), b_rs, b_cs);
        // SAFETY: as for every product below: `a` and `b` address m*k and
        // k*n f32 elements under these strides; `out` holds m*n and
        // overlaps neither.
        return unsafe { sgemm::sgemm(m, n, k, a, b, out.ptr::<f32>(), n, parallel, Some(e)) };
    }
    macro_rules! run {
        ($t:ty, $zero:expr, $one:expr) => {{
            if k_parts > 1 {
                let part = k.div_ceil(k_parts);
                let mut partial: Vec<$t> = vec![$zero; (k_parts - 1) * m * n];
                let outs: Vec<Raw> = std::iter::once(out)
                    .chain(
                        partial
                            .chunks_mut(m * n)
                            .map(|c| Raw::of_slice(c, out.dtype)),
                    )
                    .collect();
                outs.par_iter().enumerate().for_each(|(t, dst)| {
                    let (p0, p1) = (t * part, ((t + 1) * part).min(k));
                    // SAFETY: task `t` reads columns p0..p1 of op(a) and
                    // rows p0..p1 of op(b), and writes its own buffer.
                    unsafe {
                        let ap = a.ptr::<$t>().offset(p0 as isize * a_cs);
                        let bp = b.ptr::<$t>().offset(p0 as isize * b_rs);
                        product(
                            m,
                            n,
                            p1 - p0,
                            dst.ptr::<$t>(),
                            (ap, a_cs, a_rs),
                            (bp, b_cs, b_rs),
                            gemm::Parallelism::None,
                        );
                    }
                });
                // SAFETY: every task has finished; `out` holds m*n elements.
                let total = unsafe { std::slice::from_raw_parts_mut(out.ptr::<$t>(), m * n) };
                for chunk in partial.chunks(m * n) {
                    total.iter_mut().zip(chunk).for_each(|(o, p)| *o += p);
                }
                return false;
            }
            // The whole product with op(b) at `bp` (column and row
            // strides): split by rows, one inline product per thread, or
            // one call with `gemm`'s own parallelism.
            let unbatched = |bp: *const $t, b_cs: isize, b_rs: isize| {
                let part = if split_rows { m.div_ceil(threads) } else { m };
                let (bp, parts) = (bp as usize, m.div_ceil(part));
                let inner = if split_rows {
                    gemm::Parallelism::None
                } else {
                    par
                };
                let rows = |t: usize| {
                    let (r0, r1) = (t * part, ((t + 1) * part).min(m));
                    // SAFETY: task `t` reads rows r0..r1 of op(a) and all
                    // of op(b), and writes rows r0..r1 of `out`, its own.
                    unsafe {
                        let ap = a.ptr::<$t>().offset(r0 as isize * a_rs);
                        let op = out.ptr::<$t>().add(r0 * n);
                        let bp = bp as *const $t;
                        product(r1 - r0, n, k, op, (ap, a_cs, a_rs), (bp, b_cs, b_rs), inner);
                    }
                };
                if parts > 1 {
                    (0..parts).into_par_iter().for_each(rows);
                } else {
                    rows(0);
                }
            };
            if flip {
                // SAFETY: `b` holds the [br, bc] = [n, k] elements of one
                // batch entry; nothing writes it during the call.
                let src = unsafe { std::slice::from_raw_parts(b.ptr::<$t>(), br * bc) };
                // op(b) = `bt`, [k, n] row-major (rs = n, cs = 1), a buffer
                // of this thread's.
                transpose::with_transpose(src, br, bc, |bt| unbatched(bt.as_ptr(), 1, n as isize));
                return false;
            }
            if split_rows {
                unbatched(b.ptr::<$t>(), b_cs, b_rs);
                return false;
            }
            let one = |bi: usize| {
                // SAFETY: the pointers address batch `bi` of buffers of the
                // shapes above; `out` does not overlap `a` or `b`, and
                // distinct batch entries write disjoint ranges of `out`.
                unsafe {
                    let ap = a.ptr::<$t>().add(bi * ar * ac);
                    let bp = b.ptr::<$t>().add(bi * br * bc);
                    let op = out.ptr::<$t>().add(bi * m * n);
                    if k == 0 {
                        std::slice::from_raw_parts_mut(op, m * n).fill($zero);
                        return;
                    }
                    if fast {
                        let a = sgemm::Operand::new(ap as *const f32, a_rs, a_cs);
                        let b = sgemm::Operand::new(bp as *const f32, b_rs, b_cs);
                        sgemm::sgemm(m, n, k, a, b, op as *mut f32, n, parallel, None);
                        return;
                    }
                    product(m, n, k, op, (ap, a_cs, a_rs), (bp, b_cs, b_rs), par);
                }
            };
            if over_batch {
                (0..batch).into_par_iter().for_each(one);
            } else {
                (0..batch).for_each(one);
            }
        }};
    }
    match out.dtype {
        DType::F32 => run!(f32, 0.0f32, 1.0f32),
        DType::F64 => run!(f64, 0.0f64, 1.0f64),
        other => unreachable!("matmul on {other} is refused at trace time"),
    }
    false
}

/// `dst[m, n] = op(a)[m, k] · op(b)[k, n]` by `gemm` (overwritten, row
/// stride `n`); an operand is (pointer, column stride, row stride).
///
/// # Safety
/// `a` and `b` address m*k and k*n elements under their strides; `dst`
/// holds m*n and overlaps neither.
unsafe fn product<T: 'static + GemmScalar>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    a: (*const T, isize, isize),
    b: (*const T, isize, isize),
    par: gemm::Parallelism,
) {
    // SAFETY: the caller upholds the contract above; alpha 0 with
    // read_dst false overwrites, beta 1 scales the product by one.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            false,
            a.0,
            a.1,
            a.2,
            b.0,
            b.1,
            b.2,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            par,
        )
    }
}

/// The two constants [`product`] passes to `gemm`.
trait GemmScalar: Copy {
    const ZERO: Self;
    const ONE: Self;
}

impl GemmScalar for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
}

impl GemmScalar for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
}
