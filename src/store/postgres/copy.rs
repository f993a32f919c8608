//! A copy's reads and writes on PostgreSQL (see [`crate::store::copy`]).

use async_trait::async_trait;
use sqlx::{PgPool, Postgres, Row, Transaction};

use crate::store::dump::{BatchDump, Loader, ModelDump, VersionDump, not_empty};
use crate::store::{KeyRecord, StoreError};

pub(super) async fn dump_model(pool: &PgPool, id: i64) -> Result<Option<ModelDump>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let Some(model) = sqlx::query(
        "SELECT name, spec::text AS spec, first_fit_rows, version, observations, created_at, \
                updated_at FROM models WHERE id = $1",
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
         FROM batches WHERE model_id = $1 ORDER BY COALESCE(arrival, seq), seq",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
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
            surprise: r.try_get("surprise")?,
            released: r.try_get("released")?,
            rows_purged_at: r.try_get("rows_purged_at")?,
        })
    })
    .collect::<Result<Vec<_>, StoreError>>()?;
    let versions = sqlx::query(
        "SELECT version, created_at, origin, restored_from, observations, noise_variances, \
                state, state_digest FROM versions WHERE model_id = $1 ORDER BY version",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
        Ok(VersionDump {
            version: r.try_get("version")?,
            created_at: r.try_get("created_at")?,
            origin: r.try_get("origin")?,
            restored_from: r.try_get("restored_from")?,
            observations: r.try_get("observations")?,
            noise_variances: r.try_get("noise_variances")?,
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
            sqlx::query(
                "INSERT INTO batches (model_id, batch_id, content_hash, rows, x, y, statistics, \
                                      status, received_at, folded_at, version, error, surprise, \
                                      released, rows_purged_at, arrival) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
                         nextval('batch_arrival'))",
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
            .bind(&b.surprise)
            .bind(b.released)
            .bind(b.rows_purged_at)
            .execute(&mut *self.tx)
            .await?;
        }
        for v in &m.versions {
            sqlx::query(
                "INSERT INTO versions (model_id, version, created_at, origin, restored_from, \
                                       observations, noise_variances, state, state_digest) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(id)
            .bind(v.version)
            .bind(v.created_at)
            .bind(v.origin)
            .bind(v.restored_from)
            .bind(v.observations)
            .bind(&v.noise_variances)
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
                 OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(k.id)
            .bind(&k.name)
            .bind(&k.prefix)
            .bind(&k.hash[..])
            .bind(&scopes)
            .bind(k.created_at)
            .bind(k.revoked_at)
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
