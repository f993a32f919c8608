//! A copy's reads and writes on PostgreSQL (see [`crate::store::copy`]).

use sqlx::PgPool;

use crate::store::StoreError;
use crate::store::dump::{Loader, ModelDump, Statements, TransactionLoader, not_empty, read_model};
use crate::store::sql::{self, batch_dump_columns, key_columns};

static STATEMENTS: Statements = Statements {
    model: "SELECT name, spec::text AS spec, first_fit_rows, version, observations, created_at, \
            updated_at FROM models WHERE id = $1",
    batches: concat!(
        "SELECT ",
        batch_dump_columns!(),
        " FROM batches WHERE model_id = $1 ORDER BY COALESCE(arrival, seq), seq"
    ),
    insert_model: "INSERT INTO models (name, spec, first_fit_rows, version, observations, \
                   created_at, updated_at) VALUES ($1, $2::jsonb, $3, $4, $5, $6, $7) RETURNING id",
    insert_batch: concat!(
        "INSERT INTO batches (model_id, ",
        batch_dump_columns!(),
        ", arrival) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
         nextval('batch_arrival'))"
    ),
    insert_rows: None,
    insert_key: concat!(
        "INSERT INTO api_keys (",
        key_columns!(),
        ") OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, $5, $6, $7)"
    ),
    // New keys continue after the copied ones.
    after_keys: Some(
        "SELECT setval(pg_get_serial_sequence('api_keys', 'id'), max(id)) FROM api_keys \
         HAVING count(*) > 0",
    ),
};

pub(super) async fn dump_model(pool: &PgPool, id: i64) -> Result<Option<ModelDump>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let model = read_model::<sqlx::Postgres>(&mut tx, &STATEMENTS, id).await?;
    tx.commit().await?;
    Ok(model)
}

pub(super) async fn begin_load(pool: &PgPool) -> Result<Box<dyn Loader>, StoreError> {
    let mut tx = pool.begin().await?;
    // Nothing else writes the target while the copy holds these.
    sqlx::query("LOCK TABLE models, api_keys IN EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    let (models, keys): (i64, i64) = sqlx::query_as(sql::COUNTS).fetch_one(&mut *tx).await?;
    if models + keys > 0 {
        return Err(not_empty(models, keys));
    }
    Ok(Box::new(TransactionLoader {
        tx,
        sql: &STATEMENTS,
    }))
}
