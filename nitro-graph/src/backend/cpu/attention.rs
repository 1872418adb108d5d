//! The CPU kernels of [`crate::ir::Op::Attention`] and its adjoint
//! [`crate::ir::Op::AttentionGrad`]: multi-head self-attention read
//! straight out of the fused `qkv` projection, one (batch, head) pair per
//! task.
//!
//! A task holds one head's score matrix (`t x t`) and the transposes it
//! needs in a scratch buffer of its thread (at t = 128, 64 KB each: they
//! stay in L2), so the composite's slices, permutes, batched products and
//! softmax passes over `[b h, t, t]` in memory become a few register-tiled
//! products over cached data. A head's q, k, v (columns of `qkv`) and dy
//! are first copied into contiguous `[t, hd]` blocks (read in place, their
//! rows `3 d` apart fell into a few L1 sets); the products are `c = a b`
//! over row-major operands in tiles of [`R`] rows by [`W`] columns,
//! accumulated by fused multiply-adds in contraction order, and written
//! to the output's strided columns. The whole kernel is built for
//! AVX-512, for AVX2 and for the baseline, chosen at run time (the fused
//! loops' scheme, `super::simd`). Causal attention skips the tiles above
//! the diagonal: the scores no row uses and the contraction terms whose
//! weight is exactly zero.
//!
//! Results do not depend on the thread count (each element is one task's,
//! summed in one order). f16 and bf16 run in f32 and are rounded once.
//!
//! What it does not own: the op's definition and shape rules (`ir`), its
//! derivative rule (`autodiff`), the CUDA kernels.

use super::raw::{in_register_type, Raw};
use super::transpose;
use crate::semantics::FloatElem;
use nitro_device::DType;
use rayon::prelude::*;
use std::cell::RefCell;
use std::thread::LocalKey;

/// Rows of a product's register tile.
const R: usize = 4;
/// Columns of a product's register tile (four AVX-512 vectors of f32:
/// with 4 rows, 16 accumulators, 8 loads per 16 multiply-adds).
const W: usize = 64;
/// Lanes of the partial maxima and sums of a row (one AVX-512 vector of
/// f32), so the row folds vectorise; combined in lane order.
const LANES: usize = 16;

/// The register types the kernels run in.
trait Elem: FloatElem + transpose::Elem {
    /// `self * b + c`, rounded once.
    fn fma(self, b: Self, c: Self) -> Self;
    /// The value nearest `x`.
    fn of(x: f64) -> Self;
    /// This thread's scratch buffer.
    fn pool() -> &'static LocalKey<RefCell<Vec<Self>>>;
}

thread_local! {
    static POOL_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static POOL_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

impl Elem for f32 {
    #[inline(always)]
    fn fma(self, b: f32, c: f32) -> f32 {
        self.mul_add(b, c)
    }
    fn of(x: f64) -> f32 {
        x as f32
    }
    fn pool() -> &'static LocalKey<RefCell<Vec<f32>>> {
        &POOL_F32
    }
}

impl Elem for f64 {
    #[inline(always)]
    fn fma(self, b: f64, c: f64) -> f64 {
        self.mul_add(b, c)
    }
    fn of(x: f64) -> f64 {
        x
    }
    fn pool() -> &'static LocalKey<RefCell<Vec<f64>>> {
        &POOL_F64
    }
}

/// The sizes of one call: batch, time, model width, heads, head width.
#[derive(Clone, Copy)]
struct Geo {
    b: usize,
    t: usize,
    d: usize,
    heads: usize,
    hd: usize,
    causal: bool,
}

impl Geo {
    fn new(qkv_shape: &[usize], heads: usize, causal: bool) -> Geo {
        let (b, t, d) = (qkv_shape[0], qkv_shape[1], qkv_shape[2] / 3);
        Geo {
            b,
            t,
            d,
            heads,
            hd: d / heads,
            causal,
        }
    }

    /// Offset in `qkv` of part `part` (0 q, 1 k, 2 v) of head `h`, batch `bi`.
    fn part(&self, bi: usize, h: usize, part: usize) -> usize {
        bi * self.t * 3 * self.d + part * self.d + h * self.hd
    }
}

/// `out [b, t, d] = attention(qkv [b, t, 3 d])`.
pub(super) fn attention(qkv: Raw, out: Raw, shape: &[usize], heads: usize, causal: bool) {
    let g = Geo::new(shape, heads, causal);
    in_register_type(&[qkv], out, |ins, out| match out.dtype {
        DType::F64 => run::<f64>(g, ins[0], None, out),
        _ => run::<f32>(g, ins[0], None, out),
    });
}

/// `dqkv [b, t, 3 d]` = the gradient of [`attention`] for cotangent `dy`.
pub(super) fn attention_grad(
    qkv: Raw,
    dy: Raw,
    out: Raw,
    shape: &[usize],
    heads: usize,
    causal: bool,
) {
    let g = Geo::new(shape, heads, causal);
    in_register_type(&[qkv, dy], out, |ins, out| match out.dtype {
        DType::F64 => run::<f64>(g, ins[0], Some(ins[1]), out),
        _ => run::<f32>(g, ins[0], Some(ins[1]), out),
    });
}

/// A buffer the tasks write disjoint parts of.
#[derive(Clone, Copy)]
struct Shared(*mut u8);
impl Shared {
    /// The pointer as `T` (a method, so closures capture the whole `Shared`).
    fn get<T>(self) -> *mut T {
        self.0 as *mut T
    }
}
// SAFETY: tasks write disjoint elements (see `run`).
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

/// Every (batch, head) task of the forward (`dy` = None) or the backward.
fn run<T: Elem>(g: Geo, qkv: Raw, dy: Option<Raw>, out: Raw) {
    if g.b == 0 || g.t == 0 || g.hd == 0 {
        // SAFETY: `out` holds `len` elements of T.
        unsafe { out.slice_mut::<T>().fill(T::ZERO) };
        return;
    }
    let (qkv, dy, out) = (
        Shared(qkv.ptr::<u8>()),
        dy.map(|d| Shared(d.ptr::<u8>())),
        Shared(out.ptr::<u8>()),
    );
    let task = |i: usize| {
        let (bi, h) = (i / g.heads, i % g.heads);
        T::pool().with(|cell| {
            let (mut own, mut kept) = (Vec::new(), cell.try_borrow_mut());
            let scratch = kept.as_deref_mut().unwrap_or(&mut own);
            let need = if dy.is_some() {
                4 * g.t * g.t + 5 * g.hd * g.t
            } else {
                g.t * g.t + 4 * g.hd * g.t
            };
            if scratch.len() < need {
                scratch.resize(need, T::ZERO);
            }
            let (qkv, out) = (qkv.get::<T>() as *const T, out.get::<T>());
            let dy = dy.map(|d| d.get::<T>() as *const T);
            // SAFETY: the pointers address the call's buffers (shapes in
            // `g`); task (bi, h) writes only head h's columns of batch bi
            // of `out`, which no other task writes.
            let scratch = &mut scratch[..need];
            unsafe {
                head_wide(Task {
                    g,
                    bi,
                    h,
                    qkv,
                    dy,
                    out,
                    scratch,
                })
            };
        });
    };
    let tasks = g.b * g.heads;
    if tasks > 1 && g.t * g.t * g.hd >= 1 << 14 {
        (0..tasks).into_par_iter().for_each(task);
    } else {
        (0..tasks).for_each(task);
    }
}

/// One (batch, head) task: where it reads and writes, and its scratch.
struct Task<'a, T> {
    g: Geo,
    bi: usize,
    h: usize,
    qkv: *const T,
    dy: Option<*const T>,
    out: *mut T,
    scratch: &'a mut [T],
}

/// [`head`] in the widest build of the loops this CPU runs.
///
/// # Safety
/// As [`head`].
unsafe fn head_wide<T: Elem>(task: Task<'_, T>) {
    super::simd::widest!([T: Elem] (task: Task<'_, T> = task) {
        // SAFETY: the caller's contract.
        unsafe { head(task) }
    })
}

/// Head `h` of batch `bi`: the forward into `out [b, t, d]` (no `dy`), or
/// the backward into `out [b, t, 3 d]`.
///
/// # Safety
/// `qkv` holds `b t 3d` elements, `dy` (if any) `b t d`, `out` the
/// output's; `scratch` holds `t t + 4 hd t` (forward) or `4 t t + 5 hd t`.
#[inline(always)]
unsafe fn head<T: Elem>(task: Task<'_, T>) {
    let Task {
        g,
        bi,
        h,
        qkv,
        dy,
        out,
        scratch,
    } = task;
    let (t, d, hd) = (g.t, g.d, g.hd);
    let (s, rest) = scratch.split_at_mut(t * t);
    let (ht, rest) = rest.split_at_mut(hd * t);
    let (qc, rest) = rest.split_at_mut(t * hd);
    let (kc, rest) = rest.split_at_mut(t * hd);
    let (vc, rest) = rest.split_at_mut(t * hd);
    let scale = T::of(1.0 / (hd as f64).sqrt());
    let cols = if g.causal { Limit::Cols } else { Limit::None };
    let depth = if g.causal { Limit::Depth } else { Limit::None };
    let from = if g.causal {
        Limit::DepthFrom
    } else {
        Limit::None
    };
    // SAFETY (every copy and product below): the offsets address head h
    // of batch bi inside buffers of the sizes in the contract, rows `3d`
    // (qkv), `d` (dy, forward out) or `3d` (backward out) apart; the
    // scratch parts hold what the products read.
    unsafe {
        // The head's q, k, v (and dy) as contiguous [t, hd] blocks: read
        // in place, rows 3d apart put every row of a block in the same
        // few L1 sets.
        gather(qkv.add(g.part(bi, h, 0)), 3 * d, t, hd, qc);
        gather(qkv.add(g.part(bi, h, 1)), 3 * d, t, hd, kc);
        gather(qkv.add(g.part(bi, h, 2)), 3 * d, t, hd, vc);
        let (q, k, v) = (qc.as_ptr(), kc.as_ptr(), vc.as_ptr());
        // s = q k^T (k transposed into `ht`, [hd, t]), then the weights.
        transpose::transpose(kc, ht, t, hd);
        mm(t, t, hd, q, hd, ht.as_ptr(), t, s.as_mut_ptr(), t, cols);
        for i in 0..t {
            softmax_row(&mut s[i * t..(i + 1) * t], row_limit(g, i), scale);
        }
        let Some(dy) = dy else {
            // out = p v.
            let o = out.add(bi * t * d + h * hd);
            return mm(t, hd, t, s.as_ptr(), t, v, hd, o, d, depth);
        };
        let o = |part: usize| out.add(g.part(bi, h, part));
        let (dyc, rest) = rest.split_at_mut(t * hd);
        let (pt, rest) = rest.split_at_mut(t * t);
        let (dp, dst) = rest.split_at_mut(t * t);
        gather(dy.add(bi * t * d + h * hd), d, t, hd, dyc);
        let dyh = dyc.as_ptr();
        // dv = p^T dy.
        transpose::transpose(s, pt, t, t);
        mm(t, hd, t, pt.as_ptr(), t, dyh, hd, o(2), 3 * d, from);
        // dp = dy v^T, then ds = p (dp - rowsum(p dp)) scale, in place.
        transpose::transpose(vc, ht, t, hd);
        mm(t, t, hd, dyh, hd, ht.as_ptr(), t, dp.as_mut_ptr(), t, cols);
        for i in 0..t {
            let lim = row_limit(g, i);
            let (p, dp) = (&s[i * t..i * t + lim], &mut dp[i * t..(i + 1) * t]);
            // r = sum_j p_ij dp_ij, by lanes as the softmax's sums.
            let mut lanes = [T::ZERO; LANES];
            for (pc, xc) in p.chunks(LANES).zip(dp.chunks(LANES)) {
                for ((l, &p), &x) in lanes.iter_mut().zip(pc).zip(xc) {
                    *l = p.fma(x, *l);
                }
            }
            let r = lanes.iter().fold(T::ZERO, |a, &l| a + l);
            for (x, &p) in dp.iter_mut().zip(p) {
                *x = p * (*x - r) * scale;
            }
            dp[lim..].fill(T::ZERO);
        }
        // dq = ds k; dk = ds^T q.
        mm(t, hd, t, dp.as_ptr(), t, k, hd, o(0), 3 * d, depth);
        transpose::transpose(dp, dst, t, t);
        mm(t, hd, t, dst.as_ptr(), t, q, hd, o(1), 3 * d, from);
    }
}

/// `dst [rows, cols]` = the block at `src` (rows `ld` apart), contiguous.
///
/// # Safety
/// `src` addresses `rows` rows of `cols` elements, `ld` apart.
#[inline(always)]
unsafe fn gather<T: Elem>(src: *const T, ld: usize, rows: usize, cols: usize, dst: &mut [T]) {
    for (r, row) in dst[..rows * cols].chunks_exact_mut(cols).enumerate() {
        // SAFETY: row r of the block (the caller's contract).
        row.copy_from_slice(unsafe { std::slice::from_raw_parts(src.add(r * ld), cols) });
    }
}

/// Keys row `i` attends to: `0..row_limit`.
fn row_limit(g: Geo, i: usize) -> usize {
    if g.causal {
        i + 1
    } else {
        g.t
    }
}

/// `row[..lim]` scaled by `scale`, then softmax in place (the maximum
/// subtracted first); `row[lim..]` = 0. The maps are loops of their own
/// so that they vectorise (the exp above all), and the folds run in
/// [`LANES`] partial results (a fixed order, whatever the thread count).
#[inline(always)]
fn softmax_row<T: Elem>(row: &mut [T], lim: usize, scale: T) {
    let live = &mut row[..lim];
    live.iter_mut().for_each(|x| *x = *x * scale);
    let m = fold_lanes(
        live,
        T::of(f64::NEG_INFINITY),
        |m, x| if x > m { x } else { m },
    );
    live.iter_mut().for_each(|x| *x = (*x - m).exp());
    let z = fold_lanes(live, T::ZERO, |z, x| z + x);
    live.iter_mut().for_each(|x| *x = *x / z);
    row[lim..].fill(T::ZERO);
}

/// `f` folded over `xs` in [`LANES`] interleaved partial results (lane
/// `i` takes elements `i`, `i + LANES`, ...), then over the lanes in order.
#[inline(always)]
fn fold_lanes<T: Elem>(xs: &[T], init: T, f: impl Fn(T, T) -> T) -> T {
    let mut lanes = [init; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (l, &x) in lanes.iter_mut().zip(chunk) {
            *l = f(*l, x);
        }
    }
    for (l, &x) in lanes.iter_mut().zip(chunks.remainder()) {
        *l = f(*l, x);
    }
    lanes.iter().fold(init, |a, &l| f(a, l))
}

/// Which terms of a causal product are skipped: none; the output columns
/// right of the diagonal (a score matrix: row `i` needs columns `<= i`);
/// the contraction terms right of the diagonal (a product whose left
/// operand is zero there: weights times values); or those left of it (a
/// left operand that is a transposed weight matrix, zero below).
#[derive(Clone, Copy, PartialEq)]
enum Limit {
    None,
    Cols,
    Depth,
    DepthFrom,
}

/// `c[i, j] = sum_p a[i, p] b[p, j]` for `i < m`, `j < n`, `p < k` (row
/// strides `lda`, `ldb`, `ldc`), overwriting `c`; under a [`Limit`], a
/// tile of rows `i0..` stops at column / contraction index `i0 + R`.
///
/// # Safety
/// The operands address those elements; `c` overlaps neither.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn mm<T: Elem>(
    m: usize,
    n: usize,
    k: usize,
    a: *const T,
    lda: usize,
    b: *const T,
    ldb: usize,
    c: *mut T,
    ldc: usize,
    limit: Limit,
) {
    for i0 in (0..m).step_by(R) {
        let rows = R.min(m - i0);
        let (n_eff, p0, k_eff) = match limit {
            Limit::None => (n, 0, k),
            // Whole tiles: the few scores right of the diagonal that
            // this computes are never read.
            Limit::Cols => (n.min((i0 + R).next_multiple_of(W)), 0, k),
            Limit::Depth => (n, 0, k.min(i0 + R)),
            Limit::DepthFrom => (n, i0.min(k), k),
        };
        for j0 in (0..n_eff).step_by(W) {
            let w = W.min(n_eff - j0);
            // SAFETY: rows i0..i0+rows, columns j0..j0+w, terms p0..k_eff,
            // all within the caller's bounds.
            unsafe {
                let (a, b) = (a.add(i0 * lda + p0), b.add(p0 * ldb + j0));
                let (c, k) = (c.add(i0 * ldc + j0), k_eff - p0);
                if rows == R && w == W {
                    tile(k, a, lda, b, ldb, c, ldc);
                } else {
                    edge(rows, w, k, a, lda, b, ldb, c, ldc);
                }
            }
        }
    }
}

/// A full `R x W` tile, its accumulators in registers.
///
/// # Safety
/// As [`mm`], for this tile.
#[inline(always)]
unsafe fn tile<T: Elem>(
    k: usize,
    a: *const T,
    lda: usize,
    b: *const T,
    ldb: usize,
    c: *mut T,
    ldc: usize,
) {
    let mut acc = [[T::ZERO; W]; R];
    for p in 0..k {
        // SAFETY: row p of b's W columns, and a's R rows at term p.
        unsafe {
            let bp = std::slice::from_raw_parts(b.add(p * ldb), W);
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = *a.add(r * lda + p);
                for (acc, &y) in acc.iter_mut().zip(bp) {
                    *acc = x.fma(y, *acc);
                }
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        // SAFETY: row r of the tile in c.
        unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), W).copy_from_slice(acc) };
    }
}

/// A partial tile (`rows <= R`, `w <= W`), in the same summation order.
///
/// # Safety
/// As [`mm`], for this tile.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn edge<T: Elem>(
    rows: usize,
    w: usize,
    k: usize,
    a: *const T,
    lda: usize,
    b: *const T,
    ldb: usize,
    c: *mut T,
    ldc: usize,
) {
    for r in 0..rows {
        let mut acc = [T::ZERO; W];
        for p in 0..k {
            // SAFETY: as in `tile`, for w columns.
            unsafe {
                let x = *a.add(r * lda + p);
                let bp = std::slice::from_raw_parts(b.add(p * ldb), w);
                for (acc, &y) in acc.iter_mut().zip(bp) {
                    *acc = x.fma(y, *acc);
                }
            }
        }
        // SAFETY: row r of the tile in c.
        unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), w).copy_from_slice(&acc[..w]) };
    }
}
