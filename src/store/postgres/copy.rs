//! A copy's reads and writes on PostgreSQL (see [`crate::store::copy`]).

use async_trait::async_trait;
use sqlx::{PgPool, Postgres, Transaction};

use crate::store::dump::{Loader, ModelDump, bind_batch, bind_key, bind_version, not_empty};
use crate::store::sql::{self, batch_dump_columns, key_columns};
use crate::store::{KeyRecord, StoreError};

const BATCH_DUMPS: &str = concat!(
    "SELECT ",
    batch_dump_columns!(),
    " FROM batches WHERE model_id = $1 ORDER BY COALESCE(arrival, seq), seq"
);
/// A batch in arrival order, after the batches already there.
const INSERT_BATCH_DUMP: &str = concat!(
    "INSERT INTO batches (model_id, ",
    batch_dump_columns!(),
    ", arrival) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
     nextval('batch_arrival'))"
);
/// A key with its id.
const INSERT_KEY: &str = concat!(
    "INSERT INTO api_keys (",
    key_columns!(),
    ") OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, $5, $6, $7)"
);

pub(super) async fn dump_model(pool: &PgPool, id: i64) -> Result<Option<ModelDump>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let Some(mut model) = sqlx::query_as::<_, ModelDump>(
        "SELECT name, spec::text AS spec, first_fit_rows, version, observations, created_at, \
                updated_at FROM models WHERE id = $1",
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

pub(super) async fn begin_load(pool: &PgPool) -> Result<Box<dyn Loader>, StoreError> {
    let mut tx = pool.begin().await?;
    // Nothing else writes the target while the copy holds these.
    sqlx::query("LOCK TABLE models, api_keys IN EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    let (models, keys): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM models), (SELECT count(*) FROM api_keys)")
            .fetch_one(&mut *tx)
            .await?;
    if models + keys > 0 {
        return Err(not_empty(models, keys));
    }
    Ok(Box::new(PgLoader { tx }))
}

struct PgLoader {
    tx: Transaction<'static, Postgres>,
}

#[async_trait]
impl Loader for PgLoader {
    async fn model(&mut self, m: &ModelDump) -> Result<(), StoreError> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO models (name, spec, first_fit_rows, version, observations, created_at, \
                                 updated_at) \
             VALUES ($1, $2::jsonb, $3, $4, $5, $6, $7) RETURNING id",
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
        // New keys continue after the copied ones.
        sqlx::query(
            "SELECT setval(pg_get_serial_sequence('api_keys', 'id'), max(id)) FROM api_keys \
             HAVING count(*) > 0",
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }
}
