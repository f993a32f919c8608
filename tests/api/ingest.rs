use mordant::estimator::{Basis, ModelConfig, Transform};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn a_model_trained_through_the_api_predicts_what_the_estimator_computes() {
    let app = spawn_app().await;
    let (d, m) = (4, 3);
    app.create_model(&spec("lab", d, m)).await;
    let batches: Vec<_> = [(1, 12), (2, 7), (3, 1), (4, 30)]
        .iter()
        .map(|&(seed, rows)| random_rows(seed, rows, d, m))
        .collect();
    for (i, (x, y)) in batches.iter().enumerate() {
        let response = app
            .post_batch("lab", &json!({"batch_id": format!("b{i}"), "x": x, "y": y}))
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["batch_id"], format!("b{i}"));
        assert_eq!(body["rows"], x.len());
        assert!(body["status"] == "queued" || body["status"] == "folded");
    }
    let last = app.wait_for_batch("lab", "b3").await;
    assert_eq!(last["status"], "folded");
    let version = last["version"].as_i64().unwrap();

    let (probe, _) = random_rows(99, 5, d, m);
    let api = app.predict_at("lab", &json!(probe), version).await;
    assert_eq!(api["version"], version);
    let config = ModelConfig::new(Basis::new(d, true, Transform::Identity), m);
    let expected = direct_state(&config, &batches, d + 1)
        .predict(mat(&probe).as_ref())
        .unwrap();
    assert_same_predictions(&api, &expected);
    // A row's answer is the same bits however many rows come with it: the probe four times
    // over (20 rows, past the few that are computed one by one) answers each copy as above.
    let many: Vec<_> = probe.iter().cycle().take(4 * probe.len()).cloned().collect();
    let answered = app.predict_at("lab", &json!(many), version).await;
    for (i, row) in answered["predictions"].as_array().unwrap().iter().enumerate() {
        assert_eq!(row, &api["predictions"][i % probe.len()], "row {i}");
    }

    let model: Value = app.get("/v1/models/lab").await.json().await.unwrap();
    assert_eq!(model["observations"], 50.0);
    assert_eq!(model["pending_batches"], 0);

    // A batch whose rows take fewer bytes than its statistics keeps only its rows (the
    // folder formed its statistics from them, to the bits checked above).
    let stored = app
        .database()
        .strings(
            "SELECT batch_id || ':' || CAST(length(statistics) AS TEXT) FROM batches \
             ORDER BY batch_id",
        )
        .await;
    let kept: Vec<(&str, usize)> = stored
        .iter()
        .map(|s| {
            let (id, length) = s.split_once(':').unwrap();
            (id, length.parse().unwrap())
        })
        .collect();
    assert_eq!(kept.len(), 4, "{stored:?}");
    assert_eq!(kept[2], ("b2", 0), "the 1-row batch: {stored:?}");
    assert!(
        kept[0].1 > 0 && kept[3].1 > 0,
        "the 12- and 30-row batches: {stored:?}"
    );
}

#[tokio::test]
async fn predict_answers_409_until_the_first_fit_and_batches_wait_for_enough_rows() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 4, 1)).await;
    let (x, y) = random_rows(1, 3, 4, 1);
    let response = app
        .post_batch("lab", &json!({"batch_id": "small", "x": x, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    // 3 rows < p = 5: the batch stays queued through several folder polls.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let batch: Value = app
        .get("/v1/models/lab/batches/small")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(batch["status"], "queued");
    let response = app
        .post(
            "/v1/models/lab/predict",
            &json!({"x": [[0.1, 0.2, 0.3, 0.4]]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_trained");

    let (x, y) = random_rows(2, 2, 4, 1);
    app.post_batch("lab", &json!({"batch_id": "enough", "x": x, "y": y}))
        .await;
    assert_eq!(app.wait_for_batch("lab", "enough").await["version"], 1);
    assert_eq!(app.wait_for_batch("lab", "small").await["version"], 1);
}

#[tokio::test]
async fn reposting_a_batch_adds_nothing_and_different_content_is_a_conflict() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let (x, y) = random_rows(1, 10, 2, 1);
    let batch = json!({"batch_id": "lot-1", "x": x, "y": y});
    let first = app.post_batch("lab", &batch).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    assert!(first.headers().get("idempotent-replayed").is_none());
    app.wait_for_batch("lab", "lot-1").await;

    let again = app.post_batch("lab", &batch).await;
    assert_eq!(again.status(), StatusCode::ACCEPTED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let body: Value = again.json().await.unwrap();
    assert_eq!(
        body["status"], "folded",
        "the replay shows the stored batch"
    );

    let (x2, y2) = random_rows(2, 10, 2, 1);
    let conflict = app
        .post_batch("lab", &json!({"batch_id": "lot-1", "x": x2, "y": y2}))
        .await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    let body: Value = conflict.json().await.unwrap();
    assert_eq!(body["error"]["code"], "conflict");

    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let model: Value = app.get("/v1/models/lab").await.json().await.unwrap();
    assert_eq!(model["observations"], 10.0);
    assert_eq!(model["version"], 1);
    let versions: Value = app
        .get("/v1/models/lab/versions")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(versions["versions"].as_array().unwrap().len(), 1);
}

/// A retry that writes a zero as `-0` (or the first attempt did) is the same batch, as JSON and
/// as CSV; a value that differs from zero, however little, is not.
#[tokio::test]
async fn a_retry_that_writes_zero_as_minus_zero_is_a_replay() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let (mut x, y) = random_rows(3, 10, 2, 1);
    x[0][1] = -0.0;
    let first = app
        .post_batch("lab", &json!({"batch_id": "zeros", "x": x, "y": y}))
        .await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);

    x[0][1] = 0.0;
    let again = app
        .post_batch("lab", &json!({"batch_id": "zeros", "x": x, "y": y}))
        .await;
    assert_eq!(again.status(), StatusCode::ACCEPTED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");

    let mut csv = String::from("R400,R410,dye_0\n");
    for (row, (xs, ys)) in x.iter().zip(&y).enumerate() {
        let first = if row == 0 { "-0".to_owned() } else { xs[0].to_string() };
        let rest = if row == 0 { "-0.0".to_owned() } else { xs[1].to_string() };
        csv.push_str(&format!("{first},{rest},{}\n", ys[0]));
    }
    let mut x_csv = x.clone();
    x_csv[0][0] = 0.0;
    let csv_first = app.post_csv("lab", Some("csv-zeros"), csv).await;
    assert_eq!(csv_first.status(), StatusCode::ACCEPTED);
    let as_json = app
        .post_batch("lab", &json!({"batch_id": "csv-zeros", "x": x_csv, "y": y}))
        .await;
    assert_eq!(as_json.headers()["idempotent-replayed"], "true");

    x[0][1] = 1e-300;
    let other = app
        .post_batch("lab", &json!({"batch_id": "zeros", "x": x, "y": y}))
        .await;
    assert_eq!(other.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn the_idempotency_key_header_names_the_batch() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let (x, y) = random_rows(1, 4, 2, 1);
    let post = || {
        app.client
            .post(app.url("/v1/models/lab/batches"))
            .header("Idempotency-Key", "mes-7f3a")
            .json(&json!({"x": x, "y": y}))
            .send()
    };
    let first = post().await.unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let body: Value = first.json().await.unwrap();
    assert_eq!(body["batch_id"], "mes-7f3a");
    let second = post().await.unwrap();
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    let folded = app.wait_for_batch("lab", "mes-7f3a").await;
    assert_eq!(folded["rows"], 4);
    let model: Value = app.get("/v1/models/lab").await.json().await.unwrap();
    assert_eq!(model["observations"], 4.0);
}

#[tokio::test]
async fn a_batch_that_cannot_be_folded_is_rejected_and_the_model_keeps_its_last_good_version() {
    let app = spawn_app().await;
    let (d, m) = (2, 1);
    app.create_model(&spec("lab", d, m)).await;
    let good1 = random_rows(1, 10, d, m);
    app.post_batch(
        "lab",
        &json!({"batch_id": "good-1", "x": good1.0, "y": good1.1}),
    )
    .await;
    assert_eq!(app.wait_for_batch("lab", "good-1").await["version"], 1);

    // Each value is finite, and so are the batch's own statistics (y² ≈ 1.4e308), but the
    // model's running sum of y² would overflow.
    let huge = json!({"batch_id": "huge", "x": [[0.5, 0.5]], "y": [[1.2e154]]});
    assert_eq!(
        app.post_batch("lab", &huge).await.status(),
        StatusCode::ACCEPTED
    );
    let huge2 = json!({"batch_id": "huge-2", "x": [[0.4, 0.5]], "y": [[1.2e154]]});
    assert_eq!(
        app.post_batch("lab", &huge2).await.status(),
        StatusCode::ACCEPTED
    );
    let good2 = random_rows(2, 10, d, m);
    app.post_batch(
        "lab",
        &json!({"batch_id": "good-2", "x": good2.0, "y": good2.1}),
    )
    .await;

    let rejected = app.wait_for_batch("lab", "huge-2").await;
    assert_eq!(rejected["status"], "rejected");
    assert!(
        rejected["error"].as_str().unwrap().contains("finite"),
        "{rejected}"
    );
    assert_eq!(rejected["version"], Value::Null);
    let folded = app.wait_for_batch("lab", "good-2").await;
    assert_eq!(folded["status"], "folded");

    // The model learnt exactly the batches that were folded.
    let huge_status = app.wait_for_batch("lab", "huge").await;
    let mut learnt = vec![good1];
    if huge_status["status"] == "folded" {
        learnt.push((vec![vec![0.5, 0.5]], vec![vec![1.2e154]]));
    }
    learnt.push(good2);
    let version = folded["version"].as_i64().unwrap();
    let probe = vec![vec![0.3, 0.6]];
    let api = app.predict_at("lab", &json!(probe), version).await;
    let config = ModelConfig::new(Basis::new(d, true, Transform::Identity), m);
    let expected = direct_state(&config, &learnt, d + 1)
        .predict(mat(&probe).as_ref())
        .unwrap();
    assert_same_predictions(&api, &expected);
}

/// The path and message of the first detail of a `422`.
async fn refused(response: reqwest::Response) -> (String, String) {
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    let detail = &body["error"]["details"][0];
    (detail["path"].as_str().unwrap().to_owned(), detail["message"].as_str().unwrap().to_owned())
}

/// A batch whose own sums of squares overflow is refused at the column of its largest value,
/// named with its row, as JSON and as CSV (there at the cell): among thousands of rows the
/// client can find it.
#[tokio::test]
async fn a_batch_whose_statistics_overflow_names_its_largest_value() {
    let app = spawn_app().await;
    app.create_model(&json!({"name": "units", "features": ["temperature", "mass"], "outputs": ["dye"]}))
        .await;
    let batch = json!({"batch_id": "grams", "x": [[20.0, 1.0], [21.0, 2e154], [22.0, 3.0]],
                       "y": [[0.1], [0.2], [0.3]]});
    let (path, message) = refused(app.post_batch("units", &batch).await).await;
    assert_eq!(path, "/x");
    assert!(message.contains("2e154 of \"mass\" in row 1 (counting from 0)"), "{message}");
    let csv = "temperature,mass,dye\n20,1,0.1\n21,2,0.2\n22,3,-3e200\n".to_owned();
    let (path, message) = refused(app.post_csv("units", Some("csv"), csv).await).await;
    // In a CSV body, at the cell, as its other cells' errors are.
    assert_eq!(path, "/rows/2/dye");
    assert!(message.contains("-3e200 of \"dye\" in row 2 (counting from 0)"), "{message}");
    let listed: Value = app.get("/v1/models/units/batches").await.json().await.unwrap();
    assert_eq!(listed["batches"], json!([]), "{listed}");

    // A colour model reads a reflectance past full scale as full scale: the output it blames.
    app.create_model(&json!({"name": "dips", "outputs": ["red"], "transform": "kubelka_munk",
        "spectrum": {"start_nm": 400, "interval_nm": 100, "count": 4, "scale": "percent"}}))
        .await;
    let batch = json!({"batch_id": "typo",
        "spectra": {"start_nm": 400, "interval_nm": 100,
                    "values": [[50.0, 40.0, 30.0, 20.0], [50.0, 1e200, 30.0, 20.0]]},
        "y": [[0.5], [1e160]]});
    let (path, message) = refused(app.post_batch("dips", &batch).await).await;
    assert_eq!(path, "/y", "{message}");
    assert!(message.contains("1e160 of \"red\" in row 1"), "{message}");
}

/// A batch with a column whose values are all too small for the statistics to hold (their
/// squares, and those of their differences, below the smallest normal double) is refused at
/// the column's largest value, as an overflow is; a column of exact zeros, or a tiny value
/// beside ordinary ones, is learnt.
#[tokio::test]
async fn a_batch_whose_column_is_too_small_to_square_names_it() {
    let app = spawn_app().await;
    app.create_model(&json!({"name": "units", "features": ["temperature", "mass"], "outputs": ["dye"]}))
        .await;
    let batch = json!({"batch_id": "moles", "x": [[20.0, 1e-150], [21.0, -3e-150], [22.0, 2e-150]],
                       "y": [[0.1], [0.2], [0.3]]});
    let (path, message) = refused(app.post_batch("units", &batch).await).await;
    assert_eq!(path, "/x");
    assert!(message.contains("\"mass\" is at most -3e-150 in magnitude in this batch (row 1"), "{message}");
    let csv = "temperature,mass,dye\n20,1,1e-160\n21,2,0\n22,3,-4e-145\n".to_owned();
    let (path, message) = refused(app.post_csv("units", Some("csv"), csv).await).await;
    assert_eq!(path, "/rows/2/dye");
    assert!(message.contains("\"dye\" is at most -4e-145"), "{message}");
    let listed: Value = app.get("/v1/models/units/batches").await.json().await.unwrap();
    assert_eq!(listed["batches"], json!([]), "{listed}");

    // Zeros, and a tiny value where the column holds ordinary ones, are data like any other.
    for (id, x) in [
        ("zeros", json!([[20.0, 0.0], [21.0, 0.0], [22.0, 0.0]])),
        ("beside", json!([[20.0, 1e-200], [21.0, 2.0], [22.0, 3.0]])),
    ] {
        let batch = json!({"batch_id": id, "x": x, "y": [[0.1], [0.2], [0.3]]});
        assert_eq!(app.post_batch("units", &batch).await.status(), StatusCode::ACCEPTED, "{id}");
    }
}

/// A feature on a large offset (a serial number, a timestamp) whose values in the batch differ
/// by less than 1e-5 of their size is accepted and flagged by name at `/x`, whether the batch
/// comes as JSON or as CSV, and again when it is replayed; a feature that varies enough is not.
#[tokio::test]
async fn a_feature_that_varies_too_little_for_double_precision_is_flagged() {
    let app = spawn_app().await;
    app.create_model(&json!({"name": "offset", "features": ["temperature", "serial"], "outputs": ["dye"]}))
        .await;
    let rows: Vec<(f64, f64, f64)> = (0..12)
        .map(|i| {
            let (a, b) = (f64::from(i % 7) / 7.0, f64::from((i * 3) % 5) / 5.0);
            (350.0 + b, 1e6 + a, 2.0 * a + b)
        })
        .collect();
    let x: Vec<[f64; 2]> = rows.iter().map(|&(t, s, _)| [t, s]).collect();
    let y: Vec<[f64; 1]> = rows.iter().map(|&(_, _, c)| [c]).collect();
    let flagged = |body: &Value| -> Vec<(String, bool)> {
        body["warnings"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|w| {
                        let message = w["message"].as_str().unwrap_or_default();
                        (w["path"].as_str().unwrap_or_default().to_owned(), message.contains("\"serial\""))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let batch = json!({"batch_id": "json", "x": x, "y": y});
    for replay in [false, true] {
        let response = app.post_batch("offset", &batch).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let replayed = response.headers().get("idempotent-replayed");
        assert_eq!(replayed.is_some_and(|v| v == "true"), replay, "{replayed:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(flagged(&body), [("/x".to_owned(), true)], "{body}");
    }

    let mut csv = String::from("temperature,serial,dye\n");
    for (t, s, c) in &rows {
        csv.push_str(&format!("{t},{s},{c}\n"));
    }
    let response = app.post_csv("offset", Some("csv"), csv).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(flagged(&body), [("/x".to_owned(), true)], "{body}");

    // The serial number sent as an offset from a reference value: nothing to say.
    let shifted: Vec<[f64; 2]> = x.iter().map(|&[t, s]| [t, s - 1e6]).collect();
    let response = app
        .post_batch("offset", &json!({"batch_id": "shifted", "x": shifted, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.unwrap();
    assert!(body.get("warnings").is_none(), "{body}");
}

/// Readings a reflectance transform cannot read as meant are accepted and flagged, as JSON and
/// as CSV: a named feature above 1 under `kubelka_munk` without a declared spectrum (a
/// percentage), and rows at or below Saunderson's `k1` at every band (a `k1` of 0.9, which
/// leaves every band of these dips black).
#[tokio::test]
async fn reflectances_the_transform_cannot_read_as_meant_are_flagged() {
    let app = spawn_app().await;
    let paths = |body: &Value| -> Vec<String> {
        body["warnings"]
            .as_array()
            .map(|list| list.iter().map(|w| w["path"].as_str().unwrap_or_default().to_owned()).collect())
            .unwrap_or_default()
    };
    app.create_model(&json!({"name": "named-km", "features": ["r450", "r550"], "outputs": ["red"],
        "transform": "kubelka_munk"}))
        .await;
    let response = app
        .post_batch("named-km", &json!({"batch_id": "percent", "x": [[45.5, 30.0], [0.4, 0.3]], "y": [[0.1], [0.2]]}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(paths(&body), ["/x", "/x"], "{body}");
    assert!(body["warnings"][0]["message"].as_str().unwrap().starts_with("\"r450\" is above 1"), "{body}");
    let response = app
        .post_csv("named-km", Some("percent-csv"), "r550,r450,red\n30,45.5,0.1\n".to_owned())
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(paths(&body), ["/x", "/x"], "{body}");
    let response = app
        .post_batch("named-km", &json!({"batch_id": "fractions", "x": [[0.455, 0.3], [0.4, 0.3]], "y": [[0.1], [0.2]]}))
        .await;
    let body: Value = response.json().await.unwrap();
    assert!(body.get("warnings").is_none(), "{body}");

    for (name, k1, flagged) in [("surface-wrong", 0.9, true), ("surface-textbook", 0.04, false)] {
        app.create_model(&json!({"name": name, "outputs": ["red"], "transform": "saunderson",
            "saunderson": {"k1": k1, "k2": 0.6},
            "spectrum": {"start_nm": 400, "interval_nm": 100, "count": 3, "scale": "percent"}}))
            .await;
        let batch = json!({"batch_id": "dips",
            "spectra": {"start_nm": 400, "interval_nm": 100, "values": [[50.0, 95.0, 30.0], [20.0, 40.0, 60.0]]},
            "y": [[0.1], [0.2]]});
        let response = app.post_batch(name, &batch).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let body: Value = response.json().await.unwrap();
        let expected: &[&str] = if flagged { &["/spectra/values/1"] } else { &[] };
        assert_eq!(paths(&body), expected, "{body}");
        let csv = "400nm,500nm,600nm,red\n20,40,60,0.2\n".to_owned();
        let response = app.post_csv(name, Some("dips-csv"), csv).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let body: Value = response.json().await.unwrap();
        let expected: &[&str] = if flagged { &["/rows/0"] } else { &[] };
        assert_eq!(paths(&body), expected, "{body}");
    }
}
