//! Retention: the background task that removes raw rows past `retention.raw_rows_days`.
//!
//! Only the raw rows go, a few batches per transaction ([`crate::store::Backend::purge_rows`]);
//! statistics, versions and the batches' records stay, so refit, restore (thin versions replay
//! from statistics) and drift keep working. A purge interrupted by a crash leaves every batch
//! either purged or untouched, and the next run carries on.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::RetentionSettings;
use crate::store::Store;
use crate::tasks::sleep_or_stop;

/// Purges rows past their time until none are left, then waits `purge_interval_secs`; until
/// `shutdown`. Does nothing when `raw_rows_days` is 0.
pub async fn run(
    store: Store,
    settings: RetentionSettings,
    max_backoff: Duration,
    shutdown: CancellationToken,
) {
    if settings.raw_rows_days == 0 {
        return;
    }
    let interval = Duration::from_secs(settings.purge_interval_secs.max(1));
    let mut backoff = Duration::from_millis(200);
    loop {
        match purge_once(&store, &settings, &shutdown).await {
            Ok(purged) => {
                if purged > 0 {
                    tracing::info!(batches = purged, "retention: raw rows purged");
                }
                backoff = Duration::from_millis(200);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention: purge failed");
                if sleep_or_stop(&shutdown, &mut backoff, max_backoff).await {
                    return;
                }
            }
        }
    }
}

/// One pass: every batch past its time, `purge_batch_size` per transaction; how many.
pub async fn purge_once(
    store: &Store,
    settings: &RetentionSettings,
    shutdown: &CancellationToken,
) -> Result<u64, crate::store::StoreError> {
    // `raw_rows_days` is validated to at most a century, far from chrono's range.
    let cutoff = chrono::Utc::now() - chrono::Duration::days(i64::from(settings.raw_rows_days));
    let mut total = 0;
    while !shutdown.is_cancelled() {
        let purged = store
            .purge_rows(cutoff, settings.purge_batch_size.max(1))
            .await?;
        total += purged;
        if purged < u64::from(settings.purge_batch_size.max(1)) {
            break;
        }
        tokio::task::yield_now().await;
    }
    Ok(total)
}
