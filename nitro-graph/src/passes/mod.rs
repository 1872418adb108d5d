//! Optimisation passes over a traced graph. Each pass is a value
//! implementing [`Pass`], so a pipeline can be listed, reordered and tested
//! one pass at a time. [`default_pipeline`] runs them to a fixed point.

mod cse;
mod dce;
mod fold;
mod rewrite;
mod simplify;

pub use cse::Cse;
pub use dce::Dce;
pub use fold::ConstantFold;
pub use simplify::Simplify;

use crate::ir::Graph;

/// A graph-to-graph transformation that keeps the graph's meaning.
pub trait Pass: Send + Sync {
    /// Name for listings.
    fn name(&self) -> &'static str;
    /// Transform `graph`; returns whether anything changed.
    fn run(&self, graph: &mut Graph) -> bool;
}

/// Simplification, constant folding, CSE and dead-code elimination.
pub fn default_pipeline() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(Simplify),
        Box::new(ConstantFold),
        Box::new(Cse),
        Box::new(Dce),
    ]
}

/// Run `passes` in order until none changes the graph (at most 8 rounds).
pub fn optimize(graph: &mut Graph, passes: &[Box<dyn Pass>]) {
    for _ in 0..8 {
        let mut changed = false;
        for pass in passes {
            changed |= pass.run(graph);
        }
        if !changed {
            break;
        }
    }
}
