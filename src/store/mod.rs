//! Persistence: models, the queue of batches, immutable versions and API keys, behind one
//! trait ([`Backend`]) with two implementations.
//!
//! * [`postgres`]: PostgreSQL, for production and for several replicas against one database.
//!   Notifications travel through `LISTEN/NOTIFY`, so every replica hears every change.
//! * [`sqlite`]: an embedded SQLite file, the default when no PostgreSQL URL is configured.
//!   One process owns the file (a second one is refused at start); notifications stay inside
//!   that process.
//!
//! Both keep the same promises, checked by one conformance suite (`tests/store.rs`) and the API
//! tests: a batch is on disk when ingestion returns; a model's batches are folded exactly once,
//! in arrival order; versions are immutable; a notification is sent only once the change it
//! announces is committed.
//!
//! [`Store`] is the cheap, cloneable handle the rest of the service holds.

pub mod copy;
pub mod postgres;
mod settings;
pub mod sqlite;
mod status;

pub use settings::DatabaseSettings;

pub use status::{BatchStatus, VersionOrigin};

use std::fmt;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::Scope;
use crate::domain::{EncodedBatch, ModelName, ModelSpec, NewBatch};

/// Errors of the store, as the HTTP layer needs to tell them apart.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// The database cannot be reached (or no connection is free): retry later.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// A version's stored state does not decode; restoring an earlier version repairs it.
    #[error("the stored state of model {model:?} version {version} is corrupt: {reason}")]
    CorruptState {
        model: String,
        version: i64,
        reason: String,
    },
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        let unavailable = match &e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::Io(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::Protocol(_)
            | sqlx::Error::Tls(_) => true,
            sqlx::Error::Database(db) => {
                if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                    postgres::is_unavailable_code(pg.code())
                } else if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                    sqlite::is_unavailable_code(db.code().as_deref())
                } else {
                    false
                }
            }
            _ => false,
        };
        if unavailable {
            Self::Unavailable(e)
        } else {
            Self::Database(e)
        }
    }
}

/// A model as stored, with its queue length.
#[derive(Clone, Debug)]
pub struct ModelRecord {
    pub id: i64,
    pub spec: ModelSpec,
    pub version: i64,
    pub observations: f64,
    pub pending_batches: i64,
    /// Rows of the queued batches.
    pub pending_rows: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A batch's status as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchRecord {
    pub batch_id: String,
    pub status: BatchStatus,
    pub rows: i32,
    pub received_at: DateTime<Utc>,
    pub folded_at: Option<DateTime<Utc>>,
    pub version: Option<i64>,
    pub error: Option<String>,
    /// Per output, how surprising the batch was to the posterior it met (`None` for an output
    /// not trained then); `None` before that was computed (queued, or part of the first fit).
    pub surprise: Option<Vec<Option<f64>>>,
    /// When retention removed the batch's raw rows (`None` while they are kept).
    pub rows_purged_at: Option<DateTime<Utc>>,
}

/// One entry of a model's history.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionRecord {
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub origin: VersionOrigin,
    pub restored_from: Option<i64>,
    pub observations: f64,
    pub noise_variances: Vec<Option<f64>>,
    pub batches: Vec<String>,
    /// Whether the version keeps its full state (else it is replayed when restored).
    pub full_state: bool,
}

/// Where a model stands, for the posterior cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelHead {
    pub id: i64,
    pub name: String,
    pub version: i64,
}

/// Batches and rows waiting in one model's queue.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueDepth {
    pub model: String,
    pub batches: i64,
    pub rows: i64,
}

/// What ingestion did with a batch.
#[derive(Clone, Debug)]
pub struct Ingested {
    pub batch: BatchRecord,
    /// The same batch had been accepted before; nothing was added.
    pub replayed: bool,
}

/// A queued batch, in arrival order.
#[derive(Clone, Debug)]
pub struct QueuedBatch {
    /// The batch's row, to mark it folded or rejected (not its place in the queue).
    pub seq: i64,
    pub batch_id: String,
    pub rows: i32,
    /// The encoded statistics; empty when the batch was stored without them (its rows cost
    /// less than its statistics would), and then `rows_x`, `rows_y` hold its raw rows.
    pub statistics: Vec<u8>,
    pub rows_x: Option<Vec<u8>>,
    pub rows_y: Option<Vec<u8>>,
    pub received_at: DateTime<Utc>,
    /// Released by an admin after a hold: folded whatever its surprise.
    pub released: bool,
}

/// What an admin decides of a batch held for review.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Review {
    /// Back into the queue: folded by the next fold, whatever its surprise.
    Release,
    /// Rejected for good.
    Reject,
}

/// A stored API key (never its text).
#[derive(Clone, Debug)]
pub struct KeyRecord {
    pub id: i64,
    pub name: String,
    pub prefix: String,
    pub hash: [u8; 32],
    pub scopes: Vec<Scope>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

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

/// A version's state as stored: in full, or thin (see [`ModelLock::write_version`]).
#[derive(Clone, Debug)]
pub struct StoredState {
    pub origin: VersionOrigin,
    /// The encoded state; empty when the version is thin.
    pub blob: Vec<u8>,
    /// SHA-256 of the encoded state; `None` for versions written before digests were kept
    /// (which are never thin).
    pub digest: Option<[u8; 32]>,
}

impl StoredState {
    /// The state is not stored: it is the previous version's with this version's batches
    /// folded in.
    pub fn is_thin(&self) -> bool {
        self.blob.is_empty()
    }
}

/// An encoded model state with its SHA-256, made off the async threads (a wide model's state
/// is hundreds of megabytes).
#[derive(Clone, Debug)]
pub struct StateBlob {
    pub bytes: Vec<u8>,
    pub digest: [u8; 32],
}

impl StateBlob {
    pub fn new(bytes: Vec<u8>) -> Self {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(&bytes).into();
        Self { bytes, digest }
    }
}

/// The transaction behind a [`ModelLock`]: the writes of a fold, a restore or a refit become
/// visible together, when it commits, or not at all.
#[async_trait]
pub trait ModelTransaction: Send {
    /// One of the model's versions' state as stored.
    async fn stored_state(&mut self, version: i64) -> Result<Option<StoredState>, StoreError>;
    /// The batches folded into `version`, in the order they were folded.
    async fn folded_batches(&mut self, version: i64) -> Result<Vec<QueuedBatch>, StoreError>;
    /// Drops the state of `version` if it is a fold after the first (keeping its digest): it
    /// is then the previous version's state with its batches folded in.
    async fn thin_state(&mut self, version: i64) -> Result<(), StoreError>;
    /// The model's queued batches, oldest first.
    async fn queued_batches(&mut self) -> Result<Vec<QueuedBatch>, StoreError>;
    /// Writes `version` (the current one plus one) and makes it current; returns its time.
    async fn write_version(
        &mut self,
        version: &NewVersion<'_>,
    ) -> Result<DateTime<Utc>, StoreError>;
    /// Marks queued batches as folded into `version`.
    async fn mark_folded(&mut self, seqs: &[i64], version: i64) -> Result<(), StoreError>;
    /// Marks a queued batch as rejected with the reason.
    async fn mark_rejected(&mut self, seq: i64, reason: &str) -> Result<(), StoreError>;
    /// Stores a batch's surprise; with `hold`, the queued batch is also held for review.
    async fn record_surprise(
        &mut self,
        seq: i64,
        surprise: &[Option<f64>],
        hold: bool,
    ) -> Result<(), StoreError>;
    /// Makes every write visible and releases the lock.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

/// A version about to be written.
#[derive(Clone, Copy, Debug)]
pub struct NewVersion<'a> {
    pub version: i64,
    pub origin: VersionOrigin,
    pub restored_from: Option<i64>,
    pub observations: f64,
    pub noise_variances: &'a [Option<f64>],
    pub state: &'a StateBlob,
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
    async fn versions(&self, model_id: i64) -> Result<Vec<VersionRecord>, StoreError>;
    /// Every model's queue, by name.
    async fn queue_depth(&self) -> Result<Vec<QueueDepth>, StoreError>;
    /// Every model's id, name and current version (the posterior cache's view of the world).
    async fn heads(&self) -> Result<Vec<ModelHead>, StoreError>;
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
    /// transaction, and marks them purged; how many it purged.
    async fn purge_rows(
        &self,
        received_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError>;

    /// One model with all its batches and versions, read in one snapshot; `None` if there is
    /// no such model.
    async fn dump_model(&self, id: i64) -> Result<Option<copy::ModelDump>, StoreError>;
    /// Starts writing a copy into this store, which must hold no model and no key.
    async fn begin_load(&self) -> Result<Box<dyn copy::Loader>, StoreError>;

    /// Notifications on `topics`, from now on.
    async fn subscribe(&self, topics: &[Topic]) -> Result<Box<dyn Subscription>, StoreError>;
}

/// An open transaction holding one model's write lock: it excludes other folds, restores,
/// refits and the deletion of the same model, never ingestion. Dropping it rolls back.
pub struct ModelLock {
    pub model_id: i64,
    pub name: String,
    pub spec: ModelSpec,
    pub version: i64,
    /// See [`DatabaseSettings::full_state_every`].
    full_state_every: u32,
    tx: Box<dyn ModelTransaction>,
}

impl fmt::Debug for ModelLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelLock")
            .field("model_id", &self.model_id)
            .field("name", &self.name)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl ModelLock {
    pub fn new(
        model_id: i64,
        name: String,
        spec: ModelSpec,
        version: i64,
        tx: Box<dyn ModelTransaction>,
    ) -> Self {
        Self {
            model_id,
            name,
            spec,
            version,
            full_state_every: DEFAULT_FULL_STATE_EVERY,
            tx,
        }
    }

    /// One of this model's versions' state as stored (see [`crate::history`] for the state
    /// itself).
    pub async fn stored_state(&mut self, version: i64) -> Result<Option<StoredState>, StoreError> {
        self.tx.stored_state(version).await
    }

    /// The batches folded into `version`, in the order they were folded.
    pub async fn folded_batches(&mut self, version: i64) -> Result<Vec<QueuedBatch>, StoreError> {
        self.tx.folded_batches(version).await
    }

    /// The model's queued batches, oldest first.
    pub async fn queued_batches(&mut self) -> Result<Vec<QueuedBatch>, StoreError> {
        self.tx.queued_batches().await
    }

    /// Writes the next version and makes it current; returns its number and time.
    ///
    /// The version it replaces keeps its full state only every `full_state_every` versions
    /// (and always when it is the first, a restore or a refit). A fold in between is thin: its
    /// state is the version before it with its batches folded in, which [`crate::history`]
    /// recomputes and checks against the digest kept. So a wide model (p = 2,048, a full
    /// state of p²/2 numbers per output) pays for a full state once every `full_state_every`
    /// folds, and restoring any version replays at most `full_state_every − 1` folds.
    pub async fn write_version(
        &mut self,
        origin: VersionOrigin,
        restored_from: Option<i64>,
        observations: f64,
        noise_variances: &[Option<f64>],
        state: &StateBlob,
    ) -> Result<(i64, DateTime<Utc>), StoreError> {
        let version = self.version + 1;
        let created_at = self
            .tx
            .write_version(&NewVersion {
                version,
                origin,
                restored_from,
                observations,
                noise_variances,
                state,
            })
            .await?;
        let previous = version - 1;
        if previous > 1 && previous % i64::from(self.full_state_every) != 0 {
            self.tx.thin_state(previous).await?;
        }
        self.version = version;
        Ok((version, created_at))
    }

    /// Marks batches as folded into `version`.
    pub async fn mark_folded(&mut self, seqs: &[i64], version: i64) -> Result<(), StoreError> {
        self.tx.mark_folded(seqs, version).await
    }

    /// Marks a batch as rejected with the reason.
    pub async fn mark_rejected(&mut self, seq: i64, reason: &str) -> Result<(), StoreError> {
        self.tx.mark_rejected(seq, reason).await
    }

    /// Stores a batch's surprise, and holds it for review when `hold`.
    pub async fn record_surprise(
        &mut self,
        seq: i64,
        surprise: &[Option<f64>],
        hold: bool,
    ) -> Result<(), StoreError> {
        self.tx.record_surprise(seq, surprise, hold).await
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        self.tx.commit().await
    }
}

// The columns both backends read, with the same names and meaning.
const MODEL_COLUMNS: &str = "m.id, m.spec, m.version, m.observations, m.created_at, m.updated_at, \
     (SELECT count(*) FROM batches b WHERE b.model_id = m.id AND b.status = 'queued') AS pending, \
     (SELECT coalesce(sum(b.rows), 0) FROM batches b WHERE b.model_id = m.id \
      AND b.status = 'queued') AS pending_rows";
const BATCH_COLUMNS: &str =
    "batch_id, status, rows, received_at, folded_at, version, error, surprise, rows_purged_at";

/// The answer to a review of a batch that is not held: what it is instead.
fn not_held(batch: &BatchRecord) -> StoreError {
    StoreError::Conflict(format!(
        "batch {:?} is {}, not held for review",
        batch.batch_id, batch.status
    ))
}
const KEY_COLUMNS: &str = "id, name, prefix, hash, scopes, created_at, revoked_at";

/// `/readyz`'s check: the database answered with the versions it has applied, and every
/// embedded migration is among them.
async fn check_migrations(
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

/// A batch id the model has already stored: that batch again (a replay) when its content hash
/// is the hash of the batch posted now, a conflict when it is not.
fn replay_or_conflict(
    stored_hash: &[u8],
    hash: &[u8; 32],
    stored: BatchRecord,
) -> Result<Ingested, StoreError> {
    if stored_hash != hash {
        return Err(StoreError::Conflict(format!(
            "batch {:?} was already accepted with different content",
            stored.batch_id
        )));
    }
    Ok(Ingested {
        batch: stored,
        replayed: true,
    })
}

/// A stored state digest, checked.
pub(crate) fn digest(bytes: &[u8]) -> Result<[u8; 32], StoreError> {
    <[u8; 32]>::try_from(bytes)
        .map_err(|_| StoreError::Corrupt("a version's state digest is not 32 bytes".into()))
}

/// A stored key's hash and scopes, checked.
fn key_parts(hash: &[u8], scopes: &[String]) -> Result<([u8; 32], Vec<Scope>), StoreError> {
    let hash = <[u8; 32]>::try_from(hash)
        .map_err(|_| StoreError::Corrupt("an API key hash is not 32 bytes".into()))?;
    let scopes = scopes
        .iter()
        .map(|s| {
            Scope::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown key scope {s:?}")))
        })
        .collect::<Result<_, _>>()?;
    Ok((hash, scopes))
}

/// Where the data lives, from `database.url` and `database.path`.
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// A PostgreSQL URL (`postgres://` or `postgresql://`).
    Postgres(String),
    /// An embedded SQLite file: `database.path` when the URL is empty, or a `sqlite:` URL.
    Sqlite(PathBuf),
}

impl fmt::Debug for Location {
    // A PostgreSQL URL may carry a password: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Postgres(_) => f.write_str("Postgres(<redacted>)"),
            Self::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
        }
    }
}

impl Location {
    pub fn of(settings: &DatabaseSettings) -> anyhow::Result<Self> {
        let url = settings.url.trim();
        if url.is_empty() {
            anyhow::ensure!(
                !settings.path.trim().is_empty(),
                "database.path is empty: set it to the embedded database's file, or set \
                 DATABASE_URL to a PostgreSQL URL"
            );
            return Ok(Self::Sqlite(PathBuf::from(settings.path.trim())));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            anyhow::ensure!(
                !path.is_empty() && !path.contains('?'),
                "DATABASE_URL {url:?}: a sqlite URL names a file, as in sqlite://data/mordant.db \
                 (no options)"
            );
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        let scheme = url.split(':').next().unwrap_or_default();
        anyhow::bail!(
            "DATABASE_URL (database.url) must be a PostgreSQL URL (postgres://…), a sqlite: URL, \
             or empty for the embedded database at database.path; found scheme {scheme:?}"
        )
    }
}

/// The default of [`DatabaseSettings::full_state_every`].
pub const DEFAULT_FULL_STATE_EVERY: u32 = 10;

/// The store the service holds: one backend behind a cheap, cloneable handle.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Arc<dyn Backend>,
    full_state_every: u32,
}

impl Deref for Store {
    type Target = dyn Backend;

    fn deref(&self) -> &Self::Target {
        &*self.backend
    }
}

impl Store {
    pub fn new(backend: impl Backend, full_state_every: u32) -> Self {
        Self {
            backend: Arc::new(backend),
            full_state_every: full_state_every.max(1),
        }
    }

    /// Takes a model's write lock (see [`Backend::lock_model`]), writing versions by this
    /// store's policy.
    pub async fn lock_model(&self, name: &ModelName) -> Result<Option<ModelLock>, StoreError> {
        Ok(self.backend.lock_model(name).await?.map(|l| self.policy(l)))
    }

    /// Claims a model with work (see [`Backend::claim_fold`]), writing versions by this
    /// store's policy.
    pub async fn claim_fold(&self, skip: &[i64]) -> Result<Option<ModelLock>, StoreError> {
        Ok(self.backend.claim_fold(skip).await?.map(|l| self.policy(l)))
    }

    fn policy(&self, mut lock: ModelLock) -> ModelLock {
        lock.full_state_every = self.full_state_every;
        lock
    }

    /// Opens the configured backend. PostgreSQL connects lazily (the service starts, and
    /// answers `/readyz` with 503, while the database is down); the embedded file is opened
    /// now, and refused if another process holds it.
    pub async fn open(settings: &DatabaseSettings) -> anyhow::Result<Self> {
        match Location::of(settings)? {
            Location::Postgres(url) => Ok(Self::new(
                postgres::PgStore::connect_lazy(&url, settings)
                    .context("invalid PostgreSQL URL")?,
                settings.full_state_every,
            )),
            Location::Sqlite(path) => Ok(Self::new(
                sqlite::SqliteStore::open(&path, settings).await?,
                settings.full_state_every,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str, path: &str) -> DatabaseSettings {
        DatabaseSettings {
            url: url.to_owned(),
            path: path.to_owned(),
            max_connections: 4,
            acquire_timeout_secs: 1,
            startup_timeout_secs: 1,
            full_state_every: 10,
        }
    }

    #[test]
    fn no_url_means_the_embedded_file_and_urls_choose_their_backend() {
        let at = |url: &str, path: &str| Location::of(&settings(url, path));
        assert_eq!(
            at("", "data/mordant.db").unwrap(),
            Location::Sqlite("data/mordant.db".into())
        );
        assert_eq!(
            at("postgres://u:pw@db/plant", "x").unwrap(),
            Location::Postgres("postgres://u:pw@db/plant".into())
        );
        assert!(matches!(
            at("postgresql://db/plant", "").unwrap(),
            Location::Postgres(_)
        ));
        assert_eq!(
            at("sqlite:///var/lib/mordant/m.db", "x").unwrap(),
            Location::Sqlite("/var/lib/mordant/m.db".into())
        );
        assert_eq!(
            at("sqlite:m.db", "x").unwrap(),
            Location::Sqlite("m.db".into())
        );
        let error = at("mysql://db/plant", "x").unwrap_err().to_string();
        assert!(
            error.contains("DATABASE_URL") && error.contains("mysql"),
            "{error}"
        );
        assert!(at("", " ").is_err(), "no URL and no path");
        assert!(at("sqlite://m.db?mode=ro", "").is_err());
        assert!(
            !format!("{:?}", at("postgres://u:pw@db/plant", "").unwrap()).contains("pw"),
            "a URL's password never reaches the logs"
        );
    }
}
