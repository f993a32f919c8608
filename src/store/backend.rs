//! The backend traits both stores implement, and their notifications.

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::Scope;
use crate::domain::{ContentHash, EncodedBatch, ModelName, ModelSpec, NewBatch};

use super::{
    BatchRecord, BatchStatus, Ingested, KeyRecord, ModelHead, ModelLock, ModelRecord, QueueDepth,
    Review, StoreError, VersionRecord, dump,
};

/// What a notification is about. Each carries the model's id, except [`Topic::Keys`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topic {
    /// A batch was queued (wakes the folders).
    Batches,
    /// A model was created or deleted, or got a new version (keeps posterior caches current).
    Models,
    /// An API key was created or revoked.
    Keys,
}

impl Topic {
    pub const ALL: [Topic; 3] = [Topic::Batches, Topic::Models, Topic::Keys];
}

/// A committed change, announced to subscribers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notification {
    pub topic: Topic,
    pub model_id: Option<i64>,
}

/// A stream of notifications on the topics subscribed to.
#[async_trait]
pub trait Subscription: Send {
    /// The next notification. `Ok(None)` means some may have been lost (a reconnection, or a
    /// subscriber that fell behind): resynchronise from the store.
    async fn recv(&mut self) -> Result<Option<Notification>, StoreError>;
}

/// One storage backend. Every method is one transaction (or one read) of its own, except the
/// [`ModelLock`]s, which hold theirs until they commit or are dropped.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// `"postgres"` or `"sqlite"`, for logs and `/readyz`.
    fn kind(&self) -> &'static str;
    /// Applies the backend's embedded migrations.
    async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError>;
    /// The database answers and every embedded migration has been applied.
    async fn ready(&self) -> Result<(), String>;
    /// The database's migrations are this release's, every one unaltered and no other: what
    /// `mordant copy` asks of a source it reads without migrating (see [`check_schema`]).
    async fn check_schema(&self) -> Result<(), String>;
    /// Closes the connections (waiting for those in use to be returned).
    async fn close(&self);

    async fn create_model(&self, spec: &ModelSpec) -> Result<ModelRecord, StoreError>;
    /// Every model, by name.
    async fn list_models(&self) -> Result<Vec<ModelRecord>, StoreError>;
    async fn model(&self, name: &ModelName) -> Result<Option<ModelRecord>, StoreError>;
    async fn model_by_id(&self, id: i64) -> Result<Option<ModelRecord>, StoreError>;
    /// Deletes a model with its batches and versions (waiting for a fold of it to finish); its
    /// id, `None` if there was none.
    async fn delete_model(&self, name: &ModelName) -> Result<Option<i64>, StoreError>;

    /// Stores a batch durably (raw rows and statistics) and queues it, idempotently: a batch
    /// id the model has seen answers with the stored batch when the content is the same, and
    /// a conflict when it differs. Within a model, batches become visible in their arrival
    /// order (the order [`ModelLock::queued_batches`] lists them in), so a folder never sees a
    /// later batch without the earlier ones.
    async fn insert_batch(
        &self,
        model_id: i64,
        batch: &NewBatch,
        encoded: &EncodedBatch,
        statistics: &[u8],
    ) -> Result<Ingested, StoreError>;
    /// The batch stored under `batch_id`, as a retry of it whose content hashes to `hash` is
    /// answered by [`Backend::insert_batch`] (the stored batch when the content is the same, a
    /// conflict when it differs); `None` when the model has no such batch. Stores nothing.
    async fn replay_batch(
        &self,
        model_id: i64,
        batch_id: &str,
        hash: &ContentHash,
    ) -> Result<Option<Ingested>, StoreError>;
    async fn batch(&self, model_id: i64, batch_id: &str)
    -> Result<Option<BatchRecord>, StoreError>;
    /// A model's batches, newest first, only those with `status` if given.
    async fn list_batches(
        &self,
        model_id: i64,
        status: Option<BatchStatus>,
        limit: i64,
    ) -> Result<Vec<BatchRecord>, StoreError>;
    /// Releases or rejects a batch held for review (and wakes the folders on release). `None`
    /// when the model has no such batch; a conflict when it is not held.
    async fn review_batch(
        &self,
        model_id: i64,
        batch_id: &str,
        review: Review,
    ) -> Result<Option<BatchRecord>, StoreError>;
    /// A model's history, oldest first, each version with the batches folded into it.
    async fn versions(&self, model_id: i64) -> Result<Vec<VersionRecord>, StoreError> {
        self.versions_after(model_id, 0, None).await
    }
    /// A page of a model's history: the versions after `after`, oldest first, at most `limit`
    /// of them (every one when `None`).
    async fn versions_after(
        &self,
        model_id: i64,
        after: i64,
        limit: Option<u32>,
    ) -> Result<Vec<VersionRecord>, StoreError>;
    /// Every model's queue, by name.
    async fn queue_depth(&self) -> Result<Vec<QueueDepth>, StoreError>;
    /// Every model's id, name and current version (the posterior cache's view of the world).
    async fn heads(&self) -> Result<Vec<ModelHead>, StoreError>;
    /// A model's spec and current version, without reading its state.
    async fn model_head(&self, model_id: i64) -> Result<Option<(ModelSpec, i64)>, StoreError>;
    /// A model's spec, current version and that version's encoded state (`None` at version 0).
    async fn current_state(
        &self,
        model_id: i64,
    ) -> Result<Option<(ModelSpec, i64, Option<Vec<u8>>)>, StoreError>;

    /// Takes a model's write lock (waiting for a running fold), for restore and refit.
    async fn lock_model(&self, name: &ModelName) -> Result<Option<ModelLock>, StoreError>;
    /// Claims the model whose oldest queued batch is oldest among models with work (trained
    /// models with any queued batch, untrained ones once `first_fit_rows` rows are queued),
    /// skipping models whose lock is held and the models in `skip`.
    async fn claim_fold(&self, skip: &[i64]) -> Result<Option<ModelLock>, StoreError>;

    async fn create_key(
        &self,
        name: &str,
        prefix: &str,
        hash: &[u8; 32],
        scopes: &[Scope],
    ) -> Result<KeyRecord, StoreError>;
    /// Every key, revoked ones included, oldest first.
    async fn list_keys(&self) -> Result<Vec<KeyRecord>, StoreError>;
    /// The keys that are valid now, with the highest key id there was before they were read
    /// (every key up to that id is either among them or revoked).
    async fn active_keys(&self) -> Result<(i64, Vec<KeyRecord>), StoreError>;
    /// Revokes a key (revoking it again changes nothing); `None` when there is no such key.
    async fn revoke_key(&self, id: i64) -> Result<Option<KeyRecord>, StoreError>;

    /// Removes the raw rows of at most `limit` batches received before `received_before`,
    /// folded or rejected, that have statistics (a batch kept as its rows keeps them), in one
    /// transaction, and marks them purged; how many it purged. A batch of successor readings
    /// loses its readings too (kept where statistics are: see [`crate::successor`]).
    async fn purge_rows(
        &self,
        received_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError>;

    /// One model with all its batches and versions, read in one snapshot; `None` if there is
    /// no such model.
    async fn dump_model(&self, id: i64) -> Result<Option<dump::ModelDump>, StoreError>;
    /// Starts writing a copy into this store, which must hold no model and no key.
    async fn begin_load(&self) -> Result<Box<dyn dump::Loader>, StoreError>;

    /// Notifications on `topics`, from now on.
    async fn subscribe(&self, topics: &[Topic]) -> Result<Box<dyn Subscription>, StoreError>;
}

/// What a migration error means when waiting will not mend it: the database's record of its
/// migrations disagrees with this release's (`None` for errors of a database that may yet answer).
pub fn lasting_migration_error(error: &sqlx::migrate::MigrateError) -> Option<String> {
    use sqlx::migrate::MigrateError as E;
    Some(match error {
        E::VersionMissing(version) => format!(
            "the database was migrated by a newer release of mordant (its migration {version} \
             is unknown to this one): run that release or a later one, or restore a backup \
             taken before the upgrade"
        ),
        E::VersionMismatch(version) => format!(
            "the database's migration {version} differs from this release's: it was applied by \
             a build with other migrations"
        ),
        E::Dirty(version) => format!("the database's migration {version} is partly applied"),
        E::VersionNotPresent(_) | E::VersionTooOld(..) | E::VersionTooNew(..) => {
            format!("the database's migrations disagree with this release's: {error}")
        }
        // The migrations could not be read, or the database may not be written: said as is.
        E::Source(source) => source.to_string(),
        _ => return None,
    })
}

/// `/readyz`'s check: the database answered with the versions it has applied, and every
/// embedded migration is among them.
pub(super) async fn check_migrations(
    migrator: &sqlx::migrate::Migrator,
    applied: impl Future<Output = Result<Vec<i64>, sqlx::Error>>,
) -> Result<(), String> {
    let applied = applied.await.map_err(|e| format!("database: {e}"))?;
    let missing = migrator
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .count();
    if missing > 0 {
        return Err(format!("{missing} migrations not applied"));
    }
    Ok(())
}

/// One row of a database's record of its migrations: version, checksum, applied in full.
pub(super) type AppliedMigration = (i64, Vec<u8>, bool);

/// [`Backend::check_schema`]: every applied migration is one of this release's, with its
/// checksum, applied in full, and none is missing. `/readyz` allows a newer release's
/// migrations (an old replica keeps serving during a rolling upgrade); a copy may not, for it
/// would leave behind, unsaid, whatever those migrations added.
pub(super) async fn check_schema(
    migrator: &sqlx::migrate::Migrator,
    applied: impl Future<Output = Result<Vec<AppliedMigration>, sqlx::Error>>,
) -> Result<(), String> {
    use sqlx::migrate::MigrateError as E;
    let applied = applied.await.map_err(|e| match &e {
        // PostgreSQL's undefined_table; SQLite says it in words.
        sqlx::Error::Database(d)
            if d.code().as_deref() == Some("42P01") || d.message().contains("no such table") =>
        {
            "the database holds no mordant store (no migration was ever applied to it)".to_owned()
        }
        _ => format!("database: {e}"),
    })?;
    let lasting = |error: E| lasting_migration_error(&error).unwrap_or_else(|| error.to_string());
    for (version, checksum, success) in &applied {
        let Some(known) = migrator.iter().find(|m| m.version == *version) else {
            return Err(lasting(E::VersionMissing(*version)));
        };
        if !success {
            return Err(lasting(E::Dirty(*version)));
        }
        if *known.checksum != checksum[..] {
            return Err(lasting(E::VersionMismatch(*version)));
        }
    }
    let missing = migrator
        .iter()
        .filter(|m| !applied.iter().any(|(version, ..)| *version == m.version))
        .count();
    if missing > 0 {
        return Err(format!(
            "{missing} migrations not applied: migrate it with this release first \
             (`DATABASE_URL=<its URL> mordant migrate`)"
        ));
    }
    Ok(())
}
