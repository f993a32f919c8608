//! `POST /v1/models/{name}/outputs` and `/features`: a live model gains a dye, or a named
//! feature whose past value is known (a new fabric indicator), without starting again.
//!
//! The specification and the version holding the widened state are written in one
//! transaction, under the model's lock (see [`crate::store::ModelLock::respecify`]). Batches
//! queued before keep the shape they were stored in and are widened when folded
//! ([`crate::history::decode_batch`]), so a client that has not heard of the new column yet
//! loses nothing.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::ADMIN;
use super::error::{ApiError, ErrorBody};
use super::extract::Path;
use super::extract::{JsonBody, model_name};
use super::models::ModelView;
use super::routes::Routes;
use crate::cache::CachedModel;
use crate::domain::{Growth, ModelName, extend};
use crate::estimator::{ModelConfig, ModelState, codec};
use crate::folder::{Current, current_state};
use crate::history::{self, NextVersion, PredictorTask};
use crate::store::{StateBlob, VersionOrigin};

/// The routes that grow a model, with the access each needs.
pub fn routes(routes: Routes) -> Routes {
    routes
        .add(ADMIN, routes!(add_outputs))
        .add(ADMIN, routes!(add_features))
}

/// Body of `POST /v1/models/{name}/outputs`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"outputs": ["reactive_orange_16"]}))]
pub struct AddOutputs {
    /// New output names, appended after the model's outputs: distinct, not yet the name of an
    /// output, feature or band, each 1 to 200 characters. Sending the model's last outputs
    /// again (a retry) changes nothing.
    #[schema(min_items = 1, max_items = 1024)]
    pub outputs: Vec<String>,
}

/// Body of `POST /v1/models/{name}/features`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"features": ["fabric_wool"], "past_value": 0}))]
pub struct AddFeatures {
    /// New named features, appended after the model's named features (before the intercept):
    /// distinct, not yet the name of an output, feature or band (nor `intercept` beside the
    /// model's intercept), each 1 to 200 characters.
    /// Sending the model's last features again (a retry) changes nothing.
    #[schema(min_items = 1, max_items = 2048)]
    pub features: Vec<String>,
    /// The value each new feature had in every row the model has learnt: must be 0 (a new
    /// fabric indicator). A feature whose past values are unknown (a new sensor) cannot be
    /// added to a live model.
    #[schema(minimum = 0.0, maximum = 0.0, example = 0.0)]
    pub past_value: f64,
}

/// Add outputs to a model.
///
/// Every row learnt before used none of them, so their statistics over the past are exact
/// zeros: each new output is exactly what it would be had it been declared from the start. It
/// predicts as untrained until it has its informative rows. A trained model gets a new
/// version (origin `extend`); batches may carry the new outputs from now on.
#[utoipa::path(post, operation_id = "add_outputs", path = "/v1/models/{name}/outputs", tag = "models",
    params(("name" = String, Path, description = "Model name")),
    request_body = AddOutputs,
    responses(
        (status = 200, description = "The model with its outputs", body = ModelView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "The model's state cannot take them", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid or taken names, or a model grown too large", body = ErrorBody),
    ))]
#[tracing::instrument(skip(app, body))]
pub async fn add_outputs(
    State(app): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<ModelView>, ApiError> {
    grow(&app, &model_name(&name)?, Growth::Outputs, &body).await
}

/// Add named features whose value in every past row is 0 to a model.
///
/// A new fabric indicator, say: the statistics of the rows learnt before are exactly those of
/// a model given the feature from the start (its row and column are zeros), each trained
/// output's posterior is the one-shot posterior of them with its hyperparameters, and rows
/// without the feature are predicted as before. The new weight's prior variance, which no past
/// row informs, is its output's widest named feature's (the shared one under ridge), so the
/// feature is learnt from its first rows. A feature whose past values are unknown (a new
/// sensor) is refused: it needs a calibration transfer. A trained model gets a new version
/// (origin `extend`).
#[utoipa::path(post, operation_id = "add_features", path = "/v1/models/{name}/features", tag = "models",
    params(("name" = String, Path, description = "Model name")),
    request_body = AddFeatures,
    responses(
        (status = 200, description = "The model with its features", body = ModelView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "The model's state cannot take them", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid or taken names, a past value that is not 0, or a model grown too large", body = ErrorBody),
    ))]
#[tracing::instrument(skip(app, body))]
pub async fn add_features(
    State(app): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<ModelView>, ApiError> {
    grow(&app, &model_name(&name)?, Growth::Features, &body).await
}

/// Validates the request against the model under its lock, and writes the grown specification
/// with the version of the widened state (a trained model's) in one transaction.
async fn grow(
    app: &AppState,
    name: &ModelName,
    growth: Growth,
    body: &serde_json::Value,
) -> Result<Json<ModelView>, ApiError> {
    let mut lock = super::models::lock(app, name).await?;
    if lock.spec.successor.is_some() {
        return Err(ApiError::Conflict(format!(
            "model {name} has a successor instrument: its outputs and features are fixed until \
             the instrument is replaced; create a new model to grow"
        )));
    }
    let extension = extend(&lock.spec, growth, body)?;
    if extension.added.is_empty() {
        drop(lock);
    } else if let Some(Current { state, .. }) = current_state(&mut lock, &app.cache).await? {
        let config = extension.spec.config();
        let (state, blob) = app
            .cpu_bound(move || widened(Arc::unwrap_or_clone(state), &config))
            .await??;
        lock.respecify(extension.spec).await?;
        let state = Arc::new(state);
        let next = NextVersion {
            origin: VersionOrigin::Extend,
            restored_from: None,
            predictor: PredictorTask::start(&state),
            state,
            successor: None,
            blob: &blob,
            folds: &[],
            replayable: true,
        };
        history::commit_version(lock, &app.cache, next).await?;
    } else {
        let id = lock.model_id;
        lock.respecify(extension.spec.clone()).await?;
        lock.commit().await?;
        app.cache.put(CachedModel::new(id, extension.spec, 0, None));
    }
    if !extension.added.is_empty() {
        tracing::info!(model = %name, added = ?extension.added, ?growth, "model grown");
    }
    super::models::view(app, name).await
}

/// `state` widened to `config`'s outputs and features with their exact zero statistics, and
/// its encoding; a conflict when it cannot be, or would not be finite.
pub(super) fn widened(
    state: ModelState,
    config: &ModelConfig,
) -> Result<(ModelState, StateBlob), ApiError> {
    let state = history::widen_state(state, config).map_err(ApiError::Conflict)?;
    if !state.is_finite() {
        return Err(ApiError::Conflict(
            "the widened model state would be non-finite".into(),
        ));
    }
    let blob = StateBlob::new(codec::encode(&state));
    Ok((state, blob))
}
