//! The embedded backend: one SQLite file, for a single process (a lab PC, a laptop, a demo).
//!
//! * **Durability.** The file is in WAL mode with `synchronous = FULL`: a commit returns once
//!   the write-ahead log is on disk, so a 2xx means the batch is on disk, as on PostgreSQL.
//! * **One process.** At open, the process takes an exclusive lock (`flock`) on `<file>.lock`
//!   and keeps it while the store lives; a second process on the same file is refused with a
//!   message that names the file and the process holding it. SQLite's own locks would let a
//!   second writer in, and its folder would fold the same queue a second time.
//! * **One writer.** Writes go through a pool of one connection (`BEGIN IMMEDIATE`), so
//!   batches are committed in the order of their `seq`; reads use a pool of their own and,
//!   thanks to WAL, never wait for a write. Concurrent batches are committed together, one
//!   `fsync` for all of them (see the `ingest` module).
//! * **Model locks** are in-process mutexes: a fold, restore or refit holds its model's mutex
//!   while it reads and computes, and writes everything in one short write transaction when it
//!   commits (see the `lock` module). Ingestion never waits for a fold's computation.
//! * **Notifications** are in-process, sent once the change they announce is committed.

mod copy;
mod file_lock;
mod ingest;
mod keys;
mod lock;

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::types::Json;
use sqlx::{FromRow, Sqlite, Transaction};
use tokio::sync::broadcast;

use super::{
    BATCH_COLUMNS, Backend, BatchRecord, BatchStatus, Ingested, KeyRecord, ModelHead, ModelLock,
    ModelRecord, Notification, QueueDepth, Review, StoreError, Subscription, Topic, VersionRecord,
    check_migrations, check_schema, not_held, sql,
};
use crate::domain::Scope;
use crate::domain::{ContentHash, EncodedBatch, ModelName, ModelSpec, NewBatch};
use crate::store::DatabaseSettings;
use crate::store::reads::Reads;
use crate::successor::BATCH_MAGIC as SUCCESSOR_BATCH_MAGIC;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// The page size of a new database file (an existing one keeps its own: WAL mode cannot change
/// it). A batch's raw rows span a chain of overflow pages, each written with a call of its own:
/// 16 KiB pages take a quarter of the calls of SQLite's default 4 KiB for the same rows, and a
/// small update (a batch's status) writes a quarter of what 64 KiB pages would.
const PAGE_SIZE: u32 = 16384;

/// SQLite's own checkpoint interval, in pages of log (its default).
const AUTOCHECKPOINT_PAGES: u32 = 1000;

/// Notifications a subscriber may fall behind by before it is told to resynchronise.
const NOTIFICATION_BUFFER: usize = 4096;

/// The embedded store. Cloning is cheap; the file stays locked until the last clone is dropped.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// One connection: every write transaction, in turn.
    writer: SqlitePool,
    readers: SqlitePool,
    /// Commits ingested batches in groups.
    committer: ingest::Committer,
    events: broadcast::Sender<Notification>,
    /// Each model's write lock (see [`lock`]).
    model_locks: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>,
    /// Holds the `flock` on `<file>.lock` for as long as the store lives.
    _owner: File,
    /// Holds the database file's own lock ([`file_lock`]). Declared last: dropped after the
    /// pools' handles (the service closes the pools first; a store dropped unclosed, on a
    /// start-up that fails, may release it before SQLite's threads have closed the file).
    _file: file_lock::FileLock,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// `<file>.lock`, next to the database file.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The file `path` names, whatever names it: symbolic links followed (also to a file not
/// created yet, which SQLite will create at the link's target), then resolved as far as the
/// file or else its directory exists, so that one file has one lock whichever of its names a
/// process opens it by.
fn real_path(path: &Path) -> PathBuf {
    let mut path = path.to_owned();
    // As many links as the kernel follows before it gives up (ELOOP).
    for _ in 0..40 {
        let Ok(target) = std::fs::read_link(&path) else {
            break;
        };
        path = match path.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    if let Ok(real) = std::fs::canonicalize(&path) {
        return real;
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    match (
        dir.map_or_else(|| std::fs::canonicalize("."), std::fs::canonicalize),
        path.file_name(),
    ) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => path,
    }
}

/// Takes the exclusive lock that makes this process the file's only user, and writes the
/// process id into the lock file for whoever is refused next. The lock is the real file's
/// (`<file>.lock` beside it, links resolved): a second process that names the file through a
/// symbolic link is refused too.
fn take_ownership(path: &Path) -> anyhow::Result<File> {
    let lock = lock_path(&real_path(path));
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .with_context(|| format!("cannot open the lock file {}", lock.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            // This process holds it already: the same file named twice (`copy --from` and
            // `--to` spelling one file two ways), not another process.
            anyhow::ensure!(
                holder.trim() != std::process::id().to_string(),
                "the embedded database {} is already open in this process, under this name or \
                 another that leads to the same file",
                path.display()
            );
            let holder = match holder.trim() {
                "" => String::new(),
                pid => format!(" (process {pid})"),
            };
            anyhow::bail!(
                "the embedded database {} is in use by another mordant process{holder}. \
                 The embedded store serves one process only: stop the other process, give this \
                 one its own file (database.path), or use PostgreSQL (DATABASE_URL) to run \
                 several replicas",
                path.display()
            );
        }
        Err(TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", lock.display()));
        }
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .with_context(|| format!("cannot write {}", lock.display()))?;
    Ok(file)
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and its directory, and takes ownership of
    /// it; fails when another process holds it.
    pub async fn open(path: &Path, settings: &DatabaseSettings) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the directory {}", dir.display()))?;
        }
        let owner = take_ownership(path)?;
        let file = file_lock::lock(path)?;
        let wait = Duration::from_secs(settings.acquire_timeout_secs.max(1));
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .page_size(PAGE_SIZE)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(wait);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(wait)
            .connect_with(options.clone())
            .await
            .with_context(|| format!("cannot open the embedded database {}", path.display()))?;
        let readers = SqlitePoolOptions::new()
            .max_connections(settings.max_connections.max(1))
            .acquire_timeout(wait)
            .connect_lazy_with(options);
        tracing::info!(path = %path.display(), "embedded SQLite store opened");
        let events = broadcast::channel(NOTIFICATION_BUFFER).0;
        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                committer: ingest::Committer::start(writer.clone(), events.clone()),
                writer,
                readers,
                events,
                model_locks: Mutex::new(HashMap::new()),
                _owner: owner,
                _file: file,
            }),
        })
    }

    /// SQLite opens a database it may not write (another owner, a read-only mount, a log file
    /// it cannot write) read-only, without a word: a service on it reported ready and answered
    /// every write 500. The header's user version written to itself and rolled back says whether
    /// it can. Only stores that will be written are migrated: `copy` reads its source as it is.
    ///
    /// The kernel is asked first (faccessat(2) with the effective credentials and their
    /// capabilities, as SQLite opens the file; an immutable file, a read-only mount and the
    /// permissions answer it): while this process still has a connection to the file, SQLite
    /// hands a new connection a descriptor an earlier one opened for writing, and the header's
    /// write then succeeds on a file nobody may write now. Not by opening the file: closing any
    /// descriptor of it drops the locks SQLite's connections hold on it.
    async fn check_writable(&self) -> Result<(), String> {
        #[cfg(unix)]
        rustix::fs::accessat(
            rustix::fs::CWD,
            &self.inner.path,
            rustix::fs::Access::WRITE_OK,
            rustix::fs::AtFlags::EACCESS,
        )
        .map_err(|e| std::io::Error::from(e).to_string())?;
        let header = async {
            let mut tx = self.inner.writer.begin_with("BEGIN IMMEDIATE").await?;
            let version: i64 = sqlx::query_scalar("PRAGMA user_version")
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query(&format!("PRAGMA user_version = {version}"))
                .execute(&mut *tx)
                .await?;
            tx.rollback().await
        };
        header.await.map_err(|e: sqlx::Error| e.to_string())
    }

    /// A write transaction (the only one at a time).
    async fn write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        begin_write(&self.inner.writer).await
    }

    /// Gives the writer back SQLite's own checkpoints (every [`AUTOCHECKPOINT_PAGES`] pages of
    /// log) and runs the checkpoint a commit made without them, in a task of its own: the
    /// committing fold puts its version in the cache meanwhile (see [`lock`]).
    fn checkpoint_after_commit(&self) {
        let writer = self.inner.writer.clone();
        tokio::spawn(async move {
            let checkpoint = async {
                let mut connection = writer.acquire().await?;
                sqlx::query(&format!(
                    "PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}"
                ))
                .execute(&mut *connection)
                .await?;
                sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                    .execute(&mut *connection)
                    .await
            };
            if let Err(e) = checkpoint.await
                && !writer.is_closed()
            {
                // Checkpoints left off (the writer not reached) come back with the next version's.
                tracing::warn!(error = %e, "the embedded store's log was not checkpointed after a version");
            }
        });
    }

    fn notify(&self, topic: Topic, model_id: Option<i64>) {
        // No subscriber is not an error.
        let _ = self.inner.events.send(Notification { topic, model_id });
    }

    /// The mutex behind a model's write lock.
    fn model_mutex(&self, model_id: i64) -> Arc<tokio::sync::Mutex<()>> {
        self.inner
            .model_locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(model_id)
            .or_default()
            .clone()
    }

    fn forget_model_mutex(&self, model_id: i64) {
        self.inner
            .model_locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&model_id);
    }
}

#[async_trait]
impl Backend for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        self.check_writable().await.map_err(|e| {
            sqlx::migrate::MigrateError::Source(
                format!(
                    "the embedded database {} cannot be written by this process ({e}): its \
                     owner, its permissions, an immutable flag, a read-only mount?",
                    self.inner.path.display()
                )
                .into(),
            )
        })?;
        MIGRATOR.run(&self.inner.writer).await
    }

    async fn ready(&self) -> Result<(), String> {
        if let Some(panics) = self.inner.committer.failing() {
            return Err(format!(
                "the embedded store's batch committer panicked on each of its last {panics} \
                 groups of batches (restarted after each; see the log): batches are answered 503"
            ));
        }
        let applied = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&self.inner.readers);
        check_migrations(&MIGRATOR, applied).await
    }

    async fn check_schema(&self) -> Result<(), String> {
        let applied = sqlx::query_as(
            "SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version",
        )
        .fetch_all(&self.inner.readers);
        check_schema(&MIGRATOR, applied).await
    }

    async fn close(&self) {
        self.inner.readers.close().await;
        self.inner.writer.close().await;
    }

    #[tracing::instrument(skip_all, fields(model = %spec.name))]
    async fn create_model(&self, spec: &ModelSpec) -> Result<ModelRecord, StoreError> {
        let now = Utc::now();
        let mut tx = self.write().await?;
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO models (name, spec, first_fit_rows, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (name) DO NOTHING RETURNING id",
        )
        .bind(spec.name.as_str())
        .bind(Json(spec))
        .bind(i64::try_from(spec.first_fit_rows).unwrap_or(i64::MAX))
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(id) = id else {
            return Err(StoreError::Conflict(format!(
                "a model named {:?} already exists",
                spec.name.as_str()
            )));
        };
        // Read in the transaction: a delete that commits first would leave nothing to read
        // after it, and the created model answered as not found.
        let record = sqlx::query_as(sql::MODEL_BY_ID)
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        self.notify(Topic::Models, Some(id));
        Ok(record)
    }

    async fn list_models(&self) -> Result<Vec<ModelRecord>, StoreError> {
        Reads(&self.inner.readers).models().await
    }

    async fn model(&self, name: &ModelName) -> Result<Option<ModelRecord>, StoreError> {
        Reads(&self.inner.readers).model(name).await
    }

    async fn model_by_id(&self, id: i64) -> Result<Option<ModelRecord>, StoreError> {
        Reads(&self.inner.readers).model_by_id(id).await
    }

    #[tracing::instrument(skip(self))]
    async fn delete_model(&self, name: &ModelName) -> Result<Option<i64>, StoreError> {
        let Some(id) = model_id(&self.inner.readers, name).await? else {
            return Ok(None);
        };
        // Wait for a fold, restore or refit of the model to finish, as PostgreSQL's row lock
        // makes a DELETE wait.
        let mutex = self.model_mutex(id);
        let _guard = mutex.lock().await;
        let mut tx = self.write().await?;
        let deleted = sqlx::query("DELETE FROM models WHERE id = ?1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        if deleted == 0 {
            return Ok(None);
        }
        self.forget_model_mutex(id);
        self.notify(Topic::Models, Some(id));
        Ok(Some(id))
    }

    /// One writer at a time: a model's batches are committed in the order of their `seq`,
    /// those that arrive together in one transaction.
    #[tracing::instrument(skip_all, fields(model_id, batch_id = batch.batch_id.as_str(), rows = batch.rows()))]
    async fn insert_batch(
        &self,
        model_id: i64,
        batch: &NewBatch,
        encoded: &EncodedBatch,
        statistics: &[u8],
    ) -> Result<Ingested, StoreError> {
        self.inner
            .committer
            .insert(model_id, batch, encoded, statistics)
            .await
    }

    async fn batch(
        &self,
        model_id: i64,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError> {
        Reads(&self.inner.readers).batch(model_id, batch_id).await
    }

    async fn replay_batch(
        &self,
        model_id: i64,
        batch_id: &str,
        hash: &ContentHash,
    ) -> Result<Option<Ingested>, StoreError> {
        Reads(&self.inner.readers)
            .replay(model_id, batch_id, hash)
            .await
    }

    async fn list_batches(
        &self,
        model_id: i64,
        status: Option<BatchStatus>,
        limit: i64,
    ) -> Result<Vec<BatchRecord>, StoreError> {
        Reads(&self.inner.readers)
            .batches(model_id, status, limit)
            .await
    }

    async fn review_batch(
        &self,
        model_id: i64,
        batch_id: &str,
        review: Review,
    ) -> Result<Option<BatchRecord>, StoreError> {
        let mut tx = self.write().await?;
        if review == Review::Release {
            behind_the_queue(&mut tx, model_id, batch_id).await?;
        }
        let sql = match review {
            Review::Release => format!(
                "UPDATE batches SET status = 'queued', released = 1 \
                 WHERE model_id = ?1 AND batch_id = ?2 AND status = 'held' \
                 RETURNING {BATCH_COLUMNS}"
            ),
            Review::Reject => format!(
                "UPDATE batches SET status = 'rejected', folded_at = ?3, \
                        error = 'rejected on review: too surprising to the model' \
                 WHERE model_id = ?1 AND batch_id = ?2 AND status = 'held' \
                 RETURNING {BATCH_COLUMNS}"
            ),
        };
        let row = sqlx::query(&sql)
            .bind(model_id)
            .bind(batch_id)
            .bind(Utc::now())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            drop(tx);
            return match self.batch(model_id, batch_id).await? {
                Some(batch) => Err(not_held(&batch)),
                None => Ok(None),
            };
        };
        let record = batch_record(&row)?;
        tx.commit().await?;
        if review == Review::Release {
            self.notify(Topic::Batches, Some(model_id));
        }
        Ok(Some(record))
    }

    async fn versions_after(
        &self,
        model_id: i64,
        after: i64,
        limit: Option<u32>,
    ) -> Result<Vec<VersionRecord>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT v.version, v.created_at, v.origin, v.restored_from, v.observations, \
                    v.noise_variances, length(v.state) > 0 AS full_state, \
                    (SELECT json_group_array(b.batch_id ORDER BY b.seq) FROM batches b \
                     WHERE b.model_id = v.model_id AND b.version = v.version \
                       AND b.status = 'folded') AS batches \
             FROM versions v WHERE v.model_id = ?1 AND v.version > ?2 ORDER BY v.version LIMIT ?3",
        )
        .bind(model_id)
        .bind(after)
        .bind(limit.map_or(i64::MAX, i64::from))
        .fetch_all(&self.inner.readers)
        .await?)
    }

    async fn queue_depth(&self) -> Result<Vec<QueueDepth>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT m.name, count(b.seq) AS batches, coalesce(sum(b.rows), 0) AS rows \
             FROM models m LEFT JOIN batches b ON b.model_id = m.id AND b.status = 'queued' \
             GROUP BY m.id ORDER BY m.name",
        )
        .fetch_all(&self.inner.readers)
        .await?)
    }

    async fn heads(&self) -> Result<Vec<ModelHead>, StoreError> {
        Reads(&self.inner.readers).heads().await
    }

    async fn model_head(&self, model_id: i64) -> Result<Option<(ModelSpec, i64)>, StoreError> {
        Reads(&self.inner.readers).model_head(model_id).await
    }

    async fn current_state(
        &self,
        model_id: i64,
    ) -> Result<Option<(ModelSpec, i64, Option<Vec<u8>>)>, StoreError> {
        Reads(&self.inner.readers).current_state(model_id).await
    }

    async fn lock_model(&self, name: &ModelName) -> Result<Option<ModelLock>, StoreError> {
        let Some(id) = model_id(&self.inner.readers, name).await? else {
            return Ok(None);
        };
        let guard = self.model_mutex(id).lock_owned().await;
        lock::locked(self.clone(), id, guard).await
    }

    async fn claim_fold(&self, skip: &[i64]) -> Result<Option<ModelLock>, StoreError> {
        let candidates: Vec<i64> = sqlx::query_scalar(
            "SELECT m.id FROM models m \
             JOIN (SELECT model_id, min(seq) AS first, sum(rows) AS rows FROM batches \
                   WHERE status = 'queued' GROUP BY model_id) q ON q.model_id = m.id \
             WHERE m.version > 0 OR q.rows >= m.first_fit_rows \
             ORDER BY q.first",
        )
        .fetch_all(&self.inner.readers)
        .await?;
        for id in candidates.into_iter().filter(|id| !skip.contains(id)) {
            // A model another fold (or a restore, a refit) holds is skipped, as with
            // PostgreSQL's SKIP LOCKED.
            let Ok(guard) = self.model_mutex(id).try_lock_owned() else {
                continue;
            };
            if let Some(lock) = lock::locked(self.clone(), id, guard).await? {
                return Ok(Some(lock));
            }
        }
        Ok(None)
    }

    async fn purge_rows(
        &self,
        received_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        // Both tables in one transaction: a batch is marked purged exactly when its rows are.
        let mut tx = self.write().await?;
        let purged: Vec<i64> = sqlx::query_scalar(
            "UPDATE batches SET rows_purged_at = ?3, \
                 statistics = CASE WHEN substr(statistics, 1, 4) = ?4 THEN x'' \
                              ELSE statistics END \
             WHERE seq IN (SELECT seq FROM batches \
                           WHERE received_at < ?1 AND rows_purged_at IS NULL \
                             AND status IN ('folded', 'rejected') AND length(statistics) > 0 \
                           ORDER BY received_at, seq LIMIT ?2) \
             RETURNING seq",
        )
        .bind(received_before)
        .bind(i64::from(limit))
        .bind(Utc::now())
        .bind(&SUCCESSOR_BATCH_MAGIC[..])
        .fetch_all(&mut *tx)
        .await?;
        if !purged.is_empty() {
            sqlx::query(
                "UPDATE batch_rows SET x = x'', y = x'' \
                 WHERE seq IN (SELECT value FROM json_each(?1))",
            )
            .bind(Json(&purged))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(purged.len() as u64)
    }

    async fn dump_model(
        &self,
        id: i64,
    ) -> Result<Option<crate::store::dump::ModelDump>, StoreError> {
        copy::dump_model(self, id).await
    }

    async fn begin_load(&self) -> Result<Box<dyn crate::store::dump::Loader>, StoreError> {
        copy::begin_load(self).await
    }

    async fn create_key(
        &self,
        name: &str,
        prefix: &str,
        hash: &[u8; 32],
        scopes: &[Scope],
    ) -> Result<KeyRecord, StoreError> {
        let record = keys::create(self, name, prefix, hash, scopes).await?;
        self.notify(Topic::Keys, None);
        Ok(record)
    }

    async fn list_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        Reads(&self.inner.readers).keys().await
    }

    async fn active_keys(&self) -> Result<(i64, Vec<KeyRecord>), StoreError> {
        Reads(&self.inner.readers).active_keys().await
    }

    async fn revoke_key(&self, id: i64) -> Result<Option<KeyRecord>, StoreError> {
        let record = keys::revoke(self, id).await?;
        if record.is_some() {
            self.notify(Topic::Keys, None);
        }
        Ok(record)
    }

    async fn subscribe(&self, topics: &[Topic]) -> Result<Box<dyn Subscription>, StoreError> {
        Ok(Box::new(SqliteSubscription {
            events: self.inner.events.subscribe(),
            topics: topics.to_vec(),
        }))
    }
}

struct SqliteSubscription {
    events: broadcast::Receiver<Notification>,
    topics: Vec<Topic>,
}

#[async_trait]
impl Subscription for SqliteSubscription {
    async fn recv(&mut self) -> Result<Option<Notification>, StoreError> {
        loop {
            match self.events.recv().await {
                Ok(n) if self.topics.contains(&n.topic) => return Ok(Some(n)),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return Ok(None),
                Err(broadcast::error::RecvError::Closed) => {
                    return Err(StoreError::Unavailable(sqlx::Error::PoolClosed));
                }
            }
        }
    }
}

async fn model_id(readers: &SqlitePool, name: &ModelName) -> Result<Option<i64>, StoreError> {
    Ok(sqlx::query_scalar("SELECT id FROM models WHERE name = ?1")
        .bind(name.as_str())
        .fetch_optional(readers)
        .await?)
}

/// `BEGIN IMMEDIATE` on the writer's one connection. A write that a full disk (or another I/O
/// error) failed is rolled back by SQLite itself; sqlx's own rollback then fails and leaves the
/// connection counting a transaction that no longer exists, so that it can begin no other:
/// that connection is closed, and the pool opens a new one.
pub(super) async fn begin_write(
    writer: &SqlitePool,
) -> Result<Transaction<'static, Sqlite>, StoreError> {
    match writer.begin_with("BEGIN IMMEDIATE").await {
        Err(sqlx::Error::InvalidSavePointStatement) => {
            tracing::warn!("the writer's connection was left in a failed transaction: reopened");
            writer.acquire().await?.close().await?;
            Ok(writer.begin_with("BEGIN IMMEDIATE").await?)
        }
        begun => Ok(begun?),
    }
}

/// Moves a held batch behind the batches queued before its release (README, "Drift"): the queue
/// is in `seq` order, so its row takes the next `seq`, and its raw rows with it. `seq` is the
/// key `batch_rows` refers to, so the check of that reference waits for the commit; the
/// counter takes the number, which is never given again.
async fn behind_the_queue(
    tx: &mut Transaction<'static, Sqlite>,
    model_id: i64,
    batch_id: &str,
) -> Result<(), StoreError> {
    let held: Option<i64> = sqlx::query_scalar(
        "SELECT seq FROM batches WHERE model_id = ?1 AND batch_id = ?2 AND status = 'held'",
    )
    .bind(model_id)
    .bind(batch_id)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(held) = held else {
        return Ok(());
    };
    let next: i64 = sqlx::query_scalar(
        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'batches'), 0), \
                    (SELECT coalesce(max(seq), 0) FROM batches)) + 1",
    )
    .fetch_one(&mut **tx)
    .await?;
    sqlx::query("PRAGMA defer_foreign_keys = ON")
        .execute(&mut **tx)
        .await?;
    for statement in [
        "UPDATE batch_rows SET seq = ?2 WHERE seq = ?1",
        "UPDATE batches SET seq = ?2 WHERE seq = ?1",
        "UPDATE sqlite_sequence SET seq = ?2 WHERE name = 'batches'",
    ] {
        sqlx::query(statement)
            .bind(held)
            .bind(next)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

fn batch_record(row: &SqliteRow) -> Result<BatchRecord, StoreError> {
    Ok(BatchRecord::from_row(row)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> DatabaseSettings {
        DatabaseSettings {
            url: String::new(),
            path: String::new(),
            max_connections: 2,
            acquire_timeout_secs: 1,
            startup_timeout_secs: 1,
            full_state_every: 10,
        }
    }

    fn scratch() -> PathBuf {
        std::env::temp_dir().join(format!("mordant_unit_{}", uuid::Uuid::new_v4().simple()))
    }

    #[tokio::test]
    async fn commits_are_durable_wal_with_full_synchronous_writes() {
        let dir = scratch();
        let store = SqliteStore::open(&dir.join("nested/m.db"), &settings())
            .await
            .unwrap();
        for pool in [&store.inner.writer, &store.inner.readers] {
            let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(mode, "wal");
            // 2 = FULL: the log is synced at every commit.
            let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(synchronous, 2);
            let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(foreign_keys, 1);
        }
        finish(store, dir).await;
    }

    /// A version's commit leaves SQLite's checkpoint to just after it ([`lock`]), and the
    /// writer gets its own checkpoints back: 32 MB of version reach the database file, and the
    /// writer checkpoints every 1,000 pages again.
    #[tokio::test]
    async fn a_version_is_checkpointed_after_its_commit_and_the_writer_as_before() {
        let (dir, store, spec, _) = lab_store().await;
        let path = dir.join("m.db");
        let before = std::fs::metadata(&path).unwrap().len();
        let state: Vec<u8> = (0..32u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let mut lock = store.lock_model(&spec.name).await.unwrap().unwrap();
        lock.write_version(
            crate::store::VersionOrigin::Fold,
            None,
            0.0,
            &[Some(1.0)],
            &crate::store::StateBlob::new(state),
            &[],
            true,
        )
        .await
        .unwrap();
        lock.commit().await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let size = std::fs::metadata(&path).unwrap().len();
            let pages: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
                .fetch_one(&store.inner.writer)
                .await
                .unwrap();
            if size >= before + (32 << 20) && pages == i64::from(AUTOCHECKPOINT_PAGES) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "30 s after the commit: a database file of {size} bytes, checkpoints every {pages} pages"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        finish(store, dir).await;
    }

    /// A migrated store in a scratch folder with one model of one feature and one output.
    async fn lab_store() -> (PathBuf, SqliteStore, ModelSpec, i64) {
        let dir = scratch();
        let (store, spec, id) = lab_store_in(&dir).await;
        (dir, store, spec, id)
    }

    /// [`lab_store`]'s store, in `dir`.
    async fn lab_store_in(dir: &Path) -> (SqliteStore, ModelSpec, i64) {
        let store = SqliteStore::open(&dir.join("m.db"), &settings())
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let spec = lab_spec("lab");
        let id = store.create_model(&spec).await.unwrap().id;
        (store, spec, id)
    }

    /// Closes `store` and removes its scratch folder.
    async fn finish(store: SqliteStore, dir: PathBuf) {
        store.close().await;
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A model of one feature and one output.
    fn lab_spec(name: &str) -> ModelSpec {
        ModelSpec::parse(&serde_json::json!({
            "name": name, "features": ["f"], "outputs": ["o"],
        }))
        .unwrap()
    }

    /// A one-row batch of the lab model.
    fn lab_batch(spec: &ModelSpec, batch_id: &str, x: usize) -> NewBatch {
        let body = serde_json::json!({"batch_id": batch_id, "x": [[x]], "y": [[1]]});
        let body = crate::domain::Body::parse(
            body.to_string().as_bytes(),
            &crate::domain::row_fields(spec),
            10,
        )
        .unwrap();
        NewBatch::parse(body, spec, None).unwrap()
    }

    /// Every batch inserted by a task of its own, in order.
    fn insert_all(
        store: &SqliteStore,
        id: i64,
        batches: Vec<NewBatch>,
    ) -> Vec<tokio::task::JoinHandle<Result<Ingested, StoreError>>> {
        batches
            .into_iter()
            .map(|b| {
                let store = store.clone();
                tokio::spawn(async move { store.insert_batch(id, &b, &b.encode(), b"s").await })
            })
            .collect()
    }

    /// A write that a full disk fails at one of its statements (the disk's limit set by
    /// `max_page_count` on the writer's one connection) is unavailable (503), stores nothing,
    /// and the writes after it go through once there is room again. The test below has the
    /// disk fail the commit itself.
    #[tokio::test]
    async fn writes_recover_once_a_full_disk_has_room_again() {
        let (dir, store, spec, id) = lab_store().await;
        let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
            .fetch_one(&store.inner.writer)
            .await
            .unwrap();
        let limit = |pages: i64| {
            let writer = store.inner.writer.clone();
            async move {
                sqlx::query(&format!("PRAGMA max_page_count = {pages}"))
                    .execute(&writer)
                    .await
                    .unwrap();
            }
        };
        limit(pages).await;
        let big = |batch_id: &str| {
            let x: Vec<[usize; 1]> = (0..2000).map(|i| [i]).collect();
            let y: Vec<[usize; 1]> = (0..2000).map(|_| [1]).collect();
            let body = serde_json::json!({"batch_id": batch_id, "x": x, "y": y});
            let body = crate::domain::Body::parse(
                body.to_string().as_bytes(),
                &crate::domain::row_fields(&spec),
                10_000,
            )
            .unwrap();
            NewBatch::parse(body, &spec, None).unwrap()
        };
        // Statistics of a megabyte need pages the limit does not leave.
        let full = big("full");
        let error = store
            .insert_batch(id, &full, &full.encode(), &[7; 1 << 20])
            .await
            .unwrap_err();
        assert!(matches!(error, StoreError::Unavailable(_)), "{error}");
        limit(1_073_741_823).await;
        for (i, batch) in [big("room"), lab_batch(&spec, "small", 1)]
            .iter()
            .enumerate()
        {
            let stored = store.insert_batch(id, batch, &batch.encode(), b"s").await;
            assert!(
                stored.is_ok(),
                "write {i} after the room came back: {stored:?}"
            );
        }
        let model = lab_spec("after");
        store.create_model(&model).await.unwrap();
        assert!(store.batch(id, "room").await.unwrap().is_some());
        assert!(store.batch(id, "full").await.unwrap().is_none());
        finish(store, dir).await;
    }

    /// A disk that is really full fails the commit's write to the log, and SQLite rolls the
    /// transaction back on its own; sqlx's rollback then failed and left the writer counting a
    /// transaction that no longer was, so that every later write answered "begin_with at
    /// non-zero transaction depth" (500) until a restart. Each write on the full disk is
    /// unavailable (503), and writes work once there is room. A small tmpfs, filled by a file
    /// and then emptied; mounting needs root, and elsewhere the test says so and passes.
    #[tokio::test]
    async fn writes_recover_once_a_really_full_disk_has_room_again() {
        let dir = scratch();
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
            .arg(&dir)
            .output()
            .is_ok_and(|o| o.status.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here (needs root)");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        // Unmounted however the test ends.
        struct Mounted(PathBuf);
        impl Drop for Mounted {
            fn drop(&mut self) {
                // Lazily: a store a failing assertion left open keeps the mount busy.
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&self.0)
                    .status();
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let mounted = Mounted(dir.clone());
        let (store, spec, id) = lab_store_in(&dir).await;
        // Fill what is left of the disk.
        {
            use std::io::Write as _;
            let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
            while filler.write_all(&[1; 4096]).is_ok() {}
        }
        let mut failed = 0;
        for i in 0..4 {
            let batch = lab_batch(&spec, &format!("full-{i}"), i);
            match store
                .insert_batch(id, &batch, &batch.encode(), &[7; 64 << 10])
                .await
            {
                Err(StoreError::Unavailable(_)) => failed += 1,
                other => panic!("write {i} on a full disk: {other:?}"),
            }
        }
        assert_eq!(failed, 4);
        std::fs::remove_file(dir.join("filler")).unwrap();
        let batch = lab_batch(&spec, "room", 9);
        let stored = store.insert_batch(id, &batch, &batch.encode(), b"s").await;
        assert!(stored.is_ok(), "after the room came back: {stored:?}");
        let model = lab_spec("after");
        let created = store.create_model(&model).await;
        assert!(created.is_ok(), "{created:?}");
        store.close().await;
        drop(store);
        drop(mounted);
    }

    /// A database file this process may not write is refused by its migration with its name
    /// (start-up, `migrate`, a copy's target); SQLite opened it read-only, and every write
    /// answered 500 while `/readyz` said ready. Made
    /// unwritable with `chattr +i` (which binds root too); where that is not possible, the test
    /// says so and passes.
    ///
    /// The process keeps a connection to the file meanwhile, and closes another one that could
    /// write it: SQLite gives that one's descriptor to the store's writer. That is likely what
    /// let a CI run migrate the file: a closed store's connection outliving its `close`.
    #[tokio::test]
    async fn a_database_file_that_cannot_be_written_is_refused() {
        use sqlx::Connection as _;
        let (dir, store, _, _) = lab_store().await;
        store.close().await;
        drop(store);
        let path = dir.join("m.db");
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        let kept = sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap();
        let closed = sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap();
        closed.close().await.unwrap();
        let chattr = |flag: &str| {
            std::process::Command::new("chattr")
                .arg(flag)
                .arg(&path)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !chattr("+i") {
            eprintln!("skipped: chattr +i is not possible here");
            let _ = std::fs::remove_dir_all(dir);
            return;
        }
        // Opened, as `copy` opens its source to read it, but not migrated.
        let store = SqliteStore::open(&path, &settings()).await.unwrap();
        let ready = store.ready().await;
        let migrated = store.migrate().await;
        store.close().await;
        drop(store);
        chattr("-i");
        kept.close().await.unwrap();
        assert_eq!(ready, Ok(()), "an unwritable file is read");
        let Err(error) = migrated else {
            panic!("an unwritable file was migrated");
        };
        let error = error.to_string();
        assert!(
            error.contains("cannot be written") && error.contains("m.db"),
            "{error}"
        );
        let store = SqliteStore::open(&path, &settings()).await.unwrap();
        store.migrate().await.unwrap();
        finish(store, dir).await;
    }

    /// Batches that arrive together share one transaction and its `fsync`.
    #[tokio::test]
    async fn a_burst_of_batches_is_committed_together() {
        const BATCHES: usize = 16;
        let (dir, store, spec, id) = lab_store().await;
        let batches: Vec<NewBatch> = (0..BATCHES)
            .map(|i| lab_batch(&spec, &format!("b{i}"), i))
            .collect();
        let before = store.inner.committer.groups();
        // On this single-threaded runtime every insert is queued before the committer runs.
        let inserts = insert_all(&store, id, batches);
        for insert in inserts {
            assert!(!insert.await.unwrap().unwrap().replayed);
        }
        let groups = store.inner.committer.groups() - before;
        assert!(
            groups < BATCHES / 2,
            "{groups} commits for {BATCHES} batches"
        );
        assert_eq!(
            store.list_batches(id, None, 100).await.unwrap().len(),
            BATCHES
        );
        finish(store, dir).await;
    }

    /// A committer that panics is restarted: the batches of its group are refused as
    /// unavailable and not stored, and the next batches are stored. The store stays ready
    /// through one panic, is not ready after three in a row, and is ready again once a group
    /// goes through.
    #[tokio::test]
    async fn a_committer_that_panics_is_restarted_and_loses_nothing_stored() {
        let (dir, store, spec, id) = lab_store().await;
        let first = lab_batch(&spec, "b0", 1);
        store
            .insert_batch(id, &first, &first.encode(), b"s")
            .await
            .unwrap();
        let fatal = lab_batch(&spec, ingest::tests::PANIC, 2);
        for in_a_row in 1..=3 {
            let answer = store.insert_batch(id, &fatal, &fatal.encode(), b"s").await;
            assert!(
                matches!(answer, Err(StoreError::Unavailable(_))),
                "{answer:?}"
            );
            // The panic is counted once the supervisor has seen the task end.
            for _ in 0..1000 {
                if store.inner.committer.failing().is_some() || in_a_row < 3 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            let ready = store.ready().await;
            if in_a_row < 3 {
                assert!(ready.is_ok(), "{ready:?}");
            } else {
                let reason = ready.expect_err("not ready after three panics in a row");
                assert!(
                    reason.contains("panicked on each of its last 3"),
                    "{reason}"
                );
            }
        }
        assert!(
            store
                .batch(id, ingest::tests::PANIC)
                .await
                .unwrap()
                .is_none()
        );
        let later = lab_batch(&spec, "b1", 3);
        store
            .insert_batch(id, &later, &later.encode(), b"s")
            .await
            .expect("stored by the restarted committer");
        store
            .ready()
            .await
            .expect("ready once a group went through");
        let listed: Vec<_> = store
            .list_batches(id, None, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.batch_id)
            .collect();
        assert_eq!(listed, ["b1", "b0"], "newest first");
        finish(store, dir).await;
    }

    /// A replay of a stored batch that does not decode answers its own request; the batches it
    /// shares a group with are stored.
    #[tokio::test]
    async fn a_corrupt_replay_fails_alone_not_its_group() {
        const BATCHES: usize = 8;
        let (dir, store, spec, id) = lab_store().await;
        let bad = lab_batch(&spec, "bad", 0);
        store
            .insert_batch(id, &bad, &bad.encode(), b"s")
            .await
            .unwrap();
        sqlx::query("UPDATE batches SET surprise = '[0.5, \"high\"]' WHERE batch_id = 'bad'")
            .execute(&store.inner.writer)
            .await
            .unwrap();
        let before = store.inner.committer.groups();
        // On this single-threaded runtime every insert is queued before the committer runs, the
        // replay of the corrupt batch in the middle.
        let burst: Vec<NewBatch> = (0..BATCHES)
            .map(|i| {
                if i == BATCHES / 2 {
                    lab_batch(&spec, "bad", 0)
                } else {
                    lab_batch(&spec, &format!("b{i}"), i + 1)
                }
            })
            .collect();
        let inserts = insert_all(&store, id, burst);
        for (i, insert) in inserts.into_iter().enumerate() {
            let answer = insert.await.unwrap();
            if i == BATCHES / 2 {
                assert!(
                    matches!(answer, Err(StoreError::Corrupt(_))),
                    "the corrupt replay answered {answer:?}"
                );
            } else {
                assert!(!answer.unwrap().replayed, "batch {i}");
            }
        }
        assert_eq!(
            store.inner.committer.groups() - before,
            1,
            "the burst is one group"
        );
        for i in (0..BATCHES).filter(|i| *i != BATCHES / 2) {
            let stored = store.batch(id, &format!("b{i}")).await.unwrap();
            assert!(stored.is_some(), "batch b{i} was not stored");
        }
        finish(store, dir).await;
    }

    /// A second process that names the same file through a symbolic link (to the file, to its
    /// directory, or to a file not created yet) is refused as one that names it directly.
    #[tokio::test]
    async fn one_owner_at_a_time_whatever_the_file_is_called() {
        let dir = scratch();
        std::fs::create_dir_all(dir.join("a")).unwrap();
        let file = dir.join("a").join("m.db");
        let first = SqliteStore::open(&file, &settings()).await.unwrap();
        std::os::unix::fs::symlink(&file, dir.join("alias.db")).unwrap();
        std::os::unix::fs::symlink(dir.join("a"), dir.join("b")).unwrap();
        // A link to a file not created yet: the lock is the target's, which SQLite creates.
        std::os::unix::fs::symlink(dir.join("a").join("later.db"), dir.join("later.db")).unwrap();
        let later = SqliteStore::open(&dir.join("later.db"), &settings())
            .await
            .unwrap();
        assert!(dir.join("a").join("later.db").exists());
        for other in [
            dir.join("alias.db"),
            dir.join("b").join("m.db"),
            dir.join("a").join("later.db"),
        ] {
            let error = SqliteStore::open(&other, &settings()).await.unwrap_err();
            let message = format!("{error:#}");
            assert!(
                message.contains("already open in this process"),
                "{}: {message}",
                other.display()
            );
        }
        first.close().await;
        drop(first);
        later.close().await;
        drop(later);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A hard link is another name for the same file, with a lock file of its own beside it:
    /// the file's own lock refuses it, and is released with the store.
    #[tokio::test]
    async fn a_hard_link_to_an_owned_file_is_refused() {
        let dir = scratch();
        std::fs::create_dir_all(dir.join("a")).unwrap();
        let file = dir.join("a").join("m.db");
        let first = SqliteStore::open(&file, &settings()).await.unwrap();
        let linked = dir.join("linked.db");
        std::fs::hard_link(&file, &linked).unwrap();
        let error = SqliteStore::open(&linked, &settings()).await.unwrap_err();
        let message = format!("{error:#}");
        assert!(message.contains("under another name"), "{message}");
        first.close().await;
        drop(first);
        let second = SqliteStore::open(&linked, &settings()).await.unwrap();
        second.close().await;
        drop(second);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn one_owner_at_a_time() {
        let dir = scratch();
        let file = dir.join("m.db");
        let first = SqliteStore::open(&file, &settings()).await.unwrap();
        let owner = std::fs::read_to_string(lock_path(&real_path(&file))).unwrap();
        assert_eq!(owner.trim(), std::process::id().to_string());
        // Opened again by the process that holds it: said so (another process's refusal, with
        // its process id, is `tests/api_sqlite/embedded.rs`'s).
        let error = SqliteStore::open(&file, &settings()).await.unwrap_err();
        let message = format!("{error:#}");
        assert!(
            message.contains("already open in this process"),
            "{message}"
        );
        first.close().await;
        drop(first);
        // Released with the store: the next owner gets in.
        let second = SqliteStore::open(&file, &settings()).await.unwrap();
        second.close().await;
        drop(second);
        let _ = std::fs::remove_dir_all(dir);
    }
}
