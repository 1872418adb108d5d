//! Pairs of float binary ops in one pass over the chunk. Each instruction
//! of the chunk loop is a pass that loads its operands from L1 and stores
//! its result there; on a long elementwise chain (an Adam update: ~14 ops)
//! those loads and stores, not the arithmetic, set the time. An `add`,
//! `sub` or `mul` whose operand is the only use of an `add`, `sub`, `mul`
//! or `div` computes both in one loop (`m * b1 + g * c1` is two passes, not
//! three). The pair rounds after each op, as two passes do: Rust never
//! contracts `x * y + z` into a fused multiply-add, so results are bit
//! for bit those of the unpaired loops.
//!
//! Also here: exact GELU and its derivative of one register as one
//! instruction ([`gelu_pairs`]), their shared erf evaluated once.

use super::chunk::Instr;
use super::regs::{Class, Reg, Val};
use crate::ir::{BinaryOp, UnaryOp};
use crate::semantics as sem;

/// Ops that may be the inner (first computed) half of a pair.
fn inner_ok(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div
    )
}

/// Ops that may be the outer half.
fn outer_ok(op: BinaryOp) -> bool {
    matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul)
}

/// The registers an instruction reads.
fn reads(i: &Instr) -> Vec<usize> {
    match i {
        Instr::Load { .. } | Instr::Fill { .. } | Instr::Iota { .. } => vec![],
        Instr::Random { key, .. } => vec![*key],
        Instr::Unary { a, .. } | Instr::Cast { a, .. } | Instr::GeluBoth { a, .. } => vec![*a],
        Instr::Binary { a, b, .. } | Instr::Compare { a, b, .. } => vec![*a, *b],
        Instr::Select { c, a, b, .. } => vec![*c, *a, *b],
        Instr::Pair { a, b, c, .. } => vec![*a, *b, *c],
    }
}

/// Rewrite `compute` (instructions in order, each register written once)
/// so that a float binary op reading the single-use result of another
/// becomes one [`Instr::Pair`]; `kept` are the registers read after the
/// instructions (stores and tails), which must still be computed.
pub(super) fn fuse_pairs(compute: Vec<Instr>, classes: &[Class], kept: &[usize]) -> Vec<Instr> {
    let mut uses = vec![0usize; classes.len()];
    for r in compute.iter().flat_map(reads).chain(kept.iter().copied()) {
        uses[r] += 1;
    }
    // The binary instruction (index) writing each register, while unpaired.
    let mut inner_at: Vec<Option<usize>> = vec![None; classes.len()];
    let mut out: Vec<Option<Instr>> = Vec::with_capacity(compute.len());
    let float = |r: usize| matches!(classes[r], Class::F32 | Class::F64);
    for instr in compute {
        let fused = match &instr {
            Instr::Binary { dst, op, a, b } if outer_ok(*op) && float(*dst) => {
                // The operand that is an unpaired inner op's only use, the
                // other operand, and whether the inner result is on the right.
                [(*a, *b, false), (*b, *a, true)]
                    .into_iter()
                    .find(|&(r, _, _)| uses[r] == 1 && inner_at[r].is_some())
                    .and_then(|(from, c, swap)| {
                        let at = inner_at[from].take()?;
                        let Some(Instr::Binary {
                            op: inner,
                            a: x,
                            b: y,
                            ..
                        }) = out[at].take()
                        else {
                            unreachable!("inner_at names binary instructions")
                        };
                        Some(Instr::Pair {
                            dst: *dst,
                            inner,
                            outer: *op,
                            a: x,
                            b: y,
                            c,
                            swap,
                        })
                    })
            }
            _ => None,
        };
        let instr = fused.unwrap_or(instr);
        if let Instr::Binary { dst, op, .. } = &instr {
            if inner_ok(*op) && float(*dst) {
                inner_at[*dst] = Some(out.len());
            }
        }
        out.push(Some(instr));
    }
    out.into_iter().flatten().collect()
}

/// `d = outer(inner(a, b), c)` (or `outer(c, inner(a, b))` with `swap`)
/// over one chunk.
#[inline(always)]
pub(super) fn pair(
    inner: BinaryOp,
    outer: BinaryOp,
    swap: bool,
    d: &mut Reg,
    [a, b, c]: [Val<'_>; 3],
    len: usize,
) {
    macro_rules! pick {
        ($op:expr, $OP:ident, [$($v:ident),*] => $body:expr) => {
            match $op {
                $(BinaryOp::$v => {
                    const $OP: BinaryOp = BinaryOp::$v;
                    $body
                })*
                other => unreachable!("{other:?} is never paired"),
            }
        };
    }
    macro_rules! run {
        ($d:expr, $a:expr, $b:expr, $c:expr) => {{
            let (d, a, b, c) = (&mut $d[..len], &$a[..len], &$b[..len], &$c[..len]);
            pick!(inner, I, [Add, Sub, Mul, Div] => pick!(outer, O, [Add, Sub, Mul] => {
                let it = d.iter_mut().zip(a).zip(b).zip(c);
                if swap {
                    for (((o, &x), &y), &z) in it {
                        *o = sem::float_binary(O, z, sem::float_binary(I, x, y));
                    }
                } else {
                    for (((o, &x), &y), &z) in it {
                        *o = sem::float_binary(O, sem::float_binary(I, x, y), z);
                    }
                }
            }))
        }};
    }
    match (d, a, b, c) {
        (Reg::F32(d), Val::F32(a), Val::F32(b), Val::F32(c)) => run!(d, a, b, c),
        (Reg::F64(d), Val::F64(a), Val::F64(b), Val::F64(c)) => run!(d, a, b, c),
        _ => unreachable!("pairs are float ops on one class"),
    }
}

/// Rewrite `compute` so that exact GELU and its derivative of the same
/// register become one [`Instr::GeluBoth`] at the first one's place (the
/// forward of a training step keeps both: the derivative for the backward):
/// the erf, most of either op's cost, is evaluated once instead of twice.
/// Moving the second earlier is safe: it reads only the register both read,
/// written before the first.
pub(super) fn gelu_pairs(compute: Vec<Instr>) -> Vec<Instr> {
    let unary = |i: &Instr, want: UnaryOp| match i {
        Instr::Unary { dst, op, a } if *op == want => Some((*dst, *a)),
        _ => None,
    };
    let mut out: Vec<Option<Instr>> = compute.into_iter().map(Some).collect();
    for i in 0..out.len() {
        let Some((gelu, a)) = out[i].as_ref().and_then(|x| unary(x, UnaryOp::Gelu)) else {
            continue;
        };
        let grad_at = (0..out.len()).find(|&j| {
            out[j]
                .as_ref()
                .and_then(|x| unary(x, UnaryOp::GeluGrad))
                .is_some_and(|(_, b)| b == a)
        });
        if let Some(j) = grad_at {
            let Some((grad, _)) = out[j].take().and_then(|x| unary(&x, UnaryOp::GeluGrad)) else {
                unreachable!("found above")
            };
            let first = i.min(j);
            out[i] = None;
            out[first] = Some(Instr::GeluBoth { gelu, grad, a });
        }
    }
    out.into_iter().flatten().collect()
}
