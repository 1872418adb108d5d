//! nitro-graph: the tensor compiler at the heart of nitro.
//!
//! It owns the pipeline from a Rust function of tensors to a callable
//! program, laid out as folders in pipeline order:
//!
//! | stage | module | what it does |
//! |---|---|---|
//! | IR | [`ir`] | nodes with static shapes and dtypes; the primitive table and its shape rule |
//! | tracing | [`trace`](mod@trace) | symbolic [`Tensor`]s with operators; shape errors at trace time |
//! | autodiff | [`autodiff`] | reverse mode as a graph transform: one VJP rule per primitive |
//! | composites | [`nn`] | relu, softmax, conv2d, cross-entropy, layers, `Chain`, optimizers |
//! | semantics | [`semantics`] | the one scalar table of what each elementwise op computes (folding, CPU, CUDA, tests) |
//! | passes | [`passes`] | simplify, constant folding, CSE, DCE |
//! | fusion | [`fusion`] | elementwise chains into single kernels |
//! | plan | [`plan`] | liveness-based buffer reuse, in-place donated updates |
//! | lower | [`lower`] | passes + schedule + plan once: the device-neutral [`ProgramDesc`] every backend builds from |
//! | backends | [`backend`] | CPU (rayon + gemm); CUDA behind the `cuda` feature |
//! | exec | [`exec`] | `compile`, `jit`, [`Program`] (on top of the backends) |
//!
//! It does not know about experiments, hooks, data loading or checkpoints:
//! `nitro-run` drives it.
//!
//! ```
//! use nitro_graph::{compile, Array, CompileOptions, TensorSpec};
//! // y = tanh(x @ w), compiled once for these shapes.
//! let program = compile(
//!     &[("x", TensorSpec::f32(&[2, 3])), ("w", TensorSpec::f32(&[3, 1]))],
//!     CompileOptions::named("tiny"),
//!     |_, t| Ok(vec![("y".into(), t[0].matmul(&t[1]).tanh())]),
//! )?;
//! let mut args = [
//!     Array::new(&[2, 3], vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0])?,
//!     Array::new(&[3, 1], vec![0.5f32, -0.5, 2.0])?,
//! ];
//! let y = program.run(&mut args)?;
//! assert!((y[0].to_f32_vec()[0] - 0.5f32.tanh()).abs() < 1e-6);
//! # Ok::<(), nitro_graph::GraphError>(())
//! ```
#![warn(missing_docs)]

pub mod autodiff;
pub mod backend;
mod error;
pub mod exec;
pub mod fusion;
pub mod ir;
pub mod lower;
pub mod nn;
pub mod passes;
pub mod plan;
pub mod semantics;
pub mod trace;

pub use error::{GraphError, Result};
pub use exec::{
    compile, compile_graph, jit, Array, CompileOptions, Executable, Group, Program, ProgramDesc,
    ProgramStats, Role, Runtime, Signature, Value,
};
pub use ir::{Graph, TensorSpec};
pub use nitro_device::{DType, Device, HostBuffer};
pub use trace::{trace, Tensor, Tracer};
