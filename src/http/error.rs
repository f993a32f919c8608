//! The one error type of the HTTP layer and its JSON form:
//! `{"error": {"code", "message", "details": [{"path", "message"}]}}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::{BodyError, Detail, Invalid};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON (or not UTF-8).
    #[error("{0}")]
    Malformed(String),
    /// The body is not readable as CSV.
    #[error("{0}")]
    MalformedCsv(String),
    /// A query parameter is not one the endpoint accepts.
    #[error("{0}")]
    InvalidQuery(String),
    /// Well-formed JSON that does not describe a valid request.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The body comes in a content coding (gzip, say): `415` with `Accept-Encoding: identity`.
    #[error("{0}")]
    UnsupportedEncoding(String),
    /// The body comes in a transfer coding other than `chunked` (`501`, RFC 9112 6.1).
    #[error("{0}")]
    NotImplemented(String),
    #[error("{0}")]
    NotFound(String),
    #[error("this method is not allowed on this path")]
    MethodNotAllowed,
    #[error("{0}")]
    Conflict(String),
    /// The model has no posterior yet.
    #[error("{0}")]
    NotTrained(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The request line and headers are over the limit.
    #[error("{0}")]
    HeadersTooLarge(String),
    /// No API key, or an unknown or revoked one.
    #[error("{0}")]
    Unauthorized(String),
    /// A valid API key without the scope the endpoint needs.
    #[error("{0}")]
    Forbidden(String),
    /// The request took longer than the configured limit.
    #[error("{0}")]
    Timeout(String),
    /// The process holds as many request bodies as its budget allows: retry shortly.
    #[error("{0}")]
    Busy(String),
    /// A stored state or statistics blob cannot be decoded.
    #[error(
        "the stored state of model {model:?} version {version} is corrupt ({reason}); restore \
         an earlier version: POST /v1/models/{model}/versions/{{n}}/restore with n < {version}"
    )]
    CorruptState {
        model: String,
        version: i64,
        reason: String,
    },
    /// The database is unreachable: retry later.
    #[error("the database is unavailable, retry later")]
    Unavailable,
    /// Anything else: logged in full, answered opaquely.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// The error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorInfo,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorInfo {
    /// Stable, machine-readable code.
    #[schema(example = "invalid_input")]
    pub code: &'static str,
    #[schema(example = "invalid batch: 2 invalid values")]
    pub message: String,
    /// One entry per invalid value (empty for errors that are not about input values).
    pub details: Vec<Detail>,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Malformed(_) | Self::MalformedCsv(_) | Self::InvalidQuery(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::UnsupportedMediaType(_) | Self::UnsupportedEncoding(_) => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            Self::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict(_) | Self::NotTrained(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Timeout(_) | Self::Busy(_) | Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::CorruptState { .. } | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed_json",
            Self::MalformedCsv(_) => "malformed_csv",
            Self::InvalidQuery(_) => "invalid_query",
            Self::Invalid(_) => "invalid_input",
            Self::UnsupportedMediaType(_) | Self::UnsupportedEncoding(_) => {
                "unsupported_media_type"
            }
            Self::NotImplemented(_) => "not_implemented",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Conflict(_) => "conflict",
            Self::NotTrained(_) => "model_not_trained",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::HeadersTooLarge(_) => "headers_too_large",
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::Timeout(_) => "timeout",
            Self::Busy(_) => "busy",
            Self::Unavailable => "database_unavailable",
            Self::CorruptState { .. } => "corrupt_state",
            Self::Internal(_) => "internal",
        }
    }

    pub fn not_found_model(name: &str) -> Self {
        Self::NotFound(format!("no model named {name:?}"))
    }

    pub fn internal(e: impl Into<anyhow::Error>) -> Self {
        Self::Internal(e.into())
    }
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::Malformed(message) => Self::Malformed(message),
            BodyError::TooLarge(message) => Self::PayloadTooLarge(message),
            BodyError::Invalid(invalid) => Self::Invalid(invalid),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => Self::NotFound(m),
            StoreError::Conflict(m) => Self::Conflict(m),
            StoreError::Unavailable(e) => {
                tracing::warn!(error = %e, "database unavailable");
                Self::Unavailable
            }
            StoreError::CorruptState {
                model,
                version,
                reason,
            } => {
                tracing::error!(model, version, reason, "corrupt stored state");
                Self::CorruptState {
                    model,
                    version,
                    reason,
                }
            }
            e @ (StoreError::Corrupt(_) | StoreError::Database(_)) => Self::Internal(e.into()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Internal(e) = &self {
            tracing::error!(error = ?e, "internal error");
        }
        let status = self.status();
        let details = match &self {
            Self::Invalid(invalid) => invalid.details.clone(),
            _ => Vec::new(),
        };
        let body = ErrorBody {
            error: ErrorInfo {
                code: self.code(),
                message: self.to_string(),
                details,
            },
        };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if matches!(self, Self::UnsupportedEncoding(_)) {
            response.headers_mut().insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        response
    }
}
