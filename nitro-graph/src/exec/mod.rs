//! Compiled programs: `compile` a traced function for given input
//! signatures into a [`Program`], call it with concrete [`Array`]s; `jit`
//! compiles and runs once.

mod array;
mod program;

pub use array::Array;
pub use program::{compile, compile_graph, jit, CompileOptions, Program, ProgramStats};
