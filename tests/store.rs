//! The store's conformance suite: every promise of `mordant::store::Backend`, checked the same
//! way on both backends (a fresh PostgreSQL database, a fresh SQLite file) through the trait
//! alone. The service above the store relies on exactly these.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mordant::auth::Scope;
use mordant::config::DatabaseSettings;
use mordant::domain::{
    Body, ContentHash, EncodedBatch, ModelName, ModelSpec, NewBatch, row_fields,
};
use mordant::store::{
    BatchStatus, BatchSurprise, ModelLock, Notification, QueueRead, Review, StateBlob, Store,
    StoreError, Subscription, Topic, VersionOrigin,
};
use serde_json::json;
use sqlx::Connection;

#[path = "support/database.rs"]
mod test_database;

use test_database::{TestDatabase, fresh_postgres_database, fresh_sqlite_database};

/// A store on an empty database of its own, removed on drop (the store closes first).
struct TestStore {
    store: Store,
    database: TestDatabase,
}

fn settings(url: String) -> DatabaseSettings {
    DatabaseSettings {
        url,
        path: String::new(),
        max_connections: 8,
        acquire_timeout_secs: 5,
        startup_timeout_secs: 5,
        full_state_every: 3,
    }
}

impl TestStore {
    async fn open(database: TestDatabase) -> Self {
        let store = Store::open(&settings(database.url.clone()))
            .await
            .expect("open");
        store.migrate().await.expect("migrate");
        Self { store, database }
    }

    async fn postgres() -> Self {
        Self::open(fresh_postgres_database().await).await
    }

    async fn sqlite() -> Self {
        Self::open(fresh_sqlite_database()).await
    }
}

/// Runs each listed check on both backends: `<check>::postgres` and `<check>::sqlite`.
macro_rules! conformance {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let db = super::TestStore::postgres().await;
                super::$check(&db.store).await;
                db.store.close().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let db = super::TestStore::sqlite().await;
                super::$check(&db.store).await;
                db.store.close().await;
            }
        }
    )*};
}

conformance!(
    models_are_created_read_listed_and_deleted,
    a_batch_is_stored_once_and_its_id_never_reused_for_other_content,
    a_batch_stored_with_the_sign_of_zero_is_replayed_by_its_retry,
    concurrent_requests_with_one_batch_id_store_it_once,
    a_burst_of_batches_is_answered_and_stored_batch_by_batch,
    a_fold_writes_everything_at_commit_or_nothing,
    a_folds_surprises_are_written_together_and_hold_only_queued_batches,
    claims_skip_held_and_unready_models_and_follow_arrival_order,
    restore_locks_and_deletion_wait_for_a_held_lock,
    notifications_announce_committed_changes_only,
    keys_are_created_listed_and_revoked,
    concurrent_ingestion_and_folding_fold_each_batch_once_in_arrival_order,
    folds_between_full_states_keep_their_digest_and_batches,
    a_fold_that_cannot_be_replayed_keeps_its_state_and_folded_rows_read_back_in_order,
    retention_purges_the_rows_of_settled_batches_only,
    a_first_fit_reads_the_raw_rows_of_the_batches_it_learns_from_and_no_more,
    a_fold_reads_a_first_fits_prefix_whole_then_as_many_bytes_as_it_may,
    a_released_batch_is_queued_behind_the_batches_already_queued,
    a_model_created_while_another_request_deletes_it_is_answered_as_created,
);

fn spec(name: &str, first_fit_rows: u64) -> ModelSpec {
    ModelSpec::parse(&json!({
        "name": name, "features": ["f1", "f2"], "outputs": ["o"],
        "first_fit_rows": first_fit_rows,
    }))
    .expect("valid spec")
}

fn name(name: &str) -> ModelName {
    ModelName::parse(name).expect("valid name")
}

fn batch(spec: &ModelSpec, id: &str, rows: usize, seed: f64) -> NewBatch {
    let x: Vec<[f64; 2]> = (0..rows).map(|i| [seed, i as f64]).collect();
    let y: Vec<[f64; 1]> = (0..rows).map(|i| [seed * i as f64]).collect();
    let body = json!({"batch_id": id, "x": x, "y": y}).to_string();
    let body = Body::parse(body.as_bytes(), &row_fields(spec), usize::MAX).expect("JSON");
    NewBatch::parse(body, spec, None).expect("valid batch")
}

/// A state as the store sees it: opaque bytes and their digest.
fn blob(bytes: &[u8]) -> StateBlob {
    StateBlob::new(bytes.to_vec())
}

/// Stores a batch; the statistics are opaque to the store, so any bytes do.
async fn ingest(store: &Store, model_id: i64, batch: &NewBatch) -> mordant::store::Ingested {
    let statistics = format!("stats of {}", batch.batch_id.as_str()).into_bytes();
    store
        .insert_batch(model_id, batch, &batch.encode(), &statistics)
        .await
        .expect("insert batch")
}

/// Folds a claimed model's whole queue into one new version (the state is opaque to the
/// store); how many batches that was.
async fn fold_queue(mut lock: mordant::store::ModelLock) -> usize {
    let queued = lock.queued_batches().await.unwrap();
    if queued.is_empty() {
        return 0;
    }
    let seqs: Vec<i64> = queued.iter().map(|b| b.seq).collect();
    write_fold(&mut lock, 0.0, &seqs).await;
    lock.commit().await.unwrap();
    seqs.len()
}

/// Writes the locked model's next version as a fold of `folds`, with a small placeholder state:
/// its number.
async fn write_fold(lock: &mut ModelLock, observations: f64, folds: &[i64]) -> i64 {
    let (version, _) = lock
        .write_version(
            VersionOrigin::Fold,
            None,
            observations,
            &[Some(1.0)],
            &blob(b"s"),
            folds,
            true,
        )
        .await
        .unwrap();
    version
}

async fn create(store: &Store, spec: &ModelSpec) -> i64 {
    store.create_model(spec).await.expect("create model").id
}

async fn models_are_created_read_listed_and_deleted(store: &Store) {
    let b = store.create_model(&spec("beta", 3)).await.unwrap();
    let a = store.create_model(&spec("alpha", 3)).await.unwrap();
    assert_eq!((a.version, a.observations, a.pending_batches), (0, 0.0, 0));
    assert_eq!(a.spec, spec("alpha", 3));
    assert_ne!(a.id, b.id);
    assert!(matches!(
        store.create_model(&spec("alpha", 5)).await,
        Err(StoreError::Conflict(_))
    ));

    let listed: Vec<String> = store
        .list_models()
        .await
        .unwrap()
        .iter()
        .map(|m| m.spec.name.to_string())
        .collect();
    assert_eq!(listed, ["alpha", "beta"]);
    assert_eq!(store.model(&name("beta")).await.unwrap().unwrap().id, b.id);
    assert_eq!(
        store.model_by_id(a.id).await.unwrap().unwrap().spec.name,
        name("alpha")
    );
    assert!(store.model(&name("gamma")).await.unwrap().is_none());
    let (spec_a, version, state) = store.current_state(a.id).await.unwrap().unwrap();
    assert_eq!((spec_a, version, state), (spec("alpha", 3), 0, None));
    assert_eq!(
        store.model_head(a.id).await.unwrap(),
        Some((spec("alpha", 3), 0))
    );
    let mut heads = store.heads().await.unwrap();
    heads.sort_by_key(|h| h.id);
    assert_eq!(heads.len(), 2);

    assert_eq!(
        store.delete_model(&name("alpha")).await.unwrap(),
        Some(a.id)
    );
    assert_eq!(store.delete_model(&name("alpha")).await.unwrap(), None);
    assert!(store.model_by_id(a.id).await.unwrap().is_none());
    assert!(store.current_state(a.id).await.unwrap().is_none());
    assert!(store.model_head(a.id).await.unwrap().is_none());
    // A new model of the same name is a new model.
    let again = store.create_model(&spec("alpha", 3)).await.unwrap();
    assert_ne!(again.id, a.id, "a deleted model's id is never reused");
}

/// Asserts that storing `batch` is refused as a conflict with the batch of its id.
async fn assert_conflict(store: &Store, model_id: i64, batch: &NewBatch) {
    let conflict = store
        .insert_batch(model_id, batch, &batch.encode(), b"stats")
        .await;
    assert!(
        matches!(conflict, Err(StoreError::Conflict(_))),
        "{conflict:?}"
    );
}

async fn a_batch_is_stored_once_and_its_id_never_reused_for_other_content(store: &Store) {
    let spec = spec("lab", 3);
    let id = create(store, &spec).await;
    let first = ingest(store, id, &batch(&spec, "b1", 4, 1.0)).await;
    assert!(!first.replayed);
    assert_eq!(
        (first.batch.batch_id.as_str(), first.batch.status.as_str()),
        ("b1", "queued")
    );
    assert_eq!(first.batch.rows, 4);
    assert!(first.batch.folded_at.is_none() && first.batch.version.is_none());

    let again = ingest(store, id, &batch(&spec, "b1", 4, 1.0)).await;
    assert!(again.replayed);
    assert_eq!(again.batch, first.batch);
    let other = batch(&spec, "b1", 4, 2.0);
    assert_conflict(store, id, &other).await;
    let missing = store
        .insert_batch(id + 1000, &other, &other.encode(), b"stats")
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );

    // Looked up without storing (a retry in a shape the model had before it grew).
    let looked = store
        .replay_batch(id, "b1", &batch(&spec, "b1", 4, 1.0).encode().content_hash)
        .await
        .unwrap()
        .expect("stored");
    assert!(looked.replayed);
    assert_eq!(looked.batch, first.batch);
    let looked = store
        .replay_batch(id, "b1", &other.encode().content_hash)
        .await;
    assert!(matches!(looked, Err(StoreError::Conflict(_))), "{looked:?}");
    let hash = other.encode().content_hash;
    assert!(store.replay_batch(id, "b2", &hash).await.unwrap().is_none());

    assert_eq!(store.batch(id, "b1").await.unwrap(), Some(first.batch));
    assert_eq!(store.batch(id, "b2").await.unwrap(), None);
    ingest(store, id, &batch(&spec, "b2", 2, 3.0)).await;
    let depth = store.queue_depth().await.unwrap();
    assert_eq!(depth.len(), 1);
    assert_eq!((depth[0].batches, depth[0].rows), (2, 6));
    assert_eq!(
        store
            .model(&name("lab"))
            .await
            .unwrap()
            .unwrap()
            .pending_batches,
        2
    );
}

/// Clients retry while their first request is still running: of concurrent requests with one
/// batch id, one stores the batch and the others answer with it (same content) or conflict
/// (other content).
/// A batch holding a `-0` as a release that kept the sign of zero stored it (its bytes and their
/// hash) is replayed by a retry, which now reads `-0` as `0`, whether the insert or the lookup
/// answers it; other content under its id is still a conflict.
async fn a_batch_stored_with_the_sign_of_zero_is_replayed_by_its_retry(store: &Store) {
    let spec = spec("lab", 3);
    let id = create(store, &spec).await;
    let sent = batch(&spec, "z", 3, -0.0);
    let now = sent.encode();
    let signed = now.content_hash.signed_zero.expect("the batch holds -0");
    assert_ne!(signed, now.content_hash.stored);
    let earlier = EncodedBatch {
        x: sent.x.to_signed_le_bytes().into(),
        y: sent.y.to_signed_le_bytes().into(),
        content_hash: ContentHash {
            stored: signed,
            signed_zero: None,
        },
    };
    let first = store
        .insert_batch(id, &sent, &earlier, b"stats")
        .await
        .unwrap();
    assert!(!first.replayed);

    let again = ingest(store, id, &sent).await;
    assert!(again.replayed);
    assert_eq!(again.batch, first.batch);
    let looked = store
        .replay_batch(id, "z", &now.content_hash)
        .await
        .unwrap()
        .expect("stored");
    assert!(looked.replayed);
    let other = batch(&spec, "z", 3, 0.5);
    assert_conflict(store, id, &other).await;
}

async fn concurrent_requests_with_one_batch_id_store_it_once(store: &Store) {
    const REQUESTS: usize = 8;
    let spec = Arc::new(spec("lab", 3));
    let id = create(store, &spec).await;
    for round in 0..5 {
        let batch_id = format!("retried-{round}");
        let start = Arc::new(tokio::sync::Barrier::new(REQUESTS));
        let tasks: Vec<_> = (0..REQUESTS)
            .map(|r| {
                let (store, spec, start, batch_id) =
                    (store.clone(), spec.clone(), start.clone(), batch_id.clone());
                // Odd requests carry other content under the same id.
                let b = batch(&spec, &batch_id, 500, (round * 10 + r % 2) as f64);
                tokio::spawn(async move {
                    start.wait().await;
                    let statistics = vec![r as u8; 64];
                    let result = store.insert_batch(id, &b, &b.encode(), &statistics).await;
                    (r % 2, result)
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        let stored: Vec<_> = outcomes
            .iter()
            .filter(|(_, r)| matches!(r, Ok(i) if !i.replayed))
            .collect();
        assert_eq!(stored.len(), 1, "round {round}: stored once");
        let winner = stored[0].0;
        for (content, result) in &outcomes {
            match result {
                Ok(ingested) => {
                    assert_eq!(*content, winner, "round {round}: other content accepted");
                    assert_eq!(ingested.batch.batch_id, batch_id);
                }
                Err(StoreError::Conflict(_)) => {
                    assert_ne!(*content, winner, "round {round}: same content refused")
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        }
    }
    let depth = store.queue_depth().await.unwrap();
    assert_eq!((depth[0].batches, depth[0].rows), (5, 2500));
}

/// Many batches at once, for two models, one of them deleted: each is answered as it would
/// be alone (stored, a replay, a conflict, its model gone), and each stored batch keeps its own
/// rows, whether stored with its statistics or as rows only (the embedded store commits such a
/// burst together).
async fn a_burst_of_batches_is_answered_and_stored_batch_by_batch(store: &Store) {
    let spec = Arc::new(spec("lab", 3));
    let id = create(store, &spec).await;
    let gone = create(store, &self::spec("gone", 3)).await;
    assert_eq!(store.delete_model(&name("gone")).await.unwrap(), Some(gone));
    // (model, batch id, seed, rows, with statistics); "b0" comes three times with one content
    // and twice with another: whichever arrives first is stored, the posts of its content are
    // replays, the others conflicts.
    const OTHER: f64 = 50.0;
    let mut posts: Vec<(i64, String, f64, usize, bool)> = (0..12)
        .map(|i| (id, format!("b{i}"), i as f64, 2 + i % 3, i % 2 == 0))
        .collect();
    posts.extend((0..2).map(|_| (id, "b0".to_owned(), 0.0, 2, true)));
    posts.extend((0..2).map(|_| (id, "b0".to_owned(), OTHER, 2, true)));
    posts.extend((0..4).map(|i| (gone, format!("g{i}"), i as f64, 2, true)));
    let start = Arc::new(tokio::sync::Barrier::new(posts.len()));
    let tasks: Vec<_> = posts
        .iter()
        .cloned()
        .map(|(model, batch_id, seed, rows, with_statistics)| {
            let (store, spec, start) = (store.clone(), spec.clone(), start.clone());
            let b = batch(&spec, &batch_id, rows, seed);
            tokio::spawn(async move {
                start.wait().await;
                let statistics = if with_statistics {
                    format!("stats of {batch_id}").into_bytes()
                } else {
                    Vec::new()
                };
                store
                    .insert_batch(model, &b, &b.encode(), &statistics)
                    .await
            })
        })
        .collect();
    let mut stored = 0;
    // The seeds of the posts of "b0" accepted and refused.
    let (mut accepted, mut refused) = (Vec::new(), Vec::new());
    for (task, (model, batch_id, seed, _, _)) in tasks.into_iter().zip(&posts) {
        match task.await.unwrap() {
            Ok(ingested) => {
                assert_eq!(*model, id);
                assert_eq!(&ingested.batch.batch_id, batch_id);
                stored += usize::from(!ingested.replayed);
                if batch_id == "b0" {
                    accepted.push(*seed);
                }
            }
            Err(StoreError::Conflict(_)) if batch_id == "b0" => refused.push(*seed),
            Err(StoreError::NotFound(_)) => assert_eq!(*model, gone),
            Err(e) => panic!("{batch_id}: {e}"),
        }
    }
    assert_eq!(stored, 12, "each batch of the live model stored once");
    let b0 = accepted[0];
    assert!(accepted.iter().all(|&s| s == b0), "{accepted:?}");
    assert!(refused.iter().all(|&s| s != b0), "{refused:?}");
    assert_eq!(accepted.len(), if b0 == OTHER { 2 } else { 3 });
    assert_eq!(accepted.len() + refused.len(), 5);
    // The seed each stored batch was made from.
    let seed = |batch_id: &str| -> (usize, f64) {
        let i: usize = batch_id[1..].parse().unwrap();
        (i, if i == 0 { b0 } else { i as f64 })
    };

    let dump = store.dump_model(id).await.unwrap().unwrap();
    assert_eq!(dump.batches.len(), 12);
    for b in &dump.batches {
        let (i, s) = seed(&b.batch_id);
        let encoded = batch(&spec, &b.batch_id, 2 + i % 3, s).encode();
        assert_eq!(
            (&b.x[..], &b.y[..]),
            (&encoded.x[..], &encoded.y[..]),
            "{}",
            b.batch_id
        );
        assert_eq!(b.statistics.is_empty(), i % 2 == 1, "{}", b.batch_id);
    }
    // What a fold reads: the statistics, or the rows of a batch stored without them.
    let mut lock = store.lock_model(&name("lab")).await.unwrap().unwrap();
    let queued = lock.queued_batches().await.unwrap();
    assert_eq!(queued.len(), 12);
    for q in &queued {
        let (i, s) = seed(&q.batch_id);
        let encoded = batch(&spec, &q.batch_id, 2 + i % 3, s).encode();
        if i % 2 == 1 {
            assert_eq!(q.rows_x.as_deref(), Some(&encoded.x[..]), "{}", q.batch_id);
            assert_eq!(q.rows_y.as_deref(), Some(&encoded.y[..]), "{}", q.batch_id);
        } else {
            assert_eq!((&q.rows_x, &q.rows_y), (&None, &None), "{}", q.batch_id);
        }
    }
    drop(lock);
}

async fn a_fold_writes_everything_at_commit_or_nothing(store: &Store) {
    let spec = spec("lab", 3);
    let id = create(store, &spec).await;
    ingest(store, id, &batch(&spec, "b1", 4, 1.0)).await;
    ingest(store, id, &batch(&spec, "b2", 4, 2.0)).await;

    // Everything written in a lock that is dropped is gone.
    {
        let mut lock = store.claim_fold(&[]).await.unwrap().expect("work");
        assert_eq!((lock.model_id, lock.version), (id, 0));
        let queued = lock.queued_batches().await.unwrap();
        let ids: Vec<&str> = queued.iter().map(|b| b.batch_id.as_str()).collect();
        assert_eq!(ids, ["b1", "b2"]);
        assert_eq!(queued[0].statistics, b"stats of b1");
        assert!(queued[0].seq < queued[1].seq);
        lock.write_version(
            VersionOrigin::Fold,
            None,
            4.0,
            &[Some(0.5)],
            &blob(b"state 1"),
            &[queued[0].seq],
            true,
        )
        .await
        .unwrap();
        lock.mark_rejected(queued[1].seq, "bad").await.unwrap();
    }
    let model = store.model_by_id(id).await.unwrap().unwrap();
    assert_eq!((model.version, model.pending_batches), (0, 2));
    assert!(store.versions(id).await.unwrap().is_empty());
    assert_eq!(
        store.batch(id, "b1").await.unwrap().unwrap().status,
        BatchStatus::Queued
    );

    // Committed, it is all there (the dropped claim's rollback may come a moment later).
    let mut lock = claim_eventually(store, &[]).await;
    let queued = lock.queued_batches().await.unwrap();
    let (v, created_at) = lock
        .write_version(
            VersionOrigin::Fold,
            None,
            4.0,
            &[Some(0.5), None],
            &blob(b"state 1"),
            &[queued[0].seq],
            true,
        )
        .await
        .unwrap();
    assert_eq!((v, lock.version), (1, 1));
    lock.mark_rejected(queued[1].seq, "bad").await.unwrap();
    lock.commit().await.unwrap();

    let model = store.model_by_id(id).await.unwrap().unwrap();
    assert_eq!(
        (model.version, model.observations, model.pending_batches),
        (1, 4.0, 0)
    );
    let versions = store.versions(id).await.unwrap();
    assert_eq!(versions.len(), 1);
    let version = &versions[0];
    assert_eq!(
        (
            version.version,
            version.origin.as_str(),
            version.restored_from
        ),
        (1, "fold", None)
    );
    assert_eq!(version.noise_variances, [Some(0.5), None]);
    assert_eq!(version.batches, ["b1"]);
    assert_eq!(version.observations, 4.0);
    assert!((version.created_at - created_at).num_milliseconds().abs() < 1);
    let b1 = store.batch(id, "b1").await.unwrap().unwrap();
    assert_eq!((b1.status.as_str(), b1.version), ("folded", Some(1)));
    assert!(b1.folded_at.is_some_and(|at| at >= b1.received_at));
    let b2 = store.batch(id, "b2").await.unwrap().unwrap();
    assert_eq!(
        (b2.status.as_str(), b2.error.as_deref(), b2.version),
        ("rejected", Some("bad"), None)
    );
    let (_, current, state) = store.current_state(id).await.unwrap().unwrap();
    assert_eq!((current, state.as_deref()), (1, Some(&b"state 1"[..])));
    assert_eq!(store.model_head(id).await.unwrap().map(|(_, v)| v), Some(1));
    assert!(
        store.claim_fold(&[]).await.unwrap().is_none(),
        "no work left"
    );

    // A restore: a new version, the old one untouched.
    let mut lock = store.lock_model(&name("lab")).await.unwrap().unwrap();
    let stored = lock.stored_state(1).await.unwrap().expect("version 1");
    assert_eq!(
        (
            stored.origin.as_str(),
            stored.blob.as_slice(),
            stored.digest
        ),
        ("fold", &b"state 1"[..], Some(blob(b"state 1").digest))
    );
    assert!(lock.stored_state(7).await.unwrap().is_none());
    lock.write_version(
        VersionOrigin::Restore,
        Some(1),
        4.0,
        &[Some(0.5), None],
        &blob(b"state 1"),
        &[],
        true,
    )
    .await
    .unwrap();
    lock.commit().await.unwrap();
    let versions = store.versions(id).await.unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0], version.clone());
    assert_eq!(
        (versions[1].version, versions[1].origin.as_str()),
        (2, "restore")
    );
    assert_eq!(versions[1].restored_from, Some(1));
    assert!(versions[1].batches.is_empty());
}

/// A stored batch's status and surprise.
async fn surprise(
    store: &Store,
    model_id: i64,
    batch_id: &str,
) -> (BatchStatus, Option<Vec<Option<f64>>>) {
    let batch = store.batch(model_id, batch_id).await.unwrap().unwrap();
    (batch.status, batch.surprise)
}

async fn a_folds_surprises_are_written_together_and_hold_only_queued_batches(store: &Store) {
    let spec = spec("drift", 1);
    let id = create(store, &spec).await;
    for (i, b) in ["b1", "b2", "b3", "b4"].into_iter().enumerate() {
        ingest(store, id, &batch(&spec, b, 2, i as f64)).await;
    }

    let mut lock = store.claim_fold(&[]).await.unwrap().expect("work");
    let queued = lock.queued_batches().await.unwrap();
    let seq = |b: &str| {
        queued
            .iter()
            .find(|q| q.batch_id.as_str() == b)
            .unwrap()
            .seq
    };
    let at = |b: &str, surprise: &'static [Option<f64>], hold: bool| BatchSurprise {
        seq: seq(b),
        surprise,
        hold,
    };
    // Each batch's own values, of different lengths, with gaps; the second held.
    lock.record_surprises(&[
        at("b1", &[Some(0.5), None, Some(-1.25)], false),
        at("b2", &[Some(9.0)], true),
        at("b3", &[None, Some(2.0)], false),
    ])
    .await
    .unwrap();
    lock.record_surprises(&[]).await.unwrap();
    write_fold(&mut lock, 4.0, &[seq("b1"), seq("b3")]).await;
    lock.commit().await.unwrap();

    let b1 = (
        BatchStatus::Folded,
        Some(vec![Some(0.5), None, Some(-1.25)]),
    );
    assert_eq!(surprise(store, id, "b1").await, b1);
    let b2 = (BatchStatus::Held, Some(vec![Some(9.0)]));
    assert_eq!(surprise(store, id, "b2").await, b2);
    let b3 = (BatchStatus::Folded, Some(vec![None, Some(2.0)]));
    assert_eq!(surprise(store, id, "b3").await, b3);
    assert_eq!(surprise(store, id, "b4").await, (BatchStatus::Queued, None));

    // A batch no longer queued keeps its status and its surprise; another model's is not
    // touched.
    let other = create(store, &self::spec("other", 1)).await;
    ingest(store, other, &batch(&spec, "o1", 2, 5.0)).await;
    let o1 = {
        let mut lock = store.lock_model(&name("other")).await.unwrap().unwrap();
        lock.queued_batches().await.unwrap()[0].seq
    };
    let mut lock = store.lock_model(&name("drift")).await.unwrap().unwrap();
    lock.record_surprises(&[
        BatchSurprise {
            seq: o1,
            surprise: &[Some(7.0)],
            hold: true,
        },
        at("b1", &[Some(3.0)], true),
        at("b4", &[], false),
    ])
    .await
    .unwrap();
    lock.commit().await.unwrap();
    assert_eq!(surprise(store, id, "b1").await, b1);
    let b4 = (BatchStatus::Queued, Some(vec![]));
    assert_eq!(surprise(store, id, "b4").await, b4);
    assert_eq!(
        surprise(store, other, "o1").await,
        (BatchStatus::Queued, None)
    );
}

/// A released batch joins the queue behind the batches queued before its release (README,
/// "Drift"), with its rows: it kept its place of arrival, and the next fold learnt it first,
/// against the surprise its reviewer had not seen the queued batches add to, and listed it
/// first, where a replay read it.
async fn a_released_batch_is_queued_behind_the_batches_already_queued(store: &Store) {
    let spec = spec("review", 1);
    let id = create(store, &spec).await;
    ingest(store, id, &batch(&spec, "h", 2, 1.0)).await;
    let mut lock = store.claim_fold(&[]).await.unwrap().expect("work");
    let h = lock.queued_batches().await.unwrap()[0].seq;
    lock.record_surprises(&[BatchSurprise {
        seq: h,
        surprise: &[Some(9.0)],
        hold: true,
    }])
    .await
    .unwrap();
    lock.commit().await.unwrap();
    ingest(store, id, &batch(&spec, "q1", 2, 2.0)).await;
    ingest(store, id, &batch(&spec, "q2", 2, 3.0)).await;

    let released = store.review_batch(id, "h", Review::Release).await.unwrap();
    assert_eq!(released.map(|b| b.status), Some(BatchStatus::Queued));
    let mut lock = store.lock_model(&name("review")).await.unwrap().unwrap();
    let queued = lock
        .queued_for_fold(QueueRead::whole(i64::MAX))
        .await
        .unwrap();
    let ids: Vec<&str> = queued.iter().map(|b| b.batch_id.as_str()).collect();
    assert_eq!(ids, ["q1", "q2", "h"]);
    assert!(queued[2].released && !queued[0].released);
    assert!(
        queued
            .iter()
            .all(|b| b.rows_x.is_some() && b.rows_y.is_some())
    );
    let seqs: Vec<i64> = queued.iter().map(|b| b.seq).collect();
    write_fold(&mut lock, 6.0, &seqs).await;
    lock.commit().await.unwrap();

    let versions = store.versions_after(id, 0, None).await.unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0].batches, ["q1", "q2", "h"]);
    let mut lock = store.lock_model(&name("review")).await.unwrap().unwrap();
    let kept = lock.kept_rows(i64::MAX).await.unwrap();
    assert_eq!(first_inputs(&kept), [2.0, 3.0, 1.0]);
    let folded = lock.folded_batches(1).await.unwrap();
    let ids: Vec<&str> = folded.iter().map(|b| b.batch_id.as_str()).collect();
    assert_eq!(ids, ["q1", "q2", "h"]);
    drop(lock);
    let h = store.batch(id, "h").await.unwrap().unwrap();
    assert_eq!(h.status, BatchStatus::Folded);
    assert_eq!(h.version, Some(1));
}

/// A create that commits is answered with the model it created, whatever a delete racing it
/// does after the commit: the record was read after the commit, and a delete in between made
/// the create answer "not found" (about one create in twenty through two replicas).
async fn a_model_created_while_another_request_deletes_it_is_answered_as_created(store: &Store) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let spec = spec("raced", 1);
    let creating_done = Arc::new(AtomicBool::new(false));
    // Deleters run until the creators are done; each creator until 25 of its creates commit.
    let deleting: Vec<_> = (0..2)
        .map(|_| {
            let (store, done) = (store.clone(), creating_done.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    store.delete_model(&name("raced")).await.unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let creating: Vec<_> = (0..2)
        .map(|_| {
            let (store, spec) = (store.clone(), spec.clone());
            tokio::spawn(async move {
                let mut created = 0;
                for _ in 0..100_000 {
                    match store.create_model(&spec).await {
                        Ok(record) => {
                            assert_eq!(record.spec.name.as_str(), "raced");
                            created += 1;
                            if created == 25 {
                                break;
                            }
                        }
                        Err(StoreError::Conflict(_)) => {}
                        Err(e) => panic!("a create answered {e:?}"),
                    }
                    tokio::task::yield_now().await;
                }
                created
            })
        })
        .collect();
    for task in creating {
        assert_eq!(task.await.unwrap(), 25);
    }
    creating_done.store(true, Ordering::Relaxed);
    for task in deleting {
        task.await.unwrap();
    }
}

/// Ingests two batches and folds them into the next version, whose state is `state {v}`.
async fn fold_two(store: &Store, id: i64, spec: &ModelSpec, v: i64) {
    fold_two_as(store, id, spec, v, true).await;
}

/// Whether each of the model's versions keeps its full state, oldest first.
async fn full_states(store: &Store, id: i64) -> Vec<bool> {
    store
        .versions(id)
        .await
        .unwrap()
        .iter()
        .map(|v| v.full_state)
        .collect()
}

/// [`fold_two`], its version written `replayable` or not.
async fn fold_two_as(store: &Store, id: i64, spec: &ModelSpec, v: i64, replayable: bool) {
    ingest(store, id, &batch(spec, &format!("b{v}a"), 2, v as f64)).await;
    ingest(
        store,
        id,
        &batch(spec, &format!("b{v}b"), 2, v as f64 + 0.5),
    )
    .await;
    let mut lock = claim_eventually(store, &[]).await;
    let seqs: Vec<i64> = lock
        .queued_batches()
        .await
        .unwrap()
        .iter()
        .map(|b| b.seq)
        .collect();
    let state = blob(format!("state {v}").as_bytes());
    let (written, _) = lock
        .write_version(
            VersionOrigin::Fold,
            None,
            4.0 * v as f64,
            &[Some(1.0)],
            &state,
            &seqs,
            replayable,
        )
        .await
        .unwrap();
    assert_eq!(written, v);
    lock.commit().await.unwrap();
}

/// Writes version `from` of `lab` restored as its next version, with `state`.
async fn restore_lab(store: &Store, from: i64, state: &[u8]) {
    let mut lock = store.lock_model(&name("lab")).await.unwrap().unwrap();
    lock.write_version(
        VersionOrigin::Restore,
        Some(from),
        8.0,
        &[Some(1.0)],
        &blob(state),
        &[],
        true,
    )
    .await
    .unwrap();
    lock.commit().await.unwrap();
}

/// The first input of each kept batch's first row (its seed in [`batch`]).
fn first_inputs(kept: &[mordant::store::KeptRows]) -> Vec<f64> {
    kept.iter()
        .map(|k| {
            let x = k.rows_x.as_deref().expect("rows kept");
            f64::from_le_bytes(x[..8].try_into().unwrap())
        })
        .collect()
}

/// The suite's stores keep a full state every 3 versions: once a later version is written, a
/// fold drops its state unless it is the first or its number is a multiple of 3; restores and
/// refits keep theirs, and so does the current version. Every version keeps its digest and
/// lists the batches folded into it in the order they were folded (what a replay reads).
async fn folds_between_full_states_keep_their_digest_and_batches(store: &Store) {
    let spec = spec("lab", 1);
    let id = create(store, &spec).await;
    for v in 1..=7 {
        fold_two(store, id, &spec, v).await;
    }
    restore_lab(store, 2, b"state 8").await;
    fold_two(store, id, &spec, 9).await;
    fold_two(store, id, &spec, 10).await;

    let full = full_states(store, id).await;
    // 1 the first, 3, 6 and 9 multiples of 3, 8 a restore, 10 the current version.
    assert_eq!(
        full,
        [
            true, false, true, false, false, true, false, true, true, true
        ]
    );
    let mut lock = store.lock_model(&name("lab")).await.unwrap().unwrap();
    for v in 1..=10i64 {
        let stored = lock.stored_state(v).await.unwrap().expect("a version");
        let state = format!("state {v}").into_bytes();
        assert_eq!(stored.digest, Some(blob(&state).digest), "version {v}");
        assert_eq!(stored.is_thin(), !full[v as usize - 1], "version {v}");
        if !stored.is_thin() {
            assert_eq!(stored.blob, state, "version {v}");
        }
        if v == 8 {
            assert_eq!(stored.origin, VersionOrigin::Restore);
            assert!(lock.folded_batches(v).await.unwrap().is_empty());
            continue;
        }
        let folded = lock.folded_batches(v).await.unwrap();
        let ids: Vec<&str> = folded.iter().map(|b| b.batch_id.as_str()).collect();
        assert_eq!(ids, [format!("b{v}a"), format!("b{v}b")], "version {v}");
        assert_eq!(folded[0].statistics, format!("stats of b{v}a").into_bytes());
    }
    drop(lock);
    let (_, current, state) = store.current_state(id).await.unwrap().unwrap();
    assert_eq!((current, state), (10, Some(b"state 10".to_vec())));
}

/// A fold written as not replayable (its refit read the rows behind it) keeps no digest and so
/// its full state when later versions thin the folds around it; the raw rows of every folded
/// batch read back in the order they were folded, without the queue's.
async fn a_fold_that_cannot_be_replayed_keeps_its_state_and_folded_rows_read_back_in_order(
    store: &Store,
) {
    let spec = spec("lab", 1);
    let id = create(store, &spec).await;
    for v in 1..=5i64 {
        fold_two_as(store, id, &spec, v, v != 2).await;
    }
    ingest(store, id, &batch(&spec, "queued", 2, 9.0)).await;
    let full = full_states(store, id).await;
    // 2 cannot be replayed; 4 is thinned as any fold between full states is.
    assert_eq!(full, [true, true, true, false, true]);
    let mut lock = store.lock_model(&name("lab")).await.unwrap().unwrap();
    let second = lock.stored_state(2).await.unwrap().expect("version 2");
    assert_eq!((second.digest, second.blob), (None, b"state 2".to_vec()));
    // Up to 7 rows: the batches after the fourth (8 rows before them) come without theirs.
    let bounded = lock.kept_rows(7).await.unwrap();
    let kept_of = |k: &mordant::store::KeptRows| k.rows_x.is_some();
    assert_eq!(
        bounded.iter().map(kept_of).collect::<Vec<_>>(),
        [
            true, true, true, true, false, false, false, false, false, false
        ]
    );
    let kept = lock.kept_rows(i64::MAX).await.unwrap();
    assert!(kept.iter().all(|k| k.rows == 2));
    let folded: Vec<f64> = (1..=5).flat_map(|v| [v as f64, v as f64 + 0.5]).collect();
    assert_eq!(first_inputs(&kept), folded);
    drop(lock);
    // Version 2 restored as 6: the batches of versions 3 to 5 are not its state's. Version 7
    // folds the queued batch and two more after it.
    restore_lab(store, 2, b"state 2").await;
    fold_two_as(store, id, &spec, 7, true).await;
    let mut lock = store.lock_model(&name("lab")).await.unwrap().unwrap();
    let kept = lock.kept_rows(i64::MAX).await.unwrap();
    assert_eq!(first_inputs(&kept), [1.0, 1.5, 2.0, 2.5, 9.0, 7.0, 7.5]);
    // The budget counts the state's rows only: the fourth of its batches follows 6.
    let bounded = lock.kept_rows(7).await.unwrap();
    assert_eq!(
        bounded.iter().map(kept_of).collect::<Vec<_>>(),
        [true, true, true, true, false, false, false]
    );
}

/// A purge takes the rows of batches received before its cutoff that are folded or rejected
/// and have statistics, at most `limit` per call, oldest first, once; queued batches and
/// batches kept as their rows (no statistics) keep them; the batches' records stay.
async fn retention_purges_the_rows_of_settled_batches_only(store: &Store) {
    let spec = spec("lab", 1);
    let id = create(store, &spec).await;
    for b in ["b1", "b2", "b3"] {
        ingest(store, id, &batch(&spec, b, 2, 1.0)).await;
    }
    let as_rows = batch(&spec, "b4", 2, 2.0);
    store
        .insert_batch(id, &as_rows, &as_rows.encode(), b"")
        .await
        .expect("insert");
    let mut lock = claim_eventually(store, &[]).await;
    let queued = lock.queued_batches().await.unwrap();
    let v = write_fold(
        &mut lock,
        6.0,
        &[queued[0].seq, queued[1].seq, queued[3].seq],
    )
    .await;
    lock.mark_rejected(queued[2].seq, "bad").await.unwrap();
    lock.commit().await.unwrap();
    ingest(store, id, &batch(&spec, "b5", 2, 3.0)).await;

    let past = chrono::Utc::now() - chrono::Duration::days(1);
    let future = chrono::Utc::now() + chrono::Duration::days(1);
    assert_eq!(
        store.purge_rows(past, 10).await.unwrap(),
        0,
        "nothing that old"
    );
    assert_eq!(store.purge_rows(future, 1).await.unwrap(), 1);
    let purged_at =
        |b: &'static str| async move { store.batch(id, b).await.unwrap().unwrap().rows_purged_at };
    assert!(purged_at("b1").await.is_some(), "the oldest first");
    assert!(purged_at("b2").await.is_none());
    assert_eq!(store.purge_rows(future, 10).await.unwrap(), 2);
    assert_eq!(store.purge_rows(future, 10).await.unwrap(), 0, "once");
    for b in ["b1", "b2", "b3"] {
        assert!(purged_at(b).await.is_some(), "{b}");
    }
    assert!(
        purged_at("b4").await.is_none(),
        "kept as rows: they are its statistics"
    );
    assert!(purged_at("b5").await.is_none(), "queued");
    let b3 = store.batch(id, "b3").await.unwrap().unwrap();
    assert_eq!(
        (b3.status.as_str(), b3.error.as_deref()),
        ("rejected", Some("bad"))
    );

    // What a replay reads is intact: the statistics, and the rows of the batch kept as rows.
    let mut lock = store.lock_model(&name("lab")).await.unwrap().unwrap();
    let folded = lock.folded_batches(v).await.unwrap();
    let ids: Vec<&str> = folded.iter().map(|b| b.batch_id.as_str()).collect();
    assert_eq!(ids, ["b1", "b2", "b4"]);
    assert_eq!(folded[0].statistics, b"stats of b1");
    assert_eq!(folded[2].rows_x.as_deref(), Some(&as_rows.encode().x[..]));
}

/// A claim, waiting up to 5 s for one: a dropped claim's transaction is rolled back when its
/// connection goes back to the pool, which on PostgreSQL may come a moment after the drop.
async fn claim_eventually(store: &Store, skip: &[i64]) -> ModelLock {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(lock) = store.claim_fold(skip).await.unwrap() {
            return lock;
        }
        assert!(std::time::Instant::now() < deadline, "no claim within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn claims_skip_held_and_unready_models_and_follow_arrival_order(store: &Store) {
    let (early, late, slow) = (spec("early", 3), spec("late", 3), spec("slow", 10));
    let early_id = create(store, &early).await;
    let late_id = create(store, &late).await;
    let slow_id = create(store, &slow).await;
    // The untrained model waits for its first-fit rows.
    ingest(store, slow_id, &batch(&slow, "s1", 4, 1.0)).await;
    assert!(store.claim_fold(&[]).await.unwrap().is_none());
    ingest(store, late_id, &batch(&late, "l1", 2, 1.0)).await;
    assert!(
        store.claim_fold(&[]).await.unwrap().is_none(),
        "2 of 3 rows"
    );
    ingest(store, early_id, &batch(&early, "e1", 3, 1.0)).await;
    ingest(store, late_id, &batch(&late, "l2", 2, 1.0)).await;

    // `late`'s oldest queued batch is older than `early`'s.
    let first = store.claim_fold(&[]).await.unwrap().expect("work");
    assert_eq!(first.model_id, late_id);
    // A held model is skipped, and so is one the caller sets aside.
    let second = store.claim_fold(&[]).await.unwrap().expect("more work");
    assert_eq!(second.model_id, early_id);
    assert!(store.claim_fold(&[]).await.unwrap().is_none());
    drop(second);
    assert!(store.claim_fold(&[early_id]).await.unwrap().is_none());
    drop(first);
    let again = claim_eventually(store, &[late_id]).await;
    assert_eq!(again.model_id, early_id);
    drop(again);

    ingest(store, slow_id, &batch(&slow, "s2", 6, 1.0)).await;
    let claimed: Vec<i64> = {
        let a = claim_eventually(store, &[]).await;
        let b = claim_eventually(store, &[]).await;
        let c = claim_eventually(store, &[]).await;
        vec![a.model_id, b.model_id, c.model_id]
    };
    assert_eq!(claimed, [slow_id, late_id, early_id]);
}

async fn restore_locks_and_deletion_wait_for_a_held_lock(store: &Store) {
    let spec = spec("lab", 3);
    let id = create(store, &spec).await;
    ingest(store, id, &batch(&spec, "b1", 4, 1.0)).await;
    let mut fold = store.claim_fold(&[]).await.unwrap().unwrap();

    let waiting = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .lock_model(&name("lab"))
                .await
                .map(|l| l.map(|l| l.version))
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a restore lock while a fold runs");
    let queued = fold.queued_batches().await.unwrap();
    write_fold(&mut fold, 4.0, &[queued[0].seq]).await;
    fold.commit().await.unwrap();
    let version = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the lock is taken once the fold commits")
        .unwrap()
        .unwrap();
    assert_eq!(version, Some(1), "the waiter sees the fold's version");

    let held = store.lock_model(&name("lab")).await.unwrap().unwrap();
    let deleting = tokio::spawn({
        let store = store.clone();
        async move { store.delete_model(&name("lab")).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!deleting.is_finished(), "a deletion while a restore runs");
    drop(held);
    let deleted = tokio::time::timeout(Duration::from_secs(10), deleting)
        .await
        .expect("the deletion goes ahead once the lock is released")
        .unwrap()
        .unwrap();
    assert_eq!(deleted, Some(id));
    assert!(store.lock_model(&name("lab")).await.unwrap().is_none());
}

/// The next notification within `wait`, `None` when there is none.
async fn next(subscription: &mut Box<dyn Subscription>, wait: Duration) -> Option<Notification> {
    match tokio::time::timeout(wait, subscription.recv()).await {
        Ok(received) => received.expect("subscription"),
        Err(_) => None,
    }
}

async fn notifications_announce_committed_changes_only(store: &Store) {
    let mut batches = store.subscribe(&[Topic::Batches]).await.unwrap();
    let mut models = store
        .subscribe(&[Topic::Models, Topic::Keys])
        .await
        .unwrap();
    let long = Duration::from_secs(10);
    let short = Duration::from_millis(300);

    let spec = spec("lab", 3);
    let id = create(store, &spec).await;
    let created = next(&mut models, long).await;
    assert_eq!(
        created,
        Some(Notification {
            topic: Topic::Models,
            model_id: Some(id)
        })
    );
    ingest(store, id, &batch(&spec, "b1", 4, 1.0)).await;
    assert_eq!(
        next(&mut batches, long).await,
        Some(Notification {
            topic: Topic::Batches,
            model_id: Some(id)
        })
    );
    // A replay adds nothing and announces nothing.
    assert!(
        ingest(store, id, &batch(&spec, "b1", 4, 1.0))
            .await
            .replayed
    );
    assert_eq!(next(&mut batches, short).await, None);

    // A version written in a lock that is rolled back is never announced.
    {
        let mut lock = store.claim_fold(&[]).await.unwrap().unwrap();
        write_fold(&mut lock, 4.0, &[]).await;
    }
    assert_eq!(next(&mut models, short).await, None);
    let mut lock = claim_eventually(store, &[]).await;
    write_fold(&mut lock, 4.0, &[]).await;
    lock.commit().await.unwrap();
    assert_eq!(
        next(&mut models, long).await,
        Some(Notification {
            topic: Topic::Models,
            model_id: Some(id)
        })
    );
    assert_eq!(next(&mut batches, short).await, None, "topics stay apart");

    let key = store
        .create_key("line-3", "mdk_0000", &[7; 32], &[Scope::Ingest])
        .await
        .unwrap();
    assert_eq!(
        next(&mut models, long).await.map(|n| n.topic),
        Some(Topic::Keys)
    );
    store.revoke_key(key.id).await.unwrap();
    assert_eq!(
        next(&mut models, long).await.map(|n| n.topic),
        Some(Topic::Keys)
    );
    store.delete_model(&name("lab")).await.unwrap();
    assert_eq!(
        next(&mut models, long).await,
        Some(Notification {
            topic: Topic::Models,
            model_id: Some(id)
        })
    );
}

async fn keys_are_created_listed_and_revoked(store: &Store) {
    let a = store
        .create_key(
            "mes",
            "mdk_aaaa",
            &[1; 32],
            &[Scope::Ingest, Scope::Predict],
        )
        .await
        .unwrap();
    let b = store
        .create_key("admin", "mdk_bbbb", &[2; 32], &[Scope::Admin])
        .await
        .unwrap();
    assert_eq!(
        (a.name.as_str(), a.prefix.as_str(), a.hash),
        ("mes", "mdk_aaaa", [1; 32])
    );
    assert_eq!(a.scopes, [Scope::Ingest, Scope::Predict]);
    assert!(a.revoked_at.is_none() && a.id < b.id);
    let same_hash = store
        .create_key("copy", "mdk_aaaa", &[1; 32], &[Scope::Predict])
        .await;
    assert!(
        matches!(same_hash, Err(StoreError::Database(_))),
        "{same_hash:?}"
    );

    let listed: Vec<i64> = store
        .list_keys()
        .await
        .unwrap()
        .iter()
        .map(|k| k.id)
        .collect();
    assert_eq!(listed, [a.id, b.id]);
    let (newest, active) = store.active_keys().await.unwrap();
    assert_eq!((newest, active.len()), (b.id, 2));

    let revoked = store.revoke_key(a.id).await.unwrap().unwrap();
    let at = revoked.revoked_at.expect("revoked");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let again = store.revoke_key(a.id).await.unwrap().unwrap();
    assert_eq!(again.revoked_at, Some(at), "revoking again changes nothing");
    assert!(store.revoke_key(b.id + 100).await.unwrap().is_none());
    let (newest, active) = store.active_keys().await.unwrap();
    assert_eq!(newest, b.id);
    assert_eq!(active.iter().map(|k| k.id).collect::<Vec<_>>(), [b.id]);
}

async fn concurrent_ingestion_and_folding_fold_each_batch_once_in_arrival_order(store: &Store) {
    const CLIENTS: usize = 4;
    const BATCHES: usize = 12;
    let spec = Arc::new(spec("lab", 3));
    let id = create(store, &spec).await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (store, spec) = (store.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..BATCHES {
                let b = batch(&spec, &format!("c{c}-{i:02}"), 3, (c * 100 + i) as f64);
                assert!(!ingest(&store, id, &b).await.replayed);
            }
        }));
    }
    // Two folders at once, each folding whatever queue it claims into one new version.
    let folders: Vec<_> = (0..2)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut folded = 0;
                while folded < CLIENTS * BATCHES {
                    let Some(lock) = store.claim_fold(&[]).await.unwrap() else {
                        let queue = store.queue_depth().await.unwrap();
                        let versions = store.versions(id).await.unwrap();
                        let done: usize = versions.iter().map(|v| v.batches.len()).sum();
                        if done == CLIENTS * BATCHES && queue[0].batches == 0 {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    };
                    folded += fold_queue(lock).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    for folder in folders {
        tokio::time::timeout(Duration::from_secs(60), folder)
            .await
            .expect("the folders finish")
            .unwrap();
    }

    let versions = store.versions(id).await.unwrap();
    let numbers: Vec<i64> = versions.iter().map(|v| v.version).collect();
    assert_eq!(numbers, (1..=versions.len() as i64).collect::<Vec<_>>());
    let order: Vec<String> = versions.into_iter().flat_map(|v| v.batches).collect();
    assert_eq!(order.len(), CLIENTS * BATCHES, "each batch folded once");
    // Each client's batches were folded in the order it sent them.
    let mut last: HashMap<&str, &str> = HashMap::new();
    for id in &order {
        let (client, i) = id.split_once('-').unwrap();
        if let Some(previous) = last.insert(client, i) {
            assert!(previous < i, "{client}: {previous} folded after {i}");
        }
    }
    let model = store.model_by_id(id).await.unwrap().unwrap();
    assert_eq!(model.pending_batches, 0);
}

/// PostgreSQL numbers a batch (`arrival`) under its model's lock after writing its row, and
/// commits with the lock held: batches become visible in arrival order, so however clients and
/// folds interleave, the batches are folded exactly in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_folds_in_arrival_order_under_concurrent_ingestion() {
    const CLIENTS: usize = 8;
    const BATCHES: usize = 25;
    let db = TestStore::postgres().await;
    let store = db.store.clone();
    let spec = Arc::new(spec("lab", 3));
    let id = create(&store, &spec).await;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (store, spec) = (store.clone(), spec.clone());
            tokio::spawn(async move {
                for i in 0..BATCHES {
                    // Big enough that writing the rows takes a while outside the lock.
                    let b = batch(&spec, &format!("c{c}-{i:02}"), 2_000, (c * 100 + i) as f64);
                    ingest(&store, id, &b).await;
                }
            })
        })
        .collect();
    let folder = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut folded = 0;
            while folded < CLIENTS * BATCHES {
                let Some(lock) = store.claim_fold(&[]).await.unwrap() else {
                    tokio::task::yield_now().await;
                    continue;
                };
                folded += fold_queue(lock).await;
            }
        })
    };
    for client in clients {
        client.await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(120), folder)
        .await
        .expect("the folder finishes")
        .unwrap();

    let versions = store.versions(id).await.unwrap();
    assert!(versions.len() > 1, "folds interleaved with ingestion");
    let folded: Vec<String> = versions.into_iter().flat_map(|v| v.batches).collect();
    let mut conn = sqlx::PgConnection::connect(&db.database.url).await.unwrap();
    let arrival: Vec<String> =
        sqlx::query_scalar("SELECT batch_id FROM batches WHERE model_id = $1 ORDER BY arrival")
            .bind(id)
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(folded.len(), CLIENTS * BATCHES, "each batch folded once");
    assert_eq!(folded, arrival, "folded in arrival order");
    conn.close().await.unwrap();
    store.close().await;
}

/// A list stored as JSON text on the embedded store (PostgreSQL keeps typed arrays, and its
/// checks refuse unknown scopes) that its row mapping cannot read is reported as corrupt data:
/// not a database failure, and never a value read wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lists_that_do_not_decode_are_corrupt() {
    let db = TestStore::sqlite().await;
    let (store, database) = (&db.store, &db.database);
    let corrupt = |result: Result<(), StoreError>, what: &str| match result {
        Err(StoreError::Corrupt(message)) => assert!(message.contains(what), "{message}"),
        other => panic!("expected corrupt data ({what}), got {other:?}"),
    };
    let key = store
        .create_key("mes", "mdk_cccc", &[3; 32], &[Scope::Predict])
        .await
        .unwrap();
    assert_eq!(key.scopes, [Scope::Predict]);
    let changed = database
        .execute(
            "",
            "UPDATE api_keys SET scopes = '[\"predict\", \"wizard\"]'",
        )
        .await;
    assert_eq!(changed, 1);
    corrupt(store.list_keys().await.map(drop), "wizard");
    corrupt(store.active_keys().await.map(drop), "wizard");

    let spec = spec("corrupt", 1);
    let id = create(store, &spec).await;
    ingest(store, id, &batch(&spec, "b1", 4, 1.0)).await;
    database
        .execute("", "UPDATE batches SET surprise = '[0.5, \"high\"]'")
        .await;
    corrupt(store.batch(id, "b1").await.map(drop), "surprise");
    database
        .execute("", "UPDATE batches SET surprise = '[0.5, null]'")
        .await;
    let read = store.batch(id, "b1").await.unwrap().unwrap();
    assert_eq!(read.surprise, Some(vec![Some(0.5), None]));

    let lock = store.lock_model(&name("corrupt")).await.unwrap().unwrap();
    assert_eq!(fold_queue(lock).await, 1);
    assert_eq!(store.versions(id).await.unwrap().len(), 1);
    database
        .execute("", "UPDATE versions SET noise_variances = '{\"a\": 1}'")
        .await;
    corrupt(store.versions(id).await.map(drop), "noise_variances");
    db.store.close().await;
}

/// A database from before the raw rows moved to a table of their own keeps them: the migration
/// moves every batch's rows, and a fold (of a batch stored as rows only), a copy and a purge
/// find them where they are now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_batches_stored_before_the_rows_moved_keep_their_rows() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
    use std::str::FromStr;

    const ROWS_APART: i64 = 20261126000000;
    let database = fresh_sqlite_database();
    let spec = spec("lab", 3);
    let batches = [
        batch(&spec, "rows-only", 2, 2.0),
        batch(&spec, "with-stats", 5, 3.0),
    ];
    {
        let options = SqliteConnectOptions::from_str(&database.url)
            .unwrap()
            .create_if_missing(true);
        let pool = SqlitePool::connect_with(options).await.unwrap();
        let mut before = sqlx::migrate!("./migrations/sqlite");
        let earlier: Vec<_> = before
            .migrations
            .iter()
            .filter(|m| m.version < ROWS_APART)
            .cloned()
            .collect();
        assert!(
            earlier.len() < before.migrations.len(),
            "the migration exists"
        );
        before.migrations = earlier.into();
        before.run(&pool).await.unwrap();
        let model: i64 = sqlx::query_scalar(
            "INSERT INTO models (name, spec, first_fit_rows, created_at, updated_at) \
             VALUES ('lab', ?1, 3, ?2, ?2) RETURNING id",
        )
        .bind(sqlx::types::Json(&spec))
        .bind(chrono::Utc::now())
        .fetch_one(&pool)
        .await
        .unwrap();
        for (b, statistics) in batches.iter().zip([&b""[..], b"stats"]) {
            let encoded = b.encode();
            sqlx::query(
                "INSERT INTO batches (model_id, batch_id, content_hash, rows, statistics, \
                                      received_at, x, y) \
                 VALUES (?1, ?2, ?3, ?4, ?5, '2000-01-01T00:00:00+00:00', ?6, ?7)",
            )
            .bind(model)
            .bind(b.batch_id.as_str())
            .bind(&encoded.content_hash.stored[..])
            .bind(b.rows() as i64)
            .bind(statistics)
            .bind(&encoded.x[..])
            .bind(&encoded.y[..])
            .execute(&pool)
            .await
            .unwrap();
        }
        pool.close().await;
    }
    let db = TestStore::open(database).await;
    let store = &db.store;
    let id = store.model(&name("lab")).await.unwrap().unwrap().id;
    let dump = store.dump_model(id).await.unwrap().unwrap();
    for (dumped, b) in dump.batches.iter().zip(&batches) {
        let encoded = b.encode();
        assert_eq!(dumped.batch_id, b.batch_id.as_str());
        assert_eq!(
            (&dumped.x[..], &dumped.y[..]),
            (&encoded.x[..], &encoded.y[..])
        );
    }
    // A replay of the old batch is recognised by its stored hash.
    let replay = ingest(store, id, &batches[1]).await;
    assert!(replay.replayed);

    let mut lock = store.lock_model(&name("lab")).await.unwrap().unwrap();
    let queued = lock.queued_batches().await.unwrap();
    let encoded = batches[0].encode();
    assert_eq!(queued[0].rows_x.as_deref(), Some(&encoded.x[..]));
    assert_eq!(queued[0].rows_y.as_deref(), Some(&encoded.y[..]));
    assert_eq!(
        (&queued[1].rows_x, queued[1].statistics.as_slice()),
        (&None, &b"stats"[..])
    );
    drop(lock);
    assert_eq!(
        fold_queue(store.lock_model(&name("lab")).await.unwrap().unwrap()).await,
        2
    );
    // Folded long ago: the batch with statistics loses its rows, the other keeps them.
    assert_eq!(store.purge_rows(chrono::Utc::now(), 10).await.unwrap(), 1);
    let purged: Vec<String> = db
        .database
        .strings(
            "SELECT b.batch_id || ':' || CAST(length(r.x) AS TEXT) || ':' || \
             CAST(b.rows_purged_at IS NOT NULL AS TEXT) \
             FROM batches b JOIN batch_rows r ON r.seq = b.seq ORDER BY b.seq",
        )
        .await;
    assert_eq!(
        purged,
        [
            format!("rows-only:{}:0", encoded.x.len()),
            "with-stats:0:1".to_owned()
        ]
    );
    db.store.close().await;
}

/// PostgreSQL never leaves a version's state to pglz, which tries to compress every fold's
/// state (tens of megabytes of doubles on a wide model) and gains nothing: lz4 where the server
/// has it, else no compression at all. Where the server has lz4 the batches' statistics are
/// under it too; their raw rows are always stored uncompressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_states_and_statistics_out_of_pglz() {
    let db = TestStore::postgres().await;
    let mut conn = sqlx::PgConnection::connect(&db.database.url).await.unwrap();
    let lz4: bool = sqlx::query_scalar(
        "SELECT 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings \
         WHERE name = 'default_toast_compression')",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let column = |table: &'static str, column: &'static str| {
        sqlx::query_as::<_, (String, String)>(
            "SELECT attstorage::text, attcompression::text FROM pg_attribute \
             WHERE attrelid = $1::regclass AND attname = $2",
        )
        .bind(table)
        .bind(column)
    };
    for (table, name) in [("versions", "state"), ("batches", "statistics")] {
        let (storage, compression) = column(table, name).fetch_one(&mut conn).await.unwrap();
        if lz4 {
            assert_eq!(compression, "l", "{table}.{name} compressed by lz4");
        } else if name == "state" {
            assert_eq!(storage, "e", "{table}.{name} stored uncompressed");
        }
    }
    for name in ["x", "y"] {
        let (storage, _) = column("batches", name).fetch_one(&mut conn).await.unwrap();
        assert_eq!(storage, "e", "batches.{name} stored uncompressed");
    }
    conn.close().await.unwrap();
    db.store.close().await;
}

/// A first fit on 5 rows reads the raw rows of the batches it learns from (those after fewer
/// than 5 queued rows: 2 + 2 + 3), stored with statistics or not, and not of the batch after
/// them, which a bulk import could make as large as it likes; a fold of a trained model reads
/// raw rows only of batches stored without statistics.
async fn a_first_fit_reads_the_raw_rows_of_the_batches_it_learns_from_and_no_more(store: &Store) {
    let spec = spec("first", 5);
    let id = create(store, &spec).await;
    for (i, (b, rows)) in [("b1", 2), ("b2", 2), ("b3", 3), ("b4", 4)]
        .into_iter()
        .enumerate()
    {
        ingest(store, id, &batch(&spec, b, rows, i as f64)).await;
    }
    let mut lock = store.claim_fold(&[]).await.unwrap().expect("work");
    let first = lock.queued_for_fold(QueueRead::whole(5)).await.unwrap();
    let with_rows: Vec<(&str, bool)> = first
        .iter()
        .map(|b| {
            (
                b.batch_id.as_str(),
                b.rows_x.is_some() && b.rows_y.is_some(),
            )
        })
        .collect();
    assert_eq!(
        with_rows,
        [("b1", true), ("b2", true), ("b3", true), ("b4", false)]
    );
    // The rows read are the batch's own, row-major little-endian doubles.
    let x = first[2].rows_x.as_deref().unwrap();
    assert_eq!(x, &batch(&spec, "b3", 3, 2.0).encode().x[..]);
    let later = lock.queued_batches().await.unwrap();
    assert_eq!(later.len(), 4);
    assert!(later.iter().all(|b| b.rows_x.is_none()));
    lock.commit().await.unwrap();
}

/// A fold reads a first fit's prefix whole, then each batch while the bytes queued before it
/// (its statistics, or its raw rows at `row_bytes` a row where it was stored without them) are
/// fewer than its cap, the first batch always; the rows it asks come with the batches.
async fn a_fold_reads_a_first_fits_prefix_whole_then_as_many_bytes_as_it_may(store: &Store) {
    let spec = spec("bytes", 5);
    let id = create(store, &spec).await;
    // Statistics "stats of bN": 11 bytes each; b3 is stored without them (3 rows of 24 bytes).
    for (b, rows) in [("b1", 2), ("b2", 2)] {
        ingest(store, id, &batch(&spec, b, rows, 1.0)).await;
    }
    let b3 = batch(&spec, "b3", 3, 3.0);
    store
        .insert_batch(id, &b3, &b3.encode(), &[])
        .await
        .expect("insert batch");
    for (b, rows) in [("b4", 4), ("b5", 1)] {
        ingest(store, id, &batch(&spec, b, rows, 4.0)).await;
    }
    let mut lock = store.claim_fold(&[]).await.unwrap().expect("work");
    let cases: [(i64, i64, &[&str]); 8] = [
        (0, 1, &["b1"]),
        (0, 11, &["b1"]),
        (0, 12, &["b1", "b2"]),
        (0, 23, &["b1", "b2", "b3"]),
        (0, 94, &["b1", "b2", "b3"]),
        (0, 95, &["b1", "b2", "b3", "b4"]),
        (5, 1, &["b1", "b2", "b3"]),
        (0, i64::MAX, &["b1", "b2", "b3", "b4", "b5"]),
    ];
    for (whole_within, bytes_within, expected) in cases {
        let read = QueueRead {
            rows_within: 3,
            whole_within,
            bytes_within,
            row_bytes: 24,
        };
        let queued = lock.queued_for_fold(read).await.unwrap();
        let got: Vec<(&str, bool)> = queued
            .iter()
            .map(|b| (b.batch_id.as_str(), b.rows_x.is_some()))
            .collect();
        // Rows for the batches after fewer than 3 rows, and b3's own (no statistics).
        let want: Vec<(&str, bool)> = expected
            .iter()
            .map(|&b| (b, matches!(b, "b1" | "b2" | "b3")))
            .collect();
        assert_eq!(
            got, want,
            "whole within {whole_within}, bytes within {bytes_within}"
        );
    }
    lock.commit().await.unwrap();
}
