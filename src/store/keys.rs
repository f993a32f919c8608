//! API keys: created, listed, revoked. Changes are announced on [`KEYS_CHANNEL`].

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::{Store, StoreError};
use crate::auth::Scope;

/// Notified (empty payload) when a key is created or revoked.
pub const KEYS_CHANNEL: &str = "mordant_keys";

/// A stored key (never its text).
#[derive(Clone, Debug)]
pub struct KeyRecord {
    pub id: i64,
    pub name: String,
    pub prefix: String,
    pub hash: [u8; 32],
    pub scopes: Vec<Scope>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

const KEY_COLUMNS: &str = "id, name, prefix, hash, scopes, created_at, revoked_at";

impl Store {
    pub async fn create_key(
        &self,
        name: &str,
        prefix: &str,
        hash: &[u8; 32],
        scopes: &[Scope],
    ) -> Result<KeyRecord, StoreError> {
        let scopes: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
        let mut tx = self.pool.begin().await?;
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
        notify_keys(&mut tx).await?;
        tx.commit().await?;
        key_record(&row)
    }

    /// Every key, revoked ones included, oldest first.
    pub async fn list_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {KEY_COLUMNS} FROM api_keys ORDER BY id"))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(key_record).collect()
    }

    /// The keys that are valid now, with the highest key id there was before they were read
    /// (every key up to that id is either among them or revoked).
    pub async fn active_keys(&self) -> Result<(i64, Vec<KeyRecord>), StoreError> {
        let newest: i64 = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM api_keys")
            .fetch_one(&self.pool)
            .await?;
        let rows = sqlx::query(&format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE revoked_at IS NULL"
        ))
        .fetch_all(&self.pool)
        .await?;
        let keys = rows.iter().map(key_record).collect::<Result<_, _>>()?;
        Ok((newest, keys))
    }

    /// Revokes a key (revoking it again changes nothing); `None` when there is no such key.
    pub async fn revoke_key(&self, id: i64) -> Result<Option<KeyRecord>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "UPDATE api_keys SET revoked_at = coalesce(revoked_at, clock_timestamp()) \
             WHERE id = $1 RETURNING {KEY_COLUMNS}"
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        if row.is_some() {
            notify_keys(&mut tx).await?;
        }
        tx.commit().await?;
        row.as_ref().map(key_record).transpose()
    }
}

async fn notify_keys(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(KEYS_CHANNEL)
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

fn key_record(row: &PgRow) -> Result<KeyRecord, StoreError> {
    let hash: Vec<u8> = row.try_get("hash")?;
    let hash = <[u8; 32]>::try_from(hash.as_slice())
        .map_err(|_| StoreError::Corrupt("an API key hash is not 32 bytes".into()))?;
    let scopes: Vec<String> = row.try_get("scopes")?;
    let scopes = scopes
        .iter()
        .map(|s| {
            Scope::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown key scope {s:?}")))
        })
        .collect::<Result<_, _>>()?;
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
