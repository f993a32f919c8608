//! Request bodies: read within the size limit, checked to be JSON, parsed into a value that the
//! domain parsers then validate (so every invalid value is reported with its path).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{StatusCode, header};
use serde_json::Value;

use super::error::ApiError;
use crate::domain::{Body, ModelName, RowField, check_json};

/// Path parameters, where one the URL cannot give (not UTF-8, say) is answered as every refusal
/// is, in the error shape: such a URL names nothing, `404`.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::NotFound(format!("this URL names nothing: {}", rejection.body_text()))
    }
}

/// Refuses a query that gives one of the parameters in `known` more than once: which value
/// counts would be a guess.
pub fn once_each(query: &[(String, String)], known: &[&str]) -> Result<(), ApiError> {
    for key in known {
        let times = query.iter().filter(|(k, _)| k == key).count();
        if times > 1 {
            return Err(ApiError::InvalidQuery(format!(
                "{key} is given {times} times: send it once"
            )));
        }
    }
    Ok(())
}

/// A JSON request body, parsed but not yet validated.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let RawJson(bytes) = RawJson::from_request(req, state).await?;
        parse_body(&bytes, &[], 0).map(|body| JsonBody(body.into_value()))
    }
}

/// Room in the process's budget of request bodies (see `reserve_body`), held by the request
/// and by the bytes read under it.
#[derive(Clone)]
pub struct BodyPermit(pub Arc<tokio::sync::OwnedSemaphorePermit>);

/// A request body's bytes, with the room they take in the budget: it is given back when the
/// last user of the bytes drops them.
pub struct BodyBytes {
    bytes: Bytes,
    _permit: Option<BodyPermit>,
}

impl BodyBytes {
    /// Bytes the service made itself (a correction's learnt dip), outside the budget: they are
    /// a few kilobytes, bounded by the request that made them.
    pub fn made(bytes: Vec<u8>) -> Self {
        Self {
            bytes: bytes.into(),
            _permit: None,
        }
    }
}

impl std::ops::Deref for BodyBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The bytes of a JSON request body (checked to be `application/json`, not yet parsed), for
/// handlers that read well-formed bodies without building a [`Value`] first.
pub struct RawJson(pub BodyBytes);

impl<S: Send + Sync> FromRequest<S> for RawJson {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        identity_coding(&req)?;
        match media_type(&req)? {
            mime if mime.eq_ignore_ascii_case("application/json") => {}
            mime => {
                return Err(ApiError::UnsupportedMediaType(format!(
                    "expected Content-Type: application/json, found {mime:?}"
                )));
            }
        }
        read_body(req, state).await.map(RawJson)
    }
}

/// A batch body: JSON (not yet parsed), or CSV for MES systems that export tables.
pub enum BatchBody {
    Json(BodyBytes),
    Csv(BodyBytes),
}

impl<S: Send + Sync> FromRequest<S> for BatchBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        identity_coding(&req)?;
        let json = match media_type(&req)? {
            mime if mime.eq_ignore_ascii_case("application/json") => true,
            mime if mime.eq_ignore_ascii_case("text/csv") => false,
            mime => {
                return Err(ApiError::UnsupportedMediaType(format!(
                    "expected Content-Type: application/json or text/csv, found {mime:?}"
                )));
            }
        };
        let body = read_body(req, state).await?;
        Ok(if json {
            BatchBody::Json(body)
        } else {
            BatchBody::Csv(body)
        })
    }
}

/// Refuses a body in a content coding (`Content-Encoding: gzip`, say; `415`, answered with
/// `Accept-Encoding: identity`): bodies are read as sent, so a compressed one was misread as
/// malformed JSON, and one labelled so but sent plain was stored.
fn identity_coding(req: &Request) -> Result<(), ApiError> {
    for value in req.headers().get_all(header::CONTENT_ENCODING) {
        let text = String::from_utf8_lossy(value.as_bytes());
        let coded = text
            .split(',')
            .map(str::trim)
            .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"));
        if coded {
            return Err(ApiError::UnsupportedEncoding(format!(
                "request bodies are read as sent: Content-Encoding {:?} is not supported; send \
                 the body uncompressed, without the header",
                text.trim()
            )));
        }
    }
    Ok(())
}

/// The media type of the request, without parameters. A `charset` other than UTF-8 is
/// refused (415): bodies are read as UTF-8, and reading UTF-16 as UTF-8 would misread them.
fn media_type(req: &Request) -> Result<&str, ApiError> {
    let value = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut parts = value.split(';');
    let mime = parts.next().unwrap_or("").trim();
    for parameter in parts {
        let Some((name, charset)) = parameter.split_once('=') else {
            continue;
        };
        let charset = charset.trim().trim_matches('"');
        if name.trim().eq_ignore_ascii_case("charset")
            && !charset.eq_ignore_ascii_case("utf-8")
            && !charset.eq_ignore_ascii_case("utf8")
        {
            return Err(ApiError::UnsupportedMediaType(format!(
                "bodies are read as UTF-8, found charset={charset:?}"
            )));
        }
    }
    Ok(mime)
}

/// The whole body, within the configured size limit (413 above it).
async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<BodyBytes, ApiError> {
    let permit = req.extensions().get::<BodyPermit>().cloned();
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge("the request body exceeds the configured limit".into())
        } else {
            ApiError::Malformed(format!("cannot read the request body: {rejection}"))
        }
    })?;
    Ok(BodyBytes {
        bytes,
        _permit: permit,
    })
}

/// Reads a JSON body whose arrays of rows are at `fields`, at most `max_rows` rows each.
pub fn parse_body(bytes: &[u8], fields: &[RowField], max_rows: usize) -> Result<Body, ApiError> {
    Body::parse(bytes, fields, max_rows).map_err(ApiError::from)
}

/// Refuses a body that is not JSON, without keeping any of it (a request for a model that does
/// not exist is told its body is malformed first).
pub fn check_malformed(bytes: &[u8]) -> Result<(), ApiError> {
    check_json(bytes).map_err(ApiError::from)
}

/// A model name from a URL path; a name that is not a slug cannot exist.
pub fn model_name(name: &str) -> Result<ModelName, ApiError> {
    ModelName::parse(name)
        .map_err(|e| ApiError::NotFound(format!("no model named {name:?}: names {e}")))
}
