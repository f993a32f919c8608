//! Matrices of numbers sent as JSON arrays of rows.

use faer::MatRef;
use serde_json::Value;

use super::{Details, describe};

/// A rectangular matrix parsed from JSON rows, every entry finite.
#[derive(Clone, Debug, PartialEq)]
pub struct Rows {
    rows: usize,
    width: usize,
    /// Row-major values.
    values: Vec<f64>,
}

impl Rows {
    /// Rows from row-major values (`values.len()` must be `rows · width`).
    pub(crate) fn from_row_major(rows: usize, width: usize, values: Vec<f64>) -> Self {
        debug_assert_eq!(values.len(), rows * width);
        Self {
            rows,
            width,
            values,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// Row-major values.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The rows as a matrix, without a copy.
    pub fn as_mat(&self) -> MatRef<'_, f64> {
        MatRef::from_row_major_slice(&self.values, self.rows, self.width)
    }

    /// Little-endian bytes of the row-major values, for storage.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.values.len() * 8);
        for v in &self.values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes
    }
}

/// Parses `value` (found at JSON pointer `path`) as an array of rows of exactly `width` finite
/// numbers each. Every problem is added to `details`; `None` when there was any.
///
/// Numbers written as strings (`"NaN"`, `"1.5"`) are refused: JSON has no NaN or infinity, and
/// a client that sends strings has a bug worth hearing about.
pub fn parse_rows(
    value: Option<&Value>,
    path: &str,
    width: usize,
    details: &mut Details,
) -> Option<Rows> {
    let Some(value) = value else {
        details.push(path, "is required");
        return None;
    };
    let Value::Array(rows) = value else {
        details.push(
            path,
            format!("must be an array of rows, found {}", describe(value)),
        );
        return None;
    };
    let errors_before = details.total;
    let mut values = Vec::with_capacity(rows.len() * width);
    for (i, row) in rows.iter().enumerate() {
        let Value::Array(row) = row else {
            details.push(
                format!("{path}/{i}"),
                format!(
                    "must be an array of {width} numbers, found {}",
                    describe(row)
                ),
            );
            continue;
        };
        if row.len() != width {
            details.push(
                format!("{path}/{i}"),
                format!("must have {width} values, found {}", row.len()),
            );
            continue;
        }
        for (j, entry) in row.iter().enumerate() {
            match entry.as_f64() {
                Some(v) if entry.is_number() && v.is_finite() => values.push(v),
                _ => details.push(
                    format!("{path}/{i}/{j}"),
                    format!("must be a finite number, found {}", describe(entry)),
                ),
            }
        }
    }
    (details.total == errors_before).then_some(Rows {
        rows: rows.len(),
        width,
        values,
    })
}
