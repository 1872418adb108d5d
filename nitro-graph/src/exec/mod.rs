//! Compiled programs: `compile` a traced function for given input
//! signatures into a [`Program`], call it with concrete [`Array`]s; `jit`
//! compiles and runs once.

mod array;
mod program;
pub mod signature;

pub use array::Array;
pub use program::{compile, compile_graph, jit, CompileOptions, Program, ProgramStats};
pub use signature::{Bound, Role, Signature};
