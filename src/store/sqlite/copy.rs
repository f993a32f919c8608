//! A copy's reads and writes on the embedded store (see [`crate::store::copy`]).

use async_trait::async_trait;
use sqlx::{Sqlite, Transaction};

use super::SqliteStore;
use crate::store::dump::{Loader, ModelDump, bind_batch, bind_key, bind_version, not_empty};
use crate::store::sql::{self, batch_dump_columns, key_columns};
use crate::store::{KeyRecord, StoreError};

const BATCH_DUMPS: &str = concat!(
    "SELECT ",
    batch_dump_columns!(),
    " FROM batches WHERE model_id = $1 ORDER BY seq"
);
const INSERT_BATCH_DUMP: &str = concat!(
    "INSERT INTO batches (model_id, ",
    batch_dump_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
);
/// A key with its id.
const INSERT_KEY: &str = concat!(
    "INSERT INTO api_keys (",
    key_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7)"
);

pub(super) async fn dump_model(
    store: &SqliteStore,
    id: i64,
) -> Result<Option<ModelDump>, StoreError> {
    // One read transaction: one snapshot of the file.
    let mut tx = store.inner.readers.begin().await?;
    let Some(mut model) = sqlx::query_as::<_, ModelDump>(
        "SELECT name, spec, first_fit_rows, version, observations, created_at, updated_at \
         FROM models WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    model.batches = sqlx::query_as(BATCH_DUMPS)
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
    model.versions = sqlx::query_as(sql::VERSION_DUMPS)
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Some(model))
}

pub(super) async fn begin_load(store: &SqliteStore) -> Result<Box<dyn Loader>, StoreError> {
    // The one write transaction: nothing else writes the file until the copy commits.
    let mut tx = store.write().await?;
    let (models, keys): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM models), (SELECT count(*) FROM api_keys)")
            .fetch_one(&mut *tx)
            .await?;
    if models + keys > 0 {
        return Err(not_empty(models, keys));
    }
    Ok(Box::new(SqliteLoader { tx }))
}

struct SqliteLoader {
    tx: Transaction<'static, Sqlite>,
}

#[async_trait]
impl Loader for SqliteLoader {
    async fn model(&mut self, m: &ModelDump) -> Result<(), StoreError> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO models (name, spec, first_fit_rows, version, observations, created_at, \
                                 updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
        )
        .bind(&m.name)
        .bind(&m.spec)
        .bind(m.first_fit_rows)
        .bind(m.version)
        .bind(m.observations)
        .bind(m.created_at)
        .bind(m.updated_at)
        .fetch_one(&mut *self.tx)
        .await?;
        for b in &m.batches {
            bind_batch!(sqlx::query(INSERT_BATCH_DUMP), id, b)
                .execute(&mut *self.tx)
                .await?;
        }
        for v in &m.versions {
            bind_version!(sqlx::query(sql::INSERT_VERSION_DUMP), id, v)
                .execute(&mut *self.tx)
                .await?;
        }
        Ok(())
    }

    async fn keys(&mut self, keys: &[KeyRecord]) -> Result<(), StoreError> {
        for k in keys {
            bind_key!(sqlx::query(INSERT_KEY), k)
                .execute(&mut *self.tx)
                .await?;
        }
        Ok(())
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }
}
