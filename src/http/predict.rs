//! `POST /v1/models/{name}/predict`, served from the posterior cache.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ErrorBody};
use super::extract::{JsonBody, check_rows};
use super::models::not_trained;
use crate::domain::{Details, Invalid, parse_rows, pointer_token};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/models/{name}/predict", post(predict))
}

/// Requests with more input values than this are computed off the async runtime.
const INLINE_VALUES: usize = 16 * 1024;

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"x": [[1.0, 0.412, 0.388, 0.351]]}))]
pub struct PredictRequest {
    /// Input rows, each with one finite number per feature.
    #[schema(min_items = 1)]
    pub x: Vec<Vec<f64>>,
}

/// The prediction for one row: per output, the mean concentration and the predictive variance
/// `σ² + φᵀΣφ`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"mean": [1.18, 0.02, 0.33], "variance": [0.0041, 0.0009, 0.0023]}))]
pub struct Prediction {
    pub mean: Vec<f64>,
    pub variance: Vec<f64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PredictResponse {
    #[schema(example = "cotton-reactive")]
    pub model: String,
    /// The version the predictions come from.
    #[schema(example = 13)]
    pub version: i64,
    pub predictions: Vec<Prediction>,
}

/// Predict concentrations and their variances.
#[utoipa::path(post, path = "/v1/models/{name}/predict", tag = "predict",
    params(("name" = String, Path, description = "Model name")),
    request_body = PredictRequest,
    responses(
        (status = 200, description = "Predictions, one per row", body = PredictResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Not trained yet", body = ErrorBody),
        (status = 413, description = "Body or row count over the limit", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid rows", body = ErrorBody),
    ))]
pub async fn predict(
    State(app): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<PredictResponse>, ApiError> {
    let model = app
        .cache
        .get_or_load(&app.store, &name)
        .await?
        .ok_or_else(|| ApiError::not_found_model(&name))?;
    check_rows(&body, "x", app.limits.max_rows_per_request)?;
    let mut details = Details::default();
    if let serde_json::Value::Object(fields) = &body {
        for key in fields.keys().filter(|k| k.as_str() != "x") {
            details.push(format!("/{}", pointer_token(key)), "unknown field");
        }
    } else {
        return Err(Invalid::one("", "the body must be a JSON object with \"x\"").into());
    }
    if matches!(body.get("x"), Some(serde_json::Value::Array(rows)) if rows.is_empty()) {
        details.push("/x", "needs at least one row");
    }
    let x = parse_rows(body.get("x"), "/x", model.spec.features.len(), &mut details);
    details.finish("invalid predict request")?;
    let x = x.ok_or_else(|| Invalid::one("/x", "invalid rows"))?;
    let state = model.state.clone().ok_or_else(|| not_trained(&name))?;
    let compute = move || {
        state
            .predict(x.to_mat().as_ref())
            .map_err(|e| ApiError::Invalid(Invalid::one("/x", e.to_string())))
    };
    let values = x_len(&body);
    let predictions = if values > INLINE_VALUES {
        tokio::task::spawn_blocking(compute)
            .await
            .map_err(ApiError::internal)??
    } else {
        compute()?
    };
    let (mean, variance) = (&predictions.mean, &predictions.variance);
    let predictions = (0..mean.nrows())
        .map(|r| Prediction {
            mean: mean.row(r).iter().copied().collect(),
            variance: variance.row(r).iter().copied().collect(),
        })
        .collect();
    Ok(Json(PredictResponse {
        model: name,
        version: model.version,
        predictions,
    }))
}

fn x_len(body: &serde_json::Value) -> usize {
    body.get("x").and_then(|x| x.as_array()).map_or(0, |rows| {
        rows.iter().map(|r| r.as_array().map_or(0, Vec::len)).sum()
    })
}
