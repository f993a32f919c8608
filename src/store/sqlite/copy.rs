//! A copy's reads and writes on the embedded store (see [`crate::store::copy`]).

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::dump::{Loader, ModelDump, Statements, TransactionLoader, not_empty, read_model};
use crate::store::sql::{self, key_columns};

static STATEMENTS: Statements = Statements {
    model: "SELECT name, spec, first_fit_rows, version, observations, created_at, updated_at \
            FROM models WHERE id = $1",
    // The columns of `batch_dump_columns!`, the raw rows from their own table. A batch without
    // its row (never written so) reads as NULL rows, which fail to decode as corrupt data
    // instead of leaving the batch out of the copy.
    batches: "SELECT batch_id, content_hash, rows, r.x AS x, r.y AS y, statistics, status, \
              received_at, folded_at, version, error, surprise, released, rows_purged_at \
              FROM batches b LEFT JOIN batch_rows r ON r.seq = b.seq \
              WHERE model_id = $1 ORDER BY b.seq",
    insert_model: "INSERT INTO models (name, spec, first_fit_rows, version, observations, \
                   created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    // `$5` and `$6` are the raw rows, which go to `batch_rows` (`insert_rows`).
    insert_batch: "INSERT INTO batches (model_id, batch_id, content_hash, rows, statistics, \
                   status, received_at, folded_at, version, error, surprise, released, \
                   rows_purged_at) \
                   VALUES ($1, $2, $3, $4, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    insert_rows: Some(sql::SQLITE_INSERT_ROWS),
    insert_key: concat!(
        "INSERT INTO api_keys (",
        key_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7)"
    ),
    after_keys: None,
};

pub(super) async fn dump_model(
    store: &SqliteStore,
    id: i64,
) -> Result<Option<ModelDump>, StoreError> {
    // One read transaction: one snapshot of the file.
    let mut tx = store.inner.readers.begin().await?;
    let model = read_model::<sqlx::Sqlite>(&mut tx, &STATEMENTS, id).await?;
    tx.commit().await?;
    Ok(model)
}

pub(super) async fn begin_load(store: &SqliteStore) -> Result<Box<dyn Loader>, StoreError> {
    // The one write transaction: nothing else writes the file until the copy commits.
    let mut tx = store.write().await?;
    let (models, keys): (i64, i64) = sqlx::query_as(sql::COUNTS).fetch_one(&mut *tx).await?;
    if models + keys > 0 {
        return Err(not_empty(models, keys));
    }
    Ok(Box::new(TransactionLoader {
        tx,
        sql: &STATEMENTS,
    }))
}
