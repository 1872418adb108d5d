//! The kernel of one fused group: one thread per element in a grid-stride
//! loop, every source loaded once by its access pattern (contiguous,
//! scalar, strided with baked shape and strides), every member a register
//! expression, every stored member written at the end. Owns the register
//! allocation of a group; the scalar expressions come from `scalar`.

use super::scalar::{binary, cast, compare, unary};
use super::types::{constant, load_expr, register_type, storage_type, store_expr};
use super::{decompose, Arg, GRID_STRIDE};
use crate::fusion::{Access, FusedGroup, Source};
use crate::ir::{Graph, NodeId, Op};
use nitro_device::DType;
use std::collections::HashMap;
use std::fmt::Write;

/// The CUDA kernel of one fused group, and its parameters (inputs, then outputs).
pub(super) fn fused(graph: &Graph, group: &FusedGroup, name: &str) -> (String, Vec<Arg>) {
    let mut inputs: Vec<NodeId> = vec![];
    let mut loads = String::new();
    let mut body = String::new();
    let mut source_reg: HashMap<String, String> = HashMap::new();
    let mut reg_of: HashMap<NodeId, String> = HashMap::new();
    let mut next = 0usize;
    let mut fresh = || {
        next += 1;
        format!("r{}", next - 1)
    };
    let iota = |n: NodeId| {
        let Op::Iota { axis, shape } = &graph.nodes[n].op else {
            unreachable!("iota source")
        };
        let div: usize = shape[axis + 1..].iter().product();
        (div, shape[*axis])
    };
    let iota_expr = |n: NodeId| {
        let (div, dim) = iota(n);
        let d = graph.nodes[n].spec.dtype;
        cast(DType::I64, d, &format!("((i / {div}LL) % {dim}LL)"))
    };
    for (&m, srcs) in group.members.iter().zip(&group.sources) {
        for (src, &arg) in srcs.iter().zip(&graph.nodes[m].args) {
            let arg_dtype = graph.nodes[arg].spec.dtype;
            let key = format!("{src:?}{arg_dtype}");
            if matches!(src, Source::Reg(_)) || source_reg.contains_key(&key) {
                continue;
            }
            let r = fresh();
            let line = match src {
                Source::Fill(v) => format!(
                    "const {} {r} = {};",
                    register_type(arg_dtype),
                    constant(*v, arg_dtype)
                ),
                Source::Iota(n) => format!(
                    "const {} {r} = {};",
                    register_type(graph.nodes[*n].spec.dtype),
                    iota_expr(*n)
                ),
                Source::Load { node, access } => {
                    let d = graph.nodes[*node].spec.dtype;
                    let j = match inputs.iter().position(|i| i == node) {
                        Some(j) => j,
                        None => {
                            inputs.push(*node);
                            inputs.len() - 1
                        }
                    };
                    let ty = register_type(d);
                    match access {
                        // A one-element value read "contiguously" by a larger
                        // group is the RNG key: every element reads element 0.
                        Access::Contiguous if graph.nodes[*node].spec.numel() == 1 => {
                            format!("const {ty} {r} = {};", load_expr(d, &format!("in{j}[0]")))
                        }
                        Access::Contiguous => {
                            format!("const {ty} {r} = {};", load_expr(d, &format!("in{j}[i]")))
                        }
                        Access::Scalar => {
                            format!("const {ty} {r} = {};", load_expr(d, &format!("in{j}[0]")))
                        }
                        Access::Offset(o) => format!(
                            "const {ty} {r} = {};",
                            load_expr(d, &format!("in{j}[{o}LL + i]"))
                        ),
                        Access::Strided { shape, strides } => format!(
                            "long long o_{r} = 0;\n{}      const {ty} {r} = {};",
                            decompose("i", shape, strides, &format!("o_{r}"), "      "),
                            load_expr(d, &format!("in{j}[o_{r}]"))
                        ),
                    }
                }
                Source::Reg(_) => unreachable!("skipped above"),
            };
            let _ = writeln!(loads, "      {line}");
            source_reg.insert(key, r);
        }
    }
    for (&m, srcs) in group.members.iter().zip(&group.sources) {
        let node = &graph.nodes[m];
        let a: Vec<String> = srcs
            .iter()
            .zip(&node.args)
            .map(|(s, &arg)| match s {
                Source::Reg(n) => reg_of[n].clone(),
                other => source_reg[&format!("{other:?}{}", graph.nodes[arg].spec.dtype)].clone(),
            })
            .collect();
        let d = node.spec.dtype;
        let ty = register_type(d);
        let expr = match &node.op {
            Op::Fill { value, .. } => constant(*value, d),
            Op::Iota { .. } => iota_expr(m),
            Op::RandomUniform { salt, .. } => {
                let u = format!("nitro_uniform({}, {salt}ULL, (unsigned long long)i)", a[0]);
                if ty == "float" {
                    format!("(float){u}")
                } else {
                    u
                }
            }
            Op::Unary(op) => unary(*op, ty, &a[0]),
            Op::Binary(op) => binary(*op, ty, &a[0], &a[1]),
            Op::Compare(op) => compare(*op, &a[0], &a[1]),
            Op::Select => format!("{} ? {} : {}", a[0], a[1], a[2]),
            Op::Cast { to } => cast(graph.nodes[node.args[0]].spec.dtype, *to, &a[0]),
            other => unreachable!("{} is not elementwise", other.name()),
        };
        let r = fresh();
        let _ = writeln!(
            body,
            "      const {ty} {r} = {expr}; // %{m} {}",
            node.op.name()
        );
        reg_of.insert(m, r);
    }
    let mut params: Vec<String> = inputs
        .iter()
        .enumerate()
        .map(|(j, &n)| format!("const {}* in{j}", storage_type(graph.nodes[n].spec.dtype)))
        .collect();
    let mut stores = String::new();
    for (j, &s) in group.stores.iter().enumerate() {
        let d = graph.nodes[s].spec.dtype;
        params.push(format!("{}* out{j}", storage_type(d)));
        let _ = writeln!(
            stores,
            "      out{j}[i] = {}; // %{s}",
            store_expr(d, &reg_of[&s])
        );
    }
    let mut code = String::new();
    let _ = writeln!(
        code,
        "// fused group: {} members, {} elements, writes {:?}",
        group.members.len(),
        group.numel,
        group.stores
    );
    let _ = writeln!(
        code,
        "extern \"C\" __global__ void {name}({}) {{",
        params.join(", ")
    );
    let _ = writeln!(code, "  const long long n = {}LL;", group.numel);
    let _ = writeln!(code, "  {GRID_STRIDE} {{");
    code += &loads;
    code += &body;
    code += &stores;
    code += "  }\n}\n";
    let args = inputs
        .iter()
        .chain(&group.stores)
        .map(|&n| Arg::Node(n))
        .collect();
    (code, args)
}
