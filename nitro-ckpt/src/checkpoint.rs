//! The in-memory checkpoint: metadata plus named trees of tensors.

use std::collections::BTreeMap;

use crate::{Error, Metadata, Result, TensorEntry};

/// A run state: metadata plus named trees of tensors (e.g. `params`,
/// `opt_state`, `model_state`). A tensor is addressed as `tree/path`, so a
/// tree name must not contain `/`; a path may.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checkpoint {
    /// Run metadata.
    pub meta: Metadata,
    /// Tree name to its tensors, in the order they were added.
    pub trees: BTreeMap<String, Vec<TensorEntry>>,
}

impl Checkpoint {
    /// An empty checkpoint with this metadata.
    pub fn new(meta: Metadata) -> Self {
        Checkpoint {
            meta,
            trees: BTreeMap::new(),
        }
    }

    /// Appends a tensor to a tree (created on first use).
    pub fn push(&mut self, tree: &str, tensor: TensorEntry) -> &mut Self {
        self.trees.entry(tree.to_owned()).or_default().push(tensor);
        self
    }

    /// The tensor named `tree/path`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorEntry> {
        let (tree, path) = name.split_once('/')?;
        self.trees.get(tree)?.iter().find(|t| t.path == path)
    }

    /// Total tensor bytes.
    pub fn tensor_bytes(&self) -> u64 {
        self.trees
            .values()
            .flatten()
            .map(|t| t.bytes.len() as u64)
            .sum()
    }

    /// Checks every tensor, that tree names are non-empty without `/`, and
    /// that no `tree/path` appears twice. `save` calls this before writing.
    pub fn validate(&self) -> Result<()> {
        for (tree, tensors) in &self.trees {
            if tree.is_empty() || tree.contains('/') {
                return Err(Error::InvalidTensor {
                    entry: format!("{tree}/"),
                    reason: "a tree name must be non-empty and contain no `/`".into(),
                });
            }
            let mut seen = std::collections::BTreeSet::new();
            for t in tensors {
                t.validate().map_err(|e| match e {
                    Error::InvalidTensor { entry, reason } => Error::InvalidTensor {
                        entry: format!("{tree}/{entry}"),
                        reason,
                    },
                    other => other,
                })?;
                if !seen.insert(t.path.as_str()) {
                    return Err(Error::InvalidTensor {
                        entry: format!("{tree}/{}", t.path),
                        reason: "appears twice in its tree".into(),
                    });
                }
            }
        }
        Ok(())
    }
}
