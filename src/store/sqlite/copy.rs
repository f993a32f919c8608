//! A copy's reads and writes on the embedded store (see [`crate::store::copy`]).

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::dump::{Loader, ModelDump, Statements, TransactionLoader, not_empty, read_model};
use crate::store::sql::{self, batch_dump_columns, key_columns};

static STATEMENTS: Statements = Statements {
    model: "SELECT name, spec, first_fit_rows, version, observations, created_at, updated_at \
            FROM models WHERE id = $1",
    batches: concat!(
        "SELECT ",
        batch_dump_columns!(),
        " FROM batches WHERE model_id = $1 ORDER BY seq"
    ),
    insert_model: "INSERT INTO models (name, spec, first_fit_rows, version, observations, \
                   created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    insert_batch: concat!(
        "INSERT INTO batches (model_id, ",
        batch_dump_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
    ),
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
