//! Building and running the application: the listener, the database, the folder, the cache
//! follower, and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::KeyRing;
use crate::cache::{self, PosteriorCache};
use crate::config::Settings;
use crate::folder;
use crate::http::serve::{ConnectionLimits, HttpServer, serve};
use crate::http::{self, AppState, Shared};
use crate::metrics::Metrics;
use crate::retention;
use crate::store::Store;
use crate::tasks::Notifications;

/// A bound, migrated application, ready to run.
pub struct Application {
    listener: TcpListener,
    /// `/metrics` on its own address (`server.metrics_addr`).
    metrics_listener: Option<TcpListener>,
    state: AppState,
    settings: Settings,
}

impl Application {
    /// Connects to the database (retrying for `database.startup_timeout_secs`), applies the
    /// migrations, loads the posterior cache and binds the listener.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.validate()?;
        let store = Store::open(&settings.database).await?;
        tracing::info!(store = store.kind(), "store opened");
        migrate_with_retry(
            &store,
            Duration::from_secs(settings.database.startup_timeout_secs),
        )
        .await?;
        let cache = Arc::new(PosteriorCache::default());
        // A database that is down now is not fatal: the cache follower loads the models when
        // it comes back, and until then `/readyz` says not ready.
        if let Err(e) = cache.sync_all(&store).await {
            tracing::warn!(error = %e, "cannot load the models into the posterior cache yet");
        }
        let keys = Arc::new(match settings.auth.admin_key() {
            Some(key) => KeyRing::enforced(Some(key)),
            None => {
                tracing::warn!(
                    "NO ADMIN KEY CONFIGURED: the API is open to anyone who can reach it. \
                     This is allowed in development only; set MORDANT_ADMIN_KEY to \
                     require API keys."
                );
                KeyRing::open()
            }
        });
        if keys.is_enforced()
            && let Err(e) = keys.sync(&store).await
        {
            tracing::warn!(error = %e, "cannot load the API keys yet (only the admin key works)");
        }
        let listener = TcpListener::bind(&settings.server.addr)
            .await
            .with_context(|| format!("cannot listen on {}", settings.server.addr))?;
        let metrics_listener = match settings.server.metrics_addr.as_str() {
            "" => None,
            addr => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen for /metrics on {addr}"))?,
            ),
        };
        let metrics = Arc::new(Metrics::new().context("cannot register the metrics")?);
        let state = AppState::from(Shared {
            store,
            cache,
            metrics,
            keys,
            limits: settings.limits.clone(),
            cpu: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, usize::from),
            )),
            runtime: tokio::runtime::Handle::current(),
        });
        Ok(Self {
            listener,
            metrics_listener,
            state,
            settings,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        // A bound TCP listener always has a local address.
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Where `/metrics` is served when it has its own address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    pub fn store(&self) -> &Store {
        &self.state.store
    }

    /// Serves until `shutdown` is cancelled, then stops accepting, lets in-flight requests
    /// finish and the current fold for up to `folder.shutdown_grace_secs` from then, and
    /// returns.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let Self {
            listener,
            metrics_listener,
            state,
            settings,
        } = self;
        let addr = listener.local_addr()?;
        let store = state.store.clone();
        let threads = settings.server.http_threads();
        let connections = ConnectionLimits::above(&state.limits);
        let mut server = HttpServer::start(
            listener
                .into_std()
                .context("cannot take over the listening socket")?,
            http::router(state.clone(), &settings.server)?,
            threads,
            connections,
            shutdown.clone(),
        )
        .await?;
        tracing::info!(%addr, threads, "mordant listening");
        let background = CancellationToken::new();
        // One listener on the store's notifications for every task of this process.
        let (notifications, listener) = Notifications::start(
            state.store.clone(),
            settings.folder.max_backoff(),
            background.clone(),
        );
        let follower = tokio::spawn(cache::follow(
            state.cache.clone(),
            state.keys.clone(),
            state.store.clone(),
            notifications.clone(),
            Duration::from_millis(settings.cache.poll_interval_ms),
            settings.folder.max_backoff(),
            background.clone(),
        ));
        // Each worker claims a different model (`SKIP LOCKED`), so up to
        // `max_concurrent_folds` models are folded at once.
        let workers = if settings.folder.enabled {
            settings.folder.max_concurrent_folds
        } else {
            0
        };
        // The folders stop claiming work when shutdown is asked for, and the fold they are in
        // has its grace from then, while the requests drain.
        let folding = shutdown.child_token();
        let folders: Vec<_> = (0..workers)
            .map(|_| {
                tokio::spawn(folder::run(
                    state.store.clone(),
                    state.cache.clone(),
                    state.metrics.clone(),
                    notifications.clone(),
                    settings.folder.clone(),
                    folding.clone(),
                ))
            })
            .collect();
        let asked = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                shutdown.cancelled().await;
                tokio::time::Instant::now()
            })
        };
        let retention = tokio::spawn(retention::run(
            state.store.clone(),
            settings.retention.clone(),
            settings.folder.max_backoff(),
            background.clone(),
        ));
        let metrics_server = metrics_listener.map(|listener| {
            tracing::info!(addr = ?listener.local_addr().ok(), "/metrics listening");
            let app = http::metrics_router(state.clone());
            tokio::spawn(serve(listener, app, connections, shutdown.clone()))
        });
        let result = server.stopped().await;
        // Also when the server ended on its own: everything else stops with it.
        shutdown.cancel();
        // The folders finish the fold they are in, then stop; a fold that outlasts the grace is
        // abandoned (its transaction rolls back, its batches stay queued for the next start),
        // so that the process stops within the orchestrator's grace period.
        background.cancel();
        let asked = asked.await.unwrap_or_else(|_| tokio::time::Instant::now());
        let deadline = asked + settings.folder.shutdown_grace();
        for mut folder in folders {
            if tokio::time::timeout_at(deadline, &mut folder)
                .await
                .is_err()
            {
                tracing::warn!(
                    grace_secs = settings.folder.shutdown_grace_secs,
                    "a fold still running at shutdown is abandoned; its batches stay queued for \
                     the next fold (the next start, or another replica)"
                );
                folder.abort();
                let _ = folder.await;
            }
        }
        if let Some(server) = metrics_server {
            let _ = server.await;
        }
        let _ = retention.await;
        let _ = follower.await;
        let _ = listener.await;
        // Every task that used the store has stopped: close it (the embedded store checkpoints
        // its log, and its file is free for the next process once this one has exited).
        store.close().await;
        server.release().await;
        tracing::info!("mordant stopped");
        result
    }
}

async fn migrate_with_retry(store: &Store, timeout: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(200);
    loop {
        let result = store.migrate().await;
        // A newer release's database stays one: refuse it now, not after the timeout.
        if let Err(e) = &result
            && let Some(lasting) = crate::store::lasting_migration_error(e)
        {
            return result.context(lasting);
        }
        match result {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() < timeout => {
                tracing::warn!(error = %e, "database not ready, retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) if store.kind() == "postgres" => {
                return Err(e).context(
                    "cannot migrate the database (is PostgreSQL running and DATABASE_URL right?)",
                );
            }
            Err(e) => return Err(e).context("cannot migrate the embedded database"),
        }
    }
}

/// Cancels `token` on SIGTERM or Ctrl-C.
pub async fn shutdown_on_signal(token: CancellationToken) {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown requested");
    token.cancel();
}
