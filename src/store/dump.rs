//! A store's content as a copy moves it (see [`super::copy`]): what each backend reads out and
//! writes in.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

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

/// A batch, read and written with the columns of `sql::batch_dump_columns!`.
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

/// A version, read and written with the columns of `sql::version_dump_columns!`.
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

/// Binds a model id and a [`BatchDump`] (`$1`, then its columns in the order
/// `sql::batch_dump_columns!` names them) to a query of either dialect.
macro_rules! bind_batch {
    ($query:expr, $model_id:expr, $b:expr) => {
        $query
            .bind($model_id)
            .bind(&$b.batch_id)
            .bind(&$b.content_hash)
            .bind($b.rows)
            .bind(&$b.x)
            .bind(&$b.y)
            .bind(&$b.statistics)
            .bind($b.status)
            .bind($b.received_at)
            .bind($b.folded_at)
            .bind($b.version)
            .bind(&$b.error)
            .bind($crate::store::columns::List(&$b.surprise))
            .bind($b.released)
            .bind($b.rows_purged_at)
    };
}

/// Binds a model id and a [`VersionDump`] (`$1`, then its columns in the order
/// `sql::version_dump_columns!` names them).
macro_rules! bind_version {
    ($query:expr, $model_id:expr, $v:expr) => {
        $query
            .bind($model_id)
            .bind($v.version)
            .bind($v.created_at)
            .bind($v.origin)
            .bind($v.restored_from)
            .bind($v.observations)
            .bind($crate::store::columns::List(&$v.noise_variances))
            .bind(&$v.state)
            .bind(&$v.state_digest)
    };
}

/// Binds a [`KeyRecord`] (`$1`…`$7`, its columns as `sql::KEY_COLUMNS` names them).
macro_rules! bind_key {
    ($query:expr, $k:expr) => {
        $query
            .bind($k.id)
            .bind(&$k.name)
            .bind(&$k.prefix)
            .bind(&$k.hash[..])
            .bind($crate::store::columns::List(&$k.scopes))
            .bind($k.created_at)
            .bind($k.revoked_at)
    };
}

pub(super) use {bind_batch, bind_key, bind_version};
