//! `LoadError`: what went wrong reading a data file, and where.

use thiserror::Error;

/// A data file that could not be read.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum LoadError {
    /// The file could not be opened, read or written.
    #[error("{file}: {message}")]
    Io {
        /// File path.
        file: String,
        /// The OS error.
        message: String,
    },
    /// A binary file does not match its format.
    #[error("{file}: at byte {offset}: expected {expected}, found {found}")]
    Format {
        /// File path (or `<bytes>` / `archive:member`).
        file: String,
        /// Byte offset where the problem starts.
        offset: u64,
        /// What the format requires there.
        expected: String,
        /// What is there.
        found: String,
    },
    /// A text file with a bad line.
    #[error("{file}: line {line}: expected {expected}, found {found}")]
    Line {
        /// File path.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What was expected.
        expected: String,
        /// What is there.
        found: String,
    },
    /// The content cannot be represented (e.g. an unsupported dtype).
    #[error("{file}: {message}")]
    Unsupported {
        /// File path.
        file: String,
        /// Explanation.
        message: String,
    },
}

/// Builds `LoadError::Format` for one file.
pub(crate) struct At<'a>(pub &'a str);

impl At<'_> {
    pub(crate) fn err(
        &self,
        offset: u64,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> LoadError {
        LoadError::Format {
            file: self.0.to_string(),
            offset,
            expected: expected.into(),
            found: found.into(),
        }
    }
}
