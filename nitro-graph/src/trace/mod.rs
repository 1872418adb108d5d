//! Tracing: symbolic tensors that record graph nodes.
//!
//! A [`Tracer`] owns the graph being built; a [`Tensor`] is a handle to one
//! of its nodes. Every op checks shapes and dtypes as it is recorded. Since
//! operators (`a + b`) cannot return `Result`, the first error is kept in
//! the tracer, later ops on its fallout are ignored, and [`Tracer::finish`]
//! returns it: a bad trace never yields a program, and never panics.

mod methods;
mod overload;

use crate::error::{GraphError, Result};
use crate::ir::{infer, Graph, InputDecl, NodeId, Op, TensorSpec};
use nitro_device::DType;
use std::cell::RefCell;
use std::rc::Rc;

#[derive(Default)]
struct TraceState {
    graph: Graph,
    error: Option<GraphError>,
    next_salt: u64,
}

/// Records the ops applied to its tensors into a [`Graph`].
#[derive(Clone, Default)]
pub struct Tracer(Rc<RefCell<TraceState>>);

/// A symbolic tensor: a node of a trace, with its static shape and dtype.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) id: NodeId,
    spec: TensorSpec,
    tracer: Tracer,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor(%{}: {})", self.id, self.spec)
    }
}

impl Tracer {
    /// An empty trace.
    pub fn new() -> Tracer {
        Tracer::default()
    }

    /// Declare a named input of `spec`.
    pub fn input(&self, name: &str, spec: TensorSpec) -> Tensor {
        let mut st = self.0.borrow_mut();
        let index = st.graph.inputs.len();
        if st.graph.inputs.iter().any(|i| i.name == name) && st.error.is_none() {
            st.error = Some(GraphError::Unknown {
                kind: "duplicate input",
                name: name.to_string(),
                known: "input names must be unique".into(),
            });
        }
        let node = st.graph.push(Op::Input { index }, vec![], spec.clone());
        st.graph.inputs.push(InputDecl {
            name: name.to_string(),
            spec: spec.clone(),
            node,
        });
        drop(st);
        Tensor {
            id: node,
            spec,
            tracer: self.clone(),
        }
    }

    /// A tensor of `shape` filled with `value`.
    pub fn fill(&self, value: f64, shape: &[usize], dtype: DType) -> Tensor {
        self.record(
            Op::Fill {
                value,
                shape: shape.to_vec(),
            },
            &[],
            dtype,
        )
    }

    /// A scalar constant.
    pub fn scalar(&self, value: f64, dtype: DType) -> Tensor {
        self.fill(value, &[], dtype)
    }

    /// A baked constant array (row-major `values`).
    pub fn literal(&self, values: &[f64], shape: &[usize], dtype: DType) -> Tensor {
        self.record(
            Op::Literal {
                values: values.to_vec(),
                shape: shape.to_vec(),
            },
            &[],
            dtype,
        )
    }

    /// Indices along `axis` of `shape`.
    pub fn iota(&self, shape: &[usize], axis: usize, dtype: DType) -> Tensor {
        self.record(
            Op::Iota {
                axis,
                shape: shape.to_vec(),
            },
            &[],
            dtype,
        )
    }

    /// Uniform [0, 1) numbers from a counter-based generator keyed by the
    /// traced i32 scalar `key`; each call draws an independent stream.
    pub fn random_uniform(&self, key: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
        let salt = {
            let mut st = self.0.borrow_mut();
            st.next_salt += 1;
            st.next_salt
        };
        self.record(
            Op::RandomUniform {
                salt,
                shape: shape.to_vec(),
            },
            &[key],
            dtype,
        )
    }

    /// The first error recorded so far, if any.
    pub fn error(&self) -> Option<GraphError> {
        self.0.borrow().error.clone()
    }

    /// Record `err` unless an earlier error is already kept.
    pub(crate) fn fail(&self, err: GraphError) {
        let mut st = self.0.borrow_mut();
        if st.error.is_none() {
            st.error = Some(err);
        }
    }

    /// Finish the trace with named outputs; returns the graph or the first error.
    pub fn finish(self, outputs: Vec<(String, Tensor)>) -> Result<Graph> {
        for (_, t) in &outputs {
            if !Rc::ptr_eq(&t.tracer.0, &self.0) {
                return Err(GraphError::ForeignTensor("outputs".into()));
            }
        }
        let mut st = self.0.borrow_mut();
        if let Some(err) = st.error.take() {
            return Err(err);
        }
        let mut graph = std::mem::take(&mut st.graph);
        graph.outputs = outputs.into_iter().map(|(n, t)| (n, t.id)).collect();
        Ok(graph)
    }

    /// Append `op` on `args`, checking its shape rule; on error the error is
    /// kept and a placeholder of a plausible spec is returned.
    pub(crate) fn record(&self, op: Op, args: &[&Tensor], dtype: DType) -> Tensor {
        if let Some(t) = args.iter().find(|t| !Rc::ptr_eq(&t.tracer.0, &self.0)) {
            let _ = t;
            self.fail(GraphError::ForeignTensor(op.name()));
            return self.placeholder(args, dtype);
        }
        let specs: Vec<&TensorSpec> = args.iter().map(|t| &t.spec).collect();
        match infer(&op, &specs, dtype) {
            Ok(spec) => {
                let ids = args.iter().map(|t| t.id).collect();
                let id = self.0.borrow_mut().graph.push(op, ids, spec.clone());
                Tensor {
                    id,
                    spec,
                    tracer: self.clone(),
                }
            }
            Err(err) => {
                self.fail(err);
                self.placeholder(args, dtype)
            }
        }
    }

    fn placeholder(&self, args: &[&Tensor], dtype: DType) -> Tensor {
        let spec = args
            .first()
            .map(|t| t.spec.clone())
            .unwrap_or(TensorSpec::new(dtype, &[]));
        let op = Op::Fill {
            value: f64::NAN,
            shape: spec.shape.clone(),
        };
        let id = self.0.borrow_mut().graph.push(op, vec![], spec.clone());
        Tensor {
            id,
            spec,
            tracer: self.clone(),
        }
    }

    /// The op and argument ids of node `id` (for autodiff).
    pub(crate) fn node(&self, id: NodeId) -> (Op, Vec<NodeId>, TensorSpec) {
        let st = self.0.borrow();
        let n = &st.graph.nodes[id];
        (n.op.clone(), n.args.clone(), n.spec.clone())
    }

    /// A tensor handle for an existing node.
    pub(crate) fn handle(&self, id: NodeId) -> Tensor {
        let spec = self.0.borrow().graph.nodes[id].spec.clone();
        Tensor {
            id,
            spec,
            tracer: self.clone(),
        }
    }

    /// Whether `t` belongs to this trace.
    pub(crate) fn owns(&self, t: &Tensor) -> bool {
        Rc::ptr_eq(&t.tracer.0, &self.0)
    }
}

impl Tensor {
    /// Static shape.
    pub fn shape(&self) -> &[usize] {
        &self.spec.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.spec.dtype
    }

    /// Shape and dtype.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.spec.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.spec.numel()
    }

    /// The trace this tensor belongs to.
    pub fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    /// Node id in the trace (stable for the trace's lifetime).
    pub fn node_id(&self) -> NodeId {
        self.id
    }
}

/// Trace `f` over inputs of the given names and specs into a graph with
/// named outputs.
pub fn trace<F>(inputs: &[(&str, TensorSpec)], f: F) -> Result<Graph>
where
    F: FnOnce(&Tracer, &[Tensor]) -> Result<Vec<(String, Tensor)>>,
{
    let tracer = Tracer::new();
    let args: Vec<Tensor> = inputs
        .iter()
        .map(|(n, s)| tracer.input(n, s.clone()))
        .collect();
    let outputs = match f(&tracer, &args) {
        Ok(outputs) => outputs,
        // A recorded trace error is the root cause of most hook errors: prefer it.
        Err(err) => return Err(tracer.error().unwrap_or(err)),
    };
    drop(args);
    tracer.finish(outputs)
}
