//! Graceful shutdown, migrations and readiness, the healthcheck command, and a corrupt stored
//! state.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn shutdown_lets_an_in_flight_request_finish() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let body =
        serde_json::to_vec(&json!({"batch_id": "in-flight", "x": [[0.1, 0.2]], "y": [[1.0]]}))
            .unwrap();
    let host = app.address.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let head = format!(
        "POST /v1/models/lab/batches HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // SIGTERM arrives while the request's body is still on its way.
    let address = app.address.clone();
    let stopping = tokio::spawn(app.stop());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !stopping.is_finished(),
        "shutdown waits for the request in flight"
    );
    stream.write_all(&body[10..]).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 202"), "{response}");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("shutdown completes")
        .unwrap();
    assert!(
        reqwest::get(format!("{address}/healthz")).await.is_err(),
        "the listener is closed after shutdown"
    );
}

#[tokio::test]
async fn mordant_migrate_applies_the_embedded_migrations() {
    let database = fresh_database().await;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
        .arg("migrate")
        .env("DATABASE_URL", &database.url)
        .env(
            "MORDANT_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .output()
        .await
        .expect("run mordant migrate");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut settings = test_settings(&database.url).database;
    settings.max_connections = 1;
    let store = mordant::store::Store::open(&settings).await.expect("open");
    assert_eq!(store.ready().await, Ok(()), "every migration is applied");
    store.close().await;
}

#[tokio::test]
async fn readyz_reports_a_missing_migration() {
    let app = spawn_app().await;
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
    let sql = "DELETE FROM _sqlx_migrations";
    assert!(app.database().execute(sql, sql).await > 0);
    let response = app.get("/readyz").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("migrations not applied"),
        "{body}"
    );
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
}

/// A database that a newer release migrated stays so: start-up refuses it at once and says why,
/// where it retried it as a database not ready yet for the whole `startup_timeout_secs`.
#[tokio::test]
async fn a_database_a_newer_release_migrated_is_refused_at_once() {
    let database = fresh_database().await;
    let mut settings = test_settings(&database.url);
    spawn_with(settings.clone()).await.stop().await;
    database.mark_migrated_by_a_later_release().await;
    settings.database.startup_timeout_secs = 30;
    let started = std::time::Instant::now();
    let Err(error) = mordant::startup::Application::build(settings).await else {
        panic!("start-up accepted a database a newer release migrated");
    };
    let error = format!("{error:#}");
    assert!(
        error.contains("newer release") && error.contains("99991231000000"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused after {:?}",
        started.elapsed()
    );
}

/// A fold still computing when the service stops is given `folder.shutdown_grace_secs`, then
/// abandoned: the service stopped only once the whole claimed queue was folded (a queue of wide
/// batches held a SIGTERM for 21 s, past Docker's 10 s). The fold's transaction rolls back, and
/// its batches fold at the next start, each once.
#[tokio::test]
async fn a_fold_longer_than_the_shutdown_grace_is_left_for_the_next_start() {
    let database = fresh_database().await;
    let mut settings = test_settings(&database.url);
    settings.folder.shutdown_grace_secs = 0;
    settings.folder.enabled = false;
    let app = spawn_with(settings.clone()).await;
    let nir = json!({"start_nm": 1100, "interval_nm": 2, "count": 700, "scale": "absorbance"});
    let outputs: Vec<String> = (0..10).map(|k| format!("c{k}")).collect();
    app.create_model(&json!({"name": "nir", "spectrum": nir, "outputs": outputs}))
        .await;
    let batches = ["b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7"];
    for (b, id) in batches.iter().enumerate() {
        let rows: Vec<(Vec<f64>, Vec<f64>)> = (0..100)
            .map(|i| {
                let a = ((b * 100 + i) as f64 * 0.618).fract();
                let spectrum = (0..700)
                    .map(|j| 2.0 + a * (j as f64 / 90.0).sin() + 0.01 * ((i * j) as f64).cos())
                    .collect();
                (spectrum, (0..10).map(|k| a * (k + 1) as f64).collect())
            })
            .collect();
        let response = app
            .post_batch(
                "nir",
                &json!({
                    "batch_id": id,
                    "spectra": {"start_nm": 1100, "interval_nm": 2,
                                "values": rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>()},
                    "y": rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
                }),
            )
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
    }
    app.stop().await;

    // The folder claims the queue at start; its fold takes seconds (eight wide batches).
    settings.folder.enabled = true;
    let app = spawn_with(settings.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = std::time::Instant::now();
    app.stop().await;
    let stopped = stopping.elapsed();
    settings.folder.enabled = false;
    let app = spawn_after_abandoned_fold(settings.clone()).await;
    for id in batches {
        let batch: Value = app
            .get(&format!("/v1/models/nir/batches/{id}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(batch["status"], "queued", "abandoned after {stopped:?}: {batch}");
    }
    assert!(stopped < Duration::from_secs(5), "stopped after {stopped:?}");
    app.stop().await;

    // The abandoned fold's computation may still hold a core here: a longer wait than
    // `wait_for_batch`'s.
    settings.folder.enabled = true;
    let app = spawn_after_abandoned_fold(settings).await;
    for id in batches {
        let batch = app
            .wait_for_batch_within("nir", id, Duration::from_secs(180))
            .await;
        assert_eq!(batch["status"], "folded", "{batch}");
    }
    let history = fold_history(&app.client, &app.address, "nir").await;
    let mut folded: Vec<&str> = history.iter().map(|(_, b)| b.as_str()).collect();
    folded.sort_unstable();
    assert_eq!(folded, batches, "each batch folded once: {history:?}");
}

#[tokio::test]
async fn the_healthcheck_command_follows_the_service() {
    let app = spawn_app().await;
    let run = |url: String| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
            .args(["healthcheck", "--url", &url])
            .output()
            .await
            .expect("run mordant healthcheck")
            .status
            .success()
    };
    // Without --url: /healthz where `serve` would listen with the same environment (the
    // container's HEALTHCHECK); a wildcard address is asked on loopback.
    let at_addr = |addr: String| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
            .arg("healthcheck")
            .env("MORDANT_ADDR", addr)
            .output()
            .await
            .expect("run mordant healthcheck")
            .status
            .success()
    };
    let port = app.address.rsplit(':').next().unwrap().to_owned();
    assert!(run(app.url("/healthz")).await, "healthy service");
    assert!(at_addr(format!("127.0.0.1:{port}")).await, "MORDANT_ADDR");
    assert!(
        at_addr(format!("0.0.0.0:{port}")).await,
        "a wildcard MORDANT_ADDR"
    );
    assert!(!run(app.url("/no-such-page")).await, "a 404 is not healthy");
    // A listener that never answers: unhealthy, and the message says that it did not answer in
    // time (it gave the system's "Resource temporarily unavailable").
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/healthz", silent.local_addr().unwrap());
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
        .args(["healthcheck", "--url", &url])
        .output()
        .await
        .expect("run mordant healthcheck");
    assert!(!output.status.success(), "a silent listener is not healthy");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no answer") && stderr.contains("within 3 s"),
        "{stderr}"
    );
    drop(silent);
    let address = app.address.clone();
    app.stop().await;
    assert!(
        !run(format!("{address}/healthz")).await,
        "a stopped service is not healthy"
    );
    assert!(
        !at_addr(format!("127.0.0.1:{port}")).await,
        "a stopped service is not healthy at MORDANT_ADDR"
    );
}

/// A stored state that no longer decodes is reported (predict names the model, the version and
/// the way out), never a panic; the model's other versions and the other models keep working,
/// and restoring an earlier version repairs it.
#[tokio::test]
async fn a_corrupt_stored_state_is_reported_and_can_be_restored_past() {
    let database = fresh_database().await;
    let a = spawn_with(test_settings(&database.url)).await;
    a.create_model(&spec("lab", 2, 1)).await;
    a.create_model(&spec("other", 2, 1)).await;
    for (model, id, seed) in [("lab", "b1", 1), ("lab", "b2", 2), ("other", "o1", 3)] {
        let (x, y) = random_rows(seed, 6, 2, 1);
        let r = a
            .post_batch(model, &json!({"batch_id": id, "x": x, "y": y}))
            .await;
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        assert_eq!(a.wait_for_batch(model, id).await["status"], "folded");
    }
    a.stop().await;

    // Flip bytes in the middle of version 2's state, as a disk or a careless hand might.
    let changed = database
        .execute(
            "UPDATE versions SET state = overlay(state PLACING '\\xdeadbeef'::bytea FROM 40) \
             WHERE version = 2 AND model_id = (SELECT id FROM models WHERE name = 'lab')",
            "UPDATE versions SET state = unhex(substr(hex(state), 1, 78) || 'DEADBEEF' || substr(hex(state), 87)) \
             WHERE version = 2 AND model_id = (SELECT id FROM models WHERE name = 'lab')",
        )
        .await;
    assert_eq!(changed, 1);

    // A fresh process starts, serves the healthy model, and reports the corrupt one.
    let b = spawn_with(test_settings(&database.url)).await;
    let (probe, _) = random_rows(9, 1, 2, 1);
    let healthy = b
        .post("/v1/models/other/predict", &json!({"x": probe}))
        .await;
    assert_eq!(healthy.status(), StatusCode::OK);
    let broken = b.post("/v1/models/lab/predict", &json!({"x": probe})).await;
    assert_eq!(broken.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let error: Value = broken.json().await.unwrap();
    assert_eq!(error["error"]["code"], "corrupt_state");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("version 2")
            && message.contains("checksum")
            && message.contains("restore"),
        "{message}"
    );

    // New batches wait (the folder sets the model aside instead of crashing) ...
    let (x, y) = random_rows(4, 6, 2, 1);
    let r = b
        .post_batch("lab", &json!({"batch_id": "b3", "x": x, "y": y}))
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let queued: Value = b
        .get("/v1/models/lab/batches/b3")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(queued["status"], "queued");
    assert_eq!(b.get("/healthz").await.status(), StatusCode::OK);

    // ... and restoring version 1 repairs the model: predictions come back.
    let restored = b
        .post("/v1/models/lab/versions/1/restore", &json!({}))
        .await;
    assert_eq!(restored.status(), StatusCode::CREATED);
    let restored: Value = restored.json().await.unwrap();
    assert_eq!(restored["version"], 3);
    let answer = wait_until(Duration::from_secs(5), || async {
        let r = b.post("/v1/models/lab/predict", &json!({"x": probe})).await;
        (r.status() == StatusCode::OK).then_some(())
    })
    .await;
    assert!(
        answer.is_some(),
        "predict did not recover after the restore"
    );
    b.stop().await;
}

/// Every answer carries a request id (the one the client sent, or a fresh one), the same id
/// its log lines carry.
#[tokio::test]
async fn every_answer_carries_a_request_id() {
    let app = spawn_app().await;
    let mut seen = std::collections::HashSet::new();
    for path in ["/healthz", "/v1/models", "/v1/models/missing"] {
        let response = app.get(path).await;
        let id = response
            .headers()
            .get("x-request-id")
            .unwrap_or_else(|| panic!("{path}: no x-request-id"))
            .to_str()
            .unwrap()
            .to_owned();
        assert!(uuid::Uuid::parse_str(&id).is_ok(), "{path}: {id:?}");
        assert!(seen.insert(id), "{path}: a request id used twice");
    }
    let echoed = reqwest::Client::new()
        .get(app.url("/healthz"))
        .header("x-request-id", "mes-7f3a-0042")
        .send()
        .await
        .unwrap();
    assert_eq!(echoed.headers()["x-request-id"], "mes-7f3a-0042");

    // So do the answers of the head's check, outside the request-id layers: too many header
    // fields (`431`), and a body announced over the limit (`413`), which had none.
    let mut crowded = reqwest::Client::new().get(app.url("/healthz"));
    for i in 0..120 {
        crowded = crowded.header(format!("x-extra-{i}"), "1");
    }
    let crowded = crowded.send().await.unwrap();
    assert_eq!(crowded.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    let id = crowded.headers()["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok() && seen.insert(id.to_owned()), "{id:?}");
    let address = app.address.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v1/models HTTP/1.1\r\nhost: {address}\r\nx-request-id: mes-announced\r\n\
         content-type: application/json\r\ncontent-length: 999999999999\r\n\
         connection: close\r\n\r\n"
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(answer.contains("\r\nx-request-id: mes-announced\r\n"), "{answer}");
}
