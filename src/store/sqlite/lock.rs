//! A model's write lock on SQLite.
//!
//! The lock is an in-process mutex per model (one process owns the file). While it is held,
//! nothing else changes the model's version or the status of its batches: only folds,
//! restores and refits do, and each takes the lock; deleting the model waits for it too. So
//! the reads of a fold can use the readers' pool, and its writes are kept until it commits
//! and then applied in one write transaction: ingestion (the only other writer) waits for
//! that short transaction, never for the fold's computation.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use tokio::sync::OwnedMutexGuard;

use super::SqliteStore;
use crate::domain::ModelSpec;
use crate::store::columns::List;
use crate::store::lock::LockedModel;
use crate::store::sql;
use crate::store::{
    BatchSurprise, KeptRows, ModelLock, ModelTransaction, NewVersion, QueueRead, QueuedBatch,
    StoreError, StoredState, Topic, VersionOrigin,
};

/// The lock on `model_id`, already held: the model as it is now, `None` if it was deleted.
pub(super) async fn locked(
    store: SqliteStore,
    model_id: i64,
    guard: OwnedMutexGuard<()>,
) -> Result<Option<ModelLock>, StoreError> {
    let row = sqlx::query_as::<_, LockedModel>(
        "SELECT id, name, spec, version FROM models WHERE id = ?1",
    )
    .bind(model_id)
    .fetch_optional(&store.inner.readers)
    .await?;
    Ok(row.map(|row| {
        row.lock(Box::new(SqliteModelTransaction {
            store,
            model_id,
            writes: Vec::new(),
            _guard: guard,
        }))
    }))
}

/// A write kept until commit.
enum Write {
    Version {
        version: i64,
        origin: VersionOrigin,
        restored_from: Option<i64>,
        observations: f64,
        noise_variances: Vec<Option<f64>>,
        state: Vec<u8>,
        digest: Option<[u8; 32]>,
        at: DateTime<Utc>,
    },
    Thin {
        version: i64,
    },
    Spec {
        spec: ModelSpec,
        at: DateTime<Utc>,
    },
    Folded {
        seqs: Vec<i64>,
        version: i64,
        at: DateTime<Utc>,
    },
    Surprise {
        seq: i64,
        surprise: Vec<Option<f64>>,
        hold: bool,
    },
    Rejected {
        seq: i64,
        reason: String,
        at: DateTime<Utc>,
    },
}

struct SqliteModelTransaction {
    store: SqliteStore,
    model_id: i64,
    writes: Vec<Write>,
    _guard: OwnedMutexGuard<()>,
}

#[async_trait]
impl ModelTransaction for SqliteModelTransaction {
    async fn stored_state(&mut self, version: i64) -> Result<Option<StoredState>, StoreError> {
        let pending = self.writes.iter().find_map(|w| match w {
            Write::Version {
                version: v,
                origin,
                state,
                digest,
                ..
            } if *v == version => Some(StoredState {
                origin: *origin,
                blob: state.clone(),
                digest: *digest,
            }),
            _ => None,
        });
        if pending.is_some() {
            return Ok(pending);
        }
        Ok(sqlx::query_as(sql::STORED_STATE)
            .bind(self.model_id)
            .bind(version)
            .fetch_optional(&self.store.inner.readers)
            .await?)
    }

    async fn folded_batches(&mut self, version: i64) -> Result<Vec<QueuedBatch>, StoreError> {
        let rows = sqlx::query_as(&format!(
            "SELECT {} FROM batches WHERE model_id = ?1 AND version = ?2 \
             AND status = 'folded' ORDER BY seq",
            sql::SQLITE_BATCH_SOURCE
        ))
        .bind(self.model_id)
        .bind(version)
        .fetch_all(&self.store.inner.readers)
        .await?;
        Ok(rows)
    }

    async fn kept_rows(&mut self, version: i64, rows: i64) -> Result<Vec<KeptRows>, StoreError> {
        let rows = sqlx::query_as(sql::SQLITE_KEPT_ROWS)
            .bind(self.model_id)
            .bind(rows)
            .bind(version)
            .fetch_all(&self.store.inner.readers)
            .await?;
        Ok(rows)
    }

    async fn queued_batches(&mut self, read: QueueRead) -> Result<Vec<QueuedBatch>, StoreError> {
        Ok(sqlx::query_as(sql::SQLITE_QUEUED)
            .bind(self.model_id)
            .bind(read.rows_within)
            .bind(read.whole_within)
            .bind(read.bytes_within)
            .bind(read.row_bytes)
            .fetch_all(&self.store.inner.readers)
            .await?)
    }

    async fn write_version(&mut self, v: &NewVersion<'_>) -> Result<DateTime<Utc>, StoreError> {
        let at = Utc::now();
        self.writes.push(Write::Version {
            version: v.version,
            origin: v.origin,
            restored_from: v.restored_from,
            observations: v.observations,
            noise_variances: v.noise_variances.to_vec(),
            state: v.state.bytes.clone(),
            digest: v.replayable.then_some(v.state.digest),
            at,
        });
        if v.thin_previous {
            self.writes.push(Write::Thin {
                version: v.version - 1,
            });
        }
        if !v.folds.is_empty() {
            self.writes.push(Write::Folded {
                seqs: v.folds.to_vec(),
                version: v.version,
                at,
            });
        }
        Ok(at)
    }

    async fn set_spec(&mut self, spec: &ModelSpec) -> Result<(), StoreError> {
        self.writes.push(Write::Spec {
            spec: spec.clone(),
            at: Utc::now(),
        });
        Ok(())
    }

    async fn mark_rejected(&mut self, seq: i64, reason: &str) -> Result<(), StoreError> {
        self.writes.push(Write::Rejected {
            seq,
            reason: reason.to_owned(),
            at: Utc::now(),
        });
        Ok(())
    }

    async fn record_surprises(&mut self, batches: &[BatchSurprise<'_>]) -> Result<(), StoreError> {
        self.writes.extend(batches.iter().map(|b| Write::Surprise {
            seq: b.seq,
            surprise: b.surprise.to_vec(),
            hold: b.hold,
        }));
        Ok(())
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        if self.writes.is_empty() {
            return Ok(());
        }
        let mut tx = self.store.write().await?;
        // A new version or specification: the cache of this process follows it.
        let mut changed = false;
        // A new specification: a smaller `first_fit_rows` may let the queued rows be fitted.
        let mut respecified = false;
        for write in &self.writes {
            match write {
                Write::Version {
                    version,
                    origin,
                    restored_from,
                    observations,
                    noise_variances,
                    state,
                    digest,
                    at,
                } => {
                    sqlx::query(
                        "INSERT INTO versions (model_id, version, origin, restored_from, \
                                               observations, noise_variances, state, created_at, \
                                               state_digest) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    )
                    .bind(self.model_id)
                    .bind(version)
                    .bind(origin)
                    .bind(restored_from)
                    .bind(observations)
                    .bind(List(noise_variances))
                    .bind(state)
                    .bind(at)
                    .bind(digest.as_ref().map(|d| &d[..]))
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query(
                        "UPDATE models SET version = ?2, observations = ?3, updated_at = ?4 \
                         WHERE id = ?1",
                    )
                    .bind(self.model_id)
                    .bind(version)
                    .bind(observations)
                    .bind(at)
                    .execute(&mut *tx)
                    .await?;
                    changed = true;
                }
                Write::Spec { spec, at } => {
                    sqlx::query(
                        "UPDATE models SET spec = ?2, first_fit_rows = ?3, updated_at = ?4 \
                         WHERE id = ?1",
                    )
                    .bind(self.model_id)
                    .bind(Json(spec))
                    .bind(i64::try_from(spec.first_fit_rows).unwrap_or(i64::MAX))
                    .bind(at)
                    .execute(&mut *tx)
                    .await?;
                    changed = true;
                    respecified = true;
                }
                Write::Thin { version } => {
                    sqlx::query(
                        "UPDATE versions SET state = x'' WHERE model_id = ?1 AND version = ?2 \
                         AND version > 1 AND origin = 'fold' AND state_digest IS NOT NULL",
                    )
                    .bind(self.model_id)
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
                }
                Write::Folded { seqs, version, at } => {
                    for seq in seqs {
                        sqlx::query(
                            "UPDATE batches SET status = 'folded', version = ?2, folded_at = ?3 \
                             WHERE seq = ?1 AND model_id = ?4 AND status = 'queued'",
                        )
                        .bind(seq)
                        .bind(version)
                        .bind(at)
                        .bind(self.model_id)
                        .execute(&mut *tx)
                        .await?;
                    }
                }
                Write::Surprise {
                    seq,
                    surprise,
                    hold,
                } => {
                    sqlx::query(
                        "UPDATE batches SET surprise = ?2, \
                                status = CASE WHEN ?4 THEN 'held' ELSE status END \
                         WHERE seq = ?1 AND model_id = ?3 AND status = 'queued'",
                    )
                    .bind(seq)
                    .bind(List(surprise))
                    .bind(self.model_id)
                    .bind(hold)
                    .execute(&mut *tx)
                    .await?;
                }
                Write::Rejected { seq, reason, at } => {
                    sqlx::query(
                        "UPDATE batches SET status = 'rejected', error = ?2, folded_at = ?3 \
                         WHERE seq = ?1 AND model_id = ?4 AND status = 'queued'",
                    )
                    .bind(seq)
                    .bind(reason)
                    .bind(at)
                    .bind(self.model_id)
                    .execute(&mut *tx)
                    .await?;
                }
            }
        }
        // A version is written in one commit, tens of megabytes on a wide model, and SQLite
        // checkpoints inside the `COMMIT` that takes its log past 1,000 pages, after that commit
        // is visible: the model's view would show the version while this process's cache,
        // which takes it once the commit returns, still served the one before, for as long as
        // the copy into the file lasted. Such a commit leaves the checkpoint to just after it.
        let version = self
            .writes
            .iter()
            .any(|write| matches!(write, Write::Version { .. }));
        if version {
            sqlx::query("PRAGMA wal_autocheckpoint = 0")
                .execute(&mut *tx)
                .await?;
        }
        let committed = tx.commit().await;
        if version {
            self.store.checkpoint_after_commit();
        }
        committed?;
        // The model's lock goes before the word does: a folder woken by it skips a model it
        // cannot lock, and would otherwise wait for its next poll.
        let Self {
            store,
            model_id,
            _guard,
            ..
        } = *self;
        drop(_guard);
        if changed {
            store.notify(Topic::Models, Some(model_id));
        }
        if respecified {
            store.notify(Topic::Batches, Some(model_id));
        }
        Ok(())
    }
}
