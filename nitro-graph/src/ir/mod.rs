//! The IR: a graph of nodes with static shapes and dtypes.
//!
//! A [`Graph`] is a list of [`Node`]s in topological order (every node's
//! arguments come before it), a list of named inputs and a list of named
//! outputs. Nodes are appended by the tracer and rewritten by passes; nothing
//! here executes anything.

mod infer;
mod ops;
mod print;
mod window;

pub use infer::infer;
pub use ops::{BinaryOp, CmpOp, Op, UnaryOp};
pub use window::Window;

pub use nitro_device::{ShapeFmt, TensorSpec};
use serde::{Deserialize, Serialize};

/// Index of a node in its graph.
pub type NodeId = usize;

/// One operation and the value it produces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The primitive.
    pub op: Op,
    /// Argument nodes, in the order the op expects.
    pub args: Vec<NodeId>,
    /// Type of the produced value.
    pub spec: TensorSpec,
}

/// A named graph input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputDecl {
    /// Name (a parameter path, a batch field, a device scalar).
    pub name: String,
    /// Its dtype and shape.
    pub spec: TensorSpec,
    /// The node that reads it.
    pub node: NodeId,
}

/// A dataflow graph: nodes in topological order, named inputs and outputs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    /// All nodes; arguments always precede their users.
    pub nodes: Vec<Node>,
    /// Named inputs, in call order.
    pub inputs: Vec<InputDecl>,
    /// Named outputs, in return order.
    pub outputs: Vec<(String, NodeId)>,
}

impl Graph {
    /// Append a node whose spec was already inferred; returns its id.
    pub fn push(&mut self, op: Op, args: Vec<NodeId>, spec: TensorSpec) -> NodeId {
        self.nodes.push(Node { op, args, spec });
        self.nodes.len() - 1
    }

    /// The spec of node `id`.
    pub fn spec(&self, id: NodeId) -> &TensorSpec {
        &self.nodes[id].spec
    }

    /// For each node, how many times it is used (as an argument or an output).
    pub fn use_counts(&self) -> Vec<usize> {
        let mut uses = vec![0; self.nodes.len()];
        for node in &self.nodes {
            for &a in &node.args {
                uses[a] += 1;
            }
        }
        for &(_, o) in &self.outputs {
            uses[o] += 1;
        }
        uses
    }

    /// Signatures of the inputs, in call order.
    pub fn input_specs(&self) -> Vec<TensorSpec> {
        self.inputs.iter().map(|i| i.spec.clone()).collect()
    }

    /// Index of the input called `name`.
    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|i| i.name == name)
    }

    /// Index of the output called `name`.
    pub fn output_index(&self, name: &str) -> Option<usize> {
        self.outputs.iter().position(|(n, _)| n == name)
    }

    /// A blake3 hash (hex) of everything the graph is: every node's op,
    /// attributes, constants (bit-exact, NaN and infinities included),
    /// arguments and spec, and the named inputs and outputs. Two graphs
    /// with equal hashes compute the same function, so a compile cache keyed
    /// on it never serves a program for another graph (model structure or a
    /// captured value that changed).
    pub fn content_hash(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        // CBOR keeps floats bit-exact (JSON would write NaN as null).
        ciborium::into_writer(self, &mut hasher)
            .expect("a graph serializes (plain data, no maps with non-string keys)");
        hasher.finalize().to_hex().to_string()
    }
}
