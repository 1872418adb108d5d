//! nitro-data: host-side data for training: named fields, splits, seeded
//! batching, routing of declared fields, padding short batches, loaders and
//! a built-in digits dataset.
//!
//! **Owns:** [`Fields`]/[`Batch`] (named host arrays, batch on axis 0,
//! row-major: the same memory layout as a column-major array with the batch
//! last, each sample contiguous), [`Splits`], the [`Dataset`] trait and
//! [`InMemory`], [`EpochOrder`]/[`BatchIter`] (fixed width, seeded per-epoch
//! shuffle, resumable at `(epoch, position)`, [`ShortBatch`] policy),
//! [`Prefetch`], [`RoutingPlan`], [`pad_to_width`]/[`slice_outputs`], the
//! IDX/CSV/NPY/NPZ [`loaders`], character-level corpora ([`text`]), and
//! [`digits`].
//!
//! **Does not own:** the value types. [`HostArray`], [`DType`] and
//! [`PadFill`] are nitro-device's, re-exported here: the arrays a dataset
//! holds are the arrays a program takes and a checkpoint stores, with their
//! row operations (gather, slice, pad, concatenate) on them. Nor devices,
//! transfers, graphs, experiments or hooks: nitro-device is its only nitro
//! dependency; nitro-run turns hook signatures into [`HookFields`] and moves
//! routed batches to the device.
//!
//! ```
//! use std::sync::Arc;
//! use nitro_data::{digits, BatchIter, EpochOrder, HookFields, RoutingPlan, ShortBatch, Dataset};
//!
//! let splits = digits::generate(&digits::DigitsConfig { train: 600, test: 100, seed: 7, ..Default::default() })?;
//! let train = Arc::new(splits.train);
//! // Resolve once at setup: only declared fields are ever gathered.
//! let plan = RoutingPlan::for_dataset(&*train, &[
//!     HookFields::new("forward", &["image"], &[]),
//!     HookFields::new("loss", &["label"], &["weight"]),
//! ])?;
//! let order = EpochOrder::new(train.len(), 128, 42)?.with_short_batch(ShortBatch::PadWithMask);
//! let mut n = 0;
//! for item in BatchIter::new(train.clone(), order, &plan.transfer())?.until_epoch(2) {
//!     let item = item?;
//!     assert_eq!(item.batch.rows(), 128);     // always the compiled width
//!     n += item.real;                         // mask() weights the padding 0
//! }
//! assert_eq!(n, 2 * 600);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod batcher;
mod dataset;
mod error;
mod fields;
mod order;
mod outputs;
mod pad;
mod prefetch;
mod routing;
mod splits;

pub mod digits;
pub mod loaders;
pub mod text;

pub use batcher::{BatchItem, BatchIter, MASK_FIELD};
pub use dataset::{Dataset, FieldSpec, InMemory};
pub use error::DataError;
pub use fields::{Batch, Fields};
pub use nitro_device::{DType, HostArray, PadFill};
pub use order::{BatchSlot, EpochOrder, ShortBatch};
pub use outputs::{slice_leaf, slice_outputs, OutputError, OutputTree};
pub use pad::pad_to_width;
pub use prefetch::{spare_cpu, Prefetch};
pub use routing::{HookFields, HookRoute, RoutingError, RoutingPlan};
pub use splits::{train_val_indices, train_val_split, Splits};
