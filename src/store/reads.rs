//! The reads both dialects answer with the same SQL (`super::sql`), written once over sqlx's
//! `Database`: each backend hands its pool of readers to [`Reads`].

use sqlx::types::Json;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::{
    BatchRecord, BatchStatus, Ingested, KeyRecord, ModelHead, ModelRecord, StoreError, StoredBatch,
    sql,
};
use crate::domain::{ContentHash, ModelName, ModelSpec};

/// A backend's pool of readers.
pub(super) struct Reads<'a, DB: Database>(pub &'a Pool<DB>);

impl<DB> Reads<'_, DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<BatchStatus>: Encode<'q, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB>,
    for<'r> Json<ModelSpec>: Decode<'r, DB> + Type<DB>,
    for<'r> Option<Vec<u8>>: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    for<'r> ModelRecord: FromRow<'r, DB::Row>,
    for<'r> BatchRecord: FromRow<'r, DB::Row>,
    for<'r> StoredBatch: FromRow<'r, DB::Row>,
    for<'r> KeyRecord: FromRow<'r, DB::Row>,
    for<'r> ModelHead: FromRow<'r, DB::Row>,
{
    pub(super) async fn models(&self) -> Result<Vec<ModelRecord>, StoreError> {
        Ok(sqlx::query_as(sql::MODELS).fetch_all(self.0).await?)
    }

    pub(super) async fn model(&self, name: &ModelName) -> Result<Option<ModelRecord>, StoreError> {
        Ok(sqlx::query_as(sql::MODEL_BY_NAME)
            .bind(name.as_str())
            .fetch_optional(self.0)
            .await?)
    }

    pub(super) async fn model_by_id(&self, id: i64) -> Result<Option<ModelRecord>, StoreError> {
        Ok(sqlx::query_as(sql::MODEL_BY_ID)
            .bind(id)
            .fetch_optional(self.0)
            .await?)
    }

    pub(super) async fn batch(
        &self,
        model_id: i64,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError> {
        Ok(sqlx::query_as(sql::BATCH)
            .bind(model_id)
            .bind(batch_id)
            .fetch_optional(self.0)
            .await?)
    }

    /// The batch stored under `batch_id`, as a retry of it with content `hash` is answered
    /// ([`StoredBatch::replay_or_conflict`]); `None` when there is none.
    pub(super) async fn replay(
        &self,
        model_id: i64,
        batch_id: &str,
        hash: &ContentHash,
    ) -> Result<Option<Ingested>, StoreError> {
        let stored: Option<StoredBatch> = sqlx::query_as(sql::STORED_BATCH)
            .bind(model_id)
            .bind(batch_id)
            .fetch_optional(self.0)
            .await?;
        stored.map(|s| s.replay_or_conflict(hash)).transpose()
    }

    pub(super) async fn batches(
        &self,
        model_id: i64,
        status: Option<BatchStatus>,
        limit: i64,
    ) -> Result<Vec<BatchRecord>, StoreError> {
        Ok(sqlx::query_as(sql::BATCHES)
            .bind(model_id)
            .bind(status)
            .bind(limit)
            .fetch_all(self.0)
            .await?)
    }

    pub(super) async fn heads(&self) -> Result<Vec<ModelHead>, StoreError> {
        Ok(sqlx::query_as(sql::HEADS).fetch_all(self.0).await?)
    }

    pub(super) async fn model_head(
        &self,
        model_id: i64,
    ) -> Result<Option<(ModelSpec, i64)>, StoreError> {
        let row: Option<(Json<ModelSpec>, i64)> = sqlx::query_as(sql::MODEL_HEAD)
            .bind(model_id)
            .fetch_optional(self.0)
            .await?;
        Ok(row.map(|(Json(spec), version)| (spec, version)))
    }

    pub(super) async fn current_state(
        &self,
        model_id: i64,
    ) -> Result<Option<(ModelSpec, i64, Option<Vec<u8>>)>, StoreError> {
        let row: Option<(Json<ModelSpec>, i64, Option<Vec<u8>>)> =
            sqlx::query_as(sql::CURRENT_STATE)
                .bind(model_id)
                .fetch_optional(self.0)
                .await?;
        Ok(row.map(|(Json(spec), version, state)| (spec, version, state)))
    }

    pub(super) async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        Ok(sqlx::query_as(sql::KEYS).fetch_all(self.0).await?)
    }

    /// The newest key's id (0 when there is none) and the keys not revoked.
    pub(super) async fn active_keys(&self) -> Result<(i64, Vec<KeyRecord>), StoreError> {
        let newest: i64 = sqlx::query_scalar(sql::NEWEST_KEY)
            .fetch_one(self.0)
            .await?;
        let keys = sqlx::query_as(sql::ACTIVE_KEYS).fetch_all(self.0).await?;
        Ok((newest, keys))
    }
}
