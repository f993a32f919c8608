//! Observation batches as clients send them.

use bytes::Bytes;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::body::{Body, RowField, Width};
use super::fast::{FastSpectra, fast_csv, fast_rows_object, fast_spectra_object};
use super::handover::{self, grid_of};
use super::header::{Column, CsvError, csv_columns};
use super::spectrum::{
    Grid, Instrument, MAX_REQUEST_BANDS, band_wavelength, covering_grid, join_inputs, nm_name,
    onto_spec_grid, parse_spectra,
};
use super::{
    Detail, Details, Invalid, ModelSpec, Rows, TransformName, describe, parse_rows, pointer_token,
    quote, quote_cell,
};

/// Longest batch id.
pub const MAX_BATCH_ID_LEN: usize = 128;

/// What a batch id is, as a regular expression (for the API's document): [`BatchId::parse`]'s
/// characters, other than `.` and `..` (the three alternatives: not starting with a dot; one
/// dot, then not a dot; two dots, then at least one more character).
pub const BATCH_ID_PATTERN: &str =
    "^([A-Za-z0-9_:-][A-Za-z0-9._:-]*|[.][A-Za-z0-9_:-][A-Za-z0-9._:-]*|[.][.][A-Za-z0-9._:-]+)$";

/// A client's name for a batch (or its `Idempotency-Key`): 1 to 128 characters from
/// `A-Z a-z 0-9 . _ : -`, other than `.` and `..`, which a URL's path cannot name (clients
/// resolve them as "this" and "the parent" segment), so such a batch could never be read back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BatchId(String);

impl BatchId {
    pub fn parse(id: &str) -> Result<Self, String> {
        let ok = !id.is_empty()
            && id.len() <= MAX_BATCH_ID_LEN
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
        if !ok {
            return Err(format!("{}, found {id:?}", Self::rule()));
        }
        if id == "." || id == ".." {
            return Err(format!(
                "must not be {id:?}: a URL's path cannot name that segment, so the batch could \
                 not be read back"
            ));
        }
        Ok(Self(id.to_owned()))
    }

    /// What an id must be, as an error message says it (`.` and `..` are refused with their
    /// own reason by [`Self::parse`]).
    pub fn rule() -> String {
        format!(
            "must be 1 to {MAX_BATCH_ID_LEN} characters from A-Z, a-z, 0-9, '.', '_', ':' and \
             '-', other than \".\" and \"..\""
        )
    }

    /// A fresh random id for a batch posted without one.
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What [`NewBatch::encode`] makes of a batch for storage. The raw rows are shared, not
/// copied, when the batch is handed on (to the embedded store's committer).
#[derive(Clone, Debug)]
pub struct EncodedBatch {
    pub x: Bytes,
    pub y: Bytes,
    pub content_hash: ContentHash,
}

/// The SHA-256 of a batch's content, which tells a retry of a stored batch from a different
/// batch under the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentHash {
    /// What is stored: the content with `-0` read as `0`.
    pub stored: [u8; 32],
    /// For a batch that holds a `-0`, the hash of its content with the sign kept, as releases
    /// before `-0` was read as `0` stored it: a retry of a batch they stored is a replay too.
    pub signed_zero: Option<[u8; 32]>,
}

impl ContentHash {
    /// Whether a batch stored with hash `stored` has this content.
    pub fn matches(&self, stored: &[u8]) -> bool {
        stored == self.stored || self.signed_zero.is_some_and(|h| stored == h)
    }
}

/// A validated batch: rows of the model's width, all finite, at least one row. `x` holds the
/// model's inputs (a spectrum already resampled onto the model's grid, then the named
/// features); in a batch of a successor's readings alone, only the named features.
#[derive(Clone, Debug)]
pub struct NewBatch {
    pub batch_id: BatchId,
    pub x: Rows,
    pub y: Rows,
    /// The successor instrument's readings of the same samples, on its grid and the model's
    /// scale; whether the model's own instrument read them too (`x` then opens with its bands).
    pub successor: Option<Successor>,
    /// What was accepted but looks wrong (reflectance above full scale or below 0, a column that
    /// varies too little beside its size: [`NewBatch::flag_narrow_columns`]).
    pub warnings: Vec<Detail>,
}

/// Where the arrays of rows of a request for `spec` are, and how wide their rows are: `x`,
/// `y` (a batch's outputs) and `spectra.values`.
pub fn row_fields(spec: &ModelSpec) -> [RowField; 4] {
    [
        RowField {
            pointer: "/x",
            width: Width::Exact(spec.features.len()),
        },
        RowField {
            pointer: "/y",
            width: Width::Exact(spec.outputs.len()),
        },
        RowField {
            pointer: "/spectra/values",
            width: Width::FirstRow {
                max: MAX_REQUEST_BANDS,
            },
        },
        RowField {
            pointer: "/successor/values",
            width: Width::FirstRow {
                max: MAX_REQUEST_BANDS,
            },
        },
    ]
}

/// A predict request's inputs for a model with a spectrum, read by the fast path
/// ([`fast_spectra_object`]), with the warnings (`spectral_inputs`); `None` for a body the
/// full parse must read.
pub fn fast_inputs(bytes: &[u8], spec: &ModelSpec, max_rows: usize) -> Option<(Rows, Vec<Detail>)> {
    // Not scanned at all for a model without a spectrum.
    spec.spectrum.as_ref()?;
    let read = fast_spectra_object(
        bytes,
        spec.features.len(),
        None,
        MAX_REQUEST_BANDS,
        max_rows,
    )?;
    spectral_inputs(&read, spec)
}

/// The model's input rows from what the fast path read, handled as [`parse_inputs`] handles
/// them (reflectances above full scale flagged at the same paths, the spectra resampled onto
/// the model's grid, the named features after them), with the warnings; `None` where
/// [`parse_inputs`] would find a problem (a grid that is not valid or does not cover the
/// model's, arrays of different lengths): the full parse then says what is wrong.
fn spectral_inputs(read: &FastSpectra, spec: &ModelSpec) -> Option<(Rows, Vec<Detail>)> {
    let spectrum = spec.spectrum.as_ref()?;
    let values = &read.values;
    let grid = covering_grid(
        read.start_nm,
        read.interval_nm,
        values.width(),
        &spectrum.grid(),
    )
    .ok()?;
    let no_features = Rows::from_row_major(values.rows(), 0, Vec::new());
    let x = read.x.as_ref().unwrap_or(&no_features);
    if x.rows() != values.rows() {
        return None;
    }
    let mut warnings = Details::default();
    let spectra = onto_spec_grid(values, &grid, spectrum, &mut warnings, |i, j| {
        format!("/spectra/values/{i}/{j}")
    });
    Some((join_inputs(&spectra, x), warnings.into_list()))
}

/// Reads a request's inputs: `x` (named features) and, for a model with a spectrum, `spectra`
/// resampled onto the model's grid, joined into the model's input rows. `x` may be left out
/// when the model has no named features. `body` was read with [`row_fields`].
pub fn parse_inputs(
    body: &mut Body,
    spec: &ModelSpec,
    instrument: Instrument,
    details: &mut Details,
    warnings: &mut Details,
) -> Option<Rows> {
    let x = body.take_rows("/x");
    let Some(spectrum) = &spec.spectrum else {
        if body.value().get("spectra").is_some_and(|v| !v.is_null()) {
            details.push(
                "/spectra",
                "the model declares no spectrum: send its inputs in x",
            );
        }
        return parse_rows(x, "/x", details);
    };
    let values = body.take_rows("/spectra/values");
    let spectra = parse_spectra(
        body.value().get("spectra"),
        values,
        "/spectra",
        spectrum,
        instrument,
        details,
        warnings,
    );
    let x = match x {
        None if spec.features.is_empty() => spectra
            .as_ref()
            .map(|s| Rows::from_row_major(s.rows(), 0, Vec::new())),
        x => parse_rows(x, "/x", details),
    };
    let (spectra, x) = (spectra?, x?);
    if spectra.rows() != x.rows() {
        details.push(
            "/x",
            format!("has {} rows but spectra has {}", x.rows(), spectra.rows()),
        );
        return None;
    }
    Some(join_inputs(&spectra, &x))
}

/// A batch's successor readings (see [`NewBatch::successor`]).
#[derive(Clone, Debug)]
pub struct Successor {
    pub readings: Rows,
    pub old_read: bool,
}

impl NewBatch {
    /// Parses `{"batch_id"?, "x": [[p]], "y": [[m]]}` for `spec` from a body read with
    /// [`row_fields`]. `idempotency_key` is the request's `Idempotency-Key` header; it must
    /// agree with `batch_id` when both are given.
    pub fn parse(
        mut body: Body,
        spec: &ModelSpec,
        idempotency_key: Option<&str>,
    ) -> Result<Self, Invalid> {
        let Value::Object(fields) = body.value() else {
            return Err(Invalid::one(
                "",
                format!(
                    "the body must be a JSON object, found {}",
                    describe(body.value())
                ),
            ));
        };
        let mut details = Details::default();
        for key in fields.keys() {
            if !matches!(key.as_str(), "batch_id" | "spectra" | "successor") {
                details.push(format!("/{}", pointer_token(key)), "unknown field");
            }
        }
        // A field sent as `null` is a field left out.
        let given = |key: &str| fields.get(key).is_some_and(|v| !v.is_null());
        let (has_spectra, has_successor) = (given("spectra"), given("successor"));
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
        for key in ["/x", "/y"] {
            if body.has_no_rows(key) {
                details.push(key, "a batch needs at least one row");
            }
        }
        let mut warnings = Details::default();
        let successor = has_successor
            .then(|| handover::parse_json(&mut body, spec, &mut details, &mut warnings))
            .flatten();
        let x = if has_successor && !has_spectra {
            // The successor's readings alone: the named features are the rest of the inputs.
            match (body.take_rows("/x"), &successor) {
                // Readings that could not be read have said why; x is not missing.
                (None, new) if spec.features.is_empty() => new
                    .as_ref()
                    .map(|new| Rows::from_row_major(new.rows(), 0, Vec::new())),
                (x, _) => parse_rows(x, "/x", &mut details),
            }
        } else {
            parse_inputs(
                &mut body,
                spec,
                Instrument::Model,
                &mut details,
                &mut warnings,
            )
        };
        if let (Some(x), Some(new)) = (&x, &successor)
            && x.rows() != new.rows()
        {
            details.push(
                "/successor/values",
                format!("has {} rows but the batch has {}", new.rows(), x.rows()),
            );
        }
        let y = parse_rows(body.take_rows("/y"), "/y", &mut details);
        if let (Some(x), Some(y)) = (&x, &y)
            && x.rows() != y.rows()
        {
            // The rows `x` was read from: the successor's readings, where the batch holds
            // nothing else; `x` beside them.
            let inputs = if has_successor && !has_spectra {
                if spec.features.is_empty() {
                    "successor"
                } else {
                    "x"
                }
            } else if spec.spectrum.is_some() {
                "spectra"
            } else {
                "x"
            };
            details.push(
                "/y",
                format!("has {} rows but {inputs} has {}", y.rows(), x.rows()),
            );
        }
        details.finish("invalid batch")?;
        match (x, y) {
            (Some(x), Some(y)) => Ok(Self {
                batch_id: body_id.or(header_id).unwrap_or_else(BatchId::generate),
                x,
                y,
                successor: successor.map(|readings| Successor {
                    readings,
                    old_read: has_spectra,
                }),
                warnings: warnings.into_list(),
            }),
            _ => Err(Invalid::one("", "invalid batch")),
        }
    }

    /// [`Self::parse`] straight from the bytes of a plain, well-formed JSON body. `None` for a
    /// body it does not take, every invalid one among them (more than `max_rows` rows for
    /// `spec`, an id that disagrees with `idempotency_key`, …): [`Self::parse`] then reads it or
    /// says what is wrong.
    pub fn parse_fast(
        body: &[u8],
        spec: &ModelSpec,
        idempotency_key: Option<&str>,
        max_rows: usize,
    ) -> Option<Self> {
        let (batch_id, x, y, warnings) = if spec.spectrum.is_some() {
            let read = fast_spectra_object(
                body,
                spec.features.len(),
                Some(spec.outputs.len()),
                MAX_REQUEST_BANDS,
                max_rows,
            )?;
            let (x, warnings) = spectral_inputs(&read, spec)?;
            (read.batch_id, x, read.y?, warnings)
        } else {
            let object = fast_rows_object(
                body,
                &[("x", spec.features.len()), ("y", spec.outputs.len())],
                true,
                max_rows,
            )?;
            let [x, y] = <[Rows; 2]>::try_from(object.rows).ok()?;
            (object.batch_id, x, y, Vec::new())
        };
        let body_id = match batch_id {
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
        (x.rows() == y.rows()).then(|| Self {
            batch_id: body_id.or(header_id).unwrap_or_else(BatchId::generate),
            x,
            y,
            successor: None,
            warnings,
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
        check_header_width(body, spec)?;
        if handover::has_csv_columns(body) {
            return Self::parse_csv_with_successor(body, spec, idempotency_key, max_rows);
        }
        // A spectrum on another grid than the model's is read on its own grid, then resampled.
        let csv_grid = csv_spectrum_grid(body, spec)?;
        let read_spec = match (&spec.spectrum, csv_grid) {
            (Some(spectrum), Some(grid)) => {
                let mut read_spec = spec.clone();
                read_spec.spectrum = Some(spectrum.on_grid(grid));
                std::borrow::Cow::Owned(read_spec)
            }
            _ => std::borrow::Cow::Borrowed(spec),
        };
        let (x, y) = match fast_csv(body, &read_spec, max_rows) {
            Some(rows) => rows,
            // Not a plain, valid batch: the csv crate reads it and says what is wrong.
            None => read_csv(body, &read_spec, max_rows)?,
        };
        let mut warnings = Details::default();
        let x = match &spec.spectrum {
            Some(spectrum) => {
                let read = read_spec.spectrum.as_ref().unwrap_or(spectrum).grid();
                onto_spec_grid(&x, &read, spectrum, &mut warnings, |i, j| {
                    format!("/rows/{i}/{}", read.band_name(j))
                })
            }
            None => x,
        };
        Ok(Self {
            batch_id,
            x,
            y,
            successor: None,
            warnings: warnings.into_list(),
        })
    }

    /// [`Self::parse_csv`] of a CSV with `successor:<λ>nm` columns: they are split off
    /// ([`handover::split_csv`]) and the rest is read as a batch of the model's own instrument
    /// (the overlap) or, without its bands, as the named features of the successor's rows.
    fn parse_csv_with_successor(
        body: &[u8],
        spec: &ModelSpec,
        idempotency_key: Option<&str>,
        max_rows: usize,
    ) -> Result<Self, CsvError> {
        let mut warnings = Details::default();
        let split = handover::split_csv(body, spec, max_rows, &mut warnings)?;
        let mut rest_spec = spec.clone();
        if !split.old_read {
            rest_spec.spectrum = None;
        }
        rest_spec.successor = None;
        let mut batch = Self::parse_csv(&split.rest, &rest_spec, idempotency_key, max_rows)?;
        if batch.rows() != split.readings.rows() {
            return Err(Invalid::one(
                "",
                format!(
                    "{} rows hold the successor's readings but {} the rest of the batch: a \
                     row may not hold only one instrument's",
                    split.readings.rows(),
                    batch.rows()
                ),
            )
            .into());
        }
        batch.successor = Some(Successor {
            readings: split.readings,
            old_read: split.old_read,
        });
        batch.warnings.extend(warnings.into_list());
        Ok(batch)
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
        let readings = self.successor.as_ref().map(|s| s.readings.to_le_bytes());
        let stored = self.hash(&x, &y, readings.as_deref());
        let holds_minus_zero = [Some(&self.x), Some(&self.y)]
            .into_iter()
            .chain([self.successor.as_ref().map(|s| &s.readings)])
            .flatten()
            .any(Rows::holds_minus_zero);
        let signed_zero = holds_minus_zero.then(|| {
            let readings = self
                .successor
                .as_ref()
                .map(|s| s.readings.to_signed_le_bytes());
            self.hash(
                &self.x.to_signed_le_bytes(),
                &self.y.to_signed_le_bytes(),
                readings.as_deref(),
            )
        });
        EncodedBatch {
            x: x.into(),
            y: y.into(),
            content_hash: ContentHash {
                stored,
                signed_zero,
            },
        }
    }

    /// The SHA-256 of the batch's shape and of its values' bytes `x`, `y` and the successor's
    /// `readings`.
    fn hash(&self, x: &[u8], y: &[u8], readings: Option<&[u8]>) -> [u8; 32] {
        let mut hash = Sha256::new();
        for n in [self.x.rows(), self.x.width(), self.y.width()] {
            hash.update((n as u64).to_le_bytes());
        }
        hash.update(x);
        hash.update(y);
        // A plain batch hashes as it always has.
        if let (Some(successor), Some(readings)) = (&self.successor, readings) {
            hash.update([u8::from(successor.old_read)]);
            hash.update((successor.readings.width() as u64).to_le_bytes());
            hash.update(readings);
        }
        hash.finalize().into()
    }
}

/// A column whose values in a batch differ by less than this fraction of their largest
/// magnitude is flagged ([`NewBatch::flag_narrow_columns`]).
const NARROW_SPREAD: f64 = 1e-5;

impl NewBatch {
    /// Flags the named features and outputs whose values in this batch lie within
    /// `NARROW_SPREAD` of their size of one another (`c + δ`, `δ ≪ |c|`), as warnings at `/x`
    /// and `/y`. The model keeps sums of squares of the raw values and centres them only when it
    /// forms a posterior, so of such a column's variation about `16 − 2 log₁₀(|c|/δ)` of a
    /// double's digits survive: at `|c|/δ = 10⁵` the noise variance comes out visibly wrong, at
    /// `10⁶` the column is indistinguishable from a constant and pruned. A column the batch
    /// holds constant is not flagged (other batches may move it), nor are a spectrum's bands,
    /// which a reflectance scale bounds.
    pub fn flag_narrow_columns(&mut self, spec: &ModelSpec) {
        let features = spec.features.len();
        let Some(first_feature) = self.x.width().checked_sub(features) else {
            return;
        };
        let columns = spec
            .features
            .iter()
            .enumerate()
            .map(|(j, name)| ("/x", name, &self.x, first_feature + j))
            .chain(
                spec.outputs
                    .iter()
                    .enumerate()
                    .map(|(k, name)| ("/y", name, &self.y, k)),
            );
        let mut flagged = Vec::new();
        for (path, name, rows, column) in columns {
            let values = rows.values().iter().skip(column).step_by(rows.width());
            let (low, high) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            });
            let size = low.abs().max(high.abs());
            let spread = high - low;
            if spread > 0.0 && spread < NARROW_SPREAD * size {
                flagged.push(Detail::new(
                    path,
                    format!(
                        "{name:?} varies over {low} to {high} in this batch, less than 1e-5 of \
                         its size: were all its values this close, double precision would keep \
                         too few digits of their differences to learn from; send it as an offset \
                         from a reference value"
                    ),
                ));
            }
        }
        self.warnings.extend(flagged);
    }
}

impl NewBatch {
    /// Flags the outputs of a colour model (a spectrum under `kubelka_munk` or `saunderson`,
    /// whose outputs recipe matching reads as the dyes' amounts) that are below 0 in some row,
    /// as warnings at `/y`: a dose below 0 is a data error the forward map would learn from.
    /// Accepted, as a reflectance above full scale is: the inverse map has no such constraint.
    pub fn flag_negative_doses(&mut self, spec: &ModelSpec) {
        if spec.spectrum.is_none() || spec.transform == TransformName::None {
            return;
        }
        let width = self.y.width().max(1);
        for (k, name) in spec.outputs.iter().enumerate() {
            let column = self.y.values().iter().skip(k).step_by(width);
            let mut negative = column.enumerate().filter(|(_, v)| **v < 0.0);
            let Some((row, first)) = negative.next() else {
                continue;
            };
            let rows = 1 + negative.count();
            self.warnings.push(Detail::new(
                "/y",
                format!(
                    "{name:?} is below 0 in {rows} row(s), first in row {row} (counting from \
                     0; {}): a colour model's outputs are the dyes' amounts, which are at least 0",
                    quote(*first)
                ),
            ));
        }
    }

    /// Flags the named features of a model under `kubelka_munk` that declares no spectrum, where
    /// the transform reads every feature as a reflectance fraction: a column above 1 in some
    /// row (a percentage sent as a fraction reads as a different K/S, `(1 − R)²/2R` being 0.25
    /// at both R = 0.5 and R = 2) or below 0 (read as the transform's smallest reflectance), as
    /// one warning per column and side at `/x`. Accepted, as a declared spectrum's are.
    pub fn flag_named_reflectances(&mut self, spec: &ModelSpec) {
        if spec.spectrum.is_some() || spec.transform != TransformName::KubelkaMunk {
            return;
        }
        let width = self.x.width().max(1);
        for (j, name) in spec.features.iter().enumerate() {
            let column = || self.x.values().iter().skip(j).step_by(width).enumerate();
            for (what, out) in [
                ("above 1", &(|v: f64| v > 1.0) as &dyn Fn(f64) -> bool),
                ("below 0", &|v: f64| v < 0.0),
            ] {
                let mut outside = column().filter(|(_, v)| out(**v));
                let Some((row, first)) = outside.next() else {
                    continue;
                };
                let rows = 1 + outside.count();
                let hint = if what == "above 1" {
                    "a percentage? send fractions, or a model that declares a \"spectrum\" \
                     with \"scale\": \"percent\""
                } else {
                    "no surface reflects less than nothing: a dark reading subtracted? it is \
                     read as the transform's smallest reflectance"
                };
                self.warnings.push(Detail::new(
                    "/x",
                    format!(
                        "{name:?} is {what} in {rows} row(s), first in row {row} (counting from \
                         0; {}): under \"kubelka_munk\" without a declared spectrum every \
                         feature is read as a reflectance fraction, from 0 to 1 ({hint})",
                        quote(*first)
                    ),
                ));
            }
        }
    }

    /// Flags, under Saunderson's correction, the rows whose every band reads at or below `k₁`,
    /// the share of light the surface alone reflects: the correction leaves such a row's body
    /// no reflectance at any band ([`mordant_estimator::Saunderson::internal`]), so the model
    /// reads it as black whatever its colour. A real black can read so under the textbook
    /// `k₁` of 0.04; a whole batch of them says that `k₁` or the scale is wrong. One warning
    /// with the count, at the first such row (`/spectra/values/{i}`, or `/rows/{i}` in CSV).
    pub fn flag_black_rows(&mut self, spec: &ModelSpec, csv: bool) {
        let (Some(spectrum), Some(saunderson)) = (&spec.spectrum, &spec.saunderson) else {
            return;
        };
        if spec.transform != TransformName::Saunderson {
            return;
        }
        let Some(scale) = spectrum.scale.reflectance() else {
            return;
        };
        // A successor's readings alone (no bands of the model's own instrument): nothing of
        // the model's grid to read.
        if self.x.width() != spectrum.count + spec.features.len() || spectrum.count == 0 {
            return;
        }
        let (k1, fraction, bands) = (saunderson.k1, scale.to_fraction(), spectrum.count);
        // As the basis reads a band (`x · to_fraction`), so that a reading at k1 is judged as
        // the model reads it.
        let mut black = self
            .x
            .values()
            .chunks_exact(self.x.width())
            .enumerate()
            .filter(|(_, row)| row[..bands].iter().all(|&r| r * fraction <= k1));
        let Some((first, _)) = black.next() else {
            return;
        };
        let rows = 1 + black.count();
        let path = if csv {
            format!("/rows/{first}")
        } else {
            format!("/spectra/values/{first}")
        };
        self.warnings.push(Detail::new(
            path,
            format!(
                "{rows} row(s) read at or below Saunderson's k1 = {} at every band (the first \
                 is row {first}, counting from 0): k1 is the share of light the surface alone \
                 reflects, so the model reads these rows as black at every band; k1 is about \
                 0.04 for fibres (refractive index 1.5): a wrong \"saunderson\" or \"scale\"?",
                quote(k1)
            ),
        ));
    }

    /// Says where a batch whose statistics overflow is at fault: its value of largest magnitude
    /// (the model keeps sums of squares of the raw values: one past about `10¹⁵⁴`, or many near
    /// it, overflow). At the column's path in a JSON body (`/spectra/values`, `/x`, `/y`,
    /// `/successor/values`, as the batch's warnings), at the cell's in a CSV one
    /// (`/rows/{i}/{column}`, as its other cells' errors), naming the column and the row.
    pub fn overflow(&self, spec: &ModelSpec, csv: bool) -> Invalid {
        let mut largest: Option<(Cell, f64)> = None;
        for (cell, v) in self.cells(spec) {
            // NaN compares false: the batch's parse has refused it anyway.
            if largest.is_none_or(|(_, l)| v.abs() > l.abs()) {
                largest = Some((cell, v));
            }
        }
        let Some((cell, value)) = largest else {
            return Invalid::one(
                "",
                "the batch cannot be learnt: its statistics would not be finite",
            );
        };
        let (path, name) = self.locate(spec, csv, cell);
        Invalid::one(
            path,
            format!(
                "the batch cannot be learnt: its sums of squares would overflow. Its largest \
                 value is {} of {name} in row {} (counting from 0); squares of values past \
                 about 1e154, or sums of many near it, pass the largest number double \
                 precision holds: send them in other units",
                quote(value),
                cell.row
            ),
        )
    }

    /// Refuses a batch with a column whose values are all so small (below [`TINY`] in
    /// magnitude, but not all 0) that the statistics cannot hold them: the model keeps sums of
    /// squares of the raw values, and below `√(f64::MIN_POSITIVE)/ε ≈ 6.7·10⁻¹³⁹` the squares
    /// of the differences double precision resolves between such values fall under the
    /// smallest normal double. The fit would then read the column as constant (an input) or
    /// its noise as none (an output). Where the column's largest value is, as
    /// [`Self::overflow`] says.
    pub fn underflow(&self, spec: &ModelSpec, csv: bool) -> Result<(), Invalid> {
        for (part, rows, skipped) in self.parts(spec) {
            let width = rows.width();
            if width <= skipped {
                continue;
            }
            // Each column's largest magnitude first; a row is looked for only if one fails.
            let mut largest = vec![0.0_f64; width];
            for row in rows.values().chunks_exact(width) {
                for (l, v) in largest.iter_mut().zip(row) {
                    *l = l.max(v.abs());
                }
            }
            let Some(column) = (skipped..width).find(|&j| largest[j] != 0.0 && largest[j] < TINY)
            else {
                continue;
            };
            let row = rows
                .values()
                .chunks_exact(width)
                .position(|r| r[column].abs() == largest[column])
                .unwrap_or(0);
            let value = rows.values()[row * width + column];
            let (path, name) = self.locate(spec, csv, Cell { part, row, column });
            return Err(Invalid::one(
                path,
                format!(
                    "the batch cannot be learnt: {name} is at most {} in magnitude in this \
                     batch (row {row}, counting from 0); below about 1e-138 the squares of the \
                     differences double precision resolves between such values fall under the \
                     smallest number it holds in full: send it in other units (exact zeros are \
                     fine)",
                    quote(value)
                ),
            ));
        }
        Ok(())
    }

    /// The rows of a batch the statistics read, each with how many of its first columns they
    /// do not: a colour model's bands where nothing else reads them (its transform reads a
    /// reflectance past full scale as full scale, and one below its smallest as that), which
    /// is everywhere but in an overlap, whose transfer reads both instruments' bands as sent.
    fn parts(&self, spec: &ModelSpec) -> Vec<(Part, &Rows, usize)> {
        let pairs = self.successor.as_ref().is_some_and(|s| s.old_read);
        let clamped = spec.transform != TransformName::None && !pairs;
        // A successor-only batch's inputs are the named features alone.
        let bands = match &self.successor {
            Some(s) if !s.old_read => 0,
            _ => spec.spectrum.map_or(0, |s| s.count),
        };
        let skipped = |all: usize| if clamped { all } else { 0 };
        [(Part::X, &self.x, skipped(bands)), (Part::Y, &self.y, 0)]
            .into_iter()
            .chain(
                self.successor
                    .as_ref()
                    .map(|s| (Part::Successor, &s.readings, skipped(s.readings.width()))),
            )
            .collect()
    }

    /// Every value the statistics read ([`Self::parts`]), with where it is.
    fn cells<'a>(&'a self, spec: &ModelSpec) -> impl Iterator<Item = (Cell, f64)> + 'a {
        self.parts(spec)
            .into_iter()
            .flat_map(|(part, rows, skipped)| {
                let width = rows.width().max(1);
                rows.values().iter().enumerate().filter_map(move |(i, &v)| {
                    let (row, column) = (i / width, i % width);
                    (column >= skipped).then_some((Cell { part, row, column }, v))
                })
            })
    }

    /// The path of `cell` in the body (the column's in JSON, the cell's in CSV, a band's row
    /// there when the CSV may hold it on another grid) and the name of its column.
    fn locate(&self, spec: &ModelSpec, csv: bool, cell: Cell) -> (String, String) {
        let Cell { part, row, column } = cell;
        // A successor-only batch's inputs are the named features alone.
        let bands = match &self.successor {
            Some(s) if !s.old_read => 0,
            _ => spec.spectrum.map_or(0, |s| s.count),
        };
        let band_at = |grid: Option<crate::domain::SpectrumSpec>, column: usize| {
            grid.map_or_else(String::new, |s| {
                nm_name(s.start_nm + s.interval_nm * column as f64)
            })
        };
        let (path, header, name) = match (part, column.checked_sub(bands)) {
            (Part::Y, _) => {
                let output = &spec.outputs[column];
                ("/y", Some(output.clone()), format!("{output:?}"))
            }
            (Part::X, Some(j)) => {
                let feature = &spec.features[j];
                ("/x", Some(feature.clone()), format!("{feature:?}"))
            }
            (Part::X, None) => (
                "/spectra/values",
                None,
                format!("the band at {}", band_at(spec.spectrum, column)),
            ),
            (Part::Successor, _) => {
                // Its readings are kept on the model's scale, which may not be the one sent.
                let rescaled = spec
                    .successor
                    .zip(spec.spectrum)
                    .is_some_and(|(from, to)| handover::scale_factor(&from, &to) != 1.0);
                let scale = if rescaled {
                    " (on the model's scale)"
                } else {
                    ""
                };
                (
                    "/successor/values",
                    None,
                    format!(
                        "the successor's band at {}{scale}",
                        band_at(spec.successor, column)
                    ),
                )
            }
        };
        let path = match (csv, header) {
            (true, Some(header)) => format!("/rows/{row}/{}", pointer_token(&header)),
            // A band read from another grid is not a column of the body: its row.
            (true, None) => format!("/rows/{row}"),
            (false, _) => path.to_owned(),
        };
        (path, name)
    }
}

/// Below this magnitude a column of a batch is refused ([`NewBatch::underflow`]).
const TINY: f64 = 1e-138;

/// Which rows of a batch a value is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    X = 0,
    Y = 1,
    Successor = 2,
}

/// Where a value of a batch is.
#[derive(Clone, Copy, Debug)]
struct Cell {
    part: Part,
    row: usize,
    column: usize,
}

/// For a model with a spectrum: the grid of a CSV's band columns (named `<λ>nm`, e.g. `400nm`)
/// when they form a regular grid other than the model's and cover its range; `None` when they
/// are the model's own bands (or there are none: the header check then names what is missing).
fn csv_spectrum_grid(body: &[u8], spec: &ModelSpec) -> Result<Option<Grid>, Invalid> {
    let Some(spectrum) = &spec.spectrum else {
        return Ok(None);
    };
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::Headers)
        .from_reader(body);
    // An unreadable header is reported by the reader proper.
    let Ok(header) = reader.headers() else {
        return Ok(None);
    };
    // A column named exactly as a feature or an output is that (a model stored before such
    // names were refused may have a feature `555nm` beside its spectrum).
    let mut wavelengths: Vec<f64> = header
        .iter()
        .filter(|name| !spec.features.iter().chain(&spec.outputs).any(|n| n == name))
        .filter_map(band_wavelength)
        .collect();
    wavelengths.sort_by(f64::total_cmp);
    let model = spectrum.grid();
    if wavelengths.len() < 2
        || spectrum
            .band_names()
            .into_iter()
            .eq(wavelengths.iter().map(|&nm| nm_name(nm)))
    {
        return Ok(None);
    }
    // Bands of the model's own grid that are no other grid the model could be read from: some
    // of its columns are missing, which the header's check names.
    let names = spectrum.band_names();
    let on_the_model_s = || wavelengths.iter().all(|&nm| names.contains(&nm_name(nm)));
    match grid_of(&wavelengths) {
        Ok(grid) if grid.covers(&model) => Ok(Some(grid)),
        _ if on_the_model_s() => Ok(None),
        Ok(grid) => Err(Invalid::one(
            "/header",
            format!(
                "the spectrum's columns cover {}–{} nm but the model reads {}–{} nm: mordant \
                 never extrapolates",
                wavelengths[0],
                grid.end_nm(),
                model.wavelength(0),
                model.end_nm()
            ),
        )),
        Err(e) => Err(Invalid::one(
            "/header",
            format!("the spectrum's columns: {e}"),
        )),
    }
}

/// Refuses a CSV header of more columns than any batch for `spec` could hold, before a reader
/// parses them. A batch names each of the model's columns once; a spectrum on a finer grid than
/// the model's takes more, hence the wide margin.
fn check_header_width(body: &[u8], spec: &ModelSpec) -> Result<(), Invalid> {
    const FLOOR: usize = 1 << 16;
    let known =
        spec.input_width() + spec.outputs.len() + spec.successor.as_ref().map_or(0, |s| s.count);
    let cap = FLOOR.max(16 * known);
    let columns = header_columns(body, cap);
    if columns > cap {
        return Err(Invalid::one(
            "/header",
            format!(
                "the header has {columns} columns or more; a batch for this model has at most \
                 {cap} (its {known} features, bands and outputs, and room for a spectrum on a \
                 finer grid)"
            ),
        ));
    }
    Ok(())
}

/// The columns of a CSV's header, counted up to `cap + 1` as the csv reader splits it: after a
/// byte-order mark and any blank lines, up to the first line end (`\n` or `\r`) outside quotes.
/// A quote opens a quoted cell only as the cell's first byte; inside one, `""` is a quote.
fn header_columns(body: &[u8], cap: usize) -> usize {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let (mut columns, mut quoted, mut at_start, mut started) = (1, false, true, false);
    let mut bytes = body.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        if quoted {
            if b == b'"' && bytes.next_if_eq(&b'"').is_none() {
                quoted = false;
            }
            continue;
        }
        match b {
            b'"' if at_start => (quoted, at_start, started) = (true, false, true),
            b'\n' | b'\r' if started => break,
            b'\n' | b'\r' => at_start = true,
            b',' => {
                (columns, at_start, started) = (columns + 1, true, true);
                if columns > cap {
                    break;
                }
            }
            _ => {
                at_start = false;
                started |= !b.is_ascii_whitespace();
            }
        }
    }
    columns
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
    let (p, m) = (spec.input_width(), spec.outputs.len());
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
                _ => details.push_with(|| {
                    (
                        format!("/rows/{rows}/{}", pointer_token(name)),
                        format!("must be a finite number, found {}", quote_cell(cell)),
                    )
                }),
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::domain::SaundersonSpec;
    use crate::domain::spectrum::test_spec;

    /// A batch of these rows, with a fresh id and nothing else.
    fn rows_batch(x: Rows, y: Rows) -> NewBatch {
        NewBatch {
            batch_id: BatchId::generate(),
            x,
            y,
            successor: None,
            warnings: Vec::new(),
        }
    }

    /// A model stored before names like `555nm` were refused beside a spectrum keeps taking CSV
    /// batches: the column named as its feature is the feature, on the model's grid and on a
    /// finer one.
    #[test]
    fn a_stored_feature_named_like_a_band_is_read_as_the_feature() {
        let mut spec = test_spec("fraction", &["fabric"]);
        spec.features = vec!["555nm".to_owned()];
        for (header, spectrum) in [
            ("400nm,410nm,420nm,430nm", "0.1,0.2,0.3,0.4"),
            (
                "400nm,405nm,410nm,415nm,420nm,425nm,430nm",
                "0.1,0.15,0.2,0.25,0.3,0.35,0.4",
            ),
        ] {
            let body = format!("{header},555nm,red,blue\n{spectrum},1,0.5,0.6\n");
            let batch = NewBatch::parse_csv(body.as_bytes(), &spec, None, 10).unwrap();
            assert_eq!(batch.x.values().len(), 5, "{header}");
            assert_eq!(batch.x.values()[4], 1.0, "{header}");
            assert_eq!(batch.y.values(), [0.5, 0.6], "{header}");
        }
    }

    /// A header far wider than the model could read is refused by its count, before any reader
    /// parses its cells (a 30 MB header of empty columns took seconds of CPU, each cell read
    /// twice), and a finer grid of many times the model's bands is still read.
    #[test]
    fn a_header_far_wider_than_the_model_is_refused_by_its_count() {
        let spec = test_spec("fraction", &[]);
        let body = format!(
            "400nm,410nm,420nm,430nm,red,blue{}\n1,2,3,4,5,6\n",
            ",".repeat(200_000)
        );
        let Err(CsvError::Invalid(invalid)) = NewBatch::parse_csv(body.as_bytes(), &spec, None, 10)
        else {
            panic!("a header of 200,006 columns was read");
        };
        assert_eq!(invalid.details.len(), 1, "{:?}", invalid.details);
        assert_eq!(invalid.details[0].path, "/header");
        assert!(
            invalid.details[0].message.contains("65537 columns or more"),
            "{:?}",
            invalid.details
        );
        // Counted as the reader splits the header: past a byte-order mark and a blank line, and
        // across a quoted line end.
        let wide = ",".repeat(200_000);
        for body in [
            format!("\u{feff}\n\n400nm,410nm,420nm,430nm,red,blue{wide}\n1,2,3,4,5,6\n"),
            format!("\"4\n00nm\",410nm,420nm,430nm,red,blue{wide}\n1,2,3,4,5,6\n"),
            // A quote inside a cell is a character, not the start of a quoted cell.
            format!("a\"b,400nm,410nm,420nm,430nm,red,blue{wide}\n1,2,3,4,5,6,7\n"),
            format!("\"a\"\"b\",400nm,410nm,420nm,430nm,red,blue{wide}\n1,2,3,4,5,6,7\n"),
        ] {
            let Err(CsvError::Invalid(invalid)) =
                NewBatch::parse_csv(body.as_bytes(), &spec, None, 10)
            else {
                panic!("{:?}…: a header of 200,006 columns was read", &body[..12]);
            };
            assert_eq!(invalid.details.len(), 1, "{:?}", invalid.details);
            assert_eq!(invalid.details[0].path, "/header");
        }
        // Rows ended by a lone `\r` (as old spreadsheets wrote them) are rows, not one header.
        let mut body = "400nm,410nm,420nm,430nm,red,blue\r".to_owned();
        body.push_str(&"0.1,0.2,0.3,0.4,1,2\r".repeat(20_000));
        let batch = NewBatch::parse_csv(body.as_bytes(), &spec, None, 20_000).expect("\\r rows");
        assert_eq!(batch.y.values().len(), 40_000);
        // A grid 20 times finer than the model's.
        let bands: Vec<String> = (0..=60)
            .map(|k| format!("{}nm", 400.0 + k as f64 * 0.5))
            .collect();
        let cells = vec!["0.5"; bands.len()].join(",");
        let body = format!("{},red,blue\n{cells},1,2\n", bands.join(","));
        let batch = NewBatch::parse_csv(body.as_bytes(), &spec, None, 10).expect("a finer grid");
        assert_eq!(batch.x.values(), [0.5; 4]);
    }

    /// A band named twice in a CSV header is said to be, at its second column, not taken for an
    /// irregular grid.
    #[test]
    fn a_band_named_twice_in_a_csv_header_is_said_to_be() {
        let spec = test_spec("fraction", &[]);
        for (header, path) in [
            ("400nm,410nm,410nm,420nm,430nm", "/header/2"),
            ("400nm,410nm,420nm,430nm,430.0nm", "/header/4"),
        ] {
            let cells = vec!["0.5"; header.split(',').count()].join(",");
            let body = format!("{header},red,blue\n{cells},1,2\n");
            let Err(CsvError::Invalid(invalid)) =
                NewBatch::parse_csv(body.as_bytes(), &spec, None, 10)
            else {
                panic!("{header}: a band twice was read");
            };
            assert_eq!(invalid.details[0].path, path, "{header}");
            assert!(
                invalid.details[0].message.contains("appears twice"),
                "{invalid:?}"
            );
        }
    }

    /// The fields the API document marks nullable: `null` is the field left out, at the top
    /// of the body; inside a row it is still no number.
    #[test]
    fn an_optional_field_sent_as_null_is_left_out() {
        let spectral = test_spec("fraction", &[]);
        let named = ModelSpec {
            spectrum: None,
            features: vec!["a".to_owned(), "b".to_owned()],
            ..spectral.clone()
        };
        let spectra =
            r#""spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}"#;
        for (spec, with, without) in [
            (
                &spectral,
                format!(r#"{{"x": null, "successor": null, {spectra}, "y": [[1, 2]]}}"#),
                format!(r#"{{{spectra}, "y": [[1, 2]]}}"#),
            ),
            (
                &named,
                r#"{"spectra": null, "successor": null, "x": [[3, 4]], "y": [[1, 2]]}"#.to_owned(),
                r#"{"x": [[3, 4]], "y": [[1, 2]]}"#.to_owned(),
            ),
        ] {
            let (a, b) = (
                full(&with, spec, Some("k")),
                full(&without, spec, Some("k")),
            );
            let (a, b) = (a.expect(&with), b.expect(&without));
            assert!(same(&a, &b, true), "{with}");
        }
        let missing = full(r#"{"spectra": null, "y": [[1, 2]]}"#, &spectral, None).unwrap_err();
        assert!(missing.contains("is required"), "{missing}");
        let in_row = full(r#"{"x": [[3, null]], "y": [[1, 2]]}"#, &named, None).unwrap_err();
        assert!(in_row.contains("/x/0/1"), "{in_row}");
    }

    fn full(body: &str, spec: &ModelSpec, key: Option<&str>) -> Result<NewBatch, String> {
        let read =
            Body::parse(body.as_bytes(), &row_fields(spec), 100).map_err(|e| e.to_string())?;
        NewBatch::parse(read, spec, key).map_err(|e| format!("{e:?}"))
    }

    /// What a batch is, to the bit: its id where the body or the key names one (a generated
    /// one differs from call to call), its inputs and outputs, its warnings.
    fn same(fast: &NewBatch, full: &NewBatch, named: bool) -> bool {
        (!named || fast.batch_id == full.batch_id)
            && fast.x.bits() == full.x.bits()
            && fast.y.bits() == full.y.bits()
            && fast.successor.is_none()
            && full.successor.is_none()
            && fast.warnings == full.warnings
    }

    /// A spectral batch the fast path takes reads as the full parse reads it: the same id, the
    /// same bits of every input (resampled where its grid is not the model's) and output, the
    /// same warnings at the same paths; one it does not take, valid or not, is left to the full
    /// parse.
    #[test]
    fn spectral_batches_read_fast_as_the_full_parse_reads_them() {
        let taken = [
            (
                "fraction",
                &[][..],
                None,
                r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}, "y": [[1, 2]]}"#,
            ),
            (
                "fraction",
                &[],
                Some("k-1"),
                r#" { "y" : [[0.5,1e-3],[2,0]] , "batch_id" : "k-1" , "spectra" : { "values" : [[0.1,0.25,1e-1,4E-1],[1,0,0.5,0.30000000000000004]] , "interval_nm" : 10.0 , "start_nm" : 4e2 } } "#,
            ),
            (
                "percent",
                &[],
                None,
                r#"{"batch_id": null, "spectra": {"start_nm": 395, "interval_nm": 5, "values": [[10, 20, 104.25, 30, 40, 50, 60, 70, 101, 80]]}, "y": [[3, 4]]}"#,
            ),
            (
                "percent",
                &["greige", "weight"],
                Some("lot-7"),
                r#"{"x": [[1, 0.5], [0, 2]], "spectra": {"start_nm": 400, "interval_nm": 10, "values": [[1, 2, 3, 4], [5, 6, 7, 800]]}, "y": [[1, 1], [2, 2]]}"#,
            ),
            (
                "absorbance",
                &[],
                None,
                r#"{"batch_id": "a.b", "spectra": {"start_nm": 400, "interval_nm": 7.5, "values": [[0.5, 1.5, 2.5, 3.5, 4.5]]}, "y": [[0, 0]]}"#,
            ),
        ];
        for (scale, features, key, body) in taken {
            let spec = test_spec(scale, features);
            let fast = NewBatch::parse_fast(body.as_bytes(), &spec, key, 100).expect(body);
            let full = full(body, &spec, key).expect(body);
            let named = key.is_some() || body.contains("\"batch_id\": \"");
            assert!(same(&fast, &full, named), "{body}");
        }
        let spec = test_spec("percent", &[]);
        let batch = r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[1, 2, 3, 400]]}, "y": [[1, 2]]}"#;
        let read = NewBatch::parse_fast(batch.as_bytes(), &spec, None, 100).expect(batch);
        assert_eq!(read.warnings.len(), 1, "400 % is above full scale");
        assert_eq!(read.warnings[0].path, "/spectra/values/0/3");
        let batch = r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[1, -2, 3, 4]]}, "y": [[1, 2]]}"#;
        let read = NewBatch::parse_fast(batch.as_bytes(), &spec, None, 100).expect(batch);
        assert_eq!(read.warnings.len(), 1, "-2 % is below 0");
        assert_eq!(read.warnings[0].path, "/spectra/values/0/1");
        assert!(read.warnings[0].message.contains("below 0"), "{read:?}");
        assert_eq!(
            full(batch, &spec, None).expect(batch).warnings,
            read.warnings
        );
        // A far-out number is quoted as written, not in its 301 digits.
        let batch = r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[1, 2, 3, 1e300]]}, "y": [[1, 2]]}"#;
        let read = NewBatch::parse_fast(batch.as_bytes(), &spec, None, 100).expect(batch);
        let message = &read.warnings[0].message;
        assert!(
            message.starts_with("reflectance 1e300 % at 430nm is above"),
            "{message}"
        );
        assert!(message.len() < 160, "{message}");

        // Valid, but more than the fast path takes: an empty x, an id with an escape.
        let valid = [
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}, "x": [[]], "y": [[1, 2]]}"#,
            r#"{"batch_id": "a\u002db", "spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}, "y": [[1, 2]]}"#,
        ];
        for body in valid {
            assert!(
                NewBatch::parse_fast(body.as_bytes(), &spec, None, 100).is_none(),
                "{body}"
            );
            assert!(full(body, &spec, None).is_ok(), "{body}");
        }
        // Invalid: the fast path leaves them to the full parse, which says why.
        let batch = |spectra: &str, rest: &str| format!(r#"{{"spectra": {{{spectra}}}{rest}}}"#);
        let plain = r#""start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]"#;
        let y = r#", "y": [[1, 2]]"#;
        let invalid = [
            (None, batch(plain, "")),
            (None, batch(plain, r#", "y": [[1]]"#)),
            (None, batch(plain, r#", "y": [[1, 2], [3, 4]]"#)),
            (None, batch(plain, r#", "y": []"#)),
            (None, batch(plain, &format!(r#"{y}, "batch_id": """#))),
            (None, batch(plain, &format!(r#"{y}, "batch_id": 7"#))),
            (
                Some("other"),
                batch(plain, &format!(r#"{y}, "batch_id": "one""#)),
            ),
            (None, batch(plain, &format!(r#"{y}, "x": [[1]]"#))),
            (None, batch(plain, y) + " x"),
            (None, batch(plain, &format!(r#"{y}{y}"#))),
            (
                None,
                batch(plain, &format!(r#"{y}, "batch_id": null, "batch_id": "a""#)),
            ),
            (None, batch(&format!(r#"{plain}, "start_nm": 400"#), y)),
            (
                None,
                batch(
                    plain,
                    &format!(r#", "y": [{}[1, 2]]"#, "[1, 2], ".repeat(100)),
                ),
            ),
            (
                None,
                batch(
                    r#""start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3]]"#,
                    y,
                ),
            ),
            (
                None,
                batch(
                    r#""start_nm": 410, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]"#,
                    y,
                ),
            ),
            (
                None,
                batch(
                    r#""start_nm": 400, "interval_nm": 0, "values": [[0.1, 0.2, 0.3, 0.4]]"#,
                    y,
                ),
            ),
        ];
        for (key, body) in invalid {
            assert!(
                NewBatch::parse_fast(body.as_bytes(), &spec, key, 100).is_none(),
                "{body}"
            );
            assert!(full(&body, &spec, key).is_err(), "{body}");
        }
        // A model with named features needs them beside the spectra, as many rows.
        let spec = test_spec("fraction", &["greige"]);
        for body in [
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}, "y": [[1, 2]]}"#,
            r#"{"x": [[1], [2]], "spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}, "y": [[1, 2]]}"#,
        ] {
            assert!(
                NewBatch::parse_fast(body.as_bytes(), &spec, None, 100).is_none(),
                "{body}"
            );
            assert!(full(body, &spec, None).is_err(), "{body}");
        }
    }

    proptest! {
        /// Any spectral batch of the plain shape, on the model's grid or a finer one that
        /// covers it, on any scale, with or without named features and an id, its members in any
        /// order, reads to the bits and warnings the full parse reads.
        #[test]
        fn a_spectral_batch_reads_fast_as_the_full_parse_reads_it(
            rows in 1usize..5,
            step in prop::sample::select(vec![(400.0, 10.0, 4usize), (395.0, 5.0, 10), (400.0, 2.5, 13)]),
            values in prop::collection::vec(-0.5f64..1.5, 13 * 4),
            outputs in prop::collection::vec(-1e3f64..1e3, 2 * 4),
            named in prop::collection::vec(-1e3f64..1e3, 2 * 4),
            features in prop::sample::select(vec![0usize, 2]),
            id in prop::option::of("[a-z0-9]{1,8}"),
            scale in prop::sample::select(vec!["fraction", "percent", "absorbance"]),
            turn in 0usize..4,
        ) {
            let names: Vec<&str> = ["greige", "weight"][..features].to_vec();
            let spec = test_spec(scale, &names);
            let (start, interval, bands) = step;
            let table = |values: &[f64], width: usize| -> String {
                let rows: Vec<String> = (0..rows)
                    .map(|r| {
                        let row: Vec<String> =
                            values[r * width..(r + 1) * width].iter().map(|v| format!("{v}")).collect();
                        format!("[{}]", row.join(", "))
                    })
                    .collect();
                format!("[{}]", rows.join(", "))
            };
            let mut members = vec![
                format!(r#""spectra": {{"start_nm": {start}, "interval_nm": {interval}, "values": {}}}"#, table(&values, bands)),
                format!(r#""y": {}"#, table(&outputs, 2)),
            ];
            if features > 0 {
                members.push(format!(r#""x": {}"#, table(&named, 2)));
            }
            if let Some(id) = &id {
                members.push(format!(r#""batch_id": "{id}""#));
            }
            let turn = turn % members.len();
            members.rotate_left(turn);
            let body = format!("{{{}}}", members.join(", "));
            let fast = NewBatch::parse_fast(body.as_bytes(), &spec, None, 100);
            let full = full(&body, &spec, None);
            prop_assert!(fast.is_some(), "the fast path refused {}", body);
            let (fast, full) = (fast.expect("checked"), full.expect("the full parse reads it"));
            prop_assert!(same(&fast, &full, id.is_some()), "{}", body);
        }
    }

    /// A feature or output whose values in the batch differ by less than 1e-5 of their size
    /// is flagged, by name, at `/x` or `/y`; one the batch holds constant, one that varies
    /// enough, a spectrum's bands and a zero-inflated output are not.
    #[test]
    fn columns_that_vary_too_little_for_double_precision_are_flagged() {
        let spec = test_spec("fraction", &["temperature", "serial"]);
        let rows = 6;
        let mut x = Vec::new();
        let mut y = Vec::new();
        for i in 0..rows {
            let i = i as f64;
            // Four bands; 350 K ± 3 (fine), 1e6 + a fraction (flagged).
            x.extend([0.2 + 0.01 * i, 0.3, 0.4, 0.5, 350.0 + i, 1e6 + i / 7.0]);
            // An output on a large offset (flagged) and a zero-inflated one (not).
            y.extend([1e7 + 0.01 * i, if i < 3.0 { 0.0 } else { 1e7 + i }]);
        }
        let mut batch = rows_batch(
            Rows::from_row_major(rows, 6, x.clone()),
            Rows::from_row_major(rows, 2, y),
        );
        batch.flag_narrow_columns(&spec);
        let flagged: Vec<(&str, bool)> = batch
            .warnings
            .iter()
            .map(|w| (w.path.as_str(), w.message.starts_with("\"serial\"")))
            .collect();
        assert_eq!(
            flagged,
            [("/x", true), ("/y", false)],
            "{:?}",
            batch.warnings
        );
        assert!(
            batch.warnings[1].message.starts_with("\"red\""),
            "{:?}",
            batch.warnings
        );

        // The same columns, held constant by the batch: nothing to say.
        let constant: Vec<f64> = x
            .chunks_exact(6)
            .flat_map(|row| [row[0], row[1], row[2], row[3], 350.0, 1e6])
            .collect();
        let mut batch = rows_batch(
            Rows::from_row_major(rows, 6, constant),
            Rows::from_row_major(rows, 2, vec![1.0; 2 * rows]),
        );
        batch.flag_narrow_columns(&spec);
        assert!(batch.warnings.is_empty(), "{:?}", batch.warnings);
    }

    /// A colour model's output below 0 is flagged by name at `/y`, with its rows; a model
    /// without a Kubelka–Munk transform reads outputs of any sign.
    #[test]
    fn negative_doses_of_a_colour_model_are_flagged() {
        let batch = |y: Vec<f64>| {
            rows_batch(
                Rows::from_row_major(3, 4, vec![0.5; 12]),
                Rows::from_row_major(3, 2, y),
            )
        };
        let mut colour = test_spec("fraction", &[]);
        colour.transform = TransformName::KubelkaMunk;
        let mut doses = batch(vec![0.1, 0.0, -1.25, 0.2, -0.5, 0.3]);
        doses.flag_negative_doses(&colour);
        let flagged: Vec<(&str, &str)> = doses
            .warnings
            .iter()
            .map(|w| (w.path.as_str(), w.message.as_str()))
            .collect();
        assert_eq!(flagged.len(), 1, "{flagged:?}");
        assert_eq!(flagged[0].0, "/y");
        assert!(
            flagged[0].1.starts_with(
                "\"red\" is below 0 in 2 row(s), first in row 1 (counting from 0; -1.25)"
            ),
            "{flagged:?}"
        );
        let mut fine = batch(vec![0.1, 0.0, 1.25, 0.2, 0.3, 0.5]);
        fine.flag_negative_doses(&colour);
        assert!(fine.warnings.is_empty());
        let mut plain = batch(vec![0.1, 0.0, -1.25, 0.2, 0.3, -0.5]);
        plain.flag_negative_doses(&test_spec("fraction", &[]));
        assert!(plain.warnings.is_empty());
    }

    /// Under `kubelka_munk` without a declared spectrum every named feature is a reflectance
    /// fraction: a column above 1 (a percentage?) or below 0 is flagged once, by name, at `/x`,
    /// with its rows; fractions, and the same values under no transform, are not.
    #[test]
    fn named_reflectances_out_of_a_fraction_s_range_are_flagged() {
        let batch = |x: Vec<f64>| {
            rows_batch(
                Rows::from_row_major(3, 2, x),
                Rows::from_row_major(3, 1, vec![0.5; 3]),
            )
        };
        let mut named = test_spec("fraction", &["r450", "r550"]);
        named.spectrum = None;
        named.outputs = vec!["red".to_owned()];
        named.transform = TransformName::KubelkaMunk;
        let mut percent = batch(vec![45.5, 0.2, 0.3, -0.01, 62.0, 0.4]);
        percent.flag_named_reflectances(&named);
        let flagged: Vec<(&str, &str)> = percent
            .warnings
            .iter()
            .map(|w| (w.path.as_str(), w.message.as_str()))
            .collect();
        assert_eq!(flagged.len(), 2, "{flagged:?}");
        assert!(flagged.iter().all(|(path, _)| *path == "/x"), "{flagged:?}");
        assert!(
            flagged[0].1.starts_with(
                "\"r450\" is above 1 in 2 row(s), first in row 0 (counting from 0; 45.5)"
            ),
            "{flagged:?}"
        );
        assert!(
            flagged[1].1.starts_with(
                "\"r550\" is below 0 in 1 row(s), first in row 1 (counting from 0; -0.01)"
            ),
            "{flagged:?}"
        );
        let mut fractions = batch(vec![0.45, 0.2, 1.0, 0.0, 0.62, 0.4]);
        fractions.flag_named_reflectances(&named);
        assert!(fractions.warnings.is_empty(), "{:?}", fractions.warnings);
        let mut plain = batch(vec![45.5, 0.2, 0.3, -0.01, 62.0, 0.4]);
        named.transform = TransformName::None;
        plain.flag_named_reflectances(&named);
        assert!(plain.warnings.is_empty(), "{:?}", plain.warnings);
    }

    /// A row whose every band reads at or below Saunderson's `k₁` leaves the fabric's body no
    /// reflectance anywhere (every band reads as black): flagged once, with the rows, at the
    /// first such row's path in the body's format; a row with one band above `k₁` is not.
    #[test]
    fn rows_black_at_every_band_under_saunderson_are_flagged() {
        let batch = |x: Vec<f64>| {
            rows_batch(
                Rows::from_row_major(3, 4, x),
                Rows::from_row_major(3, 2, vec![0.5; 6]),
            )
        };
        let mut surface = test_spec("percent", &[]);
        surface.transform = TransformName::Saunderson;
        surface.saunderson = Some(SaundersonSpec { k1: 0.9, k2: 0.6 });
        let readings = vec![
            50.0, 60.0, 70.0, 95.0, // one band above k1 = 90 %
            20.0, 30.0, 40.0, 50.0, //
            90.0, 10.0, 30.0, 40.0,
        ];
        for (csv, path) in [(false, "/spectra/values/1"), (true, "/rows/1")] {
            let mut flagged = batch(readings.clone());
            flagged.flag_black_rows(&surface, csv);
            assert_eq!(flagged.warnings.len(), 1, "{:?}", flagged.warnings);
            assert_eq!(flagged.warnings[0].path, path);
            assert!(
                flagged.warnings[0]
                    .message
                    .starts_with("2 row(s) read at or below Saunderson's k1 = 0.9 at every band"),
                "{:?}",
                flagged.warnings
            );
        }
        // The textbook k1 = 0.04: the same rows have colour.
        surface.saunderson = Some(SaundersonSpec { k1: 0.04, k2: 0.6 });
        let mut fine = batch(readings.clone());
        fine.flag_black_rows(&surface, false);
        assert!(fine.warnings.is_empty(), "{:?}", fine.warnings);
        // Without Saunderson's correction nothing is read below a surface.
        let mut plain = batch(readings);
        plain.flag_black_rows(&test_spec("percent", &[]), false);
        assert!(plain.warnings.is_empty(), "{:?}", plain.warnings);
        // A successor's readings alone: its rows hold only the named features (a fabric class
        // of 0), which are no bands of the model's instrument.
        let mut with_class = test_spec("percent", &["class"]);
        with_class.transform = TransformName::Saunderson;
        with_class.saunderson = Some(SaundersonSpec { k1: 0.9, k2: 0.6 });
        let mut successor = rows_batch(
            Rows::from_row_major(2, 1, vec![0.0, 0.0]),
            Rows::from_row_major(2, 2, vec![0.5; 4]),
        );
        successor.flag_black_rows(&with_class, false);
        assert!(successor.warnings.is_empty(), "{:?}", successor.warnings);
    }

    /// A batch whose statistics overflow is refused at the column in JSON and at the cell in
    /// CSV; a band, which a CSV on another grid does not hold as a column, at its row.
    #[test]
    fn an_overflow_is_refused_where_the_body_holds_the_value() {
        let spec = test_spec("fraction", &["mass"]);
        let batch = |x: Vec<f64>| {
            rows_batch(
                Rows::from_row_major(2, 5, x),
                Rows::from_row_major(2, 2, vec![0.5; 4]),
            )
        };
        let feature = batch(vec![0.1, 0.2, 0.3, 0.4, 1.0, 0.1, 0.2, 0.3, 0.4, 2e200]);
        let band = batch(vec![0.1, 0.2, 0.3, 0.4, 1.0, 0.1, 0.2, 3e200, 0.4, 2.0]);
        for (overflowing, csv, path) in [
            (&feature, false, "/x"),
            (&feature, true, "/rows/1/mass"),
            (&band, false, "/spectra/values"),
            (&band, true, "/rows/1"),
        ] {
            let invalid = overflowing.overflow(&spec, csv);
            assert_eq!(invalid.details[0].path, path, "{:?}", invalid.details);
        }
        let invalid = band.overflow(&spec, true);
        assert!(
            invalid.details[0]
                .message
                .contains("3e200 of the band at 420nm in row 1"),
            "{:?}",
            invalid.details
        );
    }

    /// A column too small to square is refused at its largest value, but not a colour model's
    /// band, which its transform reads as its smallest reflectance; nor a column of zeros.
    #[test]
    fn a_column_too_small_to_square_is_refused_where_it_is_largest() {
        let plain = test_spec("fraction", &["mass"]);
        let colour = ModelSpec {
            transform: TransformName::KubelkaMunk,
            ..plain.clone()
        };
        let batch = |x: Vec<f64>| {
            rows_batch(
                Rows::from_row_major(2, 5, x),
                Rows::from_row_major(2, 2, vec![0.5, 0.0, 0.25, 0.0]),
            )
        };
        let band = batch(vec![
            0.1, 1e-150, 0.3, 0.4, 1.0, 0.1, -2e-150, 0.3, 0.4, 2.0,
        ]);
        assert!(band.underflow(&colour, false).is_ok());
        for (csv, path) in [(false, "/spectra/values"), (true, "/rows/1")] {
            let invalid = band.underflow(&plain, csv).expect_err("a band too small");
            assert_eq!(invalid.details[0].path, path, "{:?}", invalid.details);
            assert!(
                invalid.details[0]
                    .message
                    .contains("the band at 410nm is at most -2e-150 in magnitude"),
                "{:?}",
                invalid.details
            );
        }
        let mass = batch(vec![0.1, 0.2, 0.3, 0.4, 3e-139, 0.1, 0.2, 0.3, 0.4, 0.0]);
        let invalid = mass
            .underflow(&colour, true)
            .expect_err("a feature too small");
        assert_eq!(invalid.details[0].path, "/rows/0/mass");
        let normal = batch(vec![0.1, 0.2, 0.3, 0.4, 1e-138, 0.1, 0.2, 0.3, 0.4, 0.0]);
        assert!(normal.underflow(&colour, false).is_ok());
        // The smallest value whose differences at double precision's resolution square to a
        // normal double is below the line.
        assert!(TINY >= f64::MIN_POSITIVE.sqrt() / f64::EPSILON);
    }

    /// `-0` is stored and hashed as `0` (a retry that prints the other is the same batch),
    /// while any other change of a value, however small, is a different batch.
    #[test]
    fn minus_zero_is_stored_and_hashed_as_zero() {
        let batch = |x: [f64; 2], y: f64| {
            rows_batch(
                Rows::from_row_major(1, 2, x.to_vec()),
                Rows::from_row_major(1, 1, vec![y]),
            )
        };
        let plus = batch([0.0, 1.5], 0.0).encode();
        let minus = batch([-0.0, 1.5], -0.0).encode();
        assert_eq!(minus.x, plus.x);
        assert_eq!(minus.y, plus.y);
        assert_eq!(minus.content_hash.stored, plus.content_hash.stored);
        assert_eq!(
            f64::from_le_bytes(minus.x[..8].try_into().unwrap()).to_bits(),
            0
        );
        // The sign kept, the hash is what releases before this one stored for such a batch:
        // the shape, then the bits of every value.
        let mut legacy = Sha256::new();
        for n in [1u64, 2, 1] {
            legacy.update(n.to_le_bytes());
        }
        for v in [-0.0f64, 1.5, -0.0] {
            legacy.update(v.to_le_bytes());
        }
        let legacy: [u8; 32] = legacy.finalize().into();
        assert_eq!(minus.content_hash.signed_zero, Some(legacy));
        assert!(minus.content_hash.matches(&legacy));
        assert!(plus.content_hash.matches(&minus.content_hash.stored));
        assert!(
            !plus.content_hash.matches(&legacy),
            "a batch without -0 is not that one"
        );
        assert_eq!(plus.content_hash.signed_zero, None);
        let tiny = batch([f64::from_bits(1), 1.5], 0.0).encode();
        assert_ne!(tiny.content_hash, plus.content_hash);
        let negative = batch([-f64::from_bits(1), 1.5], 0.0).encode();
        assert_ne!(negative.content_hash, plus.content_hash);
        assert_ne!(negative.content_hash, tiny.content_hash);
    }
}
