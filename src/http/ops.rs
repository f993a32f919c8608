//! Operations endpoints: health, readiness, metrics and the OpenAPI document.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use super::error::ApiError;
use super::{ApiDoc, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: &'static str,
    /// Why the service is not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The process is alive.
#[utoipa::path(get, operation_id = "healthz", path = "/healthz", tag = "operations",
    responses((status = 200, description = "Alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        reason: None,
    })
}

/// The database answers and every migration is applied.
#[utoipa::path(get, operation_id = "readyz", path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 503, description = "Not ready", body = Health),
    ))]
pub async fn readyz(State(app): State<AppState>) -> Response {
    match app.store.ready().await {
        Ok(()) => (
            StatusCode::OK,
            Json(Health {
                status: "ready",
                reason: None,
            }),
        )
            .into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, HeaderValue::from_static("5"))],
            Json(Health {
                status: "not ready",
                reason: Some(reason),
            }),
        )
            .into_response(),
    }
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(get, operation_id = "get_metrics", path = "/metrics", tag = "operations",
    responses((status = 200, description = "Metrics", content_type = "text/plain", body = String)))]
pub async fn metrics(State(app): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let queue = match app.store.queue_depth().await {
        Ok(q) => Some(q),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot read the queue depth");
            None
        }
    };
    let text = app
        .metrics
        .render(&app.cache, queue.as_deref())
        .map_err(ApiError::internal)?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    ))
}

/// This document.
#[utoipa::path(get, operation_id = "get_openapi", path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object)))]
pub async fn openapi() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}
