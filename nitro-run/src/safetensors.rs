//! Params as safetensors, the format PyTorch and Hugging Face use: the
//! handle's [`Nitro::save_safetensors`] and [`Nitro::load_safetensors`].
//! The codec (reading, writing, the mismatch listing) is nitro-ckpt's
//! [`nitro_ckpt::safetensors`], re-exported here whole so
//! `nitro_run::safetensors::{read, write, compare, Mismatch, ...}` keep
//! working.

use std::collections::BTreeMap;
use std::path::Path;

pub use nitro_ckpt::safetensors::*;

use crate::experiment::Experiment;
use crate::handle::Nitro;

impl<E: Experiment> Nitro<E> {
    /// Writes the params to `path` as safetensors, named by param path,
    /// with the experiment name and step in the metadata.
    pub fn save_safetensors(&self, path: impl AsRef<Path>) -> Result<(), SafetensorsError> {
        let metadata = BTreeMap::from([
            ("format".to_string(), "pt".to_string()),
            (
                "nitro.experiment".to_string(),
                E::experiment_name().to_string(),
            ),
            ("nitro.step".to_string(), self.step().to_string()),
        ]);
        write(path, &self.params(), &metadata)
    }

    /// Replaces the params with those in the safetensors file at `path`.
    /// Every param must be there with its dtype and shape, and nothing
    /// else may be; otherwise nothing changes and the error lists every
    /// difference.
    pub fn load_safetensors(&mut self, path: impl AsRef<Path>) -> Result<(), SafetensorsError> {
        let path = path.as_ref();
        let mut file = read(path)?;
        let mismatches = compare(&self.params(), &file.tensors);
        if !mismatches.is_empty() {
            return Err(SafetensorsError::Mismatch {
                path: path.to_path_buf(),
                mismatches,
            });
        }
        self.values.params = self
            .programs
            .layout
            .params
            .iter()
            .map(|(n, _)| file.tensors.remove(n).expect("compared above"))
            .collect();
        // Host params are the truth now; GPU copies (if any) are dropped.
        // The host state and slots were current already (every entry point
        // syncs before it returns).
        self.values.host_replaced();
        Ok(())
    }
}
