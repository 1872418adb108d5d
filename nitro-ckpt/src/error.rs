//! Typed errors. Every error that concerns a file names it, and every error
//! that concerns one tensor or field names that entry, so a message read in a
//! log is enough to find the culprit.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while saving, loading or rotating checkpoints.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed (open, write, fsync, rename, ...).
    #[error("{op} `{}`: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// What was being done, e.g. "write" or "rename".
        op: &'static str,
        /// The underlying error (a full disk shows up here).
        source: std::io::Error,
    },
    /// The file is not a nitro checkpoint, or its structure is damaged.
    #[error("`{}` is not a valid checkpoint: {what}", path.display())]
    Format {
        /// The file involved (`<memory>` for in-memory decoding).
        path: PathBuf,
        /// What is wrong, e.g. "bad magic" or "tensor `params/w` extends past the index".
        what: String,
    },
    /// The file was written by a format version this reader cannot read.
    #[error(
        "`{}` has format version {found}; this reader reads versions {oldest}..={newest}: \
         upgrade nitro-ckpt to read it",
        path.display()
    )]
    UnsupportedVersion {
        /// The file involved.
        path: PathBuf,
        /// The version found in the header.
        found: u32,
        /// The oldest version this reader reads.
        oldest: u32,
        /// The newest version this reader reads.
        newest: u32,
    },
    /// A blake3 checksum did not match: the file was damaged after it was written.
    #[error("checksum mismatch in `{}`, entry `{entry}`: the file is damaged", path.display())]
    Checksum {
        /// The file involved.
        path: PathBuf,
        /// The entry whose bytes do not match (`index` for the metadata and index).
        entry: String,
    },
    /// A tensor name was asked for that the checkpoint does not hold.
    #[error("`{}` holds no tensor `{entry}`", path.display())]
    MissingTensor {
        /// The file involved.
        path: PathBuf,
        /// The name asked for, `tree/path`.
        entry: String,
    },
    /// A tensor or name given to `save` is inconsistent.
    #[error("invalid tensor `{entry}`: {reason}")]
    InvalidTensor {
        /// The tensor, `tree/path`.
        entry: String,
        /// Why it was refused.
        reason: String,
    },
    /// A valid checkpoint file that is not an export container of this
    /// version (see [`crate::export`]).
    #[error("`{}` is not a nitro export (a `{}` file of version {}): {reason}", path.display(), crate::export::FORMAT, crate::export::VERSION)]
    NotExport {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor was read as a type that is not its dtype.
    #[error("tensor `{entry}` has dtype {actual}, not {asked}")]
    DTypeMismatch {
        /// The tensor path.
        entry: String,
        /// Its dtype.
        actual: crate::DType,
        /// The dtype that was asked for.
        asked: crate::DType,
    },
    /// A store was configured to rank checkpoints by a metric nobody reports.
    #[error("unknown metric `{metric}` for best-checkpoint ranking; known metrics: {known:?}")]
    UnknownMetric {
        /// The metric that was asked for.
        metric: String,
        /// The metrics the store was told about.
        known: Vec<String>,
    },
    /// A save to a store that ranks by a metric did not include that metric.
    #[error("save of step {step} lacks metric `{metric}`, which ranks the best checkpoints: pass it in the metrics")]
    MissingMetric {
        /// The ranking metric.
        metric: String,
        /// The step being saved.
        step: u64,
    },
    /// A store directory that names a file.
    #[error("`{}` is a file, not a run directory: name a directory (it is created when missing)", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The store configuration is inconsistent.
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// The background saver stopped (a previous save failed or it was shut down).
    #[error("the background checkpoint saver has stopped: {0}")]
    SaverStopped(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn format(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            what: what.into(),
        }
    }
}
