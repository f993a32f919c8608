//! The store the service holds.

use std::ops::Deref;
use std::sync::Arc;

use anyhow::Context;

use super::{Backend, DatabaseSettings, Location, ModelLock, StoreError, postgres, sqlite};
use crate::domain::ModelName;

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
