//! Who may call what: one table, enforced by one middleware and written into the OpenAPI
//! document from the same table.
//!
//! Keys travel as `Authorization: Bearer <key>`. No key, or an unknown or revoked one, is
//! answered `401` (with `WWW-Authenticate: Bearer`); a valid key without the scope an endpoint
//! needs, `403`. Health, readiness, metrics and the documentation are open.

use axum::body::Body;
use axum::extract::{MatchedPath, State};
use axum::http::{Request, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, OpenApi, Ref, RefOr, ResponseBuilder, path::Operation,
    security::SecurityRequirement,
};

use super::AppState;
use super::error::ApiError;
use crate::auth::{Scope, Verdict};

/// What a route needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone who can reach the service.
    Open,
    /// A key holding one of these scopes (admin holds every scope).
    Scopes(&'static [Scope]),
}

const ANY: Access = Access::Scopes(&[Scope::Admin, Scope::Ingest, Scope::Predict]);
const ADMIN: Access = Access::Scopes(&[Scope::Admin]);
const INGEST: Access = Access::Scopes(&[Scope::Admin, Scope::Ingest]);
const PREDICT: Access = Access::Scopes(&[Scope::Admin, Scope::Predict]);

/// Every route of the API with what it needs. A route missing here needs `admin`.
pub const POLICY: &[(&str, &str, Access)] = &[
    ("GET", "/v1/models", ANY),
    ("POST", "/v1/models", ADMIN),
    ("GET", "/v1/models/{name}", ANY),
    ("DELETE", "/v1/models/{name}", ADMIN),
    ("GET", "/v1/models/{name}/posterior", ANY),
    ("GET", "/v1/models/{name}/relevance", ANY),
    ("POST", "/v1/models/{name}/batches", INGEST),
    ("GET", "/v1/models/{name}/batches", INGEST),
    ("GET", "/v1/models/{name}/batches/{batch_id}", INGEST),
    (
        "POST",
        "/v1/models/{name}/batches/{batch_id}/release",
        ADMIN,
    ),
    ("POST", "/v1/models/{name}/batches/{batch_id}/reject", ADMIN),
    ("POST", "/v1/models/{name}/predict", PREDICT),
    ("POST", "/v1/models/{name}/match", PREDICT),
    ("GET", "/v1/models/{name}/versions", ANY),
    (
        "POST",
        "/v1/models/{name}/versions/{version}/restore",
        ADMIN,
    ),
    ("POST", "/v1/models/{name}/refit", ADMIN),
    ("GET", "/v1/keys", ADMIN),
    ("POST", "/v1/keys", ADMIN),
    ("DELETE", "/v1/keys/{id}", ADMIN),
    ("GET", "/healthz", Access::Open),
    ("GET", "/readyz", Access::Open),
    ("GET", "/metrics", Access::Open),
    ("GET", "/openapi.json", Access::Open),
    ("GET", "/docs", Access::Open),
    ("GET", "/docs/", Access::Open),
    ("GET", "/docs/{file}", Access::Open),
];

/// What `method route` needs; routes not in [`POLICY`] need `admin` (fail closed).
pub fn access(method: &str, route: &str) -> Access {
    // Axum answers HEAD with the GET handler: the same rule applies.
    let method = if method.eq_ignore_ascii_case("HEAD") {
        "GET"
    } else {
        method
    };
    POLICY
        .iter()
        .find(|(m, r, _)| m.eq_ignore_ascii_case(method) && *r == route)
        .map_or(ADMIN, |(_, _, access)| *access)
}

/// The middleware: checks the request's key against the route's policy.
pub async fn authorize(
    State(app): State<AppState>,
    request: Request<Body>,
    next: Next,
) -> Response {
    if !app.keys.is_enforced() {
        return next.run(request).await;
    }
    // A route layer always sees the matched route; without one, nothing is open (fail closed).
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(String::new, |p| p.as_str().to_owned());
    let Access::Scopes(allowed) = access(request.method().as_str(), &route) else {
        return next.run(request).await;
    };
    let presented = match bearer(&request) {
        Ok(key) => key,
        Err(problem) => return ApiError::Unauthorized(problem.into()).into_response(),
    };
    match app.keys.check(presented, allowed) {
        Verdict::Allowed(_) => next.run(request).await,
        Verdict::Unauthenticated if presented.is_none() => ApiError::Unauthorized(
            "this endpoint needs an API key: send `Authorization: Bearer <key>`".into(),
        )
        .into_response(),
        Verdict::Unauthenticated => {
            ApiError::Unauthorized("the API key is unknown or revoked".into()).into_response()
        }
        Verdict::Forbidden(principal) => {
            tracing::info!(key = %principal.name, route, "API key lacks the scope");
            ApiError::Forbidden(format!(
                "the API key {:?} has scopes {}; {} {route} needs {}",
                principal.name,
                join(&principal.scopes),
                request.method(),
                join(allowed),
            ))
            .into_response()
        }
    }
}

/// The key of an `Authorization: Bearer` header; `Ok(None)` when there is no header.
fn bearer(request: &Request<Body>) -> Result<Option<&str>, &'static str> {
    let Some(value) = request.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| "the Authorization header is not ASCII")?;
    let (scheme, key) = value
        .split_once(' ')
        .ok_or("the Authorization header must be `Bearer <key>`")?;
    if !scheme.eq_ignore_ascii_case("bearer") || key.trim().is_empty() {
        return Err("the Authorization header must be `Bearer <key>`");
    }
    Ok(Some(key.trim()))
}

fn join(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" or ")
}

/// Name of the security scheme in the OpenAPI document.
pub const SECURITY_SCHEME: &str = "api_key";

/// Writes [`POLICY`] into the OpenAPI document: the bearer scheme, and on every protected
/// operation its security requirement, the scopes in its description, and the 401 and 403
/// answers.
pub struct SecurityAddon;

impl utoipa::Modify for SecurityAddon {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.bearer_format = Some("mdk_ followed by 64 hex digits".into());
        scheme.description = Some(
            "An API key from `POST /v1/keys` (or the bootstrap admin key of the configuration)."
                .into(),
        );
        components.add_security_scheme(SECURITY_SCHEME, SecurityScheme::Http(scheme));
        for (path, item) in openapi.paths.paths.iter_mut() {
            for (method, operation) in [
                ("GET", item.get.as_mut()),
                ("POST", item.post.as_mut()),
                ("PUT", item.put.as_mut()),
                ("DELETE", item.delete.as_mut()),
            ] {
                let Some(operation) = operation else { continue };
                if let Access::Scopes(scopes) = access(method, path) {
                    protect(operation, scopes);
                }
            }
        }
    }
}

fn protect(operation: &mut Operation, scopes: &[Scope]) {
    operation.security = Some(vec![SecurityRequirement::new(
        SECURITY_SCHEME,
        Vec::<String>::new(),
    )]);
    let note = format!("Needs an API key with scope {}.", join(scopes));
    operation.description = Some(match operation.description.take() {
        Some(d) if !d.is_empty() => format!("{d}\n\n{note}"),
        _ => note,
    });
    let error = || {
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("ErrorBody")))
            .build()
    };
    operation.responses.responses.insert(
        "401".into(),
        RefOr::T(
            ResponseBuilder::new()
                .description("No API key, or an unknown or revoked one")
                .content("application/json", error())
                .build(),
        ),
    );
    operation.responses.responses.insert(
        "403".into(),
        RefOr::T(
            ResponseBuilder::new()
                .description("The API key lacks the scope")
                .content("application/json", error())
                .build(),
        ),
    );
}
