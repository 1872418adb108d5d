//! `ConfigValue`: the dynamic form of a field value, used by presets,
//! overrides, the hyperparameter table and the compile key.

use std::fmt;

/// A field value in dynamic form.
///
/// Every configurable field converts to one of these (see
/// [`ConfigField`](crate::ConfigField)). Its [`Display`](fmt::Display) form is
/// what the hyperparameter table shows, and it parses back with
/// [`ConfigValue::parse`]; [`ConfigValue::canonical_bytes`] is what a compile
/// key hashes for a GraphConst field.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    /// An absent optional value (`None`), written `none`.
    None,
    /// A boolean, written `true` / `false`.
    Bool(bool),
    /// Any integer (i128 holds every Rust integer type but u128 extremes).
    Int(i128),
    /// A float (f16/bf16/f32 widen exactly to f64).
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence: `Vec`, array or tuple, written `[a, b]`.
    List(Vec<ConfigValue>),
    /// An ordered map, written `{k: v, ...}` in key order.
    Map(Vec<(ConfigValue, ConfigValue)>),
    /// A value with no config form (an opaque Host field): only its type name.
    Opaque(String),
}

impl ConfigValue {
    /// A short name of the variant, for error messages ("int", "list", ...).
    pub fn kind(&self) -> &'static str {
        match self {
            ConfigValue::None => "none",
            ConfigValue::Bool(_) => "bool",
            ConfigValue::Int(_) => "int",
            ConfigValue::Float(_) => "float",
            ConfigValue::Str(_) => "string",
            ConfigValue::List(_) => "list",
            ConfigValue::Map(_) => "map",
            ConfigValue::Opaque(_) => "opaque",
        }
    }

    /// Canonical, tagged bytes of the value: equal values give equal bytes and
    /// different values (including `1` vs `1.0` vs `"1"`) give different bytes.
    /// Floats are hashed by bit pattern, so `0.0` and `-0.0` key differently.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_canonical(&mut out);
        out
    }

    /// Appends [`canonical_bytes`](Self::canonical_bytes) to `out`.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        fn len(out: &mut Vec<u8>, n: usize) {
            out.extend_from_slice(&(n as u64).to_le_bytes());
        }
        match self {
            ConfigValue::None => out.push(0),
            ConfigValue::Bool(b) => out.extend_from_slice(&[1, u8::from(*b)]),
            ConfigValue::Int(i) => {
                out.push(2);
                out.extend_from_slice(&i.to_le_bytes());
            }
            ConfigValue::Float(f) => {
                out.push(3);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            ConfigValue::Str(s) | ConfigValue::Opaque(s) => {
                out.push(if matches!(self, ConfigValue::Str(_)) {
                    4
                } else {
                    7
                });
                len(out, s.len());
                out.extend_from_slice(s.as_bytes());
            }
            ConfigValue::List(items) => {
                out.push(5);
                len(out, items.len());
                items.iter().for_each(|v| v.write_canonical(out));
            }
            ConfigValue::Map(entries) => {
                out.push(6);
                len(out, entries.len());
                for (k, v) in entries {
                    k.write_canonical(out);
                    v.write_canonical(out);
                }
            }
        }
    }

    /// Parses the literal syntax that [`Display`](fmt::Display) writes:
    /// `none`, `true`, `12`, `0.5`, `"quoted"` or a bare word, `[a, b]`,
    /// `{k: v}`. A bare word that is not a number or keyword is a string.
    pub fn parse(text: &str) -> Result<ConfigValue, String> {
        crate::parse::parse_value(text)
    }
}

fn write_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    let plain = !s.is_empty()
        && s.chars().all(|c| c.is_alphanumeric() || "_-./".contains(c))
        && !matches!(ConfigValue::parse(s), Ok(v) if !matches!(v, ConfigValue::Str(_)));
    if plain {
        f.write_str(s)
    } else {
        write!(f, "{s:?}")
    }
}

/// Values whose text is longer than this are shown abbreviated in
/// reports, config files and checkpoints' config records (a dataset-sized
/// Host field would otherwise fill the screen or the file).
pub const ABBREVIATE_ABOVE: usize = 160;

impl ConfigValue {
    /// The value as text, or, when that is longer than
    /// [`ABBREVIATE_ABOVE`] characters, its kind, size and a content hash
    /// (`<list of 13200, fnv 9c1f..>`): equal values abbreviate equally, a
    /// changed one shows a changed hash.
    pub fn abbreviated(&self) -> String {
        let text = self.to_string();
        if text.len() <= ABBREVIATE_ABOVE {
            return text;
        }
        // FNV-1a, 64 bits: stable across builds and platforms.
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let size = match self {
            ConfigValue::List(items) => format!("list of {}", items.len()),
            ConfigValue::Map(entries) => format!("map of {}", entries.len()),
            ConfigValue::Str(s) => format!("string of {} chars", s.chars().count()),
            other => other.kind().to_string(),
        };
        format!("<{size}, fnv {hash:016x}>")
    }
}

impl fmt::Display for ConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigValue::None => f.write_str("none"),
            ConfigValue::Bool(b) => write!(f, "{b}"),
            ConfigValue::Int(i) => write!(f, "{i}"),
            // `{:?}` keeps a trailing `.0`, so a float never reads back as an int.
            ConfigValue::Float(x) => write!(f, "{x:?}"),
            ConfigValue::Str(s) => write_str(f, s),
            ConfigValue::Opaque(t) => write!(f, "<{t}>"),
            ConfigValue::List(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            ConfigValue::Map(entries) => {
                f.write_str("{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}
