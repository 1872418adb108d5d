//! The `Dataset` trait (length, field specs, gather rows of chosen fields)
//! and `InMemory`, its implementation over [`Fields`].

use crate::error::DataError;
use crate::fields::{Batch, Fields};
use nitro_device::{DType, HostArray};

/// Name, dtype and per-sample shape of one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSpec {
    /// Field name (the batch key a hook declares).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape of one sample (without the batch axis).
    pub sample_shape: Vec<usize>,
}

/// A collection of samples with named fields.
///
/// `gather` receives only the fields the routing plan asks for, so a dataset
/// that reads lazily never touches an undeclared field.
pub trait Dataset {
    /// Number of samples.
    fn len(&self) -> usize;

    /// True when there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fields every sample has, in a stable order.
    fn fields(&self) -> Vec<FieldSpec>;

    /// Field names, in the order of [`Dataset::fields`].
    fn field_names(&self) -> Vec<String> {
        self.fields().into_iter().map(|f| f.name).collect()
    }

    /// The samples at `indices` (in that order), with only `fields`, in the
    /// order given. Errors name an unknown field or an out-of-range index.
    fn gather(&self, indices: &[usize], fields: &[&str]) -> Result<Batch, DataError>;
}

impl<D: Dataset + ?Sized> Dataset for std::sync::Arc<D> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn fields(&self) -> Vec<FieldSpec> {
        (**self).fields()
    }
    fn gather(&self, indices: &[usize], fields: &[&str]) -> Result<Batch, DataError> {
        (**self).gather(indices, fields)
    }
}

/// A dataset held entirely in host memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InMemory {
    fields: Fields,
}

impl InMemory {
    /// Wrap fields (every field already has one row per sample).
    pub fn new(fields: Fields) -> Self {
        Self { fields }
    }

    /// Build from `(name, array)` pairs, checking names and row counts.
    pub fn from_pairs(
        pairs: impl IntoIterator<Item = (impl Into<String>, HostArray)>,
    ) -> Result<Self, DataError> {
        let mut fields = Fields::new();
        for (n, a) in pairs {
            fields.insert(n, a)?;
        }
        Ok(Self { fields })
    }

    /// The underlying fields.
    pub fn as_fields(&self) -> &Fields {
        &self.fields
    }

    /// Give back the fields.
    pub fn into_fields(self) -> Fields {
        self.fields
    }

    /// The samples at `indices`, every field, as a new dataset.
    pub fn subset(&self, indices: &[usize]) -> Result<InMemory, DataError> {
        Ok(Self {
            fields: self.fields.gather_rows(indices)?,
        })
    }
}

impl Dataset for InMemory {
    fn len(&self) -> usize {
        self.fields.rows()
    }

    fn fields(&self) -> Vec<FieldSpec> {
        self.fields
            .iter()
            .map(|(n, a)| FieldSpec {
                name: n.to_string(),
                dtype: a.dtype(),
                sample_shape: a.sample_shape().to_vec(),
            })
            .collect()
    }

    fn gather(&self, indices: &[usize], fields: &[&str]) -> Result<Batch, DataError> {
        let mut out = Fields::new();
        for &name in fields {
            out.insert(name, self.fields.require(name)?.gather_rows(indices)?)?;
        }
        Ok(out)
    }
}
