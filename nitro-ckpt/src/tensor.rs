//! A named tensor held as raw little-endian bytes: what a checkpoint stores,
//! and its lossless conversions to and from the workspace's one shaped host
//! value, [`HostArray`].

use nitro_device::{HostArray, HostBuffer};

use crate::{DType, Error, Result};

/// One tensor of a checkpoint tree: its path inside the tree (e.g.
/// `decoder.dense1.weight`), dtype, shape and raw little-endian bytes.
///
/// The bytes are owned, so a checkpoint holds a host copy that can outlive
/// the device buffers it came from (the async saver relies on this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    /// Path inside its tree, e.g. `decoder.dense1.weight`. Must not be empty.
    pub path: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first (row-major). `[]` is a scalar.
    pub shape: Vec<u64>,
    /// `shape.product() * dtype.size_of()` little-endian bytes.
    pub bytes: Vec<u8>,
}

/// Number of bytes a tensor of this dtype and shape occupies, or `None` on overflow.
pub(crate) fn byte_len(dtype: DType, shape: &[u64]) -> Option<u64> {
    shape
        .iter()
        .try_fold(dtype.size_of() as u64, |acc, &d| acc.checked_mul(d))
}

macro_rules! typed_access {
    ($from:ident, $to:ident, $t:ty, $dtype:expr) => {
        #[doc = concat!("A `", stringify!($t), "` tensor from values (stored little-endian).")]
        pub fn $from(path: impl Into<String>, shape: Vec<u64>, values: &[$t]) -> Result<Self> {
            let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            Self::new(path, $dtype, shape, bytes)
        }

        #[doc = concat!("The values of a `", stringify!($t), "` tensor; an error for any other dtype.")]
        pub fn $to(&self) -> Result<Vec<$t>> {
            self.expect_dtype($dtype)?;
            const N: usize = std::mem::size_of::<$t>();
            Ok(self
                .bytes
                .chunks_exact(N)
                .map(|c| {
                    let mut a = [0u8; N];
                    a.copy_from_slice(c);
                    <$t>::from_le_bytes(a)
                })
                .collect())
        }
    };
}

impl TensorEntry {
    /// A tensor from raw little-endian bytes; an error when the byte count
    /// does not match `dtype` and `shape`, or the path is empty.
    pub fn new(
        path: impl Into<String>,
        dtype: DType,
        shape: Vec<u64>,
        bytes: Vec<u8>,
    ) -> Result<Self> {
        let t = TensorEntry {
            path: path.into(),
            dtype,
            shape,
            bytes,
        };
        t.validate()?;
        Ok(t)
    }

    typed_access!(from_f32, to_f32, f32, DType::F32);
    typed_access!(from_f64, to_f64, f64, DType::F64);
    typed_access!(from_i32, to_i32, i32, DType::I32);
    typed_access!(from_i64, to_i64, i64, DType::I64);
    typed_access!(from_u8, to_u8, u8, DType::U8);

    /// An f16 or bf16 tensor from the raw 16-bit patterns of its elements.
    pub fn from_bits16(
        path: impl Into<String>,
        dtype: DType,
        shape: Vec<u64>,
        bits: &[u16],
    ) -> Result<Self> {
        if dtype.size_of() != 2 || !matches!(dtype, DType::F16 | DType::BF16) {
            return Err(Error::InvalidTensor {
                entry: path.into(),
                reason: format!("from_bits16 takes f16 or bf16, not {dtype}"),
            });
        }
        let bytes = bits.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::new(path, dtype, shape, bytes)
    }

    /// A bool tensor (one byte per element).
    pub fn from_bool(path: impl Into<String>, shape: Vec<u64>, values: &[bool]) -> Result<Self> {
        let bytes = values.iter().map(|&b| u8::from(b)).collect();
        Self::new(path, DType::Bool, shape, bytes)
    }

    /// A tensor holding `array` exactly: its dtype, shape and every bit of
    /// every element (a NaN's payload, a negative zero, an f16 subnormal).
    pub fn from_array(path: impl Into<String>, array: &HostArray) -> Result<Self> {
        let shape = array.shape().iter().map(|&d| d as u64).collect();
        Self::new(path, array.dtype(), shape, array.data().to_le_bytes())
    }

    /// The tensor as a [`HostArray`] of its own dtype and shape, bit for
    /// bit. An error (never a panic) when the shape does not fit this
    /// machine's address space or a bool byte is neither 0 nor 1.
    pub fn to_array(&self) -> Result<HostArray> {
        let bad = |reason: String| Error::InvalidTensor {
            entry: self.path.clone(),
            reason,
        };
        self.validate()?;
        let shape = self
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| bad(format!("shape {:?} does not fit in memory", self.shape)))?;
        if self.dtype == DType::Bool {
            if let Some(b) = self.bytes.iter().find(|&&b| b > 1) {
                return Err(bad(format!("bool byte {b}: only 0 and 1 are booleans")));
            }
        }
        let buffer =
            HostBuffer::from_le_bytes(self.dtype, &self.bytes).map_err(|e| bad(e.to_string()))?;
        HostArray::new(&shape, buffer).map_err(|e| bad(e.to_string()))
    }

    /// Number of elements (product of the shape).
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Checks that the path is not empty and the byte count matches dtype and shape.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Error::InvalidTensor {
            entry: self.path.clone(),
            reason,
        };
        if self.path.is_empty() {
            return Err(bad("the path is empty".into()));
        }
        let want = byte_len(self.dtype, &self.shape)
            .ok_or_else(|| bad(format!("shape {:?} overflows", self.shape)))?;
        if want != self.bytes.len() as u64 {
            return Err(bad(format!(
                "shape {:?} of {} needs {want} bytes, got {}",
                self.shape,
                self.dtype,
                self.bytes.len()
            )));
        }
        Ok(())
    }

    fn expect_dtype(&self, asked: DType) -> Result<()> {
        if self.dtype == asked {
            Ok(())
        } else {
            Err(Error::DTypeMismatch {
                entry: self.path.clone(),
                actual: self.dtype,
                asked,
            })
        }
    }
}
