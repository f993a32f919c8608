//! Matrices of numbers sent as JSON arrays of rows.

use super::Details;
use super::body::RowArray;
use faer::MatRef;

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

    /// Little-endian bytes of the row-major values, for storage, with `-0` written as `0`:
    /// the two are one value to every later step, and a client that prints one where its
    /// first attempt printed the other is retrying the same batch.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.values.len() * 8);
        for v in &self.values {
            // Under round-to-nearest `-0 + 0 = +0`, and every other value is unchanged.
            bytes.extend_from_slice(&(v + 0.0).to_le_bytes());
        }
        bytes
    }

    /// The values [`Self::to_le_bytes`] stored, row-major; `None` unless `bytes` hold a whole
    /// number of them.
    pub fn values_from_le_bytes(bytes: &[u8]) -> Option<Vec<f64>> {
        if !bytes.len().is_multiple_of(8) {
            return None;
        }
        Some(
            bytes
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect(),
        )
    }

    /// Whether any value is `-0`.
    pub fn holds_minus_zero(&self) -> bool {
        self.values
            .iter()
            .any(|v| v.to_bits() == (-0.0f64).to_bits())
    }

    /// Little-endian bytes of the row-major values, `-0` kept: what releases that kept the sign
    /// of zero stored.
    pub fn to_signed_le_bytes(&self) -> Vec<u8> {
        self.values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}

#[cfg(test)]
impl Rows {
    /// Shape and the bits of every value: what two readings of one body must agree on.
    pub(crate) fn bits(&self) -> (usize, usize, Vec<u64>) {
        let values = self.values.iter().map(|v| v.to_bits()).collect();
        (self.rows, self.width, values)
    }
}

/// The rows read at JSON pointer `path` of a body ([`super::Body::take_rows`]), each of the width
/// its [`super::RowField`] asked for. Every problem is added to `details`; `None` when there
/// was any.
///
/// Numbers written as strings (`"NaN"`, `"1.5"`) are refused: JSON has no NaN or infinity, and
/// a client that sends strings has a bug worth hearing about.
pub fn parse_rows(field: Option<RowArray>, path: &str, details: &mut Details) -> Option<Rows> {
    match field {
        None => {
            details.push(path, "is required");
            None
        }
        Some(RowArray::NotArray(found)) => {
            details.push(path, format!("must be an array of rows, found {found}"));
            None
        }
        Some(RowArray::Rows(rows)) => rows.take(details),
    }
}
