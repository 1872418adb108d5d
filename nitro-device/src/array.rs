//! [`HostArray`]: the one shaped host value of the workspace. Programs
//! consume and produce it (nitro-graph calls it `Array`), datasets and
//! batches hold it (nitro-data), checkpoints and codecs store it
//! (nitro-ckpt). Row-major (C order); the row operations treat axis 0 as the
//! batch (sample) axis.
//!
//! Row-major with the batch first is byte-for-byte the layout of a
//! column-major array with the batch *last*: in both, one sample's values
//! are contiguous and samples follow each other, so a row is one slice of
//! the buffer and gathering rows is one `memcpy` per row.

use crate::{DType, DeviceError, Element, HostBuffer, TensorSpec};

/// Apply `$body` to the inner vector of any buffer variant, rebuilding the
/// same variant from its result.
macro_rules! map_variant {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            HostBuffer::F32($v) => HostBuffer::F32($body),
            HostBuffer::F64($v) => HostBuffer::F64($body),
            HostBuffer::F16($v) => HostBuffer::F16($body),
            HostBuffer::BF16($v) => HostBuffer::BF16($body),
            HostBuffer::I32($v) => HostBuffer::I32($body),
            HostBuffer::I64($v) => HostBuffer::I64($body),
            HostBuffer::U8($v) => HostBuffer::U8($body),
            HostBuffer::Bool($v) => HostBuffer::Bool($body),
        }
    };
}

/// How a short batch is filled up to the compiled width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PadFill {
    /// Repeat the last real sample (the default): padded rows hold valid
    /// values (labels in range, no zero-division in a normaliser), so the
    /// program computes nothing unusual on them.
    #[default]
    RepeatLast,
    /// Fill padded rows with zeros (`false` for bool).
    Zeros,
}

/// A concrete tensor on the host: a [`TensorSpec`] and a [`HostBuffer`] of
/// exactly `spec.numel()` elements, row-major.
///
/// ```
/// use nitro_device::{DType, HostArray, PadFill};
/// let a = HostArray::new(&[3, 2], vec![1i64, 2, 3, 4, 5, 6])?;
/// assert_eq!((a.rows(), a.sample_shape()), (3, &[2][..]));
/// let b = a.gather_rows(&[2, 0])?.pad_rows(3, PadFill::RepeatLast)?;
/// assert_eq!(b.as_slice::<i64>(), Some(&[5, 6, 1, 2, 1, 2][..]));
/// assert_eq!(b.cast(DType::F32).dtype(), DType::F32);
/// # Ok::<(), nitro_device::DeviceError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct HostArray {
    spec: TensorSpec,
    data: HostBuffer,
}

impl HostArray {
    /// An array of `shape` over `data`; the element count must match.
    pub fn new(shape: &[usize], data: impl Into<HostBuffer>) -> Result<HostArray, DeviceError> {
        let data = data.into();
        let expected = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if expected != Some(data.len()) {
            return Err(DeviceError::Length {
                shape: shape.to_vec(),
                expected: expected.unwrap_or(usize::MAX),
                got: data.len(),
            });
        }
        Ok(HostArray {
            spec: TensorSpec::new(data.dtype(), shape),
            data,
        })
    }

    /// An array of `shape` over typed `values` (the element type is
    /// inferred from them); the element count must match.
    pub fn from_vec<T: Element>(shape: &[usize], values: Vec<T>) -> Result<HostArray, DeviceError> {
        HostArray::new(shape, T::buffer(values))
    }

    /// An array of `dtype` and `shape` from little-endian bytes (bool as
    /// one byte 0/1), as files store them; the byte count must match.
    pub fn from_le_bytes(
        dtype: DType,
        shape: &[usize],
        bytes: &[u8],
    ) -> Result<HostArray, DeviceError> {
        let expected = shape
            .iter()
            .try_fold(dtype.size_of(), |n, &d| n.checked_mul(d));
        if expected != Some(bytes.len()) {
            return Err(DeviceError::Length {
                shape: shape.to_vec(),
                expected: expected.map_or(usize::MAX, |b| b / dtype.size_of()),
                got: bytes.len() / dtype.size_of(),
            });
        }
        HostArray::new(shape, HostBuffer::from_le_bytes(dtype, bytes)?)
    }

    /// Zeros of `spec` (false for bool).
    pub fn zeros(spec: &TensorSpec) -> HostArray {
        HostArray {
            spec: spec.clone(),
            data: HostBuffer::zeros(spec.dtype, spec.numel()),
        }
    }

    /// An f32 scalar.
    pub fn scalar_f32(value: f32) -> HostArray {
        HostArray::scalar(HostBuffer::F32(vec![value]))
    }

    /// An f64 scalar.
    pub fn scalar_f64(value: f64) -> HostArray {
        HostArray::scalar(HostBuffer::F64(vec![value]))
    }

    /// An i32 scalar (e.g. an RNG key).
    pub fn scalar_i32(value: i32) -> HostArray {
        HostArray::scalar(HostBuffer::I32(vec![value]))
    }

    fn scalar(data: HostBuffer) -> HostArray {
        HostArray {
            spec: TensorSpec::new(data.dtype(), &[]),
            data,
        }
    }

    /// Shape and dtype.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// Full shape (batch first, for batch data).
    pub fn shape(&self) -> &[usize] {
        &self.spec.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.spec.dtype
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Total bytes of the elements.
    pub fn byte_len(&self) -> usize {
        self.data.byte_len()
    }

    /// The buffer.
    pub fn data(&self) -> &HostBuffer {
        &self.data
    }

    /// The buffer, mutably. Its dtype and length must not change; a
    /// backend writing results in place keeps to that.
    pub fn data_mut(&mut self) -> &mut HostBuffer {
        &mut self.data
    }

    /// Take the buffer.
    pub fn into_data(self) -> HostBuffer {
        self.data
    }

    /// Swap buffers with `other`, which must have this array's dtype and
    /// length (backends hand a freshly computed value back in place this
    /// way, without copying).
    pub fn swap_data(&mut self, other: &mut HostBuffer) {
        debug_assert_eq!(
            (other.dtype(), other.len()),
            (self.data.dtype(), self.data.len()),
            "swap_data keeps dtype and length"
        );
        std::mem::swap(&mut self.data, other);
    }

    /// The elements as `&[T]`, if the array holds `T`.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        self.data.as_slice()
    }

    /// Same elements, another shape.
    pub fn reshape(mut self, shape: &[usize]) -> Result<HostArray, DeviceError> {
        if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(self.numel()) {
            return Err(DeviceError::Length {
                shape: shape.to_vec(),
                expected: shape.iter().fold(1usize, |n, &d| n.saturating_mul(d)),
                got: self.numel(),
            });
        }
        self.spec.shape = shape.to_vec();
        Ok(self)
    }

    /// Every element as f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.data.to_f64_vec()
    }

    /// Every element as f32 (converting).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            HostBuffer::F32(v) => v.clone(),
            other => other.to_f64_vec().into_iter().map(|x| x as f32).collect(),
        }
    }

    /// The single element of a one-element array, as f64.
    pub fn item(&self) -> Result<f64, DeviceError> {
        if self.numel() != 1 {
            return Err(DeviceError::NotOneElement {
                shape: self.shape().to_vec(),
            });
        }
        Ok(self.data.to_f64_vec()[0])
    }

    /// Convert to another dtype (see [`HostBuffer::cast`]).
    pub fn cast(&self, dtype: DType) -> HostArray {
        HostArray {
            spec: TensorSpec::new(dtype, &self.spec.shape),
            data: self.data.cast(dtype),
        }
    }

    /// Rows (samples) on axis 0; 0 for a rank-0 array.
    pub fn rows(&self) -> usize {
        self.shape().first().copied().unwrap_or(0)
    }

    /// Shape of one sample (the shape without axis 0).
    pub fn sample_shape(&self) -> &[usize] {
        self.shape().get(1..).unwrap_or(&[])
    }

    /// Elements per row.
    fn row_len(&self) -> usize {
        self.sample_shape().iter().product()
    }

    fn with_rows(&self, rows: usize, data: HostBuffer) -> HostArray {
        let mut shape = self.spec.shape.clone();
        shape[0] = rows;
        HostArray {
            spec: TensorSpec::new(self.spec.dtype, &shape),
            data,
        }
    }

    fn check_rank(&self, op: &'static str) -> Result<(), DeviceError> {
        if self.shape().is_empty() {
            return Err(DeviceError::NoBatchAxis { op });
        }
        Ok(())
    }

    /// Rows at `indices` (in that order, repeats allowed), as a new array.
    pub fn gather_rows(&self, indices: &[usize]) -> Result<HostArray, DeviceError> {
        self.check_rank("gather_rows")?;
        let rows = self.rows();
        if let Some(&index) = indices.iter().find(|&&i| i >= rows) {
            return Err(DeviceError::RowIndex { index, rows });
        }
        let per = self.row_len();
        let data = map_variant!(&self.data, v => gather(v, indices, per));
        Ok(self.with_rows(indices.len(), data))
    }

    /// Rows `start..end` as a new array.
    pub fn slice_rows(&self, start: usize, end: usize) -> Result<HostArray, DeviceError> {
        self.check_rank("slice_rows")?;
        let rows = self.rows();
        if start > end || end > rows {
            return Err(DeviceError::RowRange { start, end, rows });
        }
        let per = self.row_len();
        let data = map_variant!(&self.data, v => v[start * per..end * per].to_vec());
        Ok(self.with_rows(end - start, data))
    }

    /// Pad along axis 0 to `width` rows with `fill`. An array already at
    /// `width` is returned unchanged; one wider than `width`, or an empty one
    /// with [`PadFill::RepeatLast`], is an error.
    pub fn pad_rows(&self, width: usize, fill: PadFill) -> Result<HostArray, DeviceError> {
        self.check_rank("pad_rows")?;
        let rows = self.rows();
        if rows > width {
            return Err(DeviceError::TooManyRows { rows, width });
        }
        if rows == width {
            return Ok(self.clone());
        }
        match fill {
            PadFill::RepeatLast => {
                if rows == 0 {
                    return Err(DeviceError::NoRows { op: "pad_rows" });
                }
                let idx: Vec<usize> = (0..width).map(|i| i.min(rows - 1)).collect();
                self.gather_rows(&idx)
            }
            PadFill::Zeros => {
                let n = width * self.row_len();
                let data = map_variant!(&self.data, v => {
                    let mut out = Vec::with_capacity(n);
                    out.extend_from_slice(v);
                    out.resize(n, Default::default());
                    out
                });
                Ok(self.with_rows(width, data))
            }
        }
    }

    /// Concatenate arrays of one dtype and sample shape along axis 0.
    pub fn concat_rows(parts: &[HostArray]) -> Result<HostArray, DeviceError> {
        let first = parts
            .first()
            .ok_or(DeviceError::NoRows { op: "concat_rows" })?;
        for p in parts {
            p.check_rank("concat_rows")?;
            if p.dtype() != first.dtype() {
                return Err(DeviceError::DType {
                    expected: first.dtype(),
                    got: p.dtype(),
                });
            }
            if p.sample_shape() != first.sample_shape() {
                let mut expected = first.shape().to_vec();
                expected[0] = p.rows();
                return Err(DeviceError::Shape {
                    expected,
                    got: p.shape().to_vec(),
                });
            }
        }
        let rows = parts.iter().map(HostArray::rows).sum();
        let data = map_variant!(&first.data, v => concat(v, parts));
        Ok(first.with_rows(rows, data))
    }
}

/// Rows `indices` of `all` (rows of `per` elements); indices are checked.
fn gather<T: Copy>(all: &[T], indices: &[usize], per: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(indices.len() * per);
    for &i in indices {
        out.extend_from_slice(&all[i * per..(i + 1) * per]);
    }
    out
}

/// `parts`' elements back to back; `_first` fixes the element type (every
/// part was checked to have it).
fn concat<T: Element>(_first: &[T], parts: &[HostArray]) -> Vec<T> {
    let mut out = Vec::with_capacity(parts.iter().map(HostArray::numel).sum());
    for p in parts {
        out.extend_from_slice(p.as_slice::<T>().unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(shape: &[usize], v: Vec<i64>) -> HostArray {
        HostArray::new(shape, v).unwrap()
    }

    #[test]
    fn gather_slice_pad_concat() {
        let x = a(&[3, 2], vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(
            x.gather_rows(&[2, 0]).unwrap(),
            a(&[2, 2], vec![5, 6, 1, 2])
        );
        let s = x.slice_rows(1, 3).unwrap();
        assert_eq!(s, a(&[2, 2], vec![3, 4, 5, 6]));
        assert_eq!(
            s.pad_rows(4, PadFill::RepeatLast).unwrap(),
            a(&[4, 2], vec![3, 4, 5, 6, 5, 6, 5, 6])
        );
        assert_eq!(
            s.pad_rows(3, PadFill::Zeros).unwrap(),
            a(&[3, 2], vec![3, 4, 5, 6, 0, 0])
        );
        assert_eq!(
            HostArray::concat_rows(&[s.clone(), x.slice_rows(0, 1).unwrap()]).unwrap(),
            a(&[3, 2], vec![3, 4, 5, 6, 1, 2])
        );
        assert!(matches!(
            x.gather_rows(&[3]),
            Err(DeviceError::RowIndex { index: 3, rows: 3 })
        ));
        assert!(matches!(
            x.slice_rows(2, 4),
            Err(DeviceError::RowRange { .. })
        ));
        assert!(x.pad_rows(2, PadFill::Zeros).is_err());
        assert!(a(&[0, 2], vec![]).pad_rows(2, PadFill::RepeatLast).is_err());
        let scalar = HostArray::scalar_f32(1.0);
        assert!(matches!(
            scalar.gather_rows(&[0]),
            Err(DeviceError::NoBatchAxis { .. })
        ));
        assert!(HostArray::concat_rows(&[x.clone(), x.cast(DType::F32)]).is_err());
        assert!(HostArray::concat_rows(&[x.clone(), a(&[1, 3], vec![0; 3])]).is_err());
    }

    #[test]
    fn shape_and_bytes_are_checked() {
        assert!(HostArray::new(&[2, 2], vec![0f32; 3]).is_err());
        assert!(HostArray::new(&[usize::MAX, 2], vec![0f32; 2]).is_err());
        let x = HostArray::new(&[2, 3], vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
        assert!(x.clone().reshape(&[4]).is_err());
        assert_eq!(x.clone().reshape(&[3, 2]).unwrap().shape(), &[3, 2]);
        let bytes = x.data().to_le_bytes();
        assert_eq!(
            HostArray::from_le_bytes(DType::F32, &[2, 3], &bytes).unwrap(),
            x
        );
        assert!(HostArray::from_le_bytes(DType::F32, &[2, 2], &bytes).is_err());
        assert!(HostArray::from_le_bytes(DType::F64, &[usize::MAX, 2], &bytes).is_err());
        assert!(x.item().is_err());
        assert_eq!(HostArray::scalar_i32(7).item().unwrap(), 7.0);
    }

    #[test]
    fn row_ops_keep_every_dtype() {
        for dtype in DType::ALL {
            let x = HostArray::new(&[3, 1], vec![1.0f64, 0.0, 1.0])
                .unwrap()
                .cast(dtype);
            let g = x.gather_rows(&[1, 2]).unwrap();
            assert_eq!(g.dtype(), dtype);
            assert_eq!(g, x.slice_rows(1, 3).unwrap(), "{dtype}");
            assert_eq!(g.pad_rows(4, PadFill::Zeros).unwrap().dtype(), dtype);
        }
    }
}
