//! Dead-code elimination: drop nodes no output depends on (inputs stay, so
//! the signature never changes).

use super::Pass;
use crate::ir::{Graph, Op};

/// Dead-code elimination.
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, graph: &mut Graph) -> bool {
        let mut live = vec![false; graph.nodes.len()];
        for &(_, o) in &graph.outputs {
            live[o] = true;
        }
        for id in (0..graph.nodes.len()).rev() {
            if live[id] || matches!(graph.nodes[id].op, Op::Input { .. }) {
                live[id] = true;
                for &a in &graph.nodes[id].args {
                    live[a] = true;
                }
            }
        }
        if live.iter().all(|&l| l) {
            return false;
        }
        let mut old = std::mem::take(graph);
        let mut map = vec![usize::MAX; old.nodes.len()];
        let mut nodes = Vec::new();
        for (id, mut node) in old.nodes.drain(..).enumerate() {
            if live[id] {
                node.args.iter_mut().for_each(|a| *a = map[*a]);
                map[id] = nodes.len();
                nodes.push(node);
            }
        }
        old.nodes = nodes;
        old.inputs.iter_mut().for_each(|i| i.node = map[i.node]);
        old.outputs.iter_mut().for_each(|(_, o)| *o = map[*o]);
        *graph = old;
        true
    }
}
