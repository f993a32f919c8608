//! `/v1/keys`: create (the key is shown once), list and revoke API keys, admin only; and
//! `/v1/keys/self`, open: what the caller's own key may do.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::{ADMIN, bearer};
use super::error::{ApiError, ErrorBody};
use super::extract::JsonBody;
use super::extract::Path;
use super::routes::Routes;
use crate::auth::{self, Principal, Scope, Verdict};
use crate::domain::{Details, Invalid, describe};
use crate::store::KeyRecord;
/// The routes of API keys: all of them for admins, and the caller's own for anyone.
pub fn routes(routes: Routes) -> Routes {
    routes
        .add(super::auth::Access::Open, routes!(caller))
        .add(ADMIN, routes!(list))
        .add(ADMIN, routes!(create))
        .add(ADMIN, routes!(revoke))
}

/// Longest key name.
const MAX_NAME_CHARS: usize = 100;

/// Body of `POST /v1/keys`.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"name": "mes-line-3", "scopes": ["ingest"]}))]
pub struct CreateKey {
    /// What the key is for (1 to 100 characters, not only spaces, no control characters).
    #[schema(min_length = 1, max_length = 100, pattern = r"\S")]
    pub name: String,
    /// `admin`, `ingest` and/or `predict`, each at most once.
    #[schema(min_items = 1, max_items = 3)]
    pub scopes: Vec<Scope>,
}

/// A key as listed (never its secret).
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyView {
    #[schema(example = 3)]
    pub id: i64,
    #[schema(example = "mes-line-3")]
    pub name: String,
    /// The first characters of the key.
    #[schema(example = "mdk_5f1c09ab")]
    pub prefix: String,
    pub scopes: Vec<Scope>,
    #[schema(example = "2026-11-22T08:00:00Z")]
    pub created_at: DateTime<Utc>,
    #[schema(example = json!(null))]
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<KeyRecord> for KeyView {
    fn from(k: KeyRecord) -> Self {
        Self {
            id: k.id,
            name: k.name,
            prefix: k.prefix,
            scopes: k.scopes,
            created_at: k.created_at,
            revoked_at: k.revoked_at,
        }
    }
}

/// A new key: the only time its secret is shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewKey {
    /// The key to send as `Authorization: Bearer <key>`. Store it now: it cannot be shown again.
    #[schema(example = "mdk_5f1c09ab3e…")]
    pub key: String,
    /// Whether the service checks keys: false where no admin key is configured (development),
    /// where every request is let in and this key, though stored, guards nothing yet.
    pub enforced: bool,
    #[serde(flatten)]
    pub view: KeyView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

/// The key a request was made with: what a client (the lab console) may offer its user.
#[derive(Debug, Serialize, ToSchema)]
pub struct CallerView {
    /// The key's name; null without a key, or where keys are not enforced.
    #[schema(example = "lab-bench-2")]
    pub name: Option<String>,
    /// What the key may do (`admin` may do everything): none without a key, every scope where
    /// keys are not enforced.
    pub scopes: Vec<Scope>,
    /// Whether the service checks keys at all (it does not in development without an admin
    /// key).
    pub enforced: bool,
}

/// The caller's own key: its name and scopes (never its secret). Open: without a key it says
/// whether one is needed; a key it does not know is answered 401.
#[utoipa::path(get, operation_id = "get_caller_key", path = "/v1/keys/self", tag = "keys",
    responses(
        (status = 200, description = "The key the request was made with, if any", body = CallerView),
        (status = 401, description = "The key is malformed, unknown or revoked", body = ErrorBody),
    ))]
pub async fn caller(
    State(app): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Json<CallerView>, ApiError> {
    if !app.keys.is_enforced() {
        return Ok(Json(CallerView {
            name: None,
            scopes: vec![Scope::Admin],
            enforced: false,
        }));
    }
    let presented = bearer(&headers).map_err(|problem| ApiError::Unauthorized(problem.into()))?;
    let Some(key) = presented else {
        return Ok(Json(CallerView {
            name: None,
            scopes: Vec::new(),
            enforced: true,
        }));
    };
    match app
        .keys
        .check(Some(key), &[Scope::Admin, Scope::Ingest, Scope::Predict])
    {
        Verdict::Allowed(Some(principal)) | Verdict::Forbidden(principal) => Ok(Json(CallerView {
            name: Some(principal.name),
            scopes: principal.scopes,
            enforced: true,
        })),
        Verdict::Allowed(None) | Verdict::Unauthenticated => Err(ApiError::Unauthorized(
            "the API key is unknown or revoked".into(),
        )),
    }
}

/// Create an API key; its secret is in this response only.
#[utoipa::path(post, operation_id = "create_key", path = "/v1/keys", tag = "keys",
    request_body = CreateKey,
    responses(
        (status = 201, description = "Created; `key` is shown only now", body = NewKey),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid name or scopes", body = ErrorBody),
    ))]
pub async fn create(
    State(app): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<impl IntoResponse, ApiError> {
    let (name, scopes) = parse_create(&body)?;
    let key = auth::generate_key()
        .map_err(|e| ApiError::internal(anyhow::anyhow!("no random bytes for a key: {e}")))?;
    let hash = auth::hash_key(&key);
    let record = app
        .store
        .create_key(&name, &auth::display_prefix(&key), &hash, &scopes)
        .await?;
    app.keys.insert(
        hash,
        Principal {
            key_id: Some(record.id),
            name: record.name.clone(),
            scopes: record.scopes.clone(),
        },
    );
    tracing::info!(key_id = record.id, name = %record.name, scopes = ?record.scopes, "API key created");
    Ok((
        StatusCode::CREATED,
        Json(NewKey {
            key,
            enforced: app.keys.is_enforced(),
            view: record.into(),
        }),
    ))
}

/// List API keys, revoked ones included (never their secrets).
#[utoipa::path(get, operation_id = "list_keys", path = "/v1/keys", tag = "keys",
    responses((status = 200, description = "Every key, oldest first", body = KeyList)))]
pub async fn list(State(app): State<AppState>) -> Result<Json<KeyList>, ApiError> {
    let keys = app.store.list_keys().await?;
    Ok(Json(KeyList {
        keys: keys.into_iter().map(KeyView::from).collect(),
    }))
}

/// Revoke an API key (at once on this replica, within a notification on the others).
#[utoipa::path(delete, operation_id = "revoke_key", path = "/v1/keys/{id}", tag = "keys",
    params(("id" = i64, Path, description = "Key id")),
    responses(
        (status = 200, description = "Revoked (revoking again changes nothing)", body = KeyView),
        (status = 404, description = "No such key", body = ErrorBody),
    ))]
pub async fn revoke(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<KeyView>, ApiError> {
    let not_found = || ApiError::NotFound(format!("no API key with id {id:?}"));
    let key_id: i64 = id.parse().map_err(|_| not_found())?;
    let record = app.store.revoke_key(key_id).await?.ok_or_else(not_found)?;
    app.keys.revoke(key_id);
    tracing::info!(key_id, name = %record.name, "API key revoked");
    Ok(Json(record.into()))
}

fn parse_create(body: &Value) -> Result<(String, Vec<Scope>), ApiError> {
    let Some(object) = body.as_object() else {
        let problem = format!("must be an object, found {}", describe(body));
        return Err(Invalid::one("", format!("invalid key: {problem}")).into());
    };
    let mut details = Details::default();
    for field in object.keys() {
        if !matches!(field.as_str(), "name" | "scopes") {
            details.push(
                format!("/{}", crate::domain::pointer_token(field)),
                "unknown field (expected name, scopes)",
            );
        }
    }
    let name = match object.get("name") {
        Some(Value::String(s)) if s.trim().is_empty() => {
            details.push("/name", "must not be empty");
            String::new()
        }
        Some(Value::String(s)) if s.chars().count() > MAX_NAME_CHARS => {
            details.push(
                "/name",
                format!("must be at most {MAX_NAME_CHARS} characters"),
            );
            String::new()
        }
        // PostgreSQL's text cannot hold a NUL, and no other control character belongs in a
        // name that lists and logs show.
        Some(Value::String(s)) if s.chars().any(char::is_control) => {
            details.push("/name", "must not contain control characters");
            String::new()
        }
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            details.push(
                "/name",
                format!("must be a string, found {}", describe(other)),
            );
            String::new()
        }
        None => {
            details.push("/name", "is required");
            String::new()
        }
    };
    let mut scopes = Vec::new();
    match object.get("scopes") {
        Some(Value::Array(items)) if items.is_empty() => {
            details.push("/scopes", "must name at least one scope");
        }
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item.as_str().and_then(Scope::parse) {
                    Some(s) if scopes.contains(&s) => {
                        details.push(format!("/scopes/{i}"), format!("{s} is listed twice"));
                    }
                    Some(s) => scopes.push(s),
                    None => details.push(
                        format!("/scopes/{i}"),
                        format!(
                            "must be \"admin\", \"ingest\" or \"predict\", found {}",
                            describe(item)
                        ),
                    ),
                }
            }
        }
        Some(other) => details.push(
            "/scopes",
            format!("must be an array of scopes, found {}", describe(other)),
        ),
        None => details.push("/scopes", "is required"),
    }
    details.finish("invalid key")?;
    scopes.sort();
    Ok((name, scopes))
}
