//! `POST /v1/models/{name}/predict`, served from the posterior cache.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use faer::{Mat, MatRef, RowRef};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::PREDICT;
use super::error::{ApiError, ErrorBody};
use super::extract::Path;
use super::extract::{RawJson, check_malformed, parse_body};
use super::models::not_trained;
use super::routes::Routes;
use crate::cache::{CachedModel, Serving};
use crate::coalesce::{self, CoalesceError};
use crate::domain::{
    Detail, Details, FastObject, Instrument, Invalid, ModelSpec, Rows, SpectrumSpec, fast_inputs,
    fast_rows_object, parse_inputs, pointer_token, row_fields, scale_factor,
};
use crate::estimator::transfer::MIN_TRANSFER_ROWS;
use crate::estimator::{Predictions, Predictor};
/// The route of predict, with the access it needs.
pub fn routes(routes: Routes) -> Routes {
    routes.add(PREDICT, routes!(predict))
}

/// Bodies longer than this (about 3,000 numbers) are parsed and predicted on the blocking pool,
/// not on the thread that serves the connection: that thread serves many other connections.
const INLINE_BYTES: usize = 64 * 1024;

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"x": [[1.0, 0.412, 0.388, 0.351]]}))]
pub struct PredictRequest {
    /// Input rows, each with one finite number per named feature. May be left out when the
    /// model has a spectrum and no named features.
    #[schema(min_items = 1)]
    pub x: Option<Vec<Vec<f64>>>,
    /// One reflectance spectrum per row, for a model that declares a spectrum: read by the
    /// model's own instrument, or by its successor with `"instrument": "successor"`.
    pub spectra: Option<Spectra>,
    /// Which instrument read `spectra`: `model` (default, the model's own) or `successor` (the
    /// one declared by `POST /v1/models/{name}/successor`, on its scale; answered through the
    /// map to the model's instrument and by the successor's own model, mixed as the model's
    /// `successor` status says).
    pub instrument: Option<Instrument>,
}

/// Reflectance spectra on any regular grid that covers the model's range, on the model's scale;
/// each is resampled linearly onto the model's grid (never extrapolated).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"start_nm": 360, "interval_nm": 5, "values": [[41.2, 40.8, 40.1]]}))]
pub struct Spectra {
    /// Wavelength of the first value of every row (nm).
    pub start_nm: f64,
    /// Distance between values (nm).
    #[schema(exclusive_minimum = 0.0)]
    pub interval_nm: f64,
    /// One row per spectrum, all of the same length (at least 2).
    #[schema(min_items = 1)]
    pub values: Vec<Vec<f64>>,
}

/// The prediction for one row: per output, the mean concentration and the predictive variance
/// `κ(σ² + φᵀΣAΣφ) + φᵀΣA₀Σφ`: `κ = ν/(ν − 2)` under the Student-t predictive inflates σ² and
/// the part of `φᵀΣφ` the noise drives (`A` the data's precision, `A₀` the prior's), not the
/// prior's own (models fitted before this rule inflate all of `σ² + φᵀΣφ` until refitted;
/// `κ = 1` under the plug-in predictive). Where the output has a noise shape (`noise_shape` in
/// its posterior), σ² is that of an answer of this mean, `σ² · (offset + |mean|)^(2·power) ·
/// level`. A dye predicted exactly 0 because every input its
/// posterior uses is 0 gets the spread of the training rows like that instead (at most `κσ²`); a
/// dye not yet trained, the mean square of its non-zero values (for a dye no training row used,
/// that of the dyes used, once in N + 1 rows), or less where every input that marked its uses is
/// 0.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"mean": [1.18, 0.02, 0.33], "variance": [0.0041, 0.0009, 0.0023]}))]
pub struct Prediction {
    pub mean: Vec<f64>,
    pub variance: Vec<f64>,
    /// Present only for a model whose first fit's residuals were heavy-tailed (more peaked than
    /// a Gaussian, with a few far off): per output, the degrees of freedom ν of a Student-t
    /// answer with this mean and variance, `mean + √(variance·(ν − 2)/ν)·t_ν`, whose central
    /// intervals are narrower than the Gaussian's up to about 92–96 % (by ν) and wider beyond;
    /// `null` where the answer is a Gaussian's (an untrained output, a mean of exactly 0). Absent
    /// from answers by the successor instrument.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub dof: Option<Vec<Option<f64>>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PredictResponse {
    #[schema(example = "cotton-reactive")]
    pub model: String,
    /// The version the predictions come from.
    #[schema(example = 13)]
    pub version: i64,
    pub predictions: Vec<Prediction>,
    /// What was accepted but looks wrong (reflectance above full scale or below 0); left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Detail>,
}

/// Predict concentrations and their variances.
#[utoipa::path(post, operation_id = "predict", path = "/v1/models/{name}/predict", tag = "predict",
    params(("name" = String, Path, description = "Model name")),
    request_body = PredictRequest,
    responses(
        (status = 200, description = "Predictions, one per row", body = PredictResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Not trained yet, or the successor named as the instrument cannot answer yet", body = ErrorBody),
        (status = 413, description = "Body or row count over the limit", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid rows", body = ErrorBody),
    ))]
pub async fn predict(
    State(app): State<AppState>,
    Path(name): Path<String>,
    RawJson(bytes): RawJson,
) -> Result<Response, ApiError> {
    let Some(model) = app.cache.serving(&app.store, &name).await? else {
        // A malformed body is reported as such whatever the model.
        check_malformed(&bytes)?;
        return Err(ApiError::not_found_model(&name));
    };
    let limit = app.limits.max_rows_per_request;
    // A request that names the successor as its instrument is read off the connection's
    // thread, as a long one is.
    let inline = bytes.len() <= INLINE_BYTES
        && (model.spec.successor.is_none() || !names_an_instrument(&bytes));
    let ((predictions, warnings), by_successor) = match (&model.coalescer, inline) {
        // A wide model's: answered together with the other small requests waiting for it.
        (Some(coalescer), true) => {
            let (x, warnings) = read_rows(&bytes, &model.spec, limit)?;
            let predictions = if x.rows() <= coalesce::MAX_REQUEST_ROWS {
                let predictions = coalescer
                    .predict(x, &app.runtime, &app.cpu, app.cache.coalesced())
                    .await
                    .map_err(|e| match e {
                        CoalesceError::Columns { .. } => {
                            ApiError::Invalid(Invalid::one("/x", e.to_string()))
                        }
                        CoalesceError::Lost => ApiError::internal(e),
                    })?;
                check_finite(&predictions, &model.spec, |row| {
                    let (predictor, read) = (
                        model.predictor.as_deref(),
                        read_rows(&bytes, &model.spec, limit),
                    );
                    predictor
                        .zip(read.ok())
                        .is_some_and(|(p, (x, _))| named_features_overflow(p, &model.spec, &x, row))
                })?;
                predictions
            } else {
                let (model, name) = (model.clone(), name.clone());
                app.cpu_bound(move || {
                    let predictor = model
                        .predictor
                        .as_deref()
                        .ok_or_else(|| not_trained(&name))?;
                    predict_checked(predictor, x, &model.spec)
                })
                .await??
            };
            ((predictions, warnings), false)
        }
        (None, true) => answer(&bytes, &model, limit, &name)?,
        (_, false) => {
            let (model, name) = (model.clone(), name.clone());
            app.cpu_bound(move || answer(&bytes, &model, limit, &name))
                .await??
        }
    };
    // A tail is the model's own predictor's: the successor's answers, mixed, have none.
    let tail = model
        .predictor
        .as_deref()
        .filter(|p| p.has_tail() && !by_successor);
    let body = PredictBody {
        model: &name,
        version: model.version,
        predictions: &predictions,
        warnings: &warnings,
        tail,
    };
    body.to_response()
}

/// The predictions for a request: by the successor's path when it names the successor as its
/// instrument (then `true` beside them), else as [`predict_rows`] reads and predicts them.
fn answer(
    bytes: &[u8],
    model: &CachedModel,
    limit: usize,
    name: &str,
) -> Result<((Predictions, Vec<Detail>), bool), ApiError> {
    match SuccessorRead::of(bytes, &model.spec, name)? {
        Some(read) => Ok((predict_successor(bytes, model, &read, limit, name)?, true)),
        None => Ok((
            predict_rows(bytes, &model.spec, limit, model.predictor.as_deref(), name)?,
            false,
        )),
    }
}

/// The predictions for a request's rows: read (the fast path, or the full parse that says
/// what is wrong), then predicted; 409 when the model is not trained yet.
fn predict_rows(
    bytes: &[u8],
    spec: &ModelSpec,
    limit: usize,
    predictor: Option<&Predictor>,
    model: &str,
) -> Result<(Predictions, Vec<Detail>), ApiError> {
    let (x, warnings) = read_rows(bytes, spec, limit)?;
    let predictions = predict_checked(predictor.ok_or_else(|| not_trained(model))?, x, spec)?;
    Ok((predictions, warnings))
}

/// A request's rows, read by the fast path, or by the full parse that says what is wrong.
fn read_rows(
    bytes: &[u8],
    spec: &ModelSpec,
    limit: usize,
) -> Result<(Rows, Vec<Detail>), ApiError> {
    let fast = match spec.spectrum {
        None => fast_rows_object(bytes, &[("x", spec.features.len())], false, limit)
            .map(|FastObject { mut rows, .. }| (rows.swap_remove(0), Vec::new())),
        Some(_) => fast_inputs(bytes, spec, limit),
    };
    match fast {
        Some(read) => Ok(read),
        // Not a plain, valid request: the full parse says what is wrong.
        None => parse_request(bytes, spec, limit),
    }
}

/// Refuses predictions that overflowed: inputs far outside any the model was trained on can
/// overflow `φᵀμ` or `φᵀΣφ`, JSON has no infinity, and a null where a number is promised would
/// break clients. The error points at the row's named features when `named_at_fault` says
/// the row's spectrum alone predicts finite, else at its spectrum.
fn check_finite(
    predictions: &Predictions,
    spec: &ModelSpec,
    named_at_fault: impl FnOnce(usize) -> bool,
) -> Result<(), ApiError> {
    let (mean, variance) = (&predictions.mean, &predictions.variance);
    if let Some(row) = (0..mean.nrows()).find(|&r| {
        (0..mean.ncols()).any(|k| !mean[(r, k)].is_finite() || !variance[(r, k)].is_finite())
    }) {
        let path = if spec.spectrum.is_none() || named_at_fault(row) {
            format!("/x/{row}")
        } else {
            format!("/spectra/values/{row}")
        };
        return Err(Invalid::one(
            path,
            "the prediction for this row overflows: its values are far outside the range \
             the model was trained on",
        )
        .into());
    }
    Ok(())
}

/// Whether row `row` of `x` predicts finite once its named features (after the spectrum's
/// bands) are set to 0: its overflow is then theirs. Run only to word an error.
fn named_features_overflow(predictor: &Predictor, spec: &ModelSpec, x: &Rows, row: usize) -> bool {
    let bands = spec.spectrum.map_or(0, |s| s.count);
    let width = x.width();
    if width <= bands {
        return false;
    }
    let mut values = x.values()[row * width..(row + 1) * width].to_vec();
    values[bands..].fill(0.0);
    let alone = Rows::from_row_major(1, width, values);
    predictor.predict(alone.as_mat()).is_ok_and(|p| {
        p.mean
            .col_iter()
            .chain(p.variance.col_iter())
            .all(|c| c.iter().all(|v| v.is_finite()))
    })
}

/// Reads `instrument` of a request read as the model's own instrument's: only `model` (or
/// nothing) is allowed; a model with a successor has read `successor` before
/// ([`SuccessorRead::of`]).
pub(super) fn own_instrument(
    fields: &serde_json::Map<String, serde_json::Value>,
    details: &mut Details,
    _: &mut Details,
) {
    match fields.get("instrument") {
        None | Some(serde_json::Value::Null) => {}
        Some(v) if v == "model" => {}
        Some(v) if v == "successor" => details.push(
            "/instrument",
            "the model has no successor instrument: an admin declares one with POST \
             …/successor",
        ),
        Some(_) => details.push(
            "/instrument",
            "must be \"model\" (the model's own instrument) or \"successor\"",
        ),
    }
}

/// Whether a body may name the instrument that read its spectra: only such a body pays for
/// reading the field before its rows. A `\u` escape anywhere may spell the name (JSON's
/// `"\u0069nstrument"` is `"instrument"`), so such a body pays too.
fn names_an_instrument(bytes: &[u8]) -> bool {
    memchr::memmem::find(bytes, b"\"instrument\"").is_some()
        || memchr::memmem::find(bytes, b"\\u").is_some()
}

/// A request's spectra read by the model's successor instrument: the specification they are
/// read with (the successor's grid and scale in place of the model's spectrum), and the
/// successor's and the model's spectra.
pub(super) struct SuccessorRead {
    pub spec: ModelSpec,
    pub successor: SpectrumSpec,
    pub own: SpectrumSpec,
}

impl SuccessorRead {
    /// What a request to a model with a successor names as its instrument (`instrument`):
    /// `None` for the model's own (the default), the way to read the successor's otherwise. A
    /// model without a successor reads its requests' `instrument` with [`own_instrument`].
    pub(super) fn of(bytes: &[u8], spec: &ModelSpec, name: &str) -> Result<Option<Self>, ApiError> {
        #[derive(Deserialize)]
        struct Named {
            instrument: Option<serde_json::Value>,
        }
        if spec.successor.is_none() || !names_an_instrument(bytes) {
            return Ok(None);
        }
        let named = serde_json::from_slice::<Named>(bytes)
            .ok()
            .and_then(|n| n.instrument);
        let instrument = match named.map(serde_json::from_value::<Instrument>) {
            None => Instrument::Model,
            Some(Ok(instrument)) => instrument,
            Some(Err(_)) => {
                return Err(Invalid::one(
                    "/instrument",
                    "must be \"model\" (the model's own instrument) or \"successor\"",
                )
                .into());
            }
        };
        if instrument == Instrument::Model {
            return Ok(None);
        }
        let (Some(successor), Some(own)) = (spec.successor, spec.spectrum) else {
            return Err(ApiError::Conflict(format!(
                "model {name} has no successor instrument (POST /v1/models/{name}/successor)"
            )));
        };
        let mut read = spec.clone();
        read.spectrum = Some(successor);
        Ok(Some(Self {
            spec: read,
            successor,
            own,
        }))
    }

    /// Rows read with [`Self::spec`] as the successor's readings on the model's scale, and
    /// their named features.
    pub(super) fn split(&self, x: &Rows) -> (Mat<f64>, Mat<f64>) {
        let q = self.successor.count;
        let factor = scale_factor(&self.successor, &self.own);
        let x = x.as_mat();
        let new = Mat::from_fn(x.nrows(), q, |i, j| x[(i, j)] * factor);
        (new, x.subcols(q, x.ncols() - q).to_owned())
    }

    /// The successor's state at the model's version: 409 before it has one.
    pub(super) fn serving<'m>(model: &'m CachedModel, name: &str) -> Result<&'m Serving, ApiError> {
        model.successor.as_deref().ok_or_else(|| {
            ApiError::Conflict(format!(
                "model {name}'s successor has learnt nothing yet: post batches with its readings"
            ))
        })
    }
}

/// The predictions for a request whose spectra the successor read, through its succession
/// ([`crate::estimator::succession::Succession::predict`]).
fn predict_successor(
    bytes: &[u8],
    model: &CachedModel,
    read: &SuccessorRead,
    limit: usize,
    name: &str,
) -> Result<(Predictions, Vec<Detail>), ApiError> {
    let (x, warnings, _) = parse_request_with(
        bytes,
        &read.spec,
        Instrument::Successor,
        limit,
        "predict",
        &["instrument"],
        |_, _, _| (),
    )?;
    let (new, features) = read.split(&x);
    let predictor = model
        .predictor
        .as_deref()
        .ok_or_else(|| not_trained(name))?;
    let serving = SuccessorRead::serving(model, name)?;
    let map = serving.map(&read.own.grid()).map_err(ApiError::Conflict)?;
    let predict = |new: MatRef<'_, f64>, features: MatRef<'_, f64>| {
        serving
            .succession
            .predict_with(predictor, serving.own_predictor(), map, new, features)
    };
    let answers = predict(new.as_ref(), features.as_ref())
        .map_err(|e| ApiError::Invalid(Invalid::one("/spectra", e.to_string())))?
        .ok_or_else(|| {
            ApiError::Conflict(format!(
                "model {name}'s successor cannot answer yet: it needs {MIN_TRANSFER_ROWS} \
                 samples read by both instruments, or a batch of its readings with outputs"
            ))
        })?;
    let outputs = model.spec.outputs.len();
    // An answer short of an output would be a fault: NaN, which the check refuses.
    let at = |i: usize, k: usize| {
        answers[i]
            .get(k)
            .map_or((f64::NAN, f64::NAN), |a| (a.mean, a.variance))
    };
    let predictions = Predictions {
        mean: Mat::from_fn(answers.len(), outputs, |i, k| at(i, k).0),
        variance: Mat::from_fn(answers.len(), outputs, |i, k| at(i, k).1),
    };
    // As on the model's own instrument: the named features are at fault when the row's reading
    // alone, with them at 0, answers finite.
    check_finite(&predictions, &model.spec, |row| {
        let alone = Mat::<f64>::zeros(1, features.ncols());
        matches!(predict(new.subrows(row, 1), alone.as_ref()), Ok(Some(answers))
            if answers.len() == 1 && answers[0].len() == outputs
                && answers[0].iter().all(|a| a.mean.is_finite() && a.variance.is_finite()))
    })?;
    Ok((predictions, warnings))
}

/// `predictor`'s predictions of rows `x`, checked to be finite.
fn predict_checked(
    predictor: &Predictor,
    x: Rows,
    spec: &ModelSpec,
) -> Result<Predictions, ApiError> {
    let predictions = predictor
        .predict(x.as_mat())
        .map_err(|e| ApiError::Invalid(Invalid::one("/x", e.to_string())))?;
    check_finite(&predictions, spec, |row| {
        named_features_overflow(predictor, spec, &x, row)
    })?;
    Ok(predictions)
}

/// A [`PredictResponse`], serialised straight from the prediction matrices: no vector per
/// row, and one buffer sized for the answer up front.
struct PredictBody<'a> {
    model: &'a str,
    version: i64,
    predictions: &'a Predictions,
    warnings: &'a [Detail],
    /// The predictor whose tail the answers carry ([`Predictor::degrees_of_freedom`]), if any.
    tail: Option<&'a Predictor>,
}

/// Bytes of JSON per predicted number, generously (`-1.2345678901234567e-100,`).
const BYTES_PER_NUMBER: usize = 26;

impl PredictBody<'_> {
    fn to_response(&self) -> Result<Response, ApiError> {
        let numbers = self.predictions.mean.nrows() * self.predictions.mean.ncols() * 2;
        let mut json = Vec::with_capacity(64 + self.model.len() + numbers * BYTES_PER_NUMBER);
        serde_json::to_writer(&mut json, self).map_err(ApiError::internal)?;
        let content_type = HeaderValue::from_static("application/json");
        Ok(([(header::CONTENT_TYPE, content_type)], json).into_response())
    }
}

impl Serialize for PredictBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (mean, variance) = (&self.predictions.mean, &self.predictions.variance);
        let fields = 3 + usize::from(!self.warnings.is_empty());
        let mut body = serializer.serialize_struct("PredictResponse", fields)?;
        body.serialize_field("model", self.model)?;
        body.serialize_field("version", &self.version)?;
        body.serialize_field(
            "predictions",
            &Seq((0..mean.nrows()).map(|r| PredictionRow {
                mean: mean.row(r),
                variance: variance.row(r),
                tail: self.tail,
            })),
        )?;
        if !self.warnings.is_empty() {
            body.serialize_field("warnings", self.warnings)?;
        }
        body.end()
    }
}

/// One [`Prediction`], borrowed from the matrices.
struct PredictionRow<'a> {
    mean: RowRef<'a, f64>,
    variance: RowRef<'a, f64>,
    tail: Option<&'a Predictor>,
}

impl Serialize for PredictionRow<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut row =
            serializer.serialize_struct("Prediction", 2 + usize::from(self.tail.is_some()))?;
        row.serialize_field("mean", &values(self.mean))?;
        row.serialize_field("variance", &values(self.variance))?;
        if let Some(tail) = self.tail {
            let mean = self.mean;
            let dof = (0..mean.ncols()).map(move |k| tail.degrees_of_freedom(k, mean[k]));
            row.serialize_field("dof", &Seq(dof))?;
        }
        row.end()
    }
}

/// The values of a matrix row, as a sequence.
fn values(row: RowRef<'_, f64>) -> Seq<impl Iterator<Item = f64> + Clone + '_> {
    Seq((0..row.ncols()).map(move |k| row[k]))
}

/// A sequence serialised from an iterator (cloned, since serialising takes `&self`).
struct Seq<I>(I);

impl<I: Iterator<Item = T> + Clone, T: Serialize> Serialize for Seq<I> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}

/// The rows of a predict request that the fast path did not accept (which may name the model's
/// own `instrument`), every problem reported with its path.
pub(super) fn parse_request(
    bytes: &[u8],
    spec: &ModelSpec,
    limit: usize,
) -> Result<(Rows, Vec<Detail>), ApiError> {
    parse_request_with(
        bytes,
        spec,
        Instrument::Model,
        limit,
        "predict",
        &["instrument"],
        own_instrument,
    )
    .map(|(x, warnings, ())| (x, warnings))
}

/// [`parse_request`] for a body that may also hold the fields `extra`, which `read` parses
/// (reporting its problems beside those of the rows); a refusal says "invalid `request`
/// request".
pub(super) fn parse_request_with<T>(
    bytes: &[u8],
    spec: &ModelSpec,
    instrument: Instrument,
    limit: usize,
    request: &str,
    extra: &[&str],
    read: impl FnOnce(&serde_json::Map<String, serde_json::Value>, &mut Details, &mut Details) -> T,
) -> Result<(Rows, Vec<Detail>, T), ApiError> {
    // `y` is read as rows too: a predict request has none, and one sent is an unknown field
    // whose size is bounded like the rest.
    let mut body = parse_body(bytes, &row_fields(spec), limit)?;
    let serde_json::Value::Object(fields) = body.value() else {
        let rows = if spec.spectrum.is_some() {
            "\"spectra\""
        } else {
            "\"x\""
        };
        return Err(Invalid::one("", format!("the body must be a JSON object with {rows}")).into());
    };
    let mut details = Details::default();
    for key in fields
        .keys()
        .filter(|k| k.as_str() != "spectra" && !extra.contains(&k.as_str()))
    {
        details.push(format!("/{}", pointer_token(key)), "unknown field");
    }
    let mut warnings = Details::default();
    let extras = read(fields, &mut details, &mut warnings);
    if body.take_rows("/y").is_some() {
        details.push("/y", "unknown field");
    }
    if body.has_no_rows("/x") {
        details.push("/x", "needs at least one row");
    }
    let x = parse_inputs(&mut body, spec, instrument, &mut details, &mut warnings);
    details.finish(&format!("invalid {request} request"))?;
    let x = x.ok_or_else(|| Invalid::one("/x", "invalid rows"))?;
    Ok((x, warnings.into_list(), extras))
}

#[cfg(test)]
mod tests {
    use faer::Mat;

    use super::*;
    use crate::domain::spectrum::test_spec;

    /// A spectral request the fast path takes reads as the full parse reads it: the same bits
    /// of every input (resampled where its grid is not the model's), the same warnings at the
    /// same paths; a request it does not take, valid or not, is left to the full parse.
    #[test]
    fn spectra_read_fast_as_the_full_parse_reads_them() {
        let taken = [
            (
                "fraction",
                &[][..],
                r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}}"#,
            ),
            (
                "fraction",
                &[],
                r#" { "spectra" : { "values" : [[0.1,0.25,1e-1,4E-1],[1,0,0.5,0.30000000000000004]] , "interval_nm" : 10.0 , "start_nm" : 4e2 } } "#,
            ),
            (
                "percent",
                &[],
                r#"{"spectra": {"start_nm": 395, "interval_nm": 5, "values": [[10, 20, 104.25, 30, 40, 50, 60, 70, 101, 80]]}}"#,
            ),
            (
                "percent",
                &["greige", "weight"],
                r#"{"x": [[1, 0.5], [0, 2]], "spectra": {"start_nm": 400, "interval_nm": 10, "values": [[1, 2, 3, 4], [5, 6, 7, 800]]}}"#,
            ),
            (
                "absorbance",
                &[],
                r#"{"spectra": {"start_nm": 400, "interval_nm": 7.5, "values": [[0.5, 1.5, 2.5, 3.5, 4.5]]}}"#,
            ),
        ];
        for (scale, features, body) in taken {
            let spec = test_spec(scale, features);
            let fast = fast_inputs(body.as_bytes(), &spec, 100).expect(body);
            let full = parse_request(body.as_bytes(), &spec, 100).expect(body);
            assert_eq!(fast.0.bits(), full.0.bits(), "{body}");
            assert_eq!(fast.1, full.1, "{body}");
            assert_eq!(
                read_rows(body.as_bytes(), &spec, 100).expect(body).1,
                full.1
            );
        }
        // Valid, but more than the fast path takes.
        let spec = test_spec("fraction", &[]);
        let valid = [
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}, "instrument": "main"}"#,
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}, "x": [[]]}"#,
        ];
        for body in valid {
            assert!(fast_inputs(body.as_bytes(), &spec, 100).is_none(), "{body}");
        }
        // Invalid: the fast path leaves them to the full parse, which says why.
        let invalid = [
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3]]}}"#,
            r#"{"spectra": {"start_nm": 410, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}}"#,
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4], [0.1]]}}"#,
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}}"#,
            r#"{"spectra": {"start_nm": 400, "values": [[0.1, 0.2, 0.3, 0.4]]}}"#,
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": []}}"#,
            r#"{"spectra": {"start_nm": 400, "interval_nm": 0, "values": [[0.1, 0.2, 0.3, 0.4]]}}"#,
            r#"{"spectra": {"start_nm": "400", "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}}"#,
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}, "y": [[1]]}"#,
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}} x"#,
            r#"{}"#,
        ];
        for body in invalid {
            assert!(fast_inputs(body.as_bytes(), &spec, 100).is_none(), "{body}");
            assert!(read_rows(body.as_bytes(), &spec, 100).is_err(), "{body}");
        }
        // A model with named features needs them beside the spectra, as many rows.
        let spec = test_spec("fraction", &["greige"]);
        for body in [
            r#"{"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}}"#,
            r#"{"x": [[1], [2]], "spectra": {"start_nm": 400, "interval_nm": 10, "values": [[0.1, 0.2, 0.3, 0.4]]}}"#,
        ] {
            assert!(fast_inputs(body.as_bytes(), &spec, 100).is_none(), "{body}");
            assert!(read_rows(body.as_bytes(), &spec, 100).is_err(), "{body}");
        }
    }

    /// The direct serialisation writes exactly what the documented response types would.
    /// With a tail, each row carries `dof`: ν where the mean is not 0, `null` where it is.
    #[test]
    fn body_is_the_documented_response() {
        use crate::estimator::{Basis, BatchStatistics, ModelConfig, ModelState, Transform};
        let predictions = Predictions {
            mean: Mat::from_fn(3, 2, |r, k| {
                if (r, k) == (2, 1) {
                    0.0
                } else {
                    (r as f64 - 1.3) * 0.1f64.powi(k as i32 * 7)
                }
            }),
            variance: Mat::from_fn(3, 2, |r, k| 1.0 / 3.0 + (r * k) as f64 * 1e300),
        };
        let basis = Basis::new(1, true, Transform::Identity);
        let x = Mat::from_fn(40, 1, |i, _| i as f64 / 40.0);
        let y = Mat::from_fn(40, 2, |i, k| {
            (k + 1) as f64 * x[(i, 0)] + (i as f64 * 0.7).sin()
        });
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).expect("rows");
        let tail = crate::estimator::tail::Tail::new(3.0).expect("a tail");
        let state = ModelState::fit(&ModelConfig::new(basis, 2), stats)
            .expect("a state")
            .with_tail(Some(tail));
        let predictor = Predictor::new(&state);
        for tail in [None, Some(&predictor)] {
            let direct = serde_json::to_string(&PredictBody {
                model: "cotton-reactive",
                version: 13,
                predictions: &predictions,
                warnings: &[],
                tail,
            })
            .expect("serialise");
            let documented = serde_json::to_string(&PredictResponse {
                model: "cotton-reactive".into(),
                version: 13,
                predictions: (0..3)
                    .map(|r| Prediction {
                        mean: predictions.mean.row(r).iter().copied().collect(),
                        variance: predictions.variance.row(r).iter().copied().collect(),
                        dof: tail.map(|_| {
                            (0..2)
                                .map(|k| (predictions.mean[(r, k)] != 0.0).then_some(3.0))
                                .collect()
                        }),
                    })
                    .collect(),
                warnings: Vec::new(),
            })
            .expect("serialise");
            assert_eq!(direct, documented);
            assert!(direct.contains("\"variance\":[0.3333333333333333,0.3333333333333333]"));
            assert_eq!(
                direct.contains("\"dof\":[3.0,null]"),
                tail.is_some(),
                "{direct}"
            );
        }
    }
}
