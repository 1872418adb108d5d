//! The canonical encoding's tag bytes: the one table of the format, written
//! by `encoding` and read back by `value`.
//!
//! Every item starts with a one-byte tag; strings, byte strings and names are
//! a `u64` little-endian length followed by the bytes; compound items carry a
//! `u64` count of their elements. Integers and floats are fixed-width
//! little-endian (floats by their bit pattern, so `0.0` and `-0.0` differ,
//! as the programs they bake would). Type and variant names are part of the
//! encoding, so two types with the same shape do not hash alike.
//!
//! | tag | item | body |
//! |---|---|---|
//! | `00` | unit | - |
//! | `01` / `02` | `None` / `Some` | - / value |
//! | `03` / `04` | `false` / `true` | - |
//! | `10`..`14` | u8, u16, u32, u64, u128 | LE integer |
//! | `18`..`1c` | i8, i16, i32, i64, i128 | LE integer |
//! | `20` / `21` | f32 / f64 | LE bit pattern |
//! | `22` | char | u32 LE |
//! | `30` / `31` | str / bytes | u64 len, bytes |
//! | `40` / `41` | seq / tuple | u64 count, items |
//! | `42` | tuple struct | name, u64 count, items |
//! | `43` | struct | name, u64 count, (field name, value)* |
//! | `44` | map | u64 count, (key, value)*, keys strictly ascending |
//! | `45` / `46` | unit struct / newtype struct | name / name, value |
//! | `50`..`53` | unit / newtype / tuple / struct variant | enum name, u32 index, variant name, body as above |

pub(crate) const UNIT: u8 = 0x00;
pub(crate) const NONE: u8 = 0x01;
pub(crate) const SOME: u8 = 0x02;
pub(crate) const FALSE: u8 = 0x03;
pub(crate) const TRUE: u8 = 0x04;
pub(crate) const U8: u8 = 0x10;
pub(crate) const U16: u8 = 0x11;
pub(crate) const U32: u8 = 0x12;
pub(crate) const U64: u8 = 0x13;
pub(crate) const U128: u8 = 0x14;
pub(crate) const I8: u8 = 0x18;
pub(crate) const I16: u8 = 0x19;
pub(crate) const I32: u8 = 0x1a;
pub(crate) const I64: u8 = 0x1b;
pub(crate) const I128: u8 = 0x1c;
pub(crate) const F32: u8 = 0x20;
pub(crate) const F64: u8 = 0x21;
pub(crate) const CHAR: u8 = 0x22;
pub(crate) const STR: u8 = 0x30;
pub(crate) const BYTES: u8 = 0x31;
pub(crate) const SEQ: u8 = 0x40;
pub(crate) const TUPLE: u8 = 0x41;
pub(crate) const TUPLE_STRUCT: u8 = 0x42;
pub(crate) const STRUCT: u8 = 0x43;
pub(crate) const MAP: u8 = 0x44;
pub(crate) const UNIT_STRUCT: u8 = 0x45;
pub(crate) const NEWTYPE_STRUCT: u8 = 0x46;
pub(crate) const UNIT_VARIANT: u8 = 0x50;
pub(crate) const NEWTYPE_VARIANT: u8 = 0x51;
pub(crate) const TUPLE_VARIANT: u8 = 0x52;
pub(crate) const STRUCT_VARIANT: u8 = 0x53;
