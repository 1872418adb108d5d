//! Large f32 matrix products on AVX2+FMA machines without AVX-512: a
//! blocked GEMM in the BLIS layout (Goto's algorithm), written here because
//! the `gemm` crate reached 48 GFLOPS on one Zen 3 core where OpenBLAS
//! reaches 63, and scaled poorly to two threads (70 against 114 at n = 1024).
//!
//! `C = op(A) op(B)` with C row-major and A, B given by row and column
//! strides (a transpose is a stride swap, never a copy). The loops:
//!
//! - columns of C in blocks of [`NC`], the contraction in blocks of [`KC`]:
//!   the `KC x NC` block of B is packed once into `NR`-wide panels (L3);
//! - rows of C in blocks of [`MC`]: each task packs its `MC x KC` block of A
//!   into `MR`-tall panels (L2) and runs the 6x16 microkernel over every
//!   (A panel, B panel) pair of its tile (the B panel stays in L1).
//!
//! Tasks are (row block, column group) pairs shared over the rayon pool;
//! every element of C is summed by one task in one fixed order (the KC
//! blocks in sequence, each in k order), so the result does not depend on
//! the thread count (data-parallel ranks stay bitwise equal).
//!
//! What it does not own: which products come here (`matmul` routes large
//! f32 products on AVX2 machines, see [`LARGE_MACS`]; AVX-512 machines keep
//! `gemm`'s wider kernels, f64 and mixed precision stay on `gemm`),
//! batching and k-splitting (`matmul`).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use rayon::prelude::*;
use std::cell::RefCell;
use std::thread::LocalKey;

/// Rows of the microkernel's tile.
const MR: usize = 6;
/// Columns of the microkernel's tile (two 8-lane vectors).
const NR: usize = 16;
/// Contraction block: a `KC x NR` B panel (16 KB) stays in L1.
const KC: usize = 256;
/// Row block: an `MC x KC` packed A block (120 KB) stays in L2.
const MC: usize = 120;
/// Column block: a `KC x NC` packed B block (3 MB) stays in L3.
const NC: usize = 3072;

/// Products at least this large (multiply-adds), with at least
/// [`LARGE_SIDE`] rows and columns, come here; smaller ones stay on `gemm`.
/// Measured side by side on Zen 3 (2 threads): ours takes 0.73-0.87x
/// gemm's time from 2048x1024x256 and 1024^3 up, about the same at 512^3,
/// and 1.05-1.8x below (its packing does not pay off on a small product).
pub(super) const LARGE_MACS: usize = 1 << 27;
/// See [`LARGE_MACS`].
pub(super) const LARGE_SIDE: usize = 256;

/// Whether this module's kernel is the one to use here: AVX2 and FMA, and
/// no AVX-512 (where `gemm`'s 16-lane kernels are faster than 8-lane ones).
pub(super) fn preferred() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && !is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// An operand: its base pointer and the strides of its rows and columns.
#[derive(Clone, Copy)]
pub(super) struct Operand {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}

impl Operand {
    /// The operand at `ptr` with row stride `rs` and column stride `cs`.
    pub(super) fn new(ptr: *const f32, rs: isize, cs: isize) -> Operand {
        Operand { ptr, rs, cs }
    }
}

/// A pointer shared with the tasks that write disjoint parts of it.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
impl Shared {
    /// The element `offset` past the base (a method, so closures capture
    /// the whole `Shared`, not its raw field).
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

// SAFETY: tasks write disjoint tiles of C (see `sgemm`).
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}
// SAFETY: operands are only read.
unsafe impl Send for Operand {}
// SAFETY: as above.
unsafe impl Sync for Operand {}

/// `c[m x n] (row-major, row stride ldc) = op(a)[m x k] op(b)[k x n]`,
/// over the rayon pool when `parallel`.
///
/// `epilogue(r0, r1)`, when given, is called once for every block of rows
/// `r0..r1` right after those rows are final, by the task that finished
/// them (while they are in its cache); the blocks cover `0..m` exactly.
/// That needs every task to own whole rows (one column block, no column
/// split); otherwise it is not called and the result says so.
///
/// # Safety
/// [`preferred`] returned true; `a` and `b` address `m x k` and `k x n`
/// elements through their strides; `c` holds `m` rows of `ldc >= n`
/// elements and overlaps neither.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: Operand,
    b: Operand,
    c: *mut f32,
    ldc: usize,
    parallel: bool,
    epilogue: Option<&(dyn Fn(usize, usize) + Sync)>,
) -> bool {
    // SAFETY: the caller's contract (see above) covers every pointer formed here.
    unsafe {
        if m == 0 || n == 0 || k == 0 {
            for i in 0..m {
                std::slice::from_raw_parts_mut(c.add(i * ldc), n).fill(0.0);
            }
            if let Some(e) = epilogue.filter(|_| m > 0) {
                e(0, m);
            }
            return true;
        }
        let c = Shared(c);
        let threads = if parallel {
            rayon::current_num_threads()
        } else {
            1
        };
        // Row blocks of whole MR panels, as many as an even share over the
        // threads needs (a count that is a multiple of the thread count,
        // sizes differing by at most one panel: nine blocks of 120 rows on
        // two threads left one thread idle for a ninth of every product);
        // the columns split too when the rows alone give fewer than two
        // tasks per thread.
        let row_panels = m.div_ceil(MR);
        let blocks = row_panels
            .div_ceil(MC / MR)
            .next_multiple_of(threads)
            .min(row_panels);
        // Every task owns whole rows: one column block, no column split
        // (the same in every column block, so the first one decides).
        let whole_rows = n <= NC && (2 * threads).div_ceil(blocks) <= 1;
        let bpack_len = KC * NC.min(n.next_multiple_of(NR));
        with_scratch(&B_PACK, bpack_len, |bpack| {
            for jc in (0..n).step_by(NC) {
                let nc = NC.min(n - jc);
                let panels = nc.div_ceil(NR);
                for pc in (0..k).step_by(KC) {
                    let kc = KC.min(k - pc);
                    let bp = &mut bpack[..panels * kc * NR];
                    let pack_panel = |(j, dst): (usize, &mut [f32])| {
                        pack_b(b, pc, kc, jc + j * NR, NR.min(nc - j * NR), dst)
                    };
                    if threads > 1 && kc * nc >= 1 << 16 {
                        bp.par_chunks_mut(kc * NR).enumerate().for_each(pack_panel);
                    } else {
                        bp.chunks_mut(kc * NR).enumerate().for_each(pack_panel);
                    }
                    let bp: &[f32] = bp;
                    let groups = (2 * threads).div_ceil(blocks).clamp(1, panels);
                    let per_group = panels.div_ceil(groups);
                    let rows_done = epilogue.filter(|_| whole_rows && pc + kc == k);
                    let task = |t: usize| {
                        let (ib, g) = (t / groups, t % groups);
                        let (p0, p1) = (ib * row_panels / blocks, (ib + 1) * row_panels / blocks);
                        let (ic, mc) = (p0 * MR, (p1 * MR).min(m) - p0 * MR);
                        let (j0, j1) = (g * per_group, ((g + 1) * per_group).min(panels));
                        if j0 >= j1 || mc == 0 {
                            return;
                        }
                        with_scratch(&A_PACK, mc.div_ceil(MR) * MR * kc, |ap| {
                            for (i, dst) in ap.chunks_mut(kc * MR).enumerate() {
                                pack_a(a, ic + i * MR, MR.min(mc - i * MR), pc, kc, dst);
                            }
                            for j in j0..j1 {
                                let (col, nr) = (jc + j * NR, NR.min(nc - j * NR));
                                let bpanel = bp[j * kc * NR..].as_ptr();
                                for (i, apanel) in ap.chunks(kc * MR).enumerate() {
                                    let (row, mr) = (ic + i * MR, MR.min(mc - i * MR));
                                    let tile = c.at(row * ldc + col);
                                    kernel(kc, apanel.as_ptr(), bpanel, tile, ldc, pc > 0, mr, nr);
                                }
                            }
                        });
                        if let Some(e) = rows_done {
                            e(ic, ic + mc);
                        }
                    };
                    let tasks = blocks * groups;
                    if threads > 1 && tasks > 1 {
                        (0..tasks).into_par_iter().for_each(task);
                    } else {
                        (0..tasks).for_each(task);
                    }
                }
            }
        });
        epilogue.is_some() && whole_rows
    }
}

thread_local! {
    /// This thread's packed B block, kept between products instead of a
    /// fresh, zeroed allocation (up to 3 MB) per product.
    static B_PACK: RefCell<AlignedBuf> = const { RefCell::new(AlignedBuf::empty()) };
    /// This thread's packed A block, kept likewise.
    static A_PACK: RefCell<AlignedBuf> = const { RefCell::new(AlignedBuf::empty()) };
}

/// `f` on `len` elements of this thread's buffer `key` (contents
/// unspecified: every caller packs before it reads). A thread that
/// re-enters while its buffer is lent (a rayon worker that, waiting on one
/// product's tasks, runs a task that starts another product) gets a
/// buffer of its own for that call.
fn with_scratch<R>(
    key: &'static LocalKey<RefCell<AlignedBuf>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => f(buf.slice(len)),
        Err(_) => f(AlignedBuf::empty().slice(len)),
    })
}

/// A 32-byte aligned scratch buffer (packed panels are read by aligned
/// vector loads) that grows to the largest length asked of it.
struct AlignedBuf {
    data: Vec<f32>,
    offset: usize,
}

impl AlignedBuf {
    const fn empty() -> AlignedBuf {
        AlignedBuf {
            data: Vec::new(),
            offset: 0,
        }
    }

    fn slice(&mut self, len: usize) -> &mut [f32] {
        if self.data.len() < self.offset + len {
            self.data = vec![0.0f32; len + 8];
            self.offset = self.data.as_ptr().align_offset(32).min(8);
        }
        &mut self.data[self.offset..self.offset + len]
    }
}

/// Rows `row..row+mr` of A, columns `pc..pc+kc`, as one `MR`-tall panel:
/// for each p, `MR` values (zero past `mr`).
unsafe fn pack_a(a: Operand, row: usize, mr: usize, pc: usize, kc: usize, dst: &mut [f32]) {
    // SAFETY: `a` addresses the rows and columns read (the caller's contract).
    unsafe {
        for p in 0..kc {
            let out = &mut dst[p * MR..(p + 1) * MR];
            let col = a.ptr.offset((pc + p) as isize * a.cs);
            for (i, o) in out.iter_mut().enumerate() {
                *o = if i < mr {
                    *col.offset((row + i) as isize * a.rs)
                } else {
                    0.0
                };
            }
        }
    }
}

/// Rows `pc..pc+kc` of B, columns `col..col+nr`, as one `NR`-wide panel:
/// for each p, `NR` values (zero past `nr`).
unsafe fn pack_b(b: Operand, pc: usize, kc: usize, col: usize, nr: usize, dst: &mut [f32]) {
    // SAFETY: `b` addresses the rows and columns read (the caller's contract).
    unsafe {
        if b.rs == 1 {
            // A transposed B: each column is contiguous along p, so read
            // column by column (the panel being written is in L1).
            dst[..kc * NR].fill(0.0);
            for j in 0..nr {
                let column = b.ptr.offset((col + j) as isize * b.cs + pc as isize);
                for p in 0..kc {
                    dst[p * NR + j] = *column.add(p);
                }
            }
            return;
        }
        for p in 0..kc {
            let out = &mut dst[p * NR..(p + 1) * NR];
            let row = b.ptr.offset((pc + p) as isize * b.rs);
            if b.cs == 1 && nr == NR {
                out.copy_from_slice(std::slice::from_raw_parts(row.add(col), NR));
                continue;
            }
            for (j, o) in out.iter_mut().enumerate() {
                *o = if j < nr {
                    *row.offset((col + j) as isize * b.cs)
                } else {
                    0.0
                };
            }
        }
    }
}

/// The `mr x nr` tile at `c` (row stride `ldc`) = (or += when
/// `accumulate`) the product of an A panel and a B panel over `kc`.
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    mr: usize,
    nr: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `preferred` checked AVX2 and FMA; the pointers are the
        // caller's (panels of `kc` steps, a tile of `mr x nr` at `c`).
        unsafe { kernel_avx2(kc, a, b, c, ldc, accumulate, mr, nr) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        unreachable!("sgemm runs only where `preferred` (x86_64 AVX2)")
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel_avx2(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    mr: usize,
    nr: usize,
) {
    // SAFETY: the panels hold `kc` steps of MR and NR values (B's 32-byte aligned); the tile at `c` has `mr` rows of `nr` live elements.
    unsafe {
        // Twelve named accumulators, A broadcast two rows at a time, and
        // the B panel prefetched eight steps ahead: measured 92 GFLOPS on
        // one Zen 3 core from L1, against 70 for the same loop over an
        // accumulator array (which LLVM schedules one row at a time).
        // The C tile's rows are `ldc` apart (4 KB at n = 1024: one cache
        // set), so its loads miss; ask for them now, to land while the
        // loop below runs.
        for i in 0..mr {
            _mm_prefetch(c.wrapping_add(i * ldc) as *const i8, _MM_HINT_T0);
            _mm_prefetch(c.wrapping_add(i * ldc + nr - 1) as *const i8, _MM_HINT_T0);
        }
        let z = _mm256_setzero_ps();
        let (mut c00, mut c01, mut c10, mut c11, mut c20, mut c21) = (z, z, z, z, z, z);
        let (mut c30, mut c31, mut c40, mut c41, mut c50, mut c51) = (z, z, z, z, z, z);
        let (mut ap, mut bp) = (a, b);
        for _ in 0..kc {
            let b0 = _mm256_load_ps(bp);
            let b1 = _mm256_load_ps(bp.add(8));
            _mm_prefetch(bp.wrapping_add(8 * NR) as *const i8, _MM_HINT_T0);
            let a0 = _mm256_broadcast_ss(&*ap);
            let a1 = _mm256_broadcast_ss(&*ap.add(1));
            c00 = _mm256_fmadd_ps(a0, b0, c00);
            c01 = _mm256_fmadd_ps(a0, b1, c01);
            c10 = _mm256_fmadd_ps(a1, b0, c10);
            c11 = _mm256_fmadd_ps(a1, b1, c11);
            let a0 = _mm256_broadcast_ss(&*ap.add(2));
            let a1 = _mm256_broadcast_ss(&*ap.add(3));
            c20 = _mm256_fmadd_ps(a0, b0, c20);
            c21 = _mm256_fmadd_ps(a0, b1, c21);
            c30 = _mm256_fmadd_ps(a1, b0, c30);
            c31 = _mm256_fmadd_ps(a1, b1, c31);
            let a0 = _mm256_broadcast_ss(&*ap.add(4));
            let a1 = _mm256_broadcast_ss(&*ap.add(5));
            c40 = _mm256_fmadd_ps(a0, b0, c40);
            c41 = _mm256_fmadd_ps(a0, b1, c41);
            c50 = _mm256_fmadd_ps(a1, b0, c50);
            c51 = _mm256_fmadd_ps(a1, b1, c51);
            ap = ap.add(MR);
            bp = bp.add(NR);
        }
        let acc = [
            [c00, c01],
            [c10, c11],
            [c20, c21],
            [c30, c31],
            [c40, c41],
            [c50, c51],
        ];
        if mr == MR && nr == NR {
            for (i, row) in acc.iter().enumerate() {
                let dst = c.add(i * ldc);
                let (mut lo, mut hi) = (row[0], row[1]);
                if accumulate {
                    lo = _mm256_add_ps(lo, _mm256_loadu_ps(dst));
                    hi = _mm256_add_ps(hi, _mm256_loadu_ps(dst.add(8)));
                }
                _mm256_storeu_ps(dst, lo);
                _mm256_storeu_ps(dst.add(8), hi);
            }
            return;
        }
        // An edge tile: through a full-size scratch tile, then its live part.
        let mut tile = [0.0f32; MR * NR];
        for (i, row) in acc.iter().enumerate() {
            _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR), row[0]);
            _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR + 8), row[1]);
        }
        for i in 0..mr {
            let dst = std::slice::from_raw_parts_mut(c.add(i * ldc), nr);
            let src = &tile[i * NR..i * NR + nr];
            if accumulate {
                dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
            } else {
                dst.copy_from_slice(src);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The product in f64 by the textbook triple loop.
    fn reference(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        ta: bool,
        b: &[f32],
        tb: bool,
    ) -> Vec<f64> {
        let at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] } as f64;
        let bt = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] } as f64;
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
            }
        }
        c
    }

    fn run(m: usize, n: usize, k: usize, ta: bool, tb: bool, parallel: bool, seed: u32) {
        let val = |i: usize| {
            (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0 - 1.0
        };
        let a: Vec<f32> = (0..m * k).map(val).collect();
        let b: Vec<f32> = (0..k * n).map(|i| val(i + 7919)).collect();
        let (a_rs, a_cs) = if ta { (1, m as isize) } else { (k as isize, 1) };
        let (b_rs, b_cs) = if tb { (1, k as isize) } else { (n as isize, 1) };
        let ldc = n + 3;
        let mut c = vec![f32::NAN; m * ldc];
        // SAFETY: the operands hold m*k and k*n elements under these
        // strides, and c holds m rows of ldc.
        unsafe {
            sgemm(
                m,
                n,
                k,
                Operand {
                    ptr: a.as_ptr(),
                    rs: a_rs,
                    cs: a_cs,
                },
                Operand {
                    ptr: b.as_ptr(),
                    rs: b_rs,
                    cs: b_cs,
                },
                c.as_mut_ptr(),
                ldc,
                parallel,
                None,
            )
        };
        let want = reference(m, n, k, &a, ta, &b, tb);
        for i in 0..m {
            for j in 0..n {
                let (g, w) = (c[i * ldc + j] as f64, want[i * n + j]);
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + k as f64),
                    "[{i},{j}] of {m}x{n}x{k} ta={ta} tb={tb}: {g} vs {w}"
                );
            }
            // The padding past n is never written.
            assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|x| x.is_nan()));
        }
    }

    #[test]
    fn blocked_products_equal_the_triple_loop_across_block_edges() {
        if !preferred() {
            println!("skipped: no AVX2+FMA (or AVX-512 present): this kernel is not used here");
            return;
        }
        // Edges of every block: MR, NR, KC, MC and a product over two KC
        // blocks and two row blocks.
        for &(m, n, k) in &[
            (1, 1, 1),
            (6, 16, 256),
            (7, 17, 257),
            (121, 33, 513),
            (5, 3, 2),
            (240, 48, 300),
        ] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                run(m, n, k, ta, tb, true, 1);
            }
        }
        run(64, 64, 0, false, false, true, 2);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn any_shape_equals_the_triple_loop(m in 1usize..80, n in 1usize..80, k in 1usize..300, ta: bool, tb: bool, parallel: bool, seed: u32) {
            if preferred() {
                run(m, n, k, ta, tb, parallel, seed);
            }
        }
    }

    #[test]
    fn the_result_does_not_depend_on_the_thread_count() {
        if !preferred() {
            println!("skipped: no AVX2+FMA (or AVX-512 present)");
            return;
        }
        let (m, n, k) = (250, 130, 600);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37) % 101) as f32 * 0.013 - 0.6)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 53) % 97) as f32 * 0.017 - 0.8)
            .collect();
        let product = |parallel: bool| {
            let mut c = vec![0.0f32; m * n];
            // SAFETY: shapes as declared.
            unsafe {
                sgemm(
                    m,
                    n,
                    k,
                    Operand {
                        ptr: a.as_ptr(),
                        rs: k as isize,
                        cs: 1,
                    },
                    Operand {
                        ptr: b.as_ptr(),
                        rs: n as isize,
                        cs: 1,
                    },
                    c.as_mut_ptr(),
                    n,
                    parallel,
                    None,
                )
            };
            c
        };
        let (one, many) = (product(false), product(true));
        assert!(one
            .iter()
            .zip(&many)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}
