//! Text form of a graph, one node per line (like `@code_hlo`).

use super::{Graph, Op, ShapeFmt};
use std::fmt;

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self
            .inputs
            .iter()
            .map(|i| format!("{}: {}", i.name, i.spec))
            .collect();
        writeln!(f, "graph({}) {{", names.join(", "))?;
        for (id, node) in self.nodes.iter().enumerate() {
            write!(f, "  %{id}: {} = {}", node.spec, node.op.name())?;
            match &node.op {
                Op::Input { index } => write!(f, " \"{}\"", self.inputs[*index].name)?,
                Op::Fill { value, .. } => write!(f, " {value}")?,
                Op::Literal { values, .. } => write!(f, " <{} values>", values.len())?,
                Op::Iota { axis, .. } => write!(f, " axis={axis}")?,
                Op::RandomUniform { salt, .. } => write!(f, " salt={salt}")?,
                Op::Cast { to } => write!(f, " to={to}")?,
                Op::ReduceSum { axes } | Op::ReduceMax { axes } => write!(f, " axes={axes:?}")?,
                Op::Permute { perm } => write!(f, " perm={perm:?}")?,
                Op::Slice { start, end, stride } => write!(
                    f,
                    " {}..{} step {}",
                    ShapeFmt(start),
                    ShapeFmt(end),
                    ShapeFmt(stride)
                )?,
                Op::Pad {
                    lo,
                    hi,
                    interior,
                    value,
                } => write!(
                    f,
                    " lo={} hi={} interior={} value={value}",
                    ShapeFmt(lo),
                    ShapeFmt(hi),
                    ShapeFmt(interior)
                )?,
                Op::Concat { axis } => write!(f, " axis={axis}")?,
                Op::MatMul { ta, tb } => write!(f, " ta={ta} tb={tb}")?,
                Op::AllReduceSum { world_size } => write!(f, " world_size={world_size}")?,
                _ => {}
            }
            for a in &node.args {
                write!(f, " %{a}")?;
            }
            writeln!(f)?;
        }
        let outs: Vec<String> = self
            .outputs
            .iter()
            .map(|(n, id)| format!("{n}=%{id}"))
            .collect();
        writeln!(f, "  return {}", outs.join(", "))?;
        f.write_str("}")
    }
}
