//! Host buffers: a typed, contiguous vector of elements.

use crate::{DType, DeviceError};
use half::{bf16, f16};

/// A contiguous host buffer of one dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum HostBuffer {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i32 elements.
    I32(Vec<i32>),
    /// i64 elements.
    I64(Vec<i64>),
    /// u8 elements.
    U8(Vec<u8>),
    /// bool elements.
    Bool(Vec<bool>),
}

/// Apply `$body` to the inner vector of any variant.
macro_rules! each_variant {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            HostBuffer::F32($v) => $body,
            HostBuffer::F64($v) => $body,
            HostBuffer::F16($v) => $body,
            HostBuffer::BF16($v) => $body,
            HostBuffer::I32($v) => $body,
            HostBuffer::I64($v) => $body,
            HostBuffer::U8($v) => $body,
            HostBuffer::Bool($v) => $body,
        }
    };
}

impl HostBuffer {
    /// A buffer of `len` zeros (false for bool).
    pub fn zeros(dtype: DType, len: usize) -> HostBuffer {
        match dtype {
            DType::F32 => HostBuffer::F32(vec![0.0; len]),
            DType::F64 => HostBuffer::F64(vec![0.0; len]),
            DType::F16 => HostBuffer::F16(vec![f16::ZERO; len]),
            DType::BF16 => HostBuffer::BF16(vec![bf16::ZERO; len]),
            DType::I32 => HostBuffer::I32(vec![0; len]),
            DType::I64 => HostBuffer::I64(vec![0; len]),
            DType::U8 => HostBuffer::U8(vec![0; len]),
            DType::Bool => HostBuffer::Bool(vec![false; len]),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            HostBuffer::F32(_) => DType::F32,
            HostBuffer::F64(_) => DType::F64,
            HostBuffer::F16(_) => DType::F16,
            HostBuffer::BF16(_) => DType::BF16,
            HostBuffer::I32(_) => DType::I32,
            HostBuffer::I64(_) => DType::I64,
            HostBuffer::U8(_) => DType::U8,
            HostBuffer::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_variant!(self, v => v.len())
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        self.len() * self.dtype().size_of()
    }

    /// Every element converted to f64 (for tests, metrics and printing).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            HostBuffer::F32(v) => v.iter().map(|&x| x as f64).collect(),
            HostBuffer::F64(v) => v.clone(),
            HostBuffer::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostBuffer::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostBuffer::I32(v) => v.iter().map(|&x| x as f64).collect(),
            HostBuffer::I64(v) => v.iter().map(|&x| x as f64).collect(),
            HostBuffer::U8(v) => v.iter().map(|&x| x as f64).collect(),
            HostBuffer::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        }
    }

    /// Convert every element to `dtype` (floats round, ints truncate toward zero).
    pub fn cast(&self, dtype: DType) -> HostBuffer {
        if dtype == self.dtype() {
            return self.clone();
        }
        let x = self.to_f64_vec();
        match dtype {
            DType::F32 => HostBuffer::F32(x.iter().map(|&v| v as f32).collect()),
            DType::F64 => HostBuffer::F64(x),
            DType::F16 => HostBuffer::F16(x.iter().map(|&v| f16::from_f64(v)).collect()),
            DType::BF16 => HostBuffer::BF16(x.iter().map(|&v| bf16::from_f64(v)).collect()),
            DType::I32 => HostBuffer::I32(x.iter().map(|&v| v as i32).collect()),
            DType::I64 => HostBuffer::I64(x.iter().map(|&v| v as i64).collect()),
            DType::U8 => HostBuffer::U8(x.iter().map(|&v| v as u8).collect()),
            DType::Bool => HostBuffer::Bool(x.iter().map(|&v| v != 0.0).collect()),
        }
    }

    /// Little-endian bytes of the elements (bool as one byte 0/1).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            HostBuffer::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostBuffer::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostBuffer::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostBuffer::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostBuffer::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostBuffer::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostBuffer::U8(v) => v.clone(),
            HostBuffer::Bool(v) => v.iter().map(|&x| x as u8).collect(),
        }
    }

    /// Rebuild a buffer from little-endian bytes; the byte count must be a
    /// whole number of elements.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Result<HostBuffer, DeviceError> {
        let size = dtype.size_of();
        if bytes.len() % size != 0 {
            return Err(DeviceError::Length {
                shape: vec![bytes.len()],
                expected: bytes.len().div_ceil(size) * size,
                got: bytes.len(),
            });
        }
        macro_rules! decode {
            ($t:ty, $n:literal) => {
                bytes
                    .chunks_exact($n)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk of exact size")))
                    .collect()
            };
        }
        Ok(match dtype {
            DType::F32 => HostBuffer::F32(decode!(f32, 4)),
            DType::F64 => HostBuffer::F64(decode!(f64, 8)),
            DType::F16 => HostBuffer::F16(decode!(f16, 2)),
            DType::BF16 => HostBuffer::BF16(decode!(bf16, 2)),
            DType::I32 => HostBuffer::I32(decode!(i32, 4)),
            DType::I64 => HostBuffer::I64(decode!(i64, 8)),
            DType::U8 => HostBuffer::U8(bytes.to_vec()),
            DType::Bool => HostBuffer::Bool(bytes.iter().map(|&b| b != 0).collect()),
        })
    }
}

macro_rules! from_vec {
    ($($t:ty => $variant:ident),*) => {$(
        impl From<Vec<$t>> for HostBuffer {
            fn from(v: Vec<$t>) -> Self {
                HostBuffer::$variant(v)
            }
        }
    )*};
}
from_vec!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i32 => I32, i64 => I64, u8 => U8, bool => Bool);

/// A Rust type that is one of nitro's element types: lets generic code
/// borrow a buffer's elements as `&[T]` without matching on its variant.
///
/// ```
/// use nitro_device::HostBuffer;
/// let buf = HostBuffer::from(vec![1i32, 2, 3]);
/// assert_eq!(buf.as_slice::<i32>(), Some(&[1, 2, 3][..]));
/// assert_eq!(buf.as_slice::<f32>(), None);
/// ```
pub trait Element: Copy + Default + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    /// The dtype of this Rust type.
    const DTYPE: DType;
    /// The elements of `buffer`, if it holds this type.
    fn slice(buffer: &HostBuffer) -> Option<&[Self]>;
    /// A buffer owning `values`.
    fn buffer(values: Vec<Self>) -> HostBuffer;
}

macro_rules! element {
    ($($t:ty => $variant:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn slice(buffer: &HostBuffer) -> Option<&[Self]> {
                match buffer {
                    HostBuffer::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn buffer(values: Vec<Self>) -> HostBuffer {
                HostBuffer::$variant(values)
            }
        }
    )*};
}
element!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i32 => I32, i64 => I64, u8 => U8, bool => Bool);

impl HostBuffer {
    /// The elements as `&[T]`, if this buffer holds `T` (see [`Element`]).
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        T::slice(self)
    }

    /// The elements' bytes in memory (native byte order), for transports
    /// that move a buffer whatever its dtype. Crate-private: a bool
    /// buffer's bytes must stay 0 or 1, which only callers that write
    /// another bool buffer's bytes (or a summable dtype's) can promise.
    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        fn raw<T>(v: &mut [T]) -> &mut [u8] {
            // SAFETY: every dtype here is plain old data, so its memory may
            // be viewed as bytes; the length is the slice's size in bytes.
            unsafe {
                std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v))
            }
        }
        match self {
            HostBuffer::F32(v) => raw(v),
            HostBuffer::F64(v) => raw(v),
            HostBuffer::F16(v) => raw(v),
            HostBuffer::BF16(v) => raw(v),
            HostBuffer::I32(v) => raw(v),
            HostBuffer::I64(v) => raw(v),
            HostBuffer::U8(v) => v,
            HostBuffer::Bool(v) => raw(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn le_bytes_round_trip_every_dtype() {
        for dtype in DType::ALL {
            let buf = HostBuffer::from(vec![1.0f64, 0.0, 3.0]).cast(dtype);
            let back = HostBuffer::from_le_bytes(dtype, &buf.to_le_bytes()).unwrap();
            assert_eq!(back, buf, "{dtype}");
            assert_eq!(buf.byte_len(), 3 * dtype.size_of());
        }
    }

    #[test]
    fn ragged_bytes_are_an_error() {
        assert!(HostBuffer::from_le_bytes(DType::F32, &[0u8; 5]).is_err());
    }
}
