//! The scalar rows of `crate::semantics` as CUDA C expressions over
//! registers: unary, binary and comparison ops on float and integer
//! registers, and casts between register types exactly as the CPU casts.
//! Owns no kernel: `fused` composes these into one.

use super::types::register_type;
use crate::ir::{BinaryOp, CmpOp, UnaryOp};
use crate::semantics::{IntBinary, IntUnary};
use nitro_device::DType;

// The scalar rows below render the table of `crate::semantics` as CUDA C
// (float rows over `UnaryOp`/`BinaryOp`, integer rows over `IntUnary`/
// `IntBinary`, every match exhaustive). An op float-only by the table on an
// integer register renders an undeclared identifier naming it, so NVRTC
// and host emulation refuse the module instead of computing something;
// `ir::infer` refuses such a graph first.

pub(super) fn unary(op: UnaryOp, ty: &str, a: &str) -> String {
    if ty != "float" && ty != "double" {
        return match op.on_integers() {
            Some(op) => int_unary(op, ty, a),
            None => format!("nitro_undefined_on_integers_{op:?}({a})"),
        };
    }
    let f = |name32: &str, name64: &str| {
        if ty == "float" {
            format!("{name32}({a})")
        } else {
            format!("{name64}({a})")
        }
    };
    let one = if ty == "float" { "1.0f" } else { "1.0" };
    match op {
        UnaryOp::Neg => format!("-{a}"),
        UnaryOp::Abs => f("fabsf", "fabs"),
        // ±0 and NaN are their own sign.
        UnaryOp::Sign => format!("({a} > 0 ? ({ty})1 : ({a} < 0 ? ({ty})-1 : {a}))"),
        // f32: the CPU's polynomial (prelude), not expf; f64: exp both sides.
        UnaryOp::Exp => f("nitro_exp_f32", "exp"),
        UnaryOp::Log => f("logf", "log"),
        UnaryOp::Sqrt => f("sqrtf", "sqrt"),
        // f32: the CPU's exp-based form (prelude), not tanhf.
        UnaryOp::Tanh => f("nitro_tanh_f32", "tanh"),
        UnaryOp::Sin => f("sinf", "sin"),
        UnaryOp::Cos => f("cosf", "cos"),
        UnaryOp::Floor => f("floorf", "floor"),
        // f32: the CPU's fit (prelude), not erff; f64: libm's erf both sides.
        UnaryOp::Erf => f("nitro_erf_f32", "erf"),
        UnaryOp::Gelu => {
            let (half, rsqrt2, erf) = if ty == "float" {
                ("0.5f", "0.70710678118654752f", "nitro_erf_f32")
            } else {
                ("0.5", "0.70710678118654752440", "erf")
            };
            format!("{a} * {half} * ({one} + {erf}({a} * {rsqrt2}))")
        }
        UnaryOp::GeluGrad => {
            let (half, rsqrt2, pdf, erf, exp) = if ty == "float" {
                (
                    "0.5f",
                    "0.70710678118654752f",
                    "0.39894228040143268f",
                    "nitro_erf_f32",
                    "nitro_exp_f32",
                )
            } else {
                (
                    "0.5",
                    "0.70710678118654752440",
                    "0.39894228040143267794",
                    "erf",
                    "exp",
                )
            };
            format!("(({erf}({a} * {rsqrt2}) + {one}) * {half} + {a} * ({exp}({a} * {a} * -{half}) * {pdf}))")
        }
        UnaryOp::Recip => format!("{one} / {a}"),
        // Forwarded away by simplification; the identity if it remains.
        UnaryOp::StopGradient => format!("({a})"),
        UnaryOp::Sigmoid => {
            let e = if ty == "float" {
                "nitro_exp_f32"
            } else {
                "exp"
            };
            format!("{one} / ({one} + {e}(-{a}))")
        }
    }
}

fn int_unary(op: IntUnary, ty: &str, a: &str) -> String {
    match op {
        IntUnary::Neg => format!("({ty})(0ULL - (unsigned long long){a})"),
        IntUnary::Abs => format!("({a} < 0 ? ({ty})(0ULL - (unsigned long long){a}) : {a})"),
        IntUnary::Sign => format!("({ty})(({a} > 0) - ({a} < 0))"),
    }
}

pub(super) fn binary(op: BinaryOp, ty: &str, a: &str, b: &str) -> String {
    if ty != "float" && ty != "double" {
        return match op.on_integers() {
            Some(op) => int_binary(op, ty, a, b),
            None => format!("nitro_undefined_on_integers_{op:?}({a}, {b})"),
        };
    }
    match op {
        BinaryOp::Add => format!("{a} + {b}"),
        BinaryOp::Sub => format!("{a} - {b}"),
        BinaryOp::Mul => format!("{a} * {b}"),
        BinaryOp::Div => format!("{a} / {b}"),
        // A NaN operand yields the other one; ties give the first.
        BinaryOp::Max => format!("(({a} >= {b} || {b} != {b}) ? {a} : {b})"),
        BinaryOp::Min => format!("(({a} <= {b} || {b} != {b}) ? {a} : {b})"),
        BinaryOp::Pow => {
            if ty == "float" {
                format!("powf({a}, {b})")
            } else {
                format!("pow({a}, {b})")
            }
        }
    }
}

fn int_binary(op: IntBinary, ty: &str, a: &str, b: &str) -> String {
    let wrap = |o: &str| format!("({ty})((unsigned long long){a} {o} (unsigned long long){b})");
    match op {
        IntBinary::Add => wrap("+"),
        IntBinary::Sub => wrap("-"),
        IntBinary::Mul => wrap("*"),
        IntBinary::Div => {
            let min = if ty == "int" {
                "(-2147483647 - 1)"
            } else {
                "(-9223372036854775807LL - 1)"
            };
            format!("({b} == 0 ? ({ty})0 : (({a} == {min} && {b} == -1) ? {a} : {a} / {b}))")
        }
        IntBinary::Max => format!("({a} > {b} ? {a} : {b})"),
        IntBinary::Min => format!("({a} < {b} ? {a} : {b})"),
    }
}

pub(super) fn compare(op: CmpOp, a: &str, b: &str) -> String {
    let o = match op {
        CmpOp::Eq => "==",
        CmpOp::Ne => "!=",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    };
    format!("{a} {o} {b}")
}

/// A register of dtype `from` converted to the register of `to`, exactly
/// as the CPU backend's `cast`.
pub(super) fn cast(from: DType, to: DType, a: &str) -> String {
    let (src, dst) = (register_type(from), register_type(to));
    match (dst, src) {
        ("float", "float") => match to {
            DType::F16 => format!("nitro_f16_to_f32(nitro_f32_to_f16({a}))"),
            DType::BF16 => format!("nitro_bf16_to_f32(nitro_f32_to_bf16({a}))"),
            _ => a.to_string(),
        },
        ("float", "double") => match to {
            DType::F16 => format!("nitro_f16_to_f32(nitro_f32_to_f16(nitro_f64_to_f32_odd({a})))"),
            DType::BF16 => {
                format!("nitro_bf16_to_f32(nitro_f32_to_bf16(nitro_f64_to_f32_odd({a})))")
            }
            _ => format!("(float){a}"),
        },
        ("float", _) => format!("(float){a}"),
        ("double", _) => format!("(double){a}"),
        ("int", "float") | ("int", "double") => {
            if to == DType::U8 {
                format!("nitro_f64_to_u8((double){a})")
            } else if src == "float" {
                format!("__float2int_rz({a})")
            } else {
                format!("__double2int_rz({a})")
            }
        }
        ("int", "bool") => format!("(int){a}"),
        ("int", _) => {
            if to == DType::U8 {
                format!("(int)(unsigned char){a}")
            } else {
                format!("(int){a}")
            }
        }
        ("long long", "float") => format!("__float2ll_rz({a})"),
        ("long long", "double") => format!("__double2ll_rz({a})"),
        ("long long", _) => format!("(long long){a}"),
        _ => format!("({a} != 0)"),
    }
}
