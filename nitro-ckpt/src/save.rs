//! Whole-checkpoint entry points on the writing side.

use std::path::Path;

use crate::atomic::write_atomic;
use crate::format::write::write_checkpoint;
use crate::{Checkpoint, Error, Result};

/// Validates `ckpt` and writes it to `path` atomically (temporary file,
/// fsync, rename, directory fsync). On error `path` is untouched.
pub fn save(path: impl AsRef<Path>, ckpt: &Checkpoint) -> Result<()> {
    ckpt.validate()?;
    write_atomic(path.as_ref(), |w| write_checkpoint(w, ckpt))
}

/// Validates `ckpt` and encodes it in memory.
pub fn encode(ckpt: &Checkpoint) -> Result<Vec<u8>> {
    ckpt.validate()?;
    let mut out = Vec::with_capacity(ckpt.tensor_bytes() as usize + 4096);
    write_checkpoint(&mut out, ckpt).map_err(|e| Error::io("<memory>", "encode", e))?;
    Ok(out)
}
