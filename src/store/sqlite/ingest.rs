//! Group commit of ingested batches on SQLite.
//!
//! A commit in WAL mode with `synchronous = FULL` waits for the log to reach the disk, and the
//! file has one writer: batch by batch, concurrent requests queue behind each other's `fsync`.
//! So every batch goes to one committer task, which takes all the batches waiting for it (up to
//! [`MAX_GROUP`]) and stores them in one transaction: one `fsync` for the group, and each batch
//! answered as it would have been alone (stored, a replay, a conflict, or its model gone; none
//! of the last three writes anything). A database error fails the whole group: SQLite may have
//! rolled the transaction back itself (a full disk, an I/O error), so nothing after it could be
//! trusted to be part of the group's commit. An answer leaves only once the group's commit
//! returned, so a 202 still means the batch is on disk. The queue is in arrival order, so a
//! model's batches are committed in the order of their `seq`, as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::Utc;
use sqlx::{FromRow, SqliteConnection, SqlitePool};
use tokio::sync::{Mutex, broadcast, mpsc, oneshot};

use crate::domain::{EncodedBatch, NewBatch};
use crate::store::sql::{self, BATCH_COLUMNS};
use crate::store::{BatchRecord, Ingested, Notification, StoreError, StoredBatch, Topic};

/// Batches committed together at most: bounds a transaction at about 18 MB of 1,000-row,
/// 35-column batches.
const MAX_GROUP: usize = 64;

/// Batches waiting for the committer at most before senders wait too.
const QUEUE: usize = 256;

/// A batch handed to the committer, with everything it stores.
struct Pending {
    model_id: i64,
    batch_id: String,
    rows: i32,
    encoded: EncodedBatch,
    statistics: Vec<u8>,
    answer: oneshot::Sender<Result<Ingested, StoreError>>,
}

/// Panics in a row after which the store says it is not ready: one is a batch the committer
/// could not handle; several, with nothing committed between them, is a committer that cannot
/// work.
const FAILING: usize = 3;

/// The longest wait before a panicked committer is restarted (the wait doubles from 50 ms with
/// each panic in a row).
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The sending side of the committer's queue; the task ends when the last clone is dropped.
#[derive(Clone, Debug)]
pub(super) struct Committer {
    queue: mpsc::Sender<Pending>,
    /// Panics of the committer task since it last finished a group, each followed by a restart.
    panics: Arc<AtomicUsize>,
    /// Groups committed so far (the task counts them; tests read them).
    #[cfg(test)]
    groups: Arc<AtomicUsize>,
}

impl Committer {
    /// Starts the committer task on the current runtime, and restarts it if it panics.
    ///
    /// A panic loses nothing stored: the batches of the group in hand are answered unavailable
    /// (`503`), and a client retries them under the same batch ids: if the panic came before the
    /// commit, the transaction rolled back when dropped and the retry stores them; if after, the
    /// retry is answered as a replay. The next batches go to a new task on the same queue, after
    /// a wait that doubles with each panic in a row; from [`FAILING`] in a row the store is not
    /// ready ([`Self::failing`]) until a group goes through.
    pub(super) fn start(writer: SqlitePool, events: broadcast::Sender<Notification>) -> Self {
        let (queue, receiver) = mpsc::channel(QUEUE);
        let receiver = Arc::new(Mutex::new(receiver));
        let groups = Arc::new(AtomicUsize::new(0));
        let panics = Arc::new(AtomicUsize::new(0));
        let (counted, group_count) = (panics.clone(), groups.clone());
        tokio::spawn(async move {
            loop {
                let task = tokio::spawn(run(
                    writer.clone(),
                    events.clone(),
                    receiver.clone(),
                    group_count.clone(),
                    counted.clone(),
                ));
                match task.await {
                    // The queue closed: the store was dropped.
                    Ok(()) => break,
                    Err(e) if e.is_panic() => {
                        let in_a_row = counted.fetch_add(1, Ordering::Relaxed) + 1;
                        let wait = Duration::from_millis(50)
                            .saturating_mul(1 << (in_a_row - 1).min(16))
                            .min(MAX_BACKOFF);
                        tracing::error!(
                            error = %e,
                            in_a_row,
                            restart_in_ms = wait.as_millis() as u64,
                            "the embedded store's batch committer panicked: the batches of its \
                             group were answered unavailable and not stored; restarting it"
                        );
                        tokio::time::sleep(wait).await;
                    }
                    // Cancelled: the runtime is shutting down.
                    Err(_) => break,
                }
            }
        });
        Self {
            queue,
            panics,
            #[cfg(test)]
            groups,
        }
    }

    /// The panics in a row, once they are [`FAILING`] or more.
    pub(super) fn failing(&self) -> Option<usize> {
        let panics = self.panics.load(Ordering::Relaxed);
        (panics >= FAILING).then_some(panics)
    }

    /// The groups committed so far.
    #[cfg(test)]
    pub(super) fn groups(&self) -> usize {
        self.groups.load(Ordering::Relaxed)
    }

    /// Stores one batch; answers once the group it was committed in is on disk.
    pub(super) async fn insert(
        &self,
        model_id: i64,
        batch: &NewBatch,
        encoded: &EncodedBatch,
        statistics: &[u8],
    ) -> Result<Ingested, StoreError> {
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            model_id,
            batch_id: batch.batch_id.as_str().to_owned(),
            rows: batch.rows() as i32,
            // The raw rows are reference-counted: no copy.
            encoded: encoded.clone(),
            statistics: statistics.to_vec(),
            answer,
        };
        if self.queue.send(pending).await.is_err() {
            return Err(stopped());
        }
        answered.await.unwrap_or_else(|_| Err(stopped()))
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable(sqlx::Error::PoolClosed)
}

async fn run(
    writer: SqlitePool,
    events: broadcast::Sender<Notification>,
    receiver: Arc<Mutex<mpsc::Receiver<Pending>>>,
    groups: Arc<AtomicUsize>,
    panics: Arc<AtomicUsize>,
) {
    // Held for the task's life; a panic releases it (tokio's mutex is not poisoned) for the
    // task that replaces this one.
    let mut receiver = receiver.lock().await;
    let mut group = Vec::with_capacity(MAX_GROUP);
    while receiver.recv_many(&mut group, MAX_GROUP).await > 0 {
        #[cfg(test)]
        assert!(
            group.iter().all(|p| p.batch_id != tests::PANIC),
            "the committer's panic, for the tests"
        );
        let batches = group.len();
        commit_group(&writer, &events, std::mem::take(&mut group)).await;
        panics.store(0, Ordering::Relaxed);
        let committed = groups.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::trace!(batches, groups = committed, "a group of batches committed");
    }
}

/// One transaction for `group`; every batch answered once it has committed (or failed).
async fn commit_group(
    writer: &SqlitePool,
    events: &broadcast::Sender<Notification>,
    group: Vec<Pending>,
) {
    let mut tx = match super::begin_write(writer).await {
        Ok(tx) => tx,
        Err(e) => return fail_all(group, &e),
    };
    let mut outcomes = Vec::with_capacity(group.len());
    for pending in &group {
        match insert(&mut tx, pending).await {
            Ok(answer) => outcomes.push(answer),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    batch_id = %pending.batch_id,
                    model_id = pending.model_id,
                    batches = group.len(),
                    "a group of batches failed"
                );
                // Dropping the transaction rolls back whatever the group wrote.
                drop(tx);
                return fail_all(group, &e);
            }
        }
    }
    if let Err(e) = tx.commit().await {
        // Even the answers that wrote nothing (replays, conflicts) may rest on a batch of this
        // group that is now gone.
        return fail_all(group, &StoreError::from(e));
    }
    let mut stored: Vec<i64> = Vec::new();
    for (pending, outcome) in group.into_iter().zip(outcomes) {
        if matches!(&outcome, Ok(ingested) if !ingested.replayed)
            && !stored.contains(&pending.model_id)
        {
            stored.push(pending.model_id);
        }
        // A request that went away no longer needs its answer.
        let _ = pending.answer.send(outcome);
    }
    for model_id in stored {
        // No subscriber is not an error.
        let _ = events.send(Notification {
            topic: Topic::Batches,
            model_id: Some(model_id),
        });
    }
}

fn fail_all(group: Vec<Pending>, error: &StoreError) {
    for pending in group {
        let _ = pending.answer.send(Err(error.duplicate()));
    }
}

/// One batch inside the group's transaction: `Ok` with this batch's own answer, `Err` when the
/// group cannot go on. Only a stored batch writes anything: a replay, a conflict, a deleted model
/// or a stored batch of the same id that does not decode leave the transaction as they found
/// it, so they answer their own request and the group's other batches still commit.
async fn insert(
    tx: &mut SqliteConnection,
    pending: &Pending,
) -> Result<Result<Ingested, StoreError>, StoreError> {
    let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM models WHERE id = ?1")
        .bind(pending.model_id)
        .fetch_optional(&mut *tx)
        .await?;
    if exists.is_none() {
        return Ok(Err(StoreError::NotFound("the model was deleted".into())));
    }
    let existing: Option<StoredBatch> = match sqlx::query_as(sql::STORED_BATCH)
        .bind(pending.model_id)
        .bind(&pending.batch_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::from)
    {
        Ok(existing) => existing,
        Err(e @ StoreError::Corrupt(_)) => return Ok(Err(e)),
        Err(e) => return Err(e),
    };
    if let Some(stored) = existing {
        return Ok(stored.replay_or_conflict(&pending.encoded.content_hash));
    }
    let row = sqlx::query(&format!(
        "INSERT INTO batches (model_id, batch_id, content_hash, rows, statistics, received_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING {BATCH_COLUMNS}"
    ))
    .bind(pending.model_id)
    .bind(&pending.batch_id)
    .bind(&pending.encoded.content_hash.stored[..])
    .bind(pending.rows)
    .bind(&pending.statistics)
    .bind(Utc::now())
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query(sql::SQLITE_INSERT_ROWS)
        .bind(&pending.encoded.x[..])
        .bind(&pending.encoded.y[..])
        .execute(&mut *tx)
        .await?;
    Ok(Ok(Ingested {
        batch: BatchRecord::from_row(&row)?,
        replayed: false,
    }))
}

#[cfg(test)]
pub(super) mod tests {
    /// A batch id that makes the committer panic (tests of what a stopped committer does).
    pub(in crate::store::sqlite) const PANIC: &str = "committer-panic";
}
