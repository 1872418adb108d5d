//! `Fields`: an ordered map from field name to [`HostArray`], every field
//! with the same number of rows. A batch is a `Fields` value.

use crate::error::DataError;
use nitro_device::HostArray;

/// Named host arrays in insertion order, batch on axis 0 of each.
///
/// The order is the order fields were inserted; lookups are by name. Field
/// counts are small (a handful), so a vector beats a hash map here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields {
    entries: Vec<(String, HostArray)>,
}

/// A batch: the fields of `width` samples (see [`Fields`]).
pub type Batch = Fields;

impl Fields {
    /// No fields.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a field; errors on a duplicate name, a rank-0 array, or a row
    /// count that differs from the fields already present.
    pub fn insert(&mut self, name: impl Into<String>, array: HostArray) -> Result<(), DataError> {
        let name = name.into();
        if self.get(&name).is_some() {
            return Err(DataError::DuplicateField(name));
        }
        if array.shape().is_empty() {
            return Err(DataError::NoBatchAxis);
        }
        if let Some((first, a)) = self.entries.first() {
            if a.rows() != array.rows() {
                return Err(DataError::RowCountMismatch {
                    field: name,
                    rows: array.rows(),
                    first: first.clone(),
                    expected: a.rows(),
                });
            }
        }
        self.entries.push((name, array));
        Ok(())
    }

    /// Builder form of [`Fields::insert`].
    pub fn with(mut self, name: impl Into<String>, array: HostArray) -> Result<Self, DataError> {
        self.insert(name, array)?;
        Ok(self)
    }

    /// The field called `name`.
    pub fn get(&self, name: &str) -> Option<&HostArray> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// The field called `name`, or an error listing the fields present.
    pub fn require(&self, name: &str) -> Result<&HostArray, DataError> {
        self.get(name).ok_or_else(|| DataError::UnknownField {
            field: name.to_string(),
            available: self.names().join(", "),
        })
    }

    /// Remove and return the field called `name`.
    pub fn remove(&mut self, name: &str) -> Option<HostArray> {
        let i = self.entries.iter().position(|(n, _)| n == name)?;
        Some(self.entries.remove(i).1)
    }

    /// Field names in order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// `(name, array)` pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &HostArray)> {
        self.entries.iter().map(|(n, a)| (n.as_str(), a))
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No fields at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Rows (samples) shared by every field; 0 when there are no fields.
    pub fn rows(&self) -> usize {
        self.entries.first().map_or(0, |(_, a)| a.rows())
    }

    /// Total element bytes over all fields.
    pub fn byte_len(&self) -> usize {
        self.entries.iter().map(|(_, a)| a.byte_len()).sum()
    }

    /// Apply a row operation to every field, keeping names and order.
    pub(crate) fn map_rows(
        &self,
        mut f: impl FnMut(&HostArray) -> Result<HostArray, DataError>,
    ) -> Result<Fields, DataError> {
        let entries = self
            .entries
            .iter()
            .map(|(n, a)| Ok((n.clone(), f(a)?)))
            .collect::<Result<Vec<_>, DataError>>()?;
        Ok(Fields { entries })
    }

    /// Rows at `indices` of every field.
    pub fn gather_rows(&self, indices: &[usize]) -> Result<Fields, DataError> {
        self.map_rows(|a| Ok(a.gather_rows(indices)?))
    }

    /// Rows `start..end` of every field.
    pub fn slice_rows(&self, start: usize, end: usize) -> Result<Fields, DataError> {
        self.map_rows(|a| Ok(a.slice_rows(start, end)?))
    }
}

impl IntoIterator for Fields {
    type Item = (String, HostArray);
    type IntoIter = std::vec::IntoIter<(String, HostArray)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}
