//! Constant folding: elementwise ops, reshapes, broadcasts and reductions
//! of `fill` constants become `fill` constants. Values are computed in the
//! register class of their dtype by the one scalar table
//! ([`crate::semantics`]), exactly as the CPU kernels compute them, then
//! rounded to the node's storage type; a result a `fill` cannot carry
//! exactly (an i64 beyond 2^53) is left unfolded.

use super::rewrite::{rebuild, Decision};
use super::Pass;
use crate::fusion::fill_value;
use crate::ir::{Graph, Node, Op};
use crate::semantics::Scalar;

/// Constant folding.
pub struct ConstantFold;

/// The register value `op` computes from constant arguments, or `None` when
/// the op does not fold (`per_output`: elements summed into each output).
fn eval(op: &Op, a: &[Scalar], per_output: usize) -> Option<Scalar> {
    match op {
        Op::Unary(u) => a[0].unary(*u),
        Op::Binary(b) => a[0].binary(*b, a[1]),
        Op::Compare(c) => a[0].compare(*c, a[1]).map(Scalar::Bool),
        Op::Select => match a[0] {
            Scalar::Bool(c) => Some(if c { a[1] } else { a[2] }),
            _ => None,
        },
        Op::Reshape { .. } | Op::Broadcast { .. } | Op::ReduceMax { .. } => Some(a[0]),
        // A sum of n copies of an integer is its wrapping product with n. A
        // float sum folds only where every partial sum is exact, so that any
        // summation order the kernels use gives the product.
        Op::ReduceSum { .. } => match a[0] {
            Scalar::I32(x) => Some(Scalar::I32(x.wrapping_mul(per_output as i32))),
            Scalar::I64(x) => Some(Scalar::I64(x.wrapping_mul(per_output as i64))),
            _ if per_output == 1 => Some(a[0]),
            Scalar::F32(x) if exact_sum(x as f64, per_output, 24, 127) => {
                Some(Scalar::F32(x * per_output as f32))
            }
            Scalar::F64(x) if exact_sum(x, per_output, 53, 1023) => {
                Some(Scalar::F64(x * per_output as f64))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whether every partial sum `k * x` (k <= n) is exact in a float type of
/// `digits` significand bits and largest exponent `max_exp`: `x` is +0, or a
/// finite normal number whose significand, times `n`, fits in `digits` bits
/// without overflow. (-0 is refused: a sum seeded with +0 gives +0.)
fn exact_sum(x: f64, n: usize, digits: u32, max_exp: i32) -> bool {
    if x == 0.0 {
        return x.is_sign_positive();
    }
    if !x.is_normal() || n == 0 {
        return false;
    }
    let bits = x.abs().to_bits();
    let significand = (bits & ((1u64 << 52) - 1)) | (1u64 << 52);
    let used = 53 - significand.trailing_zeros();
    let n_bits = usize::BITS - n.leading_zeros();
    let top = (x.abs() * n as f64).log2().floor() as i32;
    used + n_bits <= digits && top < max_exp
}

impl Pass for ConstantFold {
    fn name(&self) -> &'static str {
        "constant_fold"
    }

    fn run(&self, graph: &mut Graph) -> bool {
        rebuild(graph, |out, node| {
            let foldable = matches!(
                node.op,
                Op::Unary(_)
                    | Op::Binary(_)
                    | Op::Compare(_)
                    | Op::Select
                    | Op::Cast { .. }
                    | Op::ReduceSum { .. }
                    | Op::ReduceMax { .. }
                    | Op::Reshape { .. }
                    | Op::Broadcast { .. }
            );
            if !foldable || node.args.is_empty() {
                return Decision::Keep;
            }
            let values: Option<Vec<Scalar>> = node
                .args
                .iter()
                .map(|&a| fill_value(out, a).map(|v| Scalar::fill(out.nodes[a].spec.dtype, v)))
                .collect();
            let Some(values) = values else {
                return Decision::Keep;
            };
            let first = &out.nodes[node.args[0]].spec;
            // Reshape/broadcast of a fill is already free; fold only real work.
            if matches!(node.op, Op::Reshape { .. } | Op::Broadcast { .. })
                && matches!(out.nodes[node.args[0]].op, Op::Fill { .. })
                && first.numel() == 1
                && node.spec.numel() != 1
            {
                return Decision::Keep;
            }
            let reduced = first.numel() / node.spec.numel().max(1);
            let value = match &node.op {
                Op::Cast { to } => Some(values[0].cast(*to)),
                op => eval(op, &values, reduced),
            };
            match value.and_then(|v| v.stored(node.spec.dtype)) {
                Some(value) => Decision::Replace(Node {
                    op: Op::Fill {
                        value,
                        shape: node.spec.shape.clone(),
                    },
                    args: vec![],
                    spec: node.spec.clone(),
                }),
                None => Decision::Keep,
            }
        })
    }
}
