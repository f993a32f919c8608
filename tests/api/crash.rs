//! Crash safety, measured: clients post batches (retrying until acknowledged) while the
//! service is killed with SIGKILL at random moments and restarted, many times. Afterwards every
//! acknowledged batch is folded exactly once, and the posterior is exactly what the estimator
//! computes on the acknowledged rows in the order they were folded.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mordant::estimator::{Basis, ModelConfig, Transform};
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{ServiceProcess, free_port};

/// SIGKILLs per run.
const KILLS: usize = 50;
const CLIENTS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_batches_survive_sigkill_exactly_once() {
    let database = fresh_database().await;
    let port = free_port();
    let mut service = ServiceProcess::start(&database.url, port, &[]).await;
    let base = service.address.clone();
    let (d, m) = (3, 2);
    let client = reqwest::Client::new();
    let created = client
        .post(format!("{base}/v1/models"))
        .json(&spec("crash", d, m))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);

    let stop = Arc::new(AtomicBool::new(false));
    let retries = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (stop, retries, base) = (stop.clone(), retries.clone(), base.clone());
        clients.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            let mut acknowledged = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let id = format!("c{c}-b{i}");
                let rows = random_rows(c as u64 * 1_000_000 + i, 4, d, m);
                let body = json!({"batch_id": id, "x": rows.0, "y": rows.1});
                // Retry until acknowledged, whatever happens to the service meanwhile.
                loop {
                    match client
                        .post(format!("{base}/v1/models/crash/batches"))
                        .json(&body)
                        .send()
                        .await
                    {
                        Ok(r) if r.status() == StatusCode::ACCEPTED => break,
                        Ok(r) if r.status().is_server_error() => {}
                        Ok(r) => panic!("{id}: unexpected {}", r.status()),
                        Err(_) => {}
                    }
                    retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                acknowledged.push((id, rows));
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            acknowledged
        }));
    }

    // Kill at random moments: mid-request, mid-fold, mid-start-up.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let started = Instant::now();
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..400))).await;
        service.restart_after_kill().await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut acknowledged: HashMap<String, RowsXY> = HashMap::new();
    for task in clients {
        acknowledged.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();

    // Every acknowledged batch is folded; nothing else was stored.
    let app_client = reqwest::Client::new();
    for id in acknowledged.keys() {
        let folded = wait_until(Duration::from_secs(60), || async {
            let r = app_client
                .get(format!("{base}/v1/models/crash/batches/{id}"))
                .send()
                .await
                .ok()?;
            let batch: Value = r.json().await.ok()?;
            (batch["status"] == "folded").then_some(())
        })
        .await;
        assert!(folded.is_some(), "{id} was acknowledged but never folded");
    }
    let stored = database.strings("SELECT batch_id FROM batches").await;
    assert_eq!(
        stored.iter().collect::<HashSet<_>>(),
        acknowledged.keys().collect::<HashSet<_>>(),
        "the stored batches are exactly the acknowledged ones"
    );

    // Each folded exactly once, in consecutive versions.
    let history = fold_history(&app_client, &base, "crash").await;
    let versions = history.last().map_or(0, |(v, _)| *v);
    let fold_order: Vec<String> = history.into_iter().map(|(_, id)| id).collect();
    assert_eq!(
        fold_order.len(),
        acknowledged.len(),
        "no batch folded twice or lost"
    );
    assert_eq!(
        fold_order.iter().collect::<HashSet<_>>().len(),
        fold_order.len()
    );
    let model = get_json(&app_client, &format!("{base}/v1/models/crash")).await;
    assert_eq!(model["observations"], (4 * acknowledged.len()) as f64);

    // The posterior is the estimator's on exactly those rows, in that order.
    let ordered: Vec<RowsXY> = fold_order
        .iter()
        .map(|id| acknowledged[id].clone())
        .collect();
    let config = ModelConfig::new(Basis::new(d, true, Transform::Identity), m);
    let (probe, _) = random_rows(99, 5, d, m);
    let expected = direct_state(&config, &ordered, d + 1)
        .predict(mat(&probe).as_ref())
        .unwrap();
    let api: Value = app_client
        .post(format!("{base}/v1/models/crash/predict"))
        .json(&json!({"x": probe}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(api["version"], versions);
    assert_same_predictions(&api, &expected);

    eprintln!(
        "crash safety: {KILLS} SIGKILLs in {:.1} s survived; {} batches acknowledged by {CLIENTS} \
         clients after {} retries, all folded exactly once into {} versions",
        elapsed.as_secs_f64(),
        acknowledged.len(),
        retries.load(Ordering::Relaxed),
        versions
    );
    service.kill().await;
}
