//! The training batch stream: nitro-data's [`BatchIter`] (the seeded epoch
//! order, the short-batch policy, the gather) run ahead on nitro-data's
//! [`Prefetch`] thread, grouped into accumulation windows and turned into
//! program inputs. nitro-run has no batching of its own: the order, the
//! padding and the gather are nitro-data's; this file only groups and
//! converts.
//!
//! Data parallelism: the epoch order is cut into *global* batches of
//! `world · b` rows, and rank `r` takes rows `r·b .. (r+1)·b` of each
//! (its [`crate::Distributed::shard`]), so that N ranks see, step for step,
//! the global batches one process with batch `N·b` sees. A short final
//! global batch leaves the last ranks fewer real rows (or none: then the
//! micro-batch is all padding, weighted 0); [`Window::global`] keeps the
//! global real counts, which normalise every rank's loss weights.
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
    /// Real rows per micro-batch on this rank (0 for the filler of a
    /// partial window, or a rank past the end of a short global batch).
    pub real: Vec<usize>,
    /// Real rows per micro-batch over every rank (the global batch); equal
    /// to `real` in a world of one.
    pub global: Vec<usize>,
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
    /// This rank's rows of each global batch (`0..b` in a world of one).
    pub shard: std::ops::Range<usize>,
}

/// The training split of shared splits, as a dataset (so the prefetch
/// thread can own it), gathering only this rank's rows of each global
/// batch.
struct TrainSplit(Arc<Splits>, std::ops::Range<usize>);

impl Dataset for TrainSplit {
    fn len(&self) -> usize {
        self.0.train.len()
    }
    fn fields(&self) -> Vec<FieldSpec> {
        self.0.train.fields()
    }
    fn gather(&self, indices: &[usize], fields: &[&str]) -> std::result::Result<Batch, DataError> {
        // The order pads a short global batch by repeating its last real
        // index, so a rank's padded rows are copies of its last row, as the
        // masked loss requires.
        let rows = &indices[self.1.start.min(indices.len())..self.1.end.min(indices.len())];
        self.0.train.gather(rows, fields)
    }
}

/// The windows of `epoch` from batch position `first` on, gathered one
/// window ahead on a background thread (inline where the process has one
/// CPU: see [`Prefetch::auto`]). Errors name a routed field the
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
    let shard = spec.shard.clone();
    let items = BatchIter::new(Arc::new(TrainSplit(splits, shard)), order, &gathered)?
        .resume_at(epoch, first)
        .until_epoch(epoch + 1);
    let windows = Windows { items, spec };
    Ok(Prefetch::auto(windows, 1))
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
            global: vec![0; accum],
            micro: Vec::new(),
        };
        let real = items.len();
        let shard = self.spec.shard.clone();
        for (i, item) in items.into_iter().enumerate() {
            w.global[i] = item.real;
            w.real[i] = item.real.clamp(shard.start, shard.end) - shard.start;
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
