//! The PostgreSQL backend: for production, and for several replicas against one database.
//!
//! Three channels carry notifications (delivered on commit, to every replica):
//! `mordant_batches` when a batch is queued (wakes the folders), `mordant_models` when a model
//! is created, deleted or gets a new version (keeps every replica's posterior cache current),
//! both with the model's id, and `mordant_keys` when an API key changes.

mod copy;
mod keys;
mod lock;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgListener, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{Connection, FromRow, PgPool};

use super::{
    BATCH_COLUMNS, Backend, BatchRecord, BatchStatus, Ingested, KeyRecord, ModelHead, ModelLock,
    ModelRecord, Notification, QueueDepth, Review, StoreError, StoredBatch, Subscription, Topic,
    VersionRecord, check_migrations, check_schema, not_held, sql,
};
use crate::domain::Scope;
use crate::domain::{ContentHash, EncodedBatch, ModelName, ModelSpec, NewBatch};
use crate::store::DatabaseSettings;
use crate::store::reads::Reads;
use crate::successor::BATCH_MAGIC as SUCCESSOR_BATCH_MAGIC;

const BATCHES_CHANNEL: &str = "mordant_batches";
const MODELS_CHANNEL: &str = "mordant_models";
const KEYS_CHANNEL: &str = "mordant_keys";

fn channel(topic: Topic) -> &'static str {
    match topic {
        Topic::Batches => BATCHES_CHANNEL,
        Topic::Models => MODELS_CHANNEL,
        Topic::Keys => KEYS_CHANNEL,
    }
}

/// Advisory-lock class of the per-model ingestion lock (`pg_advisory_xact_lock(class, id)`).
const INGEST_LOCK_CLASS: i32 = 0x6d6f_7264;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// A pool that connects lazily: the service starts, and answers `/readyz` with 503, while
    /// the database is down.
    pub fn connect_lazy(url: &str, settings: &DatabaseSettings) -> Result<Self, sqlx::Error> {
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(Duration::from_secs(settings.acquire_timeout_secs.max(1)))
            // A connection's buffers grow to its largest message (a batch's rows, a wide model's
            // state) and would stay that size: back in the pool, it keeps its default ones.
            .after_release(|conn, _| {
                Box::pin(async move {
                    conn.shrink_buffers();
                    Ok(true)
                })
            })
            .connect_lazy(url)?;
        Ok(Self { pool })
    }

    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }
}

#[async_trait]
impl Backend for PgStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        MIGRATOR.run(&self.pool).await
    }

    async fn ready(&self) -> Result<(), String> {
        let applied = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&self.pool);
        check_migrations(&MIGRATOR, applied).await
    }

    async fn check_schema(&self) -> Result<(), String> {
        let applied = sqlx::query_as(
            "SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version",
        )
        .fetch_all(&self.pool);
        check_schema(&MIGRATOR, applied).await
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    #[tracing::instrument(skip_all, fields(model = %spec.name))]
    async fn create_model(&self, spec: &ModelSpec) -> Result<ModelRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO models (name, spec, first_fit_rows) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING RETURNING id",
        )
        .bind(spec.name.as_str())
        .bind(Json(spec))
        .bind(i64::try_from(spec.first_fit_rows).unwrap_or(i64::MAX))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(id) = id else {
            return Err(StoreError::Conflict(format!(
                "a model named {:?} already exists",
                spec.name.as_str()
            )));
        };
        notify(&mut tx, Topic::Models, id).await?;
        // Read in the transaction: a delete that commits first would leave nothing to read
        // after it, and the created model answered as not found.
        let record = sqlx::query_as(sql::MODEL_BY_ID)
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(record)
    }

    async fn list_models(&self) -> Result<Vec<ModelRecord>, StoreError> {
        Reads(&self.pool).models().await
    }

    async fn model(&self, name: &ModelName) -> Result<Option<ModelRecord>, StoreError> {
        Reads(&self.pool).model(name).await
    }

    async fn model_by_id(&self, id: i64) -> Result<Option<ModelRecord>, StoreError> {
        Reads(&self.pool).model_by_id(id).await
    }

    #[tracing::instrument(skip(self))]
    async fn delete_model(&self, name: &ModelName) -> Result<Option<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let id: Option<i64> = sqlx::query_scalar("DELETE FROM models WHERE name = $1 RETURNING id")
            .bind(name.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(id) = id {
            notify(&mut tx, Topic::Models, id).await?;
        }
        tx.commit().await?;
        Ok(id)
    }

    /// The batch's row, with its raw rows, is written first, in parallel with other requests;
    /// then, under a per-model advisory lock held until the commit, it takes its `arrival`
    /// number. So a model's batches become visible in the order of their `arrival` and a
    /// folder never sees a later batch without the earlier ones, while the lock covers only a
    /// small update and the commit. Four round trips: the transaction's start, the insert (with
    /// the model's row locked against deletion in the same statement), the numbering (lock,
    /// update and notification in one statement) and the commit.
    #[tracing::instrument(skip_all, fields(model_id, batch_id = batch.batch_id.as_str(), rows = batch.rows()))]
    async fn insert_batch(
        &self,
        model_id: i64,
        batch: &NewBatch,
        encoded: &EncodedBatch,
        statistics: &[u8],
    ) -> Result<Ingested, StoreError> {
        let hash = encoded.content_hash;
        let mut tx = self.pool.begin().await?;
        // A concurrent request with the same batch id makes this insert wait for its commit,
        // then insert nothing: the batch it stored answers. A model deleted meanwhile has no
        // row to lock, and nothing is inserted.
        let (model_exists, seq): (bool, Option<i64>) = sqlx::query_as(
            "WITH model AS (SELECT id FROM models WHERE id = $1 FOR KEY SHARE), \
                  inserted AS ( \
                      INSERT INTO batches (model_id, batch_id, content_hash, rows, x, y, statistics, arrival) \
                      SELECT id, $2, $3, $4, $5, $6, $7, NULL FROM model \
                      ON CONFLICT (model_id, batch_id) DO NOTHING RETURNING seq) \
             SELECT EXISTS (SELECT 1 FROM model), (SELECT seq FROM inserted)",
        )
        .bind(model_id)
        .bind(batch.batch_id.as_str())
        .bind(&hash.stored[..])
        .bind(batch.rows() as i32)
        .bind(&encoded.x[..])
        .bind(&encoded.y[..])
        .bind(statistics)
        .fetch_one(&mut *tx)
        .await?;
        if !model_exists {
            return Err(StoreError::NotFound("the model was deleted".into()));
        }
        let Some(seq) = seq else {
            return stored_batch(&mut tx, model_id, batch, &hash)
                .await?
                .ok_or_else(|| {
                    StoreError::Corrupt(format!(
                        "batch {:?} conflicted on insert but is not stored",
                        batch.batch_id.as_str()
                    ))
                });
        };
        // The update's new values are computed on the rows of its join with `lock`, so the
        // lock is held before `nextval` runs; the notification is sent at the commit.
        let row = sqlx::query(&format!(
            "WITH lock AS MATERIALIZED (SELECT pg_advisory_xact_lock($1, $2)), \
                  notice AS MATERIALIZED (SELECT pg_notify($4, $5)) \
             UPDATE batches SET arrival = nextval('batch_arrival'), received_at = clock_timestamp() \
             FROM lock, notice WHERE seq = $3 RETURNING {BATCH_COLUMNS}"
        ))
        .bind(INGEST_LOCK_CLASS)
        .bind(model_id as i32)
        .bind(seq)
        .bind(channel(Topic::Batches))
        .bind(model_id.to_string())
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ingested {
            batch: batch_record(&row)?,
            replayed: false,
        })
    }

    async fn batch(
        &self,
        model_id: i64,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError> {
        Reads(&self.pool).batch(model_id, batch_id).await
    }

    async fn replay_batch(
        &self,
        model_id: i64,
        batch_id: &str,
        hash: &ContentHash,
    ) -> Result<Option<Ingested>, StoreError> {
        Reads(&self.pool).replay(model_id, batch_id, hash).await
    }

    async fn list_batches(
        &self,
        model_id: i64,
        status: Option<BatchStatus>,
        limit: i64,
    ) -> Result<Vec<BatchRecord>, StoreError> {
        Reads(&self.pool).batches(model_id, status, limit).await
    }

    async fn review_batch(
        &self,
        model_id: i64,
        batch_id: &str,
        review: Review,
    ) -> Result<Option<BatchRecord>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let sql = match review {
            // Behind the batches queued before it (README, "Drift"): a new `arrival`, taken
            // under the ingestion lock as an ingested batch's is, so that the queue becomes
            // visible in its order.
            Review::Release => format!(
                "WITH lock AS MATERIALIZED (SELECT pg_advisory_xact_lock($3, $4)) \
                 UPDATE batches SET status = 'queued', released = true, \
                        arrival = nextval('batch_arrival') \
                 FROM lock WHERE model_id = $1 AND batch_id = $2 AND status = 'held' \
                 RETURNING {BATCH_COLUMNS}"
            ),
            Review::Reject => format!(
                "UPDATE batches SET status = 'rejected', folded_at = clock_timestamp(), \
                        error = 'rejected on review: too surprising to the model' \
                 WHERE model_id = $1 AND batch_id = $2 AND status = 'held' \
                 RETURNING {BATCH_COLUMNS}"
            ),
        };
        let row = sqlx::query(&sql)
            .bind(model_id)
            .bind(batch_id)
            .bind(INGEST_LOCK_CLASS)
            .bind(model_id as i32)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            drop(tx);
            return match self.batch(model_id, batch_id).await? {
                Some(batch) => Err(not_held(&batch)),
                None => Ok(None),
            };
        };
        if review == Review::Release {
            notify(&mut tx, Topic::Batches, model_id).await?;
        }
        tx.commit().await?;
        batch_record(&row).map(Some)
    }

    async fn versions_after(
        &self,
        model_id: i64,
        after: i64,
        limit: Option<u32>,
    ) -> Result<Vec<VersionRecord>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT v.version, v.created_at, v.origin, v.restored_from, v.observations, \
                    v.noise_variances, octet_length(v.state) > 0 AS full_state, \
                    COALESCE((SELECT array_agg(b.batch_id ORDER BY COALESCE(b.arrival, b.seq)) FROM batches b \
                              WHERE b.model_id = v.model_id AND b.version = v.version \
                                AND b.status = 'folded'), '{}') AS batches \
             FROM versions v WHERE v.model_id = $1 AND v.version > $2 ORDER BY v.version LIMIT $3",
        )
        .bind(model_id)
        .bind(after)
        .bind(limit.map_or(i64::MAX, i64::from))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn queue_depth(&self) -> Result<Vec<QueueDepth>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT m.name, count(b.seq) AS batches, COALESCE(sum(b.rows), 0)::BIGINT AS rows \
             FROM models m LEFT JOIN batches b ON b.model_id = m.id AND b.status = 'queued' \
             GROUP BY m.name ORDER BY m.name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn heads(&self) -> Result<Vec<ModelHead>, StoreError> {
        Reads(&self.pool).heads().await
    }

    async fn model_head(&self, model_id: i64) -> Result<Option<(ModelSpec, i64)>, StoreError> {
        Reads(&self.pool).model_head(model_id).await
    }

    async fn current_state(
        &self,
        model_id: i64,
    ) -> Result<Option<(ModelSpec, i64, Option<Vec<u8>>)>, StoreError> {
        Reads(&self.pool).current_state(model_id).await
    }

    async fn lock_model(&self, name: &ModelName) -> Result<Option<ModelLock>, StoreError> {
        lock::acquire(&self.pool, name).await
    }

    async fn claim_fold(&self, skip: &[i64]) -> Result<Option<ModelLock>, StoreError> {
        lock::claim(&self.pool, skip).await
    }

    async fn purge_rows(
        &self,
        received_before: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE batches SET x = ''::bytea, y = ''::bytea, rows_purged_at = clock_timestamp(), \
                 statistics = CASE WHEN substring(statistics from 1 for 4) = $3 \
                              THEN ''::bytea ELSE statistics END \
             WHERE seq IN (SELECT seq FROM batches \
                           WHERE received_at < $1 AND rows_purged_at IS NULL \
                             AND status IN ('folded', 'rejected') \
                             AND octet_length(statistics) > 0 \
                           ORDER BY received_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(received_before)
        .bind(i64::from(limit))
        .bind(&SUCCESSOR_BATCH_MAGIC[..])
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn dump_model(
        &self,
        id: i64,
    ) -> Result<Option<crate::store::dump::ModelDump>, StoreError> {
        copy::dump_model(&self.pool, id).await
    }

    async fn begin_load(&self) -> Result<Box<dyn crate::store::dump::Loader>, StoreError> {
        copy::begin_load(&self.pool).await
    }

    async fn create_key(
        &self,
        name: &str,
        prefix: &str,
        hash: &[u8; 32],
        scopes: &[Scope],
    ) -> Result<KeyRecord, StoreError> {
        keys::create(&self.pool, name, prefix, hash, scopes).await
    }

    async fn list_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        Reads(&self.pool).keys().await
    }

    async fn active_keys(&self) -> Result<(i64, Vec<KeyRecord>), StoreError> {
        Reads(&self.pool).active_keys().await
    }

    async fn revoke_key(&self, id: i64) -> Result<Option<KeyRecord>, StoreError> {
        keys::revoke(&self.pool, id).await
    }

    async fn subscribe(&self, topics: &[Topic]) -> Result<Box<dyn Subscription>, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener
            .listen_all(topics.iter().map(|&t| channel(t)))
            .await?;
        Ok(Box::new(PgSubscription { listener }))
    }
}

/// `LISTEN` on a connection of its own; it reconnects by itself after a loss.
struct PgSubscription {
    listener: PgListener,
}

#[async_trait]
impl Subscription for PgSubscription {
    async fn recv(&mut self) -> Result<Option<Notification>, StoreError> {
        loop {
            let Some(n) = self.listener.try_recv().await? else {
                // The connection was lost and re-established: notifications may be lost.
                return Ok(None);
            };
            let Some(topic) = Topic::ALL.into_iter().find(|&t| channel(t) == n.channel()) else {
                continue;
            };
            return Ok(Some(Notification {
                topic,
                model_id: n.payload().parse().ok(),
            }));
        }
    }
}

/// Announces a change on commit (`pg_notify` is transactional); the payload is the model's id,
/// empty for [`Topic::Keys`].
async fn notify(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    topic: Topic,
    model_id: impl ToString,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel(topic))
        .bind(model_id.to_string())
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

fn batch_record(row: &PgRow) -> Result<BatchRecord, StoreError> {
    Ok(BatchRecord::from_row(row)?)
}

/// The batch stored under `batch`'s id, if any: a replay when its content hash is `hash`, a
/// conflict when it is not.
async fn stored_batch(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    model_id: i64,
    batch: &NewBatch,
    hash: &ContentHash,
) -> Result<Option<Ingested>, StoreError> {
    let existing: Option<StoredBatch> = sqlx::query_as(sql::STORED_BATCH)
        .bind(model_id)
        .bind(batch.batch_id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    existing
        .map(|stored| stored.replay_or_conflict(hash))
        .transpose()
}
