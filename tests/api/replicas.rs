//! Several application instances on one PostgreSQL database: they fold every batch exactly
//! once, in order, while batches arrive concurrently at both; they hear each other's versions
//! and keys. (The embedded store refuses a second process: see `embedded.rs`.)

use std::collections::{HashMap, HashSet};

use mordant::estimator::{Basis, ModelConfig, Transform};
use reqwest::StatusCode;
use serde_json::{Value, json};

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::auth::{ADMIN_KEY, call, new_key};
use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_fold_every_batch_exactly_once_and_in_order() {
    let database = fresh_database().await;
    let a = spawn_with(test_settings(&database.url)).await;
    let b = spawn_with(test_settings(&database.url)).await;
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

/// With polling effectively off, notifications alone wake the folder and keep the other
/// replica's cache current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_wake_the_folder_and_the_other_replicas_cache() {
    let database = fresh_database().await;
    let quiet = || {
        let mut settings = test_settings(&database.url);
        settings.folder.poll_interval_ms = 600_000;
        settings.cache.poll_interval_ms = 600_000;
        settings
    };
    let a = spawn_with(quiet()).await;
    let b = spawn_with(quiet()).await;
    a.create_model(&spec("lab", 2, 1)).await;
    let (x, y) = random_rows(1, 10, 2, 1);
    let started = std::time::Instant::now();
    let response = b
        .post_batch("lab", &json!({"batch_id": "n1", "x": x, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let probe = json!([[0.5, 0.5]]);
    let seen = wait_until(std::time::Duration::from_secs(10), || async {
        let a_version = a
            .post("/v1/models/lab/predict", &json!({"x": probe}))
            .await
            .json::<Value>()
            .await
            .ok()?["version"]
            .as_i64()?;
        let b_version = b
            .post("/v1/models/lab/predict", &json!({"x": probe}))
            .await
            .json::<Value>()
            .await
            .ok()?["version"]
            .as_i64()?;
        (a_version == 1 && b_version == 1).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "both replicas serve version 1 without polling"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// A replica whose model view shows a first version answers from it at once: where its cache
/// still holds the model untrained (its follower may still be reading the version another
/// replica folded), predict, the posterior and the relevance of inputs read the store's
/// current version rather than answering "not trained".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_version_in_the_view_is_served_not_answered_untrained() {
    let database = fresh_database().await;
    let a = spawn_with(test_settings(&database.url)).await;
    let mut reader = test_settings(&database.url);
    reader.folder.enabled = false;
    let b = spawn_with(reader).await;
    let (d, m) = (800, 4);
    let (x, y) = random_rows(3, 20, d, m);
    let probe = json!({"x": [x[0].clone()]});
    for endpoint in ["predict", "posterior", "relevance"] {
        let model = format!("wide_{endpoint}");
        let path = format!("/v1/models/{model}/{endpoint}");
        let ask = || async {
            match endpoint {
                "predict" => b.post(&path, &probe).await,
                _ => b.get(&path).await,
            }
        };
        a.create_model(&spec(&model, d, m)).await;
        let untrained = wait_until(Duration::from_secs(10), || async {
            (ask().await.status() == StatusCode::CONFLICT).then_some(())
        })
        .await;
        assert!(untrained.is_some(), "b caches {model} untrained");
        let response = a
            .post_batch(&model, &json!({"batch_id": "first", "x": x, "y": y}))
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let shown = wait_until(Duration::from_secs(30), || async {
            let view: Value = b.get(&format!("/v1/models/{model}")).await.json().await.ok()?;
            (view["version"].as_i64()? >= 1).then_some(())
        })
        .await;
        assert!(shown.is_some(), "b's view of {model} reaches version 1");
        let r = ask().await;
        assert_eq!(r.status(), StatusCode::OK, "{endpoint}");
        let answer: Value = r.json().await.unwrap();
        assert_eq!(answer["version"], 1, "{endpoint}: {answer}");
    }
}

/// A model deleted and created again under the same name is a new model on every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_model_never_serves_the_deleted_ones_posterior() {
    let database = fresh_database().await;
    let a = spawn_with(test_settings(&database.url)).await;
    let b = spawn_with(test_settings(&database.url)).await;
    a.create_model(&spec("lab", 2, 1)).await;
    let (x, y) = random_rows(1, 10, 2, 1);
    a.post_batch("lab", &json!({"batch_id": "old", "x": x, "y": y}))
        .await;
    a.wait_for_batch("lab", "old").await;
    b.predict_at("lab", &json!([[0.5, 0.5]]), 1).await;

    let response = a
        .client
        .delete(a.url("/v1/models/lab"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    a.create_model(&spec("lab", 3, 1)).await;
    for app in [&a, &b] {
        let answer = wait_until(std::time::Duration::from_secs(10), || async {
            let r = app
                .post("/v1/models/lab/predict", &json!({"x": [[0.5, 0.5, 0.5]]}))
                .await;
            (r.status() == StatusCode::CONFLICT).then_some(())
        })
        .await;
        assert!(
            answer.is_some(),
            "the new model is untrained on every replica"
        );
        let old_shape = app
            .post_batch("lab", &json!({"x": [[0.5, 0.5]], "y": [[1.0]]}))
            .await;
        assert_eq!(old_shape.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }
    let status = a.get("/v1/models/lab/batches/old").await;
    assert_eq!(
        status.status(),
        StatusCode::NOT_FOUND,
        "the old model's batches went with it"
    );
}

/// A key is shown once, stored hashed, and revoked at once on every replica.
#[tokio::test]
async fn keys_are_shown_once_stored_hashed_and_revoked_everywhere() {
    let database = fresh_database().await;
    let mut settings = test_settings(&database.url);
    settings.auth.admin_key = ADMIN_KEY.into();
    let a = spawn_with(settings.clone()).await;
    let b = spawn_with(settings).await;

    let (id, key) = new_key(&a, "mes-line-3", &["ingest", "predict"]).await;
    assert!(key.starts_with("mdk_") && key.len() == 68, "{key}");

    // Listed without the secret.
    let list = call(
        &a.client,
        &a.address,
        "GET",
        "/v1/keys",
        None,
        Some(ADMIN_KEY),
    )
    .await;
    let text = list.text().await.unwrap();
    assert!(!text.contains(&key), "the listing shows a key");
    let list: Value = serde_json::from_str(&text).unwrap();
    let listed = &list["keys"][0];
    assert_eq!(listed["name"], "mes-line-3");
    assert_eq!(listed["scopes"], json!(["ingest", "predict"]));
    assert_eq!(listed["prefix"], key[..12]);
    assert!(listed.get("key").is_none());

    // Stored as its SHA-256 only: the key's text is nowhere in the table.
    let pool = sqlx::PgPool::connect(&database.url).await.unwrap();
    let (hash, dump): (Vec<u8>, String) =
        sqlx::query_as("SELECT hash, row_to_json(k)::text FROM api_keys k WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(hash, Sha256::digest(key.as_bytes()).to_vec());
    assert!(!dump.contains(&key[4..]), "{dump}");

    // The other replica learns the new key by notification (its polling is slow here, 200 ms,
    // but the check below allows for it either way) and then accepts it.
    let accepted = wait_until(Duration::from_secs(5), || async {
        let r = call(&b.client, &b.address, "GET", "/v1/models", None, Some(&key)).await;
        (r.status() == StatusCode::OK).then_some(())
    })
    .await;
    assert!(accepted.is_some(), "replica b never accepted the new key");

    // Invalid bodies are answered with every problem.
    let bad = call(
        &a.client,
        &a.address,
        "POST",
        "/v1/keys",
        Some(&json!({"name": "", "scopes": ["root", "predict", "predict"], "extra": 1})),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let bad: Value = bad.json().await.unwrap();
    let paths: Vec<&str> = bad["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/extra", "/name", "/scopes/0", "/scopes/2"]);

    // Revoked: refused at once by the replica that revoked it, and soon by the other.
    let revoked = call(
        &a.client,
        &a.address,
        "DELETE",
        &format!("/v1/keys/{id}"),
        None,
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(revoked.status(), StatusCode::OK);
    let revoked: Value = revoked.json().await.unwrap();
    assert!(revoked["revoked_at"].is_string());
    let now = call(&a.client, &a.address, "GET", "/v1/models", None, Some(&key)).await;
    assert_eq!(now.status(), StatusCode::UNAUTHORIZED);
    let refused = wait_until(Duration::from_secs(5), || async {
        let r = call(&b.client, &b.address, "GET", "/v1/models", None, Some(&key)).await;
        (r.status() == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    assert!(refused.is_some(), "replica b still accepts a revoked key");
    let missing = call(
        &a.client,
        &a.address,
        "DELETE",
        "/v1/keys/999999",
        None,
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    a.stop().await;
    b.stop().await;
}
