//! The three field markers: `GraphConst<T>`, `Device<T>` and `Host<T>`.

use std::fmt;
use std::ops::{Deref, DerefMut};

use crate::{ConfigField, ConfigValue, ContentHash, DeviceInput, ValueError};

/// The category of an experiment field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// Bakes into the graph as a constant and enters the compile key:
    /// changing it recompiles, because it is a different program.
    GraphConst,
    /// A traced input: changing or scheduling it never recompiles.
    Device,
    /// Driver-only (the default): invisible to the tracer.
    Host,
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Category::GraphConst => "GraphConst",
            Category::Device => "Device",
            Category::Host => "Host",
        })
    }
}

macro_rules! wrapper {
    ($(#[$doc:meta])* $name:ident<T: $bound:path>) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd)]
        #[repr(transparent)]
        pub struct $name<T: $bound>(pub T);

        impl<T: $bound> $name<T> {
            /// Unwraps the value.
            pub fn into_inner(self) -> T {
                self.0
            }
        }
        impl<T: $bound> Deref for $name<T> {
            type Target = T;
            fn deref(&self) -> &T {
                &self.0
            }
        }
        impl<T: $bound> DerefMut for $name<T> {
            fn deref_mut(&mut self) -> &mut T {
                &mut self.0
            }
        }
        impl<T: $bound> From<T> for $name<T> {
            fn from(value: T) -> Self {
                Self(value)
            }
        }
        impl<T: $bound + fmt::Display> fmt::Display for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
        impl<T: $bound + ConfigField> ConfigField for $name<T> {
            fn type_name() -> String {
                T::type_name()
            }
            fn to_config(&self) -> ConfigValue {
                self.0.to_config()
            }
            fn from_config(value: &ConfigValue) -> Result<Self, ValueError> {
                T::from_config(value).map(Self)
            }
            fn parse_text(text: &str) -> Result<Self, ValueError> {
                T::parse_text(text).map(Self)
            }
        }
    };
}

/// Any type: the bound on [`Host`].
pub trait AnyHost {}
impl<T: ?Sized> AnyHost for T {}

wrapper!(
    /// A structural field: it bakes into the graph as a trace-time constant
    /// and enters the compile key by content, so `T` must be
    /// [`ContentHash`]. Derefs to `T`.
    ///
    /// ```
    /// use nitro_markers::GraphConst;
    /// let width = GraphConst(128usize);
    /// assert_eq!(*width * 2, 256);
    /// ```
    GraphConst<T: ContentHash>
);

wrapper!(
    /// A traced input: a scalar or array of f32/f16/bf16/i32. It holds the
    /// host value before setup; the framework converts it to a device buffer
    /// and the compile view shows the traced tensor. Changing it (a sweep, a
    /// schedule, `set_device`) never recompiles. Derefs to `T`.
    Device<T: DeviceInput>
);

wrapper!(
    /// A Host field, written out for emphasis (an unmarked field is Host
    /// already). Driver-only: the compile view replaces it with a
    /// [`StrippedHost`](crate::StrippedHost). Derefs to `T`.
    Host<T: AnyHost>
);

impl<T: ContentHash> ContentHash for GraphConst<T> {}
