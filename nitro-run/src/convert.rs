//! Host-side conversions between batch fields, Device field values and
//! program inputs. Batch fields and program inputs are the same type
//! ([`nitro_graph::Array`], nitro-device's `HostArray`); programs take
//! floats as they are and integers as i32, so byte, bool and i64 fields
//! widen (or, for i64, narrow with a check) to i32 on the way in.

use nitro_device::Element;
use nitro_graph::{Array, DType, HostBuffer, TensorSpec};
use nitro_markers::{DeviceData, DeviceValue};

use crate::error::{Result, RunError};

/// The program-side dtype of a batch field of `dtype`.
pub(crate) fn program_dtype(dtype: DType) -> DType {
    match dtype {
        DType::I64 | DType::U8 | DType::Bool => DType::I32,
        other => other,
    }
}

fn field_error(field: &str, reason: String) -> RunError {
    RunError::BatchField {
        field: field.into(),
        reason,
    }
}

/// `indices` rows of `all` (rows of `per` elements) widened to i32;
/// `indices` were checked against the row count.
fn widen_rows<T: Copy>(
    all: &[T],
    indices: &[usize],
    per: usize,
    f: impl Fn(T) -> i32,
) -> HostBuffer {
    let mut out = Vec::with_capacity(indices.len() * per);
    for &i in indices {
        out.extend(all[i * per..(i + 1) * per].iter().map(|&x| f(x)));
    }
    HostBuffer::I32(out)
}

/// `indices` rows of i64 `all` narrowed to i32, or the first value that
/// does not fit.
fn narrow_rows(all: &[i64], indices: &[usize], per: usize) -> std::result::Result<HostBuffer, i64> {
    let mut out = Vec::with_capacity(indices.len() * per);
    for &i in indices {
        for &x in &all[i * per..(i + 1) * per] {
            out.push(i32::try_from(x).map_err(|_| x)?);
        }
    }
    Ok(HostBuffer::I32(out))
}

/// Rows `indices` of `all`, copied a row at a time.
fn copy_rows<T: Element>(all: &[T], indices: &[usize], per: usize) -> HostBuffer {
    let mut out = Vec::with_capacity(indices.len() * per);
    for &i in indices {
        out.extend_from_slice(&all[i * per..(i + 1) * per]);
    }
    T::buffer(out)
}

/// Rows `indices` of a dataset field, copied once, straight into a program
/// input (no intermediate host batch): floats and i32 as they are, u8 and
/// bool widened to i32, i64 narrowed to i32 with a check that names the
/// first value that does not fit.
pub(crate) fn gather_array(field: &str, a: &Array, indices: &[usize]) -> Result<Array> {
    if a.shape().is_empty() {
        return Err(field_error(
            field,
            "a rank-0 array has no batch axis (axis 0); give each sample a row".into(),
        ));
    }
    let rows = a.rows();
    if let Some(&bad) = indices.iter().find(|&&i| i >= rows) {
        return Err(field_error(
            field,
            format!("sample index {bad} out of range for {rows} samples"),
        ));
    }
    let per: usize = a.sample_shape().iter().product();
    let buffer = match a.data() {
        HostBuffer::F32(v) => copy_rows(v, indices, per),
        HostBuffer::F64(v) => copy_rows(v, indices, per),
        HostBuffer::F16(v) => copy_rows(v, indices, per),
        HostBuffer::BF16(v) => copy_rows(v, indices, per),
        HostBuffer::I32(v) => copy_rows(v, indices, per),
        HostBuffer::U8(v) => widen_rows(v, indices, per, i32::from),
        HostBuffer::Bool(v) => widen_rows(v, indices, per, i32::from),
        HostBuffer::I64(v) => narrow_rows(v, indices, per).map_err(|x| {
            field_error(
                field,
                format!("value {x} does not fit the i32 programs take"),
            )
        })?,
    };
    let mut shape = vec![indices.len()];
    shape.extend(a.sample_shape());
    Array::new(&shape, buffer).map_err(|e| field_error(field, e.to_string()))
}

/// A batch field as a program input (see [`gather_array`]).
pub(crate) fn to_array(field: &str, a: &Array) -> Result<Array> {
    if program_dtype(a.dtype()) == a.dtype() {
        return Ok(a.clone());
    }
    if a.shape().is_empty() {
        // A scalar is one row of one element for the conversion.
        let reshape = |a: Array, shape: &[usize]| {
            a.reshape(shape)
                .map_err(|e| field_error(field, e.to_string()))
        };
        return reshape(to_array(field, &reshape(a.clone(), &[1])?)?, &[]);
    }
    let all: Vec<usize> = (0..a.rows()).collect();
    gather_array(field, a, &all)
}

/// A batch field loaded by the user (a [`nitro_data::HostArray`]) as a
/// program input: floats and i32 as they are, u8 and bool widened to i32,
/// i64 narrowed to i32 with a check naming the first value that does not
/// fit. The inputs of step-API programs and of a hand-built
/// batch take this form.
pub fn program_input(field: &str, a: &nitro_data::HostArray) -> Result<Array> {
    to_array(field, a)
}

/// Checks `batch` against the fields a program takes, `(name, per-sample
/// spec)`, before anything runs: each field present, of a dtype the
/// program takes and of its per-sample shape. The message speaks of the
/// batch as the user built it (its own dtype, `n` rows), never of padded
/// widths or internal input names.
pub(crate) fn check_batch(
    batch: &nitro_data::Batch,
    takes: &[(String, TensorSpec)],
) -> std::result::Result<(), (String, String)> {
    let wants = |spec: &TensorSpec| format!("{}[n, {}]", spec.dtype, dims(&spec.shape));
    for (name, spec) in takes {
        let Some(a) = batch.get(name) else {
            return Err((
                name.clone(),
                format!(
                    "missing from the batch (it has: {}); the model takes {}",
                    batch.names().join(", "),
                    wants(spec)
                ),
            ));
        };
        let given = format!("{}[{}]", a.dtype(), dims(a.shape()));
        if a.shape().is_empty() || a.sample_shape() != spec.shape.as_slice() {
            return Err((
                name.clone(),
                format!(
                    "given {given}, but the model takes {} (samples of shape [{}], any number of rows)",
                    wants(spec),
                    dims(&spec.shape)
                ),
            ));
        }
        if program_dtype(a.dtype()) != spec.dtype {
            return Err((
                name.clone(),
                format!(
                    "given {given}, but the model takes {}; convert the field",
                    wants(spec)
                ),
            ));
        }
    }
    Ok(())
}

/// [`check_batch`] against the batch inputs of a compiled program (their
/// specs carry the compiled width on axis 0, which the user never sees).
pub(crate) fn check_program_batch(
    batch: &nitro_data::Batch,
    sig: &nitro_graph::exec::signature::Signature,
) -> Result<()> {
    let role = nitro_graph::Role::Batch(0);
    let takes: Vec<(String, TensorSpec)> = sig
        .names(role)
        .iter()
        .zip(sig.specs(role))
        .map(|(n, s)| {
            (
                n.clone(),
                TensorSpec::new(s.dtype, s.shape.get(1..).unwrap_or(&[])),
            )
        })
        .collect();
    check_batch(batch, &takes).map_err(|(field, reason)| field_error(&field, reason))
}

fn dims(shape: &[usize]) -> String {
    shape
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Integer labels as i64 (for host metrics); floats truncate toward zero.
pub(crate) fn labels_i64(a: &Array) -> Vec<i64> {
    match a.data() {
        HostBuffer::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostBuffer::I64(v) => v.clone(),
        HostBuffer::U8(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostBuffer::Bool(v) => v.iter().map(|&x| i64::from(x)).collect(),
        other => other.to_f64_vec().into_iter().map(|x| x as i64).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_checked_in_the_users_terms() {
        let takes = vec![("image".to_string(), TensorSpec::f32(&[28, 28]))];
        let batch = |a: Array| nitro_data::Batch::new().with("image", a).unwrap();
        let ok = batch(Array::new(&[3, 28, 28], vec![0f32; 3 * 784]).unwrap());
        assert!(check_batch(&ok, &takes).is_ok());
        let small = batch(Array::new(&[5, 27, 27], vec![0f32; 5 * 729]).unwrap());
        let (field, why) = check_batch(&small, &takes).unwrap_err();
        assert_eq!(field, "image");
        assert!(
            why.contains("given f32[5, 27, 27]") && why.contains("f32[n, 28, 28]"),
            "{why}"
        );
        let bytes = batch(Array::new(&[2, 28, 28], vec![0u8; 2 * 784]).unwrap());
        let (_, why) = check_batch(&bytes, &takes).unwrap_err();
        assert!(
            why.contains("given u8[2, 28, 28]") && !why.contains("i32"),
            "{why}"
        );
        let other = nitro_data::Batch::new()
            .with("pixels", Array::new(&[1, 2], vec![0f32; 2]).unwrap())
            .unwrap();
        let (_, why) = check_batch(&other, &takes).unwrap_err();
        assert!(why.contains("missing") && why.contains("pixels"), "{why}");
    }

    #[test]
    fn gather_widens_and_checks_narrowing() {
        let u8s = Array::new(&[3, 2], vec![1u8, 2, 3, 4, 255, 0]).unwrap();
        let g = gather_array("y", &u8s, &[2, 0]).unwrap();
        assert_eq!(g.shape(), &[2, 2]);
        assert_eq!(g.as_slice::<i32>(), Some(&[255, 0, 1, 2][..]));
        let bools = Array::new(&[2], vec![true, false]).unwrap();
        assert_eq!(
            to_array("m", &bools).unwrap().as_slice::<i32>(),
            Some(&[1, 0][..])
        );
        let i64s = Array::new(&[3], vec![5i64, -7, i64::from(i32::MAX) + 1]).unwrap();
        assert_eq!(
            gather_array("y", &i64s, &[1, 0]).unwrap().as_slice::<i32>(),
            Some(&[-7, 5][..])
        );
        let err = gather_array("y", &i64s, &[2]).unwrap_err().to_string();
        assert!(err.contains("2147483648") && err.contains("`y`"), "{err}");
        let err = gather_array("x", &u8s, &[3]).unwrap_err().to_string();
        assert!(err.contains("index 3"), "{err}");
        let f = Array::new(&[2, 1], vec![0.5f32, 1.5]).unwrap();
        assert_eq!(to_array("x", &f).unwrap(), f);
        assert_eq!(program_input("x", &f).unwrap(), f);
        assert_eq!(
            gather_array("x", &f, &[1, 1]).unwrap().to_f32_vec(),
            [1.5, 1.5]
        );
    }
}
