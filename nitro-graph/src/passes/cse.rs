//! Common-subexpression elimination: two nodes with the same op, arguments
//! and type compute the same value (every primitive is pure; random ops
//! differ by salt), so the second forwards to the first.

use super::rewrite::{rebuild, Decision};
use super::Pass;
use crate::ir::{Graph, Op};
use std::collections::HashMap;

/// Common-subexpression elimination.
pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, graph: &mut Graph) -> bool {
        let mut seen: HashMap<String, usize> = HashMap::new();
        rebuild(graph, |out, node| {
            if matches!(node.op, Op::Input { .. }) {
                return Decision::Keep;
            }
            let key = format!("{:?}|{:?}|{}", node.op, node.args, node.spec);
            match seen.get(&key) {
                Some(&id) => Decision::Forward(id),
                None => {
                    seen.insert(key, out.nodes.len());
                    Decision::Keep
                }
            }
        })
    }
}
