//! Constant folding: elementwise ops, reshapes, broadcasts and reductions
//! of `fill` constants become `fill` constants (computed in f64, rounded to
//! the node's dtype).

use super::rewrite::{rebuild, Decision};
use super::Pass;
use crate::fusion::fill_value;
use crate::ir::{BinaryOp, CmpOp, Graph, Node, Op, UnaryOp};
use nitro_device::DType;

/// Constant folding.
pub struct ConstantFold;

fn round_to(d: DType, v: f64) -> f64 {
    match d {
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        DType::I32 => v as i32 as f64,
        DType::I64 => v as i64 as f64,
        DType::U8 => v as u8 as f64,
        DType::Bool => (v != 0.0) as u8 as f64,
        DType::F64 => v,
    }
}

fn eval(op: &Op, a: &[f64], dtype_in: DType, per_output: usize) -> Option<f64> {
    let int = !dtype_in.is_float();
    Some(match op {
        Op::Unary(u) => {
            let x = a[0];
            match u {
                UnaryOp::Neg => -x,
                UnaryOp::Exp => x.exp(),
                UnaryOp::Log => x.ln(),
                UnaryOp::Sqrt => x.sqrt(),
                UnaryOp::Tanh => x.tanh(),
                UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
                UnaryOp::Sin => x.sin(),
                UnaryOp::Cos => x.cos(),
                UnaryOp::Abs => x.abs(),
                UnaryOp::Recip => 1.0 / x,
                UnaryOp::Sign => x.signum() * (x != 0.0) as u8 as f64,
                UnaryOp::Floor => x.floor(),
            }
        }
        Op::Binary(b) => {
            let (x, y) = (a[0], a[1]);
            match b {
                BinaryOp::Add => x + y,
                BinaryOp::Sub => x - y,
                BinaryOp::Mul => x * y,
                BinaryOp::Div if int => {
                    if y == 0.0 {
                        0.0
                    } else {
                        (x / y).trunc()
                    }
                }
                BinaryOp::Div => x / y,
                BinaryOp::Max => x.max(y),
                BinaryOp::Min => x.min(y),
                BinaryOp::Pow => x.powf(y),
            }
        }
        Op::Compare(c) => {
            let (x, y) = (a[0], a[1]);
            (match c {
                CmpOp::Eq => x == y,
                CmpOp::Ne => x != y,
                CmpOp::Lt => x < y,
                CmpOp::Le => x <= y,
                CmpOp::Gt => x > y,
                CmpOp::Ge => x >= y,
            }) as u8 as f64
        }
        Op::Select => {
            if a[0] != 0.0 {
                a[1]
            } else {
                a[2]
            }
        }
        Op::Cast { .. } | Op::Reshape { .. } | Op::Broadcast { .. } | Op::ReduceMax { .. } => a[0],
        // A sum of a constant is the constant times the elements per output.
        Op::ReduceSum { .. } => a[0] * (per_output as f64),
        _ => return None,
    })
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
            let values: Option<Vec<f64>> = node.args.iter().map(|&a| fill_value(out, a)).collect();
            let Some(values) = values else {
                return Decision::Keep;
            };
            let first = &out.nodes[node.args[0]].spec;
            let dtype_in = out.nodes[*node.args.last().expect("has args")].spec.dtype;
            // Reshape/broadcast of a fill is already free; fold only real work.
            if matches!(node.op, Op::Reshape { .. } | Op::Broadcast { .. })
                && matches!(out.nodes[node.args[0]].op, Op::Fill { .. })
                && out.nodes[node.args[0]].spec.numel() == 1
                && node.spec.numel() != 1
            {
                return Decision::Keep;
            }
            let reduced = first.numel() / node.spec.numel().max(1);
            match eval(&node.op, &values, dtype_in, reduced) {
                Some(v) => Decision::Replace(Node {
                    op: Op::Fill {
                        value: round_to(node.spec.dtype, v),
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
