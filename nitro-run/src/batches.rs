//! The training batch stream: nitro-data's [`BatchIter`] (the seeded epoch
//! order, the short-batch policy, the gather) run ahead on nitro-data's
//! [`Prefetch`] thread, grouped into accumulation windows and turned into
//! program inputs. nitro-run has no batching of its own: the order, the
//! padding and the gather are nitro-data's; this file only groups and
//! converts.
//!
//! A window is `accum` micro-batches, one update. The final window of an
//! epoch may be partial: its missing micro-batches repeat the last real one
//! as filler with 0 real rows (weight 0 in the step; see `train`).

use std::sync::Arc;

use nitro_data::{
    Batch, BatchItem, BatchIter, DataError, Dataset, EpochOrder, FieldSpec, Prefetch, Splits,
};
use nitro_graph::Array;

use crate::convert::{program_dtype, to_array};
use crate::error::{Result, RunError};

/// One update's worth of micro-batches, ready to become the step's inputs.
pub(crate) struct Window {
    /// Program inputs: every routed field of every micro-batch, in order.
    pub arrays: Vec<Array>,
    /// Real rows per micro-batch (0 for the filler of a partial window).
    pub real: Vec<usize>,
    /// The real micro-batches as host batches, only when host-side train
    /// metrics read them.
    pub micro: Vec<Batch>,
}

/// What the window stream gathers and keeps.
pub(crate) struct WindowSpec {
    /// Micro-batches per window.
    pub accum: usize,
    /// The routed fields, in the program's batch-argument order.
    pub routed: Vec<String>,
    /// Extra fields host-side train metrics read (empty: no host batches).
    pub metric_fields: Vec<String>,
    /// Whether host-side train metrics need the micro-batches.
    pub keep_micro: bool,
}

/// The training split of shared splits, as a dataset (so the prefetch
/// thread can own it).
struct TrainSplit(Arc<Splits>);

impl Dataset for TrainSplit {
    fn len(&self) -> usize {
        self.0.train.len()
    }
    fn fields(&self) -> Vec<FieldSpec> {
        self.0.train.fields()
    }
    fn gather(&self, indices: &[usize], fields: &[&str]) -> std::result::Result<Batch, DataError> {
        self.0.train.gather(indices, fields)
    }
}

/// The windows of `epoch` from batch position `first` on, gathered one
/// window ahead on a background thread. Errors name a routed field the
/// training split lacks.
pub(crate) fn windows(
    splits: Arc<Splits>,
    order: EpochOrder,
    epoch: u64,
    first: usize,
    spec: WindowSpec,
) -> Result<Prefetch<Result<Window>>> {
    let names = splits.train.field_names();
    if let Some(f) = spec.routed.iter().find(|f| !names.contains(f)) {
        return Err(RunError::BatchField {
            field: f.clone(),
            reason: "routed but absent from the training split".into(),
        });
    }
    let mut gathered = spec.routed.clone();
    if spec.keep_micro {
        for f in &spec.metric_fields {
            if !gathered.contains(f) {
                gathered.push(f.clone());
            }
        }
    }
    let gathered: Vec<&str> = gathered.iter().map(String::as_str).collect();
    let items = BatchIter::new(Arc::new(TrainSplit(splits)), order, &gathered)?
        .resume_at(epoch, first)
        .until_epoch(epoch + 1);
    let windows = Windows { items, spec };
    Ok(Prefetch::new(windows, 1))
}

/// Groups a one-epoch batch stream into windows.
struct Windows {
    items: BatchIter<TrainSplit>,
    spec: WindowSpec,
}

impl Windows {
    fn window(&mut self, first: BatchItem) -> Result<Window> {
        let accum = self.spec.accum;
        let mut items = vec![first];
        while items.len() < accum {
            match self.items.next() {
                Some(item) => items.push(item?),
                None => break,
            }
        }
        let mut w = Window {
            arrays: Vec::with_capacity(accum * self.spec.routed.len()),
            real: vec![0; accum],
            micro: Vec::new(),
        };
        let real = items.len();
        for (i, item) in items.into_iter().enumerate() {
            w.real[i] = item.real;
            let mut batch = item.batch;
            let last = i + 1 == real;
            // The last real micro-batch is repeated as filler; its arrays
            // are cloned only then.
            let copies = if last { accum - real + 1 } else { 1 };
            let mut inputs = Vec::with_capacity(self.spec.routed.len());
            for f in &self.spec.routed {
                let a = if self.spec.keep_micro {
                    batch.require(f)?.clone()
                } else {
                    batch
                        .remove(f)
                        .expect("BatchIter gathered every routed field")
                };
                inputs.push(input(f, a)?);
            }
            for _ in 1..copies {
                w.arrays.extend(inputs.iter().cloned());
            }
            w.arrays.append(&mut inputs);
            if self.spec.keep_micro {
                w.micro.push(batch);
            }
        }
        Ok(w)
    }
}

impl Iterator for Windows {
    type Item = Result<Window>;

    fn next(&mut self) -> Option<Result<Window>> {
        let first = match self.items.next()? {
            Ok(item) => item,
            Err(e) => return Some(Err(e.into())),
        };
        Some(self.window(first))
    }
}

/// A gathered batch field as a program input, by value: unchanged when its
/// dtype is already the program's (no copy), converted otherwise.
fn input(field: &str, a: Array) -> Result<Array> {
    if program_dtype(a.dtype()) == a.dtype() {
        Ok(a)
    } else {
        to_array(field, &a)
    }
}
