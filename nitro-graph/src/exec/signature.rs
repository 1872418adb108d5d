//! Typed program signatures: a program's inputs as ordered argument groups
//! (parameters, state, optimizer slots, Device values, hyperparameters,
//! micro-batches), each a list of named specs.
//!
//! A caller builds one [`Signature`] when it compiles a program and keeps
//! it beside the program: the trace reads its tensors by group
//! ([`Bound::tree`], [`Bound::get`]) and the caller lays out arguments by
//! group ([`Signature::range`]), so neither side rebuilds positions or looks
//! names up by string prefix. A name missing from a group is a
//! [`GraphError::Unknown`] naming the group and listing what it holds, never
//! a panic.
//!
//! The flat input names the compiler sees are `role/name`
//! (`params/0.weight`, `batch1/image`): unique, and readable in listings and
//! signature errors.
//!
//! ```
//! use nitro_graph::exec::signature::{Role, Signature};
//! use nitro_graph::TensorSpec;
//!
//! let sig = Signature::new()
//!     .with(Role::Params, [("w".to_string(), TensorSpec::f32(&[4, 2]))])
//!     .with(Role::Batch(0), [("x".to_string(), TensorSpec::f32(&[8, 4]))]);
//! assert_eq!(sig.len(), 2);
//! assert_eq!(sig.range(Role::Batch(0)), 1..2);
//! assert_eq!(sig.inputs()[1].0, "batch0/x");
//! let values = ["w-value", "x-value"];
//! let bound = sig.bind(&values).unwrap();
//! assert_eq!(*bound.get(Role::Params, "w").unwrap(), "w-value");
//! assert!(bound.get(Role::Params, "v").is_err());
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use crate::error::{GraphError, Result};
use crate::ir::TensorSpec;

/// What an argument group holds. Groups appear in a signature in the order
/// they were added; a role appears at most once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Trainable parameters, by path.
    Params,
    /// Non-trainable model state, by path.
    State,
    /// Optimizer slot `k` (momentum; Adam's m and v), by parameter path.
    Slot(usize),
    /// Traced experiment values (Device fields), by field name.
    Device,
    /// Scalar hyperparameters and per-call coefficients, by name.
    Hyper,
    /// Micro-batch `i`'s fields, by field name.
    Batch(usize),
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Params => f.write_str("params"),
            Role::State => f.write_str("state"),
            Role::Slot(k) => write!(f, "slot{k}"),
            Role::Device => f.write_str("device"),
            Role::Hyper => f.write_str("hyper"),
            Role::Batch(i) => write!(f, "batch{i}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Group {
    role: Role,
    names: Vec<String>,
    specs: Vec<TensorSpec>,
    start: usize,
}

/// A program's inputs as ordered, named argument groups.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Signature {
    groups: Vec<Group>,
    len: usize,
}

impl Signature {
    /// An empty signature.
    pub fn new() -> Signature {
        Signature::default()
    }

    /// Appends group `role` (entries in argument order). Adding a role a
    /// second time appends to its group only if it is the last one;
    /// otherwise the entries form their own group of that role, found
    /// first by lookups: callers add each role once.
    pub fn with(
        mut self,
        role: Role,
        entries: impl IntoIterator<Item = (String, TensorSpec)>,
    ) -> Signature {
        let (names, specs): (Vec<String>, Vec<TensorSpec>) = entries.into_iter().unzip();
        let added = names.len();
        match self.groups.last_mut() {
            Some(last) if last.role == role => {
                last.names.extend(names);
                last.specs.extend(specs);
            }
            _ => self.groups.push(Group {
                role,
                names,
                specs,
                start: self.len,
            }),
        }
        self.len += added;
        self
    }

    /// Number of inputs over all groups.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the signature has no inputs.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn group(&self, role: Role) -> Option<&Group> {
        self.groups.iter().find(|g| g.role == role)
    }

    /// The roles present, in argument order.
    pub fn roles(&self) -> impl Iterator<Item = Role> + '_ {
        self.groups.iter().map(|g| g.role)
    }

    /// Argument positions of group `role` (empty when absent).
    pub fn range(&self, role: Role) -> Range<usize> {
        self.group(role)
            .map_or(0..0, |g| g.start..g.start + g.names.len())
    }

    /// Names in group `role`, in argument order (empty when absent).
    pub fn names(&self, role: Role) -> &[String] {
        self.group(role).map_or(&[], |g| &g.names)
    }

    /// Specs in group `role`, in argument order (empty when absent).
    pub fn specs(&self, role: Role) -> &[TensorSpec] {
        self.group(role).map_or(&[], |g| &g.specs)
    }

    /// The flat input list the compiler takes: `role/name` and spec, in
    /// argument order.
    pub fn inputs(&self) -> Vec<(String, TensorSpec)> {
        self.groups
            .iter()
            .flat_map(|g| {
                g.names
                    .iter()
                    .zip(&g.specs)
                    .map(move |(n, s)| (input_name(g.role, n), s.clone()))
            })
            .collect()
    }

    /// The role and name of flat input `index`.
    pub fn locate(&self, index: usize) -> Option<(Role, &str)> {
        let g = self
            .groups
            .iter()
            .find(|g| (g.start..g.start + g.names.len()).contains(&index))?;
        Some((g.role, g.names[index - g.start].as_str()))
    }

    /// Views `values` (one per input, in argument order) by group.
    pub fn bind<'a, T>(&'a self, values: &'a [T]) -> Result<Bound<'a, T>> {
        if values.len() != self.len {
            return Err(GraphError::Backend(format!(
                "a signature of {} inputs was bound to {} values",
                self.len,
                values.len()
            )));
        }
        Ok(Bound { sig: self, values })
    }
}

/// The flat input name of `name` in group `role` (`params/0.weight`).
pub fn input_name(role: Role, name: &str) -> String {
    format!("{role}/{name}")
}

/// The role and name of a flat input name written by [`input_name`]
/// (`params/0.weight` -> `(Role::Params, "0.weight")`): how a program
/// stored on disk (an export) gets its groups back.
pub fn parse_input_name(flat: &str) -> Option<(Role, &str)> {
    let (role, name) = flat.split_once('/')?;
    let numbered = |prefix: &str| role.strip_prefix(prefix)?.parse::<usize>().ok();
    let role = match role {
        "params" => Role::Params,
        "state" => Role::State,
        "device" => Role::Device,
        "hyper" => Role::Hyper,
        _ => match (numbered("slot"), numbered("batch")) {
            (Some(k), _) => Role::Slot(k),
            (_, Some(i)) => Role::Batch(i),
            _ => return None,
        },
    };
    Some((role, name))
}

/// Values (traced tensors, host arrays) viewed through their signature.
pub struct Bound<'a, T> {
    sig: &'a Signature,
    values: &'a [T],
}

impl<'a, T> Bound<'a, T> {
    /// The values of group `role`, in argument order.
    pub fn all(&self, role: Role) -> &'a [T] {
        &self.values[self.sig.range(role)]
    }

    /// `(name, value)` pairs of group `role`, in argument order.
    pub fn entries(&self, role: Role) -> impl Iterator<Item = (&'a str, &'a T)> + 'a {
        let names: &'a [String] = self.sig.names(role);
        names.iter().map(String::as_str).zip(self.all(role))
    }

    /// Value `name` of group `role`; an unknown name is an error listing
    /// the group's names.
    pub fn get(&self, role: Role, name: &str) -> Result<&'a T> {
        let names = self.sig.names(role);
        match names.iter().position(|n| n == name) {
            Some(i) => Ok(&self.values[self.sig.range(role).start + i]),
            None => Err(GraphError::Unknown {
                kind: "signature entry",
                name: input_name(role, name),
                known: names.join(", "),
            }),
        }
    }
}

impl<T: Clone> Bound<'_, T> {
    /// Group `role` as a tree by name.
    pub fn tree(&self, role: Role) -> BTreeMap<String, T> {
        self.entries(role)
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TensorSpec {
        TensorSpec::f32(&[1])
    }

    #[test]
    fn groups_keep_their_order_and_ranges() {
        let sig = Signature::new()
            .with(Role::Params, [("a".into(), spec()), ("b".into(), spec())])
            .with(Role::Slot(0), [("a".into(), spec()), ("b".into(), spec())])
            .with(Role::Hyper, [("lr".into(), spec())])
            .with(Role::Batch(0), [("x".into(), spec())])
            .with(Role::Batch(1), [("x".into(), spec())]);
        assert_eq!(sig.len(), 7);
        assert_eq!(sig.range(Role::Slot(0)), 2..4);
        assert_eq!(sig.range(Role::Batch(1)), 6..7);
        assert_eq!(sig.range(Role::State), 0..0);
        assert_eq!(sig.locate(4), Some((Role::Hyper, "lr")));
        let names: Vec<String> = sig.inputs().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["params/a", "params/b", "slot0/a", "slot0/b", "hyper/lr", "batch0/x", "batch1/x"]
        );
        let values: Vec<usize> = (0..7).collect();
        let b = sig.bind(&values).unwrap();
        assert_eq!(b.all(Role::Slot(0)), &[2, 3]);
        assert_eq!(*b.get(Role::Batch(1), "x").unwrap(), 6);
        let err = b.get(Role::Hyper, "beta1").unwrap_err().to_string();
        assert!(err.contains("hyper/beta1") && err.contains("lr"), "{err}");
        assert!(sig.bind(&values[..3]).is_err());
        for (i, (flat, _)) in sig.inputs().iter().enumerate() {
            assert_eq!(parse_input_name(flat), sig.locate(i), "{flat}");
        }
        assert_eq!(parse_input_name("bogus/x"), None);
    }
}
