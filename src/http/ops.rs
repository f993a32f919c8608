//! Operations endpoints: health, readiness, metrics, the OpenAPI document and its reference page.

use std::fmt::Write;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse};
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
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/docs", get(docs))
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
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        reason: None,
    })
}

/// The database answers and every migration is applied.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 503, description = "Not ready", body = Health),
    ))]
pub async fn readyz(State(app): State<AppState>) -> (StatusCode, Json<Health>) {
    match app.store.ready().await {
        Ok(()) => (
            StatusCode::OK,
            Json(Health {
                status: "ready",
                reason: None,
            }),
        ),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "not ready",
                reason: Some(reason),
            }),
        ),
    }
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(get, path = "/metrics", tag = "operations",
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
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object)))]
pub async fn openapi() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}

/// A reference page of the API, self-contained (nothing is loaded from elsewhere).
#[utoipa::path(get, path = "/docs", tag = "operations",
    responses((status = 200, description = "HTML reference", content_type = "text/html", body = String)))]
pub async fn docs() -> Html<String> {
    let doc = ApiDoc::openapi();
    let mut rows = String::new();
    for (path, item) in &doc.paths.paths {
        for (method, op) in [
            ("GET", &item.get),
            ("POST", &item.post),
            ("PUT", &item.put),
            ("DELETE", &item.delete),
        ] {
            if let Some(op) = op {
                let summary = op.summary.clone().unwrap_or_default();
                let _ = write!(
                    rows,
                    "<tr><td><code>{method}</code></td><td><code>{}</code></td><td>{}</td></tr>",
                    escape(path),
                    escape(&summary)
                );
            }
        }
    }
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>mordant API</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td{{padding:.2em 1em}}</style></head>\
         <body><h1>mordant API {}</h1><p>The full document: <a href=\"/openapi.json\">/openapi.json</a>.</p>\
         <table>{rows}</table></body></html>",
        escape(&doc.info.version)
    ))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
