//! `Splits` (train, optional val and test) and a seeded train/val split.

use crate::dataset::{Dataset, InMemory};
use crate::error::DataError;
use crate::order::{permutation, seeded_rng};

/// What `build_data` returns: a training split and optional validation and
/// test splits.
#[derive(Debug, Clone, PartialEq)]
pub struct Splits<D = InMemory> {
    /// Training samples.
    pub train: D,
    /// Validation samples, if any.
    pub val: Option<D>,
    /// Test samples, if any.
    pub test: Option<D>,
}

impl<D> Splits<D> {
    /// Only a training split.
    pub fn train_only(train: D) -> Self {
        Self {
            train,
            val: None,
            test: None,
        }
    }
}

/// Split `0..len` into shuffled `(train, val)` index lists, `val` holding
/// `round(len * val_fraction)` samples. The same seed gives the same split.
pub fn train_val_indices(
    len: usize,
    val_fraction: f64,
    seed: u64,
) -> Result<(Vec<usize>, Vec<usize>), DataError> {
    if !(0.0..=1.0).contains(&val_fraction) {
        return Err(DataError::BadFraction(val_fraction));
    }
    // Epoch u64::MAX: a stream distinct from every epoch shuffle.
    let perm = permutation(len, &mut seeded_rng(seed, u64::MAX));
    let n_val = ((len as f64) * val_fraction).round() as usize;
    let (val, train) = perm.split_at(n_val);
    Ok((train.to_vec(), val.to_vec()))
}

/// Split an in-memory dataset into `(train, val)` with [`train_val_indices`].
pub fn train_val_split(
    data: &InMemory,
    val_fraction: f64,
    seed: u64,
) -> Result<(InMemory, InMemory), DataError> {
    let (t, v) = train_val_indices(data.len(), val_fraction, seed)?;
    Ok((data.subset(&t)?, data.subset(&v)?))
}
