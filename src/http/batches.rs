//! `/v1/models/{name}/batches`: durable, idempotent ingestion and batch status.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::{ADMIN, INGEST};
use super::error::{ApiError, ErrorBody};
use super::extract::model_name;
use super::extract::{BatchBody, parse_body};
use super::extract::{Path, once_each};
use super::predict::Spectra;
use super::routes::Routes;
use crate::domain::{
    BatchId, CsvError, Detail, EncodedBatch, Invalid, ModelName, ModelSpec, NewBatch, Successor,
    row_fields,
};
use crate::estimator::{BatchStatistics, EstimatorError, codec};
use crate::store::{BatchRecord, BatchStatus, ModelRecord, Review, StoreError};
use crate::successor::SuccessorBatch;
use strum::VariantArray;
/// The routes of batches, with the access each needs.
pub fn routes(routes: Routes) -> Routes {
    routes
        .add(INGEST, routes!(ingest))
        .add(INGEST, routes!(list))
        .add(INGEST, routes!(status))
        .add(ADMIN, routes!(release))
        .add(ADMIN, routes!(reject))
}

/// Body of `POST /v1/models/{name}/batches`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({
    "batch_id": "lot-2026-11-22-0042",
    "x": [[1.0, 0.412, 0.388, 0.351], [1.0, 0.275, 0.262, 0.249]],
    "y": [[1.2, 0.0, 0.35], [2.5, 0.8, 0.0]]
}))]
pub struct BatchRequest {
    /// The client's id for the batch; the `Idempotency-Key` header may carry it instead.
    /// Without either, the service assigns one (and a retry is then a new batch).
    pub batch_id: Option<String>,
    /// Input rows, each with one finite number per named feature. May be left out when the
    /// model has a spectrum and no named features.
    #[schema(min_items = 1)]
    pub x: Option<Vec<Vec<f64>>>,
    /// One reflectance spectrum per row, for a model that declares a spectrum. May be left out
    /// in a batch of a successor instrument's readings alone.
    pub spectra: Option<Spectra>,
    /// The successor instrument's readings of the same samples, one per row, on its scale and
    /// any grid that covers its own, for a model given one (`POST /v1/models/{name}/successor`):
    /// with `spectra`, the overlap (both instruments read each sample); alone, the successor's
    /// rows, which only its own model learns.
    pub successor: Option<Spectra>,
    /// Output rows (concentrations used), one per input row, one number per output.
    #[schema(min_items = 1)]
    pub y: Vec<Vec<f64>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchAccepted {
    #[schema(example = "lot-2026-11-22-0042")]
    pub batch_id: String,
    /// `queued` for a new batch; a replayed batch shows its current status.
    #[schema(example = "queued")]
    pub status: BatchStatus,
    #[schema(example = 2)]
    pub rows: i32,
    /// What was accepted but looks wrong (reflectance above full scale or below 0; a feature or
    /// output that varies too little beside its size for double precision); left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Detail>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchView {
    #[schema(example = "lot-2026-11-22-0042")]
    pub batch_id: String,
    /// `queued`, `folded`, `rejected` or `held` (for review: see the model's
    /// `drift_threshold`).
    #[schema(example = "folded")]
    pub status: BatchStatus,
    #[schema(example = 1028)]
    pub rows: i32,
    #[schema(example = "2026-11-21T08:15:02.417Z")]
    pub received_at: DateTime<Utc>,
    /// When the batch was folded (null unless `folded`).
    #[schema(example = "2026-11-21T08:15:02.489Z")]
    pub folded_at: Option<DateTime<Utc>>,
    /// When the batch was rejected (null unless `rejected`).
    #[schema(example = json!(null))]
    pub rejected_at: Option<DateTime<Utc>>,
    /// The version the batch was folded into.
    #[schema(example = 13)]
    pub version: Option<i64>,
    /// Why the batch was rejected.
    pub error: Option<String>,
    /// Per output, how surprising the batch was to the posterior it met before it was folded
    /// (or held): `z = RSS / (N·σ² + tr(ΣG))` with RSS its residual sum of squares under the
    /// posterior mean, about 1 when the batch agrees with the model. Null until the folder
    /// has seen the batch, and for batches of the first fit; null for an output not trained
    /// then. A surprise beyond double precision reads as the largest double, 1.797…e308.
    #[schema(example = json!([0.94, 1.12, null]))]
    pub surprise: Option<Vec<Option<f64>>>,
    /// When retention removed the batch's raw rows (`retention.raw_rows_days`); null while
    /// they are kept. Its statistics stay, so the versions it is part of stay usable.
    #[schema(example = json!(null))]
    pub rows_purged_at: Option<DateTime<Utc>>,
    /// What a queued batch waits for, when it waits for more than the folder's next turn: a
    /// model's first fit runs once `first_fit_rows` rows are queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "the model's first fit, which runs once 10 rows are queued (4 are)")]
    pub waiting_for: Option<String>,
}

impl From<BatchRecord> for BatchView {
    fn from(b: BatchRecord) -> Self {
        let (folded, rejected) = (
            b.status == BatchStatus::Folded,
            b.status == BatchStatus::Rejected,
        );
        Self {
            batch_id: b.batch_id,
            status: b.status,
            rows: b.rows,
            received_at: b.received_at,
            // The store keeps one decision time: it is a fold's only for a folded batch.
            folded_at: b.folded_at.filter(|_| folded),
            rejected_at: b.folded_at.filter(|_| rejected),
            version: b.version,
            error: b.error,
            surprise: b.surprise,
            rows_purged_at: b.rows_purged_at,
            waiting_for: None,
        }
    }
}

/// Queue a batch of observations, as JSON or as CSV.
///
/// CSV (`text/csv`): a header naming each of the model's features and outputs once, in any
/// order, then one row per observation; the batch id comes from the `Idempotency-Key` header.
/// A successor instrument's readings are columns `successor:<λ>nm`, beside the model's own
/// bands (the overlap) or in their place. The same rows sent as JSON or CSV are the same batch. The answer leaves only once the batch (raw rows and statistics) is committed. Posting the
/// same `batch_id` (or `Idempotency-Key`) again with the same content answers with the stored
/// batch and adds nothing, also after the model grew, in the shape it had when the batch was
/// stored; with different content, 409.
#[utoipa::path(post, operation_id = "ingest_batch", path = "/v1/models/{name}/batches", tag = "batches",
    params(
        ("name" = String, Path, description = "Model name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Batch id, if not in the body (two headers must name the same id)"),
    ),
    request_body(content(
        (BatchRequest = "application/json"),
        (String = "text/csv", example = "R400,R410,R420,red_195,yellow_145\n0.41,0.39,0.35,1.2,0.3\n0.28,0.26,0.25,2.5,0.8\n"),
    )),
    responses(
        (status = 202, description = "Stored and queued (or replayed)", body = BatchAccepted,
            headers(("idempotent-replayed" = String, description = "`true` when the batch \
                was stored before (a retry with the same id and content): nothing was added"))),
        (status = 400, description = "Malformed JSON or CSV", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Batch id reused with different content", body = ErrorBody),
        (status = 413, description = "Body or row count over the limit", body = ErrorBody),
        (status = 415, description = "Neither JSON nor CSV", body = ErrorBody),
        (status = 422, description = "Invalid rows, or Idempotency-Key headers naming different ids", body = ErrorBody),
        (status = 503, description = "Database unavailable", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(model = %name))]
pub async fn ingest(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: BatchBody,
) -> Result<impl IntoResponse, ApiError> {
    let name = model_name(&name)?;
    let mut keys = headers.get_all("idempotency-key").iter();
    let key = match keys.next() {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| Invalid::one("", "the Idempotency-Key header is not ASCII"))?
                .to_owned(),
        ),
    };
    // Which of two ids names the batch would be a guess, and a retry that sent the other first
    // would store the rows again; the same id twice names one batch.
    if let Some(other) = keys.find(|v| Some(v.as_bytes()) != key.as_deref().map(str::as_bytes)) {
        return Err(Invalid::one(
            "",
            format!(
                "the Idempotency-Key header is given twice with different ids ({:?} and {:?}): \
                 send one",
                key.unwrap_or_default(),
                String::from_utf8_lossy(other.as_bytes())
            ),
        )
        .into());
    }
    let (accepted, replayed) = accept(&app, &name, body, key).await?;
    let mut response = (StatusCode::ACCEPTED, Json(accepted)).into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// The rows of a batch of successor readings as the folder learns them, kept in place of
/// statistics ([`SuccessorBatch`]).
fn successor_rows(batch: &NewBatch, successor: &Successor, spec: &ModelSpec) -> SuccessorBatch {
    let (n, width) = (batch.x.rows(), batch.x.width());
    let bands = if successor.old_read {
        spec.spectrum.map_or(0, |s| s.count)
    } else {
        0
    };
    let (mut old, mut features) = (Vec::with_capacity(n * bands), Vec::new());
    for row in batch.x.values().chunks_exact(width.max(1)).take(n) {
        old.extend_from_slice(&row[..bands]);
        features.extend_from_slice(&row[bands..]);
    }
    SuccessorBatch {
        rows: n,
        new: successor.readings.values().to_vec(),
        features,
        old: successor.old_read.then_some(old),
        outputs: batch.y.values().to_vec(),
    }
}

/// Reads a batch for model `name` (its `Idempotency-Key` header, if any, as `key`), stores it
/// and queues it: what ingest answers, and whether the batch was stored before (a retry with
/// the same id and content, which adds nothing).
pub(super) async fn accept(
    app: &AppState,
    name: &ModelName,
    body: BatchBody,
    key: Option<String>,
) -> Result<(BatchAccepted, bool), ApiError> {
    let cached = app.cache.get(name.as_str()).map(|m| (m.id, m.spec.clone()));
    let (model_id, spec) = match cached {
        Some(model) => model,
        // Created on another replica since the cache last synced.
        None => current_model(app, name).await?,
    };
    let limit = app.limits.max_rows_per_request;
    let parse_spec = spec.clone();
    let (read, body, key) = app
        .cpu_bound(move || {
            let read = read_batch(&body, &parse_spec, key.as_deref(), limit);
            (read, body, key)
        })
        .await?;
    let (batch, encoded, statistics) = match read {
        Ok(read) => {
            // The body's share of the memory budget goes back before the store is waited on.
            drop(body);
            read
        }
        // A retry of a batch stored before the model grew is in the shape of then.
        Err(ApiError::Invalid(invalid)) if !spec.earlier.is_empty() => {
            return match replay_earlier_shape(app, model_id, spec, body, key).await? {
                Some(replayed) => Ok((replayed, true)),
                None => Err(ApiError::Invalid(invalid)),
            };
        }
        Err(e) => return Err(e),
    };
    let ingested = match app
        .store
        .insert_batch(model_id, &batch, &encoded, &statistics)
        .await
    {
        // The cached model was deleted; a model of the same name may exist now, with another
        // specification: the batch was validated against the old one.
        Err(StoreError::NotFound(_)) => {
            let (id, current) = current_model(app, name).await?;
            if current != spec {
                return Err(ApiError::Conflict(format!(
                    "model {name} was replaced while the batch was being read; post it again"
                )));
            }
            app.store
                .insert_batch(id, &batch, &encoded, &statistics)
                .await?
        }
        other => other?,
    };
    let b = ingested.batch;
    if !ingested.replayed {
        app.metrics.batch_accepted(name.as_str());
    }
    Ok((
        BatchAccepted {
            batch_id: b.batch_id,
            status: b.status,
            rows: b.rows,
            warnings: batch.warnings,
        },
        ingested.replayed,
    ))
}

/// Reads a batch `body` for a model of `spec`: the batch, its encoding, and the statistics
/// to store with it (empty when its rows are smaller, and are kept instead).
fn read_batch(
    body: &BatchBody,
    spec: &ModelSpec,
    key: Option<&str>,
    limit: usize,
) -> Result<(NewBatch, EncodedBatch, Vec<u8>), ApiError> {
    let batch = parse_batch(body, spec, key, limit)?;
    let csv = matches!(body, BatchBody::Csv(_));
    batch.underflow(spec, csv)?;
    let encoded = batch.encode();
    let unlearnable = |e| match e {
        EstimatorError::NonFinite(_) => batch.overflow(spec, csv),
        e => Invalid::one("", format!("the batch cannot be learnt: {e}")),
    };
    let config = spec.config();
    if let Some(successor) = &batch.successor {
        // Kept whole for the folder, which learns it with the model's state then.
        let rows = successor_rows(&batch, successor, spec);
        rows.learnable(&config).map_err(unlearnable)?;
        return Ok((batch, encoded, rows.encode()));
    }
    let stats = BatchStatistics::from_row_major(
        &config.basis,
        batch.rows(),
        batch.x.values(),
        batch.y.values(),
    )
    .map_err(unlearnable)?;
    // Statistics have p² entries whatever the rows: a batch of fewer rows than that keeps
    // only its rows, and the folder forms its statistics from them (the same bits:
    // `from_row_major` on the same values).
    let statistics = codec::encode_statistics(&stats);
    let statistics = if statistics.len() <= encoded.x.len() + encoded.y.len() {
        statistics
    } else {
        Vec::new()
    };
    Ok((batch, encoded, statistics))
}

/// Parses a batch `body`, JSON or CSV, for a model of `spec`.
fn parse_batch(
    body: &BatchBody,
    spec: &ModelSpec,
    key: Option<&str>,
    limit: usize,
) -> Result<NewBatch, ApiError> {
    let mut batch = match body {
        BatchBody::Json(bytes) => match NewBatch::parse_fast(bytes, spec, key, limit) {
            Some(batch) => batch,
            // Not a plain, valid batch: the full parse says what is wrong.
            None => {
                let body = parse_body(bytes, &row_fields(spec), limit)?;
                NewBatch::parse(body, spec, key)?
            }
        },
        BatchBody::Csv(bytes) => {
            NewBatch::parse_csv(bytes, spec, key, limit).map_err(|e| match e {
                CsvError::Malformed(message) => ApiError::MalformedCsv(message),
                CsvError::Invalid(invalid) => ApiError::Invalid(invalid),
                too_many @ CsvError::TooManyRows(_) => {
                    ApiError::PayloadTooLarge(too_many.to_string())
                }
            })?
        }
    };
    batch.flag_narrow_columns(spec);
    batch.flag_negative_doses(spec);
    batch.flag_named_reflectances(spec);
    batch.flag_black_rows(spec, matches!(body, BatchBody::Csv(_)));
    Ok(batch)
}

/// A batch `body` that does not fit the model's shape now, read in the shapes the model had
/// before it grew (newest first): the stored batch when one of them reads it and a batch of
/// that id and content was stored (a retry from a client that has not heard of the new
/// columns), a conflict when one of that id holds other content, `None` when none was stored.
async fn replay_earlier_shape(
    app: &AppState,
    model_id: i64,
    spec: ModelSpec,
    body: BatchBody,
    key: Option<String>,
) -> Result<Option<BatchAccepted>, ApiError> {
    let limit = app.limits.max_rows_per_request;
    let earlier = app
        .cpu_bound(move || {
            spec.earlier.iter().rev().find_map(|&shape| {
                let then = spec.in_shape(shape)?;
                let batch = parse_batch(&body, &then, key.as_deref(), limit).ok()?;
                let hash = batch.encode().content_hash;
                Some((batch, hash))
            })
        })
        .await?;
    let Some((batch, hash)) = earlier else {
        return Ok(None);
    };
    let stored = app
        .store
        .replay_batch(model_id, batch.batch_id.as_str(), &hash)
        .await?;
    Ok(stored.map(|ingested| BatchAccepted {
        batch_id: ingested.batch.batch_id,
        status: ingested.batch.status,
        rows: ingested.batch.rows,
        warnings: batch.warnings,
    }))
}

async fn current_model(app: &AppState, name: &ModelName) -> Result<(i64, ModelSpec), ApiError> {
    app.store
        .model(name)
        .await?
        .map(|m| (m.id, m.spec))
        .ok_or_else(|| ApiError::not_found_model(name.as_str()))
}

/// A batch's status.
#[utoipa::path(get, operation_id = "get_batch", path = "/v1/models/{name}/batches/{batch_id}", tag = "batches",
    params(
        ("name" = String, Path, description = "Model name"),
        ("batch_id" = String, Path, description = "Batch id"),
    ),
    responses(
        (status = 200, description = "The batch", body = BatchView),
        (status = 404, description = "No such model or batch", body = ErrorBody),
    ))]
pub async fn status(
    State(app): State<AppState>,
    Path((name, batch_id)): Path<(String, String)>,
) -> Result<Json<BatchView>, ApiError> {
    let name = model_name(&name)?;
    let model = app
        .store
        .model(&name)
        .await?
        .ok_or_else(|| ApiError::not_found_model(name.as_str()))?;
    let batch = app
        .store
        .batch(model.id, &batch_id)
        .await?
        .ok_or_else(|| no_batch(&name, &batch_id))?;
    // The folder commits before it updates the cache: a client that reads "folded" here must
    // then get predictions of that version (or a later one) from this replica.
    if let Some(version) = batch.version
        && app
            .cache
            .get(name.as_str())
            .is_none_or(|cached| cached.id != model.id || cached.version < version)
    {
        app.cache.sync_model(&app.store, model.id).await?;
    }
    let mut view = BatchView::from(batch);
    view.waiting_for = waiting_for(&view, &model);
    Ok(Json(view))
}

/// Why a queued batch of a model that has no posterior yet is still queued.
fn waiting_for(batch: &BatchView, model: &ModelRecord) -> Option<String> {
    let first = model.spec.first_fit_rows;
    (batch.status == BatchStatus::Queued
        && model.version == 0
        && (model.pending_rows as u64) < first)
        .then(|| {
            format!(
                "the model's first fit, which runs once {first} rows are queued ({} are); \
                 post more rows, or lower its \"first_fit_rows\" (PATCH /v1/models/{})",
                model.pending_rows, model.spec.name
            )
        })
}

/// Query of `GET /v1/models/{name}/batches` (documentation: the handler reads the query
/// itself, so that a bad value is answered in the API's error format).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BatchFilter {
    /// Only batches with this status (`queued`, `folded`, `rejected`, `held`).
    pub status: Option<BatchStatus>,
    /// At most this many, newest first (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchList {
    pub batches: Vec<BatchView>,
}

/// A model's batches, newest first: `?status=held` lists those waiting for review.
#[utoipa::path(get, operation_id = "list_batches", path = "/v1/models/{name}/batches", tag = "batches",
    params(("name" = String, Path, description = "Model name"), BatchFilter),
    responses(
        (status = 200, description = "The batches, newest first", body = BatchList),
        (status = 400, description = "Unknown status, limit out of range, or either given twice", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
    ))]
pub async fn list(
    State(app): State<AppState>,
    Path(name): Path<String>,
    query: Result<
        axum::extract::Query<Vec<(String, String)>>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Result<Json<BatchList>, ApiError> {
    let name = model_name(&name)?;
    let axum::extract::Query(query) =
        query.map_err(|e| ApiError::InvalidQuery(format!("the query is not readable: {e}")))?;
    once_each(&query, &["status", "limit"])?;
    let mut filter = BatchFilter {
        status: None,
        limit: None,
    };
    for (key, value) in query {
        match key.as_str() {
            "status" => match value.parse() {
                Ok(status) => filter.status = Some(status),
                Err(_) => {
                    let names: Vec<&str> =
                        BatchStatus::VARIANTS.iter().map(|s| s.as_str()).collect();
                    return Err(ApiError::InvalidQuery(format!(
                        "status must be one of {}, found {value:?}",
                        names.join(", ")
                    )));
                }
            },
            "limit" => match value.parse::<i64>() {
                Ok(n) if (1..=1000).contains(&n) => filter.limit = Some(n),
                _ => {
                    return Err(ApiError::InvalidQuery(format!(
                        "limit must be an integer from 1 to 1000, found {value:?}"
                    )));
                }
            },
            _ => {}
        }
    }
    let model = app
        .store
        .model(&name)
        .await?
        .ok_or_else(|| ApiError::not_found_model(name.as_str()))?;
    let batches = app
        .store
        .list_batches(model.id, filter.status, filter.limit.unwrap_or(100))
        .await?;
    Ok(Json(BatchList {
        batches: batches
            .into_iter()
            .map(|batch| {
                let mut view = BatchView::from(batch);
                view.waiting_for = waiting_for(&view, &model);
                view
            })
            .collect(),
    }))
}

/// Release a batch held for review: it goes back into the queue and the next fold learns it,
/// whatever its surprise (after the batches already queued).
#[utoipa::path(post, operation_id = "release_batch", path = "/v1/models/{name}/batches/{batch_id}/release", tag = "batches",
    params(
        ("name" = String, Path, description = "Model name"),
        ("batch_id" = String, Path, description = "Batch id"),
    ),
    responses(
        (status = 200, description = "Released: queued again", body = BatchView),
        (status = 404, description = "No such model or batch", body = ErrorBody),
        (status = 409, description = "The batch is not held", body = ErrorBody),
    ))]
#[tracing::instrument(skip(app))]
pub async fn release(
    State(app): State<AppState>,
    Path((name, batch_id)): Path<(String, String)>,
) -> Result<Json<BatchView>, ApiError> {
    review(&app, &name, &batch_id, Review::Release).await
}

/// Reject a batch held for review: it is never learnt.
#[utoipa::path(post, operation_id = "reject_batch", path = "/v1/models/{name}/batches/{batch_id}/reject", tag = "batches",
    params(
        ("name" = String, Path, description = "Model name"),
        ("batch_id" = String, Path, description = "Batch id"),
    ),
    responses(
        (status = 200, description = "Rejected", body = BatchView),
        (status = 404, description = "No such model or batch", body = ErrorBody),
        (status = 409, description = "The batch is not held", body = ErrorBody),
    ))]
#[tracing::instrument(skip(app))]
pub async fn reject(
    State(app): State<AppState>,
    Path((name, batch_id)): Path<(String, String)>,
) -> Result<Json<BatchView>, ApiError> {
    review(&app, &name, &batch_id, Review::Reject).await
}

async fn review(
    app: &AppState,
    name: &str,
    batch_id: &str,
    review: Review,
) -> Result<Json<BatchView>, ApiError> {
    let name = model_name(name)?;
    let (model_id, _) = current_model(app, &name).await?;
    let batch = app
        .store
        .review_batch(model_id, batch_id, review)
        .await?
        .ok_or_else(|| no_batch(&name, batch_id))?;
    tracing::info!(model = %name, batch_id, ?review, "held batch reviewed");
    Ok(Json(batch.into()))
}

/// The answer to a request for a batch the model does not have; where no batch could have the
/// id (a client's typo or a truncated link), it says why.
fn no_batch(name: &ModelName, batch_id: &str) -> ApiError {
    let mut message = format!("model {name} has no batch {batch_id:?}");
    if BatchId::parse(batch_id).is_err() {
        message = format!("{message}: a batch id {}", BatchId::rule());
    }
    ApiError::NotFound(message)
}
