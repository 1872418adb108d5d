//! The one rebuilding mechanism all passes share: walk nodes in order and
//! let a rule either forward a node to an existing (new) node or emit it.

use crate::ir::{Graph, Node, NodeId};

/// What a rule decides for one node.
pub enum Decision {
    /// Keep the node (with its arguments remapped).
    Keep,
    /// Use this already-emitted new node instead.
    Forward(NodeId),
    /// Emit this node instead (arguments are *new* ids).
    Replace(Node),
}

/// Rebuild `graph`, deciding per node with `rule(new_graph, old_node_with_new_args)`.
/// Returns whether anything changed.
pub fn rebuild(graph: &mut Graph, mut rule: impl FnMut(&Graph, &Node) -> Decision) -> bool {
    let mut out = Graph {
        inputs: graph.inputs.clone(),
        ..Default::default()
    };
    let mut map: Vec<NodeId> = Vec::with_capacity(graph.nodes.len());
    let mut changed = false;
    for node in &graph.nodes {
        let remapped = Node {
            op: node.op.clone(),
            args: node.args.iter().map(|&a| map[a]).collect(),
            spec: node.spec.clone(),
        };
        let id = match rule(&out, &remapped) {
            Decision::Keep => out.push(remapped.op, remapped.args, remapped.spec),
            Decision::Forward(id) => {
                changed = true;
                id
            }
            Decision::Replace(n) => {
                changed = true;
                out.push(n.op, n.args, n.spec)
            }
        };
        map.push(id);
    }
    for input in &mut out.inputs {
        input.node = map[input.node];
    }
    out.outputs = graph
        .outputs
        .iter()
        .map(|(n, id)| (n.clone(), map[*id]))
        .collect();
    *graph = out;
    changed
}
