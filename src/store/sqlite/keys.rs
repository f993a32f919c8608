//! API keys on SQLite: created and revoked (they are read by `store::reads`). Scopes are a JSON
//! array.

use chrono::Utc;

use super::SqliteStore;
use crate::domain::Scope;
use crate::store::columns::List;
use crate::store::{KEY_COLUMNS, KeyRecord, StoreError};

pub(super) async fn create(
    store: &SqliteStore,
    name: &str,
    prefix: &str,
    hash: &[u8; 32],
    scopes: &[Scope],
) -> Result<KeyRecord, StoreError> {
    let mut tx = store.write().await?;
    let row = sqlx::query_as::<_, KeyRecord>(&format!(
        "INSERT INTO api_keys (name, prefix, hash, scopes, created_at) VALUES (?1, ?2, ?3, ?4, ?5) \
         RETURNING {KEY_COLUMNS}"
    ))
    .bind(name)
    .bind(prefix)
    .bind(hash.as_slice())
    .bind(List(scopes))
    .bind(Utc::now())
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(row)
}

pub(super) async fn revoke(store: &SqliteStore, id: i64) -> Result<Option<KeyRecord>, StoreError> {
    let mut tx = store.write().await?;
    let row = sqlx::query_as::<_, KeyRecord>(&format!(
        "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1 \
         RETURNING {KEY_COLUMNS}"
    ))
    .bind(id)
    .bind(Utc::now())
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(row)
}
