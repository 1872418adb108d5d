//! Fused elementwise kernels: a group of elementwise nodes compiled to a
//! short list of register instructions, evaluated over chunks of
//! [`CHUNK`] elements. Each instruction is a tight loop over one chunk
//! (vectorisable by the compiler), and the chunk's temporaries stay in L1:
//! the group never writes an intermediate to memory. Contiguous inputs are
//! read where they lie (`regs::View`), and a binary op on the single-use
//! result of another runs with it in one pass (`pairs`). Large groups split
//! their index range over rayon tasks.
//!
//! A group with reduction tails (`fusion::Tail`) runs by blocks of whole
//! rows instead: each task computes its rows chunk by chunk, keeps the
//! tails' inputs in a block-sized scratch buffer (L2), and reduces the block
//! with the same row kernels the unfused reduction uses, so fusing never
//! changes a result bit.
//!
//! A group that is a known long chain (the Adam update, `whole`) runs as
//! one loop keeping its temporaries in vector registers instead, bit for
//! bit the chunk loop's results.
//!
//! The chunk loops (`chunk`) are built three times: for the architecture's
//! baseline and inside AVX2 and AVX-512 entry points chosen at run time,
//! once per task ([`super::simd`]). Without it the crate's SSE2 build left most
//! loops scalar: the MLP's Adam update ran at ~37 instructions per element
//! (1 thread, callgrind), ~19 with it.

mod chunk;
mod pairs;
mod regs;
mod whole;

pub use chunk::uniform;

use super::raw::Raw;
use super::reduce::{self, Reduction};
use crate::fusion::{Access, FusedGroup, RowLayout, Source};
use crate::ir::{Graph, NodeId, Op};
use chunk::{exec, store, Instr, Reads};
use nitro_device::{DType, HostBuffer};
use rayon::prelude::*;
use regs::{class_of, operand, viewable, Class, Reg, View};
use std::cell::RefCell;
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
    /// Nodes it writes, in output order: stored members, then tails.
    pub outputs: Vec<NodeId>,
    classes: Vec<Class>,
    /// Per register: the input it reads in place, if it is a view (a
    /// contiguous load in the input's own dtype needs no copy).
    views: Vec<Option<View>>,
    /// Constants and scalar loads (run once per task), then per-chunk loads,
    /// then computations.
    instrs: Vec<Instr>,
    /// How many leading instructions run once per task.
    constants: usize,
    stores: Vec<usize>,
    numel: usize,
    tails: Vec<TailReduce>,
    /// Rows and elements per row of the tails (all alike; 0 without tails).
    rows: usize,
    row_len: usize,
    /// The group as one register-resident loop, when it is a known chain
    /// (`whole`); the instructions above stay for listings.
    whole: Option<whole::Whole>,
}

/// A reduction of one register's values, row block by row block.
#[derive(Clone, Debug)]
struct TailReduce {
    reg: usize,
    kind: Reduction,
    layout: RowLayout,
    row_outputs: usize,
    dtype: DType,
}

impl FusedKernel {
    /// Compile a fused group of `graph`.
    pub fn new(graph: &Graph, group: &FusedGroup) -> FusedKernel {
        let mut k = FusedKernel {
            inputs: vec![],
            outputs: group.stores.clone(),
            classes: vec![],
            views: vec![],
            instrs: vec![],
            constants: 0,
            stores: vec![],
            numel: group.numel,
            tails: vec![],
            rows: group.tails.first().map_or(0, |t| t.blocks.rows),
            row_len: group.tails.first().map_or(0, |t| t.blocks.row_len()),
            whole: None,
        };
        let mut reg_of: HashMap<NodeId, usize> = HashMap::new();
        let mut source_reg: HashMap<String, usize> = HashMap::new();
        let mut loads = vec![];
        let mut views = vec![];
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
                        let dtype = graph.nodes[*node].spec.dtype;
                        let r = new_reg(&mut k.classes, class_of(dtype));
                        if matches!(access, Access::Contiguous | Access::Offset(_))
                            && viewable(dtype)
                        {
                            // Read where it lies: a copy into a register
                            // was a pass over the chunk per input (~a fifth
                            // of an Adam update's passes).
                            let start = access.start();
                            views.push((r, View { input, start }));
                            source_reg.insert(key, r);
                            continue;
                        }
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
        k.views = vec![None; k.classes.len()];
        for (r, v) in views {
            k.views[r] = Some(v);
        }
        k.stores = group.stores.iter().map(|s| reg_of[s]).collect();
        for t in &group.tails {
            k.outputs.push(t.node);
            k.tails.push(TailReduce {
                reg: reg_of[&t.input],
                kind: match graph.nodes[t.node].op {
                    Op::ReduceSum { .. } => Reduction::Sum,
                    _ => Reduction::Max,
                },
                layout: t.blocks.layout,
                row_outputs: t.blocks.row_outputs(),
                dtype: graph.nodes[t.input].spec.dtype,
            });
        }
        let kept: Vec<usize> = k
            .stores
            .iter()
            .chain(k.tails.iter().map(|t| &t.reg))
            .copied()
            .collect();
        let compute = pairs::fuse_pairs(pairs::gelu_pairs(compute), &k.classes, &kept);
        k.constants = fills.len();
        k.instrs = fills.into_iter().chain(loads).chain(compute).collect();
        if group.tails.is_empty() {
            let dtypes = |nodes: &[NodeId]| -> Vec<DType> {
                nodes.iter().map(|&n| graph.nodes[n].spec.dtype).collect()
            };
            let (constants, compute) = k.instrs.split_at(k.constants);
            k.whole = whole::recognize(&whole::Shape {
                constants,
                compute,
                views: &k.views,
                classes: &k.classes,
                stores: &k.stores,
                out_dtypes: &dtypes(&group.stores),
                in_dtypes: &dtypes(&k.inputs),
            });
        }
        k
    }

    /// What the kernel runs, for listings: its register instruction
    /// count, and the whole-group loop that replaces them, if any.
    pub fn label(&self) -> String {
        match &self.whole {
            Some(w) => format!("{} instrs as {}", self.instrs.len(), w.name()),
            None => format!("{} instrs", self.instrs.len()),
        }
    }

    /// Run over all elements, reading `inputs` and writing `outputs`.
    pub fn run(&self, inputs: &[Raw], outputs: &[Raw]) {
        let n = self.numel;
        if !self.tails.is_empty() {
            return self.run_rows(inputs, outputs);
        }
        if n <= TASK {
            self.run_range(inputs, outputs, &[], 0, n);
        } else {
            (0..n.div_ceil(TASK)).into_par_iter().for_each(|t| {
                let start = t * TASK;
                self.run_range(inputs, outputs, &[], start, (start + TASK).min(n));
            });
        }
    }

    /// Elements `start..end` on the calling thread (a matmul epilogue's
    /// block of rows; groups without tails only).
    pub fn run_span(&self, inputs: &[Raw], outputs: &[Raw], start: usize, end: usize) {
        debug_assert!(self.tails.is_empty(), "epilogue groups have no tails");
        self.run_range(inputs, outputs, &[], start, end);
    }

    /// A group with tails: tasks of whole rows (about [`TASK`] elements),
    /// each computing its block into scratch and reducing it there.
    fn run_rows(&self, inputs: &[Raw], outputs: &[Raw]) {
        let (stores, tail_outs) = outputs.split_at(self.stores.len());
        let per_task = (TASK / self.row_len.max(1)).max(1);
        let block = |t: usize| {
            let (r0, r1) = (t * per_task, ((t + 1) * per_task).min(self.rows));
            let len = (r1 - r0) * self.row_len;
            TAIL_SCRATCH.with(|cell| {
                let (mut own, mut kept) = (Vec::new(), cell.try_borrow_mut());
                // A thread that re-entered gets buffers of its own.
                let pool = kept.as_deref_mut().unwrap_or(&mut own);
                let raws = scratch_for(pool, &self.tails, len);
                let start = r0 * self.row_len;
                self.run_range(inputs, stores, &raws, start, start + len);
                for ((tail, &src), &out) in self.tails.iter().zip(&raws).zip(tail_outs) {
                    let per = tail.row_outputs;
                    let dst = out.sub(r0 * per, (r1 - r0) * per);
                    reduce::reduce_rows(tail.kind, tail.layout, src, dst);
                }
            });
        };
        let tasks = self.rows.div_ceil(per_task);
        if self.numel <= TASK {
            (0..tasks).for_each(block);
        } else {
            (0..tasks).into_par_iter().for_each(block);
        }
    }

    /// Elements `start..end`, in the widest build of the loops this CPU
    /// runs; the tails' inputs go to `scratch` (indexed from `start`).
    fn run_range(
        &self,
        inputs: &[Raw],
        outputs: &[Raw],
        scratch: &[Raw],
        start: usize,
        end: usize,
    ) {
        let span = Span {
            inputs,
            outputs,
            scratch,
            start,
            end,
        };
        REGISTERS.with(|cell| match cell.try_borrow_mut() {
            Ok(mut pool) => self.run_wide(fit(&mut pool, &self.classes), span),
            // Only if a thread re-entered (nothing in the chunk loop runs
            // another kernel today): registers of its own.
            Err(_) => {
                let mut regs: Vec<Reg> = self.classes.iter().map(|&c| Reg::new(c)).collect();
                self.run_wide(&mut regs, span)
            }
        })
    }

    /// [`FusedKernel::run_chunks`] in the widest build this CPU runs. On
    /// Zen 5, which runs 512-bit vectors at full width, the AVX-512 build
    /// takes ~5% off a GPT forward: the f64-evaluated transcendentals
    /// (erf, exp, tanh) of GELU and softmax are compute-bound.
    fn run_wide(&self, regs: &mut [Reg], span: Span<'_>) {
        super::simd::widest!([] (k: &FusedKernel = self, regs: &mut [Reg] = regs, span: Span<'_> = span) {
            k.run_chunks(regs, span)
        })
    }

    /// The chunk loop over `regs`, one register per class of the kernel
    /// (contents on entry unspecified: every instruction writes its
    /// destination before anything reads it); inlined into each build of
    /// [`FusedKernel::run_wide`].
    #[inline(always)]
    fn run_chunks(&self, regs: &mut [Reg], span: Span<'_>) {
        let Span {
            inputs,
            outputs,
            scratch,
            start,
            end,
        } = span;
        let views = &self.views;
        let reads = Reads { inputs, views };
        for instr in &self.instrs[..self.constants] {
            exec(instr, regs, reads, 0, CHUNK);
        }
        if let Some(w) = &self.whole {
            return w.run(regs, span);
        }
        let mut at = start;
        while at < end {
            let len = CHUNK.min(end - at);
            for instr in &self.instrs[self.constants..] {
                exec(instr, regs, reads, at, len);
            }
            for (&r, out) in self.stores.iter().zip(outputs) {
                store(operand(regs, views, inputs, r, at, len), *out, at, len);
            }
            for (tail, out) in self.tails.iter().zip(scratch) {
                let r = operand(regs, views, inputs, tail.reg, at, len);
                store(r, *out, at - start, len);
            }
            at += len;
        }
    }
}

/// What one call of the chunk loop covers: elements `start..end` of the
/// group, its buffers, and the tails' scratch (indexed from `start`).
#[derive(Clone, Copy)]
pub(super) struct Span<'a> {
    pub inputs: &'a [Raw],
    pub outputs: &'a [Raw],
    pub scratch: &'a [Raw],
    pub start: usize,
    pub end: usize,
}

thread_local! {
    /// This thread's register file, kept from one kernel call to the next:
    /// a fresh one per task (a zeroed allocation per register) cost 2-3%
    /// of a GPT step in calloc and free.
    static REGISTERS: RefCell<Vec<Reg>> = const { RefCell::new(Vec::new()) };
    /// This thread's scratch for the tails' inputs (a block of rows each),
    /// kept likewise instead of a zeroed allocation per task.
    static TAIL_SCRATCH: RefCell<Vec<HostBuffer>> = const { RefCell::new(Vec::new()) };
}

/// `len` elements of scratch per tail, in this thread's buffers (grown and
/// retyped as needed; contents unspecified: the chunk loop writes every
/// element before the reduction reads it).
fn scratch_for(pool: &mut Vec<HostBuffer>, tails: &[TailReduce], len: usize) -> Vec<Raw> {
    for (i, t) in tails.iter().enumerate() {
        match pool.get(i) {
            Some(b) if b.dtype() == t.dtype && b.len() >= len => {}
            Some(_) => pool[i] = HostBuffer::zeros(t.dtype, len),
            None => pool.push(HostBuffer::zeros(t.dtype, len)),
        }
    }
    pool[..tails.len()]
        .iter_mut()
        .map(|b| Raw::of(b).sub(0, len))
        .collect()
}

/// The first `classes.len()` registers of `pool`, each of its class
/// (registers of another class are replaced, missing ones added).
fn fit<'p>(pool: &'p mut Vec<Reg>, classes: &[Class]) -> &'p mut [Reg] {
    for (i, &c) in classes.iter().enumerate() {
        match pool.get(i) {
            Some(r) if r.class() == c => {}
            Some(_) => pool[i] = Reg::new(c),
            None => pool.push(Reg::new(c)),
        }
    }
    &mut pool[..classes.len()]
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

/// The baseline build of the chunk loop over every element, past any
/// whole-group loop: what the tests compare the other paths against.
#[cfg(test)]
impl FusedKernel {
    fn run_baseline(&self, inputs: &[Raw], outputs: &[Raw]) {
        let k = FusedKernel {
            whole: None,
            ..self.clone()
        };
        let mut regs: Vec<Reg> = k.classes.iter().map(|&c| Reg::new(c)).collect();
        let span = Span {
            inputs,
            outputs,
            scratch: &[],
            start: 0,
            end: k.numel,
        };
        k.run_chunks(&mut regs, span)
    }
}

#[cfg(test)]
mod tests;
