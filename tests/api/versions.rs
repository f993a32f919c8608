use mordant::estimator::{Basis, ModelConfig, Transform};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

/// Trains `lab` (d = 3, m = 2) on three batches, one fold each; returns the batches.
async fn train_three_versions(app: &TestApp) -> Vec<RowsXY> {
    app.create_model(&spec("lab", 3, 2)).await;
    let mut batches = Vec::new();
    for i in 0..3u64 {
        let batch = random_rows(10 + i, 8, 3, 2);
        let response = app
            .post_batch(
                "lab",
                &json!({"batch_id": format!("b{i}"), "x": batch.0, "y": batch.1}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert_eq!(
            app.wait_for_batch("lab", &format!("b{i}")).await["version"],
            i + 1
        );
        batches.push(batch);
    }
    batches
}

#[tokio::test]
async fn versions_list_the_batches_folded_into_each() {
    let app = spawn_app().await;
    train_three_versions(&app).await;
    let list: Value = app
        .get("/v1/models/lab/versions")
        .await
        .json()
        .await
        .unwrap();
    let versions = list["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 3);
    for (i, v) in versions.iter().enumerate() {
        assert_eq!(v["version"], i + 1);
        assert_eq!(v["origin"], "fold");
        assert_eq!(v["batches"], json!([format!("b{i}")]));
        assert_eq!(v["observations"], 8.0 * (i + 1) as f64);
        assert_eq!(v["noise_variances"].as_array().unwrap().len(), 2);
    }
}

#[tokio::test]
async fn restore_makes_a_new_version_equal_to_an_old_one() {
    let app = spawn_app().await;
    let batches = train_three_versions(&app).await;
    let response = app
        .post("/v1/models/lab/versions/1/restore", &json!({}))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["version"], 4);
    assert_eq!(body["restored_from"], 1);
    assert_eq!(body["origin"], "restore");

    let (probe, _) = random_rows(7, 4, 3, 2);
    let api = app.predict_at("lab", &json!(probe), 4).await;
    let config = ModelConfig::new(Basis::new(3, true, Transform::Identity), 2);
    let version1 = direct_state(&config, &batches[..1], 4);
    assert_same_predictions(&api, &version1.predict(mat(&probe).as_ref()).unwrap());

    let list: Value = app
        .get("/v1/models/lab/versions")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        list["versions"].as_array().unwrap().len(),
        4,
        "history is kept"
    );
    let missing = app
        .post("/v1/models/lab/versions/9/restore", &json!({}))
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let bad = app
        .post("/v1/models/lab/versions/first/restore", &json!({}))
        .await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn refit_runs_the_evidence_approximation_on_the_accumulated_statistics() {
    let app = spawn_app().await;
    let batches = train_three_versions(&app).await;
    let response = app.post("/v1/models/lab/refit", &json!({})).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["version"], 4);
    assert_eq!(body["origin"], "refit");

    let (probe, _) = random_rows(7, 4, 3, 2);
    let api = app.predict_at("lab", &json!(probe), 4).await;
    let config = ModelConfig::new(Basis::new(3, true, Transform::Identity), 2);
    let refitted = direct_state(&config, &batches, 4).refit(&config).unwrap();
    assert_same_predictions(&api, &refitted.predict(mat(&probe).as_ref()).unwrap());

    app.create_model(&spec("fresh", 3, 2)).await;
    let untrained = app.post("/v1/models/fresh/refit", &json!({})).await;
    assert_eq!(untrained.status(), StatusCode::CONFLICT);
}
