//! SQL the two dialects agree on, written once. The statements here number their parameters
//! `$1`, `$2`, … for both (sqlx's SQLite driver binds `$N` by its number, as it does `?N`);
//! each record is read by its `sqlx::FromRow` mapping from the columns named here.

/// A model with its queue length, held batches and current version's time, as
/// [`super::ModelRecord`] reads it (`m` is `models`).
macro_rules! model_columns {
    () => {
        "m.id, m.spec, m.version, m.observations, m.created_at, m.updated_at, \
         (SELECT count(*) FROM batches b WHERE b.model_id = m.id AND b.status = 'queued') \
         AS pending, \
         (SELECT coalesce(sum(b.rows), 0) FROM batches b WHERE b.model_id = m.id \
          AND b.status = 'queued') AS pending_rows, \
         (SELECT count(*) FROM batches b WHERE b.model_id = m.id AND b.status = 'held') \
         AS held, \
         (SELECT v.created_at FROM versions v WHERE v.model_id = m.id \
          AND v.version = m.version) AS version_created_at"
    };
}

/// A batch's status, as [`super::BatchRecord`] reads it.
macro_rules! batch_columns {
    () => {
        "batch_id, status, rows, received_at, folded_at, version, error, surprise, rows_purged_at"
    };
}

/// An API key, as [`super::KeyRecord`] reads it.
macro_rules! key_columns {
    () => {
        "id, name, prefix, hash, scopes, created_at, revoked_at"
    };
}

/// A batch, all of it, as a copy moves it (`dump::TransactionLoader` binds them in this order).
macro_rules! batch_dump_columns {
    () => {
        "batch_id, content_hash, rows, x, y, statistics, status, received_at, folded_at, \
         version, error, surprise, released, rows_purged_at"
    };
}

/// A version, all of it, as a copy moves it (`dump::TransactionLoader` binds them in this order).
macro_rules! version_dump_columns {
    () => {
        "version, created_at, origin, restored_from, observations, noise_variances, state, \
         state_digest"
    };
}

pub(crate) use {batch_dump_columns, key_columns};

pub(super) const BATCH_COLUMNS: &str = batch_columns!();
pub(super) const KEY_COLUMNS: &str = key_columns!();

pub(super) const MODELS: &str = concat!(
    "SELECT ",
    model_columns!(),
    " FROM models m ORDER BY m.name"
);
pub(super) const MODEL_BY_NAME: &str = concat!(
    "SELECT ",
    model_columns!(),
    " FROM models m WHERE m.name = $1"
);
pub(super) const MODEL_BY_ID: &str = concat!(
    "SELECT ",
    model_columns!(),
    " FROM models m WHERE m.id = $1"
);

pub(super) const BATCH: &str = concat!(
    "SELECT ",
    batch_columns!(),
    " FROM batches WHERE model_id = $1 AND batch_id = $2"
);
/// The batch under an id with its content hash, to tell a replay from a conflict.
pub(super) const STORED_BATCH: &str = concat!(
    "SELECT content_hash, ",
    batch_columns!(),
    " FROM batches WHERE model_id = $1 AND batch_id = $2"
);
/// A model's batches, newest first, of one status or any (`$2` NULL), at most `$3`.
pub(super) const BATCHES: &str = concat!(
    "SELECT ",
    batch_columns!(),
    " FROM batches WHERE model_id = $1 AND ($2 IS NULL OR status = $2) \
     ORDER BY seq DESC LIMIT $3"
);

pub(super) const KEYS: &str = concat!("SELECT ", key_columns!(), " FROM api_keys ORDER BY id");
pub(super) const ACTIVE_KEYS: &str = concat!(
    "SELECT ",
    key_columns!(),
    " FROM api_keys WHERE revoked_at IS NULL"
);
pub(super) const NEWEST_KEY: &str = "SELECT coalesce(max(id), 0) FROM api_keys";

/// What a fold reads of a batch: its statistics, or its rows when it was stored without them
/// (`length` of a `bytea` or a `BLOB` counts bytes).
pub(super) const BATCH_SOURCE: &str = "seq, batch_id, rows, statistics, received_at, released, \
     CASE WHEN length(statistics) = 0 THEN x END AS rows_x, \
     CASE WHEN length(statistics) = 0 THEN y END AS rows_y";
/// A batch's raw rows on SQLite, right after the batch (`last_insert_rowid()` is its `seq`).
pub(super) const SQLITE_INSERT_ROWS: &str =
    "INSERT INTO batch_rows (seq, x, y) VALUES (last_insert_rowid(), $1, $2)";
/// The queued batches a fold reads, in arrival order ([`QueueRead`](super::QueueRead)): each
/// batch's `seq`, and whether it comes with its raw rows (it follows fewer than `$2` queued rows);
/// every batch that follows fewer than `$3` rows, then each that follows fewer than `$4` bytes
/// (its statistics, or `$5` a row where it was stored without them). The running sums read no
/// blob, only lengths; [`QUEUED_BY_SEQ`] then reads the batches by their keys (a join on `seq`
/// here could be planned as a scan of every model's batches where the statistics are stale).
pub(super) const QUEUED: &str = "SELECT seq, before < $2 AS with_rows \
     FROM (SELECT seq, arrival, coalesce(sum(rows) OVER earlier, 0) AS before, \
     coalesce(sum(CASE WHEN length(statistics) = 0 THEN rows * $5 \
     ELSE length(statistics) END) OVER earlier, 0) AS bytes_before \
     FROM batches WHERE model_id = $1 AND status = 'queued' \
     WINDOW earlier AS (ORDER BY arrival ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) q \
     WHERE before < $3 OR bytes_before < $4 ORDER BY arrival";
/// [`BATCH_SOURCE`] of the batches `$1` in arrival order, with the raw rows (stored with
/// statistics or not, NULL where they are no longer kept) of those in `$2`.
pub(super) const QUEUED_BY_SEQ: &str = "SELECT seq, batch_id, rows, statistics, received_at, \
     released, \
     CASE WHEN length(statistics) = 0 OR seq = ANY($2) THEN x END AS rows_x, \
     CASE WHEN length(statistics) = 0 OR seq = ANY($2) THEN y END AS rows_y \
     FROM batches WHERE seq = ANY($1) ORDER BY arrival";
/// [`QUEUED`] and [`QUEUED_BY_SEQ`] in one statement on SQLite, which keeps the raw rows in
/// `batch_rows` and the queue in `seq` order (its join on `seq`, the rowid, is a lookup by key).
pub(super) const SQLITE_QUEUED: &str = "SELECT b.seq, b.batch_id, b.rows, b.statistics, \
     b.received_at, b.released, \
     CASE WHEN length(b.statistics) = 0 OR q.before < ?2 \
     THEN (SELECT r.x FROM batch_rows r WHERE r.seq = b.seq) END AS rows_x, \
     CASE WHEN length(b.statistics) = 0 OR q.before < ?2 \
     THEN (SELECT r.y FROM batch_rows r WHERE r.seq = b.seq) END AS rows_y \
     FROM (SELECT seq, coalesce(sum(rows) OVER earlier, 0) AS before, \
     coalesce(sum(CASE WHEN length(statistics) = 0 THEN rows * ?5 \
     ELSE length(statistics) END) OVER earlier, 0) AS bytes_before \
     FROM batches WHERE model_id = ?1 AND status = 'queued' \
     WINDOW earlier AS (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) q \
     JOIN batches b ON b.seq = q.seq \
     WHERE q.before < ?3 OR q.bytes_before < ?4 ORDER BY q.seq";
/// [`BATCH_SOURCE`] on SQLite, which keeps the raw rows in `batch_rows`.
pub(super) const SQLITE_BATCH_SOURCE: &str = "seq, batch_id, rows, statistics, received_at, \
     released, \
     CASE WHEN length(statistics) = 0 THEN (SELECT r.x FROM batch_rows r WHERE r.seq = batches.seq) \
     END AS rows_x, \
     CASE WHEN length(statistics) = 0 THEN (SELECT r.y FROM batch_rows r WHERE r.seq = batches.seq) \
     END AS rows_y";
/// The versions whose folds a version's state holds, as `chain(at)`: walking back from the
/// version (the placeholder `$version`), each was made from the one before it, but a restore,
/// which copies the version it names ([`crate::history::batches_learnt`]). A restore's own
/// number is in the chain too; it folded no batch.
macro_rules! chain_of_folds {
    ($model:literal, $version:literal) => {
        concat!(
            "WITH RECURSIVE chain(at) AS (SELECT CAST(",
            $version,
            " AS BIGINT) UNION ALL SELECT CASE WHEN v.origin = 'restore' AND v.restored_from < \
             v.version THEN v.restored_from ELSE v.version - 1 END FROM chain JOIN versions v \
             ON v.model_id = ",
            $model,
            " AND v.version = chain.at) "
        )
    };
}

/// The raw rows of every batch a model's version `$3` holds (past a restore, not the batches
/// folded after the version it restored), in the order they were folded, of each batch that
/// follows fewer than `$2` of those rows (NULL for the others).
pub(super) const KEPT_ROWS: &str = concat!(
    chain_of_folds!("$1", "$3"),
    "SELECT rows, \
     CASE WHEN before < $2 THEN x END AS rows_x, CASE WHEN before < $2 THEN y END AS rows_y \
     FROM (SELECT *, coalesce(sum(rows) OVER (ORDER BY version, COALESCE(arrival, seq), seq \
     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before \
     FROM batches WHERE model_id = $1 AND status = 'folded' \
     AND version IN (SELECT at FROM chain)) folded \
     ORDER BY version, COALESCE(arrival, seq), seq"
);
/// [`KEPT_ROWS`] on SQLite, which keeps the raw rows in `batch_rows`.
pub(super) const SQLITE_KEPT_ROWS: &str = concat!(
    chain_of_folds!("?1", "?3"),
    "SELECT rows, \
     CASE WHEN before < ?2 THEN (SELECT r.x FROM batch_rows r WHERE r.seq = folded.seq) END \
     AS rows_x, \
     CASE WHEN before < ?2 THEN (SELECT r.y FROM batch_rows r WHERE r.seq = folded.seq) END \
     AS rows_y \
     FROM (SELECT *, coalesce(sum(rows) OVER (ORDER BY version, seq \
     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before \
     FROM batches WHERE model_id = ?1 AND status = 'folded' \
     AND version IN (SELECT at FROM chain)) folded ORDER BY version, seq"
);
/// The models and keys a store holds, which a copy's target must not.
pub(super) const COUNTS: &str =
    "SELECT (SELECT count(*) FROM models), (SELECT count(*) FROM api_keys)";

pub(super) const HEADS: &str = "SELECT id, name, version FROM models";
/// A model's spec and current version, without its state.
pub(super) const MODEL_HEAD: &str = "SELECT spec, version FROM models WHERE id = $1";
/// A model's spec, current version and that version's state (NULL before the first fit).
pub(super) const CURRENT_STATE: &str = "SELECT m.spec, m.version, v.state FROM models m \
     LEFT JOIN versions v ON v.model_id = m.id AND v.version = m.version WHERE m.id = $1";
/// A version's state as stored, for [`super::StoredState`].
pub(super) const STORED_STATE: &str =
    "SELECT origin, state, state_digest FROM versions WHERE model_id = $1 AND version = $2";

/// A model's versions, oldest first, as a copy reads them.
pub(super) const VERSION_DUMPS: &str = concat!(
    "SELECT ",
    version_dump_columns!(),
    " FROM versions WHERE model_id = $1 ORDER BY version"
);
/// A version as a copy writes it.
pub(super) const INSERT_VERSION_DUMP: &str = concat!(
    "INSERT INTO versions (model_id, ",
    version_dump_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
);
