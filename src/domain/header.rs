//! A CSV header mapped onto a model: which feature or output each column is (shared by the
//! full CSV reader and its fast path), and why a CSV batch is refused.

use super::spectrum::{band_wavelength, nm_name};
use super::{Details, Invalid, ModelSpec, quote_cell};

/// Why a CSV batch was refused.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// Not readable as CSV (bad UTF-8, broken quoting).
    #[error("{0}")]
    Malformed(String),
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("too many rows: the limit is {0} per request")]
    TooManyRows(usize),
}

/// Where a CSV column goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Column {
    Feature(usize),
    Output(usize),
}

/// Maps a CSV header (its cells trimmed) onto `spec`: every column names a feature or an
/// output, each once, and none is missing.
pub(super) fn csv_columns(header: &[&str], spec: &ModelSpec) -> Result<Vec<Column>, Invalid> {
    let mut details = Details::default();
    let mut columns = Vec::with_capacity(header.len());
    let mut seen = std::collections::HashSet::new();
    let inputs = spec.input_names();
    for (c, &name) in header.iter().enumerate() {
        // A band may be written `400nm`, `400.0nm` or `400 nm`.
        let band = spec
            .spectrum
            .and_then(|_| band_wavelength(name))
            .map(nm_name);
        let column = inputs
            .iter()
            .position(|f| f == name || band.as_deref() == Some(f.as_str()))
            .map(Column::Feature)
            .or_else(|| {
                spec.outputs
                    .iter()
                    .position(|o| o == name)
                    .map(Column::Output)
            });
        // What the column names, so `400nm` and `400.0nm` are the same column.
        let target = match column {
            Some(Column::Feature(j)) => inputs[j].as_str(),
            Some(Column::Output(k)) => spec.outputs[k].as_str(),
            None => name,
        };
        match column {
            None => details.push_with(|| {
                (
                    format!("/header/{c}"),
                    format!(
                        "column {} is neither a feature nor an output of the model",
                        quote_cell(name)
                    ),
                )
            }),
            Some(_) if !seen.insert(target) => details.push_with(|| {
                (
                    format!("/header/{c}"),
                    format!("column {} appears twice", quote_cell(name)),
                )
            }),
            Some(column) => columns.push(column),
        }
    }
    for name in inputs.iter().chain(&spec.outputs) {
        if !seen.contains(name.as_str()) {
            details.push("/header", format!("column {name:?} is missing"));
        }
    }
    details.finish("invalid CSV header")?;
    Ok(columns)
}
