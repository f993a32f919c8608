//! The write-ahead log carried into the database file off the writer's path.
//!
//! By default SQLite checkpoints on the committing connection once the log passes 1,000 pages:
//! inside the `COMMIT` of whichever write crossed the line, after that commit is already
//! visible to readers. A wide model's version (tens of megabytes) crosses it on every fold, so
//! the fold waited for the log's copy into the file and its `fsync`, and for that long the
//! model's new version was visible in the database while this process's cache still served the
//! one before (a model view ahead of its predictions). The writer runs with
//! `wal_autocheckpoint = 0`; this task checkpoints instead, on a connection of its own, after
//! every notified commit and at least every [`EVERY`]. `PASSIVE` never waits for a reader or the
//! writer: it copies what no reader still needs, and the rest at the next round.

use std::time::Duration;

use sqlx::SqlitePool;
use tokio::sync::broadcast;

use crate::store::Notification;

/// The longest the log grows between checkpoints when no notified commit wakes the task (a
/// write that notifies nobody: keys, a model created).
pub(super) const EVERY: Duration = Duration::from_secs(1);

/// The pause after a checkpoint, in which a burst's further commits gather for the next one:
/// no more checkpoints a second than SQLite's own made at the ingest benchmark's rate.
const PAUSE: Duration = Duration::from_millis(100);

/// Starts the checkpointer on the current runtime; it stops once `pool` is closed.
pub(super) fn start(pool: SqlitePool, events: &broadcast::Sender<Notification>) {
    let mut commits = events.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                received = commits.recv() => {
                    if matches!(received, Err(broadcast::error::RecvError::Closed)) {
                        break;
                    }
                }
                () = tokio::time::sleep(EVERY) => {}
            }
            // The commits notified meanwhile are in this checkpoint too (lagging behind the
            // notifications only means more of them).
            while !matches!(
                commits.try_recv(),
                Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
            ) {}
            if pool.is_closed() {
                break;
            }
            if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&pool)
                .await
            {
                if pool.is_closed() {
                    break;
                }
                tracing::warn!(
                    error = %e,
                    "the embedded store's log could not be checkpointed; trying again at the next commit"
                );
            }
            tokio::time::sleep(PAUSE).await;
        }
    });
}
