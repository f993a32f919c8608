//! Persistence: models, the queue of batches, immutable versions and API keys, behind one
//! trait ([`Backend`]) with two implementations.
//!
//! * [`postgres`]: PostgreSQL, for production and for several replicas against one database.
//!   Notifications travel through `LISTEN/NOTIFY`, so every replica hears every change.
//! * [`sqlite`]: an embedded SQLite file, the default when no PostgreSQL URL is configured.
//!   One process owns the file (a second one is refused at start); notifications stay inside
//!   that process.
//!
//! Both keep the same promises, checked by one conformance suite (`tests/store.rs`) and the API
//! tests: a batch is on disk when ingestion returns; a model's batches are folded exactly once,
//! in arrival order; versions are immutable; a notification is sent only once the change it
//! announces is committed.
//!
//! [`Store`] is the cheap, cloneable handle the rest of the service holds.

mod backend;
pub mod copy;
mod error;
mod location;
mod lock;
pub mod postgres;
mod records;
mod settings;
pub mod sqlite;
mod status;

pub use settings::DatabaseSettings;

pub use status::{BatchStatus, VersionOrigin};

use backend::check_migrations;
pub use backend::{Backend, ModelTransaction, Notification, Subscription, Topic};
pub use error::StoreError;
pub use location::Location;
pub use lock::ModelLock;
pub use records::*;
use records::{BATCH_COLUMNS, KEY_COLUMNS, MODEL_COLUMNS, key_parts, not_held, replay_or_conflict};

use std::ops::Deref;
use std::sync::Arc;

use anyhow::Context;

use crate::domain::ModelName;

/// The default of [`DatabaseSettings::full_state_every`].
pub const DEFAULT_FULL_STATE_EVERY: u32 = 10;

/// The store the service holds: one backend behind a cheap, cloneable handle.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Arc<dyn Backend>,
    full_state_every: u32,
}

impl Deref for Store {
    type Target = dyn Backend;

    fn deref(&self) -> &Self::Target {
        &*self.backend
    }
}

impl Store {
    pub fn new(backend: impl Backend, full_state_every: u32) -> Self {
        Self {
            backend: Arc::new(backend),
            full_state_every: full_state_every.max(1),
        }
    }

    /// Takes a model's write lock (see [`Backend::lock_model`]), writing versions by this
    /// store's policy.
    pub async fn lock_model(&self, name: &ModelName) -> Result<Option<ModelLock>, StoreError> {
        Ok(self.backend.lock_model(name).await?.map(|l| self.policy(l)))
    }

    /// Claims a model with work (see [`Backend::claim_fold`]), writing versions by this
    /// store's policy.
    pub async fn claim_fold(&self, skip: &[i64]) -> Result<Option<ModelLock>, StoreError> {
        Ok(self.backend.claim_fold(skip).await?.map(|l| self.policy(l)))
    }

    fn policy(&self, mut lock: ModelLock) -> ModelLock {
        lock.full_state_every = self.full_state_every;
        lock
    }

    /// Opens the configured backend. PostgreSQL connects lazily (the service starts, and
    /// answers `/readyz` with 503, while the database is down); the embedded file is opened
    /// now, and refused if another process holds it.
    pub async fn open(settings: &DatabaseSettings) -> anyhow::Result<Self> {
        match Location::of(settings)? {
            Location::Postgres(url) => Ok(Self::new(
                postgres::PgStore::connect_lazy(&url, settings)
                    .context("invalid PostgreSQL URL")?,
                settings.full_state_every,
            )),
            Location::Sqlite(path) => Ok(Self::new(
                sqlite::SqliteStore::open(&path, settings).await?,
                settings.full_state_every,
            )),
        }
    }
}
