//! The model summary (Keras' `model.summary()`, Lightning's ModelSummary):
//! parameters per layer and in total with their bytes, the state's bytes,
//! and the compiled train step's kernel count and planned peak memory.
//! A layer is a parameter path without its last segment
//! (`decoder.dense1.weight` belongs to `decoder.dense1`).

use std::collections::BTreeMap;

use crate::error::Result;
use crate::experiment::Experiment;
use crate::handle::Nitro;

/// One layer's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerSummary {
    /// The layer's path.
    pub name: String,
    /// Its parameter tensors, `(name, shape text)`.
    pub tensors: Vec<(String, String)>,
    /// Elements.
    pub params: usize,
    /// Bytes at the parameters' dtypes.
    pub bytes: usize,
}

/// What [`Nitro::summary`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The experiment.
    pub experiment: String,
    /// Layers in path order.
    pub layers: Vec<LayerSummary>,
    /// Parameter elements in total.
    pub total_params: usize,
    /// Parameter bytes in total.
    pub total_bytes: usize,
    /// Bytes of non-trainable state.
    pub state_bytes: usize,
    /// Bytes of optimizer state (slots per parameter).
    pub optimizer_bytes: usize,
    /// Kernels the compiled train step launches per update.
    pub train_kernels: usize,
    /// Planned peak bytes of the train step's intermediates.
    pub train_peak_bytes: usize,
}

/// `bytes` for people: `3.1 MiB`.
fn human(bytes: usize) -> String {
    let mut v = bytes as f64;
    for unit in ["B", "KiB", "MiB", "GiB"] {
        if v < 1024.0 || unit == "GiB" {
            return if unit == "B" {
                format!("{bytes} B")
            } else {
                format!("{v:.1} {unit}")
            };
        }
        v /= 1024.0;
    }
    unreachable!("the loop returns at GiB")
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = self
            .layers
            .iter()
            .map(|l| l.name.len())
            .max()
            .unwrap_or(0)
            .max("layer".len());
        writeln!(f, "{} model summary", self.experiment)?;
        writeln!(
            f,
            "{:<w$}  {:>12}  {:>10}  tensors",
            "layer", "params", "bytes"
        )?;
        for l in &self.layers {
            let tensors: Vec<String> = l.tensors.iter().map(|(n, s)| format!("{n} {s}")).collect();
            writeln!(
                f,
                "{:<w$}  {:>12}  {:>10}  {}",
                l.name,
                l.params,
                human(l.bytes),
                tensors.join(", ")
            )?;
        }
        writeln!(
            f,
            "{:<w$}  {:>12}  {:>10}",
            "total",
            self.total_params,
            human(self.total_bytes)
        )?;
        writeln!(
            f,
            "state {}   optimizer state {}",
            human(self.state_bytes),
            human(self.optimizer_bytes)
        )?;
        write!(
            f,
            "train step: {} kernels per update, planned peak of intermediates {}",
            self.train_kernels,
            human(self.train_peak_bytes)
        )
    }
}

impl<E: Experiment> Nitro<E> {
    /// The model summary: parameters per layer and in total, bytes, and
    /// the train step's kernel count and planned peak memory (compiling
    /// the train step if it is not compiled yet).
    pub fn summary(&mut self) -> Result<Summary> {
        let compiled = self.program(&self.train_kind())?;
        let stats = compiled.program().desc().stats().clone();
        let mut layers: BTreeMap<String, LayerSummary> = BTreeMap::new();
        for (name, spec) in &self.programs.layout.params {
            let (layer, tensor) = name
                .rsplit_once('.')
                .unwrap_or((name.as_str(), name.as_str()));
            let entry = layers
                .entry(layer.to_string())
                .or_insert_with(|| LayerSummary {
                    name: layer.to_string(),
                    tensors: vec![],
                    params: 0,
                    bytes: 0,
                });
            let n: usize = spec.shape.iter().product();
            entry.tensors.push((tensor.to_string(), spec.to_string()));
            entry.params += n;
            entry.bytes += n * spec.dtype.size_of();
        }
        let bytes = |specs: &[(String, nitro_graph::TensorSpec)]| -> usize {
            specs
                .iter()
                .map(|(_, s)| s.shape.iter().product::<usize>() * s.dtype.size_of())
                .sum()
        };
        let total_bytes = bytes(&self.programs.layout.params);
        Ok(Summary {
            experiment: E::experiment_name().into(),
            total_params: layers.values().map(|l| l.params).sum(),
            layers: layers.into_values().collect(),
            total_bytes,
            state_bytes: bytes(&self.programs.layout.state),
            optimizer_bytes: total_bytes * self.frozen.run.optimizer.slots(),
            train_kernels: stats.kernels,
            train_peak_bytes: stats.peak_bytes,
        })
    }
}

impl<E: Experiment> Nitro<E> {
    /// The compiled train step's kernels, one line each in launch order
    /// (the lines a per-kernel profile names), compiling the train step if
    /// it is not compiled yet: what fused, which matmuls carry epilogues,
    /// which updates run as one register-resident loop (`as adam+guard`).
    pub fn train_listing(&mut self) -> Result<String> {
        Ok(self.program(&self.train_kind())?.program().listing())
    }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(human(12), "12 B");
        assert_eq!(human(2048), "2.0 KiB");
        assert_eq!(human(3 * 1024 * 1024 + 1024 * 100), "3.1 MiB");
    }
}
