//! A model's history: the one way a version is written, and any version's state read back, in
//! full or recomputed from the folds behind it.
//!
//! A fold, a restore and a refit each make a version the same way ([`commit_version`]): the
//! state is written as the lock's next version with its batches (a fold's) marked folded, the
//! transaction commits, and this replica's posterior cache serves the state at once (the others
//! follow the store's notification).
//!
//! A fold's state is a pure function of the state before it, the batches folded into it and
//! the model's spec: each batch, in the order it was folded, learnt by the model's update
//! method ([`ModelState::update`], as [`crate::folder::plan_fold`] learnt it). So a fold need
//! not keep its state: the store keeps a full state only every `database.full_state_every`
//! versions (see [`crate::store::ModelLock::write_version`]) and, for the folds in between,
//! the SHA-256 of the encoded state they had. Reading such a *thin* version replays the folds
//! since the last full state and checks that the replayed state encodes to exactly the bytes
//! it had: a build whose estimator computes differently refuses instead of serving a state
//! that never was.
//!
//! Reading a stored batch back into statistics ([`decode_batch`]) lives here too: the folder
//! and a replay read batches the same way.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::cache::{CachedModel, PosteriorCache, Serving};
use crate::domain::{Rows, Shape};
use crate::estimator::first_fit::ForPredictor;
use crate::estimator::succession::Succession;
use crate::estimator::{
    Basis, BatchStatistics, FittedShapes, ModelConfig, ModelState, Predictor, codec,
};
use crate::store::{
    KeptRows, ModelLock, QueuedBatch, StateBlob, StoreError, VersionOrigin, VersionRecord,
};
use crate::successor::{SuccessorBatch, decode_version};

/// The ids of the batches whose rows version `version`'s state holds, in the order they were
/// folded: those folded into it and into every version its state was made from (`versions`,
/// the model's history in any order). A version is made from the one before it, but a restore,
/// which copies the version it names: a restore leaves out what was folded after that version,
/// and a later restore of a version from before it brings those batches back.
pub fn batches_learnt(versions: &[VersionRecord], version: i64) -> Vec<&str> {
    let by_number: HashMap<i64, &VersionRecord> = versions.iter().map(|v| (v.version, v)).collect();
    let mut chain = Vec::new();
    let mut at = version;
    // `at` falls at every step (a restore copies an earlier version), so the walk ends.
    while let Some(record) = by_number.get(&at) {
        match (record.origin, record.restored_from) {
            (VersionOrigin::Restore, Some(from)) if from < at => at = from,
            _ => {
                chain.push(*record);
                at -= 1;
            }
        }
    }
    chain
        .iter()
        .rev()
        .flat_map(|v| v.batches.iter().map(String::as_str))
        .collect()
}

/// What a queued batch was stored as.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// Its encoded statistics.
    Statistics(&'a [u8]),
    /// Its raw rows (a batch whose rows cost less than its statistics would).
    Rows(RawRows<'a>),
    /// Readings of the model's successor instrument ([`SuccessorBatch`]).
    Successor(&'a [u8]),
}

impl<'a> Source<'a> {
    /// The source of a batch as the store lists it.
    pub fn of(batch: &'a QueuedBatch) -> Self {
        if SuccessorBatch::is_one(&batch.statistics) {
            return Self::Successor(&batch.statistics);
        }
        match (&batch.rows_x, &batch.rows_y) {
            (Some(x), Some(y)) if batch.statistics.is_empty() => Self::Rows(RawRows {
                rows: usize::try_from(batch.rows).unwrap_or(0),
                x,
                y,
            }),
            _ => Self::Statistics(&batch.statistics),
        }
    }
}

/// A batch's raw rows as the store keeps them: little-endian, row-major `f64`s
/// ([`crate::domain::Rows::to_le_bytes`]).
#[derive(Clone, Copy, Debug)]
pub struct RawRows<'a> {
    pub rows: usize,
    pub x: &'a [u8],
    pub y: &'a [u8],
}

impl<'a> RawRows<'a> {
    /// The raw rows the store listed with `batch`, stored with statistics or not, if it listed
    /// them (a successor's readings have none a model could read).
    pub fn of(batch: &'a QueuedBatch) -> Option<Self> {
        if SuccessorBatch::is_one(&batch.statistics) {
            return None;
        }
        Some(Self {
            rows: usize::try_from(batch.rows).ok()?,
            x: batch.rows_x.as_deref()?,
            y: batch.rows_y.as_deref()?,
        })
    }
}

impl<'a> RawRows<'a> {
    /// A folded batch's raw rows, if they are kept.
    pub fn of_kept(kept: &'a KeptRows) -> Option<Self> {
        Some(Self {
            rows: usize::try_from(kept.rows).ok()?,
            x: kept.rows_x.as_deref().filter(|x| !x.is_empty())?,
            y: kept.rows_y.as_deref().filter(|y| !y.is_empty())?,
        })
    }
}

/// A stored batch's statistics in the model's shape. A batch stored in one of the shapes the
/// model had before it gained outputs or named features (`earlier`) is widened to it
/// ([`widen_statistics`]); any other shape is refused.
pub fn decode_batch(
    source: Source<'_>,
    config: &ModelConfig,
    earlier: &[Shape],
) -> Result<BatchStatistics, String> {
    let intercept = usize::from(config.basis.intercept);
    let known = |inputs: usize, outputs: usize| {
        (inputs == config.basis.features && outputs == config.outputs)
            || earlier.contains(&Shape { inputs, outputs })
    };
    let stats = match source {
        Source::Statistics(blob) => {
            codec::decode_statistics(blob).map_err(|e| format!("stored statistics: {e}"))?
        }
        // The old instrument's readings of the overlap, in the model's present shape (a model
        // with a successor does not grow).
        Source::Successor(blob) => SuccessorBatch::decode(blob)?
            .model_statistics(config)?
            .ok_or("the batch holds no reading of the model's own instrument")?,
        Source::Rows(RawRows { rows, x, y }) => {
            let (Some(x_values), Some(y_values)) =
                (Rows::values_from_le_bytes(x), Rows::values_from_le_bytes(y))
            else {
                return Err("stored rows: not a whole number of values".to_owned());
            };
            // The rows' own shape: the model's when they were stored.
            let width = |bytes: &[u8]| match rows {
                0 => 0,
                n => bytes.len() / 8 / n,
            };
            if !known(width(x), width(y)) {
                return Err("stored rows do not match the model's shape".to_owned());
            }
            let basis = Basis {
                features: width(x),
                ..config.basis
            };
            BatchStatistics::from_row_major(&basis, rows, &x_values, &y_values)
                .map_err(|e| format!("stored rows: {e}"))?
        }
    };
    if !known(stats.dim().saturating_sub(intercept), stats.outputs()) {
        return Err("stored statistics do not match the model's shape".to_owned());
    }
    widen_statistics(stats, config)
}

/// Statistics of rows learnt before the model gained outputs or named features, in the model's
/// present shape: each named feature added since was 0 in those rows, and each output added
/// since was used by none of them, so their statistics are exact zeros
/// ([`BatchStatistics::with_function_inserted`], [`BatchStatistics::with_output_appended`])
/// and the result is what the rows give with every column declared from the start.
pub fn widen_statistics(
    mut stats: BatchStatistics,
    config: &ModelConfig,
) -> Result<BatchStatistics, String> {
    let basis = &config.basis;
    let intercept = usize::from(basis.intercept);
    let mismatch = || "stored statistics do not match the model's shape".to_owned();
    if stats.dim() > basis.dim()
        || stats.dim() < basis.spectral + intercept
        || stats.outputs() > config.outputs
    {
        return Err(mismatch());
    }
    while stats.dim() < basis.dim() {
        // The named features end where the intercept (if any) begins.
        let at = stats.dim() - intercept;
        stats = stats
            .with_function_inserted(at)
            .map_err(|e| format!("{}: {e}", mismatch()))?;
    }
    while stats.outputs() < config.outputs {
        stats = stats.with_output_appended();
    }
    Ok(stats)
}

/// A state of the model before it gained outputs or named features, in the model's present
/// shape ([`ModelState::with_feature_appended`], [`ModelState::with_output_appended`]): what
/// a restore of an older version makes current. A new named feature's prior variance is its
/// output's widest named feature's, or the model's `prior_variance`.
pub fn widen_state(mut state: ModelState, config: &ModelConfig) -> Result<ModelState, String> {
    let mismatch = || "the version's state does not match the model's shape".to_owned();
    let basis = state.basis();
    if basis.features > config.basis.features || state.outputs().len() > config.outputs {
        return Err(mismatch());
    }
    while state.basis().features < config.basis.features {
        state = state
            .with_feature_appended(config.prior_variance)
            .map_err(|e| format!("{}: {e}", mismatch()))?;
    }
    while state.outputs().len() < config.outputs {
        state = state.with_output_appended();
    }
    Ok(state)
}

/// The model's configuration in the shape of `state`: that of an older version, for replaying
/// the folds behind it (the outputs and named features added since are the last ones).
pub fn config_of(config: &ModelConfig, state: &ModelState) -> ModelConfig {
    ModelConfig {
        basis: *state.basis(),
        outputs: state.outputs().len(),
        ..config.clone()
    }
}

/// A thin version: the batches folded into it and the digest of the state it had.
#[derive(Debug)]
pub struct Fold {
    pub version: i64,
    pub digest: [u8; 32],
    pub batches: Vec<QueuedBatch>,
}

/// Why a replay did not give back a version's state.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("a batch folded into version {version} cannot be read: {reason}")]
    Batch { version: i64, reason: String },
    #[error("learning a batch of version {version} failed: {reason}")]
    Update { version: i64, reason: String },
    #[error("the replayed state of version {version} differs from the state it had")]
    Differs { version: i64 },
}

/// The state of the last of `folds`, replayed from `base` (the full state just before the
/// first of them): `sₖ = update(…update(sₖ₋₁, b₁)…, bₙ)` over each fold's batches `b`, and
/// its encoding, whose SHA-256 must be the digest the last fold kept.
///
/// Only the last digest is checked: every fold's state is a function of the one before, so an
/// intermediate difference shows in the last.
pub fn replay(
    config: &ModelConfig,
    earlier: &[Shape],
    base: ModelState,
    folds: &[Fold],
) -> Result<(ModelState, StateBlob), ReplayError> {
    let mut state = base;
    for fold in folds {
        for batch in &fold.batches {
            let stats = decode_batch(Source::of(batch), config, earlier).map_err(|reason| {
                ReplayError::Batch {
                    version: fold.version,
                    reason,
                }
            })?;
            state = state
                .update(config, &stats)
                .map_err(|e| ReplayError::Update {
                    version: fold.version,
                    reason: e.to_string(),
                })?;
        }
    }
    let blob = StateBlob::new(codec::encode(&state));
    match folds.last() {
        Some(last) if last.digest != blob.digest && !kept_by_previous_release(&state, last) => {
            Err(ReplayError::Differs {
                version: last.version,
            })
        }
        _ => Ok((state, blob)),
    }
}

/// Whether `fold` was kept thin by the release before state format 6: its digest is of the
/// state's format-5 encoding, and the state, replayed from a base that release wrote, keeps no
/// zero rows.
fn kept_by_previous_release(state: &ModelState, fold: &Fold) -> bool {
    state.totals().zero_rows().is_none()
        && StateBlob::new(codec::encode_previous(state)).digest == fold.digest
}

/// A version's predictor, formed off the runtime from the moment its state is known, so that
/// forming it overlaps encoding and writing the state: on a wide model both are large (a
/// triangular solve per output; tens of megabytes written).
pub struct PredictorTask(tokio::task::JoinHandle<Arc<Predictor>>);

impl PredictorTask {
    pub fn start(state: &Arc<ModelState>) -> Self {
        Self::with_fitted_shapes(state, FittedShapes::none())
    }

    /// [`Self::start`] for a state a fit has just made, with the prior shapes its evidence
    /// formed ([`Predictor::with_fitted_shapes`]).
    pub fn with_fitted_shapes(state: &Arc<ModelState>, shapes: FittedShapes) -> Self {
        let state = state.clone();
        Self(tokio::task::spawn_blocking(move || {
            Arc::new(Predictor::with_fitted_shapes(&state, shapes))
        }))
    }

    /// [`Self::start`] for a predictor already formed.
    pub fn ready(predictor: Predictor) -> Self {
        Self(tokio::spawn(async move { Arc::new(predictor) }))
    }

    /// [`Self::ready`] for a predictor a fit formed, else [`Self::with_fitted_shapes`].
    pub fn prepared(state: &Arc<ModelState>, prepared: ForPredictor) -> Self {
        match prepared {
            ForPredictor::Formed(predictor) => Self::ready(predictor),
            ForPredictor::Shapes(shapes) => Self::with_fitted_shapes(state, shapes),
        }
    }

    async fn finish(self) -> Result<Arc<Predictor>, StoreError> {
        self.0
            .await
            .map_err(|e| StoreError::Corrupt(format!("predictor task failed: {e}")))
    }
}

/// A state about to become a model's next version.
pub struct NextVersion<'a> {
    pub origin: VersionOrigin,
    /// For a restore: the version whose state this is.
    pub restored_from: Option<i64>,
    pub state: Arc<ModelState>,
    /// `state`'s predictor ([`PredictorTask::start`], or [`PredictorTask::with_fitted_shapes`]
    /// for a state a fit has just made).
    pub predictor: PredictorTask,
    /// The successor instrument's state, for a model that declares one.
    pub successor: Option<Arc<Serving>>,
    /// The state's encoding ([`encode_version`](crate::successor::encode_version): what the
    /// store keeps, or digests for a thin version).
    pub blob: &'a StateBlob,
    /// The queued batches this version folds in (a fold's; none for a restore or a refit).
    pub folds: &'a [i64],
    /// Whether `state` is the version before it with `folds` learnt by the model's update
    /// alone ([`crate::store::NewVersion::replayable`]).
    pub replayable: bool,
}

/// Writes `next` as the locked model's next version, commits everything the lock holds, and
/// makes this replica's posterior cache serve the new state: the version and the database's
/// time of it.
pub async fn commit_version(
    mut lock: ModelLock,
    cache: &PosteriorCache,
    next: NextVersion<'_>,
) -> Result<(i64, DateTime<Utc>), StoreError> {
    let (version, created_at) = lock
        .write_version(
            next.origin,
            next.restored_from,
            next.state.totals().rows(),
            &next.state.noise_variances(),
            next.blob,
            next.folds,
            next.replayable,
        )
        .await?;
    // The version's predictor is ready before the commit, so that the cache serves the version
    // as soon as others can see it: the cache follower, notified by the commit, would otherwise
    // find the cache behind and decode the version from the store again, on the cores this fold
    // needs.
    let predictor = next.predictor.finish().await?;
    let (id, spec) = (lock.model_id, lock.spec.clone());
    lock.commit().await?;
    cache.put(
        CachedModel::prepared(id, spec, version, Some((next.state, predictor)))
            .with_succession(next.successor),
    );
    Ok((version, created_at))
}

/// A version's state as read back: the model's, its successor instrument's where the version
/// carries one ([`crate::successor`]), and their encoding.
#[derive(Debug)]
pub struct VersionState {
    pub model: ModelState,
    pub succession: Option<Succession>,
    pub blob: StateBlob,
}

/// The state of `version` of the locked model, `None` when the model has no such version. A
/// full version is decoded; a thin one is replayed from the last full state before it (at most
/// `database.full_state_every − 1` folds).
pub async fn version_state(
    lock: &mut ModelLock,
    version: i64,
) -> Result<Option<VersionState>, StoreError> {
    let mut folds = Vec::new();
    let mut at = version;
    let base = loop {
        let Some(stored) = lock.stored_state(at).await? else {
            if at == version {
                return Ok(None);
            }
            return Err(StoreError::Corrupt(format!(
                "model {} version {version} is kept thin but version {at} is missing",
                lock.name
            )));
        };
        if !stored.is_thin() {
            break stored.blob;
        }
        let digest = stored
            .digest
            .filter(|_| stored.origin == VersionOrigin::Fold && at > 1);
        let Some(digest) = digest else {
            return Err(StoreError::Corrupt(format!(
                "model {} version {at} has no state and is not a fold that can be replayed",
                lock.name
            )));
        };
        folds.push(Fold {
            version: at,
            digest,
            batches: lock.folded_batches(at).await?,
        });
        at -= 1;
    };
    folds.reverse();
    let (model, base_version) = (lock.name.clone(), at);
    let (config, earlier) = (lock.spec.config(), lock.spec.earlier.clone());
    tokio::task::spawn_blocking(move || {
        let (state, succession) = decode_version(&base).map_err(|e| StoreError::CorruptState {
            model: model.clone(),
            version: base_version,
            reason: e.to_string(),
        })?;
        if folds.is_empty() {
            return Ok(Some(VersionState {
                model: state,
                succession,
                blob: StateBlob::new(base),
            }));
        }
        if succession.is_some() {
            // A version carrying a succession is never followed by thin ones (see
            // `ModelLock::write_version`): a replay would lose it.
            return Err(StoreError::Corrupt(format!(
                "model {model} version {version} is kept thin after version {base_version}, \
                 which carries a successor instrument"
            )));
        }
        // The folds behind an older version learnt in the model's shape of then.
        let config = config_of(&config, &state);
        replay(&config, &earlier, state, &folds)
            .map(|(model, blob)| {
                Some(VersionState {
                    model,
                    succession: None,
                    blob,
                })
            })
            .map_err(|error| {
                let why = match error {
                    ReplayError::Differs { .. } => "does not give back the state it had (the \
                        estimator, or the arithmetic of the processor, differs from those that \
                        wrote it)"
                        .to_owned(),
                    other => format!("fails: {other}"),
                };
                StoreError::Conflict(format!(
                    "version {version} of model {model} is kept as the batches folded into it, \
                     and replaying them here {why}; version {base_version} is kept in full and \
                     can be restored"
                ))
            })
    })
    .await
    .map_err(|e| StoreError::Corrupt(format!("replay task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::domain::ModelSpec;
    use crate::folder::tests::{le_bytes, uniform, wide_batches, wide_spec};
    use crate::folder::{Pending, plan_fold};

    /// A history's version records: `(origin, restored_from, batches)` for versions 1, 2, ….
    fn records(versions: &[(VersionOrigin, Option<i64>, &[&str])]) -> Vec<VersionRecord> {
        versions
            .iter()
            .enumerate()
            .map(|(i, (origin, restored_from, batches))| VersionRecord {
                version: i as i64 + 1,
                created_at: Utc::now(),
                origin: *origin,
                restored_from: *restored_from,
                observations: 0.0,
                noise_variances: Vec::new(),
                batches: batches.iter().map(|b| (*b).to_owned()).collect(),
                full_state: true,
            })
            .collect()
    }

    /// A restore's state holds what the version it copies held; what was folded after that
    /// comes back only with a restore of a version that held it.
    #[test]
    fn a_version_learnt_the_batches_of_the_versions_its_state_was_made_from() {
        use VersionOrigin::{Extend, Fold, Refit, Restore};
        let versions = records(&[
            (Fold, None, &["a", "b"]),
            (Fold, None, &["c"]),
            (Refit, None, &[]),
            (Fold, None, &["d"]),
            (Restore, Some(2), &[]),
            (Fold, None, &["e"]),
            (Extend, None, &[]),
            (Restore, Some(4), &[]),
            (Restore, Some(7), &[]),
        ]);
        let learnt = |v| batches_learnt(&versions, v);
        assert_eq!(learnt(4), ["a", "b", "c", "d"]);
        assert_eq!(learnt(5), ["a", "b", "c"]);
        assert_eq!(learnt(7), ["a", "b", "c", "e"]);
        assert_eq!(learnt(8), ["a", "b", "c", "d"]);
        assert_eq!(learnt(9), ["a", "b", "c", "e"]);
        assert!(learnt(0).is_empty() && learnt(10).is_empty());
    }

    /// A batch as the store lists it: with its statistics, or (`as_rows`) with its rows only.
    fn stored(
        config: &ModelConfig,
        seq: i64,
        rows: usize,
        x: &[f64],
        y: &[f64],
        as_rows: bool,
    ) -> QueuedBatch {
        let statistics = if as_rows {
            Vec::new()
        } else {
            let stats = BatchStatistics::from_row_major(&config.basis, rows, x, y).expect("stats");
            codec::encode_statistics(&stats)
        };
        QueuedBatch {
            seq,
            batch_id: format!("b{seq}"),
            rows: rows as i32,
            statistics,
            rows_x: as_rows.then(|| le_bytes(x)),
            rows_y: as_rows.then(|| le_bytes(y)),
            received_at: Utc::now(),
            released: false,
        }
    }

    /// Folds each group of batches as the folder does, one version per group: the states.
    fn fold_versions(config: &ModelConfig, groups: &[Vec<QueuedBatch>]) -> Vec<ModelState> {
        let mut states: Vec<ModelState> = Vec::new();
        for group in groups {
            let pending: Vec<Pending<'_>> = group
                .iter()
                .map(|b| Pending {
                    seq: b.seq,
                    source: Source::of(b),
                    released: false,
                    rows: RawRows::of(b),
                })
                .collect();
            let plan = plan_fold(config, &[], states.last(), &pending, 30.0, None, None, None);
            assert_eq!(plan.folded.len(), group.len(), "{:?}", plan.rejected);
            states.push(plan.state.expect("a state"));
        }
        states
    }

    /// Versions 1 (the first fit) to 4, each of one to three batches, some kept as rows.
    fn history() -> (ModelConfig, Vec<Vec<QueuedBatch>>, Vec<ModelState>) {
        let config = wide_spec().config();
        let sizes = [30usize, 1, 3, 5, 2, 1, 4];
        let batches: Vec<QueuedBatch> = wide_batches(&sizes)
            .iter()
            .enumerate()
            .map(|(i, (n, x, y))| stored(&config, i as i64, *n, x, y, i % 2 == 1))
            .collect();
        let groups = vec![
            batches[..1].to_vec(),
            batches[1..3].to_vec(),
            batches[3..4].to_vec(),
            batches[4..].to_vec(),
        ];
        let states = fold_versions(&config, &groups);
        (config, groups, states)
    }

    fn thin(version: usize, groups: &[Vec<QueuedBatch>], states: &[ModelState]) -> Fold {
        Fold {
            version: version as i64,
            digest: StateBlob::new(codec::encode(&states[version - 1])).digest,
            batches: groups[version - 1].clone(),
        }
    }

    #[test]
    fn a_replay_gives_back_the_very_bits_of_every_version_it_passes() {
        let (config, groups, states) = history();
        for from in 1..4 {
            for to in from + 1..=4 {
                let folds: Vec<Fold> = (from + 1..=to).map(|v| thin(v, &groups, &states)).collect();
                let (state, blob) =
                    replay(&config, &[], states[from - 1].clone(), &folds).expect("replayed");
                assert_eq!(blob.bytes, codec::encode(&states[to - 1]), "{from} → {to}");
                assert_eq!(state, states[to - 1], "{from} → {to}");
            }
        }
    }

    /// Versions kept thin by the release before state format 6: their digests are of format-5
    /// encodings, and their states (from a format-5 base) keep no zero rows. They replay, and
    /// a replay that differs from them is still refused.
    #[test]
    fn versions_kept_thin_by_the_previous_release_replay() {
        let (config, groups, states) = history();
        let previous = codec::encode_previous;
        let mut old = vec![codec::decode(&previous(&states[0])).expect("decodes")];
        for group in &groups[1..] {
            let mut state = old.last().expect("a state").clone();
            for batch in group {
                let stats = decode_batch(Source::of(batch), &config, &[]).expect("statistics");
                state = state.update(&config, &stats).expect("update");
            }
            old.push(state);
        }
        assert!(old.iter().all(|s| s.totals().zero_rows().is_none()));
        // Versions 2 to 4 kept thin, each with the digest of `states`' format-5 encoding.
        let thin_previous = |states: &[ModelState]| -> Vec<Fold> {
            (2..=4)
                .map(|v| Fold {
                    version: v as i64,
                    digest: StateBlob::new(previous(&states[v - 1])).digest,
                    batches: groups[v - 1].clone(),
                })
                .collect()
        };
        let folds = thin_previous(&old);
        let (state, blob) = replay(&config, &[], old[0].clone(), &folds).expect("replayed");
        assert_eq!(state, old[3]);
        assert_eq!(
            blob.bytes,
            codec::encode(&old[3]),
            "kept in the current format"
        );
        let mut short = thin_previous(&old);
        short[2].batches.pop();
        assert!(matches!(
            replay(&config, &[], old[0].clone(), &short),
            Err(ReplayError::Differs { version: 4 })
        ));
        // A state of this release (with zero rows) is not taken for one of the previous release.
        assert!(matches!(
            replay(&config, &[], states[0].clone(), &thin_previous(&states)),
            Err(ReplayError::Differs { version: 4 })
        ));
    }

    /// A batch stored before the model grew is read in the shape it had, and only in a shape
    /// the model had: its statistics are those of its rows with the new columns 0.
    #[test]
    fn a_batch_of_an_earlier_shape_is_widened_and_no_other_shape_is_read() {
        let config = wide_spec().config();
        let (d, m) = (config.basis.features, config.outputs);
        let (rows, x, y) = wide_batches(&[3]).remove(0);
        // The same rows before the last input and output were added: both were 0.
        let narrow_x: Vec<f64> = x.chunks(d).flat_map(|r| r[..d - 1].to_vec()).collect();
        let narrow_y: Vec<f64> = y.chunks(m).flat_map(|r| r[..m - 1].to_vec()).collect();
        let zeroed_x: Vec<f64> = narrow_x
            .chunks(d - 1)
            .flat_map(|r| [r, &[0.0]].concat())
            .collect();
        let zeroed_y: Vec<f64> = narrow_y
            .chunks(m - 1)
            .flat_map(|r| [r, &[0.0]].concat())
            .collect();
        let expected =
            BatchStatistics::from_row_major(&config.basis, rows, &zeroed_x, &zeroed_y).unwrap();
        let earlier = [Shape {
            inputs: d - 1,
            outputs: m - 1,
        }];
        let (nx, ny) = (le_bytes(&narrow_x), le_bytes(&narrow_y));
        let source = Source::Rows(RawRows {
            rows,
            x: &nx,
            y: &ny,
        });
        // Equal to round-off: a product one column wider may add in another order.
        let close = |a: &BatchStatistics, b: &BatchStatistics| {
            let near = |u: f64, v: f64| (u - v).abs() <= 1e-12 * (1.0 + v.abs());
            a.dim() == b.dim()
                && a.outputs() == b.outputs()
                && (0..a.dim()).all(|i| (0..a.dim()).all(|j| near(a.g()[(i, j)], b.g()[(i, j)])))
                && (0..a.dim()).all(|i| (0..m).all(|k| near(a.b()[(i, k)], b.b()[(i, k)])))
                && a.q().iter().zip(b.q()).all(|(u, v)| near(*u, *v))
        };
        let widened = decode_batch(source, &config, &earlier).expect("an earlier shape");
        assert!(close(&widened, &expected));
        assert!(
            decode_batch(source, &config, &[]).is_err(),
            "a shape it never had"
        );
        let narrow_config = ModelConfig {
            basis: Basis {
                features: d - 1,
                ..config.basis
            },
            outputs: m - 1,
            ..config.clone()
        };
        let blob = codec::encode_statistics(
            &BatchStatistics::from_row_major(&narrow_config.basis, rows, &narrow_x, &narrow_y)
                .unwrap(),
        );
        let from_blob = decode_batch(Source::Statistics(&blob), &config, &earlier).unwrap();
        assert!(close(&from_blob, &expected));
        assert!(decode_batch(Source::Statistics(&blob), &config, &[]).is_err());
    }

    /// A thin version folded on a machine with one number of cores replays to its very bits on
    /// machines with others. The batch refits a 480-band spectrum (a third more rows than its
    /// first fit), whose prior shapes are eigendecompositions at the data's rank, about 480: a
    /// size at which faer's eigensolver splits its work into as many parts as it is told, and
    /// sums them part by part.
    #[test]
    fn a_thin_version_replays_on_a_machine_with_another_number_of_cores() {
        const BANDS: usize = 480;
        let spec = ModelSpec::parse(&serde_json::json!({
            "name": "cores",
            "spectrum": {"start_nm": 400, "interval_nm": 1, "count": BANDS, "scale": "fraction"},
            "outputs": ["a"],
        }))
        .expect("spec");
        let config = spec.config();
        let mut next = uniform(5);
        let mut batch = |seq: i64, n: usize| {
            let mut x = Vec::with_capacity(n * BANDS);
            let mut y = Vec::with_capacity(n);
            for _ in 0..n {
                let (centre, width) = (BANDS as f64 * next(), 20.0 + 60.0 * next());
                let row: Vec<f64> = (0..BANDS)
                    .map(|j| {
                        let t = (j as f64 - centre) / width;
                        0.2 + 0.5 * (-t * t / 2.0).exp() + 0.02 * next()
                    })
                    .collect();
                let signal: f64 = row.iter().step_by(40).sum();
                y.push(1.0 + signal + 0.05 * (next() - 0.5));
                x.extend(row);
            }
            stored(&config, seq, n, &x, &y, false)
        };
        let groups = vec![vec![batch(0, 470)], vec![batch(1, 160)]];
        let pool = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a thread pool")
        };
        let states = pool(2).install(|| fold_versions(&config, &groups));
        assert_eq!(states[1].fitted_rows(), [630.0], "the batch refits");
        for threads in [1, 3] {
            let folds = [thin(2, &groups, &states)];
            let (state, blob) = pool(threads)
                .install(|| replay(&config, &[], states[0].clone(), &folds))
                .unwrap_or_else(|e| panic!("{threads} threads: {e}"));
            assert_eq!(blob.bytes, codec::encode(&states[1]), "{threads} threads");
            assert_eq!(state, states[1], "{threads} threads");
        }
    }

    #[test]
    fn a_replay_that_differs_from_the_digest_is_refused() {
        let (config, groups, states) = history();
        let mut folds: Vec<Fold> = (2..=4).map(|v| thin(v, &groups, &states)).collect();
        // A batch missing from a fold.
        let dropped = folds[0].batches.pop().expect("a batch");
        let error = replay(&config, &[], states[0].clone(), &folds).unwrap_err();
        assert!(
            matches!(error, ReplayError::Differs { version: 4 }),
            "{error}"
        );
        // The batches of a fold in another order: the noise variance moves with each batch.
        folds[0].batches.insert(0, dropped);
        let error = replay(&config, &[], states[0].clone(), &folds).unwrap_err();
        assert!(
            matches!(error, ReplayError::Differs { version: 4 }),
            "{error}"
        );
        // Another base.
        let folds: Vec<Fold> = (3..=4).map(|v| thin(v, &groups, &states)).collect();
        assert!(replay(&config, &[], states[0].clone(), &folds).is_err());
        // A batch that cannot be read.
        let mut folds: Vec<Fold> = (2..=2).map(|v| thin(v, &groups, &states)).collect();
        folds[0].batches[0].statistics = b"not statistics".to_vec();
        let error = replay(&config, &[], states[0].clone(), &folds).unwrap_err();
        assert!(
            matches!(error, ReplayError::Batch { version: 2, .. }),
            "{error}"
        );
    }
}
