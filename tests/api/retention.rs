//! Retention (`retention.raw_rows_days`): raw rows past their time are purged in small
//! transactions, and everything built on the statistics keeps working: predictions, restores
//! of thin versions (replayed from statistics), refit, later folds. A purge killed midway leaves
//! every batch whole or purged.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;
use crate::process::{ServiceProcess, free_port};

/// Moves every batch's arrival to 2000, far past any retention (same SQL on both stores).
pub(crate) async fn backdate(database: &TestDatabase) -> u64 {
    let sql = "UPDATE batches SET received_at = '2000-01-01T00:00:00+00:00'";
    database.execute(sql, sql).await
}

/// Batches whose purge state and rows disagree (purged with rows left, or rows gone while not
/// marked): none, whatever moment a purge was stopped at. It holds because one statement
/// (PostgreSQL) or one transaction (SQLite, whose rows are in a table of their own) empties
/// both columns and marks the batch; the check guards against splitting it.
async fn torn_batches(database: &TestDatabase) -> Vec<String> {
    database
        .strings_each(
            "SELECT batch_id FROM batches \
             WHERE (rows_purged_at IS NULL) <> (length(x) > 0 AND length(y) > 0)",
            "SELECT batch_id FROM batches b JOIN batch_rows r ON r.seq = b.seq \
             WHERE (rows_purged_at IS NULL) <> (length(r.x) > 0 AND length(r.y) > 0)",
        )
        .await
}

#[tokio::test]
async fn purged_rows_leave_versions_refit_and_folds_working() {
    let app = spawn_configured(|s| {
        s.retention.raw_rows_days = 1;
        s.retention.purge_interval_secs = 1;
        s.retention.purge_batch_size = 2;
        s.database.full_state_every = 3;
    })
    .await;
    app.create_model(&spec("lab", 3, 2)).await;
    let (probe, _) = random_rows(7, 4, 3, 2);
    // Batches of 1 and 2 rows are kept as rows (they are their statistics): never purged.
    let sizes = [8usize, 1, 8, 8, 2, 8];
    let served = fold_one_version_each(&app, "lab", &sizes, 40, &probe).await;
    assert_eq!(backdate(app.database()).await, sizes.len() as u64);
    let purged = wait_until(Duration::from_secs(30), || async {
        let list = get_json(&app.client, &app.url("/v1/models/lab/batches")).await;
        let purged: Vec<String> = list["batches"]
            .as_array()?
            .iter()
            .filter(|b| !b["rows_purged_at"].is_null())
            .map(|b| b["batch_id"].as_str().unwrap_or_default().to_owned())
            .collect();
        (purged.len() == 4).then_some(purged)
    })
    .await
    .expect("the old rows purged within 30 s");
    assert!(!purged.contains(&"b1".to_owned()) && !purged.contains(&"b4".to_owned()));
    assert_eq!(
        app.database()
            .strings_each(
                "SELECT batch_id FROM batches WHERE length(x) > 0 ORDER BY batch_id",
                "SELECT batch_id FROM batches b JOIN batch_rows r ON r.seq = b.seq \
                 WHERE length(r.x) > 0 ORDER BY batch_id"
            )
            .await,
        ["b1", "b4"]
    );
    assert!(torn_batches(app.database()).await.is_empty());

    // Thin versions replay from the statistics: versions 4 (its batch purged) and 5 (kept as
    // rows) restore to what they served.
    for source in [4usize, 5] {
        let version = app.restore("lab", source).await["version"]
            .as_i64()
            .unwrap();
        let now = app.predict_at("lab", &json!(probe), version).await;
        assert_eq!(now["predictions"], served[source - 1]);
    }
    let refit = app.post("/v1/models/lab/refit", &json!({})).await;
    assert_eq!(refit.status(), StatusCode::CREATED);
    let (x, y) = random_rows(99, 8, 3, 2);
    let response = app
        .post_batch("lab", &json!({"batch_id": "later", "x": x, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(app.wait_for_batch("lab", "later").await["status"], "folded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_killed_midway_leaves_every_batch_whole_or_purged() {
    let database = fresh_database().await;
    let env = [
        ("MORDANT__RETENTION__RAW_ROWS_DAYS", "1"),
        ("MORDANT__RETENTION__PURGE_INTERVAL_SECS", "1"),
        ("MORDANT__RETENTION__PURGE_BATCH_SIZE", "1"),
    ];
    let mut service = ServiceProcess::start(&database.url, free_port(), &env).await;
    let client = reqwest::Client::new();
    let base = service.address.clone();
    let created = client
        .post(format!("{base}/v1/models"))
        .json(&spec("lab", 3, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let batches = 200;
    for i in 0..batches {
        let (x, y) = random_rows(i, 8, 3, 2);
        let response = client
            .post(format!("{base}/v1/models/lab/batches"))
            .json(&json!({"batch_id": format!("b{i}"), "x": x, "y": y}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::ACCEPTED);
    }
    wait_until(Duration::from_secs(60), || async {
        let model = get_json(&client, &format!("{base}/v1/models/lab")).await;
        (model["pending_batches"] == 0).then_some(())
    })
    .await
    .expect("every batch folded");
    assert_eq!(backdate(&database).await, batches);

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..60))).await;
        service.restart_after_kill().await;
        assert_eq!(torn_batches(&database).await, Vec::<String>::new());
    }
    let left = wait_until(Duration::from_secs(30), || async {
        let left = database
            .strings("SELECT batch_id FROM batches WHERE rows_purged_at IS NULL")
            .await;
        left.is_empty().then_some(left)
    })
    .await;
    assert_eq!(
        left,
        Some(Vec::new()),
        "the purge carries on after each restart"
    );
    assert!(torn_batches(&database).await.is_empty());
    let model = get_json(&client, &format!("{base}/v1/models/lab")).await;
    assert!(model["version"].as_i64().unwrap() >= 1);
    service.kill().await;
}
