//! Two application instances on one database fold every batch exactly once, in order, while
//! batches arrive concurrently at both.

use std::collections::{HashMap, HashSet};

use mordant::estimator::{Basis, ModelConfig, Transform};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_fold_every_batch_exactly_once_and_in_order() {
    let database_url = fresh_database().await;
    let a = spawn_with(test_settings(&database_url)).await;
    let b = spawn_with(test_settings(&database_url)).await;
    let (d, m) = (3, 2);
    a.create_model(&spec("shared", d, m)).await;

    let (clients, per_client) = (4usize, 10usize);
    let mut rows = HashMap::new();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let targets = [a.address.clone(), b.address.clone()];
        let batches: Vec<_> = (0..per_client)
            .map(|i| {
                (
                    format!("c{c}-b{i}"),
                    random_rows((c * 100 + i) as u64, 5, d, m),
                )
            })
            .collect();
        for (id, batch) in &batches {
            rows.insert(id.clone(), batch.clone());
        }
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            for (i, (id, (x, y))) in batches.iter().enumerate() {
                let target = &targets[(c + i) % 2];
                let response = client
                    .post(format!("{target}/v1/models/shared/batches"))
                    .json(&json!({"batch_id": id, "x": x, "y": y}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), StatusCode::ACCEPTED, "{id}");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut received = HashMap::new();
    for id in rows.keys() {
        let batch = a.wait_for_batch("shared", id).await;
        assert_eq!(batch["status"], "folded", "{id}");
        received.insert(
            id.clone(),
            batch["received_at"].as_str().unwrap().to_owned(),
        );
    }

    // Every batch appears in exactly one version; versions follow arrival order.
    let list: Value = a
        .get("/v1/models/shared/versions")
        .await
        .json()
        .await
        .unwrap();
    let versions = list["versions"].as_array().unwrap();
    let fold_order: Vec<String> = versions
        .iter()
        .flat_map(|v| {
            v["batches"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(fold_order.len(), clients * per_client);
    assert_eq!(
        fold_order.iter().collect::<HashSet<_>>().len(),
        fold_order.len(),
        "no batch twice"
    );
    let times: Vec<chrono::DateTime<chrono::Utc>> = fold_order
        .iter()
        .map(|id| received[id].parse().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "folded in arrival order"
    );
    for (i, v) in versions.iter().enumerate() {
        assert_eq!(v["version"], i + 1, "versions are consecutive");
    }

    // Both replicas serve the posterior of exactly these batches in this order.
    let final_version = versions.len() as i64;
    let ordered: Vec<_> = fold_order.iter().map(|id| rows[id].clone()).collect();
    let config = ModelConfig::new(Basis::new(d, true, Transform::Identity), m);
    let (probe, _) = random_rows(4242, 6, d, m);
    let expected = direct_state(&config, &ordered, d + 1)
        .predict(mat(&probe).as_ref())
        .unwrap();
    for app in [&a, &b] {
        let api = app.predict_at("shared", &json!(probe), final_version).await;
        assert_eq!(api["version"], final_version);
        assert_same_predictions(&api, &expected);
    }
}
