//! The CPU backend: runs a scheduled, planned graph on host buffers.
//!
//! Fused elementwise groups run as chunked register loops (`fused`),
//! matmuls through the `gemm` crate (`matmul`), reductions and data
//! movement through a few strided kernels (`reduce`, `movement`),
//! attention by (batch, head) tasks over the fused projection
//! (`attention`), layer normalisation by rows (`layer_norm`), the
//! convolution's patch matrices through `patches` (or, for a product the
//! fuser marked, no patch matrix at all: `conv`), all-reduces through the
//! communicator the call was given (`collective`). The
//! workspace (every intermediate buffer of the memory plan) is allocated on
//! the first call and reused by every later one.

mod attention;
mod collective;
mod conv;
mod fused;
mod layer_norm;
mod matmul;
mod movement;
mod patches;
mod pool;
mod raw;
mod reduce;
mod sgemm;
mod simd;
mod transpose;

pub use fused::{uniform, FusedKernel};
pub use pool::on_workers;
pub use simd::simd_level;

use crate::fusion::{strides_of, Kernel, Schedule};
use crate::ir::{Graph, NodeId, Op};
use crate::plan::{MemoryPlan, Storage};
use collective::{Fold, Staging};
use nitro_device::collective::{CollectiveError, Communicator};
use nitro_device::HostArray as Array;
use nitro_device::HostBuffer;
use raw::Raw;
use reduce::Reduction;
use std::cell::Cell;
use std::sync::Mutex;

enum CpuKernel {
    Fused(FusedKernel),
    Single(NodeId),
    /// A direct convolution: the matmul node and its `im2col` argument.
    Conv(NodeId, NodeId),
    /// A matmul and its epilogue group.
    Epilogue(NodeId, FusedKernel),
    /// An all-reduce: the one kernel that talks to other processes, and
    /// the one that can fail at run time. With a concat folded into it
    /// (see [`collective::fold`]), the concat's parts go to the
    /// communicator as they are, or are computed straight into its memory.
    Collective(NodeId, Option<Fold>),
    /// A concat the next kernel, its all-reduce, writes instead.
    Folded(NodeId),
}

struct Workspace {
    slots: Vec<HostBuffer>,
    literals: Vec<HostBuffer>,
}

/// A program lowered for the CPU.
pub struct CpuExecutable {
    kernels: Vec<CpuKernel>,
    workspace: Mutex<Option<Workspace>>,
}

impl CpuExecutable {
    /// Lower a scheduled graph.
    pub fn new(graph: &Graph, schedule: &Schedule) -> CpuExecutable {
        let folded = |k: usize| collective::fold(graph, schedule, k);
        let kernels = schedule
            .kernels
            .iter()
            .enumerate()
            .map(|(k, kernel)| match kernel {
                Kernel::Fused(g) => CpuKernel::Fused(FusedKernel::new(graph, g)),
                Kernel::Single(n) if matches!(graph.nodes[*n].op, Op::AllReduceSum { .. }) => {
                    CpuKernel::Collective(*n, folded(k))
                }
                Kernel::Single(n) if folded(k + 1).is_some_and(|f| f.concat == *n) => {
                    CpuKernel::Folded(*n)
                }
                Kernel::Single(n) => CpuKernel::Single(*n),
                Kernel::Conv { out, patches } => CpuKernel::Conv(*out, *patches),
                Kernel::Epilogue { matmul, group } => {
                    CpuKernel::Epilogue(*matmul, FusedKernel::new(graph, group))
                }
            })
            .collect();
        CpuExecutable {
            kernels,
            workspace: Mutex::new(None),
        }
    }

    /// One line per kernel, for listings.
    pub fn describe(&self, graph: &Graph) -> Vec<String> {
        self.kernels
            .iter()
            .map(|k| match k {
                CpuKernel::Fused(f) => format!(
                    "fused[{}] reads {:?} writes {:?}",
                    f.label(),
                    f.inputs.iter().map(|n| format!("%{n}")).collect::<Vec<_>>(),
                    f.outputs
                        .iter()
                        .map(|n| format!("%{n}"))
                        .collect::<Vec<_>>()
                ),
                CpuKernel::Conv(n, _) => format!("conv -> %{n}: {}", graph.nodes[*n].spec),
                CpuKernel::Epilogue(n, f) => format!(
                    "matmul -> %{n}: {} + epilogue[{}] writes {:?}",
                    graph.nodes[*n].spec,
                    f.label(),
                    f.outputs
                        .iter()
                        .map(|o| format!("%{o}"))
                        .collect::<Vec<_>>()
                ),
                CpuKernel::Folded(n) => format!(
                    "concat -> %{n}: {} (written by the all-reduce)",
                    graph.nodes[*n].spec
                ),
                CpuKernel::Single(n) | CpuKernel::Collective(n, _) => format!(
                    "{} -> %{n}: {}",
                    graph.nodes[*n].op.name(),
                    graph.nodes[*n].spec
                ),
            })
            .collect()
    }

    fn new_workspace(graph: &Graph, plan: &MemoryPlan) -> Workspace {
        let slots = plan
            .slots
            .iter()
            .map(|&(d, n)| HostBuffer::zeros(d, n))
            .collect();
        let literals = plan.literal_values(graph);
        Workspace { slots, literals }
    }

    /// Run with `inputs` (already checked against the signature); donated
    /// outputs are written into their inputs, the rest are returned. All-
    /// reduces go through `comm`; without one they are the identity (the
    /// caller checked that every all-reduce is over a world of one). Only
    /// an all-reduce can fail; inputs are then left as they were unless the
    /// plan updates them in place before it.
    pub fn run(
        &self,
        graph: &Graph,
        plan: &MemoryPlan,
        inputs: &mut [Array],
        comm: Option<&dyn Communicator>,
    ) -> Result<Vec<Array>, CollectiveError> {
        self.run_timed(graph, plan, inputs, comm, None)
    }

    /// As [`CpuExecutable::run`], recording each kernel's wall time (ms) in
    /// `times` when given.
    pub fn run_timed(
        &self,
        graph: &Graph,
        plan: &MemoryPlan,
        inputs: &mut [Array],
        comm: Option<&dyn Communicator>,
        times: Option<&mut Vec<f64>>,
    ) -> Result<Vec<Array>, CollectiveError> {
        let mut guard = self.workspace.try_lock().ok();
        let mut ws = match guard.as_mut().and_then(|g| g.take()) {
            Some(ws) => ws,
            None => Self::new_workspace(graph, plan),
        };
        // Slots handed over as returned outputs by the last call.
        for (slot, &(dtype, len)) in ws.slots.iter_mut().zip(&plan.slots) {
            if slot.len() != len {
                *slot = HostBuffer::zeros(dtype, len);
            }
        }
        let outputs = self.run_in(graph, plan, inputs, &mut ws, comm, times);
        // A failed all-reduce may leave its slot empty (the communicator
        // keeps the buffer MPI may still write): the next call starts over.
        if let (Some(g), true) = (guard.as_mut(), outputs.is_ok()) {
            **g = Some(ws);
        }
        outputs
    }

    fn run_in(
        &self,
        graph: &Graph,
        plan: &MemoryPlan,
        inputs: &mut [Array],
        ws: &mut Workspace,
        comm: Option<&dyn Communicator>,
        mut times: Option<&mut Vec<f64>>,
    ) -> Result<Vec<Array>, CollectiveError> {
        {
            let input_raw: Vec<Raw> = inputs.iter_mut().map(|a| Raw::of(a.data_mut())).collect();
            // Cells: an all-reduce may hand its slot back in another
            // allocation, and every later reader must see the new one.
            let slot_raw: Vec<Cell<Raw>> =
                ws.slots.iter_mut().map(|b| Cell::new(Raw::of(b))).collect();
            let lit_raw: Vec<Raw> = ws.literals.iter_mut().map(Raw::of).collect();
            // A data-parallel step's gradients computed straight into the
            // communicator's memory, where it offers some (see
            // `collective::stage`): the parts' producers write there.
            let mut staged = match comm {
                Some(comm) => self.stage(graph, plan, ws, comm)?,
                None => None,
            };
            let redirected: Vec<(NodeId, Raw)> =
                staged.as_ref().map_or(vec![], |s| s.parts.clone());
            let raw = |n: NodeId| {
                if let Some(&(_, r)) = redirected.iter().find(|(m, _)| *m == n) {
                    return r;
                }
                match plan.storage[n] {
                    Storage::Input(i) => input_raw[i],
                    Storage::Literal(i) => lit_raw[i],
                    Storage::Slot(i) => slot_raw[i].get(),
                    Storage::Virtual => unreachable!("node %{n} read but never stored"),
                }
            };
            let raws = |nodes: &[NodeId]| nodes.iter().map(|&n| raw(n)).collect::<Vec<Raw>>();
            for (k, kernel) in self.kernels.iter().enumerate() {
                let start = times.as_ref().map(|_| std::time::Instant::now());
                match kernel {
                    CpuKernel::Fused(f) => {
                        f.run(&raws(&f.inputs), &raws(&f.outputs));
                    }
                    CpuKernel::Single(n) => run_single(graph, *n, &raw),
                    CpuKernel::Epilogue(mm, f) => {
                        let (ins, outs) = (raws(&f.inputs), raws(&f.outputs));
                        let node = &graph.nodes[*mm];
                        let Op::MatMul { ta, tb } = node.op else {
                            unreachable!("an epilogue follows a matmul")
                        };
                        let cols = node.spec.shape[1];
                        let rows =
                            |r0: usize, r1: usize| f.run_span(&ins, &outs, r0 * cols, r1 * cols);
                        let shape = |i: usize| graph.nodes[node.args[i]].spec.shape.as_slice();
                        let (a, b) = (raw(node.args[0]), raw(node.args[1]));
                        if !matmul::matmul_then(
                            a,
                            b,
                            raw(*mm),
                            shape(0),
                            shape(1),
                            ta,
                            tb,
                            Some(&rows),
                        ) {
                            f.run(&ins, &outs);
                        }
                    }
                    CpuKernel::Conv(n, patches) => {
                        let Op::Im2Col { window } = graph.nodes[*patches].op else {
                            unreachable!("the fuser pairs a matmul with its im2col")
                        };
                        let image = graph.nodes[*patches].args[0];
                        conv::direct_conv(
                            raw(graph.nodes[*n].args[0]),
                            raw(image),
                            raw(*n),
                            &graph.nodes[image].spec.shape,
                            graph.nodes[*n].spec.shape[0],
                            window,
                        );
                    }
                    CpuKernel::Folded(_) => {}
                    CpuKernel::Collective(n, folded) => {
                        let src = graph.nodes[*n].args[0];
                        match own_slot(graph, plan, &ws.slots, *n) {
                            // The slot is the buffer reduced: no staging copy.
                            Some(s) => {
                                let slot = &mut ws.slots[s];
                                match (folded, staged.take_if(|st| st.kernel == k)) {
                                    (_, Some(st)) => collective::staged_into_slot(st, slot, comm)?,
                                    (Some(f), None) => {
                                        let parts: Vec<Raw> = graph.nodes[f.concat]
                                            .args
                                            .iter()
                                            .map(|&a| raw(a).sub(0, graph.nodes[a].spec.numel()))
                                            .collect();
                                        collective::parts_into_slot(&parts, slot, comm)?
                                    }
                                    (None, None) => collective::into_slot(raw(src), slot, comm)?,
                                }
                                slot_raw[s].set(Raw::of(&mut ws.slots[s]));
                            }
                            None => {
                                if let Some(f) = folded {
                                    run_single(graph, f.concat, &raw);
                                }
                                collective::into_raw(raw(src), raw(*n), comm)?
                            }
                        }
                    }
                }
                if let (Some(t), Some(start)) = (times.as_mut(), start) {
                    t.push(start.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        for &(input, output) in &plan.swapped {
            let node = graph.outputs[output].1;
            match plan.storage[node] {
                Storage::Slot(s) => inputs[input].swap_data(&mut ws.slots[s]),
                other => {
                    let data = self.read(other, inputs, ws).clone();
                    *inputs[input].data_mut() = data;
                }
            }
        }
        // A returned output in a slot is handed over, not copied (a copy
        // of a 4 MB product took 0.3 ms, 4% of the product): the next call
        // makes the slot anew. Inputs and literals are copied, and so is a
        // slot that a later returned output reads too (one node under two
        // names).
        let returned = plan.returned_outputs(graph);
        let node_of = |o: usize| graph.outputs[o].1;
        Ok(returned
            .iter()
            .enumerate()
            .map(|(i, &o)| {
                let node = node_of(o);
                let storage = plan.storage[node];
                let read_later = returned[i + 1..]
                    .iter()
                    .any(|&later| plan.storage[node_of(later)] == storage);
                let data = match storage {
                    Storage::Slot(s) if !read_later => {
                        std::mem::replace(&mut ws.slots[s], HostBuffer::zeros(plan.slots[s].0, 0))
                    }
                    other => self.read(other, inputs, ws).clone(),
                };
                Array::new(&graph.nodes[node].spec.shape, data)
                    .expect("planned buffers match their specs")
            })
            .collect())
    }

    /// The program's first all-reduce's contribution staged in `comm`'s
    /// memory, where it is a folded concat, the communicator offers memory
    /// and the plan allows it (the sum has a slot of its own size). Only
    /// the first: no other collective may come between staging and
    /// reducing.
    fn stage(
        &self,
        graph: &Graph,
        plan: &MemoryPlan,
        ws: &Workspace,
        comm: &dyn Communicator,
    ) -> Result<Option<Staging>, CollectiveError> {
        let first = self.kernels.iter().enumerate().find_map(|(k, c)| match c {
            CpuKernel::Collective(n, fold) => Some((k, *n, fold.as_ref())),
            _ => None,
        });
        let Some((kernel, n, Some(fold))) = first else {
            return Ok(None);
        };
        if own_slot(graph, plan, &ws.slots, n).is_none() {
            return Ok(None);
        }
        collective::stage(graph, plan, n, fold, comm, kernel)
    }

    fn read<'a>(&self, storage: Storage, inputs: &'a [Array], ws: &'a Workspace) -> &'a HostBuffer {
        match storage {
            Storage::Input(i) => inputs[i].data(),
            Storage::Literal(i) => &ws.literals[i],
            Storage::Slot(i) => &ws.slots[i],
            Storage::Virtual => unreachable!("outputs are always stored"),
        }
    }
}

/// The slot all-reduce `n` sums in, when the plan gave it one of exactly
/// its dtype and length (else it sums through a staging buffer).
fn own_slot(graph: &Graph, plan: &MemoryPlan, slots: &[HostBuffer], n: NodeId) -> Option<usize> {
    let spec = &graph.nodes[n].spec;
    match plan.storage[n] {
        Storage::Slot(s) if (slots[s].dtype(), slots[s].len()) == (spec.dtype, spec.numel()) => {
            Some(s)
        }
        _ => None,
    }
}

fn run_single(graph: &Graph, n: NodeId, raw: &dyn Fn(NodeId) -> Raw) {
    let node = &graph.nodes[n];
    let out = raw(n);
    let arg = |i: usize| raw(node.args[i]);
    let arg_shape = |i: usize| graph.nodes[node.args[i]].spec.shape.as_slice();
    let shape = node.spec.shape.as_slice();
    match &node.op {
        Op::MatMul { ta, tb } => {
            matmul::matmul(arg(0), arg(1), out, arg_shape(0), arg_shape(1), *ta, *tb)
        }
        Op::ReduceSum { axes } => reduce::reduce(Reduction::Sum, arg(0), out, arg_shape(0), axes),
        Op::ReduceMax { axes } => reduce::reduce(Reduction::Max, arg(0), out, arg_shape(0), axes),
        Op::Permute { perm } => {
            let base = strides_of(arg_shape(0));
            let strides: Vec<usize> = perm.iter().map(|&p| base[p]).collect();
            movement::gather(arg(0), out, shape, &strides, 0);
        }
        Op::Broadcast { .. } => {
            let src = arg_shape(0);
            let base = strides_of(src);
            let strides: Vec<usize> = (0..src.len())
                .map(|d| if src[d] == 1 { 0 } else { base[d] })
                .collect();
            movement::gather(arg(0), out, shape, &strides, 0);
        }
        Op::Slice { start, stride, .. } => {
            let base = strides_of(arg_shape(0));
            let strides: Vec<usize> = (0..base.len()).map(|d| base[d] * stride[d]).collect();
            let offset: usize = (0..base.len()).map(|d| base[d] * start[d]).sum();
            movement::gather(arg(0), out, shape, &strides, offset);
        }
        Op::Pad {
            lo,
            interior,
            value,
            ..
        } => {
            movement::fill(out, *value);
            let base = strides_of(shape);
            let strides: Vec<usize> = (0..base.len())
                .map(|d| base[d] * (interior[d] + 1))
                .collect();
            let offset: usize = (0..base.len()).map(|d| base[d] * lo[d]).sum();
            movement::scatter(arg(0), out, arg_shape(0), &strides, offset);
        }
        Op::Concat { axis } => {
            let after: usize = shape[axis + 1..].iter().product();
            let srcs: Vec<Raw> = (0..node.args.len()).map(arg).collect();
            let widths: Vec<usize> = (0..node.args.len())
                .map(|i| arg_shape(i)[*axis] * after)
                .collect();
            movement::concat(&srcs, &widths, out);
        }
        Op::Take => movement::take(arg(0), arg(1), out, arg_shape(0)[0]),
        Op::ScatterAdd { rows } => movement::scatter_add(arg(0), arg(1), out, *rows),
        Op::Im2Col { window } => patches::im2col(arg(0), out, arg_shape(0), *window),
        Op::Col2Im { image, window } => patches::col2im(arg(0), out, image, *window),
        Op::Attention { heads, causal } => {
            attention::attention(arg(0), out, arg_shape(0), *heads, *causal)
        }
        Op::LayerNorm { eps } => layer_norm::layer_norm(
            arg(0),
            arg(1),
            arg(2),
            out,
            *shape.last().unwrap_or(&0),
            *eps,
        ),
        Op::LayerNormGrad { eps } => layer_norm::layer_norm_grad(
            arg(0),
            arg(1),
            arg(2),
            out,
            *shape.last().unwrap_or(&0),
            *eps,
        ),
        Op::AttentionGrad { heads, causal } => {
            attention::attention_grad(arg(0), arg(1), out, arg_shape(0), *heads, *causal)
        }
        other => unreachable!("{} is not a single kernel", other.name()),
    }
}
