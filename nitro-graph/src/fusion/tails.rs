//! Reduction tails: which sums and maxes can be computed in the pass of
//! the elementwise group that produces their input ([`RowBlocks`]), the
//! record of one such fusion ([`Tail`]), and the backend's say in whether
//! to fuse them at all ([`Rules`], which also carries the backend's say on
//! direct convolutions), and the fuser's decision to fuse one
//! (`Fuser::add_tail`); running a tail is the backend's.

use super::{Fuser, Kernel};
use crate::ir::{NodeId, Op};

/// A reduction fused onto the end of a group: reduce node `node`, whose
/// input is the group member `input` (through reshapes), over `blocks`.
#[derive(Clone, Debug, PartialEq)]
pub struct Tail {
    /// The `ReduceSum` / `ReduceMax` node.
    pub node: NodeId,
    /// The member it reduces.
    pub input: NodeId,
    /// How its input splits into independently reduced rows.
    pub blocks: RowBlocks,
}

/// A reduction whose input is `rows` contiguous rows, each reduced to its
/// own contiguous outputs by the same computation whatever the number of
/// rows: so any block of whole rows can be reduced on its own, and the
/// result is bit-identical to reducing everything at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowBlocks {
    /// Independent rows (the leading kept axes).
    pub rows: usize,
    /// The layout inside a row.
    pub layout: RowLayout,
}

/// What one row of a [`RowBlocks`] reduction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowLayout {
    /// `r` elements to one output (softmax, log-softmax, norms, losses).
    Trailing {
        /// Elements per row.
        r: usize,
    },
    /// `[r1, k2, r2]` reduced over `r1` and `r2` to `k2` outputs (pooling
    /// windows: `[n*c*oh, k, ow, k]`).
    Pooling {
        /// Window rows.
        r1: usize,
        /// Outputs per row.
        k2: usize,
        /// Window columns.
        r2: usize,
    },
}

impl RowBlocks {
    /// Input elements per row.
    pub fn row_len(&self) -> usize {
        match self.layout {
            RowLayout::Trailing { r } => r,
            RowLayout::Pooling { r1, k2, r2 } => r1 * k2 * r2,
        }
    }

    /// Outputs per row.
    pub fn row_outputs(&self) -> usize {
        match self.layout {
            RowLayout::Trailing { .. } => 1,
            RowLayout::Pooling { k2, .. } => k2,
        }
    }

    /// The row layout of a reduction of `shape` over `axes`, if it has one
    /// with at least two rows: size-1 axes dropped and neighbours of the
    /// same kind merged, the runs are kept-reduced or
    /// kept-reduced-kept-reduced.
    pub fn of(shape: &[usize], axes: &[usize]) -> Option<RowBlocks> {
        // An empty reduction fills its outputs; nothing to fuse.
        if shape.contains(&0) {
            return None;
        }
        let (rows, layout) = match *runs(shape, axes).as_slice() {
            [(rows, false), (r, true)] => (rows, RowLayout::Trailing { r }),
            [(rows, false), (r1, true), (k2, false), (r2, true)] => {
                (rows, RowLayout::Pooling { r1, k2, r2 })
            }
            _ => return None,
        };
        (rows >= 2).then_some(RowBlocks { rows, layout })
    }
}

/// The axes of `shape` reduced over `axes`, as runs `(length, reduced)`:
/// size-1 axes dropped, neighbours of the same kind merged (row-major, so
/// a run is contiguous). The CPU reduction kernels pick their layout from
/// the same runs.
pub fn runs(shape: &[usize], axes: &[usize]) -> Vec<(usize, bool)> {
    let mut out: Vec<(usize, bool)> = vec![];
    for (a, &len) in shape.iter().enumerate() {
        if len == 1 {
            continue;
        }
        let red = axes.contains(&a);
        match out.last_mut() {
            Some((l, r)) if *r == red => *l *= len,
            _ => out.push((len, red)),
        }
    }
    out
}

/// What the backend's kernels can do beyond elementwise loops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// Fuse row-blocked reductions onto their producers ([`Tail`]).
    pub reduce_tails: bool,
    /// Compute `matmul(kernel, im2col(x))` straight from the image
    /// ([`super::Kernel::Conv`], chosen by [`super::direct_convs`]).
    pub direct_conv: bool,
    /// Run a group that reads a matmul's output element for element as
    /// that matmul's epilogue ([`super::Kernel::Epilogue`]).
    pub matmul_epilogue: bool,
}

impl Fuser<'_> {
    /// Fuse the reduction `n` onto the group computing its input, if that
    /// input is a group member and the reduction is row-blocked with the
    /// same row length as the group's other tails. The reduction then runs
    /// where the group runs: it reads nothing else.
    pub(super) fn add_tail(&mut self, n: NodeId) -> bool {
        let node = &self.graph.nodes[n];
        let (Op::ReduceSum { axes } | Op::ReduceMax { axes }) = &node.op else {
            return false;
        };
        let arg = node.args[0];
        let Some(blocks) = RowBlocks::of(&self.graph.nodes[arg].spec.shape, axes) else {
            return false;
        };
        let mut input = arg;
        while let Op::Reshape { .. } = self.graph.nodes[input].op {
            input = self.graph.nodes[input].args[0];
        }
        let Some(g) = self.group_of[input] else {
            return false;
        };
        if Some(g) == self.scalar_group {
            return false;
        }
        let Kernel::Fused(group) = &mut self.main[g] else {
            return false;
        };
        if group
            .tails
            .iter()
            .any(|t| t.blocks.row_len() != blocks.row_len() || t.blocks.rows != blocks.rows)
        {
            return false;
        }
        group.tails.push(Tail {
            node: n,
            input,
            blocks,
        });
        self.kernel_of[n] = Some(g);
        self.stored[n] = true;
        true
    }
}
