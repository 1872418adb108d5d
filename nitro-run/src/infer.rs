//! `predict` and `evaluate`: forward (and the loss) at the compiled width
//! on any number of rows. Short chunks are padded by repeating the last
//! real row; outputs are sliced back before anything sees them, so no
//! metric ever sees a padded sample, and the eval loss is the exact mean
//! over the real rows (see `trace`).

use std::collections::BTreeMap;

use nitro_data::{Batch, Dataset, InMemory, PadFill};
use nitro_graph::Array;

use crate::convert::to_array;
use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::handle::Nitro;
use crate::layout::Kind;
use crate::metric::{HostOutputs, Totals};
use crate::programs::Compiled;
use crate::trace::Returned;

/// Pads a short batch to `width` (copies of the last real row); `None`
/// when it is already full.
fn pad(batch: &Batch, width: usize) -> Result<(Option<Batch>, usize)> {
    let real = batch.rows();
    if real == width {
        return Ok((None, real));
    }
    let (padded, real) = nitro_data::pad_to_width(batch, width, PadFill::RepeatLast)?;
    Ok((Some(padded), real))
}

/// Forward's output leaves of micro-batch `micro` among a program's
/// returned values (computed at `width` rows), sliced to their `real` rows
/// by nitro-data's checked `slice_leaf`.
pub(crate) fn leaves_of(
    compiled: &Compiled,
    out: &[Array],
    micro: Option<usize>,
    width: usize,
    real: usize,
) -> Result<HostOutputs> {
    let mut leaves = HostOutputs::new();
    for (r, a) in compiled.returned.iter().zip(out) {
        if let Returned::Leaf { micro: m, path } = r {
            if *m == micro {
                let sliced = nitro_data::slice_leaf(path, a, width, real).map_err(|_| {
                    RunError::OutputWithoutBatch {
                        leaf: path.clone(),
                        shape: a.shape().to_vec(),
                        width,
                    }
                })?;
                leaves.insert(path.clone(), sliced);
            }
        }
    }
    Ok(leaves)
}

/// Chunks of outputs joined along the batch axis, leaf by leaf.
pub(crate) fn concat_outputs(mut parts: Vec<HostOutputs>) -> Result<HostOutputs> {
    if parts.len() <= 1 {
        return Ok(parts.pop().unwrap_or_default());
    }
    let names: Vec<String> = parts[0].keys().cloned().collect();
    let mut out = HostOutputs::new();
    for name in names {
        let arrays: Vec<Array> = parts.iter_mut().filter_map(|p| p.remove(&name)).collect();
        let joined = Array::concat_rows(&arrays).map_err(|e| RunError::Setting {
            setting: "predict",
            reason: format!("output `{name}` cannot be joined across chunks: {e}"),
        })?;
        out.insert(name, joined);
    }
    Ok(out)
}

impl<E: Experiment> Nitro<E> {
    fn batch_arrays(&self, batch: &Batch, fields: &[String]) -> Result<Vec<Array>> {
        fields
            .iter()
            .map(|f| to_array(f, batch.require(f)?))
            .collect()
    }

    /// Forward outputs for `batch` (any number of rows): run at the compiled
    /// width, short chunks padded, outputs sliced back to the real rows.
    pub fn predict(&mut self, batch: &Batch) -> Result<HostOutputs> {
        self.report(false);
        let width = self.frozen.run.batch_size;
        let compiled = self.program(&Kind::Predict { width })?;
        crate::convert::check_program_batch(batch, &compiled.sig)?;
        let fields: Vec<String> = compiled.sig.names(nitro_graph::Role::Batch(0)).to_vec();
        let rows = batch.rows();
        let mut parts: Vec<HostOutputs> = vec![];
        let mut start = 0;
        while start < rows || (rows == 0 && parts.is_empty()) {
            let end = (start + width).min(rows);
            let chunk = if start == 0 && end == rows {
                None
            } else {
                Some(batch.slice_rows(start, end)?)
            };
            let chunk_ref = chunk.as_ref().unwrap_or(batch);
            let (padded, real) = pad(chunk_ref, width)?;
            let arrays = self.batch_arrays(padded.as_ref().unwrap_or(chunk_ref), &fields)?;
            let out = self.run_program(&compiled, false, vec![], arrays)?;
            parts.push(leaves_of(&compiled, &out, None, width, real)?);
            start = end;
            if rows == 0 {
                break;
            }
        }
        concat_outputs(parts)
    }

    /// Loss and metrics over a whole split (`"train"`, `"val"`, `"test"`),
    /// at the compiled width; the short final batch is padded and its
    /// outputs sliced, so metrics never see a padded sample. Keys: `loss`
    /// and each metric's name.
    pub fn evaluate(&mut self, split: &str) -> Result<BTreeMap<String, f64>> {
        self.report(false);
        let data = self.data.clone();
        let set = match split {
            "train" => Some(&data.train),
            "val" => data.val.as_ref(),
            "test" => data.test.as_ref(),
            _ => None,
        };
        let Some(set) = set else {
            return Err(RunError::Setting {
                setting: "evaluate",
                reason: format!("split `{split}` is absent; build_data returned no such split"),
            });
        };
        self.evaluate_set(set)
    }

    pub(crate) fn evaluate_set(&mut self, set: &InMemory) -> Result<BTreeMap<String, f64>> {
        let width = self.frozen.run.batch_size;
        let compiled = self.program(&Kind::Eval { width })?;
        let fields: Vec<String> = compiled.sig.names(nitro_graph::Role::Batch(0)).to_vec();
        // Metrics may read fields no hook declares: gathered on the host
        // for them, never transferred.
        let mut gathered: Vec<String> = fields.clone();
        for f in &self.frozen.metric_fields {
            if !gathered.contains(f) {
                gathered.push(f.clone());
            }
        }
        let gathered: Vec<&str> = gathered.iter().map(String::as_str).collect();
        let loss_at = compiled
            .position(&Returned::Loss)
            .ok_or_else(|| RunError::Setting {
                setting: "evaluate",
                reason: "the eval program returns no loss".into(),
            })?;
        let dtype = self.programs.layout.dtype;
        let mut totals = Totals::default();
        // Sharded in a data-parallel job: rank r evaluates chunks r, r+N,
        // r+2N, ...; the sums and counts are then added over the ranks.
        let (rank, ranks) = (self.dist.rank(), self.dist.world_size());
        let mut start = rank * width;
        while start < set.len() {
            let end = (start + width).min(set.len());
            let indices: Vec<usize> = (start..end).collect();
            let batch = set.gather(&indices, &gathered)?;
            let (padded, real) = pad(&batch, width)?;
            let arrays = self.batch_arrays(padded.as_ref().unwrap_or(&batch), &fields)?;
            // The exact mean over the real rows (see `trace`): padded rows
            // carry weight 0. Computed in f64, rounded once to the dtype.
            let (w, r) = (width as f64, real as f64);
            let coefficients = vec![
                Array::scalar_f64(w / r).cast(dtype),
                Array::scalar_f64((w - r) / r).cast(dtype),
            ];
            let out = self.run_program(&compiled, false, coefficients, arrays)?;
            let loss = out[loss_at].item().unwrap_or(f64::NAN);
            totals.add("loss", loss * r, r);
            let outputs = leaves_of(&compiled, &out, None, width, real)?;
            for m in &self.frozen.metrics {
                let (s, c) = m.compute(&outputs, &batch);
                totals.add(&m.name, s, c);
            }
            start += ranks * width;
        }
        let mut names: Vec<&str> = vec!["loss"];
        names.extend(self.frozen.metrics.iter().map(|m| m.name.as_str()));
        self.dist.reduce_totals("evaluate", &mut totals, &names)?;
        Ok(totals.finish(""))
    }
}
