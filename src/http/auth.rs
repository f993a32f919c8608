//! Who may call what: the access each route declares beside it ([`super::routes`]), enforced
//! by one middleware and written into the OpenAPI document from the same declarations.
//!
//! Keys travel as `Authorization: Bearer <key>`. No key, or an unknown or revoked one, is
//! answered `401` (with `WWW-Authenticate: Bearer`); a valid key without the scope an endpoint
//! needs, `403`. Health, readiness, metrics and the documentation are open.

use axum::body::Body;
use axum::extract::MatchedPath;
use axum::http::{Request, header};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, OpenApi, Ref, RefOr, ResponseBuilder, path::Operation,
    security::SecurityRequirement,
};

use std::sync::Arc;

use super::error::ApiError;
use crate::auth::{KeyRing, Scope, Verdict};
use axum::http::Method;

/// What a route needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone who can reach the service.
    Open,
    /// A key holding one of these scopes (admin holds every scope).
    Scopes(&'static [Scope]),
}

/// Any valid key.
pub const ANY: Access = Access::Scopes(&[Scope::Admin, Scope::Ingest, Scope::Predict]);
/// An admin key.
pub const ADMIN: Access = Access::Scopes(&[Scope::Admin]);
/// A key that may post batches.
pub const INGEST: Access = Access::Scopes(&[Scope::Admin, Scope::Ingest]);
/// A key that may predict and match.
pub const PREDICT: Access = Access::Scopes(&[Scope::Admin, Scope::Predict]);

/// One route and what it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub method: Method,
    /// The route as axum matches it (`/v1/models/{name}`), which is also its OpenAPI path.
    pub path: String,
    pub access: Access,
    /// The query parameters its OpenAPI entry documents.
    pub query: Vec<String>,
}

/// What every route needs.
#[derive(Clone, Debug, Default)]
pub struct Policy(Vec<Rule>);

impl Policy {
    pub(super) fn push(&mut self, rule: Rule) {
        self.0.push(rule);
    }

    pub fn rules(&self) -> &[Rule] {
        &self.0
    }

    /// What `method route` needs; a route without a rule needs `admin` (fail closed).
    pub fn access(&self, method: &str, route: &str) -> Access {
        match self.rule(method, route) {
            Some(rule) => rule.access,
            // A method that an open route does not have: its `405` says nothing a key guards.
            None if self.open_route(route) => Access::Open,
            // Anything else unlisted needs the admin scope (fail closed).
            None => ADMIN,
        }
    }

    /// Whether `route` is listed and open under every method it has.
    fn open_route(&self, route: &str) -> bool {
        let mut rules = self.0.iter().filter(|rule| rule.path == route).peekable();
        rules.peek().is_some() && rules.all(|rule| rule.access == Access::Open)
    }

    fn rule(&self, method: &str, route: &str) -> Option<&Rule> {
        // Axum answers HEAD with the GET handler: the same rule applies.
        let method = if method.eq_ignore_ascii_case("HEAD") {
            "GET"
        } else {
            method
        };
        self.0
            .iter()
            .find(|rule| rule.method.as_str().eq_ignore_ascii_case(method) && rule.path == route)
    }

    /// Refuses a query (`query`, the URI's, undecoded) to API route `method route` that names a
    /// parameter its entry does not document: a misspelt filter or a parameter of another
    /// endpoint would otherwise be ignored, and the answer look like the one asked for. Pages,
    /// assets and the operational endpoints outside `/v1/` take what a browser or scraper adds;
    /// a method the route does not have is left to its `405`.
    pub fn check_query(&self, method: &str, route: &str, query: &str) -> Result<(), ApiError> {
        let Some(rule) = self
            .rule(method, route)
            .filter(|_| route.starts_with("/v1/"))
        else {
            return Ok(());
        };
        let documented = &rule.query;
        let unknown = form_urlencoded::parse(query.as_bytes())
            .map(|(key, _)| key)
            .find(|key| !documented.iter().any(|d| d == key));
        match unknown {
            None => Ok(()),
            Some(key) if documented.is_empty() => Err(ApiError::InvalidQuery(format!(
                "unknown query parameter {key:?}: {method} {route} takes none"
            ))),
            Some(key) => Err(ApiError::InvalidQuery(format!(
                "unknown query parameter {key:?}: {method} {route} takes {}",
                documented.join(", ")
            ))),
        }
    }
}

/// What the middleware needs: the keys, and what every route needs.
#[derive(Clone)]
pub struct Guard {
    pub keys: Arc<KeyRing>,
    pub policy: Arc<Policy>,
}

/// Checks the request's key against the route's policy: the request to pass on (with the
/// key's principal where one was presented), or the answer that refuses it.
pub fn admit(guard: &Guard, mut request: Request<Body>) -> Result<Request<Body>, ApiError> {
    if !guard.keys.is_enforced() {
        return Ok(request);
    }
    // A route layer always sees the matched route; without one, nothing is open (fail closed).
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(String::new, |p| p.as_str().to_owned());
    let Access::Scopes(allowed) = guard.policy.access(request.method().as_str(), &route) else {
        return Ok(request);
    };
    let presented = match bearer(request.headers()) {
        Ok(key) => key.map(str::to_owned),
        Err(problem) => return Err(ApiError::Unauthorized(problem.into())),
    };
    let presented = presented.as_deref();
    match guard.keys.check(presented, allowed) {
        // A handler whose work depends on the body (a correction that also learns) checks the
        // caller's scopes itself.
        Verdict::Allowed(Some(principal)) => {
            request.extensions_mut().insert(principal);
            Ok(request)
        }
        Verdict::Allowed(None) => Ok(request),
        Verdict::Unauthenticated if presented.is_none() => Err(ApiError::Unauthorized(
            "this endpoint needs an API key: send `Authorization: Bearer <key>`".into(),
        )),
        Verdict::Unauthenticated => Err(ApiError::Unauthorized(
            "the API key is unknown or revoked".into(),
        )),
        Verdict::Forbidden(principal) => {
            tracing::info!(key = %principal.name, route, "API key lacks the scope");
            Err(ApiError::Forbidden(format!(
                "the API key {:?} has scopes {}; {} {route} needs {}",
                principal.name,
                join(&principal.scopes),
                request.method(),
                join(allowed),
            )))
        }
    }
}

/// The key of an `Authorization: Bearer` header; `Ok(None)` when there is no header. Two
/// headers are refused: which key would speak for the request is not the server's to guess.
pub(super) fn bearer(headers: &axum::http::HeaderMap) -> Result<Option<&str>, &'static str> {
    let mut given = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = given.next() else {
        return Ok(None);
    };
    if given.next().is_some() {
        return Err("the request has more than one Authorization header: send one");
    }
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

/// Writes `policy` into the OpenAPI document: the bearer scheme, and on every protected
/// operation its security requirement, the scopes in its description, and the 401 and 403
/// answers.
pub fn secure(openapi: &mut OpenApi, policy: &Policy) {
    let components = openapi.components.get_or_insert_with(Default::default);
    let mut scheme = Http::new(HttpAuthScheme::Bearer);
    scheme.bearer_format = Some("mdk_ followed by 64 hex digits".into());
    scheme.description = Some(
        "An API key from `POST /v1/keys` (or the bootstrap admin key of the configuration).".into(),
    );
    components.add_security_scheme(SECURITY_SCHEME, SecurityScheme::Http(scheme));
    for (path, item) in openapi.paths.paths.iter_mut() {
        for (method, operation) in super::document::operations_mut(item) {
            if let Access::Scopes(scopes) = policy.access(method.as_str(), path) {
                protect(operation, scopes);
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
