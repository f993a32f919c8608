//! Moving a store's content to another store (`mordant copy --from URL --to URL`): the embedded
//! store a lab started on into the PostgreSQL it grows into, or back.
//!
//! Everything moves: models with every version (full and thin states with their digests),
//! batches with their raw rows, statistics, statuses, surprise and review decisions in arrival
//! order, and API keys (hashes only, with their ids, so `DELETE /v1/keys/{id}` still names
//! them). The target must be empty and is written in one transaction: an interrupted copy
//! leaves it empty. The source is read one model at a time, so memory holds one model's
//! batches and versions at once.

use super::{BatchStatus, Store, StoreError};

pub use super::dump::{BatchDump, Loader, ModelDump, VersionDump};

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
