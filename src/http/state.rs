//! What every handler can reach.

use std::sync::Arc;

use crate::auth::KeyRing;
use crate::cache::PosteriorCache;
use crate::config::Limits;
use crate::metrics::Metrics;
use crate::store::Store;

use super::error::ApiError;

/// What every handler can reach: one shared allocation. axum clones a route's state for every
/// request (the handler's and each stateful route layer's), so a clone is one reference count,
/// not one per field.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The contents of [`AppState`].
pub struct Shared {
    pub store: Store,
    pub cache: Arc<PosteriorCache>,
    pub metrics: Arc<Metrics>,
    pub keys: Arc<KeyRing>,
    pub limits: Limits,
    /// Permits for CPU-heavy request work (parsing a batch, a large predict), one per core:
    /// more at once would only share the cores, and each blocking thread that parses a batch
    /// keeps an allocator heap of its own.
    pub cpu: Arc<tokio::sync::Semaphore>,
    /// The process's own runtime: its blocking pool runs the blocking work of every request,
    /// whichever HTTP thread serves it (one pool, not one per serving runtime).
    pub runtime: tokio::runtime::Handle,
}

impl From<Shared> for AppState {
    fn from(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// Runs `work` on the process's blocking pool once a CPU permit is free.
    pub async fn cpu_bound<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let _permit = self.cpu.acquire().await.map_err(ApiError::internal)?;
        self.blocking(work).await
    }

    /// Runs `work` on the process's blocking pool.
    pub async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        self.runtime
            .spawn_blocking(work)
            .await
            .map_err(ApiError::internal)
    }
}
