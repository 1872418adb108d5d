//! The canonical value encoding: a serde `Serializer` that writes a value's
//! content as type-tagged, length-prefixed, little-endian bytes.
//!
//! The tag bytes and the layout of each item are the table in [`crate::tags`].
//!
//! A map is accepted only when its keys arrive strictly ascending (by
//! [`crate::value::Value`]'s order, which matches `Ord` for integers, strings,
//! tuples, sequences, options, derived-`Ord` structs and enums). A `BTreeMap`
//! therefore passes and a `HashMap` with more than one entry is refused: its
//! iteration order is not a function of its content. Sets serialise as plain
//! sequences and cannot be told apart from a `Vec`; keep `HashSet` out of keys.

use serde::ser::{self, Serialize};

use crate::tags::*;
use crate::value::Value;

/// Why a value could not be encoded canonically.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A map whose keys did not arrive in strictly ascending order, so its
    /// encoding would depend on iteration order rather than content.
    #[error(
        "map keys arrive unordered ({previous} then {next}); its hash would depend on iteration \
         order. Use a BTreeMap (or sort the entries into a Vec of pairs)"
    )]
    UnorderedMap {
        /// The key that came first, rendered.
        previous: String,
        /// The key that followed it, rendered.
        next: String,
    },
    /// The value's own `Serialize` implementation reported an error.
    #[error("{0}")]
    Custom(String),
}

impl ser::Error for EncodeError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        EncodeError::Custom(msg.to_string())
    }
}

/// Append the canonical encoding of `value` to `out`. On error `out` may hold
/// a partial encoding; the caller truncates it.
pub(crate) fn encode_into<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> Result<(), EncodeError> {
    value.serialize(&mut Encoder { out })
}

/// Append a string item (tag, length, bytes).
pub(crate) fn encode_str(out: &mut Vec<u8>, s: &str) {
    out.push(STR);
    put_bytes(out, s.as_bytes());
}

pub(crate) fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Reserve a `u64` count at the current position, to be patched by [`patch_len`].
pub(crate) fn reserve_len(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; 8]);
    at
}

pub(crate) fn patch_len(out: &mut [u8], at: usize, len: usize) {
    out[at..at + 8].copy_from_slice(&(len as u64).to_le_bytes());
}

struct Encoder<'a> {
    out: &'a mut Vec<u8>,
}

impl Encoder<'_> {
    fn variant_head(&mut self, tag: u8, name: &str, index: u32, variant: &str) {
        self.out.push(tag);
        put_bytes(self.out, name.as_bytes());
        self.out.extend_from_slice(&index.to_le_bytes());
        put_bytes(self.out, variant.as_bytes());
    }

    fn compound(&mut self) -> Compound<'_> {
        let at = reserve_len(self.out);
        Compound {
            out: self.out,
            at,
            count: 0,
            previous_key: None,
        }
    }
}

/// A sequence, tuple, struct or map being written: its count is patched in at
/// the end, so unknown lengths and skipped fields need no special case.
struct Compound<'a> {
    out: &'a mut Vec<u8>,
    at: usize,
    count: usize,
    previous_key: Option<(usize, usize)>,
}

impl Compound<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.count += 1;
        encode_into(self.out, value)
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), EncodeError> {
        self.count += 1;
        put_bytes(self.out, name.as_bytes());
        encode_into(self.out, value)
    }

    fn finish(self) -> Result<(), EncodeError> {
        patch_len(self.out, self.at, self.count);
        Ok(())
    }

    fn map_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), EncodeError> {
        let start = self.out.len();
        encode_into(self.out, key)?;
        let end = self.out.len();
        if let Some((p_start, p_end)) = self.previous_key {
            let previous = Value::decode(&self.out[p_start..p_end]);
            let next = Value::decode(&self.out[start..end]);
            let ascending =
                matches!((&previous, &next), (Ok(p), Ok(n)) if p.canonical_cmp(n).is_lt());
            if !ascending {
                let render = |v: Result<Value, _>| v.map(|v| v.to_string()).unwrap_or_default();
                return Err(EncodeError::UnorderedMap {
                    previous: render(previous),
                    next: render(next),
                });
            }
        }
        self.previous_key = Some((start, end));
        self.count += 1;
        Ok(())
    }
}

impl<'a, 'b> ser::Serializer for &'b mut Encoder<'a> {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = Compound<'b>;
    type SerializeTuple = Compound<'b>;
    type SerializeTupleStruct = Compound<'b>;
    type SerializeTupleVariant = Compound<'b>;
    type SerializeMap = Compound<'b>;
    type SerializeStruct = Compound<'b>;
    type SerializeStructVariant = Compound<'b>;

    fn serialize_bool(self, v: bool) -> Result<(), EncodeError> {
        self.out.push(if v { TRUE } else { FALSE });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), EncodeError> {
        self.out.push(I8);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Result<(), EncodeError> {
        self.out.push(I16);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Result<(), EncodeError> {
        self.out.push(I32);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Result<(), EncodeError> {
        self.out.push(I64);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result<(), EncodeError> {
        self.out.push(I128);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<(), EncodeError> {
        self.out.push(U8);
        self.out.push(v);
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Result<(), EncodeError> {
        self.out.push(U16);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Result<(), EncodeError> {
        self.out.push(U32);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), EncodeError> {
        self.out.push(U64);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<(), EncodeError> {
        self.out.push(U128);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), EncodeError> {
        self.out.push(F32);
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<(), EncodeError> {
        self.out.push(F64);
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), EncodeError> {
        self.out.push(CHAR);
        self.out.extend_from_slice(&(v as u32).to_le_bytes());
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), EncodeError> {
        encode_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), EncodeError> {
        self.out.push(BYTES);
        put_bytes(self.out, v);
        Ok(())
    }
    fn serialize_none(self) -> Result<(), EncodeError> {
        self.out.push(NONE);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), EncodeError> {
        self.out.push(SOME);
        encode_into(self.out, value)
    }
    fn serialize_unit(self) -> Result<(), EncodeError> {
        self.out.push(UNIT);
        Ok(())
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<(), EncodeError> {
        self.out.push(UNIT_STRUCT);
        put_bytes(self.out, name.as_bytes());
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<(), EncodeError> {
        self.variant_head(UNIT_VARIANT, name, index, variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.out.push(NEWTYPE_STRUCT);
        put_bytes(self.out, name.as_bytes());
        encode_into(self.out, value)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.variant_head(NEWTYPE_VARIANT, name, index, variant);
        encode_into(self.out, value)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'b>, EncodeError> {
        self.out.push(SEQ);
        Ok(self.compound())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Compound<'b>, EncodeError> {
        self.out.push(TUPLE);
        Ok(self.compound())
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<Compound<'b>, EncodeError> {
        self.out.push(TUPLE_STRUCT);
        put_bytes(self.out, name.as_bytes());
        Ok(self.compound())
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'b>, EncodeError> {
        self.variant_head(TUPLE_VARIANT, name, index, variant);
        Ok(self.compound())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'b>, EncodeError> {
        self.out.push(MAP);
        Ok(self.compound())
    }
    fn serialize_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<Compound<'b>, EncodeError> {
        self.out.push(STRUCT);
        put_bytes(self.out, name.as_bytes());
        Ok(self.compound())
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'b>, EncodeError> {
        self.variant_head(STRUCT_VARIANT, name, index, variant);
        Ok(self.compound())
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), EncodeError> {
        self.map_key(key)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        encode_into(self.out, value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}
