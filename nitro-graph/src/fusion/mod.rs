//! Elementwise fusion: partition a graph into kernels.
//!
//! Policy, in order of the pass:
//! - `reshape` is free (an alias of its argument's buffer) and `broadcast`
//!   is free for elementwise consumers (a strided read of its source);
//!   `fill` and `iota` are computed inline where they are used. A permute
//!   that keeps the last axis in place ([`permute_is_free`]: the NCHW
//!   restore after a convolution's matmul) is free the same way, a strided
//!   read of contiguous runs, and so is a slice that is one contiguous
//!   range of a buffer ([`slice_offset`]: a gradient cut from the
//!   all-reduced one).
//! - Each elementwise node joins the newest group of one of its arguments
//!   with the same element count, provided every other value it reads is
//!   ready before that group runs; otherwise it starts a new group. Older
//!   argument groups that nothing else has read yet move into the node's
//!   group (computed where they are used, never stored). A group
//!   becomes one loop over chunks of elements, so a chain like
//!   `m*b1 + g*(1-b1)` or a whole Adam update is one kernel and its
//!   temporaries never touch memory.
//! - A sum or max whose input is a group member, over a layout that splits
//!   into blocks of whole rows ([`RowBlocks`]: softmax and layer-norm rows,
//!   pooling windows), becomes a *tail* of that group where the backend
//!   allows it ([`Rules`]): the group computes a block of rows and reduces
//!   it while it is in cache, and the member is stored only if something
//!   else reads it.
//! - Every other primitive (matmul, other reductions, data movement) is its
//!   own kernel; its arguments are materialised. Where the backend allows
//!   it, a matmul of a patch matrix that nothing else reads is a direct
//!   convolution instead, and the patch matrix is never stored
//!   ([`direct_convs`]).
//! - Where the backend allows it, a group that reads a matmul's output
//!   element for element and runs right after it joins the matmul's kernel
//!   as its epilogue (`epilogue`).
//! - A group member is stored only if something outside the group reads it.
//!
//! Cost: one pass over the nodes with a scan over argument groups, O(nodes).

mod conv;
mod epilogue;
mod tails;
mod views;

pub use conv::direct_convs;
pub use tails::{runs, RowBlocks, RowLayout, Rules, Tail};
pub use views::{permute_is_free, slice_offset};

use crate::ir::{Graph, NodeId, Op};

/// How a fused group reads one value that it does not compute itself.
#[derive(Clone, Debug, PartialEq)]
pub enum Access {
    /// Element `i` of the group reads element `i` of the value.
    Contiguous,
    /// Every element reads the value's single element.
    Scalar,
    /// Element `i` of the group, decomposed over `shape`, reads the source
    /// at `sum(index[d] * strides[d])` (stride 0 on broadcast axes).
    Strided {
        /// Shape that flat group indices decompose over.
        shape: Vec<usize>,
        /// Source stride per axis, in elements.
        strides: Vec<usize>,
    },
    /// Element `i` of the group reads element `offset + i` of the value: a
    /// contiguous slice of it (see [`slice_offset`]).
    Offset(usize),
}

impl Access {
    /// Where a contiguous read starts in the value: the offset of
    /// [`Access::Offset`], 0 for any other access.
    pub fn start(&self) -> usize {
        match self {
            Access::Offset(o) => *o,
            _ => 0,
        }
    }
}

/// Where an argument of a fused node comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Computed earlier in the same group.
    Reg(NodeId),
    /// A constant computed inline.
    Fill(f64),
    /// An iota node computed inline (flat index decomposed over its shape).
    Iota(NodeId),
    /// Read from the stored value `node` (through reshapes: its base).
    Load {
        /// The stored value read.
        node: NodeId,
        /// The read pattern.
        access: Access,
    },
}

/// A group of elementwise nodes evaluated as one loop.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FusedGroup {
    /// Member nodes in topological order.
    pub members: Vec<NodeId>,
    /// Per member, where each of its arguments is read from.
    pub sources: Vec<Vec<Source>>,
    /// Members whose values are written to memory.
    pub stores: Vec<NodeId>,
    /// Elements per member.
    pub numel: usize,
    /// Reductions of members computed in the same pass (see [`Tail`]).
    pub tails: Vec<Tail>,
}

/// One unit of execution.
#[derive(Clone, Debug, PartialEq)]
pub enum Kernel {
    /// A fused elementwise loop.
    Fused(FusedGroup),
    /// One non-elementwise primitive (or a materialised broadcast).
    Single(NodeId),
    /// The matmul `out` of a kernel and the patch matrix `patches` of an
    /// image, computed from the image directly ([`direct_convs`]); the
    /// patch matrix is never stored.
    Conv {
        /// The matmul node.
        out: NodeId,
        /// Its `im2col` argument.
        patches: NodeId,
    },
    /// A matmul and the elementwise group that reads its output element
    /// for element, run as one kernel (see `epilogue`): the backend may
    /// apply the group to rows of the product as they are finished.
    Epilogue {
        /// The matmul node.
        matmul: NodeId,
        /// The group, exactly as it would run on its own.
        group: FusedGroup,
    },
}

impl Kernel {
    /// The stored nodes the kernel writes (an epilogue group has no tails).
    pub fn writes(&self) -> Vec<NodeId> {
        match self {
            Kernel::Fused(g) => g
                .stores
                .iter()
                .copied()
                .chain(g.tails.iter().map(|t| t.node))
                .collect(),
            Kernel::Single(n) | Kernel::Conv { out: n, .. } => vec![*n],
            Kernel::Epilogue { matmul, group } => std::iter::once(*matmul)
                .chain(group.stores.iter().copied())
                .collect(),
        }
    }
}

/// The kernels of a graph, in execution order, and which nodes are stored.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    /// Kernels in execution order.
    pub kernels: Vec<Kernel>,
    /// Per node: stored in memory (inputs, literals, kernel results, aliases).
    pub stored: Vec<bool>,
    /// Per node: the kernel that produces it, if any.
    pub producer: Vec<Option<usize>>,
}

const READY: i64 = -1;

struct Fuser<'g> {
    graph: &'g Graph,
    /// Index in `main` of the group holding scalar arithmetic on inputs
    /// only (hyperparameter math): it runs first, so every group can read it.
    scalar_group: Option<usize>,
    group_of: Vec<Option<usize>>,
    kernel_of: Vec<Option<usize>>,
    stored: Vec<bool>,
    prologue: Vec<NodeId>,
    main: Vec<Kernel>,
}

/// The value a chain of reshapes/broadcasts over a `fill` reduces to.
pub fn fill_value(graph: &Graph, mut n: NodeId) -> Option<f64> {
    loop {
        match &graph.nodes[n].op {
            Op::Fill { value, .. } => return Some(*value),
            Op::Reshape { .. } | Op::Broadcast { .. } => n = graph.nodes[n].args[0],
            _ => return None,
        }
    }
}

/// `n` through reshapes: the node whose buffer it is. Every
/// [`Source::Load`] names that node, whatever view reads it (a reshape
/// keeps the flat order, so strides over the reshape's shape address the
/// base's buffer), so a check of what a group reads (an epilogue's "only
/// element for element", the memory plan's last reader) sees every read.
fn stored_base(graph: &Graph, mut n: NodeId) -> NodeId {
    while let Op::Reshape { .. } = graph.nodes[n].op {
        n = graph.nodes[n].args[0];
    }
    n
}

/// Row-major strides of `shape`.
pub fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

impl<'g> Fuser<'g> {
    /// Where an elementwise consumer in candidate group `group` reads `a`.
    fn resolve(&self, a: NodeId, group: Option<usize>) -> Source {
        let node = &self.graph.nodes[a];
        if let Some(v) = fill_value(self.graph, a) {
            return Source::Fill(v);
        }
        if let Some((base, offset)) = slice_offset(self.graph, a) {
            return Source::Load {
                node: base,
                access: Access::Offset(offset),
            };
        }
        match &node.op {
            Op::Iota { .. } => Source::Iota(a),
            // A reshape keeps the flat order: read whatever it reshapes.
            Op::Reshape { .. } => self.resolve(node.args[0], group),
            Op::Permute { perm } if permute_is_free(self.graph, a) => {
                let src = node.args[0];
                let base = strides_of(&self.graph.nodes[src].spec.shape);
                Source::Load {
                    node: stored_base(self.graph, src),
                    access: Access::Strided {
                        shape: node.spec.shape.clone(),
                        strides: perm.iter().map(|&p| base[p]).collect(),
                    },
                }
            }
            Op::Broadcast { shape } => {
                let src = node.args[0];
                let src_shape = &self.graph.nodes[src].spec.shape;
                if src_shape.iter().product::<usize>() == 1 {
                    return Source::Load {
                        node: stored_base(self.graph, src),
                        access: Access::Scalar,
                    };
                }
                let base = strides_of(src_shape);
                let strides = (0..shape.len())
                    .map(|d| if src_shape[d] == 1 { 0 } else { base[d] })
                    .collect();
                Source::Load {
                    node: stored_base(self.graph, src),
                    access: Access::Strided {
                        shape: shape.clone(),
                        strides,
                    },
                }
            }
            _ => match (self.group_of[a], group) {
                (Some(h), Some(g)) if h == g => Source::Reg(a),
                // A one-element value (an RNG key, a scalar input) is read
                // as a scalar by a group of any size.
                _ if node.spec.numel() == 1 => Source::Load {
                    node: a,
                    access: Access::Scalar,
                },
                _ => Source::Load {
                    node: a,
                    access: Access::Contiguous,
                },
            },
        }
    }

    /// Kernel index after which the stored value `n` is ready, if it were
    /// stored now (`now` = a kernel still to be created).
    fn ready_at(&self, n: NodeId) -> i64 {
        let node = &self.graph.nodes[n];
        match &node.op {
            Op::Input { .. } | Op::Literal { .. } | Op::Fill { .. } | Op::Iota { .. } => READY,
            Op::Reshape { .. } => self.ready_at(node.args[0]),
            _ => match (self.group_of[n], self.kernel_of[n]) {
                (Some(g), _) if Some(g) == self.scalar_group => READY,
                (Some(g), _) => g as i64,
                (None, Some(k)) => k as i64,
                (None, None) => self.main.len() as i64,
            },
        }
    }

    /// Make sure `n` is in memory by the time the next kernel runs.
    fn ensure_stored(&mut self, n: NodeId) {
        if self.stored[n] {
            return;
        }
        self.stored[n] = true;
        let node = &self.graph.nodes[n];
        match &node.op {
            Op::Input { .. } | Op::Literal { .. } => {}
            Op::Fill { .. } | Op::Iota { .. } => self.prologue.push(n),
            Op::Reshape { .. } => self.ensure_stored(node.args[0]),
            _ if self.group_of[n].is_some() => {
                let g = self.group_of[n].expect("checked");
                if let Kernel::Fused(group) = &mut self.main[g] {
                    group.stores.push(n);
                }
            }
            _ if self.kernel_of[n].is_some() => {}
            _ => {
                // A broadcast (or a fill seen through one) read by a kernel
                // that needs it in memory: materialise it now.
                for a in node.args.clone() {
                    self.ensure_stored(a);
                }
                self.kernel_of[n] = Some(self.main.len());
                self.main.push(Kernel::Single(n));
            }
        }
    }

    fn sources_ready(&self, n: NodeId, group: usize) -> bool {
        self.graph.nodes[n]
            .args
            .iter()
            .all(|&a| match self.resolve(a, Some(group)) {
                Source::Load { node, .. } => self.ready_at(node) < group as i64,
                _ => true,
            })
    }

    /// Whether `n` reads only inputs, constants and scalar-group members.
    fn reads_only_inputs(&self, n: NodeId) -> bool {
        self.graph.nodes[n].args.iter().all(|&a| {
            let mut b = a;
            while let Op::Reshape { .. } | Op::Broadcast { .. } = self.graph.nodes[b].op {
                b = self.graph.nodes[b].args[0];
            }
            match self.graph.nodes[b].op {
                Op::Input { .. } | Op::Literal { .. } | Op::Fill { .. } | Op::Iota { .. } => true,
                _ => self.scalar_group.is_some() && self.group_of[b] == self.scalar_group,
            }
        })
    }

    /// Whether group `h` can move to where its reader `n` runs: a fused
    /// group (not the scalar one) that nothing outside has read yet (no
    /// stores, no tails), which `n` reads only element for element (a
    /// strided read of a member would read the group's own output before
    /// it is written).
    fn foldable(&self, h: usize, n: NodeId) -> bool {
        let fresh = Some(h) != self.scalar_group
            && matches!(&self.main[h], Kernel::Fused(f) if f.stores.is_empty() && f.tails.is_empty());
        fresh
            && self.graph.nodes[n]
                .args
                .iter()
                .all(|&a| match self.resolve(a, None) {
                    Source::Load { node, .. } if self.group_of[node] == Some(h) => {
                        matches!(self.resolve(a, Some(h)), Source::Reg(_))
                    }
                    _ => true,
                })
    }

    fn add_elementwise(&mut self, n: NodeId) {
        let numel = self.graph.nodes[n].spec.numel();
        if numel == 1 && self.reads_only_inputs(n) {
            let g = *self.scalar_group.get_or_insert_with(|| {
                self.main.push(Kernel::Fused(FusedGroup {
                    numel: 1,
                    ..Default::default()
                }));
                self.main.len() - 1
            });
            return self.join(n, g);
        }
        let mut candidates: Vec<usize> = self.graph.nodes[n]
            .args
            .iter()
            .filter_map(|&a| {
                let mut b = a;
                while let Op::Reshape { .. } = self.graph.nodes[b].op {
                    b = self.graph.nodes[b].args[0];
                }
                self.group_of[b]
            })
            // The scalar group runs before everything: only input-only nodes join it.
            .filter(|&g| Some(g) != self.scalar_group)
            .filter(|&g| matches!(&self.main[g], Kernel::Fused(f) if f.numel == numel))
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        candidates.dedup();
        let chosen = candidates
            .iter()
            .copied()
            .find(|&g| self.sources_ready(n, g));
        // Older candidates nobody outside has read yet can run where `n`
        // runs instead: fold them in, so two independent chains that meet
        // (m*b1 + g*(1-b1)) become one loop, and a chain that `n` alone
        // reads is computed where `n` is rather than stored by a kernel of
        // its own and loaded back (the g / s of a softmax backward: 4 MB
        // per GPT layer written and read again).
        let older = chosen.unwrap_or(usize::MAX);
        let folded: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&h| h < older && self.foldable(h, n))
            .collect();
        let group = match chosen {
            Some(g) => g,
            None => {
                for a in self.graph.nodes[n].args.clone() {
                    if let Source::Load { node, .. } = self.resolve(a, None) {
                        if self.group_of[node].is_some_and(|h| folded.contains(&h)) {
                            continue;
                        }
                        self.ensure_stored(node);
                    }
                }
                self.main.push(Kernel::Fused(FusedGroup {
                    numel,
                    ..Default::default()
                }));
                self.main.len() - 1
            }
        };
        for &h in &folded {
            let moved = match &mut self.main[h] {
                Kernel::Fused(f) => std::mem::take(&mut f.members),
                Kernel::Single(_) | Kernel::Conv { .. } | Kernel::Epilogue { .. } => {
                    unreachable!("candidates are fused groups")
                }
            };
            for &m in &moved {
                self.group_of[m] = Some(group);
            }
            if let Kernel::Fused(f) = &mut self.main[group] {
                let mut members = moved;
                members.append(&mut f.members);
                f.members = members;
            }
        }
        self.join(n, group);
    }

    /// Make `n` a member of group `g`, storing what it reads from memory.
    fn join(&mut self, n: NodeId, g: usize) {
        for a in self.graph.nodes[n].args.clone() {
            if let Source::Load { node, .. } = self.resolve(a, Some(g)) {
                self.ensure_stored(node);
            }
        }
        self.group_of[n] = Some(g);
        if let Kernel::Fused(group) = &mut self.main[g] {
            group.members.push(n);
        }
    }
}

/// Partition `graph` into kernels under the backend's `rules`.
pub fn schedule(graph: &Graph, rules: Rules) -> Schedule {
    let n = graph.nodes.len();
    let mut f = Fuser {
        graph,
        scalar_group: None,
        group_of: vec![None; n],
        kernel_of: vec![None; n],
        stored: vec![false; n],
        prologue: vec![],
        main: vec![],
    };
    let convs = if rules.direct_conv {
        direct_convs(graph)
    } else {
        vec![None; n]
    };
    for (id, node) in graph.nodes.iter().enumerate() {
        match &node.op {
            Op::Input { .. } | Op::Literal { .. } => f.stored[id] = true,
            // Computed inside its matmul's direct convolution.
            Op::Im2Col { .. } if convs[id].is_some() => {}
            Op::MatMul { .. } if convs[node.args[1]] == Some(id) => {
                let patches = node.args[1];
                f.ensure_stored(node.args[0]);
                f.ensure_stored(graph.nodes[patches].args[0]);
                f.kernel_of[id] = Some(f.main.len());
                f.main.push(Kernel::Conv { out: id, patches });
                f.stored[id] = true;
            }
            Op::Fill { .. } | Op::Iota { .. } | Op::Reshape { .. } | Op::Broadcast { .. } => {}
            Op::Permute { .. } if permute_is_free(graph, id) => {}
            Op::Slice { .. } if slice_offset(graph, id).is_some() => {}
            op if op.is_elementwise() => f.add_elementwise(id),
            Op::ReduceSum { .. } | Op::ReduceMax { .. } if rules.reduce_tails && f.add_tail(id) => {
            }
            _ => {
                for a in node.args.clone() {
                    f.ensure_stored(a);
                }
                f.kernel_of[id] = Some(f.main.len());
                f.main.push(Kernel::Single(id));
                f.stored[id] = true;
            }
        }
    }
    for &(_, o) in &graph.outputs {
        f.ensure_stored(o);
    }
    for g in 0..f.main.len() {
        let Kernel::Fused(group) = &f.main[g] else {
            continue;
        };
        let sources = group
            .members
            .iter()
            .map(|&m| {
                graph.nodes[m]
                    .args
                    .iter()
                    .map(|&a| f.resolve(a, Some(g)))
                    .collect()
            })
            .collect();
        if let Kernel::Fused(group) = &mut f.main[g] {
            group.sources = sources;
        }
    }
    let mut kernels: Vec<Kernel> = f
        .prologue
        .iter()
        .map(|&c| {
            Kernel::Fused(FusedGroup {
                members: vec![c],
                sources: vec![vec![]],
                stores: vec![c],
                numel: graph.nodes[c].spec.numel(),
                tails: vec![],
            })
        })
        .collect();
    // Groups emptied by merging are dropped; the scalar group runs first.
    let scalar = f.scalar_group.map(|g| f.main[g].clone());
    kernels.extend(scalar);
    kernels.extend(
        f.main
            .into_iter()
            .enumerate()
            .filter(|(i, k)| {
                Some(*i) != f.scalar_group && !matches!(k, Kernel::Fused(g) if g.members.is_empty())
            })
            .map(|(_, k)| k),
    );
    if rules.matmul_epilogue {
        kernels = epilogue::merge(graph, kernels);
    }
    let mut producer = vec![None; n];
    for (k, kernel) in kernels.iter().enumerate() {
        kernel
            .writes()
            .into_iter()
            .for_each(|s| producer[s] = Some(k));
    }
    Schedule {
        kernels,
        stored: f.stored,
        producer,
    }
}
