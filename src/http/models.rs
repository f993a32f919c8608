//! `/v1/models`: create, list, read, change the settings of, delete, and the posterior of a
//! model.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::{ADMIN, ANY};
use super::error::{ApiError, ErrorBody};
use super::extract::JsonBody;
use super::extract::Path;
use super::extract::model_name;
use super::routes::Routes;
use crate::cache::{CachedModel, PosteriorCache};
use crate::domain::model::{ForgettingSpec, PriorName};
use crate::domain::{
    ModelName, ModelSpec, SaundersonSpec, SpectrumSpec, TransformName, UpdateName,
};
use crate::estimator::succession::Succession;
use crate::estimator::transfer::MIN_TRANSFER_ROWS;
use crate::store::{ModelLock, ModelRecord, Store};
/// The routes of models, with the access each needs.
pub fn routes(routes: Routes) -> Routes {
    routes
        .add(ANY, routes!(list))
        .add(ADMIN, routes!(create))
        .add(ANY, routes!(read))
        .add(ADMIN, routes!(delete))
        .add(ADMIN, routes!(update))
        .add(ANY, routes!(posterior))
        .add(ANY, routes!(relevance))
}

/// Body of `POST /v1/models`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "cotton-reactive",
    "features": ["fabric_cotton", "R400", "R410", "R420"],
    "outputs": ["reactive_red_195", "reactive_yellow_145", "reactive_blue_222"],
    "intercept": true,
    "transform": "none",
    "update": "one_step",
    "forgetting": null,
    "prior_variance": 1.0
}))]
pub struct CreateModel {
    /// A slug: `[a-z0-9][a-z0-9_-]*`, at most 63 characters.
    #[schema(pattern = "^[a-z0-9][a-z0-9_-]{0,62}$")]
    pub name: String,
    /// A reflectance spectrum: its bands (named `<λ>nm`, e.g. `400nm`) are the model's first
    /// inputs. Requests may send spectra on any regular grid that covers this one.
    #[serde(default)]
    pub spectrum: Option<SpectrumSpec>,
    /// Named input features (lab results, fabric codes), distinct, each 1 to 200 characters,
    /// none named `intercept` beside the model's intercept. Optional with a spectrum; without
    /// one, empty only with an intercept (the model then learns each output's mean). With `p`
    /// basis functions (the spectrum's bands, the features, the intercept) and `m` outputs,
    /// `p² · m` may be at most 33,554,432 (2²⁵).
    #[serde(default)]
    #[schema(max_items = 2048)]
    pub features: Option<Vec<String>>,
    /// Output names (dyes), distinct and different from the features, each 1 to 200
    /// characters.
    #[schema(min_items = 1, max_items = 1024)]
    pub outputs: Vec<String>,
    /// Append a constant basis function (default true).
    #[serde(default)]
    pub intercept: Option<bool>,
    /// Basis transform of the spectrum (default `none`). `kubelka_munk` reads each band's
    /// reflectance R as K/S = (1 − R)²/(2R); without a declared spectrum it applies to every
    /// feature, read as a fraction. `saunderson` first takes out the light the fabric's surface
    /// reflects, R_i = (R − k₁)/(1 − k₁ − k₂ + k₂R), then reads R_i as Kubelka–Munk does: for
    /// deep shades, whose readings the surface's reflection bends.
    #[serde(default)]
    pub transform: Option<TransformName>,
    /// Saunderson's coefficients, only with `"transform": "saunderson"` (default k₁ 0.04,
    /// k₂ 0.6).
    #[serde(default)]
    pub saunderson: Option<SaundersonSpec>,
    /// Update method after the first fit (default `one_step`: one Bayesian step per batch, the
    /// hyperparameters fitted again once an output's rows have grown by a quarter since their
    /// last fit; `refit`: Algorithm 2 on every batch).
    #[serde(default)]
    pub update: Option<UpdateName>,
    /// Exponential forgetting (default none).
    #[serde(default)]
    pub forgetting: Option<ForgettingSpec>,
    /// Starting prior variance of every basis function under ARD (default 1), from 1e-100 to
    /// 1e100.
    #[serde(default)]
    #[schema(minimum = 1e-100, maximum = 1e100)]
    pub prior_variance: Option<f64>,
    /// Prior family of the weights (default `auto`): `ard` (one variance per basis function),
    /// `ridge` (one shared variance of the basis functions, in their units), `smooth` (a
    /// Gaussian-process prior along a declared spectrum's wavelengths) or `auto` (the evidence
    /// chooses per output). The intercept is never shrunk, except that of an output that is 0 in
    /// most rows under `ard` or `auto` (a dye most recipes do not use), which the evidence may
    /// prune.
    #[serde(default)]
    pub prior: Option<PriorName>,
    /// Rows queued before the first fit runs (default: the number of basis functions, at most
    /// 10).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub first_fit_rows: Option<u64>,
    /// Hold a batch for review, instead of folding it, when its surprise to the posterior
    /// (largest over the outputs; ≈ 1 for a batch that agrees with the model) exceeds this.
    /// Off by default.
    #[serde(default)]
    #[schema(exclusive_minimum = 0.0, example = 25.0)]
    pub drift_threshold: Option<f64>,
}

/// Body of `PATCH /v1/models/{name}`: the settings to change; a field left out stays as it is.
/// Every other field of the specification is fixed once the model exists.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"drift_threshold": 40}))]
pub struct ModelSettings {
    /// Hold a batch for review when its surprise exceeds this; `null` holds none. Batches
    /// already held stay held until released or rejected, and folded ones stay folded: the
    /// threshold judges the batches folded from then on.
    #[schema(exclusive_minimum = 0.0, nullable, example = 40.0)]
    pub drift_threshold: Option<f64>,
    /// Rows queued before the first fit runs, on a model not trained yet (a trained model's
    /// first fit has run: `409`). The rows queued already count: a number they reach is fitted
    /// at once.
    #[schema(minimum = 1, nullable = false)]
    pub first_fit_rows: Option<u64>,
}

/// A model: its specification and where it stands.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelView {
    #[schema(example = "cotton-reactive")]
    pub name: String,
    /// The declared spectrum, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spectrum: Option<SpectrumSpec>,
    pub features: Vec<String>,
    pub outputs: Vec<String>,
    #[schema(example = true)]
    pub intercept: bool,
    pub transform: TransformName,
    /// Saunderson's coefficients of a `saunderson` model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saunderson: Option<SaundersonSpec>,
    pub update: UpdateName,
    pub forgetting: Option<ForgettingSpec>,
    #[schema(example = 1.0)]
    pub prior_variance: f64,
    pub prior: PriorName,
    #[schema(example = 10)]
    pub first_fit_rows: u64,
    /// Batches more surprising than this are held for review; null: never.
    pub drift_threshold: Option<f64>,
    /// The current version; 0 while the model has not been trained.
    #[schema(example = 13)]
    pub version: i64,
    /// Rows learnt (forgetting-weighted).
    #[schema(example = 5140.0)]
    pub observations: f64,
    /// Batches waiting to be folded.
    #[schema(example = 0)]
    pub pending_batches: i64,
    /// Rows of the batches waiting to be folded.
    #[schema(example = 0)]
    pub pending_rows: i64,
    /// Batches held for review, more surprising than `drift_threshold`: the drift alarms
    /// waiting for an admin's release or rejection.
    #[schema(example = 0)]
    pub held_batches: i64,
    /// When the current version was made (by a fold, a restore or a refit); null before the
    /// first.
    #[schema(example = "2026-11-21T08:15:02.417Z")]
    pub version_created_at: Option<DateTime<Utc>>,
    #[schema(example = "2026-11-20T07:02:11.031Z")]
    pub created_at: DateTime<Utc>,
    #[schema(example = "2026-11-21T08:15:02.417Z")]
    pub updated_at: DateTime<Utc>,
    /// The instrument that is to replace the spectrum's, once declared
    /// (`POST /v1/models/{name}/successor`), and how far its transfer has come.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub successor: Option<SuccessorView>,
}

/// A successor instrument and how far its transfer has come.
///
/// A successor reading is answered by the old instrument's model through the map learnt from
/// the samples both instruments read (`map`) and by the successor's own model (`own`), mixed by
/// the own model's weight: its posterior probability when the rows both paths predicted before
/// learning them are the evidence. The old instrument retires for good once the own model has
/// predicted at least 30 (weighted) such rows at least as well as the map path: from then on
/// the own model answers alone and the old instrument's readings are no longer needed.
#[derive(Debug, Serialize, ToSchema)]
pub struct SuccessorView {
    /// The successor's grid and scale.
    pub spectrum: SpectrumSpec,
    /// The paths that answer a successor reading now: `map` (the model through the map to the
    /// old instrument's bands) and `own` (the successor's own model).
    pub answered_by: Vec<&'static str>,
    /// Whether the old instrument has retired.
    pub retired: bool,
    /// Samples read by both instruments (the map's).
    #[schema(example = 30.0)]
    pub pairs: f64,
    /// Successor rows the own model has learnt.
    #[schema(example = 120.0)]
    pub own_rows: f64,
    /// Weighted successor rows both paths predicted before learning them.
    #[schema(example = 90.0)]
    pub scored_rows: f64,
    /// Mean log predictive density of those rows, through the map and by the own model; null
    /// before any.
    pub mean_log_score_map: Option<f64>,
    pub mean_log_score_own: Option<f64>,
    /// The own model's weight in an answer (0 to 1).
    #[schema(example = 0.4)]
    pub own_weight: f64,
}

impl SuccessorView {
    /// The view of `spectrum` with its succession's status (none learnt yet: `None`).
    pub fn new(spectrum: SpectrumSpec, succession: Option<&Succession>) -> Self {
        let status = succession.map(Succession::status);
        let retired = status.is_some_and(|s| s.retired);
        let has_map = !retired && status.is_some_and(|s| s.pairs >= MIN_TRANSFER_ROWS as f64);
        // Beside the map, the own model answers only with a weight the record gave it.
        let has_own = status.is_some_and(|s| s.own_rows > 0.0 && (!has_map || s.own_weight > 0.0));
        let answered_by = [("map", has_map), ("own", has_own)]
            .into_iter()
            .filter_map(|(name, on)| on.then_some(name))
            .collect();
        let scores = status.and_then(|s| s.mean_scores);
        Self {
            spectrum,
            answered_by,
            retired,
            pairs: status.map_or(0.0, |s| s.pairs),
            own_rows: status.map_or(0.0, |s| s.own_rows),
            scored_rows: status.map_or(0.0, |s| s.scored_rows),
            mean_log_score_map: scores.map(|s| s.0),
            mean_log_score_own: scores.map(|s| s.1),
            own_weight: status.map_or(0.0, |s| s.own_weight),
        }
    }
}

impl ModelView {
    /// The view of `record` with its successor's status at the record's version or a later
    /// one, as `cache` serves it once synced (if it cannot be, the status of nothing learnt,
    /// and a warning in the log).
    pub async fn of(record: ModelRecord, cache: &PosteriorCache, store: &Store) -> Self {
        let at_version =
            |c: &std::sync::Arc<CachedModel>| c.id == record.id && c.version >= record.version;
        let mut cached = cache.get(record.spec.name.as_str()).filter(at_version);
        if cached.is_none() && record.spec.successor.is_some() {
            if let Err(e) = cache.sync_model(store, record.id).await {
                tracing::warn!(error = %e, model_id = record.id, "model view: sync failed");
            }
            cached = cache.get(record.spec.name.as_str()).filter(at_version);
        }
        let successor = record.spec.successor.map(|spectrum| {
            let succession = cached
                .as_ref()
                .and_then(|c| c.successor.as_ref())
                .map(|s| &s.succession);
            SuccessorView::new(spectrum, succession)
        });
        Self {
            successor,
            ..record.into()
        }
    }
}

impl From<ModelRecord> for ModelView {
    fn from(m: ModelRecord) -> Self {
        let s = m.spec;
        Self {
            name: s.name.to_string(),
            spectrum: s.spectrum,
            features: s.features,
            outputs: s.outputs,
            intercept: s.intercept,
            transform: s.transform,
            saunderson: s.saunderson,
            update: s.update,
            forgetting: s.forgetting,
            prior_variance: s.prior_variance,
            prior: s.prior,
            first_fit_rows: s.first_fit_rows,
            drift_threshold: s.drift_threshold,
            version: m.version,
            observations: m.observations,
            pending_batches: m.pending_batches,
            pending_rows: m.pending_rows,
            held_batches: m.held_batches,
            version_created_at: m.version_created_at,
            created_at: m.created_at,
            updated_at: m.updated_at,
            successor: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    pub models: Vec<ModelView>,
}

/// Create a model.
#[utoipa::path(post, operation_id = "create_model", path = "/v1/models", tag = "models",
    request_body = CreateModel,
    responses(
        (status = 201, description = "Created", body = ModelView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 409, description = "A model with this name exists", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid specification", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn create(
    State(app): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<impl IntoResponse, ApiError> {
    let spec = ModelSpec::parse(&body)?;
    let record = app.store.create_model(&spec).await?;
    app.cache.put(CachedModel::new(
        record.id,
        record.spec.clone(),
        record.version,
        None,
    ));
    Ok((StatusCode::CREATED, Json(ModelView::from(record))))
}

/// List models.
#[utoipa::path(get, operation_id = "list_models", path = "/v1/models", tag = "models",
    responses((status = 200, description = "All models, by name", body = ModelList)))]
pub async fn list(State(app): State<AppState>) -> Result<Json<ModelList>, ApiError> {
    let models = app.store.list_models().await?;
    Ok(Json(ModelList {
        models: {
            let mut views = Vec::with_capacity(models.len());
            for m in models {
                views.push(ModelView::of(m, &app.cache, &app.store).await);
            }
            views
        },
    }))
}

/// Read one model.
#[utoipa::path(get, operation_id = "get_model", path = "/v1/models/{name}", tag = "models",
    params(("name" = String, Path, description = "Model name")),
    responses(
        (status = 200, description = "The model", body = ModelView),
        (status = 404, description = "No such model", body = ErrorBody),
    ))]
pub async fn read(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ModelView>, ApiError> {
    let name = model_name(&name)?;
    view(&app, &name).await
}

/// Model `name` locked for a write (see [`ModelLock`]), or `404`.
pub(super) async fn lock(app: &AppState, name: &ModelName) -> Result<ModelLock, ApiError> {
    app.store
        .lock_model(name)
        .await?
        .ok_or_else(|| ApiError::not_found_model(name.as_str()))
}

/// The view of model `name` as the store holds it now, or `404`.
pub(super) async fn view(app: &AppState, name: &ModelName) -> Result<Json<ModelView>, ApiError> {
    let record = app
        .store
        .model(name)
        .await?
        .ok_or_else(|| ApiError::not_found_model(name.as_str()))?;
    Ok(Json(ModelView::of(record, &app.cache, &app.store).await))
}

/// Delete a model with its batches and versions.
#[utoipa::path(delete, operation_id = "delete_model", path = "/v1/models/{name}", tag = "models",
    params(("name" = String, Path, description = "Model name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such model", body = ErrorBody),
    ))]
#[tracing::instrument(skip(app))]
pub async fn delete(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let name = model_name(&name)?;
    let id = app
        .store
        .delete_model(&name)
        .await?
        .ok_or_else(|| ApiError::not_found_model(name.as_str()))?;
    app.cache.remove(id);
    app.metrics.forget_model(name.as_str());
    Ok(StatusCode::NO_CONTENT)
}

/// Change a model's settings: its `drift_threshold`, and, before its first fit, its
/// `first_fit_rows`.
///
/// A plant whose batches are held too often (or too seldom) moves its threshold; a model whose
/// first fit waits for more rows than will come gets a smaller `first_fit_rows`, and the rows
/// queued are fitted once they reach it. Sending a model's current settings again changes
/// nothing.
#[utoipa::path(patch, operation_id = "update_model", path = "/v1/models/{name}", tag = "models",
    params(("name" = String, Path, description = "Model name")),
    request_body = ModelSettings,
    responses(
        (status = 200, description = "The model with its settings", body = ModelView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "A new first_fit_rows for a model that is trained", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "An invalid value, or a field that cannot change", body = ErrorBody),
    ))]
#[tracing::instrument(skip(app, body))]
pub async fn update(
    State(app): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<ModelView>, ApiError> {
    let name = model_name(&name)?;
    let mut lock = lock(&app, &name).await?;
    let amended = lock.spec.amend(&body)?;
    if amended.first_fit_rows != lock.spec.first_fit_rows && lock.version > 0 {
        return Err(ApiError::Conflict(format!(
            "model {name} is trained: first_fit_rows says when the first fit runs, and it has \
             run (it stays {})",
            lock.spec.first_fit_rows
        )));
    }
    if amended == lock.spec {
        drop(lock);
    } else {
        let (threshold, rows) = (amended.drift_threshold, amended.first_fit_rows);
        // The cache's copy of the specification keeps the old settings: neither is read from
        // it (the folder reads them under the model's lock, the views from the store).
        lock.respecify(amended).await?;
        lock.commit().await?;
        tracing::info!(model = %name, drift_threshold = ?threshold, first_fit_rows = rows, "model settings changed");
    }
    view(&app, &name).await
}

/// The posterior of one output.
#[derive(Debug, Serialize, ToSchema)]
pub struct OutputPosteriorView {
    #[schema(example = "reactive_red_195")]
    pub name: String,
    /// False while the output has too few informative rows (it then predicts 0, or a dye seen in
    /// one row in proportion to the input that marked its use).
    #[schema(example = true)]
    pub trained: bool,
    /// σ², null while untrained.
    #[schema(example = 0.0021)]
    pub noise_variance: Option<f64>,
    /// How the noise grows with the answer, where the rows of the model's first fit showed it
    /// (a dose measured to a share of itself): the noise variance of an answer of mean `μ` is
    /// then `noise_variance · (offset + |μ|)^(2·power) · level`. Null: one noise variance for
    /// every answer.
    pub noise_shape: Option<NoiseShapeView>,
    /// The informative rows the output's prior hyperparameters were last fitted on (weighted by
    /// forgetting), null while untrained. A `one_step` fold fits them again once the output's
    /// informative rows have grown by a quarter.
    #[schema(example = 400.0)]
    pub fitted_rows: Option<f64>,
    /// Posterior mean of each basis function's weight (same order as `basis`); zeros while
    /// untrained.
    pub coefficients: Vec<f64>,
    /// While untrained, the basis function a zero-inflated output follows and in what
    /// proportion: its predictions are that input times `proportion` (a dye seen in one row,
    /// following its lab-dip dose). Null for a trained output and for one that predicts 0.
    pub follows: Option<FollowedInput>,
    /// The prior family the output was fitted with (`ard`, `ridge` or `smooth`), null while
    /// untrained.
    #[schema(example = "smooth")]
    pub prior: Option<String>,
    /// The smooth prior's length scale along the spectrum, in nm (in bands for a model whose
    /// spectrum has no grid): how far apart two wavelengths' coefficients still move together.
    #[schema(example = 24.0)]
    pub length_scale_nm: Option<f64>,
    /// Prior variance of each basis function (0 = pruned; null = a flat prior, the intercept,
    /// never shrunk).
    pub prior_variance: Vec<Option<f64>>,
    /// Basis functions with a non-zero prior variance, in basis order.
    pub active_features: Vec<String>,
    /// The same, most relevant first: by prior variance, largest first (ties in basis order).
    /// ARD shrinks the prior variance of a basis function the data do not support towards 0,
    /// and prunes it at 0. Prior variances compare directly between inputs on one scale, such
    /// as the bands of a spectrum.
    pub ranked_features: Vec<RankedFeature>,
}

/// An output's noise shape: the noise variance of an answer of mean `μ` is
/// `σ² · (offset + |μ|)^(2·power) · level`.
#[derive(Debug, Serialize, ToSchema)]
pub struct NoiseShapeView {
    /// 0.25, 0.5, 0.75 or 1 (1: the noise's standard deviation grows in proportion to the answer).
    #[schema(example = 1.0)]
    pub power: f64,
    /// A twentieth of the output's root mean square over the rows that set the shape (its first
    /// fit's, or a refit's that read every row back): what an answer of 0 keeps of the noise.
    #[schema(example = 0.05)]
    pub offset: f64,
    /// The scale that leaves those rows' residuals their mean square in units of σ².
    #[schema(example = 2.3)]
    pub level: f64,
}

/// The input an untrained output follows.
#[derive(Debug, Serialize, ToSchema)]
pub struct FollowedInput {
    #[schema(example = "lab_red_195")]
    pub name: String,
    /// The prediction per unit of the input.
    #[schema(example = 0.98)]
    pub proportion: f64,
}

/// A basis function and its prior variance.
#[derive(Debug, Serialize, ToSchema)]
pub struct RankedFeature {
    #[schema(example = "550nm")]
    pub name: String,
    #[schema(example = 0.42)]
    pub prior_variance: f64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PosteriorView {
    #[schema(example = "cotton-reactive")]
    pub model: String,
    #[schema(example = 13)]
    pub version: i64,
    /// Basis function names: the features, then `intercept` if the model has one.
    pub basis: Vec<String>,
    pub outputs: Vec<OutputPosteriorView>,
    /// The degrees of freedom ν of the Student-t its trained outputs answer with (predict's
    /// `dof`), set on the first fit's rows (or a refit's that read every row back) where their
    /// residuals were heavy-tailed; `null`: a Gaussian.
    #[schema(example = json!(null))]
    pub dof: Option<f64>,
}

/// The current posterior of every output.
#[utoipa::path(get, operation_id = "get_posterior", path = "/v1/models/{name}/posterior", tag = "models",
    params(("name" = String, Path, description = "Model name")),
    responses(
        (status = 200, description = "The posterior", body = PosteriorView),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Not trained yet", body = ErrorBody),
    ))]
pub async fn posterior(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<PosteriorView>, ApiError> {
    let model = app
        .cache
        .serving(&app.store, &name)
        .await?
        .ok_or_else(|| ApiError::not_found_model(&name))?;
    let state = model.state.as_ref().ok_or_else(|| not_trained(&name))?;
    let basis = model.spec.basis_names();
    let coefficients = state.coefficients();
    let outputs = state
        .outputs()
        .iter()
        .enumerate()
        .map(|(k, output)| {
            let post = output.posterior();
            let prior_variance =
                post.map_or_else(|| vec![0.0; basis.len()], |p| p.prior_variance().to_vec());
            let interval = model.spec.spectrum.map_or(1.0, |s| s.interval_nm);
            OutputPosteriorView {
                name: model.spec.outputs[k].clone(),
                trained: post.is_some(),
                noise_variance: post.map(|p| p.noise_variance()),
                noise_shape: state.noise_shape(k).map(|shape| NoiseShapeView {
                    power: shape.power(),
                    offset: shape.offset(),
                    level: shape.level(),
                }),
                fitted_rows: post.map(|_| state.fitted_rows()[k]),
                coefficients: coefficients.col(k).iter().copied().collect(),
                follows: model.predictor.as_deref().and_then(|p| p.follows(k)).map(
                    |(j, proportion)| FollowedInput {
                        name: basis[j].clone(),
                        proportion,
                    },
                ),
                prior: post.map(|p| p.prior().family.name().to_owned()),
                length_scale_nm: post
                    .and_then(|p| p.prior().smooth)
                    .map(|s| s.length * interval),
                active_features: basis
                    .iter()
                    .zip(&prior_variance)
                    .filter(|(_, v)| **v > 0.0)
                    .map(|(n, _)| n.clone())
                    .collect(),
                ranked_features: ranked(&prior_variance)
                    .into_iter()
                    .map(|j| RankedFeature {
                        name: basis[j].clone(),
                        prior_variance: prior_variance[j],
                    })
                    .collect(),
                prior_variance: prior_variance
                    .iter()
                    .map(|v| v.is_finite().then_some(*v))
                    .collect(),
            }
        })
        .collect();
    Ok(Json(PosteriorView {
        model: name,
        version: model.version,
        basis,
        outputs,
        dof: state.tail(),
    }))
}

/// The basis functions with a non-zero, finite prior variance (not the flat intercept), largest
/// first (a stable sort: ties keep basis order).
fn ranked(prior_variance: &[f64]) -> Vec<usize> {
    let mut active: Vec<usize> = (0..prior_variance.len())
        .filter(|&j| prior_variance[j] > 0.0 && prior_variance[j].is_finite())
        .collect();
    active.sort_by(|&a, &b| prior_variance[b].total_cmp(&prior_variance[a]));
    active
}

/// How one input is used across the model's outputs.
#[derive(Debug, Serialize, ToSchema)]
pub struct InputRelevance {
    #[schema(example = "550nm")]
    pub name: String,
    /// Trained outputs whose posterior keeps this input (prior variance above 0).
    #[schema(example = 3)]
    pub outputs: usize,
    /// Its largest prior variance over the trained outputs (0: pruned by all of them).
    #[schema(example = 0.42)]
    pub largest_prior_variance: f64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RelevanceView {
    #[schema(example = "cotton-reactive")]
    pub model: String,
    #[schema(example = 13)]
    pub version: i64,
    /// Outputs trained at this version: the counts below are over them.
    #[schema(example = 81)]
    pub trained_outputs: usize,
    /// Outputs not trained yet (too few informative rows): they may still come to use any
    /// input.
    #[schema(example = 1)]
    pub untrained_outputs: usize,
    /// Every input (bands of the spectrum, then named features; not the intercept), most used
    /// first.
    pub inputs: Vec<InputRelevance>,
    /// Inputs that no trained output uses any more: ARD pruned them everywhere. Wavelengths or
    /// lab results the plant could stop measuring, as far as this model can tell (empty while
    /// no output is trained).
    #[schema(example = json!(["360nm", "370nm", "fabric_code"]))]
    pub unused: Vec<String>,
}

/// Which inputs the model uses: per input, how many trained outputs keep it, and the inputs
/// ARD pruned from every output.
#[utoipa::path(get, operation_id = "get_relevance", path = "/v1/models/{name}/relevance", tag = "models",
    params(("name" = String, Path, description = "Model name")),
    responses(
        (status = 200, description = "Relevance of every input", body = RelevanceView),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Not trained yet", body = ErrorBody),
    ))]
pub async fn relevance(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<RelevanceView>, ApiError> {
    let model = app
        .cache
        .serving(&app.store, &name)
        .await?
        .ok_or_else(|| ApiError::not_found_model(&name))?;
    let state = model.state.as_ref().ok_or_else(|| not_trained(&name))?;
    let trained: Vec<&[f64]> = state
        .outputs()
        .iter()
        .filter_map(|o| o.posterior().map(|p| p.prior_variance()))
        .collect();
    let mut inputs: Vec<InputRelevance> = model
        .spec
        .input_names()
        .into_iter()
        .enumerate()
        .map(|(j, name)| InputRelevance {
            name,
            outputs: trained.iter().filter(|v| v[j] > 0.0).count(),
            largest_prior_variance: trained.iter().map(|v| v[j]).fold(0.0, f64::max),
        })
        .collect();
    // With no output trained there is nothing to tell yet.
    let unused = inputs
        .iter()
        .filter(|i| i.outputs == 0 && !trained.is_empty())
        .map(|i| i.name.clone())
        .collect();
    inputs.sort_by(|a, b| {
        b.outputs.cmp(&a.outputs).then(
            b.largest_prior_variance
                .total_cmp(&a.largest_prior_variance),
        )
    });
    Ok(Json(RelevanceView {
        model: name,
        version: model.version,
        trained_outputs: trained.len(),
        untrained_outputs: state.outputs().len() - trained.len(),
        inputs,
        unused,
    }))
}

pub fn not_trained(name: &str) -> ApiError {
    ApiError::NotTrained(format!(
        "model {name:?} has no posterior yet: it is trained once enough rows are queued"
    ))
}

#[cfg(test)]
mod tests {
    use super::ranked;

    #[test]
    fn active_features_rank_by_prior_variance_and_skip_pruned_ones() {
        assert_eq!(ranked(&[0.5, 0.0, 2.0, 0.5, 1e-9]), vec![2, 0, 3, 4]);
        assert_eq!(ranked(&[0.5, f64::INFINITY]), vec![0]);
        assert!(ranked(&[0.0, 0.0]).is_empty());
    }
}
