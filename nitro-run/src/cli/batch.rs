//! The batches the `predict` command runs on: a safetensors file read as a
//! batch ([`read_batch`]), or a whole split of the experiment's data.

use std::path::Path;

use nitro_data::{Batch, HostArray};
use nitro_graph::Array;

use super::Error;
use crate::experiment::Experiment;
use crate::handle::Nitro;

/// A safetensors tensor as a batch field: the dtypes a batch holds.
fn host_array(name: &str, a: Array) -> Result<HostArray, Error> {
    use nitro_graph::DType;
    match a.dtype() {
        DType::F32 | DType::F64 | DType::I32 | DType::I64 | DType::U8 | DType::Bool => Ok(a),
        other => Err(format!(
            "input `{name}` is {other:?}; batch fields are F32, F64, I32, I64, U8 or BOOL"
        )
        .into()),
    }
}

/// Reads a batch (field name -> array, batch on axis 0) from safetensors.
pub fn read_batch(path: &Path) -> Result<Batch, Error> {
    let mut batch = Batch::new();
    for (name, a) in crate::safetensors::read(path)?.tensors {
        let array = host_array(&name, a)?;
        batch.insert(name, array)?;
    }
    Ok(batch)
}

/// Every row of `split`, with the fields forward reads.
pub(super) fn split_batch<E: Experiment>(n: &Nitro<E>, split: &str) -> Result<Batch, Error> {
    let set = match split {
        "train" => Some(&n.data.train),
        "val" => n.data.val.as_ref(),
        "test" => n.data.test.as_ref(),
        _ => None,
    }
    .ok_or_else(|| format!("split `{split}` is absent (train, val, test)"))?;
    let names: Vec<&str> = n
        .programs
        .layout
        .forward_fields
        .iter()
        .map(String::as_str)
        .collect();
    let indices: Vec<usize> = (0..nitro_data::Dataset::len(set)).collect();
    Ok(nitro_data::Dataset::gather(set, &indices, &names)?)
}
