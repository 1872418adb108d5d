//! Whole-group kernels: a fused group whose register program is a known
//! long chain runs as one loop that keeps every temporary in vector
//! registers, instead of one pass over the chunk per instruction. Today the
//! one chain is the Adam(W) update of `nn::optim::adam`, alone (nitro-graph's
//! `AdamStep`) or under the finite-loss guard nitro-run wraps around every
//! update (each output a `select` on one scalar flag between the new and
//! the old value).
//!
//! Why: each chunk-loop instruction loads its operands from L1 and stores
//! its result there. On the update (8 instructions after pairing, 3
//! outputs, 4 streamed inputs) those loads and stores set the time: a
//! 262k-element update ran 2.5-3x slower in L1 and ~1.6x slower from
//! memory than one register-resident loop (Intel Xeon, AVX-512, 2 threads).
//!
//! Exactness: the loop computes the instructions it replaces, op for op,
//! in their operand order, each rounded as the instruction rounds (Rust
//! never contracts `a * b + c` into a fused multiply-add), so every result
//! is bit for bit the chunk loop's (tested against it in `tests`).
//!
//! Matching is structural and exact ([`recognize`]): the group's compute
//! instructions must be the template's, step for step, each operand a
//! scalar (a register filled once per task), a contiguous view of an input,
//! or an earlier step's result, bound consistently; every stored register
//! is one of the template's results, stored in the register's own dtype.
//! Anything else (a reordered trace, gradient clipping fused into the
//! group, a half-precision parameter) runs on the chunk loop unchanged;
//! tests count the matched kernels of both step builders, so a drift of the
//! trace is seen there, not as a slowdown.

use super::chunk::Instr;
use super::regs::{Class, Reg, View};
use crate::backend::cpu::raw::Raw;
use crate::fusion::Access;
use crate::ir::{BinaryOp, UnaryOp};
use nitro_device::DType;
use BinaryOp::{Add, Div, Mul, Sub};

/// An operand of a template step: scalar leaf `S(i)`, streamed input leaf
/// `V(i)`, or the result of step `T(j)`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Arg {
    S(usize),
    V(usize),
    T(usize),
}
use Arg::{S, T, V};

/// One template step, mirroring the chunk loop's instruction of that shape.
#[derive(Clone, Copy, Debug)]
enum Step {
    Bin(BinaryOp, Arg, Arg),
    /// `outer(inner(a, b), c)` (see `pairs`; the templates have no swap).
    Pair(BinaryOp, BinaryOp, Arg, Arg, Arg),
    Sqrt(Arg),
    /// `if c { a } else { b }` on a scalar flag.
    Select(Arg, Arg, Arg),
}

/// The Adam(W) update as `nn::optim::adam` traces it and the fuser pairs
/// it. Leaves: g = V0, m = V1, v = V2, p = V3; S0 = 1-b1, S1 = b1,
/// S2 = 1-b2, S3 = b2, S4 = 1/sqrt(bc2), S5 = eps, S6 = lr/bc1,
/// S7 = 1-lr*wd (the scalars are computed in a kernel of their own).
const ADAM: [Step; 8] = [
    Step::Bin(Mul, S(0), V(0)),
    Step::Pair(Mul, Add, S(1), V(1), T(0)), // m'
    Step::Pair(Mul, Mul, S(2), V(0), V(0)),
    Step::Pair(Mul, Add, S(3), V(2), T(2)), // v'
    Step::Sqrt(T(3)),
    Step::Pair(Mul, Add, T(4), S(4), S(5)),
    Step::Pair(Div, Mul, T(1), T(5), S(6)),
    Step::Pair(Mul, Sub, V(3), S(7), T(6)), // p'
];
/// The update's results (p', m', v') as steps of [`ADAM`].
const ADAM_RESULTS: [usize; 3] = [7, 1, 3];

/// nitro-run's guard after [`ADAM`]: each result kept only when the flag
/// S8 (the loss is finite) holds, else the old value.
const GUARD: [Step; 3] = [
    Step::Select(S(8), T(7), V(3)),
    Step::Select(S(8), T(1), V(1)),
    Step::Select(S(8), T(3), V(2)),
];
const GUARD_RESULTS: [usize; 3] = [8, 9, 10];

/// A recognised whole-group kernel: where its leaves are, and which update
/// result (0 = p', 1 = m', 2 = v') each kernel output receives.
#[derive(Clone, Debug)]
pub(super) struct Whole {
    class: Class,
    /// Scalar leaves S0..S7 as registers (filled once per task).
    scalars: [usize; 8],
    /// The guard's flag register, when guarded.
    guard: Option<usize>,
    /// Streamed leaves g, m, v, p as input views.
    streams: [View; 4],
    /// Per kernel output, the update result it stores.
    results: [usize; 3],
}

impl Whole {
    /// Short name for listings.
    pub(super) fn name(&self) -> &'static str {
        if self.guard.is_some() {
            "adam+guard"
        } else {
            "adam"
        }
    }
}

/// The whole-group kernel that computes exactly `compute` (the group's
/// instructions after its once-per-task `constants`), if it is one.
/// `views` and `classes` are the kernel's; `stores` its stored registers,
/// `out_dtypes` their outputs' dtypes.
pub(super) fn recognize(
    constants: &[Instr],
    compute: &[Instr],
    views: &[Option<View>],
    classes: &[Class],
    stores: &[usize],
    out_dtypes: &[DType],
) -> Option<Whole> {
    let guarded = match compute.len() {
        8 => false,
        11 => true,
        _ => return None,
    };
    let template = ADAM.iter().chain(if guarded { &GUARD[..] } else { &[] });
    // Registers filled once per task: a fill or a scalar load.
    let scalar = |r: usize| {
        constants.iter().any(|i| match i {
            Instr::Fill { dst, .. } => *dst == r,
            Instr::Load { dst, access, .. } => *dst == r && *access == Access::Scalar,
            _ => false,
        })
    };
    let mut b = Binding::default();
    for (instr, step) in compute.iter().zip(template) {
        let dst = match (instr, *step) {
            (Instr::Binary { dst, op, a, b: y }, Step::Bin(op2, x2, y2)) if *op == op2 => {
                (b.bind(*a, x2, views, &scalar) && b.bind(*y, y2, views, &scalar)).then_some(*dst)
            }
            (
                Instr::Pair {
                    dst,
                    inner,
                    outer,
                    a,
                    b: y,
                    c,
                    swap: false,
                },
                Step::Pair(i2, o2, a2, b2, c2),
            ) if (*inner, *outer) == (i2, o2) => (b.bind(*a, a2, views, &scalar)
                && b.bind(*y, b2, views, &scalar)
                && b.bind(*c, c2, views, &scalar))
            .then_some(*dst),
            (
                Instr::Unary {
                    dst,
                    op: UnaryOp::Sqrt,
                    a,
                },
                Step::Sqrt(a2),
            ) => b.bind(*a, a2, views, &scalar).then_some(*dst),
            (Instr::Select { dst, c, a, b: y }, Step::Select(c2, a2, y2)) => (b
                .bind(*c, c2, views, &scalar)
                && b.bind(*a, a2, views, &scalar)
                && b.bind(*y, y2, views, &scalar))
            .then_some(*dst),
            _ => None,
        }?;
        b.steps.push(dst);
    }
    // One float class throughout, the flag a bool, outputs stored as is.
    let class = classes[b.steps[0]];
    let dtype = match class {
        Class::F32 => DType::F32,
        Class::F64 => DType::F64,
        _ => return None,
    };
    let floats = b.steps.iter().chain(b.scalars[..8].iter().flatten());
    if floats.into_iter().any(|&r| classes[r] != class)
        || b.streams.iter().flatten().any(|&r| classes[r] != class)
        || out_dtypes.iter().any(|&d| d != dtype)
    {
        return None;
    }
    let guard = match (guarded, b.scalars[8]) {
        (true, Some(r)) if classes[r] == Class::Bool => Some(r),
        (false, None) => None,
        _ => return None,
    };
    // Each output is one result, and each result stored exactly once.
    let wanted = if guarded { GUARD_RESULTS } else { ADAM_RESULTS };
    let mut results = [0; 3];
    if stores.len() != 3 {
        return None;
    }
    for (out, &r) in results.iter_mut().zip(stores) {
        *out = wanted.iter().position(|&s| b.steps[s] == r)?;
    }
    if (0..3).any(|k| !results.contains(&k)) {
        return None;
    }
    let mut scalars = [0; 8];
    for (s, r) in scalars.iter_mut().zip(&b.scalars) {
        *s = (*r)?;
    }
    let mut streams = [View { input: 0, start: 0 }; 4];
    for (s, r) in streams.iter_mut().zip(&b.streams) {
        *s = views[(*r)?]?;
    }
    Some(Whole {
        class,
        scalars,
        guard,
        streams,
        results,
    })
}

/// The registers bound to a template's leaves and steps so far.
#[derive(Default)]
struct Binding {
    scalars: [Option<usize>; 9],
    streams: [Option<usize>; 4],
    steps: Vec<usize>,
}

impl Binding {
    /// Bind register `r` to `arg` (consistently with earlier bindings).
    fn bind(
        &mut self,
        r: usize,
        arg: Arg,
        views: &[Option<View>],
        scalar: &dyn Fn(usize) -> bool,
    ) -> bool {
        let (slot, ok) = match arg {
            T(j) => return self.steps.get(j) == Some(&r),
            S(i) => (&mut self.scalars[i], views[r].is_none() && scalar(r)),
            V(i) => (&mut self.streams[i], views[r].is_some()),
        };
        match *slot {
            Some(bound) => bound == r,
            None if ok => {
                *slot = Some(r);
                true
            }
            None => false,
        }
    }
}

/// Lanes per block: one 512-bit vector of f32 (two of f64); a block's
/// temporaries stay in registers.
const LANES: usize = 16;

/// The float operations the update needs, for f32 and f64 alike.
trait Float: Copy + Default {
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

impl Whole {
    /// Elements `start..end` of the group. `regs` hold the scalar leaves
    /// (the constants ran); `inputs` and `outputs` are the kernel's.
    /// Inlined into each `#[target_feature]` build of the chunk loop.
    #[inline(always)]
    pub(super) fn run(
        &self,
        regs: &[Reg],
        inputs: &[Raw],
        outputs: &[Raw],
        start: usize,
        end: usize,
    ) {
        let keep = self.guard.is_none_or(|r| match &regs[r] {
            Reg::Bool(v) => v[0],
            _ => unreachable!("the guard is a bool register"),
        });
        match self.class {
            Class::F32 => {
                self.update::<f32>(regs, inputs, outputs, start, end, keep, |r| match r {
                    Reg::F32(v) => v[0],
                    _ => unreachable!("f32 scalar"),
                })
            }
            Class::F64 => {
                self.update::<f64>(regs, inputs, outputs, start, end, keep, |r| match r {
                    Reg::F64(v) => v[0],
                    _ => unreachable!("f64 scalar"),
                })
            }
            _ => unreachable!("float classes only"),
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn update<F: Float>(
        &self,
        regs: &[Reg],
        inputs: &[Raw],
        outputs: &[Raw],
        start: usize,
        end: usize,
        keep: bool,
        scalar_of: impl Fn(&Reg) -> F,
    ) {
        let s: [F; 8] = self.scalars.map(|r| scalar_of(&regs[r]));
        let [g, m, v, p] = self
            .streams
            .map(|View { input, start }| inputs[input].ptr::<F>().wrapping_add(start) as *const F);
        let outs = [0, 1, 2].map(|k| outputs[k].ptr::<F>());
        let mut i = start;
        while i < end {
            let n = LANES.min(end - i);
            // SAFETY: every stream and output holds the group's `numel`
            // elements from its base (the fuser's contiguous access
            // contract) and `i + n <= end <= numel`. An output may be the
            // very buffer of an input (in-place update), never another
            // range of it (raw.rs); each block reads all its inputs before
            // writing its outputs, as a chunk of the chunk loop does.
            unsafe {
                let (g, m, v, p) = (load(g, i, n), load(m, i, n), load(v, i, n), load(p, i, n));
                let new = if keep {
                    let mut r = [[F::default(); LANES]; 3];
                    for j in 0..LANES {
                        // The steps of ADAM, in its operand order.
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
                for (k, out) in outs.iter().enumerate() {
                    store(*out, i, n, &new[self.results[k]]);
                }
            }
            i += n;
        }
    }
}

/// `n <= LANES` elements from `base + i` (the rest zero).
///
/// # Safety
/// `base + i .. base + i + n` is readable.
#[inline(always)]
unsafe fn load<F: Float>(base: *const F, i: usize, n: usize) -> [F; LANES] {
    // SAFETY: the caller's contract.
    unsafe {
        if n == LANES {
            return std::ptr::read_unaligned(base.add(i) as *const [F; LANES]);
        }
        let mut a = [F::default(); LANES];
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
unsafe fn store<F: Float>(base: *mut F, i: usize, n: usize, vals: &[F; LANES]) {
    // SAFETY: the caller's contract.
    unsafe {
        if n == LANES {
            return std::ptr::write_unaligned(base.add(i) as *mut [F; LANES], *vals);
        }
        for (k, &x) in vals[..n].iter().enumerate() {
            *base.add(i + k) = x;
        }
    }
}
