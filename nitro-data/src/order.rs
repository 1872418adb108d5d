//! `EpochOrder`: which sample indices make up batch `position` of epoch
//! `epoch`. Pure function of (seed, epoch, position), so a run resumes
//! mid-epoch by asking for the same coordinates.
//!
//! Each epoch's permutation is a Fisher-Yates shuffle driven by ChaCha8
//! seeded from `(seed, epoch)`; index draws use the raw 64-bit stream
//! (multiply-shift), so the order does not depend on `rand`'s sampling
//! code and stays stable across its releases.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::DataError;

/// What to do with the last, short batch of an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShortBatch {
    /// Drop the leftover samples (they come back, reshuffled, next epoch).
    #[default]
    Drop,
    /// Pad to the full width by repeating the last real sample and give
    /// padded rows a 0 weight in the batch mask, so a masked loss sees
    /// exactly the real samples.
    PadWithMask,
}

/// A ChaCha8 stream for `(seed, epoch)`.
pub(crate) fn seeded_rng(seed: u64, epoch: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    key[16..24].copy_from_slice(b"nitrodat");
    ChaCha8Rng::from_seed(key)
}

/// A uniformly shuffled `0..len` (multiply-shift draws; bias below 2^-40
/// for any realistic `len`).
pub(crate) fn permutation(len: usize, rng: &mut impl RngCore) -> Vec<usize> {
    let mut p: Vec<usize> = (0..len).collect();
    for i in (1..len).rev() {
        let j = ((rng.next_u64() as u128 * (i as u128 + 1)) >> 64) as usize;
        p.swap(i, j);
    }
    p
}

/// The indices of one batch and how many of them are real samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSlot {
    /// Sample indices, always `width` long; padded rows repeat the last real
    /// index.
    pub indices: Vec<usize>,
    /// The first `real` indices are real samples.
    pub real: usize,
}

/// The order of batches over epochs: dataset length, fixed width, seed,
/// shuffle on/off and the short-batch policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochOrder {
    len: usize,
    width: usize,
    seed: u64,
    shuffle: bool,
    short: ShortBatch,
}

impl EpochOrder {
    /// Shuffled training order with [`ShortBatch::Drop`].
    pub fn new(len: usize, width: usize, seed: u64) -> Result<Self, DataError> {
        if width == 0 {
            return Err(DataError::ZeroWidth);
        }
        Ok(Self {
            len,
            width,
            seed,
            shuffle: true,
            short: ShortBatch::Drop,
        })
    }

    /// In-order evaluation: no shuffle, last batch padded (mask gives the
    /// real count).
    pub fn sequential(len: usize, width: usize) -> Result<Self, DataError> {
        Ok(Self::new(len, width, 0)?
            .with_shuffle(false)
            .with_short_batch(ShortBatch::PadWithMask))
    }

    /// Turn per-epoch shuffling on or off.
    pub fn with_shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// Choose the short-batch policy.
    pub fn with_short_batch(mut self, short: ShortBatch) -> Self {
        self.short = short;
        self
    }

    /// Dataset length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty dataset.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The fixed batch width.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The short-batch policy.
    pub fn short_batch(&self) -> ShortBatch {
        self.short
    }

    /// Batches in every epoch.
    pub fn batches_per_epoch(&self) -> usize {
        match self.short {
            ShortBatch::Drop => self.len / self.width,
            ShortBatch::PadWithMask => self.len.div_ceil(self.width),
        }
    }

    /// The sample order of `epoch` (identity when shuffling is off).
    pub fn permutation(&self, epoch: u64) -> Vec<usize> {
        if self.shuffle {
            permutation(self.len, &mut seeded_rng(self.seed, epoch))
        } else {
            (0..self.len).collect()
        }
    }

    /// Batch `position` of an epoch whose permutation is `perm`; `None` past
    /// the last batch.
    pub fn slot_in(&self, perm: &[usize], position: usize) -> Option<BatchSlot> {
        if position >= self.batches_per_epoch() {
            return None;
        }
        let start = position * self.width;
        let end = (start + self.width).min(perm.len());
        let mut indices = perm[start..end].to_vec();
        let real = indices.len();
        let last = *indices.last()?;
        indices.resize(self.width, last);
        Some(BatchSlot { indices, real })
    }

    /// Batch `position` of `epoch`; `None` past the last batch.
    pub fn slot(&self, epoch: u64, position: usize) -> Option<BatchSlot> {
        self.slot_in(&self.permutation(epoch), position)
    }
}
