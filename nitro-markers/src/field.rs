//! `ConfigField` (a type that converts to and from `ConfigValue`) and
//! `ContentHash` (a config type that may bake into a compiled graph).

use std::collections::BTreeMap;

use crate::{ConfigValue, ValueError};

/// A type a field can hold and still be addressed by name: it renders to a
/// [`ConfigValue`] and converts back, so presets, overrides and the
/// hyperparameter table reach it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a config value, so a preset or override cannot reach this field",
    label = "no `ConfigField` impl",
    note = "flatten it into scalar fields on the experiment, or use an ordered container (Vec, array, BTreeMap)",
    note = "a Host field holding dataset-sized state can be marked `#[experiment(opaque)]`"
)]
pub trait ConfigField: Sized {
    /// The type as the hyperparameter table and error messages name it.
    fn type_name() -> String;
    /// The value in dynamic form.
    fn to_config(&self) -> ConfigValue;
    /// Converts back from dynamic form.
    fn from_config(value: &ConfigValue) -> Result<Self, ValueError>;
    /// Parses a CLI override (`width=512`: the text after `=`).
    fn parse_text(text: &str) -> Result<Self, ValueError> {
        let value = ConfigValue::parse(text).map_err(|reason| ValueError {
            expected: Self::type_name(),
            found: format!("`{text}` ({reason})"),
        })?;
        Self::from_config(&value)
    }
}

/// A config type whose value may bake into a compiled graph and key the
/// compile cache: its content (never its address) determines its bytes.
///
/// Implemented for scalars, strings, and ordered containers of them. Not for
/// `HashMap`/`HashSet` (iteration order varies between runs), pointers or
/// `Mutex` (identity, not content), or a nested config struct (flatten it).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a GraphConst: it has no stable content hash",
    label = "this GraphConst type cannot key the compile cache",
    note = "flatten it into separate GraphConst fields on the experiment, or use an ordered container (BTreeMap/Vec) instead of a HashMap/HashSet",
    note = "a nested config struct is not reachable by preset or override keys; a pointer or Mutex hashes by identity, not content"
)]
pub trait ContentHash: ConfigField {
    /// Appends the canonical content bytes; by default those of
    /// [`ConfigField::to_config`], which is canonical by construction.
    fn content_hash(&self, out: &mut Vec<u8>) {
        self.to_config().write_canonical(out);
    }
}

fn mismatch<T: ConfigField>(found: &ConfigValue) -> ValueError {
    ValueError {
        expected: T::type_name(),
        found: format!("{found} ({})", found.kind()),
    }
}

macro_rules! int_fields {
    ($($t:ty),*) => {$(
        impl ConfigField for $t {
            fn type_name() -> String { stringify!($t).into() }
            fn to_config(&self) -> ConfigValue { ConfigValue::Int(*self as i128) }
            fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
                match value {
                    ConfigValue::Int(i) => <$t>::try_from(*i).map_err(|_| ValueError {
                        expected: Self::type_name(),
                        found: format!("{i} (out of range)"),
                    }),
                    other => Err(mismatch::<Self>(other)),
                }
            }
        }
        impl ContentHash for $t {}
    )*};
}
int_fields!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

macro_rules! float_fields {
    ($($t:ty => $to:expr, $from:expr);*) => {$(
        impl ConfigField for $t {
            fn type_name() -> String { stringify!($t).into() }
            fn to_config(&self) -> ConfigValue { ConfigValue::Float($to(*self)) }
            fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
                match value {
                    ConfigValue::Float(x) => Ok($from(*x)),
                    ConfigValue::Int(i) => Ok($from(*i as f64)),
                    other => Err(mismatch::<Self>(other)),
                }
            }
        }
        impl ContentHash for $t {}
    )*};
}
float_fields!(
    f64 => |x| x, |x| x;
    f32 => f64::from, |x| x as f32;
    half::f16 => f64::from, half::f16::from_f64;
    half::bf16 => f64::from, half::bf16::from_f64
);

impl ConfigField for bool {
    fn type_name() -> String {
        "bool".into()
    }
    fn to_config(&self) -> ConfigValue {
        ConfigValue::Bool(*self)
    }
    fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
        match value {
            ConfigValue::Bool(b) => Ok(*b),
            other => Err(mismatch::<Self>(other)),
        }
    }
}
impl ContentHash for bool {}

impl ConfigField for String {
    fn type_name() -> String {
        "String".into()
    }
    fn to_config(&self) -> ConfigValue {
        ConfigValue::Str(self.clone())
    }
    fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
        match value {
            ConfigValue::Str(s) => Ok(s.clone()),
            // `name=123` on a string field means the text "123".
            ConfigValue::Int(_) | ConfigValue::Bool(_) => Ok(value.to_string()),
            other => Err(mismatch::<Self>(other)),
        }
    }
    /// The text as is, unless it is a quoted literal (`"a, b"`), which is
    /// unquoted so that any string can be given.
    fn parse_text(text: &str) -> Result<Self, ValueError> {
        match ConfigValue::parse(text) {
            Ok(ConfigValue::Str(s)) if text.trim_start().starts_with('"') => Ok(s),
            _ => Ok(text.to_string()),
        }
    }
}
impl ContentHash for String {}

impl<T: ConfigField> ConfigField for Option<T> {
    fn type_name() -> String {
        format!("Option<{}>", T::type_name())
    }
    fn to_config(&self) -> ConfigValue {
        self.as_ref().map_or(ConfigValue::None, T::to_config)
    }
    fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
        match value {
            ConfigValue::None => Ok(None),
            v => T::from_config(v).map(Some),
        }
    }
}
impl<T: ContentHash> ContentHash for Option<T> {}

fn list_items<T: ConfigField>(value: &ConfigValue) -> Result<&[ConfigValue], ValueError> {
    match value {
        ConfigValue::List(items) => Ok(items),
        other => Err(mismatch::<T>(other)),
    }
}

impl<T: ConfigField> ConfigField for Vec<T> {
    fn type_name() -> String {
        format!("Vec<{}>", T::type_name())
    }
    fn to_config(&self) -> ConfigValue {
        ConfigValue::List(self.iter().map(T::to_config).collect())
    }
    fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
        list_items::<Self>(value)?
            .iter()
            .map(T::from_config)
            .collect()
    }
}
impl<T: ContentHash> ContentHash for Vec<T> {}

impl<T: ConfigField, const N: usize> ConfigField for [T; N] {
    fn type_name() -> String {
        format!("[{}; {N}]", T::type_name())
    }
    fn to_config(&self) -> ConfigValue {
        ConfigValue::List(self.iter().map(T::to_config).collect())
    }
    fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
        let items = list_items::<Self>(value)?;
        let parsed: Vec<T> = items.iter().map(T::from_config).collect::<Result<_, _>>()?;
        parsed.try_into().map_err(|v: Vec<T>| ValueError {
            expected: Self::type_name(),
            found: format!("a list of {} items", v.len()),
        })
    }
}
impl<T: ContentHash, const N: usize> ContentHash for [T; N] {}

impl<K: ConfigField + Ord, V: ConfigField> ConfigField for BTreeMap<K, V> {
    fn type_name() -> String {
        format!("BTreeMap<{}, {}>", K::type_name(), V::type_name())
    }
    fn to_config(&self) -> ConfigValue {
        ConfigValue::Map(
            self.iter()
                .map(|(k, v)| (k.to_config(), v.to_config()))
                .collect(),
        )
    }
    fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
        match value {
            ConfigValue::Map(entries) => entries
                .iter()
                .map(|(k, v)| Ok((K::from_config(k)?, V::from_config(v)?)))
                .collect(),
            other => Err(mismatch::<Self>(other)),
        }
    }
}
impl<K: ContentHash + Ord, V: ContentHash> ContentHash for BTreeMap<K, V> {}

macro_rules! tuple_fields {
    ($(($($t:ident $v:ident $i:tt),+))*) => {$(
        impl<$($t: ConfigField),+> ConfigField for ($($t,)+) {
            fn type_name() -> String {
                let names: Vec<String> = vec![$($t::type_name()),+];
                format!("({})", names.join(", "))
            }
            fn to_config(&self) -> ConfigValue {
                ConfigValue::List(vec![$(self.$i.to_config()),+])
            }
            fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
                match list_items::<Self>(value)? {
                    [$($v),+] => Ok(($($t::from_config($v)?,)+)),
                    _ => Err(mismatch::<Self>(value)),
                }
            }
        }
        impl<$($t: ContentHash),+> ContentHash for ($($t,)+) {}
    )*};
}
tuple_fields! {
    (A a 0)
    (A a 0, B b 1)
    (A a 0, B b 1, C c 2)
    (A a 0, B b 1, C c 2, D d 3)
}
