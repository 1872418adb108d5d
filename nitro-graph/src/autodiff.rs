//! Reverse-mode autodiff as a graph transform.
//!
//! [`Tracer::grad`] walks the recorded graph backwards from a scalar loss and
//! appends gradient nodes to the *same* graph, so forward, backward and the
//! optimizer update compile into one program. Only nodes that lie on a path
//! from a requested input to the loss are differentiated (unused gradients
//! are never built). Every primitive has exactly one rule in `vjp`, one table.

use crate::error::{GraphError, Result};
use crate::ir::{BinaryOp, NodeId, Op, UnaryOp};
use crate::semantics::FloatElem;
use crate::trace::{Tensor, Tracer};
use nitro_device::DType;
use std::collections::HashMap;

impl Tracer {
    /// Gradients of the scalar `loss` with respect to each of `wrt`, as new
    /// nodes of this trace. An input the loss does not depend on gets zeros.
    pub fn grad(&self, loss: &Tensor, wrt: &[&Tensor]) -> Result<Vec<Tensor>> {
        if let Some(err) = self.error() {
            return Err(err);
        }
        if !self.owns(loss) || wrt.iter().any(|w| !self.owns(w)) {
            return Err(GraphError::ForeignTensor("grad".into()));
        }
        if loss.rank() != 0 || !loss.dtype().is_float() {
            return Err(GraphError::Grad(format!(
                "the loss must be a float scalar, got {}; reduce it first (e.g. `.sum_all()` or `mean_all`)",
                loss.spec()
            )));
        }
        if let Some(w) = wrt.iter().find(|w| !w.dtype().is_float()) {
            return Err(GraphError::Grad(format!(
                "cannot differentiate with respect to an integer or bool tensor ({}); only float inputs have gradients",
                w.spec()
            )));
        }
        let relevant = self.relevant_nodes(loss.id, wrt);
        if let Some(id) = (0..relevant.len())
            .find(|&id| relevant[id] && matches!(self.node(id).0, Op::AttentionGrad { .. }))
        {
            return Err(GraphError::Grad(format!(
                "`attention_grad` (%{id}) lies between the loss and an input: attention \
                 is differentiable once; for a second derivative build the attention \
                 from matmul and softmax"
            )));
        }
        if let Some(id) = (0..relevant.len())
            .find(|&id| relevant[id] && matches!(self.node(id).0, Op::LayerNormGrad { .. }))
        {
            return Err(GraphError::Grad(format!(
                "`layer_norm_grad` (%{id}) lies between the loss and an input: layer \
                 normalisation is differentiable once; for a second derivative build it \
                 from mean and var"
            )));
        }
        if let Some(id) = (0..relevant.len())
            .find(|&id| relevant[id] && matches!(self.node(id).0, Op::AllReduceSum { .. }))
        {
            return Err(GraphError::Grad(format!(
                "`all_reduce_sum` (%{id}) lies between the loss and an input it is \
                 differentiated by: all-reduce the gradients after `grad`, not a value \
                 the loss is computed from"
            )));
        }
        let mut adjoint: HashMap<NodeId, Tensor> = HashMap::new();
        adjoint.insert(loss.id, loss.scalar_like(1.0));
        for id in (0..=loss.id).rev() {
            if !relevant[id] {
                continue;
            }
            let Some(g) = adjoint.get(&id).cloned() else {
                continue;
            };
            let (op, args, _) = self.node(id);
            if args.is_empty() {
                continue;
            }
            let arg_t: Vec<Tensor> = args.iter().map(|&a| self.handle(a)).collect();
            let out = self.handle(id);
            for (arg, contrib) in args.iter().zip(vjp(&op, &arg_t, &out, &g)) {
                let Some(contrib) = contrib else { continue };
                if !relevant[*arg] {
                    continue;
                }
                let sum = match adjoint.remove(arg) {
                    Some(prev) => self
                        .join_pads(&prev, &contrib)
                        .unwrap_or_else(|| &prev + &contrib),
                    None => contrib,
                };
                adjoint.insert(*arg, sum);
            }
        }
        let grads = wrt
            .iter()
            .map(|w| {
                adjoint
                    .get(&w.id)
                    .cloned()
                    .unwrap_or_else(|| w.full_like(0.0))
            })
            .collect();
        match self.error() {
            Some(err) => Err(err),
            None => Ok(grads),
        }
    }

    /// The sum of two adjoint contributions that are zero-padded pieces of
    /// one axis lying side by side (the VJPs of slices that split a tensor:
    /// a fused QKV projection's q, k and v) as one padded concatenation,
    /// instead of two full-size pads and an add; a concatenation alone
    /// once the pieces cover the axis. Mathematically the same adjoint; the
    /// sum would only turn a `-0.0` entry into `+0.0`.
    fn join_pads(&self, a: &Tensor, b: &Tensor) -> Option<Tensor> {
        // (source, axis, lo, hi) of a pad along one axis only, zero fill.
        let piece = |t: &Tensor| {
            let (op, args, _) = self.node(t.id);
            let Op::Pad {
                lo,
                hi,
                interior,
                value,
            } = op
            else {
                return None;
            };
            if value != 0.0 || interior.iter().any(|&i| i != 0) {
                return None;
            }
            let mut axes = (0..lo.len()).filter(|&i| lo[i] != 0 || hi[i] != 0);
            let axis = axes.next()?;
            if axes.next().is_some() {
                return None;
            }
            Some((self.handle(args[0]), axis, lo[axis], hi[axis]))
        };
        let (pa, pb) = (piece(a)?, piece(b)?);
        let ((first, axis, lo, _), (second, axis2, _, hi)) =
            if pa.2 < pb.2 { (pa, pb) } else { (pb, pa) };
        if axis != axis2 || lo + first.shape()[axis] + second.shape()[axis] + hi != a.shape()[axis]
        {
            return None;
        }
        // Pieces already joined stay one flat concatenation.
        let parts = |t: Tensor| match self.node(t.id) {
            (Op::Concat { axis: c }, args, _) if c == axis => {
                args.into_iter().map(|x| self.handle(x)).collect()
            }
            _ => vec![t],
        };
        let mut all = parts(first);
        all.extend(parts(second));
        let joined = Tensor::concat(&all, axis).ok()?;
        if lo == 0 && hi == 0 {
            return Some(joined);
        }
        let (mut los, mut his) = (vec![0; a.rank()], vec![0; a.rank()]);
        (los[axis], his[axis]) = (lo, hi);
        Some(joined.pad(&los, &his, 0.0))
    }

    /// Nodes that depend on some `wrt` and that `loss` depends on.
    fn relevant_nodes(&self, loss: NodeId, wrt: &[&Tensor]) -> Vec<bool> {
        let n = loss + 1;
        let mut from_wrt = vec![false; n];
        for w in wrt {
            if w.id < n {
                from_wrt[w.id] = true;
            }
        }
        let mut args_of = Vec::with_capacity(n);
        for id in 0..n {
            let (_, args, _) = self.node(id);
            if args.iter().any(|&a| from_wrt[a]) {
                from_wrt[id] = true;
            }
            args_of.push(args);
        }
        let mut to_loss = vec![false; n];
        to_loss[loss] = true;
        for id in (0..n).rev() {
            if to_loss[id] {
                for &a in &args_of[id] {
                    to_loss[a] = true;
                }
            }
        }
        (0..n).map(|i| from_wrt[i] && to_loss[i]).collect()
    }
}

/// Keep-dims shape of `shape` reduced over `axes`.
fn keepdims(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect()
}

fn mask(cond: &Tensor, dtype: DType) -> Tensor {
    cond.cast(dtype)
}

/// The VJP table: given the primitive `op`, its arguments, its output and
/// the output's adjoint `g`, the adjoint contribution for each argument
/// (`None` where the argument is not differentiable).
pub(crate) fn vjp(op: &Op, args: &[Tensor], out: &Tensor, g: &Tensor) -> Vec<Option<Tensor>> {
    let x = &args[0];
    match op {
        Op::Input { .. } | Op::Fill { .. } | Op::Literal { .. } | Op::Iota { .. } => vec![],
        Op::RandomUniform { .. } | Op::Compare(_) => vec![None; args.len()],
        // Refused before the walk (`Tracer::grad`): data-parallel training
        // all-reduces gradients after the backward pass, so no rule is needed.
        Op::AllReduceSum { .. } => vec![None],
        Op::Attention { heads, causal } => vec![Some(x.attention_grad(g, *heads, *causal))],
        // Refused before the walk, as a second derivative.
        Op::AttentionGrad { .. } => vec![None, None],
        Op::LayerNorm { eps } => {
            let (scale, n) = (&args[1], x.shape()[x.rank() - 1]);
            // x normalised (scale 1, shift 0: both exact), and the sums of
            // the scale's and shift's terms over every row.
            let unit = x.layer_norm(&scale.full_like(1.0), &scale.full_like(0.0), *eps);
            let rows: Vec<usize> = (0..x.rank() - 1).collect();
            let over_rows = |t: Tensor| t.sum(&rows).reshape(&[n]);
            vec![
                Some(x.layer_norm_grad(scale, g, *eps)),
                Some(over_rows(g * &unit)),
                Some(over_rows(g.clone())),
            ]
        }
        Op::LayerNormGrad { .. } => vec![None, None, None],
        Op::Unary(u) => vec![match u {
            UnaryOp::Neg => Some(-g),
            UnaryOp::Exp => Some(g * out),
            UnaryOp::Log => Some(g / x),
            UnaryOp::Sqrt => Some(g * 0.5 / out),
            UnaryOp::Tanh => Some(g * (1.0 - out * out)),
            UnaryOp::Sigmoid => Some(g * out * (1.0 - out)),
            UnaryOp::Sin => Some(g * x.cos()),
            UnaryOp::Cos => Some(-(g * x.sin())),
            UnaryOp::Abs => Some(g * x.sign()),
            UnaryOp::Recip => Some(-(g * out * out)),
            UnaryOp::Sign | UnaryOp::Floor | UnaryOp::StopGradient => None,
            // d/dx erf x = 2/√π e^(-x²): the backward reads only x.
            UnaryOp::Erf => Some(g * (-(x * x)).exp() * (2.0 / std::f64::consts::PI.sqrt())),
            // d/dx x Φ(x) = Φ(x) + x φ(x), φ(x) = e^(-x²/2) / √(2π); again
            // from x alone, so the forward stores nothing but its output.
            UnaryOp::Gelu => Some(g * x.gelu_erf_grad()),
            // d/dx (Φ(x) + x φ(x)) = 2 φ(x) + x φ'(x) = φ(x) (2 - x²).
            UnaryOp::GeluGrad => {
                let pdf = (x * x * -0.5).exp() * <f64 as FloatElem>::FRAC_1_SQRT_2PI;
                Some(g * pdf * (2.0 - x * x))
            }
        }],
        Op::Binary(b) => {
            let y = &args[1];
            let (ga, gb) = match b {
                BinaryOp::Add => (g.clone(), g.clone()),
                BinaryOp::Sub => (g.clone(), -g),
                BinaryOp::Mul => (g * y, g * x),
                BinaryOp::Div => (g / y, -(g * out / y)),
                BinaryOp::Max | BinaryOp::Min => {
                    // Ties split the gradient evenly, as JAX does.
                    let wins = if *b == BinaryOp::Max {
                        x.gt(y)
                    } else {
                        x.lt(y)
                    };
                    let tie = mask(&x.eq_t(y), x.dtype()) * 0.5;
                    let wa = mask(&wins, x.dtype()) + &tie;
                    (g * &wa, g * (1.0 - wa))
                }
                BinaryOp::Pow => (g * y * x.pow(&(y - 1.0)), g * out * x.log()),
            };
            vec![Some(ga), Some(gb)]
        }
        Op::Select => {
            let zero = g.full_like(0.0);
            vec![None, Some(x.select(g, &zero)), Some(x.select(&zero, g))]
        }
        Op::Cast { .. } => vec![x.dtype().is_float().then(|| g.cast(x.dtype()))],
        Op::ReduceSum { axes } => vec![Some(
            g.reshape(&keepdims(x.shape(), axes))
                .broadcast_to(x.shape()),
        )],
        Op::ReduceMax { axes } => {
            let kd = keepdims(x.shape(), axes);
            let hit = mask(
                &x.eq_t(&out.reshape(&kd).broadcast_to(x.shape())),
                x.dtype(),
            );
            let count = hit.sum(axes).reshape(&kd);
            vec![Some(g.reshape(&kd) * hit / count)]
        }
        Op::Reshape { .. } => vec![Some(g.reshape(x.shape()))],
        Op::Permute { perm } => {
            let mut inverse = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i;
            }
            vec![Some(g.permute(&inverse))]
        }
        Op::Broadcast { shape } => {
            let axes: Vec<usize> = (0..shape.len())
                .filter(|&i| x.shape()[i] != shape[i])
                .collect();
            vec![Some(g.sum(&axes).reshape(x.shape()))]
        }
        Op::Slice { start, stride, .. } => {
            let r = x.rank();
            let lens = out.shape();
            let hi: Vec<usize> = (0..r)
                .map(|i| {
                    let used = if lens[i] == 0 {
                        start[i]
                    } else {
                        start[i] + (lens[i] - 1) * stride[i] + 1
                    };
                    x.shape()[i] - used
                })
                .collect();
            let interior: Vec<usize> = stride.iter().map(|s| s - 1).collect();
            let op = Op::Pad {
                lo: start.clone(),
                hi,
                interior,
                value: 0.0,
            };
            vec![Some(g.tracer().record(op, &[g], g.dtype()))]
        }
        Op::Pad { lo, interior, .. } => {
            let r = x.rank();
            let end: Vec<usize> = (0..r)
                .map(|i| {
                    lo[i] + x.shape()[i].saturating_sub(1) * (interior[i] + 1) + 1.min(x.shape()[i])
                })
                .collect();
            let stride: Vec<usize> = interior.iter().map(|s| s + 1).collect();
            vec![Some(g.slice(lo, &end, &stride))]
        }
        Op::Concat { axis } => {
            let mut offset = 0;
            args.iter()
                .map(|a| {
                    let len = a.shape()[*axis];
                    offset += len;
                    Some(g.narrow(*axis, offset - len, offset))
                })
                .collect()
        }
        Op::Take => vec![Some(g.scatter_add(&args[1], x.shape()[0])), None],
        Op::ScatterAdd { .. } => vec![Some(g.take(&args[1])), None],
        // The two patch primitives are each other's adjoint (both linear).
        Op::Im2Col { window } => vec![Some(g.col2im(x.shape(), *window))],
        Op::Col2Im { window, .. } => vec![Some(g.im2col(*window))],
        Op::MatMul { ta, tb } => {
            let (a, b) = (x, &args[1]);
            // Mixed precision (f16/bf16 operands, f32 product): the backward
            // products take the cotangent in the operands' type too, so
            // they run at the same precision, and each gradient is stored
            // in its operand's type.
            let low = a.dtype();
            let mixed = matches!(low, DType::F16 | DType::BF16);
            let g = &if mixed { g.cast(low) } else { g.clone() };
            let back = |t: Tensor| if mixed { t.cast(low) } else { t };
            let ga = if *ta {
                b.matmul_t(g, *tb, true)
            } else {
                g.matmul_t(b, false, !*tb)
            };
            let gb = if *tb {
                g.matmul_t(a, true, *ta)
            } else {
                a.matmul_t(g, !*ta, false)
            };
            vec![Some(back(ga)), Some(back(gb))]
        }
    }
}
