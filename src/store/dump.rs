//! A store's content as a copy moves it (see [`super::copy`]): what each backend reads out and
//! writes in.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{BatchStatus, KeyRecord, StoreError, VersionOrigin};

/// One model, all of it, as both backends read and write it.
#[derive(Clone, Debug, PartialEq)]
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
    pub batches: Vec<BatchDump>,
    /// Oldest first.
    pub versions: Vec<VersionDump>,
}

#[derive(Clone, Debug, PartialEq)]
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
    pub surprise: Option<Vec<Option<f64>>>,
    pub released: bool,
    pub rows_purged_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VersionDump {
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub origin: VersionOrigin,
    pub restored_from: Option<i64>,
    pub observations: f64,
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
