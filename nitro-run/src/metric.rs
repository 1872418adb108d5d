//! Metrics: named (sum, count) pairs computed on the host from outputs that
//! have already been sliced back to the real samples, so a metric never sees
//! a padded row. The framework sums over batches and divides at the end.

use std::collections::BTreeMap;

use nitro_data::Batch;
use nitro_graph::Array;

/// Forward outputs on the host, by leaf path (`logits`, `energy`; a bare
/// tensor output is `output`).
pub type HostOutputs = BTreeMap<String, Array>;

type MetricFn = dyn Fn(&HostOutputs, &Batch) -> (f64, f64) + Send + Sync;

/// A named metric: `compute(outputs, batch)` returns `(sum, count)` for one
/// batch; the reported value is the total sum over the total count.
pub struct Metric {
    /// The name reported (prefixed `val_` for validation, `train_` in training).
    pub name: String,
    compute: Box<MetricFn>,
}

impl Metric {
    /// A metric from a function returning `(sum, count)` for a batch.
    pub fn new(
        name: &str,
        compute: impl Fn(&HostOutputs, &Batch) -> (f64, f64) + Send + Sync + 'static,
    ) -> Metric {
        Metric {
            name: name.into(),
            compute: Box::new(compute),
        }
    }

    /// Classification accuracy: argmax of output `output` (`[n, classes]`)
    /// against integer batch field `label` (`[n]`).
    pub fn accuracy(output: &str, label: &str) -> Metric {
        let (output, label) = (output.to_string(), label.to_string());
        Metric::new("acc", move |out, batch| {
            let (Some(logits), Some(labels)) = (out.get(&output), batch.get(&label)) else {
                return (0.0, 0.0);
            };
            let labels = crate::convert::labels_i64(labels);
            let classes = logits.shape().last().copied().unwrap_or(1).max(1);
            let values = logits.to_f32_vec();
            let correct = values
                .chunks(classes)
                .zip(&labels)
                .filter(|(row, &y)| argmax(row) as i64 == y)
                .count();
            (correct as f64, labels.len() as f64)
        })
    }

    /// Renames the metric.
    pub fn named(mut self, name: &str) -> Metric {
        self.name = name.into();
        self
    }

    pub(crate) fn compute(&self, out: &HostOutputs, batch: &Batch) -> (f64, f64) {
        (self.compute)(out, batch)
    }
}

fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best
}

/// Sums and counts per metric name, over batches.
#[derive(Debug, Default, Clone)]
pub(crate) struct Totals(BTreeMap<String, (f64, f64)>);

impl Totals {
    pub(crate) fn add(&mut self, name: &str, sum: f64, count: f64) {
        let e = self.0.entry(name.to_string()).or_default();
        e.0 += sum;
        e.1 += count;
    }

    pub(crate) fn finish(&self, prefix: &str) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .filter(|(_, (_, c))| *c > 0.0)
            .map(|(k, (s, c))| (format!("{prefix}{k}"), s / c))
            .collect()
    }
}
