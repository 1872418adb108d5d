//! Numeric CSV with one integer label column: every other column becomes a
//! feature. No quoting (numeric data does not need it); blank lines are
//! skipped.

use std::path::Path;

use super::{read_file, LoadError};
use crate::dataset::InMemory;
use crate::fields::Fields;
use nitro_device::HostArray;

/// Which column holds the label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelColumn {
    /// By 0-based index.
    Index(usize),
    /// By header name (needs `header: true`).
    Name(String),
}

/// How to read a CSV file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvOptions {
    /// The label column (default: the first).
    pub label: LabelColumn,
    /// The first line is a header (default true).
    pub header: bool,
    /// Field separator (default `,`).
    pub delimiter: char,
}

impl Default for CsvOptions {
    fn default() -> Self {
        Self {
            label: LabelColumn::Index(0),
            header: true,
            delimiter: ',',
        }
    }
}

/// Read a CSV file into fields `features` (f32 `[n, columns - 1]`) and
/// `label` (i32 `[n]`). Errors name the file, the line and the column.
pub fn read_csv(path: impl AsRef<Path>, options: &CsvOptions) -> Result<InMemory, LoadError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let bytes = read_file(path)?;
    let text = std::str::from_utf8(&bytes).map_err(|e| LoadError::Format {
        file: file.clone(),
        offset: e.valid_up_to() as u64,
        expected: "UTF-8 text".into(),
        found: "invalid UTF-8".into(),
    })?;
    let line_err = |line: usize, expected: String, found: String| LoadError::Line {
        file: file.clone(),
        line,
        expected,
        found,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty());
    let mut label_col = match &options.label {
        LabelColumn::Index(i) => Some(*i),
        LabelColumn::Name(_) => None,
    };
    let mut columns = None;
    if options.header {
        let (n, head) = lines
            .next()
            .ok_or_else(|| line_err(1, "a header line".into(), "an empty file".into()))?;
        let names: Vec<&str> = head.split(options.delimiter).map(str::trim).collect();
        if let LabelColumn::Name(want) = &options.label {
            label_col = Some(names.iter().position(|c| c == want).ok_or_else(|| {
                line_err(
                    n,
                    format!("a label column `{want}`"),
                    format!("columns {}", names.join(", ")),
                )
            })?);
        }
        columns = Some(names.len());
    }
    let Some(label_col) = label_col else {
        return Err(LoadError::Unsupported {
            file,
            message: "a label column given by name needs `header: true`".into(),
        });
    };
    let (mut features, mut labels) = (Vec::new(), Vec::new());
    for (n, line) in lines {
        let cells: Vec<&str> = line.split(options.delimiter).map(str::trim).collect();
        let width = *columns.get_or_insert(cells.len());
        if cells.len() != width {
            return Err(line_err(
                n,
                format!("{width} columns"),
                format!("{} columns", cells.len()),
            ));
        }
        if label_col >= width {
            return Err(line_err(
                n,
                format!("a label column {label_col}"),
                format!("{width} columns"),
            ));
        }
        for (c, cell) in cells.iter().enumerate() {
            if c == label_col {
                let v = cell.parse::<i32>().map_err(|_| {
                    line_err(
                        n,
                        format!("an integer label in column {c}"),
                        format!("{cell:?}"),
                    )
                })?;
                labels.push(v);
            } else {
                let v = cell.parse::<f32>().map_err(|_| {
                    line_err(n, format!("a number in column {c}"), format!("{cell:?}"))
                })?;
                features.push(v);
            }
        }
    }
    let rows = labels.len();
    let k = columns.unwrap_or(1).saturating_sub(1);
    let to_err = |e: crate::DataError| LoadError::Unsupported {
        file: path.display().to_string(),
        message: e.to_string(),
    };
    let mut f = Fields::new();
    f.insert(
        "features",
        HostArray::new(&[rows, k], features).map_err(|e| to_err(e.into()))?,
    )
    .map_err(to_err)?;
    f.insert(
        "label",
        HostArray::new(&[rows], labels).map_err(|e| to_err(e.into()))?,
    )
    .map_err(to_err)?;
    Ok(InMemory::new(f))
}
