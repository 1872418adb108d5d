//! `Tree`: a tree of leaves (outputs, params, state, optimizer state) walked
//! into checkpoint-style paths (`decoder.dense1.weight`) and rebuilt from
//! its leaves in the same order.
//!
//! The leaf type is named through a [`LeafKind`], not directly, so a crate
//! can make a foreign tensor type a leaf (`impl Tree<MyKind> for Tensor` is
//! allowed where `impl Tree<Tensor> for Tensor` would break the orphan rule),
//! and containers of containers do not overlap with the leaf impl.

use std::collections::BTreeMap;
use std::fmt::Display;

use crate::TreeError;

/// Names the leaf type of a family of trees.
pub trait LeafKind {
    /// The leaf type.
    type Leaf;
}

/// A tree whose leaves are `K::Leaf`. Struct fields are named by field name,
/// tuple, `Vec` and array items by index, `BTreeMap` entries by key.
pub trait Tree<K: LeafKind>: Sized {
    /// Calls `f` with each leaf's path and the leaf, in a fixed order.
    /// `path` is the prefix (empty at the root).
    fn visit<'a>(&'a self, path: &mut String, f: &mut dyn FnMut(&str, &'a K::Leaf));

    /// A tree shaped like `self` whose leaves are taken from `leaves`, in
    /// [`visit`](Self::visit) order.
    fn rebuild(
        &self,
        path: &mut String,
        leaves: &mut dyn Iterator<Item = K::Leaf>,
    ) -> Result<Self, TreeError>;

    /// Every leaf with its path.
    fn leaves(&self) -> Vec<(String, &K::Leaf)> {
        let mut out = Vec::new();
        self.visit(&mut String::new(), &mut |p, l| out.push((p.to_string(), l)));
        out
    }

    /// Every leaf path.
    fn paths(&self) -> Vec<String> {
        self.leaves().into_iter().map(|(p, _)| p).collect()
    }

    /// A tree shaped like `self` holding exactly `leaves`, in path order.
    fn with_leaves(&self, leaves: impl IntoIterator<Item = K::Leaf>) -> Result<Self, TreeError> {
        let mut iter = leaves.into_iter();
        let tree = self.rebuild(&mut String::new(), &mut iter)?;
        match iter.count() {
            0 => Ok(tree),
            extra => Err(TreeError::TooManyLeaves {
                expected: self.leaves().len(),
                extra,
            }),
        }
    }
}

/// Runs `f` with `segment` appended to `path` (dot-separated), then restores
/// `path`. The derive and container impls use it.
pub fn with_segment<R>(
    path: &mut String,
    segment: &dyn Display,
    f: impl FnOnce(&mut String) -> R,
) -> R {
    let len = path.len();
    if len > 0 {
        path.push('.');
    }
    path.push_str(&segment.to_string());
    let out = f(path);
    path.truncate(len);
    out
}

/// Takes the next leaf for `path` (the leaf impls use it).
pub fn next_leaf<L>(path: &str, leaves: &mut dyn Iterator<Item = L>) -> Result<L, TreeError> {
    leaves.next().ok_or_else(|| TreeError::TooFewLeaves {
        path: path.to_string(),
    })
}

/// Declares a leaf kind and makes its leaf type a [`Tree`] of one leaf:
/// `leaf_kind!(pub struct Tensors => Tensor);`.
#[macro_export]
macro_rules! leaf_kind {
    ($(#[$m:meta])* $vis:vis struct $kind:ident => $leaf:ty) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        $vis struct $kind;
        impl $crate::LeafKind for $kind {
            type Leaf = $leaf;
        }
        impl $crate::Tree<$kind> for $leaf {
            fn visit<'a>(&'a self, path: &mut String, f: &mut dyn FnMut(&str, &'a $leaf)) {
                f(path, self)
            }
            fn rebuild(
                &self,
                path: &mut String,
                leaves: &mut dyn Iterator<Item = $leaf>,
            ) -> Result<Self, $crate::TreeError> {
                $crate::next_leaf(path, leaves)
            }
        }
    };
}

fn rebuild_items<'t, K: LeafKind, X: Tree<K> + 't>(
    items: impl Iterator<Item = &'t X>,
    path: &mut String,
    leaves: &mut dyn Iterator<Item = K::Leaf>,
) -> Result<Vec<X>, TreeError> {
    items
        .enumerate()
        .map(|(i, x)| with_segment(path, &i, |p| x.rebuild(p, leaves)))
        .collect()
}

impl<K: LeafKind, X: Tree<K>> Tree<K> for Vec<X> {
    fn visit<'a>(&'a self, path: &mut String, f: &mut dyn FnMut(&str, &'a K::Leaf)) {
        for (i, x) in self.iter().enumerate() {
            with_segment(path, &i, |p| x.visit(p, f));
        }
    }
    fn rebuild(
        &self,
        path: &mut String,
        leaves: &mut dyn Iterator<Item = K::Leaf>,
    ) -> Result<Self, TreeError> {
        rebuild_items(self.iter(), path, leaves)
    }
}

impl<K: LeafKind, X: Tree<K>, const N: usize> Tree<K> for [X; N] {
    fn visit<'a>(&'a self, path: &mut String, f: &mut dyn FnMut(&str, &'a K::Leaf)) {
        for (i, x) in self.iter().enumerate() {
            with_segment(path, &i, |p| x.visit(p, f));
        }
    }
    fn rebuild(
        &self,
        path: &mut String,
        leaves: &mut dyn Iterator<Item = K::Leaf>,
    ) -> Result<Self, TreeError> {
        let items = rebuild_items(self.iter(), path, leaves)?;
        // The template has N items, so the rebuilt Vec does too.
        items
            .try_into()
            .map_err(|_| TreeError::TooFewLeaves { path: path.clone() })
    }
}

impl<K: LeafKind, X: Tree<K>> Tree<K> for Option<X> {
    fn visit<'a>(&'a self, path: &mut String, f: &mut dyn FnMut(&str, &'a K::Leaf)) {
        if let Some(x) = self {
            x.visit(path, f);
        }
    }
    fn rebuild(
        &self,
        path: &mut String,
        leaves: &mut dyn Iterator<Item = K::Leaf>,
    ) -> Result<Self, TreeError> {
        self.as_ref().map(|x| x.rebuild(path, leaves)).transpose()
    }
}

impl<K: LeafKind, X: Tree<K>> Tree<K> for Box<X> {
    fn visit<'a>(&'a self, path: &mut String, f: &mut dyn FnMut(&str, &'a K::Leaf)) {
        (**self).visit(path, f)
    }
    fn rebuild(
        &self,
        path: &mut String,
        leaves: &mut dyn Iterator<Item = K::Leaf>,
    ) -> Result<Self, TreeError> {
        (**self).rebuild(path, leaves).map(Box::new)
    }
}

impl<K: LeafKind, Key: Ord + Clone + Display, X: Tree<K>> Tree<K> for BTreeMap<Key, X> {
    fn visit<'a>(&'a self, path: &mut String, f: &mut dyn FnMut(&str, &'a K::Leaf)) {
        for (k, x) in self {
            with_segment(path, k, |p| x.visit(p, f));
        }
    }
    fn rebuild(
        &self,
        path: &mut String,
        leaves: &mut dyn Iterator<Item = K::Leaf>,
    ) -> Result<Self, TreeError> {
        self.iter()
            .map(|(k, x)| Ok((k.clone(), with_segment(path, k, |p| x.rebuild(p, leaves))?)))
            .collect()
    }
}

macro_rules! tuple_trees {
    ($(($($t:ident $i:tt),+))*) => {$(
        impl<K: LeafKind, $($t: Tree<K>),+> Tree<K> for ($($t,)+) {
            fn visit<'a>(&'a self, path: &mut String, f: &mut dyn FnMut(&str, &'a K::Leaf)) {
                $(with_segment(path, &$i, |p| self.$i.visit(p, f));)+
            }
            fn rebuild(
                &self,
                path: &mut String,
                leaves: &mut dyn Iterator<Item = K::Leaf>,
            ) -> Result<Self, TreeError> {
                Ok(($(with_segment(path, &$i, |p| self.$i.rebuild(p, leaves))?,)+))
            }
        }
    )*};
}
tuple_trees! {
    (A 0)
    (A 0, B 1)
    (A 0, B 1, C 2)
    (A 0, B 1, C 2, D 3)
    (A 0, B 1, C 2, D 3, E 4)
}
