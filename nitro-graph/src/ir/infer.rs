//! The shape and dtype rule of every primitive ([`infer`]): what each op
//! of [`super::Op`] produces from its arguments, or an error naming the op,
//! the offending shapes and the fix. Checked while tracing, so a kernel
//! never sees a shape it cannot handle. The op table itself is `ops`.

use super::{Op, TensorSpec};
use crate::error::{GraphError, Result};
use nitro_device::DType;

fn check_axes(op: &str, axes: &[usize], rank: usize, shape: &[usize]) -> Result<()> {
    let ascending = axes.windows(2).all(|w| w[0] < w[1]);
    if !ascending || axes.iter().any(|&a| a >= rank) {
        return Err(GraphError::shape(
            op,
            format!("axes {axes:?} must be ascending, distinct and below rank {rank}"),
            &[shape],
            "",
        ));
    }
    Ok(())
}

fn same_shape(op: &str, a: &TensorSpec, b: &TensorSpec) -> Result<()> {
    if a.shape != b.shape {
        return Err(GraphError::shape(
            op,
            "operands differ in shape",
            &[&a.shape, &b.shape],
            "broadcast explicitly with `broadcast_to` or `reshape`",
        ));
    }
    Ok(())
}

fn same_dtype(op: &str, a: &TensorSpec, b: &TensorSpec) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(GraphError::dtype(
            op,
            format!("operands are {} and {}", a.dtype, b.dtype),
            "cast one with `.cast(dtype)`",
        ));
    }
    Ok(())
}

/// The result type of a product of `operands`: f16/bf16 operands are
/// mixed precision (f32 accumulation, f32 result, as cuBLAS's `GemmEx`).
pub fn matmul_output(operands: DType) -> DType {
    match operands {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// Dtypes the kernels compute in; storage types must be cast first.
fn computable(op: &str, d: DType) -> Result<()> {
    if matches!(d, DType::F16 | DType::BF16 | DType::U8) {
        return Err(GraphError::dtype(
            op,
            format!("{d} is a storage type"),
            "cast to f32 (or i32) before computing with `.cast(DType::F32)`",
        ));
    }
    Ok(())
}

fn float_only(op: &str, d: DType) -> Result<()> {
    if !matches!(d, DType::F32 | DType::F64) {
        return Err(GraphError::dtype(
            op,
            format!("needs f32 or f64, got {d}"),
            "cast to f32 first with `.cast(DType::F32)`",
        ));
    }
    Ok(())
}

fn arity(op: &Op, args: &[&TensorSpec], n: usize) -> Result<()> {
    if args.len() != n {
        return Err(GraphError::shape(
            &op.name(),
            format!("takes {n} arguments, got {}", args.len()),
            &args.iter().map(|a| a.shape.as_slice()).collect::<Vec<_>>(),
            "",
        ));
    }
    Ok(())
}

/// The shape and dtype rule of every primitive: the output spec of `op`
/// applied to `args`, or an error naming the op and the offending shapes.
/// `dtype` is the requested dtype for ops with no arguments to take it from.
pub fn infer(op: &Op, args: &[&TensorSpec], dtype: DType) -> Result<TensorSpec> {
    let name = op.name();
    let n = match op {
        Op::Input { .. } | Op::Fill { .. } | Op::Literal { .. } | Op::Iota { .. } => 0,
        Op::RandomUniform { .. }
        | Op::Unary(_)
        | Op::Cast { .. }
        | Op::ReduceSum { .. }
        | Op::ReduceMax { .. }
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::Broadcast { .. }
        | Op::Slice { .. }
        | Op::Pad { .. }
        | Op::Im2Col { .. }
        | Op::Col2Im { .. }
        | Op::Attention { .. }
        | Op::AllReduceSum { .. } => 1,
        Op::Binary(_)
        | Op::Compare(_)
        | Op::Take
        | Op::ScatterAdd { .. }
        | Op::MatMul { .. }
        | Op::AttentionGrad { .. } => 2,
        Op::Select | Op::LayerNorm { .. } | Op::LayerNormGrad { .. } => 3,
        Op::Concat { .. } => args.len().max(1),
    };
    arity(op, args, n)?;
    match op {
        Op::Input { .. } => Err(GraphError::Backend(
            "inputs are declared, not inferred".into(),
        )),
        Op::Fill { shape, .. } | Op::Iota { shape, .. } => {
            if let Op::Iota { axis, .. } = op {
                if *axis >= shape.len() {
                    return Err(GraphError::shape(
                        &name,
                        format!("axis {axis} out of range"),
                        &[shape],
                        "",
                    ));
                }
            }
            Ok(TensorSpec::new(dtype, shape))
        }
        Op::Literal { values, shape } => {
            if values.len() != shape.iter().product::<usize>() {
                return Err(GraphError::shape(
                    &name,
                    format!("{} values cannot fill the shape", values.len()),
                    &[shape],
                    "",
                ));
            }
            Ok(TensorSpec::new(dtype, shape))
        }
        Op::RandomUniform { shape, .. } => {
            let key = args[0];
            if !key.shape.is_empty() || key.dtype != DType::I32 {
                return Err(GraphError::dtype(
                    &name,
                    format!("the key must be an i32 scalar, got {key}"),
                    "pass the RNG key as a traced i32[] input",
                ));
            }
            if !dtype.is_float() {
                return Err(GraphError::dtype(
                    &name,
                    format!("cannot draw {dtype}"),
                    "draw f32 or f64",
                ));
            }
            Ok(TensorSpec::new(dtype, shape))
        }
        Op::Unary(u) => {
            let a = args[0];
            computable(&name, a.dtype)?;
            // Which ops exist on integers is the semantics table's call.
            let int_ok = u.on_integers().is_some();
            if !a.dtype.is_float() && !int_ok {
                return Err(GraphError::dtype(
                    &name,
                    format!("needs a float operand, got {}", a.dtype),
                    "cast to f32 first",
                ));
            }
            if a.dtype == DType::Bool {
                return Err(GraphError::dtype(
                    &name,
                    "bool has no arithmetic",
                    "cast to f32 or i32 first",
                ));
            }
            Ok(a.clone())
        }
        Op::Binary(b) => {
            let (a, c) = (args[0], args[1]);
            same_shape(&name, a, c)?;
            same_dtype(&name, a, c)?;
            computable(&name, a.dtype)?;
            if a.dtype == DType::Bool || (b.on_integers().is_none() && !a.dtype.is_float()) {
                return Err(GraphError::dtype(
                    &name,
                    format!("not defined for {}", a.dtype),
                    "cast to f32 first",
                ));
            }
            Ok(a.clone())
        }
        Op::Compare(_) => {
            let (a, c) = (args[0], args[1]);
            same_shape(&name, a, c)?;
            same_dtype(&name, a, c)?;
            computable(&name, a.dtype)?;
            Ok(TensorSpec::new(DType::Bool, &a.shape))
        }
        Op::Select => {
            let (c, a, b) = (args[0], args[1], args[2]);
            if c.dtype != DType::Bool {
                return Err(GraphError::dtype(
                    &name,
                    format!("condition must be bool, got {}", c.dtype),
                    "compare first",
                ));
            }
            if c.shape != a.shape || a.shape != b.shape {
                return Err(GraphError::shape(
                    &name,
                    "condition and branches differ in shape",
                    &[&c.shape, &a.shape, &b.shape],
                    "broadcast explicitly",
                ));
            }
            same_dtype(&name, a, b)?;
            Ok(a.clone())
        }
        Op::Cast { to } => Ok(TensorSpec::new(*to, &args[0].shape)),
        Op::ReduceSum { axes } | Op::ReduceMax { axes } => {
            let a = args[0];
            computable(&name, a.dtype)?;
            check_axes(&name, axes, a.shape.len(), &a.shape)?;
            let shape: Vec<usize> = a
                .shape
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, &d)| d)
                .collect();
            Ok(TensorSpec::new(a.dtype, &shape))
        }
        Op::Reshape { shape } => {
            let a = args[0];
            if a.numel() != shape.iter().product::<usize>() {
                return Err(GraphError::shape(
                    &name,
                    "element counts differ",
                    &[&a.shape, shape],
                    "a reshape keeps every element",
                ));
            }
            Ok(TensorSpec::new(a.dtype, shape))
        }
        Op::Permute { perm } => {
            let a = args[0];
            let mut seen = vec![false; a.shape.len()];
            let valid = perm.len() == a.shape.len()
                && perm
                    .iter()
                    .all(|&p| p < seen.len() && !std::mem::replace(&mut seen[p], true));
            if !valid {
                return Err(GraphError::shape(
                    &name,
                    format!("{perm:?} is not a permutation of the axes"),
                    &[&a.shape],
                    "",
                ));
            }
            let shape: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
            Ok(TensorSpec::new(a.dtype, &shape))
        }
        Op::Broadcast { shape } => {
            let a = args[0];
            let ok = a.shape.len() == shape.len()
                && a.shape.iter().zip(shape).all(|(&s, &t)| s == t || s == 1);
            if !ok {
                return Err(GraphError::shape(
                    &name,
                    "only size-1 axes of an equal-rank operand can be repeated",
                    &[&a.shape, shape],
                    "reshape to the target rank first (no implicit rank promotion)",
                ));
            }
            Ok(TensorSpec::new(a.dtype, shape))
        }
        Op::Slice { start, end, stride } => {
            let a = args[0];
            let r = a.shape.len();
            let ok = start.len() == r
                && end.len() == r
                && stride.len() == r
                && (0..r).all(|i| start[i] <= end[i] && end[i] <= a.shape[i] && stride[i] >= 1);
            if !ok {
                return Err(GraphError::shape(
                    &name,
                    format!("window {start:?}..{end:?} step {stride:?} does not fit"),
                    &[&a.shape],
                    "",
                ));
            }
            let shape: Vec<usize> = (0..r)
                .map(|i| (end[i] - start[i]).div_ceil(stride[i]))
                .collect();
            Ok(TensorSpec::new(a.dtype, &shape))
        }
        Op::Pad {
            lo, hi, interior, ..
        } => {
            let a = args[0];
            let r = a.shape.len();
            if lo.len() != r || hi.len() != r || interior.len() != r {
                return Err(GraphError::shape(
                    &name,
                    "padding must name every axis",
                    &[&a.shape],
                    "",
                ));
            }
            let shape: Vec<usize> = (0..r)
                .map(|i| lo[i] + hi[i] + a.shape[i] + a.shape[i].saturating_sub(1) * interior[i])
                .collect();
            Ok(TensorSpec::new(a.dtype, &shape))
        }
        Op::Concat { axis } => {
            let first = args[0];
            let r = first.shape.len();
            if *axis >= r {
                return Err(GraphError::shape(
                    &name,
                    format!("axis {axis} out of range"),
                    &[&first.shape],
                    "",
                ));
            }
            let mut shape = first.shape.clone();
            shape[*axis] = 0;
            for a in args {
                same_dtype(&name, first, a)?;
                let ok = a.shape.len() == r
                    && (0..r).all(|i| i == *axis || a.shape[i] == first.shape[i]);
                if !ok {
                    return Err(GraphError::shape(
                        &name,
                        format!("operands must agree on every axis but {axis}"),
                        &[&first.shape, &a.shape],
                        "",
                    ));
                }
                shape[*axis] += a.shape[*axis];
            }
            Ok(TensorSpec::new(first.dtype, &shape))
        }
        Op::Take => {
            let (table, idx) = (args[0], args[1]);
            if idx.shape.len() != 1
                || !matches!(idx.dtype, DType::I32 | DType::I64)
                || table.shape.is_empty()
            {
                return Err(GraphError::shape(
                    &name,
                    format!(
                        "needs a table of rank >= 1 and rank-1 integer indices, got {} indices",
                        idx.dtype
                    ),
                    &[&table.shape, &idx.shape],
                    "flatten the indices with `reshape`",
                ));
            }
            let mut shape = table.shape.clone();
            shape[0] = idx.shape[0];
            Ok(TensorSpec::new(table.dtype, &shape))
        }
        Op::ScatterAdd { rows } => {
            let (upd, idx) = (args[0], args[1]);
            computable(&name, upd.dtype)?;
            if upd.dtype == DType::Bool {
                return Err(GraphError::dtype(
                    &name,
                    "adds numbers, got bool updates",
                    "cast the updates to i32 or f32 with `.cast(..)`",
                ));
            }
            if idx.shape.len() != 1
                || upd.shape.first() != Some(&idx.shape[0])
                || !matches!(idx.dtype, DType::I32 | DType::I64)
            {
                return Err(GraphError::shape(
                    &name,
                    "needs rank-1 integer indices, one per update row",
                    &[&upd.shape, &idx.shape],
                    "",
                ));
            }
            let mut shape = upd.shape.clone();
            shape[0] = *rows;
            Ok(TensorSpec::new(upd.dtype, &shape))
        }
        Op::Im2Col { window } => {
            let a = args[0];
            float_only(&name, a.dtype)?;
            let shape = window.patches_shape(&a.shape).ok_or_else(|| {
                GraphError::shape(
                    &name,
                    format!("{window:?} does not fit images [n, c, h, w]"),
                    &[&a.shape],
                    "pass a rank-4 NCHW tensor, a stride >= 1 and a window no larger than the padded image",
                )
            })?;
            Ok(TensorSpec::new(a.dtype, &shape))
        }
        Op::Col2Im { image, window } => {
            let a = args[0];
            float_only(&name, a.dtype)?;
            if window.patches_shape(image).as_ref() != Some(&a.shape) {
                return Err(GraphError::shape(
                    &name,
                    format!("is not the patch matrix of images {image:?} under {window:?}"),
                    &[&a.shape],
                    "pass the [c*kh*kw, n*oh*ow] matrix `im2col` makes of those images",
                ));
            }
            Ok(TensorSpec::new(a.dtype, image))
        }
        Op::LayerNorm { .. } | Op::LayerNormGrad { .. } => {
            let (x, scale, third) = (args[0], args[1], args[2]);
            float_only(&name, x.dtype)?;
            same_dtype(&name, x, scale)?;
            same_dtype(&name, x, third)?;
            let n = x.shape.last().copied().unwrap_or(0);
            let third_ok = match op {
                Op::LayerNorm { .. } => third.shape == [n],
                _ => third.shape == x.shape,
            };
            if x.shape.is_empty() || scale.shape != [n] || !third_ok {
                return Err(GraphError::shape(
                    &name,
                    "needs x [.., n], scale [n] and a shift [n] (a cotangent like x for the gradient)",
                    &[&x.shape, &scale.shape, &third.shape],
                    "normalise over the last axis; reshape the parameters to its length",
                ));
            }
            Ok(TensorSpec::new(x.dtype, &x.shape))
        }
        Op::Attention { heads, .. } | Op::AttentionGrad { heads, .. } => {
            let qkv = args[0];
            float_only(&name, qkv.dtype)?;
            let s = &qkv.shape;
            if s.len() != 3 || *heads == 0 || s[2] % (3 * heads) != 0 {
                return Err(GraphError::shape(
                    &name,
                    format!("needs a fused projection [batch, time, 3 dim] with dim a multiple of {heads} heads"),
                    &[s],
                    "project to 3 dim columns (q | k | v) with dim divisible by the heads",
                ));
            }
            let out = [s[0], s[1], s[2] / 3];
            if let Op::AttentionGrad { .. } = op {
                let dy = args[1];
                same_dtype(&name, qkv, dy)?;
                if dy.shape != out {
                    return Err(GraphError::shape(
                        &name,
                        "needs the output's cotangent [batch, time, dim]",
                        &[s, &dy.shape],
                        "",
                    ));
                }
                return Ok(TensorSpec::new(qkv.dtype, s));
            }
            Ok(TensorSpec::new(qkv.dtype, &out))
        }
        Op::MatMul { ta, tb } => {
            let (a, b) = (args[0], args[1]);
            same_dtype(&name, a, b)?;
            if !a.dtype.is_float() {
                return Err(GraphError::dtype(
                    &name,
                    format!("needs float operands, got {}", a.dtype),
                    "cast to f32 (or to bf16/f16 for a mixed-precision product)",
                ));
            }
            let (ra, rb) = (a.shape.len(), b.shape.len());
            if ra < 2 || ra != rb || a.shape[..ra - 2] != b.shape[..rb - 2] {
                return Err(GraphError::shape(
                    &name,
                    "operands need rank >= 2 and equal batch axes",
                    &[&a.shape, &b.shape],
                    "reshape or broadcast the batch axes explicitly",
                ));
            }
            let (m, ka) = if *ta {
                (a.shape[ra - 1], a.shape[ra - 2])
            } else {
                (a.shape[ra - 2], a.shape[ra - 1])
            };
            let (kb, n) = if *tb {
                (b.shape[rb - 1], b.shape[rb - 2])
            } else {
                (b.shape[rb - 2], b.shape[rb - 1])
            };
            if ka != kb {
                return Err(GraphError::shape(
                    &name,
                    format!("contracting dimensions differ ({ka} vs {kb})"),
                    &[&a.shape, &b.shape],
                    "",
                ));
            }
            let mut shape = a.shape[..ra - 2].to_vec();
            shape.extend([m, n]);
            Ok(TensorSpec::new(matmul_output(a.dtype), &shape))
        }
        Op::AllReduceSum { world_size } => {
            let a = args[0];
            if *world_size == 0 {
                return Err(GraphError::shape(
                    &name,
                    "a process group has at least one process, got world_size 0",
                    &[&a.shape],
                    "pass the group's world_size()",
                ));
            }
            if !nitro_device::collective::summable(a.dtype) {
                return Err(GraphError::dtype(
                    &name,
                    format!("sums f32, f64, i32 or i64, got {}", a.dtype),
                    "cast to f32 (or i32) first with `.cast(..)`",
                ));
            }
            Ok(a.clone())
        }
    }
}
