//! Operations endpoints: health, readiness, metrics and the OpenAPI document.

use std::sync::LazyLock;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::Access;
use super::error::ApiError;
use super::routes::Routes;
/// Health, readiness and this document: open. `/metrics` is open too, served here unless
/// `metrics_here` is false (it then has a listener of its own, [`super::metrics_router`]).
pub fn routes(routes: Routes, metrics_here: bool) -> Routes {
    let routes = routes
        .add(Access::Open, routes!(healthz))
        .add(Access::Open, routes!(readyz))
        .add(Access::Open, routes!(openapi));
    if metrics_here {
        routes.add(Access::Open, routes!(metrics))
    } else {
        routes.document(Access::Open, routes!(metrics))
    }
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
    Json(DOCUMENT.clone())
}

/// Built once: the document never changes while the process runs.
static DOCUMENT: LazyLock<utoipa::openapi::OpenApi> = LazyLock::new(super::document);
