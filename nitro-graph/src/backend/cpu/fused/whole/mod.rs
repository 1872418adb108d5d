//! Whole-group kernels: a fused group whose register program is a known
//! chain runs as one loop that keeps every temporary in vector registers
//! (`loops`), instead of one pass over the chunk per instruction. The
//! chains, one table ([`TEMPLATES`]):
//! - the Adam(W) update of `nn::optim::adam`, alone (nitro-graph's
//!   `AdamStep`) or under the finite-loss guard nitro-run wraps around every
//!   update (each output a `select` on one scalar flag between the new and
//!   the old value);
//! - bias + ReLU, a dense layer's epilogue (`relu(x @ w + b)`): the sum,
//!   the mask a backward reads, the activation, any of them stored.
//!
//! Why: each chunk-loop instruction loads its operands from L1 and stores
//! its result there, so on these chains the loads and stores set the time:
//! a 262k-element Adam update ran 2.5-3x slower in L1 and ~1.6x slower from
//! memory than one register-resident loop; the MLP train step took ~9% less
//! time with it (Intel Xeon, AVX-512, 2 threads). A short chain pays less:
//! bias + ReLU took MLP predict from 1.357 to 1.318 ms (medians of 6
//! alternated runs, same machine), within noise in the train steps.
//!
//! Exactness: a loop computes the instructions it replaces, op for op, in
//! their operand order, each rounded as the instruction rounds (Rust never
//! contracts `a * b + c` into a fused multiply-add), so every result is bit
//! for bit the chunk loop's (tested against it in `tests`).
//!
//! Matching ([`recognize`]) is structural and exact: the group's compute
//! instructions must be a template's, step for step, each operand a scalar
//! (a register filled once per task), a contiguous view of an input, a bias
//! row (an input broadcast over rows), or an earlier step's result, bound
//! consistently; the stored registers are the template's results, in their
//! registers' own dtypes. Anything else (a reordered trace,
//! gradient clipping fused into the update, a half-precision output) runs
//! on the chunk loop unchanged; tests count the matched kernels of the step
//! builders, so a drift of the trace shows there, not as a slowdown.

mod loops;
#[cfg(test)]
mod tests;

use super::chunk::Instr;
use super::regs::{Class, Reg, View};
use super::Span;
use crate::fusion::Access;
use crate::ir::{BinaryOp, CmpOp, UnaryOp};
use loops::{Float, ReluOut};
use nitro_device::DType;
use BinaryOp::{Add, Div, Mul, Sub};

/// An operand of a template step: scalar leaf `S(i)`, streamed input leaf
/// `V(i)`, bias-row leaf `R(i)`, or the result of step `T(j)`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Arg {
    S(usize),
    V(usize),
    R(usize),
    T(usize),
}
use Arg::{R, S, T, V};

/// One template step, mirroring the chunk loop's instruction of that shape.
#[derive(Clone, Copy, Debug)]
enum Step {
    Bin(BinaryOp, Arg, Arg),
    /// `outer(inner(a, b), c)` (see `pairs`; the templates have no swap).
    Pair(BinaryOp, BinaryOp, Arg, Arg, Arg),
    Sqrt(Arg),
    Cmp(CmpOp, Arg, Arg),
    /// `if c { a } else { b }`.
    Select(Arg, Arg, Arg),
}

/// Which loop runs a recognised group.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Chain {
    Adam,
    AdamGuarded,
    BiasRelu,
}

/// A known chain: its steps, the steps its outputs store (each at most
/// once, in any order), and whether some of them suffice (else all).
struct Template {
    chain: Chain,
    steps: &'static [Step],
    storable: &'static [usize],
    some_stored: bool,
}

/// The Adam(W) update as `nn::optim::adam` traces it and the fuser pairs
/// it. Leaves: g = V0, m = V1, v = V2, p = V3; S0 = 1-b1, S1 = b1,
/// S2 = 1-b2, S3 = b2, S4 = 1/sqrt(bc2), S5 = eps, S6 = lr/bc1,
/// S7 = 1-lr*wd (those scalars are computed by a kernel of their own);
/// with nitro-run's guard, S8 is the flag "the loss is finite".
const ADAM_GUARDED: [Step; 11] = [
    Step::Bin(Mul, S(0), V(0)),
    Step::Pair(Mul, Add, S(1), V(1), T(0)), // m'
    Step::Pair(Mul, Mul, S(2), V(0), V(0)),
    Step::Pair(Mul, Add, S(3), V(2), T(2)), // v'
    Step::Sqrt(T(3)),
    Step::Pair(Mul, Add, T(4), S(4), S(5)),
    Step::Pair(Div, Mul, T(1), T(5), S(6)),
    Step::Pair(Mul, Sub, V(3), S(7), T(6)), // p'
    Step::Select(S(8), T(7), V(3)),
    Step::Select(S(8), T(1), V(1)),
    Step::Select(S(8), T(3), V(2)),
];

/// `x + bias` (x = V0, the bias row R0), `> s` (S0, the fill 0), select:
/// a dense layer's epilogue `relu(x @ w + b)`.
const BIAS_RELU: [Step; 3] = [
    Step::Bin(Add, V(0), R(0)),
    Step::Cmp(CmpOp::Gt, T(0), S(0)),
    Step::Select(T(1), T(0), S(0)),
];

/// Every known chain. The update's results (p', m', v') come first in
/// `storable`, in the order `loops::adam` numbers them.
const TEMPLATES: [Template; 3] = [
    Template {
        chain: Chain::Adam,
        steps: ADAM_GUARDED.split_at(8).0,
        storable: &[7, 1, 3],
        some_stored: false,
    },
    Template {
        chain: Chain::AdamGuarded,
        steps: &ADAM_GUARDED,
        storable: &[8, 9, 10],
        some_stored: false,
    },
    Template {
        chain: Chain::BiasRelu,
        steps: &BIAS_RELU,
        storable: &[0, 1, 2],
        some_stored: true,
    },
];

/// A bias row: kernel input `input`, element `i` of the group reading its
/// element `i % cols`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Row {
    input: usize,
    cols: usize,
}

/// A recognised whole-group kernel: which chain, where its leaves are, and
/// which template step each kernel output stores.
#[derive(Clone, Debug)]
pub(super) struct Whole {
    chain: Chain,
    class: Class,
    /// Scalar leaves as registers (filled once per task).
    scalars: Vec<usize>,
    streams: Vec<View>,
    rows: Vec<Row>,
    /// Per kernel output, its index in the template's `storable`.
    stored: Vec<usize>,
}

impl Whole {
    /// Short name for listings.
    pub(super) fn name(&self) -> &'static str {
        match self.chain {
            Chain::Adam => "adam",
            Chain::AdamGuarded => "adam+guard",
            Chain::BiasRelu => "bias+relu",
        }
    }
}

/// What a kernel is, as the matcher needs it: its instructions (the
/// once-per-task `constants`, then the rest), register views and classes,
/// stored registers with their outputs' dtypes, and its inputs' dtypes.
pub(super) struct Shape<'a> {
    pub constants: &'a [Instr],
    pub compute: &'a [Instr],
    pub views: &'a [Option<View>],
    pub classes: &'a [Class],
    pub stores: &'a [usize],
    pub out_dtypes: &'a [DType],
    pub in_dtypes: &'a [DType],
}

/// The whole-group kernel that computes exactly what `k`'s instructions
/// compute, if they are a known chain.
pub(super) fn recognize(k: &Shape<'_>) -> Option<Whole> {
    // Leading loads define bias rows; the rest are the template's steps.
    let loads = k
        .compute
        .iter()
        .take_while(|i| matches!(i, Instr::Load { .. }))
        .count();
    let mut rows = vec![];
    for instr in &k.compute[..loads] {
        let Instr::Load { dst, input, access } = instr else {
            unreachable!("counted above")
        };
        rows.push((*dst, row_of(access, *input)?));
    }
    let steps = &k.compute[loads..];
    TEMPLATES
        .iter()
        .filter(|t| t.steps.len() == steps.len())
        .find_map(|t| matched(t, steps, &rows, k))
}

/// A load that reads a row broadcast over the leading axes.
fn row_of(access: &Access, input: usize) -> Option<Row> {
    let Access::Strided { shape, strides } = access else {
        return None;
    };
    let (&cols, lead) = shape.split_last()?;
    let (&last, lead_strides) = strides.split_last()?;
    (last == 1 && lead_strides.iter().all(|&s| s == 0) && lead.len() == lead_strides.len())
        .then_some(Row { input, cols })
}

fn matched(t: &Template, steps: &[Instr], rows: &[(usize, Row)], k: &Shape<'_>) -> Option<Whole> {
    let scalar = |r: usize| {
        k.views[r].is_none()
            && k.constants.iter().any(|i| match i {
                Instr::Fill { dst, .. } => *dst == r,
                Instr::Load { dst, access, .. } => *dst == r && *access == Access::Scalar,
                _ => false,
            })
    };
    let row = |r: usize| rows.iter().find(|(reg, _)| *reg == r).map(|(_, row)| *row);
    let is_row = |r: usize| row(r).is_some();
    let mut b = Binding::default();
    for (instr, step) in steps.iter().zip(t.steps) {
        let mut bind = |r: usize, arg: Arg| b.bind(r, arg, k.views, &scalar, &is_row);
        let dst = match (instr, *step) {
            (Instr::Binary { dst, op, a, b: y }, Step::Bin(op2, a2, y2)) if *op == op2 => {
                (bind(*a, a2) && bind(*y, y2)).then_some(*dst)
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
            ) if (*inner, *outer) == (i2, o2) => {
                (bind(*a, a2) && bind(*y, b2) && bind(*c, c2)).then_some(*dst)
            }
            (
                Instr::Unary {
                    dst,
                    op: UnaryOp::Sqrt,
                    a,
                },
                Step::Sqrt(a2),
            ) => bind(*a, a2).then_some(*dst),
            (Instr::Compare { dst, op, a, b: y }, Step::Cmp(op2, a2, y2)) if *op == op2 => {
                (bind(*a, a2) && bind(*y, y2)).then_some(*dst)
            }
            (Instr::Select { dst, c, a, b: y }, Step::Select(c2, a2, y2)) => {
                (bind(*c, c2) && bind(*a, a2) && bind(*y, y2)).then_some(*dst)
            }
            _ => None,
        }?;
        b.steps.push(dst);
    }
    // The chain's float class (its first step computes in it); outputs are
    // stored in it, no conversion (a half-precision one runs unmatched).
    let class = k.classes[b.steps[0]];
    let dtype = match class {
        Class::F32 => DType::F32,
        Class::F64 => DType::F64,
        _ => return None,
    };
    // Rows are read as stored, so they must be stored in the class.
    let bound_rows: Vec<Row> = b.rows.iter().map(|r| row((*r)?)).collect::<Option<_>>()?;
    if bound_rows.iter().any(|r| k.in_dtypes[r.input] != dtype) {
        return None;
    }
    // Each output a storable step in its register's own dtype (a float in
    // the chain's, a mask as bool), each at most once; all of them unless
    // the template takes `some_stored`.
    let mut stored = vec![];
    for (&r, &d) in k.stores.iter().zip(k.out_dtypes) {
        let at = t.storable.iter().position(|&s| b.steps[s] == r)?;
        let own = match k.classes[r] {
            Class::Bool => DType::Bool,
            c if c == class => dtype,
            _ => return None,
        };
        if d != own || stored.contains(&at) {
            return None;
        }
        stored.push(at);
    }
    if stored.is_empty() || (!t.some_stored && stored.len() != t.storable.len()) {
        return None;
    }
    Some(Whole {
        chain: t.chain,
        class,
        scalars: b.scalars.into_iter().collect::<Option<_>>()?,
        streams: b
            .streams
            .into_iter()
            .map(|r| k.views[r?])
            .collect::<Option<_>>()?,
        rows: bound_rows,
        stored,
    })
}

/// A chain's float type, read from a register filled with one scalar.
trait Scalar: Sized {
    fn of(r: &Reg) -> Self;
}

impl Scalar for f32 {
    #[inline(always)]
    fn of(r: &Reg) -> f32 {
        match r {
            Reg::F32(v) => v[0],
            _ => unreachable!("an f32 scalar"),
        }
    }
}

impl Scalar for f64 {
    #[inline(always)]
    fn of(r: &Reg) -> f64 {
        match r {
            Reg::F64(v) => v[0],
            _ => unreachable!("an f64 scalar"),
        }
    }
}

/// The registers bound to a template's leaves and steps so far.
#[derive(Default)]
struct Binding {
    scalars: Vec<Option<usize>>,
    streams: Vec<Option<usize>>,
    rows: Vec<Option<usize>>,
    steps: Vec<usize>,
}

impl Binding {
    /// Bind register `r` to `arg`, consistently with earlier bindings.
    fn bind(
        &mut self,
        r: usize,
        arg: Arg,
        views: &[Option<View>],
        scalar: &dyn Fn(usize) -> bool,
        row: &dyn Fn(usize) -> bool,
    ) -> bool {
        fn slot(v: &mut Vec<Option<usize>>, i: usize, r: usize, ok: bool) -> bool {
            if v.len() <= i {
                v.resize(i + 1, None);
            }
            match v[i] {
                Some(bound) => bound == r,
                None if ok => {
                    v[i] = Some(r);
                    true
                }
                None => false,
            }
        }
        match arg {
            T(j) => self.steps.get(j) == Some(&r),
            S(i) => slot(&mut self.scalars, i, r, scalar(r)),
            V(i) => slot(&mut self.streams, i, r, views[r].is_some()),
            R(i) => slot(&mut self.rows, i, r, row(r)),
        }
    }
}

impl Whole {
    /// Elements `span.start..span.end` of the group (no tails, so no
    /// scratch). `regs` hold the scalar leaves (the constants ran).
    /// Inlined into each `#[target_feature]` build of the chunk loop.
    #[inline(always)]
    pub(super) fn run(&self, regs: &[Reg], span: Span<'_>) {
        match self.class {
            Class::F32 => self.run_as::<f32>(regs, span),
            Class::F64 => self.run_as::<f64>(regs, span),
            _ => unreachable!("float chains only"),
        }
    }

    #[inline(always)]
    fn run_as<F: Float + Scalar>(&self, regs: &[Reg], span: Span<'_>) {
        let Span {
            inputs,
            outputs,
            start,
            end,
            ..
        } = span;
        let scalar = F::of;
        let stream = |k: usize| {
            let View { input, start } = self.streams[k];
            inputs[input].ptr::<F>().wrapping_add(start) as *const F
        };
        // SAFETY (both calls): streams and outputs hold the group's `numel`
        // elements from their bases (the fuser's contiguous access, the
        // plan's output slots), rows their `cols`, and `end <= numel`; an
        // output overlaps an input only as its very buffer (raw.rs).
        match self.chain {
            Chain::Adam | Chain::AdamGuarded => {
                let mut s = [F::default(); 8];
                for (v, &r) in s.iter_mut().zip(&self.scalars) {
                    *v = scalar(&regs[r]);
                }
                let keep = self.chain == Chain::Adam
                    || match &regs[self.scalars[8]] {
                        Reg::Bool(v) => v[0],
                        _ => unreachable!("the guard is a bool register"),
                    };
                let outs = [0, 1, 2].map(|k| (outputs[k].ptr::<F>(), self.stored[k]));
                let streams = [0, 1, 2, 3].map(stream);
                unsafe { loops::adam(s, keep, streams, outs, start, end) }
            }
            Chain::BiasRelu => {
                // At most the three steps, each once (no allocation per task).
                let mut outs = [ReluOut::Sum(std::ptr::null_mut()); 3];
                for ((o, &step), out) in outs.iter_mut().zip(&self.stored).zip(outputs) {
                    *o = match step {
                        0 => ReluOut::Sum(out.ptr()),
                        1 => ReluOut::Mask(out.ptr()),
                        _ => ReluOut::Relu(out.ptr()),
                    };
                }
                let outs = &outs[..self.stored.len()];
                let Row { input, cols } = self.rows[0];
                let bias = inputs[input].ptr::<F>() as *const F;
                let s = scalar(&regs[self.scalars[0]]);
                unsafe { loops::bias_relu(stream(0), bias, cols, s, outs, start, end) }
            }
        }
    }
}
