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

/// What a metric reads: output leaves of forward and batch fields. Setup
/// checks both exist (an error names the missing one and lists what
/// exists) and gathers the fields for the metric even when no hook
/// declares them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricReads {
    /// Output leaves by path (`output` for a bare tensor).
    pub outputs: Vec<String>,
    /// Batch fields by name.
    pub fields: Vec<String>,
}

/// A named metric: `compute(outputs, batch)` returns `(sum, count)` for one
/// batch; the reported value is the total sum over the total count.
pub struct Metric {
    /// The name reported (prefixed `val_` for validation, `train_` in training).
    pub name: String,
    compute: Box<MetricFn>,
    reads: MetricReads,
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
            reads: MetricReads::default(),
        }
    }

    /// Declares the output leaves and batch fields the metric reads, so
    /// setup can check them and route the fields (a metric from
    /// [`Metric::new`] declares none and sees the routed fields only).
    pub fn reads(mut self, outputs: &[&str], fields: &[&str]) -> Metric {
        self.reads = MetricReads {
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            fields: fields.iter().map(|s| s.to_string()).collect(),
        };
        self
    }

    /// What the metric declared it reads.
    pub fn declared_reads(&self) -> &MetricReads {
        &self.reads
    }

    /// Classification accuracy: argmax of output `output` (`[n, classes]`)
    /// against integer batch field `label` (`[n]`).
    pub fn accuracy(output: &str, label: &str) -> Metric {
        let reads = [output, label];
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
        .reads(&reads[..1], &reads[1..])
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

    /// The sums and counts by name (a checkpoint records them, so a
    /// resumed epoch's means cover the steps before the resume too).
    pub(crate) fn entries(&self) -> &BTreeMap<String, (f64, f64)> {
        &self.0
    }

    /// Totals from recorded [`Totals::entries`].
    pub(crate) fn from_entries(entries: BTreeMap<String, (f64, f64)>) -> Totals {
        Totals(entries)
    }

    /// Adds every sum and count of `other`.
    pub(crate) fn merge(&mut self, other: &Totals) {
        for (k, (s, c)) in &other.0 {
            self.add(k, *s, *c);
        }
    }

    pub(crate) fn finish(&self, prefix: &str) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .filter(|(_, (_, c))| *c > 0.0)
            .map(|(k, (s, c))| (format!("{prefix}{k}"), s / c))
            .collect()
    }
}
