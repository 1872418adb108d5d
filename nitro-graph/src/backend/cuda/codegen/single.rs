//! The kernels of single (unfused) schedule kernels: permute, broadcast
//! and slice as one strided gather; pad and concat as one gather that picks
//! the source per element; take; scatter_add (zeroing, then atomics);
//! im2col/col2im (through `patches`); reductions (through `reduce`);
//! attention and its adjoint (through `attention`); layer normalisation
//! and its input gradient (through `layer_norm`); a
//! matmul becomes a cuBLAS step and an all-reduce a copy plus a collective
//! step. Owns the choice of launches per op.

use super::reduce::reduce;
use super::types::{bits_type, storage_bits, storage_type};
use super::{decompose, per_element, Arg, CudaSource, Grid, Step};
use crate::fusion::strides_of;
use crate::ir::{Graph, NodeId, Op};
use nitro_device::DType;
use std::fmt::Write;

pub(super) fn single(graph: &Graph, n: NodeId, k: usize, out: &mut CudaSource) {
    let node = &graph.nodes[n];
    let d = node.spec.dtype;
    let shape = &node.spec.shape;
    let numel = node.spec.numel();
    let arg_shape = |i: usize| graph.nodes[node.args[i]].spec.shape.as_slice();
    let bits = bits_type(d.size_of());
    let name = format!("k{k}_{}", node.op.name());
    let io = vec![format!("const {bits}* src"), format!("{bits}* dst")];
    let io_args = vec![Arg::Node(node.args[0]), Arg::Node(n)];
    let gather = |strides: &[usize], offset: usize| {
        let mut body = format!("    long long off = {offset}LL;\n");
        body += &decompose("i", shape, strides, "off", "    ");
        body += "    dst[i] = src[off];\n";
        per_element(&name, &io, numel, &body)
    };
    match &node.op {
        Op::MatMul { .. } => out.steps.push(Step::Gemm {
            node: n,
            schedule_kernel: k,
        }),
        Op::Permute { perm } => {
            let base = strides_of(arg_shape(0));
            let strides: Vec<usize> = perm.iter().map(|&p| base[p]).collect();
            out.add(
                name.clone(),
                gather(&strides, 0),
                Grid::PerElement(numel),
                io_args,
                k,
            );
        }
        Op::Broadcast { .. } => {
            let src = arg_shape(0);
            let base = strides_of(src);
            let strides: Vec<usize> = (0..src.len())
                .map(|i| if src[i] == 1 { 0 } else { base[i] })
                .collect();
            out.add(
                name.clone(),
                gather(&strides, 0),
                Grid::PerElement(numel),
                io_args,
                k,
            );
        }
        Op::Slice { start, stride, .. } => {
            let base = strides_of(arg_shape(0));
            let strides: Vec<usize> = (0..base.len()).map(|i| base[i] * stride[i]).collect();
            let offset: usize = (0..base.len()).map(|i| base[i] * start[i]).sum();
            out.add(
                name.clone(),
                gather(&strides, offset),
                Grid::PerElement(numel),
                io_args,
                k,
            );
        }
        Op::Pad {
            lo,
            interior,
            value,
            ..
        } => {
            let src = arg_shape(0);
            let src_strides = strides_of(src);
            let mut body = String::from("    long long t = i, off = 0; bool inside = true;\n");
            for ax in (0..shape.len()).rev() {
                let step = interior[ax] + 1;
                let _ = writeln!(
                    body,
                    "    {{ long long j = t % {}LL - {}LL; t /= {}LL;\n      if (j < 0 || j % {step}LL != 0 || j / {step}LL >= {}LL) inside = false; else off += (j / {step}LL) * {}LL; }}",
                    shape[ax], lo[ax], shape[ax], src[ax], src_strides[ax]
                );
            }
            let _ = writeln!(
                body,
                "    dst[i] = inside ? src[off] : {};",
                storage_bits(*value, d)
            );
            out.add(
                name.clone(),
                per_element(&name, &io, numel, &body),
                Grid::PerElement(numel),
                io_args,
                k,
            );
        }
        Op::Concat { axis } => {
            let inner: usize = shape[axis + 1..].iter().product();
            let extent = shape[*axis];
            let mut params: Vec<String> = (0..node.args.len())
                .map(|j| format!("const {bits}* in{j}"))
                .collect();
            params.push(format!("{bits}* dst"));
            let mut body = format!(
                "    const long long inner = i % {inner}LL, c = (i / {inner}LL) % {extent}LL, outer = i / ({inner}LL * {extent}LL);\n"
            );
            let mut at = 0usize;
            for j in 0..node.args.len() {
                let size = arg_shape(j)[*axis];
                let cond = if j + 1 == node.args.len() {
                    "    else".to_string()
                } else if j == 0 {
                    format!("    if (c < {}LL)", at + size)
                } else {
                    format!("    else if (c < {}LL)", at + size)
                };
                let _ = writeln!(
                    body,
                    "{cond} dst[i] = in{j}[(outer * {size}LL + (c - {at}LL)) * {inner}LL + inner];"
                );
                at += size;
            }
            if node.args.len() == 1 {
                body = body.replace("    else dst", "    dst");
            }
            let mut args: Vec<Arg> = node.args.iter().map(|&a| Arg::Node(a)).collect();
            args.push(Arg::Node(n));
            out.add(
                name.clone(),
                per_element(&name, &params, numel, &body),
                Grid::PerElement(numel),
                args,
                k,
            );
        }
        Op::Take => {
            let rows = arg_shape(0)[0];
            let row: usize = arg_shape(0)[1..].iter().product();
            if rows == 0 || row == 0 {
                return;
            }
            let idx_ty = storage_type(graph.nodes[node.args[1]].spec.dtype);
            let params = vec![
                format!("const {bits}* table"),
                format!("const {idx_ty}* idx"),
                format!("{bits}* dst"),
            ];
            let body = format!(
                "    long long r = (long long)idx[i / {row}LL];\n    r = r < 0 ? 0 : (r > {max}LL ? {max}LL : r);\n    dst[i] = table[r * {row}LL + i % {row}LL];\n",
                max = rows - 1
            );
            out.add(
                name.clone(),
                per_element(&name, &params, numel, &body),
                Grid::PerElement(numel),
                vec![
                    Arg::Node(node.args[0]),
                    Arg::Node(node.args[1]),
                    Arg::Node(n),
                ],
                k,
            );
        }
        Op::ScatterAdd { rows } => {
            let ty = storage_type(d);
            let zero = format!("{name}_zero");
            out.add(
                zero.clone(),
                per_element(&zero, &[format!("{ty}* dst")], numel, "    dst[i] = 0;\n"),
                Grid::PerElement(numel),
                vec![Arg::Node(n)],
                k,
            );
            let upd_n = graph.nodes[node.args[0]].spec.numel();
            let count = arg_shape(1)[0];
            if *rows == 0 || count == 0 || upd_n == 0 {
                return;
            }
            let row = upd_n / count;
            let idx_ty = storage_type(graph.nodes[node.args[1]].spec.dtype);
            let add = match d {
                DType::I64 => "atomicAdd((unsigned long long*)&dst[r * ROW + i % ROW], (unsigned long long)upd[i]);",
                _ => "atomicAdd(&dst[r * ROW + i % ROW], upd[i]);",
            }
            .replace("ROW", &format!("{row}LL"));
            let body = format!(
                "    long long r = (long long)idx[i / {row}LL];\n    r = r < 0 ? 0 : (r > {max}LL ? {max}LL : r);\n    {add}\n",
                max = rows - 1
            );
            let params = vec![
                format!("const {ty}* upd"),
                format!("const {idx_ty}* idx"),
                format!("{ty}* dst"),
            ];
            out.add(
                name.clone(),
                per_element(&name, &params, upd_n, &body),
                Grid::PerElement(upd_n),
                vec![
                    Arg::Node(node.args[0]),
                    Arg::Node(node.args[1]),
                    Arg::Node(n),
                ],
                k,
            );
        }
        Op::Im2Col { window } => {
            let body = super::super::patches::im2col_body(arg_shape(0), *window);
            let code = per_element(&name, &io, numel, &body);
            out.add(name.clone(), code, Grid::PerElement(numel), io_args, k);
        }
        Op::Col2Im { image, window } => {
            let ty = storage_type(d);
            let params = vec![format!("const {ty}* src"), format!("{ty}* dst")];
            let body = super::super::patches::col2im_body(image, *window, ty);
            let code = per_element(&name, &params, numel, &body);
            out.add(name.clone(), code, Grid::PerElement(numel), io_args, k);
        }
        Op::ReduceSum { axes } | Op::ReduceMax { axes } => {
            let is_max = matches!(node.op, Op::ReduceMax { .. });
            let (code, grid) = reduce(&name, d, is_max, arg_shape(0), axes);
            out.add(name.clone(), code, grid, io_args, k);
        }
        Op::Attention { .. } => super::attention::attention(graph, n, k, &name, out),
        Op::AttentionGrad { .. } => super::attention::attention_grad(graph, n, k, &name, out),
        Op::LayerNorm { .. } => super::layer_norm::layer_norm(graph, n, k, &name, out),
        Op::LayerNormGrad { .. } => super::layer_norm::layer_norm_grad(graph, n, k, &name, out),
        Op::AllReduceSum { .. } => {
            // The sum's buffer first takes the argument, which is the whole
            // sum in a world of one run alone; the collective step then
            // sums it in place over the ranks (NCCL on a GPU).
            let code = per_element(&name, &io, numel, "    dst[i] = src[i];\n");
            out.add(name.clone(), code, Grid::PerElement(numel), io_args, k);
            out.steps.push(Step::AllReduce {
                node: n,
                schedule_kernel: k,
            });
        }
        other => unreachable!("{} is not a single kernel", other.name()),
    }
}
