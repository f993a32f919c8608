//! `/v1/models/{name}/versions`, restore and refit.

use std::collections::HashSet;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::{ADMIN, ANY};
use super::error::{ApiError, ErrorBody};
use super::extract::model_name;
use super::extract::{Path, once_each};
use super::models::not_trained;
use super::routes::Routes;
use crate::cache::Serving;
use crate::domain::Invalid;
use crate::estimator::first_fit::{self, ForPredictor};
use crate::estimator::{FittedShapes, ModelState};
use crate::folder::{self, current_state};
use crate::history::{self, RawRows};
use crate::store::{ModelLock, StateBlob, VersionOrigin, VersionRecord};
use crate::successor::encode_version;
/// The routes of a model's history, with the access each needs.
pub fn routes(routes: Routes) -> Routes {
    routes
        .add(ANY, routes!(list))
        .add(ADMIN, routes!(restore))
        .add(ADMIN, routes!(refit))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct VersionView {
    #[schema(example = 13)]
    pub version: i64,
    #[schema(example = "2026-11-21T08:15:02.417Z")]
    pub created_at: DateTime<Utc>,
    /// `fold`, `restore`, `refit` or `extend` (outputs or features added).
    #[schema(example = "fold")]
    pub origin: VersionOrigin,
    /// For a restore: the version it copies.
    pub restored_from: Option<i64>,
    #[schema(example = 5140.0)]
    pub observations: f64,
    /// Batches folded into this version, in arrival order.
    pub batches: Vec<String>,
    /// σ² per output (null while an output is untrained).
    pub noise_variances: Vec<Option<f64>>,
    /// Whether the version keeps its full state. A fold between two full states keeps only
    /// its batches and a digest: restoring it replays them (`database.full_state_every`).
    pub full_state: bool,
}

/// Most batch ids a restore's answer lists of each kind.
const MAX_LISTED: usize = 1000;

/// Batches whose learning a restore changes, in the order they were folded.
#[derive(Debug, Serialize, ToSchema)]
pub struct RestoredBatches {
    /// How many there are.
    #[schema(example = 2)]
    pub count: usize,
    /// Their ids, the first 1,000.
    #[schema(example = json!(["lot-0107", "lot-0108"]))]
    pub batch_ids: Vec<String>,
}

impl RestoredBatches {
    fn of(ids: Vec<&str>) -> Self {
        Self {
            count: ids.len(),
            batch_ids: ids
                .into_iter()
                .take(MAX_LISTED)
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// A restore's new version, and what it changed of the batches learnt.
#[derive(Debug, Serialize, ToSchema)]
pub struct RestoreView {
    #[serde(flatten)]
    pub version: VersionView,
    /// Batches the version current before the restore had learnt and the restored one had not
    /// (folded after it): the new version does not hold them. Their records stay `folded`, and
    /// a replay of their id is answered from the record: to learn one again, post its rows
    /// under a new id.
    pub left_out: RestoredBatches,
    /// Batches the restored version had learnt and the version current before had not (an
    /// earlier restore left them out): the new version holds them again.
    pub brought_back: RestoredBatches,
}

impl From<VersionRecord> for VersionView {
    fn from(v: VersionRecord) -> Self {
        Self {
            version: v.version,
            created_at: v.created_at,
            origin: v.origin,
            restored_from: v.restored_from,
            observations: v.observations,
            batches: v.batches,
            noise_variances: v.noise_variances,
            full_state: v.full_state,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct VersionList {
    #[schema(example = "cotton-reactive")]
    pub model: String,
    pub versions: Vec<VersionView>,
    /// Present when `limit` cut the list short: pass it as `after` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = 100)]
    pub next_after: Option<i64>,
}

/// Query of `GET /v1/models/{name}/versions` (documentation: the handler reads the query
/// itself, so that a bad value is answered in the API's error format).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VersionPage {
    /// Only the versions after this one (default 0: from the first).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// At most this many, oldest first (default: every version).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

impl VersionPage {
    /// Reads `after` and `limit`, each at most once (the route layer refuses other keys).
    fn parse(query: Vec<(String, String)>) -> Result<Self, ApiError> {
        once_each(&query, &["after", "limit"])?;
        let mut page = Self::default();
        for (key, value) in query {
            match key.as_str() {
                "after" => match value.parse::<i64>() {
                    Ok(n) if n >= 0 => page.after = Some(n),
                    _ => {
                        return Err(ApiError::InvalidQuery(format!(
                            "after must be a version number or 0, found {value:?}"
                        )));
                    }
                },
                "limit" => match value.parse::<u32>() {
                    Ok(n) if (1..=MAX_PAGE).contains(&n) => page.limit = Some(n),
                    _ => {
                        return Err(ApiError::InvalidQuery(format!(
                            "limit must be an integer from 1 to {MAX_PAGE}, found {value:?}"
                        )));
                    }
                },
                _ => {}
            }
        }
        Ok(page)
    }
}

/// Most versions one page may ask for.
const MAX_PAGE: u32 = 1000;

/// A model's history, oldest first: every version, or a page of it (`?after=…&limit=…`).
#[utoipa::path(get, operation_id = "list_versions", path = "/v1/models/{name}/versions", tag = "versions",
    params(("name" = String, Path, description = "Model name"), VersionPage),
    responses(
        (status = 200, description = "Every version, or the page asked for", body = VersionList),
        (status = 400, description = "after or limit out of range, or either given twice", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
    ))]
pub async fn list(
    State(app): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<VersionList>, ApiError> {
    let name = model_name(&name)?;
    let Query(query) =
        query.map_err(|e| ApiError::InvalidQuery(format!("the query is not readable: {e}")))?;
    let page = VersionPage::parse(query)?;
    let model = app
        .store
        .model(&name)
        .await?
        .ok_or_else(|| ApiError::not_found_model(name.as_str()))?;
    // One more than the page, to tell whether another follows.
    let mut versions = app
        .store
        .versions_after(model.id, page.after.unwrap_or(0), page.limit.map(|n| n + 1))
        .await?;
    let next_after = match page.limit {
        Some(limit) if versions.len() > limit as usize => {
            versions.truncate(limit as usize);
            versions.last().map(|v| v.version)
        }
        _ => None,
    };
    Ok(Json(VersionList {
        model: name.to_string(),
        versions: versions.into_iter().map(VersionView::from).collect(),
        next_after,
    }))
}

/// Make a new version whose state equals version `version` (history is kept).
///
/// For a model with a successor instrument, the transfer comes back as it was at that version;
/// a version from before the successor was declared has none, and keeps the transfer learnt
/// since instead (the overlap may not be had again once the old instrument is gone).
#[utoipa::path(post, operation_id = "restore_version", path = "/v1/models/{name}/versions/{version}/restore", tag = "versions",
    params(
        ("name" = String, Path, description = "Model name"),
        ("version" = i64, Path, description = "The version to restore", minimum = 1),
    ),
    responses(
        (status = 201, description = "The new version, with the batches it leaves out and brings back", body = RestoreView),
        (status = 404, description = "No such model or version", body = ErrorBody),
        (status = 409, description = "The version's state cannot be made current in the model's shape", body = ErrorBody),
        (status = 422, description = "Not a version number", body = ErrorBody),
    ))]
#[tracing::instrument(skip(app))]
pub async fn restore(
    State(app): State<AppState>,
    Path((name, version)): Path<(String, String)>,
) -> Result<(StatusCode, Json<RestoreView>), ApiError> {
    let name = model_name(&name)?;
    let source: i64 = version.parse().ok().filter(|v| *v > 0).ok_or_else(|| {
        Invalid::one("", format!("{version:?} is not a version number (1, 2, …)"))
    })?;
    let mut lock = super::models::lock(&app, &name).await?;
    let read = history::version_state(&mut lock, source)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("model {name} has no version {source}")))?;
    let (state, blob) = (read.model, read.blob);
    // The successor instrument's state of that version comes back with it.
    let restored = read.succession.map(|s| Arc::new(Serving::new(s)));
    // A version from before the model gained outputs or features is restored in its shape now
    // (a model with a successor does not grow, so such a version carries no succession).
    let config = lock.spec.config();
    let (state, blob) = if state.basis().features == config.basis.features
        && state.outputs().len() == config.outputs
    {
        (state, blob)
    } else if restored.is_some() {
        return Err(ApiError::Conflict(format!(
            "version {source} carries a successor instrument's state in another shape of the \
             model"
        )));
    } else {
        app.cpu_bound(move || super::growth::widened(state, &config))
            .await??
    };
    // A version from before the successor was declared keeps what the transfer has learnt
    // since: the overlap may not be had again once the old instrument is gone.
    let carried = match (&restored, lock.spec.successor) {
        (None, Some(_)) => current_state(&mut lock, &app.cache)
            .await?
            .and_then(|current| current.successor),
        _ => None,
    };
    let (state, successor, blob) = match carried {
        Some(carried) => {
            let kept = carried.clone();
            let (state, blob) = app
                .cpu_bound(move || {
                    let blob = StateBlob::new(encode_version(&state, Some(&kept.succession)));
                    (state, blob)
                })
                .await?;
            (state, Some(carried), blob)
        }
        None => (state, restored, blob),
    };
    let model_id = lock.model_id;
    let view = write(
        &app,
        lock,
        VersionOrigin::Restore,
        Some(source),
        (state, successor),
        blob,
        ForPredictor::Shapes(FittedShapes::none()),
    )
    .await?;
    // The versions up to the new one do not change once written: read after the commit, the
    // history says what each held.
    let versions = app.store.versions(model_id).await?;
    let before = history::batches_learnt(&versions, view.version - 1);
    let after = history::batches_learnt(&versions, view.version);
    let (had, has): (HashSet<&str>, HashSet<&str>) = (
        before.iter().copied().collect(),
        after.iter().copied().collect(),
    );
    let left_out = before.into_iter().filter(|b| !has.contains(b)).collect();
    let brought_back = after.into_iter().filter(|b| !had.contains(b)).collect();
    Ok((
        StatusCode::CREATED,
        Json(RestoreView {
            version: view,
            left_out: RestoredBatches::of(left_out),
            brought_back: RestoredBatches::of(brought_back),
        }),
    ))
}

/// Run Algorithm 2 on the accumulated statistics, from the current hyperparameters (and, where
/// their optimum pruned an input whose revival would raise the evidence by more than its Occam
/// factor, from the configured start too, the larger evidence winning), and make the result a
/// new version.
#[utoipa::path(post, operation_id = "refit_model", path = "/v1/models/{name}/refit", tag = "versions",
    params(("name" = String, Path, description = "Model name")),
    responses(
        (status = 201, description = "The new version", body = VersionView),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Not trained yet", body = ErrorBody),
    ))]
#[tracing::instrument(skip(app))]
pub async fn refit(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<(StatusCode, Json<VersionView>), ApiError> {
    let name = model_name(&name)?;
    let mut lock = super::models::lock(&app, &name).await?;
    if lock.version == 0 {
        return Err(not_trained(name.as_str()));
    }
    let current = lock.version;
    let read = history::version_state(&mut lock, current)
        .await?
        .ok_or_else(|| {
            ApiError::internal(anyhow::anyhow!("model {name} lacks version {current}"))
        })?;
    let (state, succession) = (read.model, read.succession);
    let config = lock.spec.config();
    // Every row back, where they are few, to check the refit's shrinkage and read its noise
    // shapes and tail as a first fit does.
    let kept = if lock.spec.successor.is_none()
        && config.forgetting.is_none()
        && folder::rows_within_check(&config, state.totals().rows())
    {
        Some(
            lock.kept_rows(folder::max_check_rows(&config) as i64)
                .await?,
        )
    } else {
        None
    };
    let model = name.to_string();
    let (state, predictor, successor, blob) = app
        .cpu_bound(move || {
            let every = kept.as_ref().and_then(|kept| {
                let rows: Vec<_> = kept.iter().filter_map(RawRows::of_kept).collect();
                folder::gather(&config, &rows)
            });
            let rows = every.as_ref().map(|(x, y)| (x.as_mat(), y.as_mat()));
            let done = first_fit::refit_on_rows(&state, &config, rows)
                .map_err(|e| ApiError::Conflict(format!("the refit failed: {e}")))?;
            // Asked for by an operator: a refit that could not read its rows says so.
            for (step, e) in &done.skipped {
                tracing::info!(%model, error = %e, step, "the refit's rows did not set this");
            }
            let (state, predictor) = (done.state, done.predictor);
            // The successor instrument's state is carried as it is.
            let blob = StateBlob::new(encode_version(&state, succession.as_ref()));
            let successor = succession.map(|s| Arc::new(Serving::new(s)));
            Ok::<_, ApiError>((state, predictor, successor, blob))
        })
        .await??;
    if !state.is_finite() {
        return Err(ApiError::Conflict(
            "the refit would make the model state non-finite".into(),
        ));
    }
    let view = write(
        &app,
        lock,
        VersionOrigin::Refit,
        None,
        (state, successor),
        blob,
        predictor,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// Writes `state` as the model's next version (see [`history::commit_version`]).
async fn write(
    app: &AppState,
    lock: ModelLock,
    origin: VersionOrigin,
    restored_from: Option<i64>,
    (state, successor): (ModelState, Option<Arc<Serving>>),
    blob: StateBlob,
    predictor: ForPredictor,
) -> Result<VersionView, ApiError> {
    let observations = state.totals().rows();
    let noise = state.noise_variances();
    let state = Arc::new(state);
    let next = history::NextVersion {
        origin,
        restored_from,
        predictor: history::PredictorTask::prepared(&state, predictor),
        state,
        successor,
        blob: &blob,
        folds: &[],
        replayable: true,
    };
    let (version, created_at) = history::commit_version(lock, &app.cache, next).await?;
    Ok(VersionView {
        version,
        created_at,
        origin,
        restored_from,
        observations,
        batches: Vec::new(),
        noise_variances: noise,
        full_state: true,
    })
}
