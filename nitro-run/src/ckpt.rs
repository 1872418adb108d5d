//! What a checkpoint holds for a run (params, state, optimizer slots, Device
//! values, position, history, config, fingerprint and the model's traced
//! structure) and exact resume.
//!
//! Resume refuses a checkpoint of another model: another experiment,
//! another GraphConst value, other parameter shapes, or the same shapes
//! with another traced forward graph (an activation chosen from a Host
//! field, say); the refusal lists each difference, with the Host fields
//! whose values differ as the likely cause. `derive`'s values are
//! recomputed by setup, never restored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nitro_ckpt::{
    BestBy, Checkpoint, Goal, Metadata, MetricsRow, Store, StoreConfig, TensorEntry, Value,
};
use nitro_graph::{Array, DType, HostBuffer, TensorSpec};
use nitro_markers::{Category, DeviceData, DeviceValue};

use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::handle::Nitro;
use crate::metric::Totals;
use crate::structure::Structure;

/// A checkpoint tensor of `a`: every dtype is stored as itself, bit for bit.
fn entry(path: &str, a: &Array) -> Result<TensorEntry> {
    Ok(TensorEntry::from_array(path, a)?)
}

/// The stored tensor back as an array, which must have the `spec` the
/// handle expects: a checkpoint of another dtype or shape is refused, never
/// converted. The one exception is the lossy layout checkpoints had before
/// every dtype was stored as itself (f16, bf16, u8 and bool written as
/// f32): such a file still resumes, cast back to the run's dtype.
fn array(file: &Path, e: &TensorEntry, spec: &TensorSpec) -> Result<Array> {
    let mut a = e.to_array()?;
    let legacy = a.dtype() == DType::F32
        && matches!(
            spec.dtype,
            DType::F16 | DType::BF16 | DType::U8 | DType::Bool
        );
    if legacy && a.shape() == spec.shape.as_slice() {
        a = a.cast(spec.dtype);
    }
    if a.spec() != spec {
        return Err(RunError::CheckpointContent {
            path: file.to_path_buf(),
            reason: format!(
                "tensor `{}` is {} in the checkpoint; this run holds {spec}",
                e.path,
                a.spec()
            ),
        });
    }
    Ok(a)
}

/// A restored Device array as the experiment's host value.
fn device_value(a: &Array) -> DeviceValue {
    let data = match a.data() {
        HostBuffer::F16(v) => DeviceData::F16(v.clone()),
        HostBuffer::BF16(v) => DeviceData::Bf16(v.clone()),
        HostBuffer::I32(v) => DeviceData::I32(v.clone()),
        _ => DeviceData::F32(a.to_f32_vec()),
    };
    DeviceValue {
        shape: a.shape().to_vec(),
        data,
    }
}

/// The metadata key of the structure record.
const STRUCTURE: &str = "model_structure";
/// The metadata key of the current epoch's running totals.
const EPOCH_TOTALS: &str = "epoch_totals";
/// The metadata key of the job's world size (absent: a world of one).
const WORLD_SIZE: &str = "world_size";

/// Totals as `{name: [sum, count]}`, floats bit-exact.
fn totals_value(t: &Totals) -> Value {
    Value::Map(
        t.entries()
            .iter()
            .map(|(k, (s, c))| {
                (
                    k.clone(),
                    Value::List(vec![Value::Float(*s), Value::Float(*c)]),
                )
            })
            .collect(),
    )
}

/// Totals back from [`totals_value`]; a checkpoint from before they were
/// recorded has none (its epoch restarts its sums, as it always did).
fn totals_of(file: &Path, v: Option<&Value>) -> Result<Totals> {
    let Some(v) = v else {
        return Ok(Totals::default());
    };
    let bad = || RunError::CheckpointContent {
        path: file.to_path_buf(),
        reason: format!("`{EPOCH_TOTALS}` is not a map of [sum, count] pairs"),
    };
    let Value::Map(m) = v else { return Err(bad()) };
    let mut out = BTreeMap::new();
    for (k, v) in m {
        match v {
            Value::List(l) => match l.as_slice() {
                [Value::Float(s), Value::Float(c)] => {
                    out.insert(k.clone(), (*s, *c));
                }
                _ => return Err(bad()),
            },
            _ => return Err(bad()),
        }
    }
    Ok(Totals::from_entries(out))
}

/// An optimizer slot tree: its name, the param specs, its range in `opt`.
type SlotTree = (String, Vec<(String, TensorSpec)>, std::ops::Range<usize>);

fn text(v: &Value) -> String {
    match v {
        Value::Text(s) => s.clone(),
        other => other.to_string(),
    }
}

impl<E: Experiment> Nitro<E> {
    /// A content hash of what makes checkpoints interchangeable: the
    /// experiment type, every GraphConst value and every tensor signature.
    pub fn fingerprint(&self) -> String {
        let mut h = blake3::Hasher::new();
        h.update(std::any::type_name::<E>().as_bytes());
        for (n, v) in self.e.graph_const_values() {
            h.update(format!("{n}={v};").as_bytes());
        }
        for (n, s) in self
            .programs
            .layout
            .params
            .iter()
            .chain(&self.programs.layout.state)
        {
            h.update(format!("{n}:{:?}{:?};", s.dtype, s.shape).as_bytes());
        }
        h.finalize().to_hex().to_string()
    }

    fn slot_trees(&self) -> Vec<SlotTree> {
        let np = self.programs.layout.params.len();
        (0..self.frozen.run.optimizer.slots())
            .map(|k| {
                (
                    format!("opt{k}"),
                    self.programs.layout.params.clone(),
                    k * np..(k + 1) * np,
                )
            })
            .collect()
    }

    pub(crate) fn open_store(&self) -> Result<Store> {
        let c = &self.frozen.run.checkpointer;
        let mut known: Vec<String> = vec!["loss".into(), "val_loss".into()];
        known.extend(
            self.frozen
                .metrics
                .iter()
                .map(|m| format!("val_{}", m.name)),
        );
        known.extend(
            self.frozen
                .train_metrics
                .iter()
                .map(|m| format!("train_{}", m.name)),
        );
        let best = c.best.as_ref().map(|(metric, keep, maximize)| BestBy {
            metric: metric.clone(),
            goal: if *maximize { Goal::Max } else { Goal::Min },
            keep: *keep,
        });
        Ok(Store::open(
            self.frozen.run.run_dir.clone(),
            StoreConfig {
                keep_last: c.keep_last.max(1),
                best,
                known_metrics: known,
            },
        )?)
    }

    /// The checkpoint of the handle's host values (callers sync first:
    /// see `save_checkpoint`).
    pub(crate) fn checkpoint(&self) -> Result<Checkpoint> {
        self.assert_host_fresh();
        let config = self
            .e
            .config_metadata()
            .into_iter()
            .map(|m| nitro_ckpt::ConfigValue {
                name: m.name.into(),
                category: format!("{:?}", m.category),
                // GraphConst values are compared on resume and kept whole;
                // the others are a record, abbreviated when large.
                value: Value::Text(if m.category == Category::GraphConst {
                    m.value.to_string()
                } else {
                    m.value.abbreviated()
                }),
            })
            .collect();
        let metrics_history = self
            .progress
            .history
            .iter()
            .map(|(epoch, values)| MetricsRow {
                step: *epoch,
                values: values.clone(),
            })
            .collect();
        let mut ckpt = Checkpoint::new(Metadata {
            experiment: E::experiment_name().into(),
            preset: self.frozen.run.preset.clone(),
            config,
            fingerprint: self.fingerprint(),
            step: self.progress.position.step,
            epoch: self.progress.position.epoch,
            position_in_epoch: self.progress.position.batch as u64,
            data_seed: self.frozen.run.seed,
            schedule: [(
                "update".to_string(),
                Value::UInt(self.progress.position.step),
            )]
            .into(),
            metrics_history,
            user: [
                (
                    "optimizer".to_string(),
                    Value::Text(self.frozen.run.optimizer.structure()),
                ),
                (STRUCTURE.to_string(), self.frozen.structure.to_value()),
                (
                    EPOCH_TOTALS.to_string(),
                    totals_value(&self.progress.epoch_totals),
                ),
                (
                    WORLD_SIZE.to_string(),
                    Value::UInt(self.frozen.run.world_size as u64),
                ),
            ]
            .into(),
            ..Metadata::default()
        });
        for ((n, _), a) in self.programs.layout.params.iter().zip(&self.values.params) {
            ckpt.push("params", entry(n, a)?);
        }
        for ((n, _), a) in self.programs.layout.state.iter().zip(&self.values.state) {
            ckpt.push("state", entry(n, a)?);
        }
        for (tree, names, range) in self.slot_trees() {
            for ((n, _), a) in names.iter().zip(&self.values.opt[range]) {
                ckpt.push(&tree, entry(n, a)?);
            }
        }
        for ((n, _), a) in self.programs.layout.device.iter().zip(&self.values.device) {
            ckpt.push("device", entry(n, a)?);
        }
        Ok(ckpt)
    }

    /// The checkpoint of the current position and the metrics it is filed
    /// under: the sync point (a GPU run's values come back first) and the
    /// host snapshot a background writer takes over.
    pub(crate) fn snapshot(
        &mut self,
        metrics: &BTreeMap<String, f64>,
    ) -> Result<(Checkpoint, BTreeMap<String, f64>)> {
        self.values.sync_host()?;
        let ckpt = self.checkpoint()?;
        let mut metrics = metrics.clone();
        if let Some((m, _, maximize)) = &self.frozen.run.checkpointer.best {
            // A mid-epoch save has no validation yet: rank it last.
            metrics
                .entry(m.clone())
                .or_insert(if *maximize { f64::MIN } else { f64::MAX });
        }
        Ok((ckpt, metrics))
    }

    /// Saves the current position into `store` now (no background writer).
    pub(crate) fn save_checkpoint(
        &mut self,
        store: &mut Store,
        metrics: &BTreeMap<String, f64>,
    ) -> Result<PathBuf> {
        let (ckpt, metrics) = self.snapshot(metrics)?;
        let path = store.save(self.progress.position.step, &ckpt, &metrics)?;
        tracing::info!(target: "nitro::ckpt", step = self.progress.position.step, path = %path.display(), "checkpoint saved");
        Ok(path)
    }

    /// Resumes from the newest checkpoint in the run directory, if any:
    /// params, state, optimizer slots, Device values, position and history.
    /// Refused, listing each difference, when a GraphConst or the
    /// fingerprint differs. `derive` has already run for this handle.
    /// A missing run directory holds no checkpoint and is not created.
    ///
    /// In a data-parallel job rank 0 opens the store and picks the
    /// checkpoint; every rank then reads that same file (a path on a
    /// filesystem they share), so all resume from one position.
    pub fn resume(&mut self) -> Result<Option<PathBuf>> {
        if self.dist.world_size() > 1 {
            return self.resume_together();
        }
        if !self.frozen.run.run_dir.exists() {
            return Ok(None);
        }
        let store = self.open_store()?;
        let Some((stored, ckpt)) = store.load_latest()? else {
            return Ok(None);
        };
        self.restore(&stored.path, &ckpt)?;
        Ok(Some(stored.path))
    }

    fn resume_together(&mut self) -> Result<Option<PathBuf>> {
        // Rank 0 alone opens the store (which tidies temporaries); an
        // error there still reaches the broadcast, as an empty choice
        // after which rank 0 returns its error and the others find none.
        let chosen: Result<Option<(PathBuf, Checkpoint)>> = if self.dist.is_root() {
            if self.frozen.run.run_dir.exists() {
                self.open_store().and_then(|store| {
                    Ok(store
                        .load_latest()?
                        .map(|(stored, ckpt)| (stored.path, ckpt)))
                })
            } else {
                Ok(None)
            }
        } else {
            Ok(None)
        };
        let text = match &chosen {
            Ok(Some((path, _))) => path.to_string_lossy().into_owned(),
            _ => String::new(),
        };
        let path = self.dist.broadcast_text("resume", &text)?;
        if self.dist.is_root() {
            let Some((path, ckpt)) = chosen? else {
                return Ok(None);
            };
            self.restore(&path, &ckpt)?;
            return Ok(Some(path));
        }
        if path.is_empty() {
            return Ok(None);
        }
        let path = PathBuf::from(path);
        let ckpt = nitro_ckpt::load(&path)?;
        self.restore(&path, &ckpt)?;
        Ok(Some(path))
    }

    /// Resumes from the checkpoint file at `path` (see [`Nitro::resume`]).
    pub fn resume_from(&mut self, path: &Path) -> Result<()> {
        let ckpt = nitro_ckpt::load(path)?;
        self.restore(path, &ckpt)
    }

    /// How the checkpoint's traced model differs from this handle's: empty
    /// when the forward graphs agree (or the checkpoint predates the
    /// record). Traced at the checkpoint's width when it differs.
    fn structure_differences(&self, meta: &Metadata) -> Vec<String> {
        let Some(saved) = meta.user.get(STRUCTURE).and_then(Structure::from_value) else {
            return vec![];
        };
        let now = if saved.width == self.frozen.structure.width {
            self.frozen.structure.clone()
        } else {
            let kind = crate::layout::Kind::Predict { width: saved.width };
            match self.programs.trace(&self.e, &self.model, &kind) {
                Ok((_, graph, _)) => Structure::of(&graph, saved.width),
                Err(e) => {
                    return vec![format!(
                        "model structure: forward does not trace at the checkpoint's width {}: {e}",
                        saved.width
                    )]
                }
            }
        };
        if now.hash == saved.hash {
            return vec![];
        }
        let ops = saved.op_changes(&now);
        let mut out = vec![format!(
            "model structure (the traced forward graph differs{})",
            if ops.is_empty() {
                String::new()
            } else {
                format!(": {}", ops.join(", "))
            }
        )];
        // Host fields shape a model only through build_model: name those
        // that differ, the likely cause.
        let saved_host: BTreeMap<&str, String> = meta
            .config
            .iter()
            .filter(|c| c.category == format!("{:?}", Category::Host))
            .map(|c| (c.name.as_str(), text(&c.value)))
            .collect();
        for m in self.e.config_metadata() {
            if m.category != Category::Host {
                continue;
            }
            let now = m.value.abbreviated();
            if let Some(old) = saved_host.get(m.name) {
                if *old != now {
                    out.push(format!(
                        "Host `{}` {old} -> {now} (read by build_model?)",
                        m.name
                    ));
                }
            }
        }
        out
    }

    fn restore(&mut self, path: &Path, ckpt: &Checkpoint) -> Result<()> {
        let meta = &ckpt.meta;
        // Refused, not resharded: the position, the epoch's totals and the
        // optimizer trajectory belong to the saved job's global batch.
        let saved = match meta.user.get(WORLD_SIZE) {
            None => 1,
            Some(Value::UInt(n)) => *n as usize,
            Some(_) => {
                return Err(RunError::CheckpointContent {
                    path: path.to_path_buf(),
                    reason: format!("`{WORLD_SIZE}` is not a count"),
                })
            }
        };
        if saved != self.frozen.run.world_size {
            return Err(RunError::WorldSize {
                path: path.to_path_buf(),
                saved,
                now: self.frozen.run.world_size,
            });
        }
        let mut differences = vec![];
        if meta.experiment != E::experiment_name() {
            differences.push(format!(
                "experiment `{}` -> `{}`",
                meta.experiment,
                E::experiment_name()
            ));
        }
        let saved: BTreeMap<&str, String> = meta
            .config
            .iter()
            .filter(|c| c.category == format!("{:?}", Category::GraphConst))
            .map(|c| (c.name.as_str(), text(&c.value)))
            .collect();
        for (name, value) in self.e.graph_const_values() {
            let now = value.to_string();
            match saved.get(name) {
                Some(old) if *old == now => {}
                Some(old) => differences.push(format!("GraphConst `{name}` {old} -> {now}")),
                None => differences.push(format!("GraphConst `{name}` absent -> {now}")),
            }
        }
        if differences.is_empty() && meta.fingerprint != self.fingerprint() {
            differences.push("fingerprint (parameter shapes or experiment type)".into());
        }
        if differences.is_empty() {
            differences.extend(self.structure_differences(meta));
        }
        if !differences.is_empty() {
            return Err(RunError::ResumeMismatch {
                path: path.to_path_buf(),
                differences,
            });
        }
        let load = |tree: &str, specs: &[(String, TensorSpec)]| -> Result<Vec<Array>> {
            specs
                .iter()
                .map(|(n, s)| {
                    let e = ckpt.tensor(&format!("{tree}/{n}")).ok_or_else(|| {
                        RunError::CheckpointContent {
                            path: path.to_path_buf(),
                            reason: format!("no tensor `{tree}/{n}`"),
                        }
                    })?;
                    array(path, e, s)
                })
                .collect()
        };
        let params = load("params", &self.programs.layout.params)?;
        let state = load("state", &self.programs.layout.state)?;
        let mut opt = vec![];
        for (tree, names, _) in self.slot_trees() {
            opt.extend(load(&tree, &names)?);
        }
        let device_specs: Vec<(String, TensorSpec)> = self
            .programs
            .layout
            .device
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect();
        let device = load("device", &device_specs)?;
        let totals = totals_of(path, meta.user.get(EPOCH_TOTALS))?;
        self.values.params = params;
        self.values.state = state;
        self.values.opt = opt;
        self.values.host_replaced();
        // The experiment's Device fields are written back too, so
        // `device_value` and a rebuild from `experiment()` see the restored
        // values, not the construction defaults.
        // What derive computed for this run stays (it is recomputed, never
        // restored); the other Device values come back.
        for (i, ((name, _), a)) in self.programs.layout.device.iter().zip(device).enumerate() {
            if self.frozen.derived.contains(name) {
                continue;
            }
            self.e.set_device_value(name, &device_value(&a))?;
            self.values.device[i] = a;
        }
        self.values.device_values_changed();
        self.progress.position.step = meta.step;
        self.progress.position.epoch = meta.epoch;
        self.progress.position.batch = meta.position_in_epoch as usize;
        self.progress.history = meta
            .metrics_history
            .iter()
            .map(|r| (r.step, r.values.clone()))
            .collect();
        self.progress.epoch_totals = totals;
        self.progress.replay_stopper(self.e.early_stop());
        Ok(())
    }
}

#[cfg(test)]
mod tests;
