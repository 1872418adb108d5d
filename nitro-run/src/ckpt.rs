//! What a checkpoint holds for a run (params, state, optimizer slots, Device
//! values, position, history, config and fingerprint) and exact resume.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nitro_ckpt::{
    BestBy, Checkpoint, Goal, Metadata, MetricsRow, Store, StoreConfig, TensorEntry, Value,
};
use nitro_graph::{Array, HostBuffer, TensorSpec};
use nitro_markers::{Category, DeviceData, DeviceValue};

use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::handle::Nitro;

fn entry(path: &str, a: &Array) -> Result<TensorEntry> {
    let shape: Vec<u64> = a.shape().iter().map(|&d| d as u64).collect();
    Ok(match a.data() {
        HostBuffer::F64(v) => TensorEntry::from_f64(path, shape, v)?,
        HostBuffer::I32(v) => TensorEntry::from_i32(path, shape, v)?,
        HostBuffer::I64(v) => TensorEntry::from_i64(path, shape, v)?,
        HostBuffer::F32(v) => TensorEntry::from_f32(path, shape, v)?,
        _ => TensorEntry::from_f32(path, shape, &a.to_f32_vec())?,
    })
}

fn array(e: &TensorEntry, spec: &TensorSpec) -> Result<Array> {
    let shape: Vec<usize> = e.shape.iter().map(|&d| d as usize).collect();
    let buffer: HostBuffer = match spec.dtype {
        nitro_graph::DType::F64 => e.to_f64()?.into(),
        nitro_graph::DType::I32 => e.to_i32()?.into(),
        nitro_graph::DType::I64 => e.to_i64()?.into(),
        _ => e.to_f32()?.into(),
    };
    Ok(Array::new(&shape, buffer)
        .expect("a validated checkpoint entry matches its shape")
        .cast(spec.dtype))
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
        for (n, s) in self.layout.params.iter().chain(&self.layout.state) {
            h.update(format!("{n}:{:?}{:?};", s.dtype, s.shape).as_bytes());
        }
        h.finalize().to_hex().to_string()
    }

    fn slot_trees(&self) -> Vec<SlotTree> {
        let np = self.layout.params.len();
        (0..self.run.optimizer.slots())
            .map(|k| {
                (
                    format!("opt{k}"),
                    self.layout.params.clone(),
                    k * np..(k + 1) * np,
                )
            })
            .collect()
    }

    pub(crate) fn open_store(&self) -> Result<Store> {
        let c = &self.run.checkpointer;
        let mut known: Vec<String> = vec!["loss".into(), "val_loss".into()];
        known.extend(self.metrics.iter().map(|m| format!("val_{}", m.name)));
        known.extend(
            self.train_metrics
                .iter()
                .map(|m| format!("train_{}", m.name)),
        );
        let best = c.best.as_ref().map(|(metric, keep, maximize)| BestBy {
            metric: metric.clone(),
            goal: if *maximize { Goal::Max } else { Goal::Min },
            keep: *keep,
        });
        Ok(Store::open(
            self.run.run_dir.clone(),
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
                value: Value::Text(m.value.to_string()),
            })
            .collect();
        let metrics_history = self
            .history
            .iter()
            .map(|(epoch, values)| MetricsRow {
                step: *epoch,
                values: values.clone(),
            })
            .collect();
        let mut ckpt = Checkpoint::new(Metadata {
            experiment: E::experiment_name().into(),
            preset: self.run.preset.clone(),
            config,
            fingerprint: self.fingerprint(),
            step: self.position.step,
            epoch: self.position.epoch,
            position_in_epoch: self.position.batch as u64,
            data_seed: self.run.seed,
            schedule: [("update".to_string(), Value::UInt(self.position.step))].into(),
            metrics_history,
            user: [(
                "optimizer".to_string(),
                Value::Text(self.run.optimizer.structure()),
            )]
            .into(),
            ..Metadata::default()
        });
        for ((n, _), a) in self.layout.params.iter().zip(&self.params) {
            ckpt.push("params", entry(n, a)?);
        }
        for ((n, _), a) in self.layout.state.iter().zip(&self.state) {
            ckpt.push("state", entry(n, a)?);
        }
        for (tree, names, range) in self.slot_trees() {
            for ((n, _), a) in names.iter().zip(&self.opt[range]) {
                ckpt.push(&tree, entry(n, a)?);
            }
        }
        for ((n, _), a) in self.layout.device.iter().zip(&self.device) {
            ckpt.push("device", entry(n, a)?);
        }
        Ok(ckpt)
    }

    pub(crate) fn save_checkpoint(
        &mut self,
        store: &mut Store,
        metrics: &BTreeMap<String, f64>,
    ) -> Result<PathBuf> {
        // The sync point: a GPU run's values come back before they are saved.
        self.sync_host()?;
        let ckpt = self.checkpoint()?;
        let mut metrics = metrics.clone();
        if let Some((m, _, maximize)) = &self.run.checkpointer.best {
            // A mid-epoch save has no validation yet: rank it last.
            metrics
                .entry(m.clone())
                .or_insert(if *maximize { f64::MIN } else { f64::MAX });
        }
        let path = store.save(self.position.step, &ckpt, &metrics)?;
        tracing::info!(target: "nitro::ckpt", step = self.position.step, path = %path.display(), "checkpoint saved");
        Ok(path)
    }

    /// Resumes from the newest checkpoint in the run directory, if any:
    /// params, state, optimizer slots, Device values, position and history.
    /// Refused, listing each difference, when a GraphConst or the
    /// fingerprint differs. `derive` has already run for this handle.
    pub fn resume(&mut self) -> Result<Option<PathBuf>> {
        let store = self.open_store()?;
        let Some((stored, ckpt)) = store.load_latest()? else {
            return Ok(None);
        };
        self.restore(&stored.path, &ckpt)?;
        Ok(Some(stored.path))
    }

    /// Resumes from the checkpoint file at `path` (see [`Nitro::resume`]).
    pub fn resume_from(&mut self, path: &Path) -> Result<()> {
        let ckpt = nitro_ckpt::load(path)?;
        self.restore(path, &ckpt)
    }

    fn restore(&mut self, path: &Path, ckpt: &Checkpoint) -> Result<()> {
        let meta = &ckpt.meta;
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
                    array(e, s)
                })
                .collect()
        };
        let params = load("params", &self.layout.params)?;
        let state = load("state", &self.layout.state)?;
        let mut opt = vec![];
        for (tree, names, _) in self.slot_trees() {
            opt.extend(load(&tree, &names)?);
        }
        let device_specs: Vec<(String, TensorSpec)> = self
            .layout
            .device
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect();
        let device = load("device", &device_specs)?;
        self.params = params;
        self.state = state;
        self.opt = opt;
        self.host_replaced();
        // The experiment's Device fields are written back too, so
        // `device_value` and a rebuild from `experiment()` see the restored
        // values, not the construction defaults.
        for ((name, _), a) in self.layout.device.iter().zip(&device) {
            self.e.set_device_value(name, &device_value(a))?;
        }
        self.device = device;
        self.device_values_changed();
        self.position.step = meta.step;
        self.position.epoch = meta.epoch;
        self.position.batch = meta.position_in_epoch as usize;
        self.history = meta
            .metrics_history
            .iter()
            .map(|r| (r.step, r.values.clone()))
            .collect();
        Ok(())
    }
}
