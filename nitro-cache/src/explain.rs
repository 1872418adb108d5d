//! Explain a miss: which named parts differ between a new key and the nearest
//! live key of the same program kind, printed as
//! `train_step: graph_const `width` 128 -> 256; input `img` f32[256,784] -> f32[200,784]`.
//!
//! Parts are matched by (category, name). The nearest key is the one with the
//! fewest differences, ties going to the most recently used.

use std::fmt;

use crate::key::{Category, Key, PartRef};

/// One difference between two keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The part exists in both keys with different values.
    Changed {
        /// The part's category.
        category: Category,
        /// The part's name.
        name: String,
        /// The old value, rendered.
        old: String,
        /// The new value, rendered.
        new: String,
    },
    /// The part exists only in the new key.
    Added {
        /// The part's category.
        category: Category,
        /// The part's name.
        name: String,
        /// Its value, rendered.
        value: String,
    },
    /// The part exists only in the old key.
    Removed {
        /// The part's category.
        category: Category,
        /// The part's name.
        name: String,
        /// Its value, rendered.
        value: String,
    },
    /// Same parts, same values, different order (order is part of the key).
    Reordered,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Changed {
                category: Category::Graph,
                ..
            } => f.write_str("the traced graph differs (model structure or a captured value)"),
            Change::Changed {
                category,
                name,
                old,
                new,
            } => write!(f, "{category} `{name}` {old} -> {new}"),
            Change::Added {
                category,
                name,
                value,
            } => write!(f, "added {category} `{name}` {value}"),
            Change::Removed {
                category,
                name,
                value,
            } => write!(f, "removed {category} `{name}` {value}"),
            Change::Reordered => f.write_str("parts reordered"),
        }
    }
}

fn same_slot(a: &PartRef<'_>, b: &PartRef<'_>) -> bool {
    a.category() == b.category() && a.name() == b.name()
}

/// The differences from `old` to `new`: changed and added parts in the new
/// key's order, then removed parts in the old key's order. Empty when the
/// keys are equal.
pub fn diff_keys(old: &Key, new: &Key) -> Vec<Change> {
    if old == new {
        return Vec::new();
    }
    let olds: Vec<PartRef<'_>> = old.parts().collect();
    let news: Vec<PartRef<'_>> = new.parts().collect();
    let mut changes = Vec::new();
    for n in &news {
        match olds.iter().find(|o| same_slot(o, n)) {
            Some(o) if o.value_bytes() == n.value_bytes() => {}
            Some(o) => changes.push(Change::Changed {
                category: n.category(),
                name: n.name().to_owned(),
                old: o.render(),
                new: n.render(),
            }),
            None => changes.push(Change::Added {
                category: n.category(),
                name: n.name().to_owned(),
                value: n.render(),
            }),
        }
    }
    for o in &olds {
        if !news.iter().any(|n| same_slot(o, n)) {
            changes.push(Change::Removed {
                category: o.category(),
                name: o.name().to_owned(),
                value: o.render(),
            });
        }
    }
    if changes.is_empty() {
        changes.push(Change::Reordered);
    }
    changes
}

/// How many parts differ, without rendering anything (for picking the
/// nearest key cheaply).
pub(crate) fn distance(old: &Key, new: &Key) -> usize {
    let mut d = 0;
    for n in new.parts() {
        match old.parts().find(|o| same_slot(o, &n)) {
            Some(o) if o.value_bytes() == n.value_bytes() => {}
            _ => d += 1,
        }
    }
    d + old
        .parts()
        .filter(|o| !new.parts().any(|n| same_slot(o, &n)))
        .count()
}

/// Why a lookup of a key compiled (or would compile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The key is live: the lookup hits.
    Live,
    /// No live entry of this program kind to compare with.
    FirstOfKind,
    /// This exact key was compiled before and has since gone.
    Gone(GoneCause),
    /// The differences from the nearest live key of the same kind.
    Differs {
        /// The nearest key, short hex.
        nearest: String,
        /// What changed from it.
        changes: Vec<Change>,
    },
}

/// Why an entry left the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoneCause {
    /// Least recently used when the cache was full.
    Evicted,
    /// Every owner it was tied to was dropped.
    OwnerDropped,
}

/// The explanation of a miss, for one program kind and key. `Display` gives
/// the one-line form that is logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The program kind (`train_step`, ...).
    pub kind: String,
    /// The key looked up, short hex.
    pub key: String,
    /// Why it missed.
    pub reason: Reason,
    /// The pile-up warning, on the one miss that pushed this kind past its
    /// threshold (see [`crate::CacheConfig`]): callers show it to the user
    /// as they show compile lines, with or without a tracing subscriber.
    pub warning: Option<String>,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = &self.kind;
        match &self.reason {
            Reason::Live => write!(f, "{kind}: key {} is live (a lookup hits)", self.key),
            Reason::FirstOfKind => write!(f, "{kind}: first compile (no live entry of this kind)"),
            Reason::Gone(GoneCause::Evicted) => write!(
                f,
                "{kind}: key {} was compiled before and evicted (least recently used); \
                 raise the cache capacity if this repeats",
                self.key
            ),
            Reason::Gone(GoneCause::OwnerDropped) => write!(
                f,
                "{kind}: key {} was compiled before and freed when its owner was dropped",
                self.key
            ),
            Reason::Differs { changes, .. } => {
                write!(f, "{kind}: ")?;
                for (i, change) in changes.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{change}")?;
                }
                Ok(())
            }
        }
    }
}
