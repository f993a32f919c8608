//! The HTTP API (DESIGN.md §3): one module per resource, one error type, one router.

pub mod auth;
pub mod batches;
pub mod colour;
pub mod console;
pub mod correct;
pub mod docs;
pub mod document;
pub mod error;
pub mod extract;
pub mod growth;
pub mod keys;
pub mod matching;
pub mod models;
pub mod ops;
pub mod predict;
pub mod routes;
pub mod serve;
mod state;
pub mod successor;
pub mod versions;

use std::sync::Arc;

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, State};
use axum::http::{HeaderName, HeaderValue, Method, Request, header};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;
use utoipa::{Modify, OpenApi};

use crate::config::{Limits, ServerSettings};
use crate::metrics::Metrics;
use auth::Guard;
use document::ProtocolAddon;
use error::ApiError;
use routes::Routes;

pub use auth::Policy;
pub use extract::model_name;
pub use state::{AppState, Shared};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "mordant",
        description = "Incremental Bayesian linear regression from spectra and lab results to \
                       dye concentrations, with the uncertainty of every prediction.\n\n\
                       Every error answer is an `ErrorBody`, including `404` for a path that \
                       does not exist and `405` for a method a path does not have. A JSON body \
                       with a key repeated in an object is refused (`400`).",
        license(name = "MIT"),
    ),
    tags(
        (name = "models", description = "Model specifications and posteriors"),
        (name = "batches", description = "Observation batches (the learning queue)"),
        (name = "predict", description = "Concentrations with their uncertainty"),
        (name = "versions", description = "Model history, restore and refit"),
        (name = "keys", description = "API keys and their scopes (admin)"),
        (name = "operations", description = "Health, readiness, metrics, documentation"),
    ),
    servers((url = "/", description = "The server that serves this document")),
)]
pub struct ApiDoc;

/// Every route of the API, each module's beside the access it needs; `/metrics` is served
/// here unless `metrics_here` is false (documented either way).
pub fn api(metrics_here: bool) -> Routes {
    let routes = Routes::new(ApiDoc::openapi());
    let routes = models::routes(routes);
    let routes = growth::routes(routes);
    let routes = successor::routes(routes);
    let routes = batches::routes(routes);
    let routes = predict::routes(routes);
    let routes = matching::routes(routes);
    let routes = correct::routes(routes);
    let routes = colour::routes(routes);
    let routes = versions::routes(routes);
    let routes = keys::routes(routes);
    let routes = ops::routes(routes, metrics_here);
    let routes = docs::routes(routes);
    console::routes(routes)
}

/// What every route needs.
pub fn policy() -> Policy {
    api(true).into_parts().2
}

/// The OpenAPI document: the routes' entries, with what each needs and the answers every
/// operation shares.
pub fn document() -> utoipa::openapi::OpenApi {
    let (_, mut document, policy) = api(true).into_parts();
    auth::secure(&mut document, &policy);
    ProtocolAddon.modify(&mut document);
    document
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The application's router with its middleware. `/metrics` is on it unless
/// `server.metrics_addr` moves it to [`metrics_router`].
pub fn router(state: AppState, server: &ServerSettings) -> anyhow::Result<Router> {
    let body_limit = state.limits.max_body_bytes;
    let head_limits = HeadLimits::from(&state.limits);
    let budget = BodyBudget::new(&state.limits);
    let timeout = Duration::from_secs(state.limits.request_timeout_secs);
    let metrics = state.metrics.clone();
    let (api, _, policy) = api(server.metrics_addr.is_empty()).into_parts();
    let guard = Guard {
        keys: state.keys.clone(),
        policy: Arc::new(policy),
    };
    let router = api
        // Before the route layers, so that 405 answers carry their route like the rest.
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        // One route layer, not three: each boxes every route again, and a request clones the
        // chain of boxes at each layer it passes.
        .route_layer(middleware::from_fn_with_state(
            RouteLayer { guard, timeout },
            per_route,
        ))
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .with_state(state);
    let outer = OuterLayers {
        metrics,
        body_limit,
        budget,
        head_limits,
        cors: cors(&server.cors_origins)?,
    };
    Ok(serve_layers(router, outer))
}

/// What [`serve_layers`] puts around the routes.
struct OuterLayers {
    metrics: Arc<Metrics>,
    body_limit: usize,
    budget: BodyBudget,
    head_limits: HeadLimits,
    cors: Option<CorsLayer>,
}

/// The layers around the routes: body limits, the panic guard, tracing, request ids, the
/// head's limits, CORS, and outermost the metrics, so that every answer is counted: those of
/// requests no route matched (`route="unmatched"`: unknown paths, CORS preflights, and `431`,
/// `413` for an announced length and `503 busy`, refused before routing) and the `500` of a
/// handler that panicked.
///
/// They wrap the router once, as one service, instead of each route by `Router::layer`: there
/// every layer boxes every route's service again, and a request cloned the whole chain of boxes
/// at each layer it passed (about ninety allocations per request).
fn serve_layers(router: Router, outer: OuterLayers) -> Router {
    let OuterLayers {
        metrics,
        body_limit,
        budget,
        head_limits,
        cors,
    } = outer;
    let stack = ServiceBuilder::new()
        .layer(middleware::from_fn_with_state(metrics, track))
        .option_layer(cors)
        // Outside the request id, so that it counts the headers as sent (not the id added
        // below), and refuses an announced body over the limit before any of it is read.
        .layer(middleware::from_fn_with_state(head_limits, check_head))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request<_>| {
                    let id = request
                        .headers()
                        .get(&REQUEST_ID)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-");
                    tracing::info_span!(
                        "request",
                        request_id = %id,
                        method = %request.method(),
                        path = %request.uri().path(),
                    )
                })
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        .layer(CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::internal(anyhow::anyhow!("a request handler panicked")).into_response()
            },
        ))
        .layer(middleware::from_fn_with_state(budget, reserve_body))
        .layer(DefaultBodyLimit::max(body_limit))
        .service(router);
    Router::new().fallback_service(stack)
}

/// `/metrics` alone, for `server.metrics_addr`.
pub fn metrics_router(state: AppState) -> Router {
    let metrics = state.metrics.clone();
    Router::new()
        .route("/metrics", get(ops::metrics))
        .route_layer(middleware::from_fn(note_route))
        .fallback(|| async { ApiError::NotFound("this listener serves /metrics only".into()) })
        .with_state(state)
        .layer(middleware::from_fn_with_state(metrics, track))
}

/// The CORS layer for `origins` (`None` when there are none: browsers then refuse other
/// origins, as they do by default).
fn cors(origins: &[String]) -> anyhow::Result<Option<CorsLayer>> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let list = origins
            .iter()
            .map(|o| {
                HeaderValue::from_str(o.trim_end_matches('/'))
                    .map_err(|_| anyhow::anyhow!("server.cors_origins: {o:?} is not an origin"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        AllowOrigin::list(list)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            // Every method an operation of the OpenAPI document uses (a test walks it).
            .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("idempotency-key"),
                REQUEST_ID,
            ])
            .expose_headers([
                REQUEST_ID,
                HeaderName::from_static("idempotent-replayed"),
                header::RETRY_AFTER,
            ])
            .max_age(Duration::from_secs(600)),
    ))
}

/// What a request's head may hold: checked before its body is read.
#[derive(Clone, Copy, Debug)]
pub struct HeadLimits {
    /// Bytes of the request line and header fields (each counted as `name: value\r\n`).
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_body_bytes: usize,
}

impl From<&Limits> for HeadLimits {
    fn from(limits: &Limits) -> Self {
        Self {
            max_header_bytes: limits.max_header_bytes,
            max_headers: limits.max_headers,
            max_body_bytes: limits.max_body_bytes,
        }
    }
}

impl ApiError {
    /// The answer to a request refused before the request-id layers: with its id all the same,
    /// the one the client sent or a new one, as every other answer has.
    fn refused(self, headers: &axum::http::HeaderMap) -> Response {
        let mut response = self.into_response();
        let id = headers.get(&REQUEST_ID).cloned().unwrap_or_else(|| {
            HeaderValue::try_from(uuid::Uuid::new_v4().to_string())
                .unwrap_or(HeaderValue::from_static("-"))
        });
        response.headers_mut().insert(REQUEST_ID, id);
        response
    }
}

/// A transfer coding other than `chunked` (`Transfer-Encoding: gzip, chunked`), refused with
/// `501` (RFC 9112, 6.1): hyper undoes the chunking only, so such a body reached the handlers
/// still coded, misread as malformed JSON, or stored as sent where it was not coded at all.
fn transfer_coding(headers: &axum::http::HeaderMap) -> Option<ApiError> {
    let coded = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .find(|value| {
            String::from_utf8_lossy(value.as_bytes())
                .split(',')
                .map(str::trim)
                .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("chunked"))
        })?;
    Some(ApiError::NotImplemented(format!(
        "request bodies are read as sent: Transfer-Encoding {:?} is not supported; send the body \
         uncoded, with Content-Length or chunked alone",
        String::from_utf8_lossy(coded.as_bytes()).trim()
    )))
}

/// Refuses, in the error shape, a request whose headers are over the limits (`431`) or whose
/// announced `Content-Length` is (`413`, before a byte of the body is waited for). Outside the
/// request-id layers (it counts the headers as sent), so its answers take their id here.
async fn check_head(
    State(limits): State<HeadLimits>,
    request: Request<Body>,
    next: Next,
) -> Response {
    let headers = request.headers();
    if headers.len() > limits.max_headers {
        return ApiError::HeadersTooLarge(format!(
            "{} header fields, the limit is {}",
            headers.len(),
            limits.max_headers
        ))
        .refused(headers);
    }
    // The request line: method, target, version and their separators.
    let line = request.method().as_str().len()
        + request
            .uri()
            .path_and_query()
            .map_or(1, |p| p.as_str().len())
        + " HTTP/1.1\r\n ".len();
    let bytes = line
        + headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum::<usize>();
    if bytes > limits.max_header_bytes {
        return ApiError::HeadersTooLarge(format!(
            "the request line and headers hold {bytes} bytes, the limit is {}",
            limits.max_header_bytes
        ))
        .refused(headers);
    }
    // hyper has refused a malformed length before the request gets here.
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = announced
        && n > limits.max_body_bytes as u64
    {
        return ApiError::PayloadTooLarge(format!(
            "the body announces {n} bytes, the limit is {}",
            limits.max_body_bytes
        ))
        .refused(headers);
    }
    next.run(request).await
}

/// The request bodies the process may hold at once (`limits.max_body_bytes_in_flight`).
#[derive(Clone)]
pub struct BodyBudget {
    /// One permit per KiB.
    kib: Arc<tokio::sync::Semaphore>,
    max_body_bytes: usize,
    in_flight_bytes: usize,
}

/// How long a request waits for room in the budget before it is answered `503 busy`.
const BUDGET_WAIT: Duration = Duration::from_secs(1);

impl BodyBudget {
    pub fn new(limits: &Limits) -> Self {
        let kib = limits
            .max_body_bytes_in_flight
            .div_ceil(1024)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        Self {
            kib: Arc::new(tokio::sync::Semaphore::new(kib)),
            max_body_bytes: limits.max_body_bytes,
            in_flight_bytes: limits.max_body_bytes_in_flight,
        }
    }
}

/// Holds room in the [`BodyBudget`] for the request's body until its answer is ready: its
/// announced length, or the largest allowed when it announces none (chunked). A request
/// without a body needs none.
async fn reserve_body(
    State(budget): State<BodyBudget>,
    request: Request<Body>,
    next: Next,
) -> Response {
    use axum::body::HttpBody;
    let hint = request.body().size_hint();
    let bytes = match hint.exact() {
        Some(0) => return next.run(request).await,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        // Only a body without a length (chunked) comes in a transfer coding; refused here,
        // inside the request id's layers, so that the answer carries its id like the others.
        None => match transfer_coding(request.headers()) {
            Some(refused) => return refused.into_response(),
            None => budget.max_body_bytes,
        },
    }
    .min(budget.max_body_bytes);
    let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
    let permit =
        tokio::time::timeout(BUDGET_WAIT, budget.kib.clone().acquire_many_owned(kib)).await;
    match permit {
        Ok(Ok(permit)) => {
            // The body's reader keeps a share with the bytes, so the room stays taken while
            // work on them outlives the request (a blocking parse after a timeout).
            let mut request = request;
            request
                .extensions_mut()
                .insert(extract::BodyPermit(Arc::new(permit)));
            next.run(request).await
        }
        _ => ApiError::Busy(format!(
            "the server holds as many request bodies as it may ({} bytes in flight): retry \
             shortly",
            budget.in_flight_bytes
        ))
        .into_response(),
    }
}

/// What [`per_route`] needs.
#[derive(Clone)]
struct RouteLayer {
    guard: Guard,
    timeout: Duration,
}

/// Once routing has happened: notes the route for the metrics ([`note`]), checks the
/// request's key against the route's policy ([`auth::admit`]) and its query against the
/// parameters the route documents ([`auth::Policy::check_query`]), and answers `503 timeout` when
/// the request (its body included) takes longer than the limit. A batch whose request timed
/// out may still have been stored: its retry with the same id is answered from the stored
/// batch.
async fn per_route(
    State(layer): State<RouteLayer>,
    request: Request<Body>,
    next: Next,
) -> Response {
    note(&request);
    let request = match auth::admit(&layer.guard, request) {
        Ok(request) => request,
        Err(refused) => return refused.into_response(),
    };
    if let (Some(query), Some(route)) = (
        request.uri().query(),
        request.extensions().get::<MatchedPath>(),
    ) && let Err(refused) =
        layer
            .guard
            .policy
            .check_query(request.method().as_str(), route.as_str(), query)
    {
        return refused.into_response();
    }
    match tokio::time::timeout(layer.timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout(format!(
            "the request took longer than the limit of {} s",
            layer.timeout.as_secs()
        ))
        .into_response(),
    }
}

/// The route a request matched, noted by [`per_route`] (or [`note_route`] on the metrics
/// listener) once routing has happened, for [`track`] outside the router.
#[derive(Clone, Default)]
struct RouteSlot(Arc<std::sync::OnceLock<MatchedPath>>);

/// Counts and times every request by the route it matched (`unmatched` when none did).
async fn track(
    State(metrics): State<Arc<Metrics>>,
    mut request: Request<Body>,
    next: Next,
) -> Response {
    let slot = RouteSlot::default();
    request.extensions_mut().insert(slot.clone());
    let method = request.method().clone();
    let start = Instant::now();
    let response = next.run(request).await;
    metrics.observe_request(
        slot.0.get().map_or("unmatched", MatchedPath::as_str),
        method.as_str(),
        response.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    response
}

/// Notes the matched route in the request's [`RouteSlot`], as a route layer of its own (the
/// metrics listener's router, which needs no key or time limit).
async fn note_route(request: Request<Body>, next: Next) -> Response {
    note(&request);
    next.run(request).await
}

/// Notes the matched route in the request's [`RouteSlot`].
fn note(request: &Request<Body>) {
    if let (Some(slot), Some(path)) = (
        request.extensions().get::<RouteSlot>(),
        request.extensions().get::<MatchedPath>(),
    ) {
        let _ = slot.0.set(path.clone());
    }
}

/// The OpenAPI document as committed in `openapi/openapi.json` (pretty JSON, final newline
/// omitted).
pub fn openapi_json() -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(&document())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use axum::http::StatusCode;
    use tower::ServiceExt;

    use super::*;
    use crate::cache::PosteriorCache;
    use crate::config::{Environment, Settings};

    /// The answers of the layers around the routes are counted: a handler's panic (the
    /// panic guard's 500), a path no route has, and a head refused before routing.
    #[tokio::test]
    async fn answers_outside_the_routes_are_counted() {
        let settings = Settings::load_from(Path::new("/nonexistent"), Environment::Development)
            .expect("defaults");
        let metrics = Arc::new(Metrics::new().expect("metrics"));
        let routes = Router::new()
            .route(
                "/boom",
                get(|| async {
                    panic!("a handler that panics");
                    #[allow(unreachable_code)]
                    ""
                }),
            )
            .route_layer(middleware::from_fn(note_route));
        let app = serve_layers(
            routes,
            OuterLayers {
                metrics: metrics.clone(),
                body_limit: settings.limits.max_body_bytes,
                budget: BodyBudget::new(&settings.limits),
                head_limits: HeadLimits::from(&settings.limits),
                cors: cors(&["https://colour.plant.example".to_owned()]).expect("cors"),
            },
        );
        let send = |request: Request<Body>| {
            let app = app.clone();
            async move { app.oneshot(request).await.expect("an answer").status() }
        };
        let get = |path: &str| Request::get(path).body(Body::empty()).expect("request");
        assert_eq!(send(get("/boom")).await, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(send(get("/nowhere")).await, StatusCode::NOT_FOUND);
        let preflight = Request::options("/boom")
            .header("origin", "https://colour.plant.example")
            .header("access-control-request-method", "GET")
            .body(Body::empty())
            .expect("request");
        assert_eq!(send(preflight).await, StatusCode::OK);
        let mut crowded = Request::get("/boom");
        for i in 0..=settings.limits.max_headers {
            crowded = crowded.header(format!("x-h{i}"), "v");
        }
        let crowded = crowded.body(Body::empty()).expect("request");
        assert_eq!(
            send(crowded).await,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );

        let text = metrics
            .render(&PosteriorCache::default(), None)
            .expect("render");
        let count = |route: &str, status: &str| {
            text.lines()
                .filter(|l| l.starts_with("mordant_http_requests_total{"))
                .find(|l| {
                    l.contains(&format!("route=\"{route}\""))
                        && l.contains(&format!("status=\"{status}\""))
                })
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_owned)
        };
        assert_eq!(count("/boom", "500").as_deref(), Some("1"), "{text}");
        assert_eq!(count("unmatched", "404").as_deref(), Some("1"), "{text}");
        assert_eq!(count("unmatched", "431").as_deref(), Some("1"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("mordant_http_requests_total{")
                    && l.contains("method=\"OPTIONS\"")),
            "the preflight is counted: {text}"
        );
    }
}
