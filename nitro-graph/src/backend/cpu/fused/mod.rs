//! Fused elementwise kernels: a group of elementwise nodes compiled to a
//! short list of register instructions, evaluated over chunks of
//! [`CHUNK`] elements. Each instruction is a tight loop over one chunk
//! (vectorisable by the compiler), and the chunk's temporaries stay in L1:
//! the group never writes an intermediate to memory. Large groups split
//! their index range over rayon tasks.
//!
//! The chunk loops (`chunk`) are built twice: for the architecture's
//! baseline and inside an AVX2 entry point chosen at run time, once per
//! task ([`super::simd`]). Without it the crate's SSE2 build left most
//! loops scalar: the MLP's Adam update ran at ~37 instructions per element
//! (1 thread, callgrind), ~19 with it.

mod chunk;

pub use chunk::uniform;

use super::raw::Raw;
use crate::fusion::{Access, FusedGroup, Source};
use crate::ir::{Graph, NodeId, Op};
use chunk::{class_of, exec, store, Class, Instr, Reg};
use rayon::prelude::*;
use std::collections::HashMap;

/// Elements per chunk: small enough that a dozen f32 registers fit in L1.
pub const CHUNK: usize = 256;
/// Elements per parallel task.
const TASK: usize = 16 * 1024;

/// A fused group ready to run: register instructions over the group's
/// distinct memory inputs, and the registers stored to its outputs.
#[derive(Clone, Debug)]
pub struct FusedKernel {
    /// Stored nodes the kernel reads, in input order.
    pub inputs: Vec<NodeId>,
    /// Nodes it writes, in output order.
    pub outputs: Vec<NodeId>,
    classes: Vec<Class>,
    /// Constants and scalar loads (run once per task), then per-chunk loads,
    /// then computations.
    instrs: Vec<Instr>,
    /// How many leading instructions run once per task.
    constants: usize,
    stores: Vec<usize>,
    numel: usize,
}

impl FusedKernel {
    /// Compile a fused group of `graph`.
    pub fn new(graph: &Graph, group: &FusedGroup) -> FusedKernel {
        let mut k = FusedKernel {
            inputs: vec![],
            outputs: group.stores.clone(),
            classes: vec![],
            instrs: vec![],
            constants: 0,
            stores: vec![],
            numel: group.numel,
        };
        let mut reg_of: HashMap<NodeId, usize> = HashMap::new();
        let mut source_reg: HashMap<String, usize> = HashMap::new();
        let mut loads = vec![];
        let mut fills = vec![];
        let mut compute = vec![];
        let new_reg = |classes: &mut Vec<Class>, c: Class| {
            classes.push(c);
            classes.len() - 1
        };
        // Pass 1: registers for every source that is not a group member.
        for (m, srcs) in group.members.iter().zip(&group.sources) {
            for (src, &arg) in srcs.iter().zip(&graph.nodes[*m].args) {
                let arg_dtype = graph.nodes[arg].spec.dtype;
                let key = format!("{src:?}{arg_dtype}");
                if matches!(src, Source::Reg(_)) || source_reg.contains_key(&key) {
                    continue;
                }
                let r = match src {
                    Source::Fill(value) => {
                        let r = new_reg(&mut k.classes, class_of(arg_dtype));
                        fills.push(Instr::Fill {
                            dst: r,
                            value: *value,
                        });
                        r
                    }
                    Source::Iota(n) => {
                        let r = new_reg(&mut k.classes, class_of(graph.nodes[*n].spec.dtype));
                        compute.push(iota_instr(graph, *n, r));
                        r
                    }
                    Source::Load { node, access } => {
                        let input = match k.inputs.iter().position(|i| i == node) {
                            Some(i) => i,
                            None => {
                                k.inputs.push(*node);
                                k.inputs.len() - 1
                            }
                        };
                        let r = new_reg(&mut k.classes, class_of(graph.nodes[*node].spec.dtype));
                        // A scalar never changes between chunks: load it once per task.
                        let list = if *access == Access::Scalar {
                            &mut fills
                        } else {
                            &mut loads
                        };
                        list.push(Instr::Load {
                            dst: r,
                            input,
                            access: access.clone(),
                        });
                        r
                    }
                    Source::Reg(_) => unreachable!("skipped above"),
                };
                source_reg.insert(key, r);
            }
        }
        // Pass 2: one instruction per member.
        for (&m, srcs) in group.members.iter().zip(&group.sources) {
            let node = &graph.nodes[m];
            let arg: Vec<usize> = srcs
                .iter()
                .zip(&node.args)
                .map(|(s, &a)| match s {
                    Source::Reg(n) => reg_of[n],
                    other => source_reg[&format!("{other:?}{}", graph.nodes[a].spec.dtype)],
                })
                .collect();
            let dst = new_reg(&mut k.classes, class_of(node.spec.dtype));
            let instr = match &node.op {
                Op::Fill { value, .. } => {
                    fills.push(Instr::Fill { dst, value: *value });
                    reg_of.insert(m, dst);
                    continue;
                }
                Op::Iota { .. } => iota_instr(graph, m, dst),
                Op::RandomUniform { salt, .. } => Instr::Random {
                    dst,
                    key: arg[0],
                    salt: *salt,
                },
                Op::Unary(op) => Instr::Unary {
                    dst,
                    op: *op,
                    a: arg[0],
                },
                Op::Binary(op) => Instr::Binary {
                    dst,
                    op: *op,
                    a: arg[0],
                    b: arg[1],
                },
                Op::Compare(op) => Instr::Compare {
                    dst,
                    op: *op,
                    a: arg[0],
                    b: arg[1],
                },
                Op::Select => Instr::Select {
                    dst,
                    c: arg[0],
                    a: arg[1],
                    b: arg[2],
                },
                Op::Cast { to } => Instr::Cast {
                    dst,
                    a: arg[0],
                    to: *to,
                },
                other => unreachable!("{} is not elementwise", other.name()),
            };
            compute.push(instr);
            reg_of.insert(m, dst);
        }
        k.constants = fills.len();
        k.instrs = fills.into_iter().chain(loads).chain(compute).collect();
        k.stores = group.stores.iter().map(|s| reg_of[s]).collect();
        k
    }

    /// Number of register instructions (for listings).
    pub fn instr_count(&self) -> usize {
        self.instrs.len()
    }

    /// Run over all elements, reading `inputs` and writing `outputs`.
    pub fn run(&self, inputs: &[Raw], outputs: &[Raw]) {
        let n = self.numel;
        if n <= TASK {
            self.run_range(inputs, outputs, 0, n);
        } else {
            (0..n.div_ceil(TASK)).into_par_iter().for_each(|t| {
                let start = t * TASK;
                self.run_range(inputs, outputs, start, (start + TASK).min(n));
            });
        }
    }

    /// Elements `start..end`, in the widest build of the loops this CPU runs.
    fn run_range(&self, inputs: &[Raw], outputs: &[Raw], start: usize, end: usize) {
        #[cfg(target_arch = "x86_64")]
        if super::simd::avx2() {
            #[target_feature(enable = "avx2")]
            unsafe fn wide(
                k: &FusedKernel,
                inputs: &[Raw],
                outputs: &[Raw],
                start: usize,
                end: usize,
            ) {
                k.run_range_inline(inputs, outputs, start, end)
            }
            // SAFETY: the CPU has AVX2 (checked above).
            return unsafe { wide(self, inputs, outputs, start, end) };
        }
        self.run_range_inline(inputs, outputs, start, end)
    }

    /// The chunk loop; inlined into each build of [`FusedKernel::run_range`].
    #[inline(always)]
    fn run_range_inline(&self, inputs: &[Raw], outputs: &[Raw], start: usize, end: usize) {
        let mut regs: Vec<Reg> = self.classes.iter().map(|&c| Reg::new(c)).collect();
        for instr in &self.instrs[..self.constants] {
            exec(instr, &mut regs, inputs, 0, CHUNK);
        }
        let mut at = start;
        while at < end {
            let len = CHUNK.min(end - at);
            for instr in &self.instrs[self.constants..] {
                exec(instr, &mut regs, inputs, at, len);
            }
            for (&r, out) in self.stores.iter().zip(outputs) {
                store(&regs[r], *out, at, len);
            }
            at += len;
        }
    }
}

fn iota_instr(graph: &Graph, n: NodeId, dst: usize) -> Instr {
    let Op::Iota { axis, shape } = &graph.nodes[n].op else {
        unreachable!("iota")
    };
    let div: usize = shape[axis + 1..].iter().product();
    Instr::Iota {
        dst,
        div,
        dim: shape[*axis],
    }
}

#[cfg(test)]
mod tests;
