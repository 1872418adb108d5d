//! Host-side conversions between nitro-data arrays, Device field values and
//! nitro-graph arrays. Programs take f32/f64/i32; integer and byte fields are
//! widened losslessly to i32.

use nitro_data::HostArray;
use nitro_graph::{Array, DType, HostBuffer, TensorSpec};
use nitro_markers::{DeviceData, DeviceValue};

use crate::error::{Result, RunError};

/// The program-side dtype of a batch field of `dtype`.
pub(crate) fn program_dtype(dtype: nitro_data::DType) -> DType {
    use nitro_data::DType as D;
    match dtype {
        D::F32 => DType::F32,
        D::F64 => DType::F64,
        D::I32 | D::I64 | D::U8 | D::Bool => DType::I32,
    }
}

fn flat<T: Clone>(a: &ndarray::ArrayD<T>) -> Vec<T> {
    match a.as_slice() {
        Some(s) => s.to_vec(),
        None => a.iter().cloned().collect(),
    }
}

/// A batch field as a program input.
pub(crate) fn to_array(field: &str, a: &HostArray) -> Result<Array> {
    let shape = a.shape().to_vec();
    let buffer: HostBuffer = match a {
        HostArray::F32(v) => flat(v).into(),
        HostArray::F64(v) => flat(v).into(),
        HostArray::I32(v) => flat(v).into(),
        HostArray::I64(v) => {
            let mut out = Vec::with_capacity(v.len());
            for &x in v.iter() {
                out.push(i32::try_from(x).map_err(|_| RunError::BatchField {
                    field: field.into(),
                    reason: format!("value {x} does not fit the i32 programs take"),
                })?);
            }
            out.into()
        }
        HostArray::U8(v) => v.iter().map(|&x| x as i32).collect::<Vec<_>>().into(),
        HostArray::Bool(v) => v.iter().map(|&x| x as i32).collect::<Vec<_>>().into(),
    };
    Array::new(&shape, buffer).map_err(|e| RunError::BatchField {
        field: field.into(),
        reason: e.to_string(),
    })
}

/// Integer labels as i64 (for host metrics).
pub(crate) fn labels_i64(a: &HostArray) -> Vec<i64> {
    match a {
        HostArray::I32(v) => v.iter().map(|&x| x as i64).collect(),
        HostArray::I64(v) => v.iter().copied().collect(),
        HostArray::U8(v) => v.iter().map(|&x| x as i64).collect(),
        HostArray::F32(v) => v.iter().map(|&x| x as i64).collect(),
        HostArray::F64(v) => v.iter().map(|&x| x as i64).collect(),
        HostArray::Bool(v) => v.iter().map(|&x| x as i64).collect(),
    }
}

/// A Device field's host value as a program input.
pub(crate) fn device_to_array(value: &DeviceValue) -> Array {
    let buffer: HostBuffer = match &value.data {
        DeviceData::F32(v) => HostBuffer::F32(v.clone()),
        DeviceData::F16(v) => HostBuffer::F16(v.clone()),
        DeviceData::Bf16(v) => HostBuffer::BF16(v.clone()),
        DeviceData::I32(v) => HostBuffer::I32(v.clone()),
    };
    Array::new(&value.shape, buffer).expect("a DeviceValue's data matches its shape")
}

/// The signature a Device value takes in a program.
pub(crate) fn device_spec(value: &DeviceValue) -> TensorSpec {
    device_to_array(value).spec().clone()
}

/// `[dtype shape]` text for keys and messages.
pub(crate) fn signature(spec: &TensorSpec) -> String {
    format!("{:?}{:?}", spec.dtype, spec.shape)
}

/// Rows `indices` of a dataset field, copied once, straight into a program
/// input (no intermediate host batch); integer and byte fields widen to i32.
pub(crate) fn gather_array(field: &str, a: &HostArray, indices: &[usize]) -> Result<Array> {
    fn rows<T: Copy, U>(
        a: &ndarray::ArrayD<T>,
        indices: &[usize],
        per: usize,
        f: impl Fn(T) -> U,
    ) -> Option<Vec<U>> {
        let all = a.as_slice()?;
        let mut out = Vec::with_capacity(indices.len() * per);
        for &i in indices {
            out.extend(all.get(i * per..(i + 1) * per)?.iter().map(|&x| f(x)));
        }
        Some(out)
    }
    let per: usize = a.sample_shape().iter().product();
    let buffer: Option<HostBuffer> = match a {
        HostArray::F32(v) => rows(v, indices, per, |x| x).map(Into::into),
        HostArray::F64(v) => rows(v, indices, per, |x| x).map(Into::into),
        HostArray::I32(v) => rows(v, indices, per, |x| x).map(Into::into),
        HostArray::U8(v) => rows(v, indices, per, |x| x as i32).map(Into::into),
        HostArray::Bool(v) => rows(v, indices, per, |x| x as i32).map(Into::into),
        HostArray::I64(_) => None,
    };
    match buffer {
        Some(buffer) => {
            let mut shape = vec![indices.len()];
            shape.extend(a.sample_shape());
            Array::new(&shape, buffer).map_err(|e| RunError::BatchField {
                field: field.into(),
                reason: e.to_string(),
            })
        }
        // Non-contiguous storage, an out-of-range index or i64 values
        // (checked narrowing): the general path.
        None => to_array(field, &a.gather_rows(indices).map_err(RunError::from)?),
    }
}
