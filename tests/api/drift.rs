//! Drift and bad-batch detection: every batch's surprise to the posterior it met, batches
//! over the model's threshold held for review, released or rejected by an admin.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

/// Rows `from..to` of one regression problem (the same weights for every batch).
fn rows(from: usize, to: usize, shift: f64) -> Value {
    let (x, y) = random_rows(7, 200, 3, 2);
    let y: Vec<Vec<f64>> = y[from..to]
        .iter()
        .map(|r| r.iter().map(|v| v + shift).collect())
        .collect();
    json!({"x": x[from..to], "y": y})
}

async fn post(app: &TestApp, id: &str, mut batch: Value) {
    batch["batch_id"] = json!(id);
    let response = app.post_batch("lab", &batch).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED, "{id}");
}

fn largest(batch: &Value) -> f64 {
    batch["surprise"]
        .as_array()
        .expect("a surprise per output")
        .iter()
        .filter_map(Value::as_f64)
        .fold(f64::MIN, f64::max)
}

/// A service with model `lab` (3 inputs, 2 outputs) that holds batches more surprising than
/// `threshold`.
async fn lab_holding_above(threshold: f64) -> TestApp {
    let app = spawn_app().await;
    let mut model = spec("lab", 3, 2);
    model["drift_threshold"] = json!(threshold);
    assert_eq!(app.create_model(&model).await["drift_threshold"], threshold);
    app
}

/// A batch whose surprise passes the largest double (concentrations of 10¹⁵⁴ where the model
/// learnt ones near 1) is held with that surprise, the largest double: read as "no surprise",
/// it slipped past the threshold into the model, and its `surprise` read null.
#[tokio::test]
async fn a_surprise_beyond_double_precision_is_held() {
    let app = lab_holding_above(20.0).await;
    post(&app, "first", rows(0, 40, 0.0)).await;
    assert_eq!(app.wait_for_batch("lab", "first").await["status"], "folded");
    let mut wild = rows(40, 41, 0.0);
    wild["y"] = json!([[1.3e154, 1.3e154]]);
    post(&app, "wild", wild).await;
    let held = app.wait_for_batch("lab", "wild").await;
    assert_eq!(held["status"], "held", "{held}");
    for z in held["surprise"].as_array().expect("a surprise per output") {
        assert_eq!(z.as_f64(), Some(f64::MAX), "{held}");
    }
}

#[tokio::test]
async fn a_surprising_batch_is_held_until_an_admin_releases_or_rejects_it() {
    let app = lab_holding_above(20.0).await;
    post(&app, "first", rows(0, 40, 0.0)).await;
    let first = app.wait_for_batch("lab", "first").await;
    assert_eq!(first["status"], "folded");
    assert_eq!(
        first["surprise"],
        Value::Null,
        "the first fit meets no posterior"
    );

    post(&app, "agrees", rows(40, 60, 0.0)).await;
    let agrees = app.wait_for_batch("lab", "agrees").await;
    assert_eq!(agrees["status"], "folded");
    assert!(largest(&agrees) < 20.0, "{agrees}");

    // Every concentration 3 higher: a mislabelled lot.
    post(&app, "shifted", rows(60, 80, 3.0)).await;
    let held = app.wait_for_batch("lab", "shifted").await;
    assert_eq!(held["status"], "held", "{held}");
    assert!(largest(&held) > 20.0, "{held}");
    assert_eq!(held["version"], Value::Null);
    // The model goes on learning the batches after it.
    post(&app, "after", rows(80, 100, 0.0)).await;
    let after = app.wait_for_batch("lab", "after").await;
    assert_eq!(after["status"], "folded");
    let listed: Value = app
        .get("/v1/models/lab/batches?status=held")
        .await
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = listed["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["batch_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["shifted"]);

    let released = app
        .post("/v1/models/lab/batches/shifted/release", &json!({}))
        .await;
    assert_eq!(released.status(), StatusCode::OK);
    let folded = app.wait_for_batch("lab", "shifted").await;
    assert_eq!(
        folded["status"], "folded",
        "released batches are learnt: {folded}"
    );
    assert!(folded["version"].as_i64().unwrap() > after["version"].as_i64().unwrap());

    // Learning the released batch widened σ²: a far larger error is still held.
    post(&app, "bad", rows(100, 120, -30.0)).await;
    assert_eq!(app.wait_for_batch("lab", "bad").await["status"], "held");
    let rejected: Value = app
        .post("/v1/models/lab/batches/bad/reject", &json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rejected["status"], "rejected");
    assert!(rejected["error"].as_str().unwrap().contains("review"));
    assert_eq!(rejected["folded_at"], Value::Null, "{rejected}");
    assert!(rejected["rejected_at"].is_string(), "{rejected}");
    assert!(folded["folded_at"].is_string() && folded["rejected_at"].is_null());
    for (path, status) in [
        ("bad/reject", StatusCode::CONFLICT),
        ("agrees/release", StatusCode::CONFLICT),
        ("nothing/release", StatusCode::NOT_FOUND),
    ] {
        let response = app
            .post(&format!("/v1/models/lab/batches/{path}"), &json!({}))
            .await;
        assert_eq!(response.status(), status, "{path}");
    }

    let metrics = app.get("/metrics").await.text().await.unwrap();
    let count = |series: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(
        count("mordant_batches_held_total{model=\"lab\"}"),
        Some(2.0)
    );
    // Each batch once: agrees, shifted (when it was held, not again when folded), after, bad.
    assert_eq!(
        count("mordant_batch_surprise_count{model=\"lab\"}"),
        Some(4.0)
    );
}

/// A threshold set after the model was created judges the batches folded from then on; taken
/// off, it holds nothing new and leaves what it held for review.
#[tokio::test]
async fn a_threshold_changed_on_a_live_model_judges_the_batches_that_follow() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 3, 2)).await;
    post(&app, "first", rows(0, 40, 0.0)).await;
    assert_eq!(app.wait_for_batch("lab", "first").await["status"], "folded");
    post(&app, "unjudged", rows(40, 60, -30.0)).await;
    let unjudged = app.wait_for_batch("lab", "unjudged").await;
    assert_eq!(unjudged["status"], "folded", "no threshold: {unjudged}");
    assert!(largest(&unjudged) > 20.0, "{unjudged}");

    let set = app
        .patch("/v1/models/lab", &json!({"drift_threshold": 20}))
        .await;
    assert_eq!(set.status(), StatusCode::OK);
    let set: Value = set.json().await.unwrap();
    assert_eq!(set["drift_threshold"], 20.0, "{set}");
    let model: Value = app.get("/v1/models/lab").await.json().await.unwrap();
    assert_eq!(model["drift_threshold"], 20.0);
    post(&app, "judged", rows(60, 80, 60.0)).await;
    let judged = app.wait_for_batch("lab", "judged").await;
    assert_eq!(judged["status"], "held", "{judged}");

    let off = app
        .patch("/v1/models/lab", &json!({"drift_threshold": null}))
        .await;
    assert_eq!(off.status(), StatusCode::OK);
    let off: Value = off.json().await.unwrap();
    assert_eq!(off["drift_threshold"], Value::Null, "{off}");
    post(&app, "after", rows(80, 100, 60.0)).await;
    let after = app.wait_for_batch("lab", "after").await;
    assert_eq!(after["status"], "folded", "{after}");
    assert!(largest(&after) > 20.0, "{after}");
    let held = app.get("/v1/models/lab/batches/judged").await;
    let held: Value = held.json().await.unwrap();
    assert_eq!(held["status"], "held", "still for a person to decide: {held}");
}

#[tokio::test]
async fn without_a_threshold_nothing_is_held_but_surprise_is_recorded() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 3, 2)).await;
    post(&app, "first", rows(0, 40, 0.0)).await;
    post(&app, "shifted", rows(40, 60, 3.0)).await;
    let shifted = app.wait_for_batch("lab", "shifted").await;
    assert_eq!(shifted["status"], "folded");
    assert!(largest(&shifted) > 20.0, "{shifted}");
}

/// A blank: a sample of no dye, read as 0 on outputs that are never 0 in training. Its 0s are
/// measurements like any other and it is as surprising as its residuals say (about 4 here, two
/// noise standard deviations), not held: counted by the batch's own zeros, a batch of blanks
/// had no informative rows and its residuals were weighed against the posterior's uncertainty
/// alone (a surprise of about 80).
#[tokio::test]
async fn a_blank_sample_is_learnt_not_held() {
    let app = lab_holding_above(20.0).await;
    // Every concentration 0.058 (two noise standard deviations) where no reflectance moves.
    post(&app, "first", rows(0, 200, -0.442)).await;
    assert_eq!(app.wait_for_batch("lab", "first").await["status"], "folded");
    post(&app, "blank", json!({"x": [[0.0, 0.0, 0.0]], "y": [[0.0, 0.0]]})).await;
    let blank = app.wait_for_batch("lab", "blank").await;
    assert_eq!(blank["status"], "folded", "{blank}");
    let z = largest(&blank);
    assert!((0.5..20.0).contains(&z), "{blank}");
}

/// A dye used in three recipes in ten whatever the reflectances say: its model predicts about
/// its mean level everywhere, and its σ² is fitted on every row's residual. Batches of a few
/// recipes without it, from the same plant, are learnt, not held: counted by the batch's
/// non-zero rows alone, their residuals were weighed against the posterior's uncertainty and
/// read a surprise of about 20 to 30.
#[tokio::test]
async fn batches_without_a_dye_that_no_input_marks_are_learnt_not_held() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(47);
    let mut plant = |rows: usize, used: f64| {
        let x: Vec<Vec<f64>> = (0..rows)
            .map(|_| (0..3).map(|_| rng.random_range(0.0..1.0)).collect())
            .collect();
        let y: Vec<Vec<f64>> = x
            .iter()
            .map(|r| {
                let dense = 1.0 + r[0] - r[1] + rng.random_range(-0.05..0.05);
                let sparse = if rng.random_bool(used) {
                    0.5 + 2.0 * r[0] + rng.random_range(-0.05..0.05)
                } else {
                    0.0
                };
                vec![dense, sparse]
            })
            .collect();
        json!({"x": x, "y": y})
    };
    let app = spawn_app().await;
    let mut model = spec("lab", 3, 2);
    model["drift_threshold"] = json!(25.0);
    app.create_model(&model).await;
    post(&app, "first", plant(300, 0.3)).await;
    assert_eq!(app.wait_for_batch("lab", "first").await["status"], "folded");
    for i in 0..5 {
        let id = format!("without-{i}");
        post(&app, &id, plant(5, 0.0)).await;
        let batch = app.wait_for_batch("lab", &id).await;
        assert_eq!(batch["status"], "folded", "{batch}");
        assert!(largest(&batch) < 5.0, "{batch}");
    }
    post(&app, "mixed", plant(50, 0.3)).await;
    let mixed = app.wait_for_batch("lab", "mixed").await;
    assert_eq!(mixed["status"], "folded", "{mixed}");
    assert!(largest(&mixed) < 5.0, "{mixed}");
}
