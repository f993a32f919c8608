//! The API reference page at `/docs/`: Swagger UI on the service's own OpenAPI document.
//!
//! Every file the page loads is compiled into the binary: Swagger UI's script, style sheet and
//! icons (from `utoipa-swagger-ui`'s vendored copy) and our own page and starter script.
//! Nothing comes from a CDN, so the page works on an air-gapped plant network, and the page's
//! `Content-Security-Policy` tells the browser to load nothing from anywhere else.

use std::sync::{Arc, LazyLock};

use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use utoipa_axum::routes;
use utoipa_swagger_ui::Config;

use super::auth::Access;
use super::error::ApiError;
use super::extract::Path;
use super::routes::Routes;

const INDEX_HTML: &str = include_str!("docs/index.html");
const STARTER_JS: &str = include_str!("docs/mordant.js");

/// Same-origin only. Swagger UI sets inline `style` attributes and draws some icons as `data:`
/// images; it needs nothing else.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
     style-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'self'";
/// The reference page's routes: open.
pub fn routes(routes: Routes) -> Routes {
    routes
        .add(Access::Open, routes!(redirect))
        .add(Access::Open, routes!(page))
        .add(Access::Open, routes!(asset))
}

/// The reference page lives at `/docs/` (its files are relative to it).
#[utoipa::path(get, operation_id = "docs_redirect", path = "/docs", tag = "operations",
    responses((status = 308, description = "Redirect to the reference page `/docs/`")))]
pub async fn redirect() -> Redirect {
    // Relative, so that it stays right behind a proxy that mounts the service under a prefix.
    Redirect::permanent("docs/")
}

/// The API reference page (HTML; every script and style sheet it loads is served by mordant).
#[utoipa::path(get, operation_id = "docs_page", path = "/docs/", tag = "operations",
    responses((status = 200, description = "The reference page", content_type = "text/html", body = String)))]
pub async fn page() -> Response {
    with_policy(file(
        "text/html; charset=utf-8",
        INDEX_HTML.as_bytes().to_vec(),
    ))
}

/// A file of the reference page: Swagger UI's script, style sheet or icons.
#[utoipa::path(get, operation_id = "docs_asset", path = "/docs/{file}", tag = "operations",
    params(("file" = String, Path, description = "File name", example = "swagger-ui.css")),
    responses(
        (status = 200, description = "The file"),
        (status = 404, description = "No such file", body = super::error::ErrorBody),
    ))]
pub async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    match name.as_str() {
        "mordant.js" => Ok(file(
            "text/javascript; charset=utf-8",
            STARTER_JS.as_bytes().to_vec(),
        )),
        // Swagger UI's own page and starter would configure it differently from ours.
        "index.html" | "swagger-initializer.js" => Ok(Redirect::permanent("./").into_response()),
        _ => swagger_file(&name),
    }
}

fn swagger_file(name: &str) -> Result<Response, ApiError> {
    // The configuration only fills in Swagger UI's starter script, which is never served
    // (see `asset`), so a default one does.
    static CONFIG: LazyLock<Arc<Config<'static>>> = LazyLock::new(|| Arc::new(Config::default()));
    let not_found = || ApiError::NotFound(format!("the reference page has no file {name:?}"));
    match utoipa_swagger_ui::serve(name, CONFIG.clone()) {
        Ok(Some(found)) => Ok(file(&found.content_type, found.bytes.into_owned())),
        Ok(None) => Err(not_found()),
        Err(e) => Err(ApiError::internal(anyhow::anyhow!(
            "reading the reference page's file {name:?}: {e}"
        ))),
    }
}

fn file(content_type: &str, bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, content_type.to_owned())], bytes).into_response()
}

fn with_policy(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    response
}
