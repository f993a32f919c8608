//! The folder: the background task that folds queued batches into new model versions.
//!
//! Work is claimed one model at a time with `FOR NO KEY UPDATE SKIP LOCKED` (see
//! [`crate::store::ModelLock`]), so any number of replicas can fold against one database and
//! each batch is folded exactly once, in arrival order. A fold reads the current version,
//! computes, writes the next version and marks the batches, all in one transaction. The task
//! is woken by notifications on [`Topic::Batches`] and polls as a fallback; while the
//! database is unreachable it backs off instead of spinning.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::cache::PosteriorCache;
use crate::cache::Serving;
use crate::config::FolderSettings;
use crate::domain::{Rows, Shape};
use crate::estimator::grid::Grid;
use crate::estimator::succession::Succession;
use crate::estimator::{
    BatchStatistics, EstimatorError, FittedShapes, ModelConfig, ModelState, PARALLEL_FROM,
    Predictor, UpdateMethod, drift, first_fit,
};
use crate::history::{self, RawRows, Source, decode_batch};
use crate::metrics::Metrics;
use crate::store::{
    BatchSurprise, ModelLock, QueueRead, QueuedBatch, StateBlob, Store, StoreError, Topic,
    VersionOrigin,
};
use crate::successor::{self, SuccessorBatch, encode_version};
use crate::tasks::{Notifications, sleep_or_stop};
use first_fit::ForPredictor;

/// What folding a model's queue gives: the new state (if any batch was folded), the batches
/// folded into it, the batches rejected with their reasons and those held for review. Batches
/// in none of these lists stay queued (an untrained model waiting for more rows).
#[derive(Debug, Default)]
pub struct FoldPlan {
    pub state: Option<ModelState>,
    /// The prior shapes the evidence formed for `state` (its first fit's, or the refits' of the
    /// last batch that changed it), for its predictor; none where `predictor` took them.
    pub shapes: FittedShapes,
    /// `state`'s predictor, where the plan formed it: a first fit, or a refit given the rows
    /// behind it, forms it to read their residuals ([`Predictor::tail_of_rows`]), and hands it
    /// on (with the shapes it took) while no later batch of the plan changes the state.
    pub predictor: Option<Predictor>,
    pub folded: Vec<i64>,
    pub rejected: Vec<(i64, String)>,
    /// Batches whose surprise exceeded the model's threshold: not folded, kept for review.
    pub held: Vec<i64>,
    /// Each folded or held batch's surprise per output (see [`ModelState::surprise`]) to the
    /// posterior it met; batches of the first fit have none.
    pub surprise: Vec<(i64, Vec<Option<f64>>)>,
    /// The successor instrument's state after the batches of its readings; `None` when none
    /// was folded.
    pub succession: Option<Succession>,
    /// Whether the rows behind a refit ([`plan_fold`]'s `kept`) moved it off what the statistics
    /// alone give (a larger `α`, a noise shape or the tail read anew): a replay of the batches
    /// alone would not give the state back, and it is kept in full.
    pub moved_by_rows: bool,
}

/// A model's successor instrument, as a fold learns its readings ([`crate::successor`]).
#[derive(Clone, Copy, Debug)]
pub struct Successor<'a> {
    /// The successor's grid, and the grid of the model's own instrument.
    pub grid: Grid,
    pub old_grid: Grid,
    /// The succession at the current version; `None`: a new one starts.
    pub start: Option<&'a Succession>,
}

/// A queued batch as the fold plan reads it.
#[derive(Clone, Copy, Debug)]
pub struct Pending<'a> {
    pub seq: i64,
    pub source: Source<'a>,
    /// Released by an admin after a hold: folded whatever its surprise.
    pub released: bool,
    /// Its raw rows, where the fold has them: a first fit sets its outputs' noise shapes on
    /// them ([`ModelState::noise_shapes_from_rows`]).
    pub rows: Option<RawRows<'a>>,
}

/// The first fit (Algorithm 2) on `totals`, completed on the rows of its batches
/// ([`first_fit::on_rows`]: its shrinkage checked by leave-one-out, the noise shapes and the
/// tail they choose; a batch stored before the model grew widened to its present shape, one
/// whose rows are no longer kept left out), and its predictor, formed with the fit's shapes to
/// read the tail; on the statistics alone, with the shapes for its predictor, without any rows.
fn fit_first(
    config: &ModelConfig,
    totals: BatchStatistics,
    rows: &[RawRows<'_>],
) -> Result<(ModelState, ForPredictor), EstimatorError> {
    let Some((x, y)) = gather(config, rows) else {
        let (fitted, shapes) = ModelState::fit_with_shapes(config, totals)?;
        return Ok((fitted, ForPredictor::Shapes(shapes)));
    };
    let done = first_fit::on_rows(config, totals, x.as_mat(), y.as_mat())?;
    if done.shrunk > 0 {
        tracing::debug!(
            shapes = done.shrunk,
            "leave-one-out asked the first fit for more shrinkage"
        );
    }
    for (step, e) in &done.skipped {
        tracing::warn!(error = %e, step, "the first fit's rows did not set this");
    }
    Ok((done.state, ForPredictor::Formed(done.predictor)))
}

/// The raw rows of `batches` as one design's inputs and outputs in the model's shape now (a
/// batch stored before the model grew widened to it, one whose rows are no longer kept left
/// out); `None` without any row.
pub fn gather(config: &ModelConfig, batches: &[RawRows<'_>]) -> Option<(Rows, Rows)> {
    let (d, m) = (config.basis.features, config.outputs);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for batch in batches {
        let (Some(bx), Some(by)) = (
            Rows::values_from_le_bytes(batch.x),
            Rows::values_from_le_bytes(batch.y),
        ) else {
            continue;
        };
        let n = batch.rows;
        let (bd, bm) = (bx.len() / n.max(1), by.len() / n.max(1));
        // Only a shape the model has had: its bands, and no more named features or outputs than
        // now (rows purged from the store are empty, and left out).
        let whole = n > 0 && bd * n == bx.len() && bm * n == by.len();
        let had = (config.basis.spectral.max(1)..=d).contains(&bd) && (1..=m).contains(&bm);
        if !(whole && had) {
            continue;
        }
        // A batch stored before the model grew: every column added since was 0 in its rows, as
        // its widened statistics say ([`history::widen_statistics`]).
        for i in 0..n {
            x.extend_from_slice(&bx[i * bd..(i + 1) * bd]);
            x.extend(std::iter::repeat_n(0.0, d - bd));
            y.extend_from_slice(&by[i * bm..(i + 1) * bm]);
            y.extend(std::iter::repeat_n(0.0, m - bm));
        }
    }
    let n = y.len() / m.max(1);
    (n > 0).then(|| (Rows::from_row_major(n, d, x), Rows::from_row_major(n, m, y)))
}

/// The most raw values (rows × (inputs + outputs)) a refit reads back to check its shrinkage
/// and read its noise shapes and tail on every row, as a first fit does: 2 MB. Beyond it a
/// refit is the evidence's alone, as the incremental method intends (with more rows,
/// leave-one-out and the evidence differ less).
pub const CHECK_VALUES: usize = 1 << 18;

/// Whether `rows` rows of `config`'s model fit within [`CHECK_VALUES`].
pub fn rows_within_check(config: &ModelConfig, rows: f64) -> bool {
    rows <= max_check_rows(config)
}

/// The most rows of `config`'s model within [`CHECK_VALUES`].
pub fn max_check_rows(config: &ModelConfig) -> f64 {
    (CHECK_VALUES / (config.basis.features + config.outputs).max(1)) as f64
}

/// Whether a batch of `rows` rows may fit `state` again by the rows' growth, or train an output
/// (or every batch, under refit updates), where the refit could read every row back: a model
/// without forgetting (whose statistics are its rows' own sums), within [`CHECK_VALUES`] with
/// the batch. A refit a contradicting batch alone triggers is not among them.
pub fn may_refit_on_rows(config: &ModelConfig, state: &ModelState, rows: f64) -> bool {
    let after = state.totals().rows() + rows;
    rows_within_check(config, after) && may_grow(config, state, rows)
}

/// Whether a fold of `queued` rows may hand some batch's update the rows behind it
/// ([`may_refit_on_rows`] for one of its batches, whichever way they are grouped): a fold reads
/// the rows back only then.
fn may_read_rows(config: &ModelConfig, state: &ModelState, queued: f64) -> bool {
    rows_within_check(config, state.totals().rows()) && may_grow(config, state, queued)
}

/// Whether some output of `state` may be fitted once `added` more rows are learnt, under a model
/// without forgetting (whose statistics are its rows' own sums): a trained output whose
/// informative rows could grow by [`FitOptions::refit_growth`](crate::estimator::FitOptions)
/// (were every added row informative), or an untrained one that could reach the rows its first
/// fit needs (and may then be refitted); every output under refit updates. Any prior family: an
/// ARD fit takes no shrinkage check, but reads its noise shapes and tail off the rows as the
/// others do.
fn may_grow(config: &ModelConfig, state: &ModelState, added: f64) -> bool {
    let (totals, options) = (state.totals(), &config.options);
    let needed = options
        .min_informative_rows
        .min(options.min_zero_inflated_rows);
    let grows = |k: usize| match state.outputs()[k].posterior() {
        Some(_) => {
            options.refit_growth > 0.0
                && totals.informative_rows(k) + added
                    >= options.refit_growth * state.fitted_rows()[k].max(1.0)
        }
        None => totals.nonzero()[k] + added >= needed,
    };
    config.forgetting.is_none()
        && (config.update == UpdateMethod::Refit || (0..state.outputs().len()).any(grows))
}

/// The queued rows a fold reads back behind a state of `rows` rows: those a refit could still
/// check within [`CHECK_VALUES`], and at least one, so that every fold takes a batch.
fn rows_left(config: &ModelConfig, rows: f64) -> i64 {
    ((max_check_rows(config) - rows).floor() as i64).max(1)
}

/// The oldest batches of `queued` that start within its first `left` rows: those the store read
/// with their rows. A batch after them could not refit on its rows within the budget unless one
/// before it is held or rejected, so it is left to the next fold, which reads it behind the state
/// this one writes: the queued rows a fold holds stay within the budget and one batch (beside
/// the folded rows it reads back, within the budget too), and which refits read rows does not
/// depend on how the queue is grouped into folds.
fn starting_within(mut queued: Vec<QueuedBatch>, left: i64) -> Vec<QueuedBatch> {
    let mut before = 0_i64;
    let within = queued
        .iter()
        .take_while(|b| {
            let starts = before < left;
            before += i64::from(b.rows);
            starts
        })
        .count();
    queued.truncate(within);
    queued
}

/// Whether a first fit's fold may hand a later batch's update the rows behind it: the queued
/// batches within the budget ([`starting_within`]) are then read with their rows.
fn may_read_rows_after_first_fit(config: &ModelConfig, first_fit_rows: f64) -> bool {
    config.forgetting.is_none() && rows_within_check(config, first_fit_rows)
}

/// Folds `batches` (oldest first) into `current`. A batch stored in a shape the model had
/// before it grew (`earlier`) is learnt widened to its shape now.
///
/// Without a current state the first fit (Algorithm 2) runs on the shortest prefix of the
/// queue holding at least `first_fit_rows` rows; every later batch is then learnt by the
/// model's update method, one batch at a time. So the result depends only on the order of the
/// batches, never on how the folder happened to group them into folds.
///
/// Before a batch is learnt, its surprise to the posterior it meets is computed; with a
/// `hold_above` threshold, a batch whose largest surprise over the outputs exceeds it is held
/// for review instead (unless an admin released it), and the state stays what it was.
///
/// A batch whose statistics cannot be decoded, or whose update fails or would make the state
/// non-finite, is rejected with the reason and the state stays what it was before it. If the
/// first fit itself fails, every batch of its prefix is rejected.
///
/// A batch of `successor` readings is learnt after the first fit by the model (the old
/// instrument's readings of the overlap, if any) and by the succession, which the model as the
/// batch met scores ([`successor::learn`]); both or neither. It is held for review as any batch
/// is, on its surprise to the model (the overlap) or to the successor's own model (its
/// readings alone).
///
/// `kept`: the raw rows of every batch the state holds, where the fold read them back. A batch
/// that fits an output again then hands its update every row behind the statistics (those,
/// its own and the queue's before it), and the refit checks its shrinkage on them and reads
/// its noise shapes and tail off them as a first fit does ([`first_fit::update_on_rows`]): a
/// model fed its rows in batches answers as one fed them at once. A row missing from them
/// (purged, say) leaves the refit the evidence's alone, with the shapes and tail it had; the
/// fold reads the rows for every batch of it that may refit within the budget, and leaves the
/// queue past the budget to the next fold, so the rows a refit reads do not depend on the
/// batches a fold holds together.
#[allow(clippy::too_many_arguments)]
pub fn plan_fold(
    config: &ModelConfig,
    earlier: &[Shape],
    current: Option<&ModelState>,
    batches: &[Pending<'_>],
    first_fit_rows: f64,
    hold_above: Option<f64>,
    successor: Option<Successor<'_>>,
    kept: Option<&[RawRows<'_>]>,
) -> FoldPlan {
    let mut plan = FoldPlan::default();
    let mut queue = batches.iter();
    let mut state: Option<ModelState> = None;
    let mut shapes = FittedShapes::none();
    // Every row behind the state as the fold goes, while each is known.
    let mut seen: Option<Vec<RawRows<'_>>> = current.and(kept).map(<[_]>::to_vec);
    if current.is_none() {
        let p = config.basis.dim();
        let mut totals = BatchStatistics::zeros(p, config.outputs);
        let mut prefix = Vec::new();
        let mut prefix_rows = Vec::new();
        for &Pending {
            seq, source, rows, ..
        } in queue.by_ref()
        {
            match decode_batch(source, config, earlier).and_then(|stats| {
                let mut sum = totals.clone();
                sum.add(&stats).map_err(|e| e.to_string())?;
                Ok(sum)
            }) {
                Ok(sum) => {
                    totals = sum;
                    prefix.push(seq);
                    prefix_rows.extend(rows);
                }
                Err(reason) => plan.rejected.push((seq, reason)),
            }
            if totals.rows() >= first_fit_rows {
                break;
            }
        }
        if totals.rows() < first_fit_rows {
            return plan;
        }
        match fit_first(config, totals, &prefix_rows) {
            Ok((fitted, prepared)) if fitted.is_finite() => {
                state = Some(fitted);
                seen = Some(prefix_rows.clone());
                match prepared {
                    ForPredictor::Formed(predictor) => plan.predictor = Some(predictor),
                    ForPredictor::Shapes(formed) => shapes = formed,
                }
                plan.folded = prefix;
            }
            outcome => {
                let reason = match outcome {
                    Err(e) => format!("first fit failed: {e}"),
                    Ok(_) => "first fit would make the model state non-finite".to_owned(),
                };
                plan.rejected
                    .extend(prefix.into_iter().map(|seq| (seq, reason.clone())));
                return plan;
            }
        }
    }
    for batch in queue {
        let Some(base) = state.as_ref().or(current) else {
            break;
        };
        let seq = batch.seq;
        if let Source::Successor(blob) = batch.source {
            // Its readings are not rows of the model's statistics.
            seen = None;
            let start = plan.succession.as_ref().or(successor.and_then(|s| s.start));
            match learn_successor(config, base, start, successor, blob, hold_above, batch) {
                Ok(SuccessorLearnt::Folded {
                    model,
                    succession,
                    surprise,
                }) => {
                    // Readings of the successor alone leave the model's state, and its shapes, as
                    // they were.
                    if let Some(model) = model {
                        let (next, formed) = *model;
                        state = Some(next);
                        shapes = formed;
                        plan.predictor = None;
                    } else if state.is_none() {
                        state = current.cloned();
                    }
                    plan.succession = Some(*succession);
                    plan.folded.push(seq);
                    plan.surprise.push((seq, surprise));
                }
                Ok(SuccessorLearnt::Held(z)) => {
                    plan.held.push(seq);
                    plan.surprise.push((seq, z));
                }
                Err(reason) => plan.rejected.push((seq, reason)),
            }
            continue;
        }
        let next = decode_batch(batch.source, config, earlier).and_then(|stats| {
            let z = base.surprise(&stats);
            let over = hold_above
                .zip(drift::largest(&z))
                .is_some_and(|(t, z)| z > t);
            if over && !batch.released {
                return Ok(Learnt::Held(z));
            }
            // Every row behind the statistics after this batch, where a refit may read them.
            let every = seen
                .as_ref()
                .zip(batch.rows)
                .filter(|_| may_refit_on_rows(config, base, stats.rows()))
                .and_then(|(seen, rows)| {
                    let mut all = seen.clone();
                    all.push(rows);
                    gather(config, &all)
                });
            let rows = every.as_ref().map(|(x, y)| (x.as_mat(), y.as_mat()));
            let done = first_fit::update_on_rows(base, config, &stats, &z, rows)
                .map_err(|e| format!("update failed: {e}"))?;
            // Rows that are not the statistics' (purged, say) leave the refit the evidence's
            // alone, and the shapes and tail kept; any other reason is a fault.
            for (step, e) in &done.skipped {
                if matches!(e, EstimatorError::NotTheRows) {
                    tracing::debug!(seq, error = %e, step, "a refit's rows did not set this");
                } else {
                    tracing::warn!(seq, error = %e, step, "a refit's rows did not set this");
                }
            }
            let whole = done.shrunk > 0 || done.reshaped;
            if done.state.is_finite() {
                Ok(Learnt::Folded(
                    Box::new(done.state),
                    done.predictor,
                    z,
                    whole,
                ))
            } else {
                Err("the update would make the model state non-finite".to_owned())
            }
        });
        match next {
            Ok(Learnt::Folded(next, formed, z, whole)) => {
                state = Some(*next);
                plan.moved_by_rows |= whole;
                match (seen.as_mut(), batch.rows) {
                    (Some(seen), Some(rows)) => seen.push(rows),
                    _ => seen = None,
                }
                match formed {
                    ForPredictor::Formed(predictor) => {
                        plan.predictor = Some(predictor);
                        shapes = FittedShapes::none();
                    }
                    ForPredictor::Shapes(formed) => {
                        plan.predictor = None;
                        shapes = formed;
                    }
                }
                plan.folded.push(seq);
                plan.surprise.push((seq, z));
            }
            Ok(Learnt::Held(z)) => {
                plan.held.push(seq);
                plan.surprise.push((seq, z));
            }
            Err(reason) => plan.rejected.push((seq, reason)),
        }
    }
    plan.state = state;
    plan.shapes = shapes;
    plan
}

/// What became of one batch of successor readings.
enum SuccessorLearnt {
    /// Learnt: the model's next state and the shapes its refits formed (`None` when the old
    /// instrument read nothing), the succession's, and the batch's surprise to the model (`None`
    /// where it had no reading).
    Folded {
        model: Option<Box<(ModelState, FittedShapes)>>,
        succession: Box<Succession>,
        surprise: Vec<Option<f64>>,
    },
    Held(Vec<Option<f64>>),
}

/// Learns one batch of successor readings (`blob`) beside `base` (see [`plan_fold`]).
fn learn_successor(
    config: &ModelConfig,
    base: &ModelState,
    start: Option<&Succession>,
    successor: Option<Successor<'_>>,
    blob: &[u8],
    hold_above: Option<f64>,
    pending: &Pending<'_>,
) -> Result<SuccessorLearnt, String> {
    let successor = successor
        .ok_or("the batch holds successor readings but the model declares no successor")?;
    let batch = SuccessorBatch::decode(blob)?;
    let stats = batch.model_statistics(config)?;
    // The model judges the old instrument's readings; without them, the successor's own model
    // (once it has one) judges the successor's: its rows are held for review as any are.
    let surprise = match (&stats, start.and_then(Succession::own)) {
        (Some(stats), _) => base.surprise(stats),
        (None, Some(own)) => own.surprise(&batch.own_statistics(config)?),
        (None, None) => vec![None; config.outputs],
    };
    let over = hold_above
        .zip(drift::largest(&surprise))
        .is_some_and(|(t, z)| z > t);
    if over && !pending.released {
        return Ok(SuccessorLearnt::Held(surprise));
    }
    let model = match stats {
        Some(stats) => {
            // `surprise` is the model's own here: the old instrument read the batch.
            let (next, formed) = base
                .update_with_shapes(config, &stats, &surprise)
                .map_err(|e| format!("update failed: {e}"))?;
            if !next.is_finite() {
                return Err("the update would make the model state non-finite".to_owned());
            }
            Some(Box::new((next, formed)))
        }
        None => None,
    };
    let succession = successor::learn(
        start,
        successor.grid,
        base,
        config,
        &successor.old_grid,
        &batch,
    )?;
    Ok(SuccessorLearnt::Folded {
        model,
        succession: Box::new(succession),
        surprise,
    })
}

/// What became of one batch after the first fit.
enum Learnt {
    /// The next state, what its predictor takes, the batch's surprise, and whether the rows
    /// behind it moved a refit off what the statistics alone give (a larger `α`, a noise shape
    /// or the tail read anew).
    Folded(Box<ModelState>, ForPredictor, Vec<Option<f64>>, bool),
    Held(Vec<Option<f64>>),
}

/// Outcome of one fold, for logs and tests.
#[derive(Debug)]
pub struct FoldReport {
    pub model_id: i64,
    pub version: Option<i64>,
    pub folded: usize,
    pub rejected: usize,
}

/// Why a fold failed, and which model it was (so the folder can set that model aside).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct FoldError {
    pub model_id: Option<i64>,
    #[source]
    pub error: StoreError,
}

/// Claims one model with work (other than those in `skip`) and folds its queue's oldest batches:
/// a first fit's prefix whole, and every batch that starts within `max_bytes` of queued
/// statistics (or raw rows, where a batch was stored without them), at least one; the rest is
/// the next fold's. `Ok(None)` when there is no work.
pub async fn fold_once(
    store: &Store,
    cache: &PosteriorCache,
    metrics: &Metrics,
    skip: &[i64],
    max_bytes: u64,
) -> Result<Option<FoldReport>, FoldError> {
    let lock = store.claim_fold(skip).await.map_err(|error| FoldError {
        model_id: None,
        error,
    })?;
    let Some(lock) = lock else {
        return Ok(None);
    };
    let model_id = lock.model_id;
    fold_claimed(lock, cache, metrics, max_bytes)
        .await
        .map(Some)
        .map_err(|error| FoldError {
            model_id: Some(model_id),
            error,
        })
}

async fn fold_claimed(
    mut lock: ModelLock,
    cache: &PosteriorCache,
    metrics: &Metrics,
    max_bytes: u64,
) -> Result<FoldReport, StoreError> {
    let started = std::time::Instant::now();
    let config = lock.spec.config();
    let current = current_state(&mut lock, cache).await?;
    let (current, serving) = match current {
        Some(Current { state, successor }) => (Some(state), successor),
        None => (None, None),
    };
    let grids = lock
        .spec
        .successor
        .zip(lock.spec.spectrum)
        .map(|(new, old)| (new.grid(), old.grid()));
    // What this fold reads of the queue: a first fit's prefix whole, then as many bytes as it
    // may hold (one batch at least), the batches within `rows_within` rows with their raw rows.
    let prefix = i64::try_from(lock.spec.first_fit_rows).unwrap_or(i64::MAX);
    let read = |rows_within: i64, whole_within: i64| QueueRead {
        rows_within,
        whole_within,
        bytes_within: i64::try_from(max_bytes.max(1)).unwrap_or(i64::MAX),
        row_bytes: 8 * (config.basis.features + config.outputs) as i64,
    };
    // A first fit reads its batches' raw rows, to set its noise shapes on them; where a later
    // batch of the same fold may refit on every row (as below), the queue's within the budget.
    let queued = if current.is_some() {
        lock.queued_for_fold(read(0, 0)).await?
    } else if grids.is_none()
        && may_read_rows_after_first_fit(&config, lock.spec.first_fit_rows as f64)
    {
        let left = rows_left(&config, 0.0);
        starting_within(lock.queued_for_fold(read(left, prefix)).await?, left)
    } else {
        lock.queued_for_fold(read(prefix, prefix)).await?
    };
    // A refit this fold may make reads every row back, to check its shrinkage and read its
    // noise shapes and tail as a first fit does (no forgetting, within `CHECK_VALUES`, some
    // output's rows grown enough or an untrained output's within reach): the queue with its
    // rows as far as the budget reaches, the rest left to the next fold ([`starting_within`]);
    // the rows of the batches the state holds only as far as the budget reaches (past a
    // restore, not those folded after the version it restored: `ModelLock::kept_rows`).
    let (queued, kept) = match current.as_deref() {
        Some(state)
            if grids.is_none()
                && may_read_rows(
                    &config,
                    state,
                    queued.iter().map(|b| f64::from(b.rows)).sum(),
                ) =>
        {
            // Read again with the rows: the first read's blobs are not held beside them.
            drop(queued);
            let budget = max_check_rows(&config) as i64;
            let left = rows_left(&config, state.totals().rows());
            (
                starting_within(lock.queued_for_fold(read(left, 0)).await?, left),
                Some(lock.kept_rows(budget).await?),
            )
        }
        _ => (queued, None),
    };
    let first_fit_rows = lock.spec.first_fit_rows as f64;
    let hold_above = lock.spec.drift_threshold;
    // A narrow model's step is a fraction of a millisecond: run here, it saves the hop to a
    // blocking thread, which on a busy machine waits for a core (its refits, as rows outgrow a
    // fit, come a logarithm of the rows apart). First fits iterate, and wide or successor
    // models' steps are dense factorisations: those go to the blocking pool, as does a fold that
    // may check a refit on every row.
    let inline = current.is_some()
        && grids.is_none()
        && config.basis.dim() < PARALLEL_FROM
        && kept.is_none();
    let (plan, queued) = {
        let current = current.clone();
        let config = config.clone();
        let earlier = lock.spec.earlier.clone();
        let serving = serving.clone();
        let work = move || {
            let successor = grids.map(|(grid, old_grid)| Successor {
                grid,
                old_grid,
                start: serving.as_ref().map(|s| &s.succession),
            });
            let pending: Vec<Pending<'_>> = queued
                .iter()
                .map(|b| Pending {
                    seq: b.seq,
                    source: Source::of(b),
                    released: b.released,
                    rows: RawRows::of(b),
                })
                .collect();
            let kept: Option<Vec<RawRows<'_>>> = kept
                .as_ref()
                .map(|kept| kept.iter().filter_map(RawRows::of_kept).collect());
            let plan = plan_fold(
                &config,
                &earlier,
                current.as_deref(),
                &pending,
                first_fit_rows,
                hold_above,
                successor,
                kept.as_deref(),
            );
            (plan, queued)
        };
        compute(inline, "fold", work).await?
    };
    let model_id = lock.model_id;
    for (seq, reason) in &plan.rejected {
        let batch = queued
            .iter()
            .find(|b| b.seq == *seq)
            .map(|b| b.batch_id.as_str());
        tracing::warn!(model = %lock.name, batch_id = batch, reason, "batch rejected");
        lock.mark_rejected(*seq, reason).await?;
    }
    let mut surprises = Vec::with_capacity(plan.surprise.len());
    for (seq, z) in &plan.surprise {
        let hold = plan.held.contains(seq);
        if hold {
            let batch = queued
                .iter()
                .find(|b| b.seq == *seq)
                .map(|b| b.batch_id.as_str());
            tracing::warn!(
                model = %lock.name,
                batch_id = batch,
                surprise = drift::largest(z),
                "batch held for review: it is far more surprising than the model's threshold"
            );
        }
        surprises.push(BatchSurprise {
            seq: *seq,
            surprise: z,
            hold,
        });
    }
    lock.record_surprises(&surprises).await?;
    let name = lock.name.clone();
    let version = match plan.state {
        Some(state) => {
            let state = Arc::new(state);
            let predictor = match plan.predictor {
                Some(predictor) => history::PredictorTask::ready(predictor),
                None => history::PredictorTask::with_fitted_shapes(&state, plan.shapes),
            };
            // A new succession, or the one the model had.
            let successor = plan
                .succession
                .map(|s| Arc::new(Serving::new(s)))
                .or(serving);
            let blob = {
                let (state, successor) = (state.clone(), successor.clone());
                let encode = move || {
                    let succession = successor.as_ref().map(|s| &s.succession);
                    StateBlob::new(encode_version(&state, succession))
                };
                compute(inline, "encoder", encode).await?
            };
            let next = history::NextVersion {
                origin: VersionOrigin::Fold,
                restored_from: None,
                state,
                predictor,
                successor,
                blob: &blob,
                folds: &plan.folded,
                replayable: !plan.moved_by_rows,
            };
            Some(history::commit_version(lock, cache, next).await?)
        }
        None => {
            lock.commit().await?;
            None
        }
    };
    // Both times are the database's clock.
    let committed = version.map_or_else(chrono::Utc::now, |(_, at)| at);
    let version = version.map(|(v, _)| v);
    let lags: Vec<f64> = queued
        .iter()
        .filter(|b| plan.folded.contains(&b.seq))
        .map(|b| (committed - b.received_at).as_seconds_f64())
        .collect();
    // A released batch was counted when it was held: each batch once.
    let released = |seq: &i64| queued.iter().any(|b| b.seq == *seq && b.released);
    for (_, z) in plan.surprise.iter().filter(|(seq, _)| !released(seq)) {
        metrics.batch_surprise(&name, z);
    }
    metrics.batches_held(&name, plan.held.len());
    metrics.fold(
        &name,
        plan.folded.len(),
        plan.rejected.len(),
        rows_of(&queued, &plan.folded).max(0) as u64,
        started.elapsed().as_secs_f64(),
        &lags,
    );
    if let Some(v) = version {
        tracing::info!(
            model = %name,
            version = v,
            batches = plan.folded.len(),
            rows = rows_of(&queued, &plan.folded),
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "folded"
        );
    }
    Ok(FoldReport {
        model_id,
        version,
        folded: plan.folded.len(),
        rejected: plan.rejected.len(),
    })
}

/// `work` on the calling task where `inline` (work shorter than a hop to another thread), else
/// on the blocking pool; `what` names it should that thread fail.
async fn compute<T: Send + 'static>(
    inline: bool,
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    if inline {
        return Ok(work());
    }
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Corrupt(format!("{what} task failed: {e}")))
}

fn rows_of(queued: &[QueuedBatch], seqs: &[i64]) -> i64 {
    queued
        .iter()
        .filter(|b| seqs.contains(&b.seq))
        .map(|b| i64::from(b.rows))
        .sum()
}

/// A trained model's current state, with its successor instrument's where it has one.
#[derive(Clone, Debug)]
pub(crate) struct Current {
    pub state: Arc<ModelState>,
    pub successor: Option<Arc<Serving>>,
}

/// The model's current state: from the cache when it holds that version, else read from the
/// database.
pub(crate) async fn current_state(
    lock: &mut ModelLock,
    cache: &PosteriorCache,
) -> Result<Option<Current>, StoreError> {
    if lock.version == 0 {
        return Ok(None);
    }
    if let Some(cached) = cache.get(&lock.name)
        && cached.id == lock.model_id
        && cached.version == lock.version
        && let Some(state) = &cached.state
    {
        return Ok(Some(Current {
            state: state.clone(),
            successor: cached.successor.clone(),
        }));
    }
    let version = lock.version;
    let read = history::version_state(lock, version)
        .await?
        .ok_or_else(|| {
            StoreError::Corrupt(format!("model {} has no version {version}", lock.name))
        })?;
    Ok(Some(Current {
        state: Arc::new(read.model),
        successor: read.succession.map(|s| Arc::new(Serving::new(s))),
    }))
}

/// How long a model whose fold failed for a reason other than the database being unreachable
/// (a corrupt stored state, say) is set aside, so that it does not hold up every other model.
const SET_ASIDE: Duration = Duration::from_secs(60);

/// Runs the folder until `shutdown`: drains the queue, then waits for a batch notification (or
/// the poll interval, or a hint that notifications were missed). A fold in progress when
/// shutdown is requested finishes, unless the service abandons it after
/// `folder.shutdown_grace_secs` (see `Application::run_until_stopped`).
pub async fn run(
    store: Store,
    cache: Arc<PosteriorCache>,
    metrics: Arc<Metrics>,
    notifications: Arc<Notifications>,
    settings: FolderSettings,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    let mut set_aside: HashMap<i64, Instant> = HashMap::new();
    // Subscribed before the first drain, so nothing queued meanwhile is missed.
    let mut listener = notifications.subscribe(&[Topic::Batches]);
    let mut ticks = tokio::time::interval(settings.poll_interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Drain the work there is.
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            set_aside.retain(|_, until| *until > Instant::now());
            let skip: Vec<i64> = set_aside.keys().copied().collect();
            match fold_once(&store, &cache, &metrics, &skip, settings.max_fold_bytes).await {
                Ok(Some(_)) => backoff = Duration::from_millis(100),
                Ok(None) => {
                    backoff = Duration::from_millis(100);
                    break;
                }
                Err(FoldError {
                    error: e @ StoreError::Unavailable(_),
                    ..
                }) => {
                    tracing::warn!(error = %e, "folder: database unavailable");
                    // The process's listener probes the database and says when it is back
                    // (notifications may have been missed); meanwhile try again now and then.
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = listener.recv() => {}
                        _ = tokio::time::sleep(settings.max_backoff()) => {}
                    }
                }
                Err(FoldError { model_id, error }) => {
                    tracing::error!(error = %error, model_id, "folder: fold failed, model set aside");
                    match model_id {
                        Some(id) => {
                            set_aside.insert(id, Instant::now() + SET_ASIDE);
                        }
                        None => {
                            if sleep_or_stop(&shutdown, &mut backoff, settings.max_backoff()).await
                            {
                                return;
                            }
                            break;
                        }
                    }
                }
            }
        }
        // Any notification, or word that some were missed, means: drain again.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
            _ = listener.recv() => {}
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::ModelSpec;
    use crate::estimator::mixture::AlternateShapes;
    use crate::estimator::{Predictor, codec};
    use faer::Mat;

    pub(crate) fn le_bytes(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Deterministic draws in [0, 1) from `seed` (a 64-bit linear congruential generator).
    pub(crate) fn uniform(mut seed: u64) -> impl FnMut() -> f64 {
        move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A model of 24 features and 2 outputs, first fit on 30 rows.
    pub(crate) fn wide_spec() -> ModelSpec {
        let features: Vec<String> = (0..24).map(|i| format!("f{i}")).collect();
        ModelSpec::parse(&serde_json::json!({
            "name": "wide", "features": features, "outputs": ["a", "b"], "first_fit_rows": 30
        }))
        .expect("spec")
    }

    /// A batch's rows: `(rows, x, y)`, `x` and `y` row-major.
    pub(crate) type RowBatch = (usize, Vec<f64>, Vec<f64>);

    /// Deterministic batches of `sizes` rows for [`wide_spec`].
    pub(crate) fn wide_batches(sizes: &[usize]) -> Vec<RowBatch> {
        let mut next = uniform(7);
        sizes
            .iter()
            .map(|&n| {
                let x: Vec<f64> = (0..n * 24).map(|_| next()).collect();
                let y: Vec<f64> = (0..n)
                    .flat_map(|i| {
                        let s: f64 = x[i * 24..(i + 1) * 24].iter().sum();
                        [s + 0.01 * next(), 2.0 * x[i * 24] - 0.01 * next()]
                    })
                    .collect();
                (n, x, y)
            })
            .collect()
    }

    /// A declared 31-band spectrum (default prior) and batches of `sizes` rows: smooth bumps on a
    /// baseline, and an output that is a smooth curve's product with them.
    fn spectral_rows(sizes: &[usize]) -> (ModelConfig, Vec<RowBatch>) {
        let spec = ModelSpec::parse(&serde_json::json!({
            "name": "bands",
            "spectrum": {"start_nm": 400, "interval_nm": 10, "count": 31, "scale": "fraction"},
            "outputs": ["a"],
        }))
        .expect("spec");
        let mut next = uniform(3);
        let batches = sizes
            .iter()
            .map(|&n| {
                let mut x = Vec::with_capacity(n * 31);
                let mut y = Vec::with_capacity(n);
                for _ in 0..n {
                    let (centre, width) = (31.0 * next(), 3.0 + 6.0 * next());
                    let row: Vec<f64> = (0..31)
                        .map(|j| {
                            let t = (j as f64 - centre) / width;
                            0.2 + 0.5 * (-t * t / 2.0).exp() + 0.05 * next()
                        })
                        .collect();
                    let signal: f64 = row
                        .iter()
                        .enumerate()
                        .map(|(j, r)| r * (j as f64 / 5.0).sin())
                        .sum();
                    y.push(1.0 + signal + 0.05 * (next() - 0.5));
                    x.extend(row);
                }
                (n, x, y)
            })
            .collect();
        (spec.config(), batches)
    }

    /// The statistics a batch of `rows` stores, encoded.
    fn encoded_statistics(config: &ModelConfig, (n, x, y): &RowBatch) -> Vec<u8> {
        let stats = BatchStatistics::from_row_major(&config.basis, *n, x, y).expect("statistics");
        codec::encode_statistics(&stats)
    }

    /// Each batch as a store keeps it: its encoded statistics and its raw rows' bytes.
    fn stored_forms(
        config: &ModelConfig,
        batches: &[RowBatch],
    ) -> Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> {
        batches
            .iter()
            .map(|batch| {
                let (_, x, y) = batch;
                (encoded_statistics(config, batch), le_bytes(x), le_bytes(y))
            })
            .collect()
    }

    /// [`spectral_rows`]' batches as the statistics a batch stores.
    fn spectral_plan_inputs(sizes: &[usize]) -> (ModelConfig, Vec<Vec<u8>>) {
        let (config, batches) = spectral_rows(sizes);
        let encoded = batches
            .iter()
            .map(|batch| encoded_statistics(&config, batch))
            .collect();
        (config, encoded)
    }

    /// A batch is handed the rows behind it only where it may fit some output: a trained
    /// output's rows grown by a quarter, an untrained output within reach of its first fit's
    /// rows, or every batch under refit updates.
    #[test]
    fn a_batch_reads_the_rows_only_where_it_may_fit_an_output() {
        let mut config = wide_spec().config();
        let (n, x, mut y) = wide_batches(&[40]).remove(0);
        let fit = |config: &ModelConfig, y: &[f64]| {
            let stats = BatchStatistics::from_row_major(&config.basis, n, &x, y).expect("stats");
            ModelState::fit(config, stats).expect("fit")
        };
        let state = fit(&config, &y);
        // 40 rows fitted: 9 more are under a quarter, 10 reach it.
        assert!(!may_refit_on_rows(&config, &state, 9.0));
        assert!(may_refit_on_rows(&config, &state, 10.0));
        // Output b never used: untrained, within reach of its first fit's rows from 2 more on.
        y.iter_mut().skip(1).step_by(2).for_each(|v| *v = 0.0);
        let untrained = fit(&config, &y);
        assert!(untrained.outputs()[1].posterior().is_none());
        assert!(!may_refit_on_rows(&config, &untrained, 1.0));
        assert!(may_refit_on_rows(&config, &untrained, 2.0));
        config.update = UpdateMethod::Refit;
        assert!(may_refit_on_rows(&config, &state, 1.0));
    }

    /// A fold's plan hands on the prior shapes of the fit that made its state (a first fit, or an
    /// update whose output outgrew its fit), and the version's predictor takes them: it forms
    /// none and answers as one that formed its own. A plan whose last batch took one step has
    /// none to hand on.
    #[test]
    fn a_plan_hands_on_the_shapes_its_last_fit_formed() {
        let (config, encoded) = spectral_plan_inputs(&[16, 2, 16]);
        let pending: Vec<Pending<'_>> = encoded
            .iter()
            .enumerate()
            .map(|(i, stats)| Pending {
                seq: i as i64,
                source: Source::Statistics(stats),
                released: false,
                rows: None,
            })
            .collect();
        let plan = |current: Option<&ModelState>, batches: &[Pending<'_>]| {
            plan_fold(&config, &[], current, batches, 16.0, None, None, None)
        };
        let first = plan(None, &pending[..1]);
        assert_eq!(first.folded, vec![0]);
        let state = first.state.expect("a state");
        assert!(!state.alternates(0).is_empty());
        assert!(!first.shapes.is_empty());
        assert_eq!(
            AlternateShapes::with_fitted(&state, first.shapes)
                .expect("shapes")
                .formed(),
            0
        );
        let x = Mat::from_fn(3, 31, |i, j| 0.3 + 0.2 * ((i * 31 + j) as f64 * 0.37).sin());
        let expected = Predictor::new(&state).predict(x.as_ref()).expect("predict");
        let got = Predictor::with_fitted_shapes(&state, plan(None, &pending[..1]).shapes)
            .predict(x.as_ref())
            .expect("predict");
        assert_eq!(got.mean, expected.mean);
        assert_eq!(got.variance, expected.variance);

        // Two rows take one step; sixteen more grow the rows by more than a quarter and refit the
        // output.
        let stepped = plan(Some(&state), &pending[1..2]);
        assert_eq!(stepped.folded, vec![1]);
        assert!(stepped.shapes.is_empty());
        let stepped = stepped.state.expect("a state");
        let refitted = plan(Some(&stepped), &pending[2..]);
        assert_eq!(refitted.folded, vec![2]);
        assert!(!refitted.shapes.is_empty());
        let all = plan(None, &pending);
        assert_eq!(all.folded, vec![0, 1, 2]);
        let (state, shapes) = (all.state.expect("a state"), all.shapes);
        assert_eq!(
            AlternateShapes::with_fitted(&state, shapes)
                .expect("shapes")
                .formed(),
            0
        );
    }

    /// A successor batch whose old-instrument readings refit the output hands on that refit's
    /// shapes; one the old instrument did not read leaves the model's state, and the plan's
    /// shapes, as they were.
    #[test]
    fn a_successor_batch_hands_on_its_refits_shapes_and_one_without_old_readings_keeps_them() {
        let (config, batches) = spectral_rows(&[16, 16]);
        let first = encoded_statistics(&config, &batches[0]);
        let (n, x, y) = &batches[1];
        let successor_batch = |old: bool| {
            SuccessorBatch {
                rows: *n,
                new: x.clone(),
                features: Vec::new(),
                old: old.then(|| x.clone()),
                outputs: y.clone(),
            }
            .encode()
        };
        let successor = Successor {
            grid: Grid::new(405.0, 10.0, 31).expect("grid"),
            old_grid: Grid::new(400.0, 10.0, 31).expect("grid"),
            start: None,
        };
        for old in [true, false] {
            let blob = successor_batch(old);
            let pending = [
                Pending {
                    seq: 0,
                    source: Source::Statistics(&first),
                    released: false,
                    rows: None,
                },
                Pending {
                    seq: 1,
                    source: Source::Successor(&blob),
                    released: false,
                    rows: None,
                },
            ];
            let plan = plan_fold(
                &config,
                &[],
                None,
                &pending,
                16.0,
                None,
                Some(successor),
                None,
            );
            assert_eq!(plan.folded, vec![0, 1], "old readings: {old}");
            assert!(plan.succession.is_some());
            let state = plan.state.expect("a state");
            assert_eq!(state.totals().rows(), if old { 32.0 } else { 16.0 });
            assert!(!state.alternates(0).is_empty(), "old readings: {old}");
            assert!(!plan.shapes.is_empty(), "old readings: {old}");
            assert_eq!(
                AlternateShapes::with_fitted(&state, plan.shapes)
                    .expect("shapes")
                    .formed(),
                0,
                "old readings: {old}"
            );
        }
    }

    /// A first fit that reads its rows forms its version's predictor in the plan (to read the
    /// tail) and hands it on: it answers as one formed afresh from the state, bit for bit, tail
    /// included. A later batch of the same plan, which changes the state, drops it.
    #[test]
    fn a_first_fit_on_rows_hands_on_its_predictor_until_a_later_batch_changes_the_state() {
        let config = wide_spec().config();
        let sizes = [200usize, 3];
        let mut batches = wide_batches(&sizes);
        // Heavy-tailed errors on the first batch (a t with 4 degrees of freedom), so that its
        // rows set a tail that the handed-on predictor must carry.
        for (i, y) in batches[0].2.iter_mut().enumerate() {
            let p = ((i as f64 + 0.5) * 0.618_033_988_749_895).fract();
            let alpha = 4.0 * p * (1.0 - p);
            let q = (alpha.sqrt().acos() / 3.0).cos() / alpha.sqrt();
            *y += 0.3 * (p - 0.5).signum() * 2.0 * (q - 1.0).sqrt();
        }
        let encoded = stored_forms(&config, &batches);
        let pending: Vec<Pending<'_>> = encoded
            .iter()
            .zip(&sizes)
            .enumerate()
            .map(|(i, ((stats, x, y), &rows))| Pending {
                seq: i as i64,
                source: Source::Statistics(stats),
                released: false,
                rows: Some(RawRows { rows, x, y }),
            })
            .collect();
        let first = plan_fold(&config, &[], None, &pending[..1], 30.0, None, None, None);
        assert_eq!(first.folded, vec![0]);
        let state = first.state.expect("a state");
        assert!(state.tail().is_some(), "the first batch's rows set no tail");
        let handed = first.predictor.expect("the first fit's predictor");
        let fresh = Predictor::new(&state);
        let (_, x, _) = &batches[1];
        let probe = Rows::from_row_major(sizes[1], 24, x.clone());
        let (a, b) = (
            handed.predict(probe.as_mat()).expect("predict"),
            fresh.predict(probe.as_mat()).expect("predict"),
        );
        assert_eq!((a.mean, a.variance), (b.mean, b.variance));
        for k in 0..config.outputs {
            assert_eq!(handed.degrees_of_freedom(k, 1.0), state.tail());
            assert_eq!(fresh.degrees_of_freedom(k, 1.0), state.tail());
        }
        let both = plan_fold(&config, &[], None, &pending, 30.0, None, None, None);
        assert_eq!(both.folded, vec![0, 1]);
        assert!(both.predictor.is_none());
        assert!(both.state.is_some());
    }

    /// A batch stored as rows folds to the very bits it folds to stored as statistics.
    #[test]
    fn batches_stored_as_rows_fold_to_the_bits_of_their_statistics() {
        let config = wide_spec().config();
        // A first batch of 30, then batches of 1 to 5 rows.
        let sizes = [30usize, 1, 3, 5, 2, 1, 4];
        let batches = wide_batches(&sizes);
        let encoded = stored_forms(&config, &batches);
        let as_statistics: Vec<Pending<'_>> = encoded
            .iter()
            .enumerate()
            .map(|(i, (stats, _, _))| Pending {
                seq: i as i64,
                source: Source::Statistics(stats),
                released: false,
                rows: None,
            })
            .collect();
        let as_rows: Vec<Pending<'_>> = encoded
            .iter()
            .zip(&sizes)
            .enumerate()
            .map(|(i, ((_, x, y), &rows))| Pending {
                seq: i as i64,
                source: Source::Rows(RawRows { rows, x, y }),
                released: false,
                rows: None,
            })
            .collect();
        let one = plan_fold(&config, &[], None, &as_statistics, 30.0, None, None, None);
        let other = plan_fold(&config, &[], None, &as_rows, 30.0, None, None, None);
        assert_eq!(one.folded.len(), sizes.len());
        assert_eq!(one.folded, other.folded);
        let (one, other) = (one.state.expect("a state"), other.state.expect("a state"));
        assert_eq!(codec::encode(&one), codec::encode(&other));

        // Rows that do not make whole rows of the model's width are rejected, not folded.
        let (_, x, y) = &encoded[1];
        let bad = [Pending {
            seq: 9,
            source: Source::Rows(RawRows {
                rows: 1,
                x: &x[..x.len() - 8],
                y,
            }),
            released: false,
            rows: None,
        }];
        let plan = plan_fold(&config, &[], Some(&one), &bad, 30.0, None, None, None);
        assert_eq!(plan.rejected.len(), 1, "{:?}", plan.rejected);
        assert!(
            plan.rejected[0].1.contains("stored rows"),
            "{:?}",
            plan.rejected
        );
    }
}
