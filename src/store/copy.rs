//! Moving a store's content to another store (`mordant copy --from URL --to URL`): the embedded
//! store a lab started on into the PostgreSQL it grows into, or back.
//!
//! Everything moves: models with every version (full and thin states with their digests),
//! batches with their raw rows, statistics, statuses, surprise and review decisions in arrival
//! order, and API keys (hashes only, with their ids, so `DELETE /v1/keys/{id}` still names
//! them). The target must be empty and is written in one transaction: an interrupted copy
//! leaves it empty. The source is read one model at a time, so memory holds one model's
//! batches and versions at once.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{BatchStatus, KeyRecord, Store, StoreError, VersionOrigin};

/// One model, all of it, as both backends read and write it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelDump {
    pub name: String,
    /// The specification as JSON text.
    pub spec: String,
    pub first_fit_rows: i64,
    pub version: i64,
    pub observations: f64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// In arrival order.
    pub batches: Vec<BatchDump>,
    /// Oldest first.
    pub versions: Vec<VersionDump>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BatchDump {
    pub batch_id: String,
    pub content_hash: Vec<u8>,
    pub rows: i32,
    pub x: Vec<u8>,
    pub y: Vec<u8>,
    pub statistics: Vec<u8>,
    pub status: BatchStatus,
    pub received_at: DateTime<Utc>,
    pub folded_at: Option<DateTime<Utc>>,
    pub version: Option<i64>,
    pub error: Option<String>,
    pub surprise: Option<Vec<Option<f64>>>,
    pub released: bool,
    pub rows_purged_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VersionDump {
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub origin: VersionOrigin,
    pub restored_from: Option<i64>,
    pub observations: f64,
    pub noise_variances: Vec<Option<f64>>,
    pub state: Vec<u8>,
    pub state_digest: Option<Vec<u8>>,
}

/// The transaction a copy writes the target in; dropping it rolls everything back.
#[async_trait]
pub trait Loader: Send {
    async fn model(&mut self, model: &ModelDump) -> Result<(), StoreError>;
    /// Keys with their ids.
    async fn keys(&mut self, keys: &[KeyRecord]) -> Result<(), StoreError>;
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

/// What a copy moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    pub models: usize,
    pub versions: usize,
    pub batches: usize,
    pub keys: usize,
}

/// What changes when a store is written to: each model's version, queue and held batches, and
/// each key. A copy reads it before and after, and refuses a source that changed meanwhile (a
/// service still running on a PostgreSQL source).
async fn fingerprint(store: &Store) -> Result<String, StoreError> {
    let mut seen = Vec::new();
    for m in store.list_models().await? {
        let held = store
            .list_batches(m.id, Some(BatchStatus::Held), i64::MAX)
            .await?
            .len();
        seen.push(format!(
            "{} {} {} {} {} {held}",
            m.id, m.version, m.pending_batches, m.pending_rows, m.updated_at
        ));
    }
    for k in store.list_keys().await? {
        seen.push(format!("key {} {:?}", k.id, k.revoked_at));
    }
    Ok(seen.join("\n"))
}

/// Copies everything in `from` into `to`, which must be empty; all of it or nothing.
pub async fn copy(from: &Store, to: &Store) -> Result<Copied, StoreError> {
    let mut loader = to.begin_load().await?;
    let mut copied = Copied::default();
    let before = fingerprint(from).await?;
    for model in from.list_models().await? {
        let dump = from.dump_model(model.id).await?.ok_or_else(|| {
            StoreError::Conflict(format!(
                "model {:?} was deleted while it was being copied",
                model.spec.name.as_str()
            ))
        })?;
        loader.model(&dump).await?;
        copied.models += 1;
        copied.versions += dump.versions.len();
        copied.batches += dump.batches.len();
    }
    let keys = from.list_keys().await?;
    loader.keys(&keys).await?;
    copied.keys = keys.len();
    if fingerprint(from).await? != before {
        return Err(StoreError::Conflict(
            "the source changed while it was being copied (is a service still running on it?): \
             stop it and copy again"
                .into(),
        ));
    }
    loader.commit().await?;
    Ok(copied)
}

/// The refusal of a copy into a store that holds something.
pub(super) fn not_empty(models: i64, keys: i64) -> StoreError {
    StoreError::Conflict(format!(
        "the target store is not empty ({models} models, {keys} API keys): a copy goes into an \
         empty store only"
    ))
}
