//! Compiled programs: `compile` a traced function for given input
//! signatures into a [`Program`], call it with concrete [`Array`]s; `jit`
//! compiles and runs once. [`Executable`], [`Runtime`] and [`Value`] are the
//! device-neutral surface over the CPU and CUDA programs.

mod array;
mod executable;
mod program;
pub mod signature;

pub use array::Array;
pub use executable::{Executable, Group, Runtime, Value};
pub use program::{
    compile, compile_graph, jit, CompileOptions, Program, ProgramDesc, ProgramStats,
};
pub use signature::{Bound, Role, Signature};
