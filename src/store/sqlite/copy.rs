//! A copy's reads and writes on the embedded store (see [`crate::store::copy`]).

use async_trait::async_trait;
use sqlx::{Row, Sqlite, Transaction};

use super::SqliteStore;
use crate::store::dump::{BatchDump, Loader, ModelDump, VersionDump, not_empty};
use crate::store::{KeyRecord, StoreError};

/// A JSON column (`surprise`, `noise_variances`), decoded.
fn json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn to_json<T: serde::Serialize>(value: &T, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

pub(super) async fn dump_model(
    store: &SqliteStore,
    id: i64,
) -> Result<Option<ModelDump>, StoreError> {
    // One read transaction: one snapshot of the file.
    let mut tx = store.inner.readers.begin().await?;
    let Some(model) = sqlx::query(
        "SELECT name, spec, first_fit_rows, version, observations, created_at, updated_at \
         FROM models WHERE id = ?1",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    let batches = sqlx::query(
        "SELECT batch_id, content_hash, rows, x, y, statistics, status, received_at, folded_at, \
                version, error, surprise, released, rows_purged_at \
         FROM batches WHERE model_id = ?1 ORDER BY seq",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
        let surprise: Option<String> = r.try_get("surprise")?;
        Ok(BatchDump {
            batch_id: r.try_get("batch_id")?,
            content_hash: r.try_get("content_hash")?,
            rows: r.try_get("rows")?,
            x: r.try_get("x")?,
            y: r.try_get("y")?,
            statistics: r.try_get("statistics")?,
            status: r.try_get("status")?,
            received_at: r.try_get("received_at")?,
            folded_at: r.try_get("folded_at")?,
            version: r.try_get("version")?,
            error: r.try_get("error")?,
            surprise: surprise
                .map(|s| json(&s, "a batch's surprise"))
                .transpose()?,
            released: r.try_get("released")?,
            rows_purged_at: r.try_get("rows_purged_at")?,
        })
    })
    .collect::<Result<Vec<_>, StoreError>>()?;
    let versions = sqlx::query(
        "SELECT version, created_at, origin, restored_from, observations, noise_variances, \
                state, state_digest FROM versions WHERE model_id = ?1 ORDER BY version",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
        let noise: String = r.try_get("noise_variances")?;
        Ok(VersionDump {
            version: r.try_get("version")?,
            created_at: r.try_get("created_at")?,
            origin: r.try_get("origin")?,
            restored_from: r.try_get("restored_from")?,
            observations: r.try_get("observations")?,
            noise_variances: json(&noise, "noise variances")?,
            state: r.try_get("state")?,
            state_digest: r.try_get("state_digest")?,
        })
    })
    .collect::<Result<Vec<_>, StoreError>>()?;
    tx.commit().await?;
    Ok(Some(ModelDump {
        name: model.try_get("name")?,
        spec: model.try_get("spec")?,
        first_fit_rows: model.try_get("first_fit_rows")?,
        version: model.try_get("version")?,
        observations: model.try_get("observations")?,
        created_at: model.try_get("created_at")?,
        updated_at: model.try_get("updated_at")?,
        batches,
        versions,
    }))
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
            let surprise = b
                .surprise
                .as_ref()
                .map(|s| to_json(s, "a batch's surprise"))
                .transpose()?;
            sqlx::query(
                "INSERT INTO batches (model_id, batch_id, content_hash, rows, x, y, statistics, \
                                      status, received_at, folded_at, version, error, surprise, \
                                      released, rows_purged_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            )
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
            .bind(surprise)
            .bind(b.released)
            .bind(b.rows_purged_at)
            .execute(&mut *self.tx)
            .await?;
        }
        for v in &m.versions {
            sqlx::query(
                "INSERT INTO versions (model_id, version, created_at, origin, restored_from, \
                                       observations, noise_variances, state, state_digest) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .bind(id)
            .bind(v.version)
            .bind(v.created_at)
            .bind(v.origin)
            .bind(v.restored_from)
            .bind(v.observations)
            .bind(to_json(&v.noise_variances, "noise variances")?)
            .bind(&v.state)
            .bind(&v.state_digest)
            .execute(&mut *self.tx)
            .await?;
        }
        Ok(())
    }

    async fn keys(&mut self, keys: &[KeyRecord]) -> Result<(), StoreError> {
        for k in keys {
            let scopes: Vec<&str> = k.scopes.iter().map(|s| s.as_str()).collect();
            sqlx::query(
                "INSERT INTO api_keys (id, name, prefix, hash, scopes, created_at, revoked_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .bind(k.id)
            .bind(&k.name)
            .bind(&k.prefix)
            .bind(&k.hash[..])
            .bind(to_json(&scopes, "key scopes")?)
            .bind(k.created_at)
            .bind(k.revoked_at)
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
