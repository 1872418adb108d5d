//! Evaluation padding: fill a short batch up to the compiled width.

use crate::error::DataError;
use crate::fields::Batch;
use nitro_device::PadFill;

/// Pad every field of `batch` along axis 0 to `width` rows with `fill`
/// ([`PadFill::RepeatLast`] by default: padded rows are copies of the last
/// real sample). Returns the padded batch and the real row count, which
/// [`crate::slice_outputs`] needs afterwards.
///
/// A batch already at `width` is returned as is; a wider or empty one is an
/// error.
pub fn pad_to_width(
    batch: &Batch,
    width: usize,
    fill: PadFill,
) -> Result<(Batch, usize), DataError> {
    if width == 0 {
        return Err(DataError::ZeroWidth);
    }
    let real = batch.rows();
    Ok((batch.map_rows(|a| Ok(a.pad_rows(width, fill)?))?, real))
}
