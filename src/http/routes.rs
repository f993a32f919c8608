//! Every route of the API declared once: the handler's `#[utoipa::path]` gives its path, method
//! and OpenAPI entry, and [`Routes::add`] puts the access it needs beside it. The router, the
//! OpenAPI document and the [`Policy`] that the auth middleware enforces are all read off the
//! same declarations, so none of them can miss a route the others have.

use utoipa::openapi::OpenApi;
use utoipa::openapi::path::{ParameterIn, Paths};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};

use super::AppState;
use super::auth::{Access, Policy, Rule};
use super::document::operations;

/// The routes declared so far: the router with its document, and the policy.
pub struct Routes {
    router: OpenApiRouter<AppState>,
    policy: Policy,
}

impl Routes {
    /// No routes yet; `base` is the document's title, tags and servers.
    pub fn new(base: OpenApi) -> Self {
        Self {
            router: OpenApiRouter::with_openapi(base),
            policy: Policy::default(),
        }
    }

    /// Serves and documents the handlers of `route` (`utoipa_axum::routes!(…)`), which need
    /// `access`.
    pub fn add(mut self, access: Access, route: UtoipaMethodRouter<AppState>) -> Self {
        self.note(access, &route.1);
        self.router = self.router.routes(route);
        self
    }

    /// Documents the handlers of `route` and records their access, without serving them here:
    /// for `/metrics` when it has a listener of its own.
    pub fn document(mut self, access: Access, route: UtoipaMethodRouter<AppState>) -> Self {
        self.note(access, &route.1);
        let (schemas, paths, _) = route;
        let document = self.router.get_openapi_mut();
        for (path, item) in paths.paths {
            match document.paths.paths.get_mut(&path) {
                Some(existing) => existing.merge_operations(item),
                None => {
                    document.paths.paths.insert(path, item);
                }
            }
        }
        document
            .components
            .get_or_insert_with(Default::default)
            .schemas
            .extend(schemas);
        self
    }

    fn note(&mut self, access: Access, paths: &Paths) {
        for (path, item) in &paths.paths {
            for (method, operation) in operations(item) {
                let query = operation
                    .parameters
                    .iter()
                    .flatten()
                    .filter(|p| matches!(p.parameter_in, ParameterIn::Query))
                    .map(|p| p.name.clone())
                    .collect();
                self.policy.push(Rule {
                    method,
                    path: path.clone(),
                    access,
                    query,
                });
            }
        }
    }

    /// The router (state still to be given), the document as declared (before the policy and
    /// the shared answers are written into it) and the policy.
    pub fn into_parts(self) -> (axum::Router<AppState>, OpenApi, Policy) {
        let (router, document) = self.router.split_for_parts();
        (router, document, self.policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::auth::{ADMIN, ANY, PREDICT};

    #[test]
    fn the_policy_is_read_off_the_declarations_and_fails_closed() {
        let policy = crate::http::policy();
        assert_eq!(policy.access("GET", "/v1/models"), ANY);
        assert_eq!(policy.access("POST", "/v1/models"), ADMIN);
        assert_eq!(policy.access("post", "/v1/models/{name}/predict"), PREDICT);
        // HEAD is answered by GET's handler, so it needs what GET needs.
        assert_eq!(policy.access("HEAD", "/healthz"), Access::Open);
        // A route nobody declared needs admin.
        assert_eq!(policy.access("GET", "/v1/undeclared"), ADMIN);
        assert_eq!(policy.access("PUT", "/v1/models"), ADMIN);
        // One rule per method and route.
        let mut seen: Vec<_> = policy
            .rules()
            .iter()
            .map(|rule| (rule.method.clone(), rule.path.clone()))
            .collect();
        let all = seen.len();
        seen.sort_by(|a, b| (a.0.as_str(), &a.1).cmp(&(b.0.as_str(), &b.1)));
        seen.dedup();
        assert_eq!(seen.len(), all);
    }

    #[test]
    fn metrics_elsewhere_stays_documented_and_open() {
        let (_, here, _) = crate::http::api(true).into_parts();
        let (_, elsewhere, policy) = crate::http::api(false).into_parts();
        assert_eq!(
            serde_json::to_value(&here).unwrap(),
            serde_json::to_value(&elsewhere).unwrap()
        );
        assert_eq!(policy.access("GET", "/metrics"), Access::Open);
    }
}
