//! C types of nitro's dtypes in generated CUDA (storage and register
//! types), exact constants written as bit patterns, and the conversions a
//! kernel applies at each load and store. Owns no kernel; every generator
//! module renders values through these.

use nitro_device::{DType, HostBuffer};

/// C type of a dtype's storage.
pub fn storage_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 => "nitro_f16",
        DType::BF16 => "nitro_bf16",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::U8 | DType::Bool => "unsigned char",
    }
}

/// C type of the register a dtype computes in (storage types widen, as on the CPU).
pub fn register_type(d: DType) -> &'static str {
    match d {
        DType::F32 | DType::F16 | DType::BF16 => "float",
        DType::F64 => "double",
        DType::I32 | DType::U8 => "int",
        DType::I64 => "long long",
        DType::Bool => "bool",
    }
}

/// An unsigned C type of `bytes` bytes (data movement copies bits).
pub(super) fn bits_type(bytes: usize) -> &'static str {
    match bytes {
        1 => "unsigned char",
        2 => "unsigned short",
        4 => "unsigned int",
        _ => "unsigned long long",
    }
}

/// `value` as an exact C constant of register type `reg` (converted as the
/// CPU converts it: `as f32`, saturating `as i32`, `!= 0` for bool).
pub fn constant(value: f64, d: DType) -> String {
    match register_type(d) {
        "float" => {
            let v = value as f32;
            format!("__int_as_float(0x{:08x}) /* {v:?} */", v.to_bits())
        }
        "double" => format!(
            "__longlong_as_double(0x{:016x}LL) /* {value:?} */",
            value.to_bits()
        ),
        "int" => {
            let v = if d == DType::U8 {
                value as u8 as i32
            } else {
                value as i32
            };
            if v == i32::MIN {
                "(-2147483647 - 1)".into()
            } else {
                format!("{v}")
            }
        }
        "long long" => {
            let v = value as i64;
            if v == i64::MIN {
                "(-9223372036854775807LL - 1)".into()
            } else {
                format!("{v}LL")
            }
        }
        _ => (if value != 0.0 { "true" } else { "false" }).into(),
    }
}

/// `value` converted to dtype `d`, as the raw bits of its storage.
pub(super) fn storage_bits(value: f64, d: DType) -> String {
    let bytes = HostBuffer::F64(vec![value]).cast(d).to_le_bytes();
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(&bytes);
    format!(
        "(({})0x{:x}ULL)",
        bits_type(bytes.len()),
        u64::from_le_bytes(word)
    )
}

/// Convert a loaded storage element to its register.
pub(super) fn load_expr(d: DType, raw: &str) -> String {
    match d {
        DType::F16 => format!("nitro_f16_to_f32({raw})"),
        DType::BF16 => format!("nitro_bf16_to_f32({raw})"),
        DType::U8 => format!("(int){raw}"),
        DType::Bool => format!("({raw} != 0)"),
        _ => raw.to_string(),
    }
}

/// Convert a register to the storage of `d`.
pub(super) fn store_expr(d: DType, reg: &str) -> String {
    match d {
        DType::F16 => format!("nitro_f32_to_f16({reg})"),
        DType::BF16 => format!("nitro_f32_to_bf16({reg})"),
        DType::U8 => format!("(unsigned char){reg}"),
        DType::Bool => format!("(unsigned char)({reg} ? 1 : 0)"),
        _ => reg.to_string(),
    }
}
