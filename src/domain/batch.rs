//! Observation batches as clients send them.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::fast::{fast_csv, fast_rows_object};
use super::{Details, Invalid, ModelSpec, Rows, describe, parse_rows, pointer_token};

/// Longest batch id.
const MAX_BATCH_ID_LEN: usize = 128;

/// A client's name for a batch (or its `Idempotency-Key`): 1 to 128 characters from
/// `A-Z a-z 0-9 . _ : -`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BatchId(String);

impl BatchId {
    pub fn parse(id: &str) -> Result<Self, String> {
        let ok = !id.is_empty()
            && id.len() <= MAX_BATCH_ID_LEN
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
        if ok {
            Ok(Self(id.to_owned()))
        } else {
            Err(format!(
                "must be 1 to {MAX_BATCH_ID_LEN} characters from A-Z, a-z, 0-9, '.', '_', ':' \
                 and '-', found {id:?}"
            ))
        }
    }

    /// A fresh random id for a batch posted without one.
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

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

/// What [`NewBatch::encode`] makes of a batch for storage.
pub struct EncodedBatch {
    pub x: Vec<u8>,
    pub y: Vec<u8>,
    pub content_hash: [u8; 32],
}

/// A validated batch: rows of the model's width, all finite, at least one row.
#[derive(Clone, Debug)]
pub struct NewBatch {
    pub batch_id: BatchId,
    pub x: Rows,
    pub y: Rows,
}

impl NewBatch {
    /// Parses `{"batch_id"?, "x": [[p]], "y": [[m]]}` for `spec`. `idempotency_key` is the
    /// request's `Idempotency-Key` header; it must agree with `batch_id` when both are given.
    pub fn parse(
        body: &Value,
        spec: &ModelSpec,
        idempotency_key: Option<&str>,
    ) -> Result<Self, Invalid> {
        let Value::Object(fields) = body else {
            return Err(Invalid::one(
                "",
                format!("the body must be a JSON object, found {}", describe(body)),
            ));
        };
        let mut details = Details::default();
        for key in fields.keys() {
            if !matches!(key.as_str(), "batch_id" | "x" | "y") {
                details.push(format!("/{}", pointer_token(key)), "unknown field");
            }
        }
        let body_id = match fields.get("batch_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => BatchId::parse(s)
                .map_err(|e| details.push("/batch_id", e))
                .ok(),
            Some(other) => {
                details.push(
                    "/batch_id",
                    format!("must be a string, found {}", describe(other)),
                );
                None
            }
        };
        let header_id = match idempotency_key {
            None => None,
            Some(key) => match BatchId::parse(key) {
                Ok(id) => Some(id),
                Err(e) => return Err(Invalid::one("", format!("Idempotency-Key header {e}"))),
            },
        };
        if let (Some(a), Some(b)) = (&body_id, &header_id)
            && a != b
        {
            details.push(
                "/batch_id",
                format!("differs from the Idempotency-Key header {:?}", b.as_str()),
            );
        }
        for key in ["x", "y"] {
            if matches!(fields.get(key), Some(Value::Array(rows)) if rows.is_empty()) {
                details.push(format!("/{key}"), "a batch needs at least one row");
            }
        }
        let x = parse_rows(fields.get("x"), "/x", spec.features.len(), &mut details);
        let y = parse_rows(fields.get("y"), "/y", spec.outputs.len(), &mut details);
        if let (Some(x), Some(y)) = (&x, &y)
            && x.rows() != y.rows()
        {
            details.push(
                "/y",
                format!("has {} rows but x has {}", y.rows(), x.rows()),
            );
        }
        details.finish("invalid batch")?;
        match (x, y) {
            (Some(x), Some(y)) => Ok(Self {
                batch_id: body_id.or(header_id).unwrap_or_else(BatchId::generate),
                x,
                y,
            }),
            _ => Err(Invalid::one("", "invalid batch")),
        }
    }

    /// [`Self::parse`] straight from the bytes of a well-formed JSON body, without building a
    /// `serde_json::Value` first. `None` when the body is anything but a valid batch for `spec`
    /// (or its id disagrees with `idempotency_key`): [`Self::parse`] then says what is wrong.
    pub fn parse_fast(
        body: &[u8],
        spec: &ModelSpec,
        idempotency_key: Option<&str>,
    ) -> Option<Self> {
        let object = fast_rows_object(
            body,
            &[("x", spec.features.len()), ("y", spec.outputs.len())],
            true,
        )?;
        let body_id = match object.batch_id {
            None => None,
            Some(id) => Some(BatchId::parse(&id).ok()?),
        };
        let header_id = match idempotency_key {
            None => None,
            Some(key) => Some(BatchId::parse(key).ok()?),
        };
        if matches!((&body_id, &header_id), (Some(a), Some(b)) if a != b) {
            return None;
        }
        let [x, y] = <[Rows; 2]>::try_from(object.rows).ok()?;
        (x.rows() == y.rows()).then(|| Self {
            batch_id: body_id.or(header_id).unwrap_or_else(BatchId::generate),
            x,
            y,
        })
    }

    /// Parses a CSV batch: a header naming every feature and output of `spec` once, in any
    /// order, then one row per observation. The batch id comes from the `Idempotency-Key`
    /// header. Invalid cells are reported as `/rows/{i}/{column}` (i counts data rows from 0).
    pub fn parse_csv(
        body: &[u8],
        spec: &ModelSpec,
        idempotency_key: Option<&str>,
        max_rows: usize,
    ) -> Result<Self, CsvError> {
        let batch_id = match idempotency_key {
            None => BatchId::generate(),
            Some(key) => BatchId::parse(key)
                .map_err(|e| Invalid::one("", format!("Idempotency-Key header {e}")))?,
        };
        let (x, y) = match fast_csv(body, spec, max_rows) {
            Some(rows) => rows,
            // Not a plain, valid batch: the csv crate reads it and says what is wrong.
            None => read_csv(body, spec, max_rows)?,
        };
        Ok(Self { batch_id, x, y })
    }

    pub fn rows(&self) -> usize {
        self.x.rows()
    }

    /// The batch as stored: its raw rows as little-endian bytes, and the SHA-256 of its
    /// content (shape and the bits of every value), which tells a retry of this batch from a
    /// different batch under the same id.
    pub fn encode(&self) -> EncodedBatch {
        let x = self.x.to_le_bytes();
        let y = self.y.to_le_bytes();
        let mut hash = Sha256::new();
        for n in [self.x.rows(), self.x.width(), self.y.width()] {
            hash.update((n as u64).to_le_bytes());
        }
        hash.update(&x);
        hash.update(&y);
        EncodedBatch {
            x,
            y,
            content_hash: hash.finalize().into(),
        }
    }
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
    for (c, &name) in header.iter().enumerate() {
        let column = spec
            .features
            .iter()
            .position(|f| f == name)
            .map(Column::Feature)
            .or_else(|| {
                spec.outputs
                    .iter()
                    .position(|o| o == name)
                    .map(Column::Output)
            });
        match column {
            None => details.push(
                format!("/header/{c}"),
                format!("column {name:?} is neither a feature nor an output of the model"),
            ),
            Some(_) if !seen.insert(name) => details.push(
                format!("/header/{c}"),
                format!("column {name:?} appears twice"),
            ),
            Some(column) => columns.push(column),
        }
    }
    for name in spec.features.iter().chain(&spec.outputs) {
        if !seen.contains(name.as_str()) {
            details.push("/header", format!("column {name:?} is missing"));
        }
    }
    details.finish("invalid CSV header")?;
    Ok(columns)
}

/// Reads a CSV batch with the csv crate (quoted fields, any line ending), reporting every
/// problem: [`NewBatch::parse_csv`] without its fast path.
pub(super) fn read_csv(
    body: &[u8],
    spec: &ModelSpec,
    max_rows: usize,
) -> Result<(Rows, Rows), CsvError> {
    // Flexible: a row of the wrong length is reported with its number, not as a syntax error.
    // Only the header is trimmed by the reader; data cells are trimmed as they are parsed,
    // which spares a copy of every record.
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::Headers)
        .flexible(true)
        .from_reader(body);
    let header = reader
        .headers()
        .map_err(|e| CsvError::Malformed(format!("cannot read the CSV header: {e}")))?
        .clone();
    let columns = csv_columns(&header.iter().collect::<Vec<_>>(), spec)?;
    let mut details = Details::default();
    let (p, m) = (spec.features.len(), spec.outputs.len());
    let (mut x, mut y) = (Vec::new(), Vec::new());
    let mut rows = 0usize;
    let mut record = csv::ByteRecord::new();
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                return Err(CsvError::Malformed(format!(
                    "unreadable CSV row {rows}: {e}"
                )));
            }
        }
        let cells = record
            .iter()
            .map(|cell| std::str::from_utf8(cell).map(str::trim))
            .collect::<Result<Vec<&str>, _>>()
            .map_err(|e| CsvError::Malformed(format!("unreadable CSV row {rows}: {e}")))?;
        // Spreadsheets end tables with lines of empty cells.
        if cells.iter().all(|c| c.is_empty()) {
            continue;
        }
        if rows == max_rows {
            return Err(CsvError::TooManyRows(max_rows));
        }
        if cells.len() != header.len() {
            details.push(
                format!("/rows/{rows}"),
                format!(
                    "has {} values, the header has {}",
                    cells.len(),
                    header.len()
                ),
            );
            rows += 1;
            continue;
        }
        let (xr, yr) = (x.len(), y.len());
        x.resize(xr + p, 0.0);
        y.resize(yr + m, 0.0);
        for (cell, (&column, name)) in cells.iter().zip(columns.iter().zip(header.iter())) {
            match cell.parse::<f64>() {
                Ok(v) if v.is_finite() => match column {
                    Column::Feature(j) => x[xr + j] = v,
                    Column::Output(k) => y[yr + k] = v,
                },
                _ => details.push(
                    format!("/rows/{rows}/{}", pointer_token(name)),
                    format!("must be a finite number, found {cell:?}"),
                ),
            }
        }
        rows += 1;
    }
    if rows == 0 {
        details.push("/rows", "a batch needs at least one row");
    }
    details.finish("invalid CSV batch")?;
    Ok((
        Rows::from_row_major(rows, p, x),
        Rows::from_row_major(rows, m, y),
    ))
}
