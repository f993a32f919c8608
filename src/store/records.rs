//! What the store reads and writes: one type per record, each with its one row mapping (the
//! column types that differ by dialect, and their checks, are in `columns.rs`).

use chrono::{DateTime, Utc};

use crate::domain::Scope;
use crate::domain::{ContentHash, ModelSpec};

use super::columns::{List, Sha256Digest};
use super::{BatchStatus, StoreError, VersionOrigin};

/// A model as stored, with its queue length: one mapping for both backends (the spec is JSON
/// in either, `jsonb` or text), read with `sql::MODELS`.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ModelRecord {
    pub id: i64,
    #[sqlx(json)]
    pub spec: ModelSpec,
    pub version: i64,
    pub observations: f64,
    #[sqlx(rename = "pending")]
    pub pending_batches: i64,
    /// Rows of the queued batches.
    pub pending_rows: i64,
    /// Batches held for review.
    #[sqlx(rename = "held")]
    pub held_batches: i64,
    /// When the current version was made (`None` before the first).
    pub version_created_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A batch's status as stored, read from `sql::BATCH_COLUMNS`.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
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
    #[sqlx(try_from = "List<Option<Vec<Option<f64>>>>")]
    pub surprise: Option<Vec<Option<f64>>>,
    /// When retention removed the batch's raw rows (`None` while they are kept).
    pub rows_purged_at: Option<DateTime<Utc>>,
}

/// One entry of a model's history.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct VersionRecord {
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub origin: VersionOrigin,
    pub restored_from: Option<i64>,
    pub observations: f64,
    #[sqlx(try_from = "List<Vec<Option<f64>>>")]
    pub noise_variances: Vec<Option<f64>>,
    /// The batches folded into this version, in arrival order.
    #[sqlx(try_from = "List<Vec<String>>")]
    pub batches: Vec<String>,
    /// Whether the version keeps its full state (else it is replayed when restored).
    pub full_state: bool,
}

/// Where a model stands, for the posterior cache.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct ModelHead {
    pub id: i64,
    pub name: String,
    pub version: i64,
}

/// Batches and rows waiting in one model's queue.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct QueueDepth {
    #[sqlx(rename = "name")]
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

/// A folded batch's raw rows, as kept (`None`, or empty, where retention purged them).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct KeptRows {
    pub rows: i32,
    pub rows_x: Option<Vec<u8>>,
    pub rows_y: Option<Vec<u8>>,
}

/// A queued batch, in arrival order.
#[derive(Clone, Debug, sqlx::FromRow)]
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

/// Which of a model's queued batches a fold reads, oldest first, and which of them with their raw
/// rows ([`ModelLock::queued_for_fold`](crate::store::ModelLock::queued_for_fold)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRead {
    /// Each batch that follows fewer queued rows than this comes with its raw rows where they
    /// are kept (a batch stored without statistics always does).
    pub rows_within: i64,
    /// Every batch that follows fewer queued rows than this is read, whatever its size: the
    /// prefix a first fit needs.
    pub whole_within: i64,
    /// Past that prefix, a batch is read while the bytes queued before it are fewer than this
    /// (its statistics, or `row_bytes` a row where it was stored without them): the first
    /// batch always is.
    pub bytes_within: i64,
    /// The bytes of one raw row (features and outputs, 8 bytes each).
    pub row_bytes: i64,
}

impl QueueRead {
    /// The whole queue, with the raw rows of each batch that follows fewer than `rows` rows.
    pub fn whole(rows: i64) -> Self {
        QueueRead {
            rows_within: rows,
            whole_within: i64::MAX,
            bytes_within: i64::MAX,
            row_bytes: 0,
        }
    }
}

/// What an admin decides of a batch held for review.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Review {
    /// Back into the queue: folded by the next fold, whatever its surprise.
    Release,
    /// Rejected for good.
    Reject,
}

/// A stored API key (never its text), read with `sql::KEYS`.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct KeyRecord {
    pub id: i64,
    pub name: String,
    pub prefix: String,
    #[sqlx(try_from = "Sha256Digest<[u8; 32]>")]
    pub hash: [u8; 32],
    #[sqlx(try_from = "List<Vec<Scope>>")]
    pub scopes: Vec<Scope>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A version's state as stored: in full, or thin (see
/// [`ModelLock::write_version`](super::ModelLock::write_version)).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct StoredState {
    pub origin: VersionOrigin,
    /// The encoded state; empty when the version is thin.
    #[sqlx(rename = "state")]
    pub blob: Vec<u8>,
    /// SHA-256 of the encoded state; `None` for versions written before digests were kept
    /// (which are never thin).
    #[sqlx(rename = "state_digest", try_from = "Sha256Digest<Option<[u8; 32]>>")]
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

/// A version about to be written.
#[derive(Clone, Copy, Debug)]
pub struct NewVersion<'a> {
    pub version: i64,
    pub origin: VersionOrigin,
    pub restored_from: Option<i64>,
    pub observations: f64,
    pub noise_variances: &'a [Option<f64>],
    pub state: &'a StateBlob,
    /// Drop the state of the version this one replaces if that is a fold after the first
    /// (keeping its digest): it is then the version before it with its batches folded in.
    pub thin_previous: bool,
    /// The queued batches this version folds in, marked folded into it.
    pub folds: &'a [i64],
    /// Whether the state is the version before it with `folds` learnt (by the model's update),
    /// so that it can be kept thin later: its digest is kept only then. A fold whose refit took
    /// more shrinkage on the rows behind it, read back, is not: a replay has only its batches.
    pub replayable: bool,
}

/// A batch already stored under an id, with the hash of its content.
#[derive(sqlx::FromRow)]
pub(super) struct StoredBatch {
    content_hash: Vec<u8>,
    #[sqlx(flatten)]
    batch: BatchRecord,
}

impl StoredBatch {
    /// The same batch again (a replay) when the batch posted now has the stored content
    /// `hash`, a conflict when it has not.
    pub(super) fn replay_or_conflict(self, hash: &ContentHash) -> Result<Ingested, StoreError> {
        if !hash.matches(&self.content_hash) {
            return Err(StoreError::Conflict(format!(
                "batch {:?} was already accepted with different content",
                self.batch.batch_id
            )));
        }
        Ok(Ingested {
            batch: self.batch,
            replayed: true,
        })
    }
}

/// The answer to a review of a batch that is not held: what it is instead.
pub(super) fn not_held(batch: &BatchRecord) -> StoreError {
    StoreError::Conflict(format!(
        "batch {:?} is {}, not held for review",
        batch.batch_id, batch.status
    ))
}
