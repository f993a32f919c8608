//! API keys on SQLite: created, listed, revoked. Scopes are a JSON array.

use chrono::Utc;
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};

use super::SqliteStore;
use crate::domain::Scope;
use crate::store::{KEY_COLUMNS, KeyRecord, StoreError, key_parts};

pub(super) async fn create(
    store: &SqliteStore,
    name: &str,
    prefix: &str,
    hash: &[u8; 32],
    scopes: &[Scope],
) -> Result<KeyRecord, StoreError> {
    let scopes: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
    let scopes = serde_json::to_string(&scopes)
        .map_err(|e| StoreError::Corrupt(format!("key scopes: {e}")))?;
    let mut tx = store.write().await?;
    let row = sqlx::query(&format!(
        "INSERT INTO api_keys (name, prefix, hash, scopes, created_at) VALUES (?1, ?2, ?3, ?4, ?5) \
         RETURNING {KEY_COLUMNS}"
    ))
    .bind(name)
    .bind(prefix)
    .bind(hash.as_slice())
    .bind(scopes)
    .bind(Utc::now())
    .fetch_one(&mut *tx)
    .await?;
    let record = key_record(&row)?;
    tx.commit().await?;
    Ok(record)
}

pub(super) async fn list(readers: &SqlitePool) -> Result<Vec<KeyRecord>, StoreError> {
    let rows = sqlx::query(&format!("SELECT {KEY_COLUMNS} FROM api_keys ORDER BY id"))
        .fetch_all(readers)
        .await?;
    rows.iter().map(key_record).collect()
}

pub(super) async fn active(readers: &SqlitePool) -> Result<(i64, Vec<KeyRecord>), StoreError> {
    let newest: i64 = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM api_keys")
        .fetch_one(readers)
        .await?;
    let rows = sqlx::query(&format!(
        "SELECT {KEY_COLUMNS} FROM api_keys WHERE revoked_at IS NULL"
    ))
    .fetch_all(readers)
    .await?;
    let keys = rows.iter().map(key_record).collect::<Result<_, _>>()?;
    Ok((newest, keys))
}

pub(super) async fn revoke(store: &SqliteStore, id: i64) -> Result<Option<KeyRecord>, StoreError> {
    let mut tx = store.write().await?;
    let row = sqlx::query(&format!(
        "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1 \
         RETURNING {KEY_COLUMNS}"
    ))
    .bind(id)
    .bind(Utc::now())
    .fetch_optional(&mut *tx)
    .await?;
    let record = row.as_ref().map(key_record).transpose()?;
    tx.commit().await?;
    Ok(record)
}

fn key_record(row: &SqliteRow) -> Result<KeyRecord, StoreError> {
    let hash: Vec<u8> = row.try_get("hash")?;
    let scopes: String = row.try_get("scopes")?;
    let scopes: Vec<String> = serde_json::from_str(&scopes)
        .map_err(|e| StoreError::Corrupt(format!("key scopes: {e}")))?;
    let (hash, scopes) = key_parts(&hash, &scopes)?;
    Ok(KeyRecord {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        prefix: row.try_get("prefix")?,
        hash,
        scopes,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}
