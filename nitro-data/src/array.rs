//! A dtype-tagged host array: the one value type every field and output leaf
//! holds. Axis 0 is the batch (sample) axis.

use ndarray::{ArrayD, Axis, IxDyn, Slice};

use crate::error::DataError;

/// Element type of a [`HostArray`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 8-bit unsigned integer (raw pixels).
    U8,
    /// Boolean.
    Bool,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size_of(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// Short lowercase name (`f32`, `u8`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
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

/// A host array of one of the supported dtypes, batch on axis 0, row-major
/// (C order).
///
/// Row-major with the batch first is byte-for-byte the layout of a Julia
/// column-major array with the batch *last*: in both, one sample's values are
/// contiguous and samples follow each other.
#[derive(Debug, Clone, PartialEq)]
pub enum HostArray {
    /// f32 elements.
    F32(ArrayD<f32>),
    /// f64 elements.
    F64(ArrayD<f64>),
    /// i32 elements.
    I32(ArrayD<i32>),
    /// i64 elements.
    I64(ArrayD<i64>),
    /// u8 elements.
    U8(ArrayD<u8>),
    /// bool elements.
    Bool(ArrayD<bool>),
}

/// Apply `$body` to the inner array of every variant, rebuilding the same
/// variant when `$wrap` is given.
macro_rules! each {
    ($self:expr, $a:ident => $body:expr) => {
        match $self {
            HostArray::F32($a) => $body,
            HostArray::F64($a) => $body,
            HostArray::I32($a) => $body,
            HostArray::I64($a) => $body,
            HostArray::U8($a) => $body,
            HostArray::Bool($a) => $body,
        }
    };
    (wrap $self:expr, $a:ident => $body:expr) => {
        match $self {
            HostArray::F32($a) => HostArray::F32($body),
            HostArray::F64($a) => HostArray::F64($body),
            HostArray::I32($a) => HostArray::I32($body),
            HostArray::I64($a) => HostArray::I64($body),
            HostArray::U8($a) => HostArray::U8($body),
            HostArray::Bool($a) => HostArray::Bool($body),
        }
    };
}

macro_rules! from_array {
    ($t:ty, $v:ident) => {
        impl From<ArrayD<$t>> for HostArray {
            fn from(a: ArrayD<$t>) -> Self {
                HostArray::$v(a)
            }
        }
    };
}
from_array!(f32, F32);
from_array!(f64, F64);
from_array!(i32, I32);
from_array!(i64, I64);
from_array!(u8, U8);
from_array!(bool, Bool);

impl HostArray {
    /// Build from a shape and row-major values; errors if the counts differ.
    pub fn from_vec<T>(shape: &[usize], values: Vec<T>) -> Result<Self, DataError>
    where
        ArrayD<T>: Into<HostArray>,
    {
        let expected: usize = shape.iter().product();
        let got = values.len();
        ArrayD::from_shape_vec(IxDyn(shape), values)
            .map(Into::into)
            .map_err(|_| DataError::ShapeMismatch {
                what: format!("{got} values for shape {shape:?}"),
                expected: format!("{expected} values"),
            })
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            HostArray::F32(_) => DType::F32,
            HostArray::F64(_) => DType::F64,
            HostArray::I32(_) => DType::I32,
            HostArray::I64(_) => DType::I64,
            HostArray::U8(_) => DType::U8,
            HostArray::Bool(_) => DType::Bool,
        }
    }

    /// Full shape, batch first.
    pub fn shape(&self) -> &[usize] {
        each!(self, a => a.shape())
    }

    /// Number of rows (samples) on axis 0; 0 for a rank-0 array.
    pub fn rows(&self) -> usize {
        self.shape().first().copied().unwrap_or(0)
    }

    /// Shape of one sample (the shape without axis 0).
    pub fn sample_shape(&self) -> &[usize] {
        self.shape().get(1..).unwrap_or(&[])
    }

    /// Total bytes of the elements.
    pub fn byte_len(&self) -> usize {
        each!(self, a => a.len()) * self.dtype().size_of()
    }

    /// The f32 array, if this is f32.
    pub fn as_f32(&self) -> Option<&ArrayD<f32>> {
        match self {
            HostArray::F32(a) => Some(a),
            _ => None,
        }
    }

    /// The u8 array, if this is u8.
    pub fn as_u8(&self) -> Option<&ArrayD<u8>> {
        match self {
            HostArray::U8(a) => Some(a),
            _ => None,
        }
    }

    /// The i64 array, if this is i64.
    pub fn as_i64(&self) -> Option<&ArrayD<i64>> {
        match self {
            HostArray::I64(a) => Some(a),
            _ => None,
        }
    }

    /// The i32 array, if this is i32.
    pub fn as_i32(&self) -> Option<&ArrayD<i32>> {
        match self {
            HostArray::I32(a) => Some(a),
            _ => None,
        }
    }

    fn check_rank(&self) -> Result<(), DataError> {
        if self.shape().is_empty() {
            return Err(DataError::NoBatchAxis);
        }
        Ok(())
    }

    /// Rows at `indices` (in that order, repeats allowed), as a new array.
    pub fn gather_rows(&self, indices: &[usize]) -> Result<HostArray, DataError> {
        self.check_rank()?;
        let rows = self.rows();
        if let Some(&bad) = indices.iter().find(|&&i| i >= rows) {
            return Err(DataError::IndexOutOfRange {
                index: bad,
                len: rows,
            });
        }
        Ok(each!(wrap self, a => a.select(Axis(0), indices)))
    }

    /// Rows `start..end` as a new array.
    pub fn slice_rows(&self, start: usize, end: usize) -> Result<HostArray, DataError> {
        self.check_rank()?;
        let rows = self.rows();
        if start > end || end > rows {
            return Err(DataError::RangeOutOfBounds {
                start,
                end,
                len: rows,
            });
        }
        Ok(each!(wrap self, a => a.slice_axis(Axis(0), Slice::from(start..end)).to_owned()))
    }

    /// Pad along axis 0 to `width` rows with `fill`. An array already at
    /// `width` is returned unchanged; one wider than `width`, or an empty one
    /// with [`PadFill::RepeatLast`], is an error.
    pub fn pad_rows(&self, width: usize, fill: PadFill) -> Result<HostArray, DataError> {
        self.check_rank()?;
        let rows = self.rows();
        if rows > width {
            return Err(DataError::TooManyRows { rows, width });
        }
        if rows == width {
            return Ok(self.clone());
        }
        match fill {
            PadFill::RepeatLast => {
                if rows == 0 {
                    return Err(DataError::EmptyBatch);
                }
                let idx: Vec<usize> = (0..width).map(|i| i.min(rows - 1)).collect();
                self.gather_rows(&idx)
            }
            PadFill::Zeros => {
                let mut shape = self.shape().to_vec();
                shape[0] = width - rows;
                Ok(each!(wrap self, a => {
                    let zeros = ArrayD::default(IxDyn(&shape));
                    ndarray::concatenate(Axis(0), &[a.view(), zeros.view()])
                        .expect("same trailing shape by construction")
                }))
            }
        }
    }

    /// Concatenate arrays of one dtype and sample shape along axis 0.
    pub fn concat_rows(parts: &[HostArray]) -> Result<HostArray, DataError> {
        let first = parts.first().ok_or(DataError::EmptyBatch)?;
        for p in parts {
            p.check_rank()?;
            if p.dtype() != first.dtype() || p.sample_shape() != first.sample_shape() {
                return Err(DataError::ShapeMismatch {
                    what: format!("{} {:?}", p.dtype(), p.shape()),
                    expected: format!("{} [_, {:?}]", first.dtype(), first.sample_shape()),
                });
            }
        }
        macro_rules! cat {
            ($v:ident) => {{
                let views: Vec<_> = parts
                    .iter()
                    .map(|p| match p {
                        HostArray::$v(a) => a.view(),
                        _ => unreachable!("dtype checked above"),
                    })
                    .collect();
                HostArray::$v(ndarray::concatenate(Axis(0), &views).expect("shapes checked above"))
            }};
        }
        Ok(match first.dtype() {
            DType::F32 => cat!(F32),
            DType::F64 => cat!(F64),
            DType::I32 => cat!(I32),
            DType::I64 => cat!(I64),
            DType::U8 => cat!(U8),
            DType::Bool => cat!(Bool),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_slice_pad() {
        let a = HostArray::from_vec(&[3, 2], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(a.rows(), 3);
        assert_eq!(a.sample_shape(), &[2]);
        let g = a.gather_rows(&[2, 0]).unwrap();
        assert_eq!(
            g,
            HostArray::from_vec(&[2, 2], vec![5i64, 6, 1, 2]).unwrap()
        );
        let s = a.slice_rows(1, 3).unwrap();
        assert_eq!(
            s,
            HostArray::from_vec(&[2, 2], vec![3i64, 4, 5, 6]).unwrap()
        );
        let p = s.pad_rows(4, PadFill::RepeatLast).unwrap();
        assert_eq!(
            p,
            HostArray::from_vec(&[4, 2], vec![3i64, 4, 5, 6, 5, 6, 5, 6]).unwrap()
        );
        let z = s.pad_rows(3, PadFill::Zeros).unwrap();
        assert_eq!(
            z,
            HostArray::from_vec(&[3, 2], vec![3i64, 4, 5, 6, 0, 0]).unwrap()
        );
        assert!(matches!(
            a.gather_rows(&[3]),
            Err(DataError::IndexOutOfRange { index: 3, len: 3 })
        ));
        assert!(a.pad_rows(2, PadFill::Zeros).is_err());
    }
}
