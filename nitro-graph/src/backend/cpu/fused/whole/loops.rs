//! The register-resident loops of the known chains. Each walks its range
//! in blocks of [`LANES`] elements: a block's inputs are read into local
//! arrays, every step computed on them (the compiler keeps them in vector
//! registers), then its outputs written. Reading a whole block before
//! writing it keeps an output that is the very buffer of an input (an
//! in-place update, the only overlap the memory plan allows) correct, and
//! the fixed-size blocks let the loops vectorise without the runtime alias
//! checks that slices over possibly-equal buffers would need.
//!
//! Every step is the op of the instruction it replaces, in its operand
//! order, rounded as that instruction rounds; all functions are
//! `#[inline(always)]` so they compile inside each `#[target_feature]`
//! build of the chunk loop.

/// Lanes per block: one 512-bit vector of f32 (two of f64).
pub(super) const LANES: usize = 16;

/// The float operations the chains use, for f32 and f64 alike.
pub(super) trait Float: Copy + Default + PartialOrd {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn sqrt(self) -> Self;
}

macro_rules! float {
    ($t:ty) => {
        impl Float for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                self / o
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
        }
    };
}
float!(f32);
float!(f64);

/// `n <= LANES` elements from `base + i` (the rest default).
///
/// # Safety
/// `base + i .. base + i + n` is readable.
#[inline(always)]
unsafe fn load<T: Copy + Default>(base: *const T, i: usize, n: usize) -> [T; LANES] {
    // SAFETY: the caller's contract.
    unsafe {
        if n == LANES {
            return std::ptr::read_unaligned(base.add(i) as *const [T; LANES]);
        }
        let mut a = [T::default(); LANES];
        for (k, x) in a[..n].iter_mut().enumerate() {
            *x = *base.add(i + k);
        }
        a
    }
}

/// Write the first `n <= LANES` of `vals` to `base + i`.
///
/// # Safety
/// `base + i .. base + i + n` is writable and no live reference covers it.
#[inline(always)]
unsafe fn store<T: Copy>(base: *mut T, i: usize, n: usize, vals: &[T; LANES]) {
    // SAFETY: the caller's contract.
    unsafe {
        if n == LANES {
            return std::ptr::write_unaligned(base.add(i) as *mut [T; LANES], *vals);
        }
        for (k, &x) in vals[..n].iter().enumerate() {
            *base.add(i + k) = x;
        }
    }
}

/// The Adam(W) update over elements `start..end` (the steps of
/// `super::ADAM`): scalars `s` (S0..S7), streams g, m, v, p; output `k`
/// receives result `outs[k].1` (0 = p', 1 = m', 2 = v'). With `keep` false
/// (the guard's flag) every result is the old value.
///
/// # Safety
/// Every stream and output holds elements `start..end` from its base; an
/// output is either disjoint from every stream or the very same buffer.
#[inline(always)]
pub(super) unsafe fn adam<F: Float>(
    s: [F; 8],
    keep: bool,
    [g, m, v, p]: [*const F; 4],
    outs: [(*mut F, usize); 3],
    start: usize,
    end: usize,
) {
    let mut i = start;
    while i < end {
        let n = LANES.min(end - i);
        // SAFETY: the caller's contract; a block is read whole before any
        // of it is written.
        unsafe {
            let (g, m, v, p) = (load(g, i, n), load(m, i, n), load(v, i, n), load(p, i, n));
            let new = if keep {
                let mut r = [[F::default(); LANES]; 3];
                for j in 0..LANES {
                    let t0 = s[0].mul(g[j]);
                    let t1 = s[1].mul(m[j]).add(t0);
                    let t2 = s[2].mul(g[j]).mul(g[j]);
                    let t3 = s[3].mul(v[j]).add(t2);
                    let t5 = t3.sqrt().mul(s[4]).add(s[5]);
                    let t6 = t1.div(t5).mul(s[6]);
                    let t7 = p[j].mul(s[7]).sub(t6);
                    (r[0][j], r[1][j], r[2][j]) = (t7, t1, t3);
                }
                r
            } else {
                [p, m, v]
            };
            for (out, result) in outs {
                store(out, i, n, &new[result]);
            }
        }
        i += n;
    }
}

/// Where a bias + ReLU output goes: the sum, the mask or the ReLU (steps
/// 0, 1, 2 of `super::BIAS_RELU`).
#[derive(Clone, Copy)]
pub(super) enum ReluOut<F: Copy> {
    Sum(*mut F),
    Mask(*mut bool),
    Relu(*mut F),
}

/// `t = x + bias[col]`, `t > s`, `if t > s { t } else { s }` over elements
/// `start..end` of a `[rows, cols]` group (`s` is the template's fill,
/// zero for a ReLU), each written where `outs` asks.
///
/// # Safety
/// `x` and every output hold elements `start..end`, `bias` holds `cols`;
/// an output is either disjoint from `x` or the very same buffer.
#[inline(always)]
pub(super) unsafe fn bias_relu<F: Float>(
    x: *const F,
    bias: *const F,
    cols: usize,
    s: F,
    outs: &[ReluOut<F>],
    start: usize,
    end: usize,
) {
    let mut i = start;
    while i < end {
        let col = i % cols;
        // A block never crosses a row, so its bias is contiguous.
        let n = LANES.min(end - i).min(cols - col);
        // SAFETY: the caller's contract; the block is read before written.
        unsafe {
            let (x, b) = (load(x, i, n), load(bias, col, n));
            let mut t = [F::default(); LANES];
            let mut mask = [false; LANES];
            let mut relu = [F::default(); LANES];
            for j in 0..LANES {
                t[j] = x[j].add(b[j]);
                mask[j] = t[j] > s;
                relu[j] = if mask[j] { t[j] } else { s };
            }
            for out in outs {
                match *out {
                    ReluOut::Sum(p) => store(p, i, n, &t),
                    ReluOut::Mask(p) => store(p, i, n, &mask),
                    ReluOut::Relu(p) => store(p, i, n, &relu),
                }
            }
        }
        i += n;
    }
}
