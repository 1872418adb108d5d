//! Errors: at trace time (shapes, dtypes, misuse) and at call time (signatures).

use nitro_device::{ShapeFmt, TensorSpec};
use thiserror::Error;

/// Everything that can go wrong building, compiling or calling a program.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GraphError {
    /// Operand shapes an op cannot combine.
    #[error("shape error in `{op}`: {detail} (shapes {shapes}){hint}", shapes = fmt_shapes(shapes), hint = fmt_hint(hint))]
    Shape {
        /// The op that refused.
        op: String,
        /// What was wrong.
        detail: String,
        /// The offending shapes, in argument order.
        shapes: Vec<Vec<usize>>,
        /// How to fix it.
        hint: String,
    },
    /// Operand dtypes an op cannot combine or compute in.
    #[error("dtype error in `{op}`: {detail}{hint}", hint = fmt_hint(hint))]
    DType {
        /// The op that refused.
        op: String,
        /// What was wrong.
        detail: String,
        /// How to fix it.
        hint: String,
    },
    /// Differentiation misuse (a non-scalar loss, an integer input, ...).
    #[error("autodiff: {0}")]
    Grad(String),
    /// Tensors from two different traces were mixed.
    #[error("tensor from another trace used in `{0}`: every tensor of a program must come from the same trace")]
    ForeignTensor(String),
    /// A program was called with the wrong number of inputs.
    #[error("program `{program}` takes {expected} inputs ({names}), got {got}")]
    Arity {
        /// Program name.
        program: String,
        /// Inputs it takes.
        expected: usize,
        /// Inputs given.
        got: usize,
        /// Their names.
        names: String,
    },
    /// A program was called with an input of another shape or dtype.
    #[error("program `{program}` input `{input}`: compiled for {expected}, given {given}; compile another program for this signature (the cache does this for you)")]
    Signature {
        /// Program name.
        program: String,
        /// Input name.
        input: String,
        /// Signature it was compiled for.
        expected: TensorSpec,
        /// Signature given.
        given: TensorSpec,
    },
    /// An array whose data does not match its declared shape or dtype.
    #[error("array: {0}")]
    Array(String),
    /// A name that does not exist (input, output, parameter path).
    #[error("unknown {kind} `{name}`; known: {known}")]
    Unknown {
        /// What was looked up.
        kind: &'static str,
        /// The name given.
        name: String,
        /// The names that exist.
        known: String,
    },
    /// A layer used where it cannot work (a mode-dependent layer traced
    /// without a mode, batch statistics over padded rows, an input of the
    /// wrong rank).
    #[error("layer `{layer}`: {reason}; {fix}")]
    Layer {
        /// The layer (type and parameter path).
        layer: String,
        /// What was wrong.
        reason: String,
        /// How to fix it.
        fix: String,
    },
    /// An allocation the machine refused (or a size no machine has).
    #[error("cannot allocate {what} ({size}): not enough memory; make the model smaller (a width, depth or vocabulary size)", size = fmt_bytes(*bytes))]
    Alloc {
        /// What was being allocated (`parameter \`0.weight\` f32[784, 100000000]`).
        what: String,
        /// The bytes asked for (saturating: a size past u128 reads as its max).
        bytes: u128,
    },
    /// A backend cannot run this program here.
    #[error("backend: {0}")]
    Backend(String),
    /// A program with all-reduces called with no process group, or with a
    /// group of another size than it was compiled for.
    #[error(
        "program `{program}` all-reduces over {compiled} processes but was run {given}; {hint}"
    )]
    World {
        /// Program name.
        program: String,
        /// The world size its all-reduces were traced for.
        compiled: usize,
        /// How it was run (`alone`, `in a group of 3`).
        given: String,
        /// How to fix it.
        hint: &'static str,
    },
    /// A collective failed while the program ran (a lost rank, an MPI error).
    #[error("program `{program}`: {source}")]
    Collective {
        /// Program name.
        program: String,
        /// What the communicator reported.
        source: nitro_device::collective::CollectiveError,
    },
}

fn fmt_shapes(shapes: &[Vec<usize>]) -> String {
    shapes
        .iter()
        .map(|s| ShapeFmt(s).to_string())
        .collect::<Vec<_>>()
        .join(" and ")
}

/// `313.6 GB`: decimal units, as `df -H` and memory sizes on spec sheets.
fn fmt_bytes(bytes: u128) -> String {
    let units = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

fn fmt_hint(hint: &str) -> String {
    if hint.is_empty() {
        String::new()
    } else {
        format!("; {hint}")
    }
}

impl GraphError {
    /// A shape error for `op` with the offending shapes and a fix.
    pub fn shape(
        op: &str,
        detail: impl Into<String>,
        shapes: &[&[usize]],
        hint: &str,
    ) -> GraphError {
        GraphError::Shape {
            op: op.to_string(),
            detail: detail.into(),
            shapes: shapes.iter().map(|s| s.to_vec()).collect(),
            hint: hint.to_string(),
        }
    }

    /// A dtype error for `op`.
    pub fn dtype(op: &str, detail: impl Into<String>, hint: &str) -> GraphError {
        GraphError::DType {
            op: op.to_string(),
            detail: detail.into(),
            hint: hint.to_string(),
        }
    }
}

/// Result with a [`GraphError`].
pub type Result<T, E = GraphError> = std::result::Result<T, E>;
