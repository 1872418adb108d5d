//! `BatchIter`: fixed-width batches of the routed fields, in [`EpochOrder`],
//! from a start `(epoch, position)` up to an end epoch.

use std::sync::Arc;

use crate::dataset::Dataset;
use crate::error::DataError;
use crate::fields::Batch;
use crate::order::EpochOrder;
use nitro_device::HostArray;

/// Name of the mask field added by [`BatchItem::with_mask_field`].
pub const MASK_FIELD: &str = "__mask";

/// One batch and where it sits in the run.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchItem {
    /// The fields, each with `width` rows.
    pub batch: Batch,
    /// The first `real` rows are real samples; the rest are padding.
    pub real: usize,
    /// Epoch of this batch.
    pub epoch: u64,
    /// Index of this batch within its epoch.
    pub position: usize,
}

impl BatchItem {
    /// Rows in the batch (the compiled width).
    pub fn width(&self) -> usize {
        self.batch.rows()
    }

    /// Per-row weights: 1 for real samples, 0 for padding.
    pub fn mask(&self) -> Vec<f32> {
        (0..self.width())
            .map(|i| if i < self.real { 1.0 } else { 0.0 })
            .collect()
    }

    /// The batch with the mask added as an f32 field [`MASK_FIELD`] of shape
    /// `[width]`, for a loss that declares it.
    pub fn with_mask_field(&self) -> Result<Batch, DataError> {
        let mut b = self.batch.clone();
        b.insert(MASK_FIELD, HostArray::new(&[self.width()], self.mask())?)?;
        Ok(b)
    }

    /// The coordinates to resume from after this batch has been used.
    pub fn resume_point(&self) -> (u64, usize) {
        (self.epoch, self.position + 1)
    }
}

/// Iterator of [`BatchItem`]s over `epochs` `start..end`, gathering only the
/// chosen fields.
///
/// Resuming at `(epoch, position)` yields exactly the batches an
/// uninterrupted run would have yielded from that point on.
pub struct BatchIter<D: ?Sized> {
    data: Arc<D>,
    order: EpochOrder,
    fields: Vec<String>,
    epoch: u64,
    position: usize,
    end_epoch: u64,
    perm: Option<(u64, Vec<usize>)>,
}

impl<D: Dataset + ?Sized> BatchIter<D> {
    /// Batches of `fields` from epoch 0, position 0, for one epoch. Errors if
    /// the order's length is not the dataset's, or a field is unknown.
    pub fn new(data: Arc<D>, order: EpochOrder, fields: &[&str]) -> Result<Self, DataError> {
        if order.len() != data.len() {
            return Err(DataError::ShapeMismatch {
                what: format!("epoch order over {} samples", order.len()),
                expected: format!("the dataset's {} samples", data.len()),
            });
        }
        let names = data.field_names();
        for f in fields {
            if !names.iter().any(|n| n == f) {
                return Err(DataError::UnknownField {
                    field: f.to_string(),
                    available: names.join(", "),
                });
            }
        }
        Ok(Self {
            data,
            order,
            fields: fields.iter().map(|s| s.to_string()).collect(),
            epoch: 0,
            position: 0,
            end_epoch: 1,
            perm: None,
        })
    }

    /// Start at batch `position` of `epoch` (a position past the last batch
    /// starts the next epoch). Keeps the number of epochs to run.
    pub fn resume_at(mut self, epoch: u64, position: usize) -> Self {
        let epochs = self.end_epoch.saturating_sub(self.epoch);
        self.epoch = epoch;
        self.position = position;
        self.end_epoch = epoch.saturating_add(epochs);
        self
    }

    /// Run until (not including) `end_epoch`.
    pub fn until_epoch(mut self, end_epoch: u64) -> Self {
        self.end_epoch = end_epoch;
        self
    }

    /// The order in use.
    pub fn order(&self) -> &EpochOrder {
        &self.order
    }

    /// Where the next batch comes from.
    pub fn next_point(&self) -> (u64, usize) {
        (self.epoch, self.position)
    }

    fn next_batch(&mut self) -> Option<Result<BatchItem, DataError>> {
        if self.order.batches_per_epoch() == 0 {
            return None;
        }
        while self.epoch < self.end_epoch {
            let epoch = self.epoch;
            if self.perm.as_ref().map(|(e, _)| *e) != Some(epoch) {
                self.perm = Some((epoch, self.order.permutation(epoch)));
            }
            let perm = &self.perm.as_ref().expect("set above").1;
            match self.order.slot_in(perm, self.position) {
                Some(slot) => {
                    let position = self.position;
                    self.position += 1;
                    let fields: Vec<&str> = self.fields.iter().map(String::as_str).collect();
                    return Some(
                        self.data
                            .gather(&slot.indices, &fields)
                            .map(|batch| BatchItem {
                                batch,
                                real: slot.real,
                                epoch,
                                position,
                            }),
                    );
                }
                None => {
                    self.epoch += 1;
                    self.position = 0;
                }
            }
        }
        None
    }
}

impl<D: Dataset + ?Sized> Iterator for BatchIter<D> {
    type Item = Result<BatchItem, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch()
    }
}
