//! Errors of arrays, fields, datasets and batching.

use thiserror::Error;

/// An error from building or batching host data.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum DataError {
    /// Values or arrays disagree on a shape.
    #[error("shape mismatch: got {what}, expected {expected}")]
    ShapeMismatch {
        /// What was found.
        what: String,
        /// What was expected.
        expected: String,
    },
    /// A rank-0 array has no batch axis to index.
    #[error("array has rank 0: no batch axis (axis 0) to index; give each sample a row")]
    NoBatchAxis,
    /// A sample index beyond the data.
    #[error("sample index {index} out of range for {len} samples")]
    IndexOutOfRange {
        /// The index asked for.
        index: usize,
        /// Number of samples.
        len: usize,
    },
    /// A row range beyond the data.
    #[error("row range {start}..{end} out of bounds for {len} rows")]
    RangeOutOfBounds {
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// Number of rows.
        len: usize,
    },
    /// Padding asked to shrink.
    #[error("cannot pad {rows} rows to width {width}: already wider")]
    TooManyRows {
        /// Rows present.
        rows: usize,
        /// Target width.
        width: usize,
    },
    /// Nothing to pad from or concatenate.
    #[error("empty batch: no sample to repeat or concatenate")]
    EmptyBatch,
    /// Fields of one dataset with different sample counts.
    #[error("field `{field}` has {rows} rows but field `{first}` has {expected}; every field needs one row per sample")]
    RowCountMismatch {
        /// The disagreeing field.
        field: String,
        /// Its rows.
        rows: usize,
        /// The first field.
        first: String,
        /// The first field's rows.
        expected: usize,
    },
    /// A field name that is not present.
    #[error("no field `{field}`; the data has: {available}")]
    UnknownField {
        /// The missing name.
        field: String,
        /// Comma-separated names present.
        available: String,
    },
    /// The same field name twice.
    #[error("field `{0}` given twice")]
    DuplicateField(String),
    /// Batch width zero.
    #[error("batch width must be at least 1")]
    ZeroWidth,
    /// A split fraction outside [0, 1].
    #[error("split fraction {0} is not within [0, 1]")]
    BadFraction(f64),
}

impl From<nitro_device::DeviceError> for DataError {
    /// The row and shape errors of [`crate::HostArray`], as the data errors
    /// nitro-data has always reported.
    fn from(e: nitro_device::DeviceError) -> Self {
        use nitro_device::DeviceError as D;
        match e {
            D::NoBatchAxis { .. } => DataError::NoBatchAxis,
            D::RowIndex { index, rows } => DataError::IndexOutOfRange { index, len: rows },
            D::RowRange { start, end, rows } => DataError::RangeOutOfBounds {
                start,
                end,
                len: rows,
            },
            D::TooManyRows { rows, width } => DataError::TooManyRows { rows, width },
            D::NoRows { .. } => DataError::EmptyBatch,
            D::Length {
                shape,
                expected,
                got,
            } => DataError::ShapeMismatch {
                what: format!("{got} values for shape {shape:?}"),
                expected: format!("{expected} values"),
            },
            other => DataError::ShapeMismatch {
                what: other.to_string(),
                expected: "arrays of one dtype and sample shape".into(),
            },
        }
    }
}
