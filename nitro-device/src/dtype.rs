//! Element types. Storage types (f16, bf16, u8, bool) and compute types
//! (f32, f64, i32, i64) share one enum so shapes and signatures can name them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor or buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DType {
    /// 32-bit IEEE float: the default compute type.
    F32,
    /// 64-bit IEEE float: used to check numerics (finite differences).
    F64,
    /// 16-bit IEEE float (storage; computed in f32 on the CPU).
    F16,
    /// bfloat16 (storage; computed in f32 on the CPU).
    BF16,
    /// 32-bit signed integer (labels, indices).
    I32,
    /// 64-bit signed integer.
    I64,
    /// Unsigned byte (raw pixels).
    U8,
    /// Boolean (masks, comparisons).
    Bool,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size_of(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// Whether this is a floating-point type (differentiable).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// Whether this is an integer type.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64 | DType::U8)
    }

    /// Short lowercase name, as printed in signatures (`f32[256,784]`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    /// The dtype whose [`DType::name`] is `name` (`"bf16"` -> `BF16`).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
