//! Export for serving: one self-contained file holding the predict
//! program's graph, its params, state and Device values, the input
//! signature and the exported output names. [`Exported::load`] runs it
//! with no experiment code, on the CPU or (feature `cuda`) a GPU, padding
//! short batches and slicing outputs back exactly as [`Nitro::predict`].
//!
//! The file is a nitro-ckpt container (checksummed, written atomically,
//! decoded with bounds), so it inherits that format's safety:
//!
//! ```text
//!  meta.experiment      the experiment's name
//!  meta.user            format = "nitro-export", version, width (the
//!                       compiled batch width), inputs (per-sample dtype
//!                       and shape of each batch field), outputs (names)
//!  tree "program"       graph: u8 bytes, the predict graph as CBOR (serde)
//!  trees "params", "state", "device"   the arrays the graph reads
//! ```
//!
//! ```no_run
//! # use nitro_data::Batch;
//! # fn demo(batch: &Batch) -> Result<(), Box<dyn std::error::Error>> {
//! let model = nitro_run::Exported::load("model.nexp")?;
//! let outputs = model.predict(batch)?; // {"logits": Array [rows, 10], ...}
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nitro_ckpt::{Checkpoint, Metadata, TensorEntry, Value};
use nitro_data::{Batch, PadFill};
use nitro_graph::{
    Array, CompileOptions, DType, Device, Executable, Graph, HostBuffer, TensorSpec,
};

use crate::convert::to_array;
use crate::experiment::Experiment;
use crate::handle::Nitro;
use crate::infer::{concat_outputs, slice_rows};
use crate::layout::Kind;
use crate::metric::HostOutputs;
use nitro_graph::exec::signature::{parse_input_name, Role};

const FORMAT: &str = "nitro-export";
const VERSION: u64 = 1;

/// Exporting or running an exported model failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// An output name the experiment asked to export is not a forward output.
    #[error(
        "`export_outputs` names `{name}`, which forward does not return; its outputs: {available}"
    )]
    UnknownOutput {
        /// The name asked for.
        name: String,
        /// Forward's output leaves.
        available: String,
    },
    /// The file is not an export of this version.
    #[error("{path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The batch lacks an input field or gives it the wrong sample shape.
    #[error("input `{field}`: {reason}")]
    Input {
        /// The batch field.
        field: String,
        /// What is wrong, with the expected signature.
        reason: String,
    },
    /// The container could not be read or written.
    #[error(transparent)]
    Checkpoint(#[from] nitro_ckpt::Error),
    /// Compiling or running the program failed.
    #[error(transparent)]
    Graph(#[from] nitro_graph::GraphError),
    /// A run error while building the predict program to export.
    #[error(transparent)]
    Run(#[from] Box<crate::RunError>),
}

fn ckpt_dtype(d: DType) -> nitro_ckpt::DType {
    use nitro_ckpt::DType as C;
    match d {
        DType::F32 => C::F32,
        DType::F64 => C::F64,
        DType::F16 => C::F16,
        DType::BF16 => C::BF16,
        DType::I32 => C::I32,
        DType::I64 => C::I64,
        DType::U8 => C::U8,
        DType::Bool => C::Bool,
    }
}

fn graph_dtype(d: nitro_ckpt::DType) -> DType {
    use nitro_ckpt::DType as C;
    match d {
        C::F32 => DType::F32,
        C::F64 => DType::F64,
        C::F16 => DType::F16,
        C::BF16 => DType::BF16,
        C::I32 => DType::I32,
        C::I64 => DType::I64,
        C::U8 => DType::U8,
        C::Bool => DType::Bool,
    }
}

fn entry(path: &str, a: &Array) -> Result<TensorEntry, ExportError> {
    let shape = a.shape().iter().map(|&d| d as u64).collect();
    Ok(TensorEntry::new(
        path,
        ckpt_dtype(a.dtype()),
        shape,
        a.data().to_le_bytes(),
    )?)
}

fn array(e: &TensorEntry) -> Result<Array, ExportError> {
    let bad = |reason: String| ExportError::Format {
        path: PathBuf::new(),
        reason: format!("tensor `{}`: {reason}", e.path),
    };
    let buffer = HostBuffer::from_le_bytes(graph_dtype(e.dtype), &e.bytes)
        .map_err(|x| bad(x.to_string()))?;
    let shape: Vec<usize> = e.shape.iter().map(|&d| d as usize).collect();
    Array::new(&shape, buffer).map_err(|x| bad(x.to_string()))
}

impl<E: Experiment> Nitro<E> {
    /// Writes the predict program, its params, state and Device values,
    /// the input signature and the outputs named by
    /// [`Experiment::export_outputs`] (all of forward's when empty) to one
    /// file that [`Exported::load`] runs without the experiment's code.
    pub fn export(&mut self, path: impl AsRef<Path>) -> Result<PathBuf, ExportError> {
        let width = self.frozen.run.batch_size;
        // The graph is the same on every device: never compile for a GPU
        // just to export it.
        let compiled = self
            .program_on(&Kind::Predict { width }, Device::Cpu)
            .map_err(Box::new)?;
        let mut graph: Graph = compiled.program().graph().clone();
        self.sync_host().map_err(Box::new)?;
        self.assert_host_fresh();
        let leaves: Vec<String> = graph
            .outputs
            .iter()
            .filter_map(|(n, _)| n.strip_prefix("out/").map(str::to_string))
            .collect();
        let wanted = self.e.export_outputs();
        for name in &wanted {
            if !leaves.contains(name) {
                return Err(ExportError::UnknownOutput {
                    name: name.clone(),
                    available: leaves.join(", "),
                });
            }
        }
        graph.outputs.retain(|(n, _)| {
            let leaf = n.strip_prefix("out/").unwrap_or(n);
            wanted.is_empty() || wanted.iter().any(|w| w == leaf)
        });
        let outputs: Vec<Value> = graph
            .outputs
            .iter()
            .map(|(n, _)| Value::Text(n.strip_prefix("out/").unwrap_or(n).to_string()))
            .collect();
        let inputs: Vec<Value> = self
            .programs
            .layout
            .fields
            .iter()
            .filter(|(n, _)| self.programs.layout.forward_fields.contains(n))
            .map(|(n, spec)| {
                Value::Map(BTreeMap::from([
                    ("name".to_string(), Value::Text(n.clone())),
                    (
                        "dtype".to_string(),
                        Value::Text(format!("{:?}", spec.dtype)),
                    ),
                    (
                        "shape".to_string(),
                        Value::List(spec.shape.iter().map(|&d| Value::UInt(d as u64)).collect()),
                    ),
                ]))
            })
            .collect();
        let mut program = Vec::new();
        ciborium::into_writer(&graph, &mut program).map_err(|e| ExportError::Format {
            path: path.as_ref().to_path_buf(),
            reason: format!("encoding the graph: {e}"),
        })?;
        let mut file = Checkpoint::new(Metadata {
            experiment: E::experiment_name().into(),
            preset: self.frozen.run.preset.clone(),
            fingerprint: self.fingerprint(),
            step: self.progress.position.step,
            epoch: self.progress.position.epoch,
            user: BTreeMap::from([
                ("format".to_string(), Value::Text(FORMAT.into())),
                ("version".to_string(), Value::UInt(VERSION)),
                ("width".to_string(), Value::UInt(width as u64)),
                ("inputs".to_string(), Value::List(inputs)),
                ("outputs".to_string(), Value::List(outputs)),
            ]),
            ..Metadata::default()
        });
        file.push(
            "program",
            TensorEntry::new(
                "graph",
                nitro_ckpt::DType::U8,
                vec![program.len() as u64],
                program,
            )?,
        );
        for ((n, _), a) in self.programs.layout.params.iter().zip(&self.params) {
            file.push("params", entry(n, a)?);
        }
        for ((n, _), a) in self.programs.layout.state.iter().zip(&self.state) {
            file.push("state", entry(n, a)?);
        }
        for ((n, _), a) in self.programs.layout.device.iter().zip(&self.device) {
            file.push("device", entry(n, a)?);
        }
        let path = path.as_ref().to_path_buf();
        nitro_ckpt::save(&path, &file)?;
        tracing::info!(target: "nitro::export", path = %path.display(), "exported the predict program");
        Ok(path)
    }
}

/// A model exported by [`Nitro::export`]: the predict program and its
/// arrays, runnable with no experiment code.
pub struct Exported {
    experiment: String,
    width: usize,
    /// Batch fields by name and per-sample signature.
    inputs: Vec<(String, TensorSpec)>,
    outputs: Vec<String>,
    /// Params, state and Device arrays, in the program's input order.
    fixed: Vec<Array>,
    runner: Executable,
}

impl std::fmt::Debug for Exported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exported")
            .field("experiment", &self.experiment)
            .field("width", &self.width)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

impl Exported {
    /// Loads an exported model for the CPU.
    pub fn load(path: impl AsRef<Path>) -> Result<Exported, ExportError> {
        Self::load_on(path, Device::Cpu)
    }

    /// Loads an exported model for `device` (a CUDA device needs the
    /// `cuda` feature and a driver; the error says which is missing).
    pub fn load_on(path: impl AsRef<Path>, device: Device) -> Result<Exported, ExportError> {
        let path = path.as_ref();
        let bad = |reason: String| ExportError::Format {
            path: path.to_path_buf(),
            reason,
        };
        let file = nitro_ckpt::load(path)?;
        let user = &file.meta.user;
        if user.get("format") != Some(&Value::Text(FORMAT.into())) {
            return Err(bad(format!(
                "not a nitro export (a `{FORMAT}` file written by `Nitro::export`)"
            )));
        }
        if user.get("version") != Some(&Value::UInt(VERSION)) {
            return Err(bad(format!(
                "export format version {:?}; this build reads version {VERSION}",
                user.get("version")
            )));
        }
        let width = match user.get("width") {
            Some(Value::UInt(w)) if *w > 0 => *w as usize,
            other => return Err(bad(format!("bad width {other:?}"))),
        };
        let graph_bytes = file
            .tensor("program/graph")
            .ok_or_else(|| bad("no program in the file".into()))?;
        let graph: Graph = ciborium::from_reader(graph_bytes.bytes.as_slice())
            .map_err(|e| bad(format!("decoding the graph: {e}")))?;
        let text = |v: &Value| match v {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        };
        let outputs = match user.get("outputs") {
            Some(Value::List(items)) => items.iter().filter_map(text).collect(),
            _ => return Err(bad("no output names".into())),
        };
        let mut fixed = Vec::new();
        let mut inputs = Vec::new();
        for decl in &graph.inputs {
            let (role, name) = parse_input_name(&decl.name)
                .ok_or_else(|| bad(format!("graph input `{}` has no group", decl.name)))?;
            let tree = match role {
                Role::Params => "params",
                Role::State => "state",
                Role::Device => "device",
                Role::Batch(0) => {
                    let mut sample = decl.spec.clone();
                    sample.shape.remove(0);
                    inputs.push((name.to_string(), sample));
                    continue;
                }
                _ => return Err(bad(format!("unknown graph input `{}`", decl.name))),
            };
            let e = file.tensor(&format!("{tree}/{name}")).ok_or_else(|| {
                bad(format!(
                    "no tensor `{tree}/{name}` for input `{}`",
                    decl.name
                ))
            })?;
            let a = array(e)?;
            if a.spec() != &decl.spec {
                return Err(bad(format!(
                    "`{tree}/{name}` is {:?}{:?}; the program takes {:?}{:?}",
                    a.dtype(),
                    a.shape(),
                    decl.spec.dtype,
                    decl.spec.shape
                )));
            }
            fixed.push(a);
        }
        // Batch inputs come last in the predict layout; keep that promise
        // explicit, since `predict` appends them after `fixed`.
        if graph.inputs[fixed.len()..]
            .iter()
            .any(|d| !d.name.starts_with("batch0/"))
        {
            return Err(bad("batch inputs are not last in the program".into()));
        }
        let options = CompileOptions::named("predict");
        if device != Device::Cpu {
            crate::ptx_store::install_global();
        }
        let runner = Executable::compile_graph(graph, options, device)?;
        Ok(Exported {
            experiment: file.meta.experiment.clone(),
            width,
            inputs,
            outputs,
            fixed,
            runner,
        })
    }

    /// The experiment the model was exported from.
    pub fn experiment(&self) -> &str {
        &self.experiment
    }

    /// The compiled batch width (shorter batches are padded, longer ones chunked).
    pub fn width(&self) -> usize {
        self.width
    }

    /// The batch fields `predict` needs, with their per-sample signature.
    pub fn inputs(&self) -> &[(String, TensorSpec)] {
        &self.inputs
    }

    /// The output names `predict` returns.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// Outputs for `batch` (any number of rows; other fields are ignored):
    /// run at the compiled width, short chunks padded, outputs sliced back
    /// to the real rows, exactly as [`Nitro::predict`].
    pub fn predict(&self, batch: &Batch) -> Result<HostOutputs, ExportError> {
        let rows = batch.rows();
        for (name, spec) in &self.inputs {
            let a = batch.get(name).ok_or_else(|| ExportError::Input {
                field: name.clone(),
                reason: format!(
                    "missing from the batch (fields: {}); the model takes {:?}[n, {:?}]",
                    batch.names().join(", "),
                    spec.dtype,
                    spec.shape
                ),
            })?;
            if a.sample_shape() != spec.shape.as_slice() {
                return Err(ExportError::Input {
                    field: name.clone(),
                    reason: format!(
                        "sample shape {:?}; the model takes {:?}",
                        a.sample_shape(),
                        spec.shape
                    ),
                });
            }
        }
        let mut parts: Vec<HostOutputs> = Vec::new();
        let mut start = 0;
        loop {
            let end = (start + self.width).min(rows);
            let mut args = self.fixed.clone();
            let mut real = end - start;
            for (name, _) in &self.inputs {
                let field = batch.get(name).expect("checked above");
                let mut chunk = field
                    .slice_rows(start, end)
                    .map_err(|e| ExportError::Input {
                        field: name.clone(),
                        reason: e.to_string(),
                    })?;
                if chunk.rows() < self.width {
                    real = chunk.rows();
                    chunk = chunk
                        .pad_rows(self.width, PadFill::RepeatLast)
                        .map_err(|e| ExportError::Input {
                            field: name.clone(),
                            reason: e.to_string(),
                        })?;
                }
                args.push(to_array(name, &chunk).map_err(|e| ExportError::Input {
                    field: name.clone(),
                    reason: e.to_string(),
                })?);
            }
            let out = self.runner.run(&mut args)?;
            parts.push(
                self.runner
                    .returned_names()
                    .iter()
                    .zip(out)
                    .map(|(n, a)| {
                        (
                            n.strip_prefix("out/").unwrap_or(n).to_string(),
                            slice_rows(&a, real),
                        )
                    })
                    .collect(),
            );
            start = end;
            if start >= rows {
                break;
            }
        }
        Ok(concat_outputs(parts))
    }
}
