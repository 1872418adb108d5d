//! The memory plan: where every stored value lives, and when its buffer is
//! reused.
//!
//! Values that kernels produce get *slots* in a workspace that a program
//! keeps between calls (steady-state calls allocate nothing but their
//! returned outputs). Slots are assigned by liveness in execution order: a
//! value's slot returns to the free list after its last reader, and a new
//! value takes a free slot of the same dtype and length before a new one is
//! made. An elementwise kernel (or a matmul's epilogue) may also write a
//! value over an input of its own that dies there, when it reads that input
//! element for element (`overwritable_input`). Donated inputs (a train
//! step's params and optimizer state) are updated *in place*: the kernel
//! that computes the new value writes into the input's own buffer when
//! nothing reads the old value afterwards and the write is elementwise;
//! otherwise the result is swapped in at the end of the call, which still
//! allocates nothing.

use crate::fusion::{FusedGroup, Kernel, Schedule, Source};
use crate::ir::{Graph, NodeId, Op};
use nitro_device::DType;

/// Where a stored value's buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The caller's `i`-th input.
    Input(usize),
    /// The program's `i`-th baked constant.
    Literal(usize),
    /// Workspace slot `i`.
    Slot(usize),
    /// Not in memory (computed inline or never needed).
    Virtual,
}

/// Liveness-based buffer assignment for one schedule.
#[derive(Clone, Debug, Default)]
pub struct MemoryPlan {
    /// Per node, where its value lives (reshapes share their base's storage).
    pub storage: Vec<Storage>,
    /// Dtype and element count of each workspace slot.
    pub slots: Vec<(DType, usize)>,
    /// Literal nodes, by literal index.
    pub literals: Vec<NodeId>,
    /// Per kernel, the slots whose values die after it (for reporting).
    pub frees: Vec<Vec<usize>>,
    /// Bytes of the workspace (the planned peak of intermediate values).
    pub peak_bytes: usize,
    /// Bytes intermediates would take with no reuse at all.
    pub unshared_bytes: usize,
    /// Donations written in place: (input, output).
    pub in_place: Vec<(usize, usize)>,
    /// Donations handed back by swapping buffers at the end: (input, output).
    pub swapped: Vec<(usize, usize)>,
}

impl MemoryPlan {
    /// Every donation, in place or swapped: (input, output).
    pub fn donations(&self) -> impl Iterator<Item = &(usize, usize)> {
        self.in_place.iter().chain(&self.swapped)
    }

    /// Host values of the baked literals, by literal index, in their dtypes.
    pub fn literal_values(&self, graph: &Graph) -> Vec<nitro_device::HostBuffer> {
        self.literals
            .iter()
            .map(|&id| {
                let Op::Literal { values, .. } = &graph.nodes[id].op else {
                    unreachable!("the plan lists literal nodes only")
                };
                nitro_device::HostBuffer::F64(values.clone()).cast(graph.nodes[id].spec.dtype)
            })
            .collect()
    }

    /// Indices of the outputs a call returns (those not donated to an input).
    pub fn returned_outputs(&self, graph: &Graph) -> Vec<usize> {
        (0..graph.outputs.len())
            .filter(|o| !self.donations().any(|&(_, d)| d == *o))
            .collect()
    }
}

/// Follow reshapes to the node that owns the buffer.
pub fn base_of(graph: &Graph, mut n: NodeId) -> NodeId {
    while let Op::Reshape { .. } = graph.nodes[n].op {
        n = graph.nodes[n].args[0];
    }
    n
}

/// The stored values a fused group loads.
fn group_reads<'a>(graph: &'a Graph, g: &'a FusedGroup) -> impl Iterator<Item = NodeId> + 'a {
    g.sources.iter().flatten().filter_map(|s| match s {
        Source::Load { node, .. } => Some(base_of(graph, *node)),
        _ => None,
    })
}

/// Nodes each kernel reads from memory.
pub fn kernel_reads(graph: &Graph, kernel: &Kernel) -> Vec<NodeId> {
    match kernel {
        Kernel::Fused(g) => group_reads(graph, g).collect(),
        Kernel::Single(n) => graph.nodes[*n]
            .args
            .iter()
            .map(|&a| base_of(graph, a))
            .collect(),
        Kernel::Epilogue { matmul, group } => graph.nodes[*matmul]
            .args
            .iter()
            .map(|&a| base_of(graph, a))
            .chain(group_reads(graph, group))
            .collect(),
        // The kernel and the image the patch matrix would have come from.
        Kernel::Conv { out, patches } => vec![
            base_of(graph, graph.nodes[*out].args[0]),
            base_of(graph, graph.nodes[*patches].args[0]),
        ],
    }
}

/// The slots kernel `k` may write its stored member `p` into over one of
/// its own inputs (and an all-reduce, the slot of its dying argument):
/// slots of values that die at `k` (no later reader, not a
/// program output) and that the group reads only contiguously, i.e.
/// element `i` of a chunk where it writes element `i` of that chunk, after
/// every read of the chunk (how the CPU chunk loop and the CUDA threads
/// run, and how a donated input is updated in place already). Writing there
/// rather than into a second buffer keeps the output's lines in cache
/// (a matmul's epilogue rewrites the product's rows it has just read) and
/// halves the group's working set. An epilogue never overwrites its
/// matmul's operands: the product reads them until its last row block.
fn overwritable_input(
    graph: &Graph,
    kernel: &Kernel,
    p: NodeId,
    k: usize,
    last_read: &[Option<usize>],
    is_output: &[bool],
    plan: &MemoryPlan,
) -> Vec<usize> {
    let (group, operands) = match kernel {
        Kernel::Fused(g) => (g, &[][..]),
        Kernel::Epilogue { matmul, group } => (group, graph.nodes[*matmul].args.as_slice()),
        // An all-reduce sums its argument's buffer where it is when the
        // argument dies there (the flat gradient of a data-parallel step):
        // no gradient-sized copy into a buffer of its own.
        Kernel::Single(n) if *n == p && matches!(graph.nodes[p].op, Op::AllReduceSum { .. }) => {
            let b = base_of(graph, graph.nodes[p].args[0]);
            return match plan.storage[b] {
                Storage::Slot(s) if last_read[b] == Some(k) && !is_output[b] => vec![s],
                _ => vec![],
            };
        }
        _ => return vec![],
    };
    if !group.stores.contains(&p) {
        return vec![];
    }
    let loads = || {
        group.sources.iter().flatten().filter_map(|s| match s {
            Source::Load { node, access } => Some((base_of(graph, *node), access)),
            _ => None,
        })
    };
    let mut slots = vec![];
    for (b, _) in loads() {
        let Storage::Slot(s) = plan.storage[b] else {
            continue;
        };
        let dies_here = last_read[b] == Some(k) && !is_output[b];
        let contiguous = loads()
            .filter(|(n, _)| *n == b)
            .all(|(_, a)| *a == crate::fusion::Access::Contiguous);
        let operand = operands.iter().any(|&a| base_of(graph, a) == b);
        if dies_here && contiguous && !operand && !slots.contains(&s) {
            slots.push(s);
        }
    }
    slots
}

/// Plan buffers for `schedule`, updating `donate` (input, output) pairs in
/// place where that is safe.
pub fn plan(graph: &Graph, schedule: &Schedule, donate: &[(usize, usize)]) -> MemoryPlan {
    let n = graph.nodes.len();
    let k_count = schedule.kernels.len();
    let mut last_read = vec![None::<usize>; n];
    for (k, kernel) in schedule.kernels.iter().enumerate() {
        for b in kernel_reads(graph, kernel) {
            last_read[b] = Some(k);
        }
    }
    let is_output: Vec<bool> = {
        let mut v = vec![false; n];
        for &(_, o) in &graph.outputs {
            v[base_of(graph, o)] = true;
        }
        v
    };

    let mut plan = MemoryPlan {
        storage: vec![Storage::Virtual; n],
        frees: vec![vec![]; k_count],
        ..Default::default()
    };
    for (id, node) in graph.nodes.iter().enumerate() {
        match node.op {
            Op::Input { index } => plan.storage[id] = Storage::Input(index),
            Op::Literal { .. } => {
                plan.storage[id] = Storage::Literal(plan.literals.len());
                plan.literals.push(id);
            }
            _ => {}
        }
    }

    // Donations that can be written in place: the output is stored by a fused
    // kernel that is the last reader of the input and reads it contiguously.
    for &(input, output) in donate {
        let out_node = base_of(graph, graph.outputs[output].1);
        let in_node = graph.inputs[input].node;
        // An epilogue's group qualifies as a fused group does, provided its
        // matmul does not read the input (the group overwrites it row block
        // by row block while the product is still being computed).
        let fused = match schedule.producer[out_node].map(|k| (k, &schedule.kernels[k])) {
            Some((k, Kernel::Fused(group))) => Some((k, group)),
            Some((k, Kernel::Epilogue { matmul, group }))
                if graph.nodes[*matmul]
                    .args
                    .iter()
                    .all(|&a| base_of(graph, a) != in_node) =>
            {
                Some((k, group))
            }
            _ => None,
        };
        let ok = match fused {
            Some((k, group)) => {
                let reads_contiguously = group.sources.iter().flatten().all(|s| match s {
                    Source::Load { node, access } => {
                        base_of(graph, *node) != in_node
                            || *access == crate::fusion::Access::Contiguous
                    }
                    _ => true,
                });
                let unique_output = graph
                    .outputs
                    .iter()
                    .filter(|(_, o)| base_of(graph, *o) == out_node)
                    .count()
                    == 1;
                reads_contiguously
                    && unique_output
                    && last_read[in_node].is_none_or(|r| r <= k)
                    && plan.storage[out_node] == Storage::Virtual
            }
            _ => false,
        };
        if ok {
            plan.storage[out_node] = Storage::Input(input);
            plan.in_place.push((input, output));
        } else {
            plan.swapped.push((input, output));
        }
    }

    let mut free: Vec<usize> = Vec::new();
    for (k, kernel) in schedule.kernels.iter().enumerate() {
        let produced = kernel.writes();
        // Slots of this kernel's own dying inputs that a stored member took.
        let mut taken: Vec<usize> = Vec::new();
        for p in produced {
            if plan.storage[p] != Storage::Virtual {
                continue;
            }
            let spec = &graph.nodes[p].spec;
            let want = (spec.dtype, spec.numel());
            plan.unshared_bytes += spec.bytes();
            let reused = overwritable_input(graph, kernel, p, k, &last_read, &is_output, &plan)
                .into_iter()
                .find(|&s| plan.slots[s] == want && !taken.contains(&s));
            let slot = match (reused, free.iter().position(|&s| plan.slots[s] == want)) {
                (Some(s), _) => {
                    taken.push(s);
                    s
                }
                (None, Some(i)) => free.swap_remove(i),
                (None, None) => {
                    plan.slots.push(want);
                    plan.slots.len() - 1
                }
            };
            plan.storage[p] = Storage::Slot(slot);
            if last_read[p].is_none() && !is_output[p] {
                free.push(slot);
            }
        }
        for b in kernel_reads(graph, kernel) {
            if last_read[b] == Some(k) && !is_output[b] {
                if let Storage::Slot(s) = plan.storage[b] {
                    if !free.contains(&s) && !taken.contains(&s) {
                        free.push(s);
                        plan.frees[k].push(s);
                    }
                }
            }
        }
    }
    // Reshapes share their base's buffer.
    for id in 0..n {
        if let Op::Reshape { .. } = graph.nodes[id].op {
            plan.storage[id] = plan.storage[base_of(graph, id)];
        }
    }
    plan.peak_bytes = plan.slots.iter().map(|(d, len)| d.size_of() * len).sum();
    plan
}
