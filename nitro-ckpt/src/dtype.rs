//! How a dtype is written in a file: its lower-case name (`"f32"`,
//! `"bf16"`, `"bool"`), a text that outlives any enum's declaration order.
//! The type itself is nitro-device's [`DType`], the workspace's one; bytes
//! are always little-endian, `Bool` one byte per element (0 or 1).

use nitro_device::DType;
use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

/// Serde `with` codec: a [`DType`] as its [`DType::name`].
pub(crate) fn serialize<S: Serializer>(dtype: &DType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(dtype.name())
}

/// Serde `with` codec: a [`DType`] from its [`DType::name`]; any other
/// text is a decoding error naming the text and the known names.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DType, D::Error> {
    // The index's length (and every string in it) is checked against the
    // file before decoding, so this allocation is bounded.
    let name = String::deserialize(d)?;
    DType::from_name(&name).ok_or_else(|| {
        let known: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        D::Error::custom(format!(
            "unknown dtype `{name}` (known: {})",
            known.join(", ")
        ))
    })
}
