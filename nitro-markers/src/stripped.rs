//! `StrippedHost`: what a Host field becomes in the compile view.
//!
//! The sentinel carries only the field's name, as a type, so the tracer has
//! nothing to walk. Every way traced code would *use* it (arithmetic,
//! comparison, conversion to a number, formatting, method calls through
//! `Deref`) is implemented only under a bound, [`ReadInTrace`], that no field
//! satisfies: the program does not compile, and the message names the field
//! and the three fixes. Passing the sentinel where a tensor is expected is a
//! plain type mismatch whose "found `StrippedHost<field>`" names the field.
//!
//! Three forms cannot carry the message in stable Rust (rustc checks them
//! before it looks at the bound); their errors still name the field through
//! the sentinel's type, and the UI tests pin them:
//!
//! - `e.scale * 2.0`: E0369 "cannot multiply `StrippedHost<scale>` by
//!   `f32`", noting that `ReadInTrace` is not implemented for `scale`;
//! - `if e.flag`: E0308 "expected `bool`, found `StrippedHost<flag>`";
//! - `*e.scale`: E0614 "type `StrippedHost<scale>` cannot be dereferenced".
//!
//! Each means the same: the field is Host; mark it `Device<_>` or
//! `GraphConst<_>`, or read it outside the trace.

use std::cmp::Ordering;
use std::convert::Infallible;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Add, Deref, Div, Mul, Neg, Rem, Sub};

/// A zero-sized type standing for one Host field; the derive generates one
/// per Host field, named after it.
pub trait HostFieldName {
    /// The field's name.
    const NAME: &'static str;
}

/// The bound under which a stripped Host field could be used in traced code.
/// Nothing implements it, on purpose.
#[diagnostic::on_unimplemented(
    message = "Host field `{Self}` is read in traced code, but the compile view strips Host fields",
    label = "`{Self}` is a Host field (unmarked fields are Host): traced code cannot read it",
    note = "fix 1: mark it `Device<_>` to trace it as an input (changing it never recompiles)",
    note = "fix 2: mark it `GraphConst<_>` to bake it into the graph (changing it recompiles)",
    note = "fix 3: read it outside the trace, from the experiment itself (build_data, derive, the driver)"
)]
pub trait ReadInTrace: HostFieldName {
    /// Uninhabited: a stripped field has no value to give.
    fn no_value() -> Infallible;
}

/// The body of every impl that requires [`ReadInTrace`]: since no type
/// implements it, this is never called.
#[allow(unreachable_code)]
fn never<N: ReadInTrace, T>() -> T {
    match N::no_value() {}
}

/// A Host field in the compile view: only its name survives.
pub struct StrippedHost<N: HostFieldName>(PhantomData<N>);

impl<N: HostFieldName> StrippedHost<N> {
    /// The sentinel (the derive builds one per Host field).
    pub const fn new() -> Self {
        StrippedHost(PhantomData)
    }

    /// The stripped field's name.
    pub fn field_name(&self) -> &'static str {
        N::NAME
    }
}

impl<N: HostFieldName> Default for StrippedHost<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<N: HostFieldName> Clone for StrippedHost<N> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<N: HostFieldName> Copy for StrippedHost<N> {}

impl<N: HostFieldName> fmt::Debug for StrippedHost<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StrippedHost({})", N::NAME)
    }
}

impl<N: ReadInTrace> fmt::Display for StrippedHost<N> {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        never::<N, _>()
    }
}

impl<N: ReadInTrace> Deref for StrippedHost<N> {
    type Target = Infallible;
    fn deref(&self) -> &Infallible {
        never::<N, _>()
    }
}

macro_rules! ops {
    ($($op:ident $method:ident),*) => {$(
        impl<N: ReadInTrace, R> $op<R> for StrippedHost<N> {
            type Output = Self;
            fn $method(self, _: R) -> Self {
                never::<N, _>()
            }
        }
    )*};
}
ops!(Add add, Sub sub, Mul mul, Div div, Rem rem);

impl<N: ReadInTrace> Neg for StrippedHost<N> {
    type Output = Self;
    fn neg(self) -> Self {
        never::<N, _>()
    }
}

macro_rules! with_numbers {
    ($($t:ty),*) => {$(
        impl<N: ReadInTrace> From<StrippedHost<N>> for $t {
            fn from(_: StrippedHost<N>) -> $t {
                never::<N, _>()
            }
        }
        impl<N: ReadInTrace> PartialEq<$t> for StrippedHost<N> {
            fn eq(&self, _: &$t) -> bool {
                never::<N, _>()
            }
        }
        impl<N: ReadInTrace> PartialOrd<$t> for StrippedHost<N> {
            fn partial_cmp(&self, _: &$t) -> Option<Ordering> {
                never::<N, _>()
            }
        }
        with_numbers!(@rev $t: Add add, Sub sub, Mul mul, Div div, Rem rem);
    )*};
    (@rev $t:ty: $($op:ident $method:ident),*) => {$(
        impl<N: ReadInTrace> $op<StrippedHost<N>> for $t {
            type Output = StrippedHost<N>;
            fn $method(self, _: StrippedHost<N>) -> StrippedHost<N> {
                never::<N, _>()
            }
        }
    )*};
}
with_numbers!(f32, f64, i32, i64, u32, u64, usize, bool);
