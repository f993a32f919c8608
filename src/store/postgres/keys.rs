//! API keys on PostgreSQL: created, listed, revoked. Changes are announced on
//! [`Topic::Keys`].

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

use super::notify;
use crate::domain::Scope;
use crate::store::{KEY_COLUMNS, KeyRecord, StoreError, Topic, key_parts};

pub(super) async fn create(
    pool: &PgPool,
    name: &str,
    prefix: &str,
    hash: &[u8; 32],
    scopes: &[Scope],
) -> Result<KeyRecord, StoreError> {
    let scopes: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
    let mut tx = pool.begin().await?;
    let row = sqlx::query(&format!(
        "INSERT INTO api_keys (name, prefix, hash, scopes) VALUES ($1, $2, $3, $4) \
             RETURNING {KEY_COLUMNS}"
    ))
    .bind(name)
    .bind(prefix)
    .bind(hash.as_slice())
    .bind(&scopes)
    .fetch_one(&mut *tx)
    .await?;
    notify(&mut tx, Topic::Keys, "").await?;
    tx.commit().await?;
    key_record(&row)
}

pub(super) async fn list(pool: &PgPool) -> Result<Vec<KeyRecord>, StoreError> {
    let rows = sqlx::query(&format!("SELECT {KEY_COLUMNS} FROM api_keys ORDER BY id"))
        .fetch_all(pool)
        .await?;
    rows.iter().map(key_record).collect()
}

pub(super) async fn active(pool: &PgPool) -> Result<(i64, Vec<KeyRecord>), StoreError> {
    let newest: i64 = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM api_keys")
        .fetch_one(pool)
        .await?;
    let rows = sqlx::query(&format!(
        "SELECT {KEY_COLUMNS} FROM api_keys WHERE revoked_at IS NULL"
    ))
    .fetch_all(pool)
    .await?;
    let keys = rows.iter().map(key_record).collect::<Result<_, _>>()?;
    Ok((newest, keys))
}

pub(super) async fn revoke(pool: &PgPool, id: i64) -> Result<Option<KeyRecord>, StoreError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query(&format!(
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
    row.as_ref().map(key_record).transpose()
}

fn key_record(row: &PgRow) -> Result<KeyRecord, StoreError> {
    let hash: Vec<u8> = row.try_get("hash")?;
    let scopes: Vec<String> = row.try_get("scopes")?;
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
