//! Export for serving: one self-contained file holding the predict
//! program's graph, its params, state and Device values, the input
//! signature and the exported output names. [`Exported::load`] runs it
//! with no experiment code, on the CPU or (feature `cuda`) a GPU, padding
//! short batches and slicing outputs back exactly as [`Nitro::predict`].
//!
//! The file format is nitro-ckpt's export container
//! ([`nitro_ckpt::export::Export`]: a checkpoint file, checksummed, written
//! atomically, decoded with bounds, every dtype stored as itself); this
//! module fills it (the predict graph as CBOR, the arrays it reads) and
//! runs what it holds.
//!
//! ```no_run
//! # use nitro_data::Batch;
//! # fn demo(batch: &Batch) -> Result<(), Box<dyn std::error::Error>> {
//! let model = nitro_run::Exported::load("model.nexp")?;
//! let outputs = model.predict(batch)?; // {"logits": Array [rows, 10], ...}
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};

use nitro_ckpt::export::Export;
use nitro_data::{Batch, PadFill};
use nitro_graph::{Array, CompileOptions, Device, Executable, Graph, TensorSpec};

use crate::convert::to_array;
use crate::experiment::Experiment;
use crate::handle::Nitro;
use crate::infer::concat_outputs;
use crate::layout::Kind;
use crate::metric::HostOutputs;
use nitro_graph::exec::signature::{parse_input_name, Role};

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
        self.values.sync_host().map_err(Box::new)?;
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
        let mut program = Vec::new();
        ciborium::into_writer(&graph, &mut program).map_err(|e| ExportError::Format {
            path: path.as_ref().to_path_buf(),
            reason: format!("encoding the graph: {e}"),
        })?;
        let mut file = Export::new(E::experiment_name(), width, program);
        file.preset = self.frozen.run.preset.clone();
        file.fingerprint = self.fingerprint();
        file.step = self.progress.position.step;
        file.epoch = self.progress.position.epoch;
        file.outputs = graph
            .outputs
            .iter()
            .map(|(n, _)| n.strip_prefix("out/").unwrap_or(n).to_string())
            .collect();
        let layout = &self.programs.layout;
        file.inputs = layout
            .fields
            .iter()
            .filter(|(n, _)| layout.forward_fields.contains(n))
            .cloned()
            .collect();
        let groups = [
            (&mut file.params, &layout.params, &self.values.params),
            (&mut file.state, &layout.state, &self.values.state),
        ];
        for (tree, names, arrays) in groups {
            tree.extend(
                names
                    .iter()
                    .map(|(n, _)| n.clone())
                    .zip(arrays.iter().cloned()),
            );
        }
        file.device.extend(
            layout
                .device
                .iter()
                .map(|(n, _)| n.to_string())
                .zip(self.values.device.iter().cloned()),
        );
        let path = path.as_ref().to_path_buf();
        file.save(&path)?;
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
        let mut file = Export::load(path)?;
        let graph: Graph = ciborium::from_reader(file.program.as_slice())
            .map_err(|e| bad(format!("decoding the graph: {e}")))?;
        let mut fixed = Vec::new();
        let mut inputs = Vec::new();
        for decl in &graph.inputs {
            let (role, name) = parse_input_name(&decl.name)
                .ok_or_else(|| bad(format!("graph input `{}` has no group", decl.name)))?;
            let (tree, arrays) = match role {
                Role::Params => ("params", &mut file.params),
                Role::State => ("state", &mut file.state),
                Role::Device => ("device", &mut file.device),
                Role::Batch(0) => {
                    let mut sample = decl.spec.clone();
                    sample.shape.remove(0);
                    inputs.push((name.to_string(), sample));
                    continue;
                }
                _ => return Err(bad(format!("unknown graph input `{}`", decl.name))),
            };
            let a = arrays.remove(name).ok_or_else(|| {
                bad(format!(
                    "no tensor `{tree}/{name}` for input `{}`",
                    decl.name
                ))
            })?;
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
            experiment: file.experiment,
            width: file.width,
            inputs,
            outputs: file.outputs,
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
        crate::convert::check_batch(batch, &self.inputs)
            .map_err(|(field, reason)| ExportError::Input { field, reason })?;
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
                        let leaf = n.strip_prefix("out/").unwrap_or(n).to_string();
                        let sliced =
                            nitro_data::slice_leaf(&leaf, &a, self.width, real).map_err(|e| {
                                ExportError::Input {
                                    field: leaf.clone(),
                                    reason: e.to_string(),
                                }
                            })?;
                        Ok((leaf, sliced))
                    })
                    .collect::<Result<_, ExportError>>()?,
            );
            start = end;
            if start >= rows {
                break;
            }
        }
        concat_outputs(parts).map_err(|e| Box::new(e).into())
    }
}
