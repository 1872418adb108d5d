//! [`TensorSpec`]: the dtype and shape of a value, without the value. A
//! program is compiled for specs; a [`crate::HostArray`] carries one.

use crate::DType;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Dtype and shape of a value: the part of a signature a program is compiled for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorSpec {
    /// Element type.
    pub dtype: DType,
    /// Dimensions (empty for a scalar).
    pub shape: Vec<usize>,
}

impl TensorSpec {
    /// A spec of `dtype` and `shape`.
    pub fn new(dtype: DType, shape: &[usize]) -> TensorSpec {
        TensorSpec {
            dtype,
            shape: shape.to_vec(),
        }
    }

    /// An f32 spec.
    pub fn f32(shape: &[usize]) -> TensorSpec {
        TensorSpec::new(DType::F32, shape)
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype.size_of()
    }
}

impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, ShapeFmt(&self.shape))
    }
}

/// Prints a shape as `[2,3]`.
pub struct ShapeFmt<'a>(pub &'a [usize]);

impl fmt::Display for ShapeFmt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}
