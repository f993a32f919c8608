//! A model's write lock on PostgreSQL: the transaction in which a fold, a restore or a refit
//! reads the current version and writes the next one.
//!
//! The lock is the model's row, taken `FOR NO KEY UPDATE`: it excludes other folds, restores
//! and refits of the same model, but not ingestion, whose foreign key only needs `KEY SHARE`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::types::Json;
use sqlx::{Arguments, PgPool, Postgres, Transaction};

use super::{channel, notify};
use crate::domain::{ModelName, ModelSpec};
use crate::store::lock::LockedModel;
use crate::store::sql;
use crate::store::{
    BatchSurprise, KeptRows, ModelLock, ModelTransaction, NewVersion, QueueRead, QueuedBatch,
    StoreError, StoredState, Topic,
};

/// The transaction of a [`ModelLock`], holding the model's row lock.
struct PgModelTransaction {
    tx: Transaction<'static, Postgres>,
    model_id: i64,
}

pub(super) async fn acquire(
    pool: &PgPool,
    name: &ModelName,
) -> Result<Option<ModelLock>, StoreError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query_as::<_, LockedModel>(
        "SELECT id, name, spec, version FROM models WHERE name = $1 FOR NO KEY UPDATE",
    )
    .bind(name.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|row| locked(tx, row)))
}

/// The model whose oldest queued batch is oldest among models with work: trained models
/// with any queued batch, untrained ones once `first_fit_rows` rows are queued.
pub(super) async fn claim(pool: &PgPool, skip: &[i64]) -> Result<Option<ModelLock>, StoreError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query_as::<_, LockedModel>(
        "SELECT m.id, m.name, m.spec, m.version FROM models m \
             JOIN LATERAL (SELECT min(b.arrival) AS first, sum(b.rows) AS rows FROM batches b \
                           WHERE b.model_id = m.id AND b.status = 'queued') q ON true \
             WHERE q.first IS NOT NULL AND (m.version > 0 OR q.rows >= m.first_fit_rows) \
               AND m.id <> ALL($1) \
             ORDER BY q.first \
             LIMIT 1 \
             FOR NO KEY UPDATE OF m SKIP LOCKED",
    )
    .bind(skip)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|row| locked(tx, row)))
}

fn locked(tx: Transaction<'static, Postgres>, model: LockedModel) -> ModelLock {
    let model_id = model.id;
    model.lock(Box::new(PgModelTransaction { tx, model_id }))
}

#[async_trait]
impl ModelTransaction for PgModelTransaction {
    async fn stored_state(&mut self, version: i64) -> Result<Option<StoredState>, StoreError> {
        Ok(sqlx::query_as(sql::STORED_STATE)
            .bind(self.model_id)
            .bind(version)
            .fetch_optional(&mut *self.tx)
            .await?)
    }

    async fn folded_batches(&mut self, version: i64) -> Result<Vec<QueuedBatch>, StoreError> {
        let rows = sqlx::query_as(&format!(
            "SELECT {} FROM batches WHERE model_id = $1 AND version = $2 \
             AND status = 'folded' ORDER BY COALESCE(arrival, seq), seq",
            sql::BATCH_SOURCE
        ))
        .bind(self.model_id)
        .bind(version)
        .fetch_all(&mut *self.tx)
        .await?;
        Ok(rows)
    }

    async fn kept_rows(&mut self, version: i64, rows: i64) -> Result<Vec<KeptRows>, StoreError> {
        let rows = sqlx::query_as(sql::KEPT_ROWS)
            .bind(self.model_id)
            .bind(rows)
            .bind(version)
            .fetch_all(&mut *self.tx)
            .await?;
        Ok(rows)
    }

    async fn queued_batches(&mut self, read: QueueRead) -> Result<Vec<QueuedBatch>, StoreError> {
        let piece: Vec<(i64, bool)> = sqlx::query_as(sql::QUEUED)
            .bind(self.model_id)
            .bind(read.rows_within)
            .bind(read.whole_within)
            .bind(read.bytes_within)
            .bind(read.row_bytes)
            .fetch_all(&mut *self.tx)
            .await?;
        let seqs: Vec<i64> = piece.iter().map(|&(seq, _)| seq).collect();
        let with_rows: Vec<i64> = piece.iter().filter(|p| p.1).map(|&(seq, _)| seq).collect();
        // The model's lock keeps them queued: only ingestion writes its queue meanwhile, and it
        // adds batches after these.
        Ok(sqlx::query_as(sql::QUEUED_BY_SEQ)
            .bind(&seqs)
            .bind(&with_rows)
            .fetch_all(&mut *self.tx)
            .await?)
    }

    async fn write_version(&mut self, v: &NewVersion<'_>) -> Result<DateTime<Utc>, StoreError> {
        // The state is most of the message: its buffer is sized once, where binding would grow
        // it by doubling and copy a wide model's state (tens of megabytes) at every step.
        let mut args = PgArguments::default();
        args.reserve(11, v.state.bytes.len() + v.state.digest.len() + 256);
        let encode = |e| StoreError::Database(sqlx::Error::Encode(e));
        args.add(self.model_id).map_err(encode)?;
        args.add(v.version).map_err(encode)?;
        args.add(v.origin).map_err(encode)?;
        args.add(v.restored_from).map_err(encode)?;
        args.add(v.observations).map_err(encode)?;
        args.add(v.noise_variances).map_err(encode)?;
        args.add(&v.state.bytes).map_err(encode)?;
        args.add(v.replayable.then_some(&v.state.digest[..]))
            .map_err(encode)?;
        args.add(channel(Topic::Models)).map_err(encode)?;
        args.add(v.thin_previous).map_err(encode)?;
        args.add(v.folds).map_err(encode)?;
        // One round trip: the version, the model's row pointing to it, the previous version
        // thinned where asked (a fold after the first only), the batches it folds in marked
        // (found among the model's queued ones, as `record_surprises` finds them), and the
        // notification sent at the commit.
        let created_at: DateTime<Utc> = sqlx::query_scalar_with(
            "WITH model AS (UPDATE models SET version = $2, observations = $5, \
                                              updated_at = clock_timestamp() WHERE id = $1), \
                  thin AS (UPDATE versions SET state = ''::bytea \
                           WHERE $10 AND model_id = $1 AND version = $2 - 1 AND version > 1 \
                             AND origin = 'fold' AND state_digest IS NOT NULL), \
                  folded AS (UPDATE batches SET status = 'folded', version = $2, \
                                                folded_at = clock_timestamp() \
                             WHERE seq = ANY($11) AND model_id = $1 AND status = 'queued'), \
                  notice AS MATERIALIZED (SELECT pg_notify($9, $1::text)) \
             INSERT INTO versions (model_id, version, origin, restored_from, observations, \
                                   noise_variances, state, created_at, state_digest) \
             SELECT $1, $2, $3, $4, $5, $6, $7, clock_timestamp(), $8 FROM notice \
             RETURNING created_at",
            args,
        )
        .fetch_one(&mut *self.tx)
        .await?;
        Ok(created_at)
    }

    async fn set_spec(&mut self, spec: &ModelSpec) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE models SET spec = $2, first_fit_rows = $3, updated_at = clock_timestamp() \
             WHERE id = $1",
        )
        .bind(self.model_id)
        .bind(Json(spec))
        .bind(i64::try_from(spec.first_fit_rows).unwrap_or(i64::MAX))
        .execute(&mut *self.tx)
        .await?;
        notify(&mut self.tx, Topic::Models, self.model_id).await?;
        // A smaller `first_fit_rows` may let the rows already queued be fitted.
        notify(&mut self.tx, Topic::Batches, self.model_id).await?;
        Ok(())
    }

    async fn mark_rejected(&mut self, seq: i64, reason: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE batches SET status = 'rejected', error = $2, folded_at = clock_timestamp() \
             WHERE seq = $1 AND model_id = $3 AND status = 'queued'",
        )
        .bind(seq)
        .bind(reason)
        .bind(self.model_id)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn record_surprises(&mut self, batches: &[BatchSurprise<'_>]) -> Result<(), StoreError> {
        // One statement for the fold's batches: each batch's surprise is its slice of one
        // flat array (a slice's lower bound is 1, as a stored array's). The condition on the
        // queued status lets the planner find the batches through the partial index of the
        // model's queued ones (a few rows); joined on their keys alone, a planner with a young
        // model's stale statistics read every batch of the model instead.
        let mut seqs = Vec::with_capacity(batches.len());
        let mut firsts = Vec::with_capacity(batches.len());
        let mut lasts = Vec::with_capacity(batches.len());
        let mut holds = Vec::with_capacity(batches.len());
        let mut values = Vec::new();
        for b in batches {
            seqs.push(b.seq);
            firsts.push(values.len() as i64 + 1);
            values.extend_from_slice(b.surprise);
            lasts.push(values.len() as i64);
            holds.push(b.hold);
        }
        sqlx::query(
            "UPDATE batches AS b SET surprise = ($2::float8[])[u.first:u.last], \
                    status = CASE WHEN u.hold THEN 'held' ELSE b.status END \
             FROM unnest($1::int8[], $3::int8[], $4::int8[], $5::bool[]) AS u(seq, first, last, hold) \
             WHERE b.seq = u.seq AND b.model_id = $6 AND b.status = 'queued'",
        )
        .bind(&seqs)
        .bind(&values)
        .bind(&firsts)
        .bind(&lasts)
        .bind(&holds)
        .bind(self.model_id)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }
}
