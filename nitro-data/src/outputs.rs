//! Output trees and `slice_outputs`: cut every leaf of a padded run back to
//! the real samples, after checking that its batch axis is the compiled
//! width.

use thiserror::Error;

use nitro_device::HostArray;

/// A host-side tree of outputs, as a forward pass returns them: arrays at
/// the leaves, tuples and named records inside. `Scalar` stands for a
/// non-array leaf (a value already reduced over the batch), which cannot be
/// sliced and is reported as an error.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputTree {
    /// An array leaf with the batch on axis 0.
    Leaf(HostArray),
    /// A non-array leaf.
    Scalar(f64),
    /// Positional children (paths `outputs.0`, `outputs.1`, ...).
    Tuple(Vec<OutputTree>),
    /// Named children (paths `outputs.logits`, ...).
    Named(Vec<(String, OutputTree)>),
}

/// An output leaf that cannot be sliced back to the real samples.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum OutputError {
    /// The leaf is not an array.
    #[error(
        "output leaf `{path}` is not an array: a value reduced over the batch has no batch \
         axis to slice; return the per-sample array from forward and reduce it in loss or metrics"
    )]
    NotAnArray {
        /// Leaf path.
        path: String,
    },
    /// Axis 0 of the leaf is not the compiled width.
    #[error(
        "output leaf `{path}` has shape {shape:?}, but axis 0 must be the batch axis of the \
         compiled width {width}; put the batch first (axis 0) in every output"
    )]
    BatchNotAxis0 {
        /// Leaf path.
        path: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The compiled width.
        width: usize,
    },
    /// More real samples than the width.
    #[error("{real} real samples cannot exceed the compiled width {width}")]
    RealExceedsWidth {
        /// Real count.
        real: usize,
        /// Width.
        width: usize,
    },
}

/// Check that `leaf`'s axis 0 is `width` and return its first `real` rows.
pub fn slice_leaf(
    path: &str,
    leaf: &HostArray,
    width: usize,
    real: usize,
) -> Result<HostArray, OutputError> {
    if real > width {
        return Err(OutputError::RealExceedsWidth { real, width });
    }
    if leaf.shape().first() != Some(&width) {
        return Err(OutputError::BatchNotAxis0 {
            path: path.to_string(),
            shape: leaf.shape().to_vec(),
            width,
        });
    }
    // real <= width = rows, so the range is in bounds; a rank-0 leaf was
    // refused above (its shape has no first axis).
    leaf.slice_rows(0, real)
        .map_err(|_| OutputError::BatchNotAxis0 {
            path: path.to_string(),
            shape: leaf.shape().to_vec(),
            width,
        })
}

/// Slice every leaf of `tree` (computed at `width`) back to its first
/// `real` rows. Every leaf is checked before anything is returned; errors
/// name the leaf path (`outputs`, `outputs.logits`, `outputs.1.energy`).
pub fn slice_outputs(
    tree: &OutputTree,
    width: usize,
    real: usize,
) -> Result<OutputTree, OutputError> {
    fn walk(
        t: &OutputTree,
        path: &str,
        width: usize,
        real: usize,
    ) -> Result<OutputTree, OutputError> {
        Ok(match t {
            OutputTree::Leaf(a) => OutputTree::Leaf(slice_leaf(path, a, width, real)?),
            OutputTree::Scalar(_) => {
                return Err(OutputError::NotAnArray {
                    path: path.to_string(),
                })
            }
            OutputTree::Tuple(v) => OutputTree::Tuple(
                v.iter()
                    .enumerate()
                    .map(|(i, c)| walk(c, &format!("{path}.{i}"), width, real))
                    .collect::<Result<_, _>>()?,
            ),
            OutputTree::Named(v) => OutputTree::Named(
                v.iter()
                    .map(|(n, c)| Ok((n.clone(), walk(c, &format!("{path}.{n}"), width, real)?)))
                    .collect::<Result<_, OutputError>>()?,
            ),
        })
    }
    walk(tree, "outputs", width, real)
}

impl OutputTree {
    /// Leaves with their paths, depth first.
    pub fn leaves(&self) -> Vec<(String, &HostArray)> {
        fn walk<'a>(t: &'a OutputTree, path: String, out: &mut Vec<(String, &'a HostArray)>) {
            match t {
                OutputTree::Leaf(a) => out.push((path, a)),
                OutputTree::Scalar(_) => {}
                OutputTree::Tuple(v) => v
                    .iter()
                    .enumerate()
                    .for_each(|(i, c)| walk(c, format!("{path}.{i}"), out)),
                OutputTree::Named(v) => v
                    .iter()
                    .for_each(|(n, c)| walk(c, format!("{path}.{n}"), out)),
            }
        }
        let mut out = Vec::new();
        walk(self, "outputs".to_string(), &mut out);
        out
    }
}
