//! A model's write lock: the fold, restore or refit that holds it, and its versions.

use std::fmt;

use async_trait::async_trait;

use chrono::{DateTime, Utc};

use crate::domain::ModelSpec;

use super::{
    DEFAULT_FULL_STATE_EVERY, KeptRows, NewVersion, QueueRead, QueuedBatch, StateBlob, StoreError,
    StoredState, VersionOrigin,
};

/// A batch's surprise per output to the posterior it met ([`crate::estimator::drift`]), and
/// whether the batch is held for review.
#[derive(Clone, Copy, Debug)]
pub struct BatchSurprise<'a> {
    pub seq: i64,
    pub surprise: &'a [Option<f64>],
    pub hold: bool,
}

/// The transaction behind a [`ModelLock`]: the writes of a fold, a restore or a refit become
/// visible together, when it commits, or not at all.
#[async_trait]
pub trait ModelTransaction: Send {
    /// One of the model's versions' state as stored.
    async fn stored_state(&mut self, version: i64) -> Result<Option<StoredState>, StoreError>;
    /// The batches folded into `version`, in the order they were folded.
    async fn folded_batches(&mut self, version: i64) -> Result<Vec<QueuedBatch>, StoreError>;
    /// The raw rows of every batch `version`'s state holds, in the order they were folded, each
    /// that follows fewer than `rows` of their rows (`None` for the others). Read before this
    /// transaction writes a version: the embedded store reads outside it.
    async fn kept_rows(&mut self, version: i64, rows: i64) -> Result<Vec<KeptRows>, StoreError>;
    /// The model's queued batches that `read` names, oldest first, with the raw rows it asks.
    async fn queued_batches(&mut self, read: QueueRead) -> Result<Vec<QueuedBatch>, StoreError>;
    /// Writes `version` (the current one plus one) and makes it current, thinning the one it
    /// replaces where asked ([`NewVersion::thin_previous`]) and marking the queued batches it
    /// folds in ([`NewVersion::folds`]) as folded into it; returns its time.
    async fn write_version(
        &mut self,
        version: &NewVersion<'_>,
    ) -> Result<DateTime<Utc>, StoreError>;
    /// Replaces the model's specification (a model only grows: see [`ModelLock::respecify`]).
    async fn set_spec(&mut self, spec: &ModelSpec) -> Result<(), StoreError>;
    /// Marks a queued batch as rejected with the reason.
    async fn mark_rejected(&mut self, seq: i64, reason: &str) -> Result<(), StoreError>;
    /// Stores the surprise of each of the model's queued batches, and holds for review those
    /// marked `hold`; a batch no longer queued is left as it is.
    async fn record_surprises(&mut self, batches: &[BatchSurprise<'_>]) -> Result<(), StoreError>;
    /// Makes every write visible and releases the lock.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

/// An open transaction holding one model's write lock: it excludes other folds, restores,
/// refits and the deletion of the same model, never ingestion. Dropping it rolls back.
pub struct ModelLock {
    pub model_id: i64,
    pub name: String,
    pub spec: ModelSpec,
    pub version: i64,
    /// See [`DatabaseSettings::full_state_every`].
    pub(super) full_state_every: u32,
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

/// A model as its lock reads it (`id, name, spec, version`), in either backend.
#[derive(sqlx::FromRow)]
pub(super) struct LockedModel {
    pub(super) id: i64,
    name: String,
    #[sqlx(json)]
    spec: ModelSpec,
    version: i64,
}

impl LockedModel {
    pub(super) fn lock(self, tx: Box<dyn ModelTransaction>) -> ModelLock {
        ModelLock::new(self.id, self.name, self.spec, self.version, tx)
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

    /// The raw rows of every batch the current version's state holds, in the order they were
    /// folded, as far as `rows` rows reach (each batch that follows fewer of their rows than
    /// that): what a refit checks its shrinkage on. Past a restore, the batches folded after the
    /// version it restored are not the state's, and are left out.
    pub async fn kept_rows(&mut self, rows: i64) -> Result<Vec<KeptRows>, StoreError> {
        self.tx.kept_rows(self.version, rows).await
    }

    /// The model's queued batches, oldest first.
    pub async fn queued_batches(&mut self) -> Result<Vec<QueuedBatch>, StoreError> {
        self.tx.queued_batches(QueueRead::whole(0)).await
    }

    /// The oldest of the model's queued batches that `read` names, those it asks with their raw
    /// rows: what one fold reads (a first fit's prefix, then as many bytes as a fold may hold).
    pub async fn queued_for_fold(
        &mut self,
        read: QueueRead,
    ) -> Result<Vec<QueuedBatch>, StoreError> {
        self.tx.queued_batches(read).await
    }

    /// Writes the next version and makes it current; returns its number and time.
    ///
    /// The version it replaces keeps its full state only every `full_state_every` versions
    /// (and always when it is the first, a restore or a refit). A fold in between is thin: its
    /// state is the version before it with its batches folded in, which [`crate::history`]
    /// recomputes and checks against the digest kept. So a wide model (p = 2,048, a full
    /// state of p²/2 numbers per output) pays for a full state once every `full_state_every`
    /// folds, and restoring any version replays at most `full_state_every − 1` folds. A model
    /// with a successor instrument keeps every version in full: its versions carry the
    /// succession, which a replay of the model's batches would not give back.
    ///
    /// The queued batches among `folds` are marked folded into the version (a fold's; none
    /// for a restore or a refit). A version that is not `replayable` keeps no digest, and so
    /// its full state for good.
    #[allow(clippy::too_many_arguments)] // the version's columns, each named at the call
    pub async fn write_version(
        &mut self,
        origin: VersionOrigin,
        restored_from: Option<i64>,
        observations: f64,
        noise_variances: &[Option<f64>],
        state: &StateBlob,
        folds: &[i64],
        replayable: bool,
    ) -> Result<(i64, DateTime<Utc>), StoreError> {
        let version = self.version + 1;
        let previous = version - 1;
        let thin_previous = previous > 1
            && previous % i64::from(self.full_state_every) != 0
            && self.spec.successor.is_none();
        let created_at = self
            .tx
            .write_version(&NewVersion {
                version,
                origin,
                restored_from,
                observations,
                noise_variances,
                state,
                thin_previous,
                folds,
                replayable,
            })
            .await?;
        self.version = version;
        Ok((version, created_at))
    }

    /// Makes `spec` the model's specification: outputs or named features appended, with the
    /// version that widens the state (if the model is trained) written in the same transaction.
    /// Batches queued before keep the shape they were stored in, and are widened when folded.
    pub async fn respecify(&mut self, spec: ModelSpec) -> Result<(), StoreError> {
        self.tx.set_spec(&spec).await?;
        self.spec = spec;
        Ok(())
    }

    /// Marks a batch as rejected with the reason.
    pub async fn mark_rejected(&mut self, seq: i64, reason: &str) -> Result<(), StoreError> {
        self.tx.mark_rejected(seq, reason).await
    }

    /// Stores the surprise of each of the model's queued batches, and holds for review those
    /// marked `hold`; a batch no longer queued is left as it is. A fold's batches are written
    /// together: on a busy database every statement of the fold waits for its turn on a core,
    /// and a statement per batch made a fold that fell behind slower still.
    pub async fn record_surprises(
        &mut self,
        batches: &[BatchSurprise<'_>],
    ) -> Result<(), StoreError> {
        if batches.is_empty() {
            return Ok(());
        }
        self.tx.record_surprises(batches).await
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        self.tx.commit().await
    }
}
