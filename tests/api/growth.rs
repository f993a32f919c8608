//! A live model gains outputs and named features (`POST /v1/models/{name}/outputs` and
//! `/features`): each time it predicts what a model given the column from the start predicts,
//! through new batches, batches queued or held in the old shape, and restores of versions from
//! before.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

/// `rows` with `extra` zero columns appended: what the rows were for a column added later.
fn padded(rows: &[Vec<f64>], extra: usize) -> Vec<Vec<f64>> {
    rows.iter()
        .map(|r| r.iter().copied().chain(std::iter::repeat_n(0.0, extra)).collect())
        .collect()
}

/// Posts a batch and waits until it has left the queue: its status document.
async fn learn(app: &TestApp, model: &str, id: &str, x: &[Vec<f64>], y: &[Vec<f64>]) -> Value {
    let response = app
        .post_batch(model, &json!({"batch_id": id, "x": x, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED, "{model}/{id}");
    app.wait_for_batch(model, id).await
}

/// Asserts that two predict answers agree to rounding (the grown model's statistics are the
/// same numbers; its posterior may be formed in another order).
fn assert_close(grown: &Value, declared: &Value) {
    let (a, b) = (
        grown["predictions"].as_array().unwrap(),
        declared["predictions"].as_array().unwrap(),
    );
    assert_eq!(a.len(), b.len());
    for (r, (p, q)) in a.iter().zip(b).enumerate() {
        for field in ["mean", "variance"] {
            let (u, v) = (p[field].as_array().unwrap(), q[field].as_array().unwrap());
            assert_eq!(u.len(), v.len(), "{field} of row {r}");
            for (k, (x, y)) in u.iter().zip(v).enumerate() {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                assert!(
                    (x - y).abs() <= 1e-9 + 1e-7 * y.abs(),
                    "{field} row {r} output {k}: grown {x}, declared {y}"
                );
            }
        }
    }
}

async fn versions(app: &TestApp, model: &str) -> Vec<Value> {
    get_json(&app.client, &app.url(&format!("/v1/models/{model}/versions"))).await["versions"]
        .as_array()
        .unwrap()
        .clone()
}

/// A new dye on a trained model whose older folds are kept thin: the new output is untrained
/// until its rows come, then learns as if declared from the start; the other outputs do not
/// move; a thin version from before restores in the new shape.
#[tokio::test]
async fn an_output_added_to_a_live_model_is_the_output_declared_from_the_start() {
    let app = spawn_configured(|s| s.database.full_state_every = 3).await;
    // ARD: no refit checks its shrinkage on the rows behind it, and these rows choose no noise
    // shape or tail (either would keep a refit's version whole), so version 2 is kept thin.
    for (name, outputs) in [("lab", 2), ("declared", 3)] {
        let mut spec = spec(name, 3, outputs);
        spec["prior"] = json!("ard");
        app.create_model(&spec).await;
    }
    let (probe, _) = random_rows(99, 5, 3, 3);
    // Versions 1 and 2 of both, before the dye existed (0 in every row).
    for (i, n) in [(0u64, 8usize), (1, 6)] {
        let (x, y) = random_rows(i, n, 3, 2);
        learn(&app, "lab", &format!("b{i}"), &x, &y).await;
        learn(&app, "declared", &format!("b{i}"), &x, &padded(&y, 1)).await;
    }
    let before = app.predict_at("lab", &json!(probe), 2).await;

    let response = app
        .post("/v1/models/lab/outputs", &json!({"outputs": ["dye_2"]}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let model: Value = response.json().await.unwrap();
    assert_eq!(model["outputs"], json!(["dye_0", "dye_1", "dye_2"]));
    assert_eq!(model["version"], 3);
    let history = versions(&app, "lab").await;
    assert_eq!(history[2]["origin"], "extend");
    assert_eq!(history[2]["full_state"], true);
    assert_eq!(history[2]["noise_variances"][2], Value::Null);

    let grown = app.predict_at("lab", &json!(probe), 3).await;
    assert_close(&grown, &app.predict_at("declared", &json!(probe), 2).await);
    for (row, old) in grown["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .zip(before["predictions"].as_array().unwrap())
    {
        assert_eq!(row["mean"][0], old["mean"][0], "the other outputs keep their bits");
        assert_eq!(row["variance"][1], old["variance"][1]);
    }
    let posterior = get_json(&app.client, &app.url("/v1/models/lab/posterior")).await;
    assert_eq!(posterior["outputs"][2]["name"], "dye_2");
    assert_eq!(posterior["outputs"][2]["trained"], false);

    // The same request again (a retry) changes nothing; a taken name is refused.
    let again = app
        .post("/v1/models/lab/outputs", &json!({"outputs": ["dye_2"]}))
        .await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.json::<Value>().await.unwrap()["version"], 3);
    let taken = app
        .post("/v1/models/lab/outputs", &json!({"outputs": ["R400", "dye_9"]}))
        .await;
    assert_eq!(taken.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        error_paths(&taken.json::<Value>().await.unwrap()["error"]),
        ["/outputs/0"]
    );
    let missing = app
        .post("/v1/models/nothing/outputs", &json!({"outputs": ["x"]}))
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    // Rows of the new dye train it, on both models alike.
    for (i, n) in [(2u64, 12usize), (3, 2)] {
        let (x, y) = random_rows(i, n, 3, 3);
        learn(&app, "lab", &format!("b{i}"), &x, &y).await;
        learn(&app, "declared", &format!("b{i}"), &x, &y).await;
    }
    let trained = app.predict_at("lab", &json!(probe), 5).await;
    assert_close(&trained, &app.predict_at("declared", &json!(probe), 4).await);
    let posterior = get_json(&app.client, &app.url("/v1/models/lab/posterior")).await;
    assert_eq!(posterior["outputs"][2]["trained"], true);

    // Version 2 is kept thin: its replay runs in the shape of then, and the restore is widened.
    assert_eq!(versions(&app, "lab").await[1]["full_state"], false);
    let restored = app.post("/v1/models/lab/versions/2/restore", &json!({})).await;
    assert_eq!(restored.status(), StatusCode::CREATED);
    let restored: Value = restored.json().await.unwrap();
    assert_eq!(restored["version"], 6);
    assert_eq!(restored["noise_variances"].as_array().unwrap().len(), 3);
    let now = app.predict_at("lab", &json!(probe), 6).await;
    assert_close(&now, &grown);
}

/// A new fabric on a trained model, with a batch held in the old shape across the change and
/// released after it: learnt as the rows it was (the fabric 0), with the statistics of a model
/// given the fabric from the start, so rows without it are predicted as that model predicts
/// them. (Rows with it depend on the new weight's prior, which no past row informs: the grown
/// model gives it its output's widest named feature's.) Wool rows then train it. A feature of
/// unknown past is refused, naming the transfer.
#[tokio::test]
async fn a_feature_added_to_a_live_model_is_the_feature_declared_from_the_start() {
    let app = spawn_app().await;
    let mut lab = spec("lab", 3, 2);
    lab["drift_threshold"] = json!(1e-9);
    app.create_model(&lab).await;
    let mut declared = spec("declared", 3, 2);
    declared["features"] = json!(["R400", "R410", "R420", "fabric_wool"]);
    app.create_model(&declared).await;
    // Cotton rows to compare on: the fabric indicator 0.
    let (mut probe, _) = random_rows(99, 6, 4, 2);
    probe.iter_mut().for_each(|row| row[3] = 0.0);

    let (x, y) = random_rows(0, 10, 3, 2);
    learn(&app, "lab", "b0", &x, &y).await;
    learn(&app, "declared", "b0", &padded(&x, 1), &y).await;
    let declared_first = app.predict_at("declared", &json!(probe), 1).await;
    // Held on `lab` (every batch is surprising beyond its threshold), stored as 3-wide rows.
    let (x1, y1) = random_rows(1, 2, 3, 2);
    assert_eq!(learn(&app, "lab", "b1", &x1, &y1).await["status"], "held");

    let unknown = app
        .post("/v1/models/lab/features", &json!({"features": ["nir_1100"]}))
        .await;
    assert_eq!(unknown.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(error_paths(&body["error"]), ["/past_value"]);
    let message = body["error"]["details"][0]["message"].as_str().unwrap();
    assert!(message.contains("calibration transfer"), "{message}");

    let response = app
        .post(
            "/v1/models/lab/features",
            &json!({"features": ["fabric_wool"], "past_value": 0}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let model: Value = response.json().await.unwrap();
    assert_eq!(model["features"], json!(["R400", "R410", "R420", "fabric_wool"]));
    assert_eq!(model["version"], 2);
    assert_eq!(versions(&app, "lab").await[1]["origin"], "extend");
    assert_close(&app.predict_at("lab", &json!(probe), 2).await, &declared_first);

    // The held batch, released now, is learnt in the new shape.
    learn(&app, "declared", "b1", &padded(&x1, 1), &y1).await;
    let released = app
        .post("/v1/models/lab/batches/b1/release", &json!({}))
        .await;
    assert_eq!(released.status(), StatusCode::OK);
    assert_eq!(app.wait_for_batch("lab", "b1").await["status"], "folded");
    assert_close(
        &app.predict_at("lab", &json!(probe), 3).await,
        &app.predict_at("declared", &json!(probe), 2).await,
    );

    // Version 1, from before the fabric, restores in the new shape.
    let restored = app.post("/v1/models/lab/versions/1/restore", &json!({})).await;
    assert_eq!(restored.status(), StatusCode::CREATED);
    assert_close(&app.predict_at("lab", &json!(probe), 4).await, &declared_first);

    // Wool rows (wool adds 0.8 to every dye); the batch is held, released, and trains it.
    let (mut x, mut y) = random_rows(2, 16, 4, 2);
    for (i, (row, dyes)) in x.iter_mut().zip(y.iter_mut()).enumerate() {
        row[3] = (i % 2) as f64;
        dyes.iter_mut().for_each(|v| *v += 0.8 * row[3]);
    }
    assert_eq!(learn(&app, "lab", "b2", &x, &y).await["status"], "held");
    let released = app
        .post("/v1/models/lab/batches/b2/release", &json!({}))
        .await;
    assert_eq!(released.status(), StatusCode::OK);
    assert_eq!(app.wait_for_batch("lab", "b2").await["status"], "folded");
    let posterior = get_json(&app.client, &app.url("/v1/models/lab/posterior")).await;
    assert_eq!(posterior["basis"][3], "fabric_wool");
    for output in posterior["outputs"].as_array().unwrap() {
        let wool = output["coefficients"][3].as_f64().unwrap();
        assert!(wool.abs() > 0.1, "fabric_wool is learnt: {output}");
    }
}

/// An untrained model grows by its specification alone, and a batch queued in the old shape
/// joins the first fit with the new columns 0.
#[tokio::test]
async fn an_untrained_model_grows_and_its_queued_rows_join_the_first_fit() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 3, 2)).await;
    app.create_model(&json!({
        "name": "declared",
        "features": ["R400", "R410", "R420", "fabric_wool"],
        "outputs": ["dye_0", "dye_1", "dye_2"],
    }))
    .await;
    // Fewer rows than the first fit waits for: queued.
    let (x, y) = random_rows(0, 2, 3, 2);
    let response = app
        .post_batch("lab", &json!({"batch_id": "b0", "x": x, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let response = app
        .post_batch(
            "declared",
            &json!({"batch_id": "b0", "x": padded(&x, 1), "y": padded(&y, 1)}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);

    for (path, body) in [
        ("outputs", json!({"outputs": ["dye_2"]})),
        ("features", json!({"features": ["fabric_wool"], "past_value": 0.0})),
    ] {
        let response = app.post(&format!("/v1/models/lab/{path}"), &body).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(response.json::<Value>().await.unwrap()["version"], 0);
    }
    let model = get_json(&app.client, &app.url("/v1/models/lab")).await;
    assert_eq!(model["outputs"].as_array().unwrap().len(), 3);
    assert_eq!(model["pending_batches"], 1);

    let (x, y) = random_rows(1, 10, 4, 3);
    assert_eq!(learn(&app, "lab", "b1", &x, &y).await["version"], 1);
    assert_eq!(learn(&app, "declared", "b1", &x, &y).await["version"], 1);
    assert_eq!(app.wait_for_batch("lab", "b0").await["version"], 1);
    let (probe, _) = random_rows(99, 5, 4, 3);
    assert_close(
        &app.predict_at("lab", &json!(probe), 1).await,
        &app.predict_at("declared", &json!(probe), 1).await,
    );
}

/// A client that has not heard of the new columns retries batches it sent before the model
/// grew (twice: a dye, then a fabric): each is answered as the batch it stored, JSON and CSV
/// alike, and nothing is added. Other content under a stored id is a conflict; a new batch in
/// the old shape is refused as before.
#[tokio::test]
async fn a_batch_retried_after_the_model_grew_is_a_replay() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 3, 2)).await;
    let (x, y) = random_rows(0, 12, 3, 2);
    let json_body = json!({"batch_id": "b0", "x": x, "y": y});
    let mut csv = String::from("R400,R410,R420,dye_0,dye_1\n");
    for (xs, ys) in x.iter().zip(&y).take(4) {
        let cells: Vec<String> = xs.iter().chain(ys).map(f64::to_string).collect();
        csv.push_str(&(cells.join(",") + "\n"));
    }
    assert_eq!(
        app.post_batch("lab", &json_body).await.status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(
        app.post_csv("lab", Some("c0"), csv.clone()).await.status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(app.wait_for_batch("lab", "b0").await["version"], 1);
    app.wait_for_batch("lab", "c0").await;

    for (path, body) in [
        ("outputs", json!({"outputs": ["dye_2"]})),
        ("features", json!({"features": ["fabric_wool"], "past_value": 0.0})),
    ] {
        let response = app.post(&format!("/v1/models/lab/{path}"), &body).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    let before = get_json(&app.client, &app.url("/v1/models/lab")).await;

    let replayed = app.post_batch("lab", &json_body).await;
    assert_eq!(replayed.status(), StatusCode::ACCEPTED);
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    let replayed: Value = replayed.json().await.unwrap();
    assert_eq!(
        (&replayed["batch_id"], &replayed["status"], &replayed["rows"]),
        (&json!("b0"), &json!("folded"), &json!(12))
    );
    let replayed = app.post_csv("lab", Some("c0"), csv.clone()).await;
    assert_eq!(replayed.status(), StatusCode::ACCEPTED);
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    assert_eq!(replayed.json::<Value>().await.unwrap()["rows"], 4);

    // Other rows under a stored id: a conflict, as in the shape of now.
    let mut changed = y.clone();
    changed[0][0] += 1.0;
    let conflict = app
        .post_batch("lab", &json!({"batch_id": "b0", "x": x, "y": changed}))
        .await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    // A batch never stored, in the old shape: refused, naming what the model reads now.
    let new = app
        .post_batch("lab", &json!({"batch_id": "b9", "x": x, "y": y}))
        .await;
    assert_eq!(new.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let paths = error_paths(&new.json::<Value>().await.unwrap()["error"]);
    assert!(paths.contains(&"/x/0".to_owned()), "{paths:?}");
    assert_eq!(
        app.get("/v1/models/lab/batches/b9").await.status(),
        StatusCode::NOT_FOUND
    );

    let after = get_json(&app.client, &app.url("/v1/models/lab")).await;
    assert_eq!(after["version"], before["version"], "nothing was added");
    assert_eq!(after["pending_batches"], 0);
}
