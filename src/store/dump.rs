//! A store's content as a copy moves it (see [`super::copy`]): what each backend reads out and
//! writes in.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Transaction, Type,
};

use crate::domain::Scope;

use super::columns::List;
use super::{BatchStatus, KeyRecord, StoreError, VersionOrigin};

/// One model, all of it, as both backends read and write it.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ModelDump {
    pub name: String,
    /// The specification as JSON text.
    pub spec: String,
    pub first_fit_rows: i64,
    pub version: i64,
    pub observations: f64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// In arrival order.
    #[sqlx(skip)]
    pub batches: Vec<BatchDump>,
    /// Oldest first.
    #[sqlx(skip)]
    pub versions: Vec<VersionDump>,
}

/// A batch, read and written with the columns `sql::batch_dump_columns!` names.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct BatchDump {
    pub batch_id: String,
    pub content_hash: Vec<u8>,
    pub rows: i32,
    pub x: Vec<u8>,
    pub y: Vec<u8>,
    pub statistics: Vec<u8>,
    pub status: BatchStatus,
    pub received_at: DateTime<Utc>,
    pub folded_at: Option<DateTime<Utc>>,
    pub version: Option<i64>,
    pub error: Option<String>,
    #[sqlx(try_from = "List<Option<Vec<Option<f64>>>>")]
    pub surprise: Option<Vec<Option<f64>>>,
    pub released: bool,
    pub rows_purged_at: Option<DateTime<Utc>>,
}

/// A version, read and written with the columns `sql::version_dump_columns!` names.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct VersionDump {
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub origin: VersionOrigin,
    pub restored_from: Option<i64>,
    pub observations: f64,
    #[sqlx(try_from = "List<Vec<Option<f64>>>")]
    pub noise_variances: Vec<Option<f64>>,
    pub state: Vec<u8>,
    pub state_digest: Option<Vec<u8>>,
}

/// The transaction a copy writes the target in; dropping it rolls everything back.
#[async_trait]
pub trait Loader: Send {
    async fn model(&mut self, model: &ModelDump) -> Result<(), StoreError>;
    /// Keys with their ids.
    async fn keys(&mut self, keys: &[KeyRecord]) -> Result<(), StoreError>;
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

/// The refusal of a copy into a store that holds something.
pub(super) fn not_empty(models: i64, keys: i64) -> StoreError {
    StoreError::Conflict(format!(
        "the target store is not empty ({models} models, {keys} API keys): a copy goes into an \
         empty store only"
    ))
}

/// The SQL a copy reads and writes with, where the dialects differ.
pub(super) struct Statements {
    /// The model `$1`, its spec as JSON text.
    pub model: &'static str,
    /// The model `$1`'s batches, in arrival order.
    pub batches: &'static str,
    /// A model (`name, spec, first_fit_rows, version, observations, created_at, updated_at`),
    /// returning its id.
    pub insert_model: &'static str,
    /// A batch (`$1` the model's id, then the batch's columns as `sql::batch_dump_columns!`
    /// names them), after the batches already there.
    pub insert_batch: &'static str,
    /// Where the raw rows are kept apart from the batch (SQLite): their insert (`$1` x,
    /// `$2` y), run right after the batch's.
    pub insert_rows: Option<&'static str>,
    /// A key with its id (its columns as `sql::key_columns!` names them).
    pub insert_key: &'static str,
    /// Run once the keys are in (PostgreSQL moves its key id sequence past them).
    pub after_keys: Option<&'static str>,
}

/// Reads one model, all of it, in the read transaction `conn` is in.
pub(super) async fn read_model<DB>(
    conn: &mut DB::Connection,
    sql: &Statements,
    id: i64,
) -> Result<Option<ModelDump>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> ModelDump: FromRow<'r, DB::Row>,
    for<'r> BatchDump: FromRow<'r, DB::Row>,
    for<'r> VersionDump: FromRow<'r, DB::Row>,
{
    let Some(mut model) = sqlx::query_as::<DB, ModelDump>(sql.model)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    model.batches = sqlx::query_as(sql.batches)
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
    model.versions = sqlx::query_as(super::sql::VERSION_DUMPS)
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
    Ok(Some(model))
}

/// A copy's target: one transaction, and the dialect's statements.
pub(super) struct TransactionLoader<DB: Database> {
    pub tx: Transaction<'static, DB>,
    pub sql: &'static Statements,
}

#[async_trait]
impl<DB> Loader for TransactionLoader<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i32: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> f64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> &'q String: Encode<'q, DB> + Type<DB>,
    for<'q> &'q Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> &'q Vec<u8>: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'q> &'q Option<Vec<u8>>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<DateTime<Utc>>: Encode<'q, DB> + Type<DB>,
    for<'q> BatchStatus: Encode<'q, DB> + Type<DB>,
    for<'q> VersionOrigin: Encode<'q, DB> + Type<DB>,
    for<'q> List<&'q Option<Vec<Option<f64>>>>: Encode<'q, DB> + Type<DB>,
    for<'q> List<&'q Vec<Option<f64>>>: Encode<'q, DB> + Type<DB>,
    for<'q> List<&'q Vec<Scope>>: Encode<'q, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    async fn model(&mut self, m: &ModelDump) -> Result<(), StoreError> {
        let id: i64 = sqlx::query_scalar(self.sql.insert_model)
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
            sqlx::query(self.sql.insert_batch)
                .bind(id)
                .bind(&b.batch_id)
                .bind(&b.content_hash)
                .bind(b.rows)
                .bind(&b.x)
                .bind(&b.y)
                .bind(&b.statistics)
                .bind(b.status)
                .bind(b.received_at)
                .bind(b.folded_at)
                .bind(b.version)
                .bind(&b.error)
                .bind(List(&b.surprise))
                .bind(b.released)
                .bind(b.rows_purged_at)
                .execute(&mut *self.tx)
                .await?;
            if let Some(insert_rows) = self.sql.insert_rows {
                sqlx::query(insert_rows)
                    .bind(&b.x)
                    .bind(&b.y)
                    .execute(&mut *self.tx)
                    .await?;
            }
        }
        for v in &m.versions {
            sqlx::query(super::sql::INSERT_VERSION_DUMP)
                .bind(id)
                .bind(v.version)
                .bind(v.created_at)
                .bind(v.origin)
                .bind(v.restored_from)
                .bind(v.observations)
                .bind(List(&v.noise_variances))
                .bind(&v.state)
                .bind(&v.state_digest)
                .execute(&mut *self.tx)
                .await?;
        }
        Ok(())
    }

    async fn keys(&mut self, keys: &[KeyRecord]) -> Result<(), StoreError> {
        for k in keys {
            sqlx::query(self.sql.insert_key)
                .bind(k.id)
                .bind(&k.name)
                .bind(&k.prefix)
                .bind(&k.hash[..])
                .bind(List(&k.scopes))
                .bind(k.created_at)
                .bind(k.revoked_at)
                .execute(&mut *self.tx)
                .await?;
        }
        if let Some(after) = self.sql.after_keys {
            sqlx::query(after).execute(&mut *self.tx).await?;
        }
        Ok(())
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }
}
