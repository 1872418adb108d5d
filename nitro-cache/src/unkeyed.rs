//! `Unkeyed<T>`: a value that sits inside a hashed structure but can never
//! influence the key (a Device value: swept or scheduled without recompiling).

use serde::{Serialize, Serializer};

/// Wraps a value that must not enter a key. It serialises as the same unit
/// marker whatever it holds, so a struct hashed by content can carry it and
/// its key is a function of the other fields only.
///
/// ```
/// use nitro_cache::{KeyBuilder, Unkeyed};
/// let key = |smoothing: f32| {
///     KeyBuilder::new().graph_const("cfg", &(128usize, Unkeyed(smoothing))).finish().unwrap()
/// };
/// assert_eq!(key(0.05), key(0.1));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd)]
pub struct Unkeyed<T>(pub T);

impl<T> Serialize for Unkeyed<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_unit_struct("Unkeyed")
    }
}
