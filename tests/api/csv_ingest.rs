//! CSV ingestion for MES systems: any column order, the same durability and idempotency as
//! JSON, and clear errors.

use mordant::estimator::{Basis, ModelConfig, Transform};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

/// The rows as CSV with the columns in the order of `columns` (names of `spec("lab", 2, 1)`).
fn to_csv(columns: &[&str], (x, y): &RowsXY) -> String {
    let mut out = columns.join(",") + "\n";
    for (xr, yr) in x.iter().zip(y) {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| match *c {
                "R400" => xr[0].to_string(),
                "R410" => xr[1].to_string(),
                _ => yr[0].to_string(),
            })
            .collect();
        out += &(cells.join(",") + "\n");
    }
    out
}

#[tokio::test]
async fn a_csv_batch_in_any_column_order_trains_the_model_like_json() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let first = random_rows(1, 12, 2, 1);
    let second = random_rows(2, 6, 2, 1);
    let r = app.post_csv("lab", Some("csv-1"),
        to_csv(&["dye_0", "R410", "R400"], &first),
    )
    .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["batch_id"], "csv-1");
    assert_eq!(body["rows"], 12);
    // The same rows as JSON under the same id are the same batch.
    let replay = app
        .post_batch(
            "lab",
            &json!({"batch_id": "csv-1", "x": first.0, "y": first.1}),
        )
        .await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let r = app.post_csv("lab", Some("csv-2"),
        to_csv(&["R400", "dye_0", "R410"], &second),
    )
    .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let version = app.wait_for_batch("lab", "csv-2").await["version"]
        .as_i64()
        .unwrap();

    let probe = vec![vec![0.3, 0.8]];
    let api = app.predict_at("lab", &json!(probe), version).await;
    let config = ModelConfig::new(Basis::new(2, true, Transform::Identity), 1);
    let expected = direct_state(&config, &[first, second], 3)
        .predict(mat(&probe).as_ref())
        .unwrap();
    assert_same_predictions(&api, &expected);
}

#[tokio::test]
async fn csv_errors_name_the_column_or_cell() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let cases = [
        ("R400,R410,dye_0,colour\n1,2,3,red\n", "/header/3"),
        ("R400,dye_0\n1,3\n", "/header"),
        ("R400,R410,R410,dye_0\n1,2,2,3\n", "/header/2"),
        ("R400,R410,dye_0\n1,NaN,3\n", "/rows/0/R410"),
        ("R400,R410,dye_0\n1,2,3\n4,five,6\n", "/rows/1/R410"),
        ("R400,R410,dye_0\n1,2\n", "/rows/0"),
        ("R400,R410,dye_0\n", "/rows"),
    ];
    for (body, path) in cases {
        let r = app.post_csv("lab", None, body.to_owned()).await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body:?}");
        let error: Value = r.json().await.unwrap();
        let paths: Vec<&str> = error["error"]["details"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
        assert!(
            paths.contains(&path),
            "{body:?}: {path} missing from {paths:?}"
        );
    }
    // A cell of a megabyte is quoted by its start and length, not echoed back whole.
    let huge = format!("R400,R410,dye_0\n1,{},3\n", "7x".repeat(500_000));
    let r = app.post_csv("lab", None, huge).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let answer = r.text().await.unwrap();
    assert!(answer.len() < 1000, "{} bytes", answer.len());
    assert!(answer.contains("(1000000 bytes)"), "{answer}");
    let not_utf8 = b"R400,R410,dye_0\n1,\xff,3\n".to_vec();
    let r = app
        .post_raw("/v1/models/lab/batches", "text/csv", not_utf8)
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "not UTF-8");
    let error: Value = r.json().await.unwrap();
    assert_eq!(error["error"]["code"], "malformed_csv");
    let model: Value = app.get("/v1/models/lab").await.json().await.unwrap();
    assert_eq!(model["pending_batches"], 0, "nothing was queued");
    // Lines of empty cells, as spreadsheets write them, are not rows.
    let r = app.post_csv("lab", None, "R400,R410,dye_0\n1,2,3\n,,\n\n".to_owned()).await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert_eq!(r.json::<Value>().await.unwrap()["rows"], 1);
    let r = app
        .post_raw("/v1/models/lab/batches", "application/xml", "<x/>")
        .await;
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn a_csv_batch_over_the_row_limit_is_413() {
    let database = fresh_database().await;
    let mut settings = test_settings(&database.url);
    settings.limits.max_rows_per_request = 5;
    let app = spawn_with(settings).await;
    app.create_model(&spec("lab", 2, 1)).await;
    let r = app.post_csv("lab", None,
        to_csv(&["R400", "R410", "dye_0"], &random_rows(1, 6, 2, 1)),
    )
    .await;
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let r = app.post_csv("lab", None,
        to_csv(&["R400", "R410", "dye_0"], &random_rows(1, 5, 2, 1)),
    )
    .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
}
