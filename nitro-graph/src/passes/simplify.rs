//! Algebraic simplification: identities exact for every input, ±0 and NaN
//! included (`x + -0.0`, `x - +0.0`, integer `x+0`, `x*1`, `x/1`, `--x`,
//! `stop_gradient(x)`),
//! no-op movement (reshape/broadcast to the same shape, identity permute,
//! cast to the same dtype), collapsed chains (reshape∘reshape,
//! permute∘permute), and transposes folded into matmul flags.

use super::rewrite::{rebuild, Decision};
use super::Pass;
use crate::fusion::fill_value;
use crate::ir::{BinaryOp, Graph, Node, Op, UnaryOp};

/// Algebraic simplification.
pub struct Simplify;

fn is_const(g: &Graph, n: usize, v: f64) -> bool {
    fill_value(g, n) == Some(v)
}

/// Whether `n` is the additive identity of its dtype: -0.0 for floats (x +
/// +0.0 turns x = -0.0 into +0.0), 0 for integers.
fn is_add_identity(g: &Graph, n: usize) -> bool {
    match fill_value(g, n) {
        Some(v) if g.nodes[n].spec.dtype.is_float() => v == 0.0 && v.is_sign_negative(),
        Some(v) => v == 0.0,
        None => false,
    }
}

/// Whether `x - n == x` for every x: +0.0 for floats, 0 for integers.
fn is_sub_identity(g: &Graph, n: usize) -> bool {
    match fill_value(g, n) {
        Some(v) if g.nodes[n].spec.dtype.is_float() => v == 0.0 && v.is_sign_positive(),
        Some(v) => v == 0.0,
        None => false,
    }
}

/// Whether `perm` swaps exactly the last two axes.
fn is_last_two_swap(perm: &[usize]) -> bool {
    let r = perm.len();
    r >= 2 && perm[r - 2] == r - 1 && perm[r - 1] == r - 2 && (0..r - 2).all(|i| perm[i] == i)
}

fn rule(g: &Graph, node: &Node) -> Decision {
    let arg = |i: usize| node.args[i];
    let arg_node = |i: usize| &g.nodes[node.args[i]];
    let same_as = |i: usize| arg_node(i).spec == node.spec;
    match &node.op {
        Op::Binary(BinaryOp::Add) if is_add_identity(g, arg(1)) && same_as(0) => {
            Decision::Forward(arg(0))
        }
        Op::Binary(BinaryOp::Add) if is_add_identity(g, arg(0)) && same_as(1) => {
            Decision::Forward(arg(1))
        }
        Op::Binary(BinaryOp::Sub) if is_sub_identity(g, arg(1)) && same_as(0) => {
            Decision::Forward(arg(0))
        }
        Op::Binary(BinaryOp::Mul) if is_const(g, arg(1), 1.0) && same_as(0) => {
            Decision::Forward(arg(0))
        }
        Op::Binary(BinaryOp::Mul) if is_const(g, arg(0), 1.0) && same_as(1) => {
            Decision::Forward(arg(1))
        }
        Op::Binary(BinaryOp::Div) if is_const(g, arg(1), 1.0) && same_as(0) => {
            Decision::Forward(arg(0))
        }
        // Its only job (blocking the adjoint) is done once autodiff has
        // walked the graph, which happens while tracing.
        Op::Unary(UnaryOp::StopGradient) => Decision::Forward(arg(0)),
        Op::Unary(UnaryOp::Neg) if matches!(arg_node(0).op, Op::Unary(UnaryOp::Neg)) => {
            Decision::Forward(arg_node(0).args[0])
        }
        Op::Reshape { .. } | Op::Broadcast { .. } | Op::Cast { .. } if same_as(0) => {
            Decision::Forward(arg(0))
        }
        Op::Reshape { shape } if matches!(arg_node(0).op, Op::Reshape { .. }) => {
            let inner = arg_node(0).args[0];
            if g.nodes[inner].spec.shape == *shape {
                Decision::Forward(inner)
            } else {
                Decision::Replace(Node {
                    op: node.op.clone(),
                    args: vec![inner],
                    spec: node.spec.clone(),
                })
            }
        }
        Op::Permute { perm } if perm.iter().enumerate().all(|(i, &p)| i == p) => {
            Decision::Forward(arg(0))
        }
        Op::Permute { perm } => match &arg_node(0).op {
            Op::Permute { perm: inner } => {
                let composed: Vec<usize> = perm.iter().map(|&p| inner[p]).collect();
                let src = arg_node(0).args[0];
                if composed.iter().enumerate().all(|(i, &p)| i == p) {
                    Decision::Forward(src)
                } else {
                    Decision::Replace(Node {
                        op: Op::Permute { perm: composed },
                        args: vec![src],
                        spec: node.spec.clone(),
                    })
                }
            }
            _ => Decision::Keep,
        },
        Op::MatMul { ta, tb } => {
            let flip = |i: usize| match &arg_node(i).op {
                Op::Permute { perm } if is_last_two_swap(perm) => Some(arg_node(i).args[0]),
                _ => None,
            };
            match (flip(0), flip(1)) {
                (None, None) => Decision::Keep,
                (fa, fb) => Decision::Replace(Node {
                    op: Op::MatMul {
                        ta: *ta ^ fa.is_some(),
                        tb: *tb ^ fb.is_some(),
                    },
                    args: vec![fa.unwrap_or(arg(0)), fb.unwrap_or(arg(1))],
                    spec: node.spec.clone(),
                }),
            }
        }
        _ => Decision::Keep,
    }
}

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, graph: &mut Graph) -> bool {
        rebuild(graph, rule)
    }
}
