//! [`Scalar`]: one element in its register class, with the conversions the
//! CPU kernels apply when they fill, load, cast and store. Constant folding
//! evaluates through it, and the tests use it as the reference.

use super::{compare, float_binary, float_unary, int_binary, int_unary};
use crate::ir::{BinaryOp, CmpOp, UnaryOp};
use nitro_device::{bf16, f16, DType};

/// One element in the register class its dtype computes in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// f32, f16 and bf16 registers.
    F32(f32),
    /// f64 registers.
    F64(f64),
    /// i32 and u8 registers.
    I32(i32),
    /// i64 registers.
    I64(i64),
    /// bool registers.
    Bool(bool),
}

impl Scalar {
    /// The register a `fill` of `value` (the f64 an op carries) holds.
    pub fn fill(d: DType, value: f64) -> Scalar {
        match d {
            DType::F32 | DType::F16 | DType::BF16 => Scalar::F32(value as f32),
            DType::F64 => Scalar::F64(value),
            DType::I32 | DType::U8 => Scalar::I32(value as i32),
            DType::I64 => Scalar::I64(value as i64),
            DType::Bool => Scalar::Bool(value != 0.0),
        }
    }

    /// The value stored as `d` (rounded to the storage type), widened to
    /// f64 as a `fill` carries it; `None` where f64 cannot carry it exactly
    /// (an i64 beyond 2^53) or the register does not belong to `d`.
    pub fn stored(self, d: DType) -> Option<f64> {
        let v = match (self, d) {
            (Scalar::F32(x), DType::F32) => x as f64,
            (Scalar::F32(x), DType::F16) => f16::from_f32(x).to_f64(),
            (Scalar::F32(x), DType::BF16) => bf16::from_f32(x).to_f64(),
            (Scalar::F64(x), DType::F64) => x,
            (Scalar::I32(x), DType::I32) => x as f64,
            (Scalar::I32(x), DType::U8) => x as u8 as f64,
            (Scalar::I64(x), DType::I64) => {
                let v = x as f64;
                if v as i64 != x {
                    return None;
                }
                v
            }
            (Scalar::Bool(x), DType::Bool) => x as u8 as f64,
            _ => return None,
        };
        Some(v)
    }

    /// `op(self)`, or `None` where the op is not defined on this class
    /// (float-only ops on integers, anything on bool).
    pub fn unary(self, op: UnaryOp) -> Option<Scalar> {
        Some(match self {
            Scalar::F32(x) => Scalar::F32(float_unary(op, x)),
            Scalar::F64(x) => Scalar::F64(float_unary(op, x)),
            Scalar::I32(x) => Scalar::I32(int_unary(op.on_integers()?, x)),
            Scalar::I64(x) => Scalar::I64(int_unary(op.on_integers()?, x)),
            Scalar::Bool(_) => return None,
        })
    }

    /// `op(self, y)`, or `None` for operands of two classes or an op not
    /// defined on the class.
    pub fn binary(self, op: BinaryOp, y: Scalar) -> Option<Scalar> {
        Some(match (self, y) {
            (Scalar::F32(x), Scalar::F32(y)) => Scalar::F32(float_binary(op, x, y)),
            (Scalar::F64(x), Scalar::F64(y)) => Scalar::F64(float_binary(op, x, y)),
            (Scalar::I32(x), Scalar::I32(y)) => Scalar::I32(int_binary(op.on_integers()?, x, y)),
            (Scalar::I64(x), Scalar::I64(y)) => Scalar::I64(int_binary(op.on_integers()?, x, y)),
            _ => return None,
        })
    }

    /// `self op y`, or `None` for operands of two classes.
    pub fn compare(self, op: CmpOp, y: Scalar) -> Option<bool> {
        Some(match (self, y) {
            (Scalar::F32(x), Scalar::F32(y)) => compare(op, x, y),
            (Scalar::F64(x), Scalar::F64(y)) => compare(op, x, y),
            (Scalar::I32(x), Scalar::I32(y)) => compare(op, x, y),
            (Scalar::I64(x), Scalar::I64(y)) => compare(op, x, y),
            (Scalar::Bool(x), Scalar::Bool(y)) => compare(op, x, y),
            _ => return None,
        })
    }

    /// The register of dtype `to` that `cast` produces from this one:
    /// rounding to f16/bf16 happens once, from the source register (an f64
    /// goes to f16 directly, not through f32); floats to integers truncate
    /// and saturate (NaN gives 0); u8 wraps from integers and saturates from
    /// floats, as Rust's `as`.
    pub fn cast(self, to: DType) -> Scalar {
        let u8_or = |wide: i32, narrow: i32| if to == DType::U8 { narrow } else { wide };
        match (to, self) {
            (DType::F32 | DType::F16 | DType::BF16, s) => Scalar::F32(match (to, s) {
                (DType::F16, Scalar::F32(x)) => f16::from_f32(x).to_f32(),
                (DType::BF16, Scalar::F32(x)) => bf16::from_f32(x).to_f32(),
                (DType::F16, Scalar::F64(x)) => f16::from_f64(x).to_f32(),
                (DType::BF16, Scalar::F64(x)) => bf16::from_f64(x).to_f32(),
                (_, Scalar::F32(x)) => x,
                (_, Scalar::F64(x)) => x as f32,
                (_, Scalar::I32(x)) => x as f32,
                (_, Scalar::I64(x)) => x as f32,
                (_, Scalar::Bool(x)) => x as u8 as f32,
            }),
            (DType::F64, s) => Scalar::F64(match s {
                Scalar::F32(x) => x as f64,
                Scalar::F64(x) => x,
                Scalar::I32(x) => x as f64,
                Scalar::I64(x) => x as f64,
                Scalar::Bool(x) => x as u8 as f64,
            }),
            (DType::I32 | DType::U8, s) => Scalar::I32(match s {
                Scalar::F32(x) => u8_or(x as i32, x as u8 as i32),
                Scalar::F64(x) => u8_or(x as i32, x as u8 as i32),
                Scalar::I32(x) => u8_or(x, x as u8 as i32),
                Scalar::I64(x) => u8_or(x as i32, x as u8 as i32),
                Scalar::Bool(x) => x as i32,
            }),
            (DType::I64, s) => Scalar::I64(match s {
                Scalar::F32(x) => x as i64,
                Scalar::F64(x) => x as i64,
                Scalar::I32(x) => x as i64,
                Scalar::I64(x) => x,
                Scalar::Bool(x) => x as i64,
            }),
            (DType::Bool, s) => Scalar::Bool(match s {
                Scalar::F32(x) => x != 0.0,
                Scalar::F64(x) => x != 0.0,
                Scalar::I32(x) => x != 0,
                Scalar::I64(x) => x != 0,
                Scalar::Bool(x) => x,
            }),
        }
    }

    /// This register widened to f64 (for comparisons in tests; i64 beyond
    /// 2^53 rounds).
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::F32(x) => x as f64,
            Scalar::F64(x) => x,
            Scalar::I32(x) => x as f64,
            Scalar::I64(x) => x as f64,
            Scalar::Bool(x) => x as u8 as f64,
        }
    }
}
