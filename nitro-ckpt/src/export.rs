//! The export container: one file holding a program for serving (its
//! graph, encoded by the caller), the arrays it reads, its batch width, the
//! per-sample signature of its batch inputs and its output names. It is a
//! checkpoint file (checksummed, written atomically, decoded with bounds)
//! whose metadata says what it is:
//!
//! ```text
//!  meta.experiment      the experiment's name
//!  meta.user            format = "nitro-export", version = 1, width (the
//!                       compiled batch width), inputs (per-sample dtype
//!                       and shape of each batch field), outputs (names)
//!  tree "program"       graph: u8 bytes, the program as the caller encoded it
//!  trees "params", "state", "device"   the arrays the program reads,
//!                       each dtype stored as itself
//! ```
//!
//! This module owns the file format only; running what it holds is the
//! caller's (nitro-run's `Exported`), and so is encoding the graph, which
//! nitro-ckpt knows only as bytes.
//!
//! ```
//! use nitro_ckpt::export::Export;
//! use nitro_device::{HostArray, TensorSpec};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("model.nexp");
//! let mut export = Export::new("DigitsMlp", 128, b"graph bytes".to_vec());
//! export.inputs.push(("image".into(), TensorSpec::f32(&[28, 28])));
//! export.outputs.push("logits".into());
//! export.params.insert("dense.weight".into(), HostArray::new(&[2], vec![0.5f32, -1.0])?);
//! export.save(&path)?;
//! assert_eq!(Export::load(&path)?, export);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use nitro_device::{DType, HostArray, TensorSpec};

use crate::{Checkpoint, Error, Metadata, Result, TensorEntry, Value};

/// `meta.user.format` of an export file.
pub const FORMAT: &str = "nitro-export";
/// The container version this build writes and reads.
pub const VERSION: u64 = 1;

/// The trees of arrays an export holds, in the order they are written.
const TREES: [&str; 3] = ["params", "state", "device"];

/// An exported program and everything it needs to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// The experiment it was exported from.
    pub experiment: String,
    /// The preset the experiment was built from, if any.
    pub preset: Option<String>,
    /// The experiment's fingerprint.
    pub fingerprint: String,
    /// Optimizer steps taken when exported.
    pub step: u64,
    /// Epochs completed when exported.
    pub epoch: u64,
    /// The compiled batch width (at least 1).
    pub width: usize,
    /// Batch fields with their per-sample signature (no batch axis).
    pub inputs: Vec<(String, TensorSpec)>,
    /// The output names the program returns.
    pub outputs: Vec<String>,
    /// The program, as the exporter encoded it (nitro-run: the graph as CBOR).
    pub program: Vec<u8>,
    /// Params by path.
    pub params: BTreeMap<String, HostArray>,
    /// Model state by path.
    pub state: BTreeMap<String, HostArray>,
    /// Device values by field name.
    pub device: BTreeMap<String, HostArray>,
}

impl Export {
    /// An export of `program` at batch `width` with no arrays, inputs or
    /// outputs yet.
    pub fn new(experiment: impl Into<String>, width: usize, program: Vec<u8>) -> Export {
        Export {
            experiment: experiment.into(),
            preset: None,
            fingerprint: String::new(),
            step: 0,
            epoch: 0,
            width,
            inputs: vec![],
            outputs: vec![],
            program,
            params: BTreeMap::new(),
            state: BTreeMap::new(),
            device: BTreeMap::new(),
        }
    }

    fn tree(&self, name: &str) -> &BTreeMap<String, HostArray> {
        match name {
            "params" => &self.params,
            "state" => &self.state,
            _ => &self.device,
        }
    }

    fn tree_mut(&mut self, name: &str) -> &mut BTreeMap<String, HostArray> {
        match name {
            "params" => &mut self.params,
            "state" => &mut self.state,
            _ => &mut self.device,
        }
    }

    /// The container as a checkpoint record.
    pub fn to_checkpoint(&self) -> Result<Checkpoint> {
        let inputs = self
            .inputs
            .iter()
            .map(|(name, spec)| {
                Value::Map(BTreeMap::from([
                    ("name".to_string(), Value::Text(name.clone())),
                    // `Debug` (`F32`) is what version 1 has always written.
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
        let outputs = self.outputs.iter().cloned().map(Value::Text).collect();
        let mut file = Checkpoint::new(Metadata {
            experiment: self.experiment.clone(),
            preset: self.preset.clone(),
            fingerprint: self.fingerprint.clone(),
            step: self.step,
            epoch: self.epoch,
            user: BTreeMap::from([
                ("format".to_string(), Value::Text(FORMAT.into())),
                ("version".to_string(), Value::UInt(VERSION)),
                ("width".to_string(), Value::UInt(self.width as u64)),
                ("inputs".to_string(), Value::List(inputs)),
                ("outputs".to_string(), Value::List(outputs)),
            ]),
            ..Metadata::default()
        });
        file.push(
            "program",
            TensorEntry::new(
                "graph",
                DType::U8,
                vec![self.program.len() as u64],
                self.program.clone(),
            )?,
        );
        for tree in TREES {
            for (name, a) in self.tree(tree) {
                file.push(tree, TensorEntry::from_array(name, a)?);
            }
        }
        Ok(file)
    }

    /// Reads the container back from a checkpoint record; `path` names the
    /// file in errors. Refuses a record that is not an export of
    /// [`VERSION`], saying what is wrong.
    pub fn from_checkpoint(path: &Path, file: &Checkpoint) -> Result<Export> {
        let bad = |reason: String| Error::NotExport {
            path: path.to_path_buf(),
            reason,
        };
        let user = &file.meta.user;
        if user.get("format") != Some(&Value::Text(FORMAT.into())) {
            return Err(bad(format!("its metadata does not say format `{FORMAT}`")));
        }
        if user.get("version") != Some(&Value::UInt(VERSION)) {
            return Err(bad(format!(
                "export format version {:?}; this build reads version {VERSION}",
                user.get("version")
            )));
        }
        let width = match user.get("width") {
            Some(Value::UInt(w)) if *w > 0 => usize::try_from(*w)
                .map_err(|_| bad(format!("width {w} does not fit this machine")))?,
            other => return Err(bad(format!("bad width {other:?}"))),
        };
        let Some(Value::List(outputs)) = user.get("outputs") else {
            return Err(bad("no output names".into()));
        };
        let outputs = outputs
            .iter()
            .map(|v| match v {
                Value::Text(s) => Ok(s.clone()),
                other => Err(bad(format!("output name {other:?} is not text"))),
            })
            .collect::<Result<Vec<_>>>()?;
        let inputs = match user.get("inputs") {
            Some(Value::List(items)) => items
                .iter()
                .map(|v| input(v).ok_or_else(|| bad(format!("bad input signature {v:?}"))))
                .collect::<Result<Vec<_>>>()?,
            _ => return Err(bad("no input signatures".into())),
        };
        let program = file
            .tensor("program/graph")
            .filter(|e| e.dtype == DType::U8)
            .ok_or_else(|| bad("no program (a u8 tensor `program/graph`)".into()))?
            .bytes
            .clone();
        let meta = &file.meta;
        let mut export = Export {
            experiment: meta.experiment.clone(),
            preset: meta.preset.clone(),
            fingerprint: meta.fingerprint.clone(),
            step: meta.step,
            epoch: meta.epoch,
            width,
            inputs,
            outputs,
            program,
            params: BTreeMap::new(),
            state: BTreeMap::new(),
            device: BTreeMap::new(),
        };
        for tree in TREES {
            for e in file.trees.get(tree).into_iter().flatten() {
                export.tree_mut(tree).insert(e.path.clone(), e.to_array()?);
            }
        }
        Ok(export)
    }

    /// Writes the container to `path` (atomically, as every checkpoint).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        crate::save(path.as_ref(), &self.to_checkpoint()?)
    }

    /// Reads and checks the container at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Export> {
        let path = path.as_ref();
        // A damaged or foreign file is spoken of as the export it should
        // be, not as a checkpoint.
        let ckpt = crate::load(path).map_err(|e| match e {
            Error::Format { path, what } => Error::NotExport {
                path,
                reason: format!("it is damaged or not an export ({what}); export the model again"),
            },
            Error::Checksum { path, entry } => Error::NotExport {
                path,
                reason: format!("it is damaged (the checksum of `{entry}` does not match); export the model again"),
            },
            other => other,
        })?;
        Export::from_checkpoint(path, &ckpt)
    }
}

/// One `{name, dtype, shape}` input signature; the dtype as version 1
/// writes it (`F32`, `BF16`, `Bool`) or as its name (`f32`).
fn input(v: &Value) -> Option<(String, TensorSpec)> {
    let Value::Map(m) = v else { return None };
    let (Some(Value::Text(name)), Some(Value::Text(dtype)), Some(Value::List(shape))) =
        (m.get("name"), m.get("dtype"), m.get("shape"))
    else {
        return None;
    };
    let dtype = DType::from_name(&dtype.to_ascii_lowercase())?;
    let shape = shape
        .iter()
        .map(|d| match d {
            Value::UInt(d) => usize::try_from(*d).ok(),
            _ => None,
        })
        .collect::<Option<Vec<usize>>>()?;
    Some((name.clone(), TensorSpec::new(dtype, &shape)))
}
