//! The lab console at `/console/`: a page for colourists and lab managers that reads and acts
//! through the public API only, with the key its user gives.
//!
//! Its files (page, script modules, style sheet, icon) are compiled into the binary and use no
//! framework and no third-party code, so the console works on an air-gapped plant network; the
//! page's `Content-Security-Policy` lets the browser load and ask nothing from anywhere else.

use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use utoipa_axum::routes;

use super::auth::Access;
use super::error::ApiError;
use super::extract::Path;
use super::routes::Routes;

const INDEX_HTML: &str = include_str!("console/index.html");

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

/// The files the page loads, by name: the entry module and the modules it imports, the style
/// sheet and the icon.
const FILES: [(&str, &str, &str); 8] = [
    ("console.js", JAVASCRIPT, include_str!("console/console.js")),
    ("session.js", JAVASCRIPT, include_str!("console/session.js")),
    ("dom.js", JAVASCRIPT, include_str!("console/dom.js")),
    ("charts.js", JAVASCRIPT, include_str!("console/charts.js")),
    ("models.js", JAVASCRIPT, include_str!("console/models.js")),
    ("kitchen.js", JAVASCRIPT, include_str!("console/kitchen.js")),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("console/console.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("console/favicon.svg"),
    ),
];

/// Same-origin only, and no inline script or style: the script sets colours through the DOM,
/// which the policy allows.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'none'";

/// The console's routes: open (the page holds no data; the API asks for the key).
pub fn routes(routes: Routes) -> Routes {
    routes
        .add(Access::Open, routes!(redirect))
        .add(Access::Open, routes!(page))
        .add(Access::Open, routes!(asset))
}

/// The console lives at `/console/` (its files are relative to it).
#[utoipa::path(get, operation_id = "console_redirect", path = "/console", tag = "operations",
    responses((status = 308, description = "Redirect to the lab console `/console/`")))]
pub async fn redirect() -> Redirect {
    // Relative, so that it stays right behind a proxy that mounts the service under a prefix.
    Redirect::permanent("console/")
}

/// The lab console (HTML; its script and style sheet are served by mordant).
#[utoipa::path(get, operation_id = "console_page", path = "/console/", tag = "operations",
    responses((status = 200, description = "The console", content_type = "text/html", body = String)))]
pub async fn page() -> Response {
    file("text/html; charset=utf-8", INDEX_HTML)
}

/// A file of the console: a script module, the style sheet or the icon.
///
/// The modules are `console.js`, the entry point, and those it imports.
#[utoipa::path(get, operation_id = "console_asset", path = "/console/{file}", tag = "operations",
    params(("file" = String, Path, description = "File name", example = "console.js")),
    responses(
        (status = 200, description = "The file"),
        (status = 404, description = "No such file", body = super::error::ErrorBody),
    ))]
pub async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    if name == "index.html" {
        return Ok(Redirect::permanent("./").into_response());
    }
    FILES
        .iter()
        .find(|(file, _, _)| *file == name)
        .map(|(_, kind, body)| file(kind, body))
        .ok_or_else(|| ApiError::NotFound(format!("the console has no file {name:?}")))
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
