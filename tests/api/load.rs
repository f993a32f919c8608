//! Replicas under load: three service processes on one database, clients spreading batches and
//! predictions across them for a bounded time. Every acknowledged batch is folded exactly once
//! and in arrival order per model, and every prediction is exactly the posterior of a complete
//! version (never a half-folded state).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mordant::estimator::{Basis, BatchStatistics, ModelConfig, ModelState, Transform};
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{ServiceProcess, free_port};

const REPLICAS: usize = 3;
const MODELS: [&str; 2] = ["line-1", "line-2"];
const INGEST_CLIENTS: usize = 4;
const PREDICT_CLIENTS: usize = 4;
const DURATION: Duration = Duration::from_secs(8);
const D: usize = 3;
const M: usize = 2;

/// A prediction as answered: model, version, the answer.
type Answer = (String, i64, Value);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_under_load_lose_nothing_and_serve_complete_versions() {
    let database = fresh_database().await;
    let mut replicas = Vec::new();
    for _ in 0..REPLICAS {
        replicas.push(ServiceProcess::start(&database.url, free_port(), &[]).await);
    }
    let addresses: Vec<String> = replicas.iter().map(|r| r.address.clone()).collect();
    let client = reqwest::Client::new();
    for model in MODELS {
        let r = client
            .post(format!("{}/v1/models", addresses[0]))
            .json(&spec(model, D, M))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    let (probe, _) = random_rows(31337, 2, D, M);

    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut ingesters = Vec::new();
    for c in 0..INGEST_CLIENTS {
        let (stop, addresses) = (stop.clone(), addresses.clone());
        ingesters.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut acknowledged = Vec::new();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let model = MODELS[(c + i) % MODELS.len()];
                let target = &addresses[(c + i) % addresses.len()];
                let id = format!("c{c}-b{i}");
                let rows = random_rows((c * 1_000_000 + i) as u64, 8, D, M);
                let r = client
                    .post(format!("{target}/v1/models/{model}/batches"))
                    .json(&json!({"batch_id": id, "x": rows.0, "y": rows.1}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), StatusCode::ACCEPTED, "{id}");
                acknowledged.push((model.to_owned(), id, rows));
                i += 1;
            }
            acknowledged
        }));
    }
    let mut predictors = Vec::new();
    for c in 0..PREDICT_CLIENTS {
        let (stop, addresses, probe) = (stop.clone(), addresses.clone(), probe.clone());
        predictors.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(c as u64);
            let mut answers: Vec<Answer> = Vec::new();
            let mut not_trained = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let model = MODELS[rng.random_range(0..MODELS.len())];
                let target = &addresses[rng.random_range(0..addresses.len())];
                let r = client
                    .post(format!("{target}/v1/models/{model}/predict"))
                    .json(&json!({"x": probe}))
                    .send()
                    .await
                    .unwrap();
                match r.status() {
                    StatusCode::OK => {
                        let body: Value = r.json().await.unwrap();
                        let version = body["version"].as_i64().unwrap();
                        answers.push((model.to_owned(), version, body));
                    }
                    StatusCode::CONFLICT => not_trained += 1,
                    other => panic!("predict answered {other}"),
                }
            }
            (answers, not_trained)
        }));
    }
    tokio::time::sleep(DURATION).await;
    stop.store(true, Ordering::Relaxed);
    let mut acknowledged: HashMap<String, (String, RowsXY)> = HashMap::new();
    for task in ingesters {
        for (model, id, rows) in task.await.unwrap() {
            acknowledged.insert(id, (model, rows));
        }
    }
    let mut answers = Vec::new();
    let mut not_trained = 0;
    for task in predictors {
        let (a, n) = task.await.unwrap();
        answers.extend(a);
        not_trained += n;
    }
    let elapsed = started.elapsed().as_secs_f64();

    // Everything acknowledged gets folded.
    for (id, (model, _)) in &acknowledged {
        let folded = wait_until(Duration::from_secs(60), || async {
            let r = client
                .get(format!("{}/v1/models/{model}/batches/{id}", addresses[0]))
                .send()
                .await
                .ok()?;
            let batch: Value = r.json().await.ok()?;
            (batch["status"] == "folded").then_some(batch["received_at"].clone())
        })
        .await;
        assert!(folded.is_some(), "{id} never folded");
    }

    let config = ModelConfig::new(Basis::new(D, true, Transform::Identity), M);
    let mut versions_total = 0;
    for model in MODELS {
        // Exactly once each, in consecutive versions, in arrival order per model.
        let fold_order = fold_history(&client, &addresses[1], model).await;
        versions_total += fold_order.last().map_or(0, |(v, _)| *v);
        let mine: HashSet<&String> = acknowledged
            .iter()
            .filter(|(_, (m, _))| m == model)
            .map(|(id, _)| id)
            .collect();
        assert_eq!(fold_order.len(), mine.len(), "{model}: folded once each");
        assert_eq!(
            fold_order.iter().map(|(_, id)| id).collect::<HashSet<_>>(),
            mine,
            "{model}: the folded batches are the acknowledged ones"
        );
        let pool = sqlx::PgPool::connect(&database.url).await.unwrap();
        let arrival: Vec<String> = sqlx::query_scalar(
            "SELECT b.batch_id FROM batches b JOIN models m ON m.id = b.model_id \
             WHERE m.name = $1 ORDER BY b.arrival",
        )
        .bind(model)
        .fetch_all(&pool)
        .await
        .unwrap();
        let folded: Vec<String> = fold_order.iter().map(|(_, id)| id.clone()).collect();
        assert_eq!(folded, arrival, "{model}: folded in arrival order");

        // The state after each version, and every prediction checked against its version.
        let states = states_by_version(&config, &fold_order, &acknowledged, D + 1);
        for (_, version, answer) in answers.iter().filter(|(m, _, _)| m == model) {
            let state = states
                .get(version)
                .unwrap_or_else(|| panic!("{model}: a prediction from unknown version {version}"));
            let expected = state.predict(mat(&probe).as_ref()).unwrap();
            assert_same_predictions(answer, &expected);
        }
    }

    let predictions = answers.len() + not_trained;
    eprintln!(
        "replicas under load: {REPLICAS} processes, {elapsed:.1} s: {} batches acknowledged \
         ({:.0}/s, {:.0} rows/s) and {predictions} predictions ({:.0}/s; {not_trained} before the \
         first fit), {versions_total} versions; lost: 0, folded twice: 0, predictions from \
         incomplete versions: 0",
        acknowledged.len(),
        acknowledged.len() as f64 / elapsed,
        8.0 * acknowledged.len() as f64 / elapsed,
        predictions as f64 / elapsed,
    );
    assert!(answers.len() > 100, "too few predictions to mean anything");
    for (i, mut replica) in replicas.into_iter().enumerate() {
        assert_eq!(replica.running(), Ok(()), "replica {i} died under load");
        replica.kill().await;
    }
}

/// The posterior after each version: the first fit on the shortest prefix holding
/// `first_fit_rows` rows, then one update per batch, as the service folds them.
fn states_by_version(
    config: &ModelConfig,
    fold_order: &[(i64, String)],
    rows: &HashMap<String, (String, RowsXY)>,
    first_fit_rows: usize,
) -> HashMap<i64, ModelState> {
    let stats = |(x, y): &RowsXY| {
        let phi = config.basis.design(mat(x).as_ref()).unwrap();
        BatchStatistics::from_design(phi.as_ref(), mat(y).as_ref()).unwrap()
    };
    let mut states = HashMap::new();
    let mut pending = BatchStatistics::zeros(config.basis.dim(), config.outputs);
    let (mut pending_x, mut pending_y) = (Vec::new(), Vec::new());
    let mut state: Option<ModelState> = None;
    for (i, (version, id)) in fold_order.iter().enumerate() {
        let batch = stats(&rows[id].1);
        state = match state {
            None => {
                pending.add(&batch).unwrap();
                pending_x.extend(rows[id].1.0.iter().cloned());
                pending_y.extend(rows[id].1.1.iter().cloned());
                (pending.rows() >= first_fit_rows as f64).then(|| {
                    // Completed on its rows, as the service's first fit is.
                    let (x, y) = (mat(&pending_x), mat(&pending_y));
                    let done = mordant::estimator::first_fit::on_rows(
                        config,
                        pending.clone(),
                        x.as_ref(),
                        y.as_ref(),
                    )
                    .unwrap();
                    assert!(done.skipped.is_empty(), "{:?}", done.skipped);
                    done.state
                })
            }
            Some(s) => {
                // Handed every row behind it where it may refit, as the folder does.
                pending_x.extend(rows[id].1.0.iter().cloned());
                pending_y.extend(rows[id].1.1.iter().cloned());
                let (x, y) = (mat(&pending_x), mat(&pending_y));
                let every = mordant::folder::may_refit_on_rows(config, &s, batch.rows())
                    .then_some((x.as_ref(), y.as_ref()));
                let surprise = s.surprise(&batch);
                let done = mordant::estimator::first_fit::update_on_rows(
                    &s, config, &batch, &surprise, every,
                )
                .unwrap();
                Some(done.state)
            }
        };
        let last_of_version = fold_order.get(i + 1).is_none_or(|(v, _)| v != version);
        if last_of_version {
            let s = state.clone().expect("a version holds a fitted state");
            states.insert(*version, s);
        }
    }
    states
}
