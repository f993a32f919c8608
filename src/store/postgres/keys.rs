//! API keys on PostgreSQL: created and revoked (they are read by `store::reads`). Changes are
//! announced on [`Topic::Keys`].

use sqlx::PgPool;

use super::notify;
use crate::domain::Scope;
use crate::store::columns::List;
use crate::store::{KEY_COLUMNS, KeyRecord, StoreError, Topic};

pub(super) async fn create(
    pool: &PgPool,
    name: &str,
    prefix: &str,
    hash: &[u8; 32],
    scopes: &[Scope],
) -> Result<KeyRecord, StoreError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query_as::<_, KeyRecord>(&format!(
        "INSERT INTO api_keys (name, prefix, hash, scopes) VALUES ($1, $2, $3, $4) \
             RETURNING {KEY_COLUMNS}"
    ))
    .bind(name)
    .bind(prefix)
    .bind(hash.as_slice())
    .bind(List(scopes))
    .fetch_one(&mut *tx)
    .await?;
    notify(&mut tx, Topic::Keys, "").await?;
    tx.commit().await?;
    Ok(row)
}

pub(super) async fn revoke(pool: &PgPool, id: i64) -> Result<Option<KeyRecord>, StoreError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query_as::<_, KeyRecord>(&format!(
        "UPDATE api_keys SET revoked_at = coalesce(revoked_at, clock_timestamp()) \
             WHERE id = $1 RETURNING {KEY_COLUMNS}"
    ))
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    if row.is_some() {
        notify(&mut tx, Topic::Keys, "").await?;
    }
    tx.commit().await?;
    Ok(row)
}
