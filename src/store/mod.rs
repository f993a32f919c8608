//! Persistence in PostgreSQL: models, the queue of batches, and immutable versions.
//!
//! All SQL of the service lives here. Two channels carry notifications (delivered on commit):
//! [`BATCHES_CHANNEL`] when a batch is queued (wakes the folders) and [`MODELS_CHANNEL`] when a
//! model is created, deleted or gets a new version (keeps every replica's posterior cache
//! current). Both carry the model's id. A third, `KEYS_CHANNEL`, announces API key changes.

mod fold;
mod keys;

pub use fold::{ModelLock, QueuedBatch};
pub use keys::{KEYS_CHANNEL, KeyRecord};

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgPoolOptions, PgRow};
use sqlx::{PgPool, Row};

use crate::config::DatabaseSettings;
use crate::domain::{EncodedBatch, ModelName, ModelSpec, NewBatch};

pub const BATCHES_CHANNEL: &str = "mordant_batches";
pub const MODELS_CHANNEL: &str = "mordant_models";

/// Advisory-lock class of the per-model ingestion lock (`pg_advisory_xact_lock(class, id)`).
const INGEST_LOCK_CLASS: i32 = 0x6d6f_7264;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

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
        match e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::Io(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::Protocol(_)
            | sqlx::Error::Tls(_) => Self::Unavailable(e),
            sqlx::Error::Database(ref db) if is_unavailable_code(db.code().as_deref()) => {
                Self::Unavailable(e)
            }
            e => Self::Database(e),
        }
    }
}

/// SQLSTATEs that mean "try again later": classes 08 (connection exception), 53
/// (insufficient resources, e.g. too many connections) and 57P (shutdown), serialization
/// failures and deadlocks (40001, 40P01), a read-only server after a failover (25006) and a
/// lock timeout (55P03).
fn is_unavailable_code(code: Option<&str>) -> bool {
    code.is_some_and(|c| {
        c.starts_with("08")
            || c.starts_with("53")
            || c.starts_with("57P")
            || matches!(c, "40001" | "40P01" | "25006" | "55P03")
    })
}

/// A model as stored, with its queue length.
#[derive(Clone, Debug)]
pub struct ModelRecord {
    pub id: i64,
    pub spec: ModelSpec,
    pub version: i64,
    pub observations: f64,
    pub pending_batches: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A batch's status as stored.
#[derive(Clone, Debug)]
pub struct BatchRecord {
    pub batch_id: String,
    pub status: String,
    pub rows: i32,
    pub received_at: DateTime<Utc>,
    pub folded_at: Option<DateTime<Utc>>,
    pub version: Option<i64>,
    pub error: Option<String>,
}

/// One entry of a model's history.
#[derive(Clone, Debug)]
pub struct VersionRecord {
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub origin: String,
    pub restored_from: Option<i64>,
    pub observations: f64,
    pub noise_variances: Vec<Option<f64>>,
    pub batches: Vec<String>,
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

#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
}

const MODEL_COLUMNS: &str = "m.id, m.spec, m.version, m.observations, m.created_at, m.updated_at, \
     (SELECT count(*) FROM batches b WHERE b.model_id = m.id AND b.status = 'queued') AS pending";

const BATCH_COLUMNS: &str = "batch_id, status, rows, received_at, folded_at, version, error";

impl Store {
    /// A pool that connects lazily: the service starts, and answers `/readyz` with 503, while
    /// the database is down.
    pub fn connect_lazy(settings: &DatabaseSettings) -> Result<Self, sqlx::Error> {
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(Duration::from_secs(settings.acquire_timeout_secs.max(1)))
            .connect_lazy(&settings.url)?;
        Ok(Self { pool })
    }

    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies the embedded migrations.
    pub async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        MIGRATOR.run(&self.pool).await
    }

    /// The database answers and every embedded migration has been applied.
    pub async fn ready(&self) -> Result<(), String> {
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.pool)
                .await
                .map_err(|e| format!("database: {e}"))?;
        let missing = MIGRATOR
            .iter()
            .filter(|m| !applied.contains(&m.version))
            .count();
        if missing > 0 {
            return Err(format!("{missing} migrations not applied"));
        }
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(model = %spec.name))]
    pub async fn create_model(&self, spec: &ModelSpec) -> Result<ModelRecord, StoreError> {
        let json = serde_json::to_value(spec)
            .map_err(|e| StoreError::Corrupt(format!("model spec: {e}")))?;
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "INSERT INTO models (name, spec, first_fit_rows) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING RETURNING id",
        )
        .bind(spec.name.as_str())
        .bind(json)
        .bind(i64::try_from(spec.first_fit_rows).unwrap_or(i64::MAX))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::Conflict(format!(
                "a model named {:?} already exists",
                spec.name.as_str()
            )));
        };
        let id: i64 = row.try_get("id")?;
        notify(&mut tx, MODELS_CHANNEL, id).await?;
        tx.commit().await?;
        self.model_by_id(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("model {:?}", spec.name.as_str())))
    }

    pub async fn list_models(&self) -> Result<Vec<ModelRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {MODEL_COLUMNS} FROM models m ORDER BY m.name"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(model_record).collect()
    }

    pub async fn model(&self, name: &ModelName) -> Result<Option<ModelRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {MODEL_COLUMNS} FROM models m WHERE m.name = $1"
        ))
        .bind(name.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(model_record).transpose()
    }

    pub async fn model_by_id(&self, id: i64) -> Result<Option<ModelRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {MODEL_COLUMNS} FROM models m WHERE m.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(model_record).transpose()
    }

    /// Deletes a model with its batches and versions; its id, `None` if there was none.
    #[tracing::instrument(skip(self))]
    pub async fn delete_model(&self, name: &ModelName) -> Result<Option<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let id: Option<i64> = sqlx::query_scalar("DELETE FROM models WHERE name = $1 RETURNING id")
            .bind(name.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(id) = id {
            notify(&mut tx, MODELS_CHANNEL, id).await?;
        }
        tx.commit().await?;
        Ok(id)
    }

    /// Stores a batch durably (raw rows and statistics) and queues it, idempotently: a batch id
    /// the model has seen answers with the stored batch when the content is the same, and a
    /// conflict when it differs.
    ///
    /// Ingestion holds a per-model advisory lock until it commits, so a model's batches are
    /// committed in the order of their `seq` and a folder never sees a later batch without the
    /// earlier ones.
    #[tracing::instrument(skip_all, fields(model_id, batch_id = batch.batch_id.as_str(), rows = batch.rows()))]
    pub async fn insert_batch(
        &self,
        model_id: i64,
        batch: &NewBatch,
        encoded: &EncodedBatch,
        statistics: &[u8],
    ) -> Result<Ingested, StoreError> {
        let hash = encoded.content_hash;
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
            .bind(INGEST_LOCK_CLASS)
            .bind(model_id as i32)
            .execute(&mut *tx)
            .await?;
        let exists: Option<i64> =
            sqlx::query_scalar("SELECT id FROM models WHERE id = $1 FOR KEY SHARE")
                .bind(model_id)
                .fetch_optional(&mut *tx)
                .await?;
        if exists.is_none() {
            return Err(StoreError::NotFound("the model was deleted".into()));
        }
        let existing = sqlx::query(&format!(
            "SELECT content_hash, {BATCH_COLUMNS} FROM batches WHERE model_id = $1 AND batch_id = $2"
        ))
        .bind(model_id)
        .bind(batch.batch_id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = existing {
            let stored: Vec<u8> = row.try_get("content_hash")?;
            if stored != hash {
                return Err(StoreError::Conflict(format!(
                    "batch {:?} was already accepted with different content",
                    batch.batch_id.as_str()
                )));
            }
            return Ok(Ingested {
                batch: batch_record(&row)?,
                replayed: true,
            });
        }
        let row = sqlx::query(&format!(
            "INSERT INTO batches (model_id, batch_id, content_hash, rows, x, y, statistics, received_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp()) RETURNING {BATCH_COLUMNS}"
        ))
        .bind(model_id)
        .bind(batch.batch_id.as_str())
        .bind(&hash[..])
        .bind(batch.rows() as i32)
        .bind(&encoded.x)
        .bind(&encoded.y)
        .bind(statistics)
        .fetch_one(&mut *tx)
        .await?;
        notify(&mut tx, BATCHES_CHANNEL, model_id).await?;
        tx.commit().await?;
        Ok(Ingested {
            batch: batch_record(&row)?,
            replayed: false,
        })
    }

    pub async fn batch(
        &self,
        model_id: i64,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {BATCH_COLUMNS} FROM batches WHERE model_id = $1 AND batch_id = $2"
        ))
        .bind(model_id)
        .bind(batch_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(batch_record).transpose()
    }

    pub async fn versions(&self, model_id: i64) -> Result<Vec<VersionRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT v.version, v.created_at, v.origin, v.restored_from, v.observations, \
                    v.noise_variances, \
                    COALESCE((SELECT array_agg(b.batch_id ORDER BY b.seq) FROM batches b \
                              WHERE b.model_id = v.model_id AND b.version = v.version \
                                AND b.status = 'folded'), '{}') AS batches \
             FROM versions v WHERE v.model_id = $1 ORDER BY v.version",
        )
        .bind(model_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(VersionRecord {
                    version: row.try_get("version")?,
                    created_at: row.try_get("created_at")?,
                    origin: row.try_get("origin")?,
                    restored_from: row.try_get("restored_from")?,
                    observations: row.try_get("observations")?,
                    noise_variances: row.try_get("noise_variances")?,
                    batches: row.try_get("batches")?,
                })
            })
            .collect()
    }

    /// Every model's queue.
    pub async fn queue_depth(&self) -> Result<Vec<QueueDepth>, StoreError> {
        let rows = sqlx::query(
            "SELECT m.name, count(b.seq) AS batches, COALESCE(sum(b.rows), 0)::BIGINT AS rows \
             FROM models m LEFT JOIN batches b ON b.model_id = m.id AND b.status = 'queued' \
             GROUP BY m.name ORDER BY m.name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(QueueDepth {
                    model: r.try_get("name")?,
                    batches: r.try_get("batches")?,
                    rows: r.try_get("rows")?,
                })
            })
            .collect()
    }

    /// Every model's id, name and current version (the posterior cache's view of the world).
    pub async fn heads(&self) -> Result<Vec<ModelHead>, StoreError> {
        let rows = sqlx::query("SELECT id, name, version FROM models")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(ModelHead {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    version: r.try_get("version")?,
                })
            })
            .collect()
    }

    /// A model's spec, current version and that version's encoded state (`None` at version 0).
    pub async fn current_state(
        &self,
        model_id: i64,
    ) -> Result<Option<(ModelSpec, i64, Option<Vec<u8>>)>, StoreError> {
        let row = sqlx::query(
            "SELECT m.spec, m.version, v.state FROM models m \
             LEFT JOIN versions v ON v.model_id = m.id AND v.version = m.version \
             WHERE m.id = $1",
        )
        .bind(model_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let spec = parse_spec(row.try_get("spec")?)?;
        Ok(Some((spec, row.try_get("version")?, row.try_get("state")?)))
    }

    /// Takes a model's write lock (waiting for a running fold), for restore and refit.
    pub async fn lock_model(&self, name: &ModelName) -> Result<Option<ModelLock>, StoreError> {
        ModelLock::acquire(&self.pool, name).await
    }

    /// Claims the next model with foldable batches, skipping models another folder holds and
    /// the models in `skip`.
    pub async fn claim_fold(&self, skip: &[i64]) -> Result<Option<ModelLock>, StoreError> {
        ModelLock::claim(&self.pool, skip).await
    }
}

async fn notify(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    channel: &str,
    model_id: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(model_id.to_string())
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

fn parse_spec(json: serde_json::Value) -> Result<ModelSpec, StoreError> {
    serde_json::from_value(json).map_err(|e| StoreError::Corrupt(format!("model spec: {e}")))
}

fn model_record(row: &PgRow) -> Result<ModelRecord, StoreError> {
    Ok(ModelRecord {
        id: row.try_get("id")?,
        spec: parse_spec(row.try_get("spec")?)?,
        version: row.try_get("version")?,
        observations: row.try_get("observations")?,
        pending_batches: row.try_get("pending")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

fn batch_record(row: &PgRow) -> Result<BatchRecord, StoreError> {
    Ok(BatchRecord {
        batch_id: row.try_get("batch_id")?,
        status: row.try_get("status")?,
        rows: row.try_get("rows")?,
        received_at: row.try_get("received_at")?,
        folded_at: row.try_get("folded_at")?,
        version: row.try_get("version")?,
        error: row.try_get("error")?,
    })
}
