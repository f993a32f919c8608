//! A database restart, and graceful shutdown.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn the_service_rides_out_a_database_restart() {
    let database_url = fresh_database().await;
    let proxy = DbProxy::start(&database_url).await;
    let app = spawn_with(test_settings(&proxy.url)).await;
    app.create_model(&spec("lab", 2, 1)).await;
    let (x, y) = random_rows(1, 10, 2, 1);
    app.post_batch("lab", &json!({"batch_id": "before", "x": x, "y": y}))
        .await;
    app.wait_for_batch("lab", "before").await;
    let probe = json!([[0.2, 0.7]]);
    let before = app.predict_at("lab", &probe, 1).await;

    proxy.cut();
    // Predict keeps answering from the cache.
    let response = app
        .post("/v1/models/lab/predict", &json!({"x": probe}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.json::<Value>().await.unwrap(), before);
    // Ingest says to come back later; readiness says not ready.
    let (x2, y2) = random_rows(2, 10, 2, 1);
    let batch = json!({"batch_id": "after", "x": x2, "y": y2});
    let response = app.post_batch("lab", &batch).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["code"],
        "database_unavailable"
    );
    assert_eq!(
        app.get("/readyz").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(2)).await;

    proxy.restore();
    let accepted = wait_until(Duration::from_secs(30), || async {
        (app.post_batch("lab", &batch).await.status() == StatusCode::ACCEPTED).then_some(())
    })
    .await;
    assert!(
        accepted.is_some(),
        "ingest resumes when the database is back"
    );
    let folded = app.wait_for_batch("lab", "after").await;
    assert_eq!(folded["version"], 2, "the folder reconnected by itself");
    let after = app.predict_at("lab", &probe, 2).await;
    assert_ne!(after["predictions"], before["predictions"]);
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn shutdown_lets_in_flight_work_finish() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let (x, y) = random_rows(1, 10, 2, 1);
    let response = app
        .post_batch("lab", &json!({"batch_id": "last", "x": x, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let address = app.address.clone();
    app.stop().await;
    assert!(
        reqwest::get(format!("{address}/healthz")).await.is_err(),
        "the listener is closed after shutdown"
    );
}
