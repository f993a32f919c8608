//! The in-memory posterior cache predictions are served from.
//!
//! It holds every model at its current version, also untrained ones, so that predict can tell
//! "unknown" from "not trained" without the database (it asks the database whether an untrained
//! one has been trained since, and answers from the cache where the database cannot say at
//! once). It follows new versions written by this process directly, and those written by other
//! replicas through notifications on [`Topic::Models`] with a periodic check of every model's
//! version as a fallback.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::auth::KeyRing;
use crate::coalesce::{Coalescer, Tally};
use crate::domain::{ModelName, ModelSpec};
use crate::estimator::grid::Grid;
use crate::estimator::recipe::ForwardMap;
use crate::estimator::succession::Succession;
use crate::estimator::transfer::TransferMap;
use crate::estimator::{ModelConfig, ModelState, Predictor};
use crate::store::{Store, StoreError, Topic};
use crate::successor::decode_version;
use crate::tasks::Notifications;
use mordant_kitchen::Colorimeter;

/// One model as predict sees it.
#[derive(Debug)]
pub struct CachedModel {
    pub id: i64,
    pub spec: ModelSpec,
    pub config: ModelConfig,
    pub version: i64,
    /// `None` until the first fit.
    pub state: Option<Arc<ModelState>>,
    /// What predictions need of `state`, formed once per version.
    pub predictor: Option<Arc<Predictor>>,
    /// Where the version's small predictions wait to be answered together, for a predictor
    /// whose rows are costly ([`crate::coalesce`]).
    pub coalescer: Option<Arc<Coalescer>>,
    /// What recipe matching needs, formed at the version's first match (or why it cannot be).
    pub forward: OnceLock<Result<Arc<Matching>, String>>,
    /// The successor instrument's state at this version, when the model declares one and has
    /// learnt from it or been given it.
    pub successor: Option<Arc<Serving>>,
}

impl CachedModel {
    pub fn new(id: i64, spec: ModelSpec, version: i64, state: Option<Arc<ModelState>>) -> Self {
        let predictor = state.as_deref().map(|s| Arc::new(Predictor::new(s)));
        Self::prepared(id, spec, version, state.zip(predictor))
    }

    /// [`Self::new`] with the state's predictor already formed.
    pub fn prepared(
        id: i64,
        spec: ModelSpec,
        version: i64,
        state: Option<(Arc<ModelState>, Arc<Predictor>)>,
    ) -> Self {
        let (state, predictor) = state.unzip();
        for (k, why) in predictor.iter().flat_map(|p| p.unaveraged()) {
            tracing::warn!(
                model = %spec.name,
                version,
                output = spec.outputs.get(*k).map_or("?", String::as_str),
                error = %why,
                "the output's model average could not be formed: it predicts by its own posterior alone"
            );
        }
        Self {
            id,
            config: spec.config(),
            spec,
            version,
            coalescer: predictor.as_ref().and_then(Coalescer::for_predictor),
            predictor,
            forward: OnceLock::new(),
            state,
            successor: None,
        }
    }

    /// The same, with the version's successor instrument state.
    pub fn with_succession(mut self, succession: Option<Arc<Serving>>) -> Self {
        self.successor = succession;
        self
    }

    /// What orders the states a name has had: the model's id, its version, and how far its
    /// specification has grown (an untrained model gains outputs or features at version 0).
    fn order(&self) -> (i64, i64, usize) {
        (self.id, self.version, growth(&self.spec))
    }
}

/// How many outputs and named features a specification has: it only grows.
fn growth(spec: &ModelSpec) -> usize {
    spec.outputs.len() + spec.features.len()
}

/// A version's forward map, and the colour of spectra on its bands when they cover the visible
/// range.
#[derive(Debug)]
pub struct Matching {
    pub map: ForwardMap,
    pub colorimeter: Option<Colorimeter>,
}

/// A version's succession as predict and match use it: the map to the old instrument's grid
/// formed at the version's first successor request, and what matching on the successor's own
/// model needs, at its first (or why either cannot be).
#[derive(Debug)]
pub struct Serving {
    pub succession: Succession,
    map: OnceLock<Result<Option<TransferMap>, String>>,
    own: OnceLock<Option<Predictor>>,
    pub forward: OnceLock<Result<Arc<Matching>, String>>,
}

impl Serving {
    pub fn new(succession: Succession) -> Self {
        Self {
            succession,
            map: OnceLock::new(),
            own: OnceLock::new(),
            forward: OnceLock::new(),
        }
    }

    /// What predictions need of the successor's own model, once it has one.
    pub fn own_predictor(&self) -> Option<&Predictor> {
        self.own
            .get_or_init(|| self.succession.own_predictor())
            .as_ref()
    }

    /// The map to `old_grid` ([`Succession::map`]): `None` before its first pairs or once the
    /// old path retired.
    pub fn map(&self, old_grid: &Grid) -> Result<Option<&TransferMap>, String> {
        self.map
            .get_or_init(|| {
                self.succession
                    .map(old_grid)
                    .map_err(|e| format!("the map to the old instrument cannot be formed: {e}"))
            })
            .as_ref()
            .map(Option::as_ref)
            .map_err(Clone::clone)
    }
}

/// How long a request on a model the cache holds untrained waits for the store to say whether
/// it has been trained since: a lookup of one row by key, which a reachable store answers in
/// milliseconds.
const UNTRAINED_CHECK: Duration = Duration::from_millis(500);

/// Model ids only grow (an identity column), and so do a model's versions and its specification,
/// so `(id, version, growth)` orders every state a name has ever had: a put that is not newer than what the cache holds is stale and ignored, and a
/// deleted id is remembered so a late put (a fold that committed just before the delete)
/// cannot bring it back.
#[derive(Debug, Default)]
pub struct PosteriorCache {
    inner: RwLock<Inner>,
    /// What the cached models' coalescers answered, over every version.
    coalesced: Arc<Tally>,
    /// Per model, held while its state is read and decoded: requests and the follower that
    /// find the same version missing decode it once.
    loading: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>,
}

#[derive(Debug, Default)]
struct Inner {
    models: HashMap<String, Arc<CachedModel>>,
    deleted: HashSet<i64>,
}

impl PosteriorCache {
    /// The counts of the small predictions the cached models' coalescers answered together.
    pub fn coalesced(&self) -> &Arc<Tally> {
        &self.coalesced
    }

    pub fn get(&self, name: &str) -> Option<Arc<CachedModel>> {
        self.read().models.get(name).cloned()
    }

    /// Every cached model.
    pub fn models(&self) -> Vec<Arc<CachedModel>> {
        self.read().models.values().cloned().collect()
    }

    /// Every model's name and served version, sorted by name.
    pub fn versions(&self) -> Vec<(String, i64)> {
        let mut v: Vec<_> = self
            .read()
            .models
            .iter()
            .map(|(n, m)| (n.clone(), m.version))
            .collect();
        v.sort();
        v
    }

    /// Puts a model unless the cache already holds the same or a newer state under its name,
    /// or the model was deleted.
    pub fn put(&self, model: CachedModel) {
        let mut inner = self.write();
        if inner.deleted.contains(&model.id) {
            return;
        }
        let name = model.spec.name.as_str().to_owned();
        let newer = inner
            .models
            .get(&name)
            .is_none_or(|old| model.order() > old.order());
        if newer {
            inner.models.insert(name, Arc::new(model));
        }
    }

    /// Forgets a deleted model for good.
    pub fn remove(&self, id: i64) {
        let mut inner = self.write();
        inner.deleted.insert(id);
        inner.models.retain(|_, m| m.id != id);
        drop(inner);
        self.loaders().remove(&id);
    }

    /// Model `id`'s loading lock.
    fn loader(&self, id: i64) -> Arc<tokio::sync::Mutex<()>> {
        self.loaders().entry(id).or_default().clone()
    }

    fn loaders(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Arc<tokio::sync::Mutex<()>>>> {
        // The map is changed by single inserts and removes: consistent after a panic elsewhere.
        self.loading.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the cache holds model `id` at `version` of `spec`, or a later state.
    fn holds(&self, id: i64, spec: &ModelSpec, version: i64) -> bool {
        self.get(spec.name.as_str())
            .is_some_and(|m| m.order() >= (id, version, growth(spec)))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        // Every write is one insert or remove, so a lock poisoned by a panic elsewhere still
        // guards a consistent map.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Brings every model up to the database's current version and forgets deleted ones. A
    /// model that cannot be loaded (a corrupt state) is logged and skipped: the others are
    /// still served.
    pub async fn sync_all(&self, store: &Store) -> Result<(), StoreError> {
        let heads = store.heads().await?;
        let live: HashSet<i64> = heads.iter().map(|h| h.id).collect();
        let stale: Vec<i64> = {
            let inner = self.read();
            // Cached models missing from the list: deleted, or created after the list was read.
            // `sync_model` tells which, from the database.
            let missing = inner
                .models
                .values()
                .map(|m| m.id)
                .filter(|id| !live.contains(id));
            let behind = heads
                .iter()
                .filter(|h| {
                    inner
                        .models
                        .get(&h.name)
                        .is_none_or(|m| (m.id, m.version) < (h.id, h.version))
                })
                .map(|h| h.id);
            missing.chain(behind).collect()
        };
        for id in stale {
            match self.sync_model(store, id).await {
                Ok(()) => {}
                Err(e @ StoreError::Unavailable(_)) => return Err(e),
                Err(e) => tracing::error!(error = %e, model_id = id, "cache: cannot load model"),
            }
        }
        Ok(())
    }

    /// Loads one model's current version (or forgets it if it no longer exists).
    /// The cached model, or, when this replica has not heard of it yet (it was just created
    /// through another replica), the database's. `None` when there is no such model.
    pub async fn get_or_load(
        &self,
        store: &Store,
        name: &str,
    ) -> Result<Option<Arc<CachedModel>>, StoreError> {
        if let Some(model) = self.get(name) {
            return Ok(Some(model));
        }
        let Ok(name) = ModelName::parse(name) else {
            return Ok(None);
        };
        let Some(record) = store.model(&name).await? else {
            return Ok(None);
        };
        self.sync_model(store, record.id).await?;
        Ok(self.get(name.as_str()))
    }

    /// The model named `name` to answer from ([`Self::get_or_load`]); where the cache holds it
    /// untrained, the store's current version of it: a first fit committed a moment ago (by
    /// another replica, whose version this one's follower is still reading) is served, not
    /// answered as "not trained". Where the store cannot say, the cached model answers, as it
    /// would without the database.
    pub async fn serving(
        &self,
        store: &Store,
        name: &str,
    ) -> Result<Option<Arc<CachedModel>>, StoreError> {
        let Some(model) = self.get_or_load(store, name).await? else {
            return Ok(None);
        };
        if model.state.is_some() {
            return Ok(Some(model));
        }
        // A store that does not answer at once (down, or its pool taken) is not waited for:
        // the cached model answers, as it would without the database.
        let head = tokio::time::timeout(UNTRAINED_CHECK, store.model_head(model.id)).await;
        let synced = match head {
            Err(_) => Err("the store did not answer in time".to_owned()),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(None)) => {
                self.remove(model.id);
                return Ok(None);
            }
            Ok(Ok(Some((spec, version)))) => self
                .catch_up(store, model.id, &spec, version)
                .await
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = synced {
            tracing::debug!(error = %e, model = %model.spec.name, "an untrained model's version not read");
            return Ok(Some(model));
        }
        Ok(Some(
            self.get(model.spec.name.as_str())
                .filter(|synced| synced.id == model.id)
                .unwrap_or(model),
        ))
    }

    pub async fn sync_model(&self, store: &Store, id: i64) -> Result<(), StoreError> {
        // The version first: a fold in this process has usually put it in the cache already,
        // and a wide model's state is tens of megabytes to read and throw away.
        match store.model_head(id).await? {
            None => {
                self.remove(id);
                Ok(())
            }
            Some((spec, version)) => self.catch_up(store, id, &spec, version).await,
        }
    }

    /// Reads and decodes model `id`'s current state unless the cache holds `version` of `spec`
    /// (its head, just read) or later, one reader at a time per model.
    async fn catch_up(
        &self,
        store: &Store,
        id: i64,
        spec: &ModelSpec,
        version: i64,
    ) -> Result<(), StoreError> {
        if self.holds(id, spec, version) {
            return Ok(());
        }
        let loader = self.loader(id);
        let _one_at_a_time = loader.lock().await;
        // Read meanwhile by the one this waited for.
        if self.holds(id, spec, version) {
            return Ok(());
        }
        let Some((spec, version, blob)) = store.current_state(id).await? else {
            self.remove(id);
            return Ok(());
        };
        if self.holds(id, &spec, version) {
            return Ok(());
        }
        let model = match blob {
            None => CachedModel::new(id, spec, version, None),
            // Decoding a state and forming its predictor are CPU work: a 700-band model's take
            // a large part of a second.
            Some(blob) => tokio::task::spawn_blocking(move || {
                let (state, succession) =
                    decode_version(&blob).map_err(|e| StoreError::CorruptState {
                        model: spec.name.to_string(),
                        version,
                        reason: e.to_string(),
                    })?;
                Ok::<_, StoreError>(
                    CachedModel::new(id, spec, version, Some(Arc::new(state)))
                        .with_succession(succession.map(|s| Arc::new(Serving::new(s)))),
                )
            })
            .await
            .map_err(|e| StoreError::Corrupt(format!("decoder task: {e}")))??,
        };
        self.put(model);
        Ok(())
    }
}

/// Keeps `cache` and `keys` current until `shutdown`: a full sync at start and every `poll`, a
/// sync of one model whenever a notification names it, of the keys when they change, and of
/// everything when notifications may have been missed. While the database is unavailable the
/// cache serves what it holds, and the follower tries again every `max_backoff`, or as soon as
/// the process's listener is back.
pub async fn follow(
    cache: Arc<PosteriorCache>,
    keys: Arc<KeyRing>,
    store: Store,
    notifications: Arc<Notifications>,
    poll: Duration,
    max_backoff: Duration,
    shutdown: CancellationToken,
) {
    // Subscribed before syncing, so no version written meanwhile is missed.
    let mut listener = notifications.subscribe(&[Topic::Models, Topic::Keys]);
    let mut reachable = sync_everything(&cache, &keys, &store, "sync").await;
    let mut ticks = tokio::time::interval(poll);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        if !reachable {
            // The process's listener probes the database and says when it is back;
            // meanwhile try again now and then.
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = listener.recv() => {}
                _ = tokio::time::sleep(max_backoff) => {}
            }
            reachable = sync_everything(&cache, &keys, &store, "resync").await;
            continue;
        }
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {
                reachable = sync_everything(&cache, &keys, &store, "periodic sync").await;
                continue;
            }
            notification = listener.recv() => match notification {
                Some(n) if n.topic == Topic::Keys => sync_keys(&keys, &store)
                    .await
                    .inspect_err(|e| tracing::warn!(error = %e, "cache: API key sync failed")),
                Some(n) => {
                    let Some(id) = n.model_id else { continue };
                    cache.sync_model(&store, id).await.inspect_err(|e| {
                        tracing::warn!(error = %e, model_id = id, "cache: sync failed");
                    })
                }
                None => {
                    reachable = sync_everything(&cache, &keys, &store, "resync").await;
                    continue;
                }
            },
        };
        reachable = !matches!(outcome, Err(StoreError::Unavailable(_)));
    }
}

/// Syncs every model and the API keys, logging what fails; `false` when the database was
/// unavailable (the keys are not tried then).
async fn sync_everything(
    cache: &PosteriorCache,
    keys: &KeyRing,
    store: &Store,
    what: &str,
) -> bool {
    if let Err(e) = cache.sync_all(store).await {
        tracing::warn!(error = %e, "cache: {what} of the models failed");
        if matches!(e, StoreError::Unavailable(_)) {
            return false;
        }
    }
    if let Err(e) = sync_keys(keys, store).await {
        tracing::warn!(error = %e, "cache: {what} of the API keys failed");
        return !matches!(e, StoreError::Unavailable(_));
    }
    true
}

async fn sync_keys(keys: &KeyRing, store: &Store) -> Result<(), StoreError> {
    if keys.is_enforced() {
        keys.sync(store).await
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(outputs: &[&str]) -> ModelSpec {
        ModelSpec::parse(&json!({"name": "lab", "features": ["r400"], "outputs": outputs}))
            .expect("a valid specification")
    }

    fn outputs(cache: &PosteriorCache) -> usize {
        cache.get("lab").expect("cached").spec.outputs.len()
    }

    /// An untrained model grows at version 0: the grown specification replaces the cached one,
    /// and a stale read of the smaller one (a sync that read the database before) does not
    /// bring it back.
    #[test]
    fn a_grown_specification_replaces_the_cached_one_and_a_stale_one_does_not() {
        let cache = PosteriorCache::default();
        cache.put(CachedModel::new(1, spec(&["red"]), 0, None));
        cache.put(CachedModel::new(1, spec(&["red", "blue"]), 0, None));
        assert_eq!(outputs(&cache), 2);
        cache.put(CachedModel::new(1, spec(&["red"]), 0, None));
        assert_eq!(outputs(&cache), 2);
        // A later version wins; an older one does not, whatever its specification.
        cache.put(CachedModel::new(1, spec(&["red", "blue"]), 1, None));
        cache.put(CachedModel::new(1, spec(&["red", "blue", "navy"]), 0, None));
        assert_eq!(cache.get("lab").expect("cached").version, 1);
        assert_eq!(outputs(&cache), 2);
    }
}
