//! Reading the canonical encoding back: a small value tree used to print a
//! part's value in diagnostics and to check that map keys arrive in order.

use std::cmp::Ordering;
use std::fmt;

use crate::tags as tag;

/// Nesting deeper than this is rendered as undecodable rather than recursed.
const MAX_DEPTH: usize = 128;

/// A decoded canonical value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Unit,
    None,
    Some(Box<Value>),
    Bool(bool),
    Unsigned(u128),
    Signed(i128),
    F32(f32),
    F64(f64),
    Char(char),
    Str(String),
    Bytes(Vec<u8>),
    Seq(Vec<Value>),
    Tuple(Vec<Value>),
    TupleStruct(String, Vec<Value>),
    Struct(String, Vec<(String, Value)>),
    Map(Vec<(Value, Value)>),
    UnitStruct(String),
    Newtype(String, Box<Value>),
    Variant {
        index: u32,
        variant: String,
        body: VariantBody,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum VariantBody {
    Unit,
    Newtype(Box<Value>),
    Tuple(Vec<Value>),
    Struct(Vec<(String, Value)>),
}

/// The bytes were not a canonical encoding (only possible for bytes this
/// crate did not write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Undecodable;

impl Value {
    /// Decode one complete item; trailing bytes are an error.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Value, Undecodable> {
        let mut reader = Reader { bytes, pos: 0 };
        let value = reader.value(0)?;
        if reader.pos == bytes.len() {
            Ok(value)
        } else {
            Err(Undecodable)
        }
    }

    /// A total order matching `Ord` of the original types for the common
    /// cases (integers, strings, options, sequences, tuples, derived structs
    /// and enums); values of different shapes order by a fixed rank.
    pub(crate) fn canonical_cmp(&self, other: &Value) -> Ordering {
        use Value::*;
        match (self, other) {
            (Unsigned(a), Unsigned(b)) => a.cmp(b),
            (Signed(a), Signed(b)) => a.cmp(b),
            (F32(a), F32(b)) => a.total_cmp(b),
            (F64(a), F64(b)) => a.total_cmp(b),
            (Bool(a), Bool(b)) => a.cmp(b),
            (Char(a), Char(b)) => a.cmp(b),
            (Str(a), Str(b)) => a.cmp(b),
            (Bytes(a), Bytes(b)) => a.cmp(b),
            (Some(a), Some(b)) | (Newtype(_, a), Newtype(_, b)) => a.canonical_cmp(b),
            (Seq(a), Seq(b)) | (Tuple(a), Tuple(b)) | (TupleStruct(_, a), TupleStruct(_, b)) => {
                cmp_slices(a, b)
            }
            (Struct(_, a), Struct(_, b)) => cmp_fields(a, b),
            (Map(a), Map(b)) => {
                for ((ka, va), (kb, vb)) in a.iter().zip(b) {
                    let o = ka.canonical_cmp(kb).then_with(|| va.canonical_cmp(vb));
                    if o.is_ne() {
                        return o;
                    }
                }
                a.len().cmp(&b.len())
            }
            (
                Variant {
                    index: ia,
                    body: ba,
                    ..
                },
                Variant {
                    index: ib,
                    body: bb,
                    ..
                },
            ) => ia.cmp(ib).then_with(|| match (ba, bb) {
                (VariantBody::Newtype(a), VariantBody::Newtype(b)) => a.canonical_cmp(b),
                (VariantBody::Tuple(a), VariantBody::Tuple(b)) => cmp_slices(a, b),
                (VariantBody::Struct(a), VariantBody::Struct(b)) => cmp_fields(a, b),
                _ => Ordering::Equal,
            }),
            _ => self.rank().cmp(&other.rank()),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Unit => 0,
            Value::None => 1,
            Value::Some(_) => 2,
            Value::Bool(_) => 3,
            Value::Unsigned(_) => 4,
            Value::Signed(_) => 5,
            Value::F32(_) => 6,
            Value::F64(_) => 7,
            Value::Char(_) => 8,
            Value::Str(_) => 9,
            Value::Bytes(_) => 10,
            Value::Seq(_) => 11,
            Value::Tuple(_) => 12,
            Value::TupleStruct(..) => 13,
            Value::Struct(..) => 14,
            Value::Map(_) => 15,
            Value::UnitStruct(_) => 16,
            Value::Newtype(..) => 17,
            Value::Variant { .. } => 18,
        }
    }
}

fn cmp_slices(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = x.canonical_cmp(y);
        if o.is_ne() {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

fn cmp_fields(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for ((_, x), (_, y)) in a.iter().zip(b) {
        let o = x.canonical_cmp(y);
        if o.is_ne() {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Undecodable> {
        let end = self.pos.checked_add(n).ok_or(Undecodable)?;
        let slice = self.bytes.get(self.pos..end).ok_or(Undecodable)?;
        self.pos = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Undecodable> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn len(&mut self) -> Result<usize, Undecodable> {
        usize::try_from(u64::from_le_bytes(self.array()?)).map_err(|_| Undecodable)
    }

    fn string(&mut self) -> Result<String, Undecodable> {
        let n = self.len()?;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Undecodable)
    }

    fn items(&mut self, depth: usize) -> Result<Vec<Value>, Undecodable> {
        let n = self.len()?;
        // Every item is at least one byte: a count beyond what remains is a lie.
        if n > self.bytes.len() - self.pos {
            return Err(Undecodable);
        }
        (0..n).map(|_| self.value(depth + 1)).collect()
    }

    fn fields(&mut self, depth: usize) -> Result<Vec<(String, Value)>, Undecodable> {
        let n = self.len()?;
        if n > self.bytes.len() - self.pos {
            return Err(Undecodable);
        }
        (0..n)
            .map(|_| Ok((self.string()?, self.value(depth + 1)?)))
            .collect()
    }

    fn value(&mut self, depth: usize) -> Result<Value, Undecodable> {
        if depth > MAX_DEPTH {
            return Err(Undecodable);
        }
        let t = self.take(1)?[0];
        Ok(match t {
            tag::UNIT => Value::Unit,
            tag::NONE => Value::None,
            tag::SOME => Value::Some(Box::new(self.value(depth + 1)?)),
            tag::FALSE => Value::Bool(false),
            tag::TRUE => Value::Bool(true),
            tag::U8 => Value::Unsigned(u8::from_le_bytes(self.array()?).into()),
            tag::U16 => Value::Unsigned(u16::from_le_bytes(self.array()?).into()),
            tag::U32 => Value::Unsigned(u32::from_le_bytes(self.array()?).into()),
            tag::U64 => Value::Unsigned(u64::from_le_bytes(self.array()?).into()),
            tag::U128 => Value::Unsigned(u128::from_le_bytes(self.array()?)),
            tag::I8 => Value::Signed(i8::from_le_bytes(self.array()?).into()),
            tag::I16 => Value::Signed(i16::from_le_bytes(self.array()?).into()),
            tag::I32 => Value::Signed(i32::from_le_bytes(self.array()?).into()),
            tag::I64 => Value::Signed(i64::from_le_bytes(self.array()?).into()),
            tag::I128 => Value::Signed(i128::from_le_bytes(self.array()?)),
            tag::F32 => Value::F32(f32::from_bits(u32::from_le_bytes(self.array()?))),
            tag::F64 => Value::F64(f64::from_bits(u64::from_le_bytes(self.array()?))),
            tag::CHAR => {
                let c = char::from_u32(u32::from_le_bytes(self.array()?)).ok_or(Undecodable)?;
                Value::Char(c)
            }
            tag::STR => Value::Str(self.string()?),
            tag::BYTES => {
                let n = self.len()?;
                Value::Bytes(self.take(n)?.to_vec())
            }
            tag::SEQ => Value::Seq(self.items(depth)?),
            tag::TUPLE => Value::Tuple(self.items(depth)?),
            tag::TUPLE_STRUCT => {
                let name = self.string()?;
                Value::TupleStruct(name, self.items(depth)?)
            }
            tag::STRUCT => {
                let name = self.string()?;
                Value::Struct(name, self.fields(depth)?)
            }
            tag::MAP => {
                let n = self.len()?;
                if n > self.bytes.len() - self.pos {
                    return Err(Undecodable);
                }
                let entries = (0..n)
                    .map(|_| Ok((self.value(depth + 1)?, self.value(depth + 1)?)))
                    .collect::<Result<_, Undecodable>>()?;
                Value::Map(entries)
            }
            tag::UNIT_STRUCT => Value::UnitStruct(self.string()?),
            tag::NEWTYPE_STRUCT => {
                let name = self.string()?;
                Value::Newtype(name, Box::new(self.value(depth + 1)?))
            }
            tag::UNIT_VARIANT..=tag::STRUCT_VARIANT => {
                let _enum_name = self.string()?;
                let index = u32::from_le_bytes(self.array()?);
                let variant = self.string()?;
                let body = match t {
                    tag::UNIT_VARIANT => VariantBody::Unit,
                    tag::NEWTYPE_VARIANT => VariantBody::Newtype(Box::new(self.value(depth + 1)?)),
                    tag::TUPLE_VARIANT => VariantBody::Tuple(self.items(depth)?),
                    _ => VariantBody::Struct(self.fields(depth)?),
                };
                Value::Variant {
                    index,
                    variant,
                    body,
                }
            }
            _ => return Err(Undecodable),
        })
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, open: &str, items: &[Value], close: &str) -> fmt::Result {
    f.write_str(open)?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    f.write_str(close)
}

fn write_fields(f: &mut fmt::Formatter<'_>, name: &str, fields: &[(String, Value)]) -> fmt::Result {
    write!(f, "{name} {{ ")?;
    for (i, (field, value)) in fields.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{field}: {value}")?;
    }
    f.write_str(" }")
}

/// Rust-like rendering: `128`, `0.5`, `"adam"`, `[1, 2]`, `Cfg { width: 8 }`,
/// `Adam { lr: 0.001 }`, `Some(3)`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Unit => f.write_str("()"),
            Value::None => f.write_str("None"),
            Value::Some(v) => write!(f, "Some({v})"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Unsigned(n) => write!(f, "{n}"),
            Value::Signed(n) => write!(f, "{n}"),
            Value::F32(x) => write!(f, "{x:?}"),
            Value::F64(x) => write!(f, "{x:?}"),
            Value::Char(c) => write!(f, "{c:?}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Bytes(b) => {
                f.write_str("0x")?;
                b.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
            }
            Value::Seq(items) => write_list(f, "[", items, "]"),
            Value::Tuple(items) if items.len() == 1 => write!(f, "({},)", items[0]),
            Value::Tuple(items) => write_list(f, "(", items, ")"),
            Value::TupleStruct(name, items) => write_list(f, &format!("{name}("), items, ")"),
            Value::Struct(name, fields) => write_fields(f, name, fields),
            Value::Map(entries) => {
                f.write_str("{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
            Value::UnitStruct(name) => f.write_str(name),
            Value::Newtype(name, v) => write!(f, "{name}({v})"),
            Value::Variant { variant, body, .. } => match body {
                VariantBody::Unit => f.write_str(variant),
                VariantBody::Newtype(v) => write!(f, "{variant}({v})"),
                VariantBody::Tuple(items) => write_list(f, &format!("{variant}("), items, ")"),
                VariantBody::Struct(fields) => write_fields(f, variant, fields),
            },
        }
    }
}

/// Render encoded bytes for a diagnostic: a top-level string prints bare
/// (`f32[256,784]`, not `"f32[256,784]"`), long renderings are cut at
/// `max_chars` with an ellipsis, undecodable bytes print as a byte count.
pub(crate) fn render(bytes: &[u8], max_chars: usize) -> String {
    let text = match Value::decode(bytes) {
        Ok(Value::Str(s)) => s,
        Ok(v) => v.to_string(),
        Err(Undecodable) => format!("<{} undecodable bytes>", bytes.len()),
    };
    if text.chars().count() <= max_chars {
        text
    } else {
        let mut cut: String = text.chars().take(max_chars.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}
