//! An instrument replaced through the API (`POST /v1/models/{name}/successor`): the overlap's
//! batches carry both instruments' readings, then the successor's alone; predict answers the
//! successor's readings through the map and its own model; the model's view says how far the
//! transfer has come; versions, restore and refit carry it.

use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

/// The old instrument's grid: 400–700 nm every 20 nm.
const OLD: (f64, f64, usize) = (400.0, 20.0, 16);

/// Samples: three dye concentrations.
fn samples(rows: usize, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..rows)
        .map(|_| (0..3).map(|_| rng.random_range(0.0..1.0)).collect())
        .collect()
}

/// Readings in percent of samples `c` on the grid `(start, interval, count)` by an instrument
/// that shifts wavelengths by `shift` nm and has gain `gain`, with a little noise.
fn read(c: &[Vec<f64>], grid: (f64, f64, usize), shift: f64, gain: f64, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let peak = |nm: f64, centre: f64, width: f64| (-0.5 * ((nm - centre) / width).powi(2)).exp();
    c.iter()
        .map(|c| {
            (0..grid.2)
                .map(|j| {
                    let nm = grid.0 + grid.1 * j as f64 + shift;
                    let clean = 90.0
                        - 40.0 * c[0] * peak(nm, 470.0, 40.0)
                        - 30.0 * c[1] * peak(nm, 560.0, 40.0)
                        - 35.0 * c[2] * peak(nm, 640.0, 35.0);
                    gain * clean + 0.05 * rng.random_range(-1.0..1.0)
                })
                .collect()
        })
        .collect()
}

/// The successor's readings of `c` as a fraction, on 395–705 nm every 10 nm: it reads 3 nm
/// off and 5 % low.
fn successor_readings(c: &[Vec<f64>], seed: u64) -> Value {
    let values: Vec<Vec<f64>> = read(c, (395.0, 10.0, 32), 3.0, 0.95, seed)
        .into_iter()
        .map(|row| row.into_iter().map(|v| v / 100.0).collect())
        .collect();
    json!({"start_nm": 395, "interval_nm": 10, "values": values})
}

fn old_readings(c: &[Vec<f64>], seed: u64) -> Value {
    json!({"start_nm": OLD.0, "interval_nm": OLD.1, "values": read(c, OLD, 0.0, 1.0, seed)})
}

/// A CSV batch of the samples `c`: the old instrument's bands (when `old` holds its readings)
/// and the successor's columns `successor:<λ>nm` of `successor` (as [`successor_readings`]
/// writes them), then the outputs.
fn csv(c: &[Vec<f64>], old: Option<&Value>, successor: &Value) -> String {
    let mut header: Vec<String> = Vec::new();
    if old.is_some() {
        header.extend((0..OLD.2).map(|j| format!("{}nm", OLD.0 + OLD.1 * j as f64)));
    }
    header.extend((0..32).map(|j| format!("successor:{}nm", 395 + 10 * j)));
    header.extend(["red", "yellow", "blue"].map(String::from));
    let mut text = header.join(",") + "\n";
    for (i, c) in c.iter().enumerate() {
        let mut cells: Vec<String> = Vec::new();
        if let Some(old) = old {
            cells.extend(old["values"][i].as_array().unwrap().iter().map(|v| v.to_string()));
        }
        cells.extend(successor["values"][i].as_array().unwrap().iter().map(|v| v.to_string()));
        cells.extend(c.iter().map(|v| v.to_string()));
        text += &(cells.join(",") + "\n");
    }
    text
}

/// Creates the model "swap" on the old instrument's grid (with `extra` fields in its spec).
async fn create_swap(app: &TestApp, extra: Value) {
    let mut spec = json!({
        "name": "swap", "outputs": ["red", "yellow", "blue"], "transform": "none",
        "prior": "ridge", "first_fit_rows": 40,
        "spectrum": {"start_nm": OLD.0, "interval_nm": OLD.1, "count": OLD.2, "scale": "percent"},
    });
    for (k, v) in extra.as_object().expect("fields") {
        spec[k] = v.clone();
    }
    app.create_model(&spec).await;
}

/// The successor of the tests: 400–700 nm every 10 nm, as a fraction.
fn declaration() -> Value {
    json!({"spectrum": {"start_nm": 400, "interval_nm": 10, "count": 31, "scale": "fraction"}})
}

/// Trains "swap" on 60 samples read by the old instrument, declares the successor, and folds
/// an overlap of `overlap` samples read by both.
async fn swap_with_overlap(app: &TestApp, overlap: usize) {
    let c = samples(60, 1);
    learn(app, json!({"batch_id": "old", "spectra": old_readings(&c, 2), "y": c})).await;
    let declared = app.post("/v1/models/swap/successor", &declaration()).await;
    assert_eq!(declared.status(), StatusCode::OK);
    let both = samples(overlap, 4);
    learn(
        app,
        json!({"batch_id": "overlap", "spectra": old_readings(&both, 5),
               "successor": successor_readings(&both, 6), "y": both}),
    )
    .await;
}

async fn model(app: &TestApp, name: &str) -> Value {
    get_json(&app.client, &app.url(&format!("/v1/models/{name}"))).await
}

async fn learn(app: &TestApp, batch: Value) -> Value {
    let id = batch["batch_id"].as_str().unwrap().to_owned();
    let response = app.post_batch("swap", &batch).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED, "{id}");
    let status = app.wait_for_batch("swap", &id).await;
    assert_eq!(status["status"], "folded", "{status}");
    status
}

async fn predict(app: &TestApp, body: &Value) -> reqwest::Response {
    app.post("/v1/models/swap/predict", body).await
}

/// Root mean square error of the first output's predicted means against `c`, and the answer.
async fn rmse(app: &TestApp, body: Value, c: &[Vec<f64>]) -> (f64, Value) {
    let response = predict(app, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    let rows = answer["predictions"].as_array().unwrap();
    assert_eq!(rows.len(), c.len());
    let sum: f64 = rows
        .iter()
        .zip(c)
        .map(|(p, c)| (0..3).map(|k| (p["mean"][k].as_f64().unwrap() - c[k]).powi(2)).sum::<f64>())
        .sum();
    ((sum / (3 * c.len()) as f64).sqrt(), answer)
}

#[tokio::test]
async fn an_instrument_is_replaced_with_an_overlap_and_answers_through_the_transfer() {
    let app = spawn_app().await;
    create_swap(&app, json!({})).await;
    let declare = declaration();
    let untrained = app.post("/v1/models/swap/successor", &declare).await;
    assert_eq!(untrained.status(), StatusCode::CONFLICT);
    let refused: Value = untrained.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "model_not_trained", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("a successor is declared on a trained model"), "{message}");

    let c = samples(60, 1);
    learn(&app, json!({"batch_id": "old", "spectra": old_readings(&c, 2), "y": c})).await;
    assert_eq!(model(&app, "swap").await["version"], 1);
    assert!(model(&app, "swap").await.get("successor").is_none());
    let none = predict(
        &app,
        &json!({"instrument": "successor", "spectra": old_readings(&c[..1], 1)}),
    )
    .await;
    assert_eq!(none.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        error_paths(&none.json::<Value>().await.unwrap()["error"]),
        ["/instrument"]
    );
    for instrument in [json!("model"), Value::Null] {
        let own = json!({"instrument": instrument, "spectra": old_readings(&c[..1], 1)});
        assert_eq!(predict(&app, &own).await.status(), StatusCode::OK);
    }

    // Absorbance cannot succeed a reflectance instrument; a batch may not carry readings of an
    // instrument not declared.
    let absorbance = app
        .post(
            "/v1/models/swap/successor",
            &json!({"spectrum": {"start_nm": 400, "interval_nm": 10, "count": 31, "scale": "absorbance"}}),
        )
        .await;
    assert_eq!(absorbance.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let error = absorbance.json::<Value>().await.unwrap()["error"].clone();
    assert_eq!(error_paths(&error), ["/spectrum/scale"]);
    let message = error["details"][0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the model reads \"percent\""),
        "the scale as the API spells it: {message}"
    );
    let early = app
        .post_batch(
            "swap",
            &json!({"batch_id": "early", "successor": successor_readings(&c[..2], 3), "y": &c[..2]}),
        )
        .await;
    assert_eq!(early.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let declared = app.post("/v1/models/swap/successor", &declare).await;
    assert_eq!(declared.status(), StatusCode::OK);
    let view: Value = declared.json().await.unwrap();
    assert_eq!(view["version"], 2);
    assert_eq!(view["successor"]["spectrum"]["count"], 31);
    assert_eq!(view["successor"]["pairs"], 0.0);
    assert_eq!(view["successor"]["answered_by"], json!([]));
    assert_eq!(view["successor"]["retired"], false);
    // The same declaration again changes nothing; another is refused, and so is growth.
    let again = app.post("/v1/models/swap/successor", &declare).await;
    assert_eq!(again.json::<Value>().await.unwrap()["version"], 2);
    let other = json!({"spectrum": {"start_nm": 400, "interval_nm": 20, "count": 16, "scale": "percent"}});
    let conflict = app.post("/v1/models/swap/successor", &other).await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    let grow = app
        .post("/v1/models/swap/outputs", &json!({"outputs": ["black"]}))
        .await;
    assert_eq!(grow.status(), StatusCode::CONFLICT);

    let probe = samples(40, 9);
    let successor_probe = json!({"instrument": "successor", "spectra": successor_readings(&probe, 10)});
    let nothing = predict(&app, &successor_probe).await;
    assert_eq!(nothing.status(), StatusCode::CONFLICT);

    // The overlap: 30 samples read by both.
    let overlap = samples(30, 4);
    let (old_overlap, new_overlap) = (old_readings(&overlap, 5), successor_readings(&overlap, 6));
    learn(
        &app,
        json!({"batch_id": "overlap", "spectra": old_overlap,
               "successor": new_overlap, "y": overlap}),
    )
    .await;
    // The same rows as CSV are the same batch; other readings under its id are refused.
    let same = app.post_csv("swap", Some("overlap"), csv(&overlap, Some(&old_overlap), &new_overlap)).await;
    assert_eq!(same.headers()["idempotent-replayed"], "true");
    let other = successor_readings(&overlap, 7);
    let differs = app.post_csv("swap", Some("overlap"), csv(&overlap, Some(&old_overlap), &other)).await;
    assert_eq!(differs.status(), StatusCode::CONFLICT);
    let view = model(&app, "swap").await;
    assert_eq!(view["version"], 3);
    assert_eq!(view["observations"], 90.0, "the old readings teach the model too");
    assert_eq!(view["successor"]["pairs"], 30.0);
    assert_eq!(view["successor"]["own_rows"], 30.0);
    // Until the own model has predicted rows it had not seen, the map path answers alone.
    assert_eq!(view["successor"]["answered_by"], json!(["map"]));
    assert_eq!(view["successor"]["own_weight"], 0.0);

    // The successor's readings answered through the transfer are far closer than the same
    // readings read as if the old instrument had made them (3 nm off, 5 % low).
    let (through, answer) = rmse(&app, successor_probe.clone(), &probe).await;
    let naive: Vec<Vec<f64>> = read(&probe, OLD, 3.0, 95.0 / 100.0, 10);
    let (as_if_old, _) = rmse(
        &app,
        json!({"spectra": {"start_nm": OLD.0, "interval_nm": OLD.1, "values": naive}}),
        &probe,
    )
    .await;
    let (old, old_answer) = rmse(&app, json!({"spectra": old_readings(&probe, 11)}), &probe).await;
    assert!(
        through < 0.5 * as_if_old,
        "through the transfer {through}, as if read by the old instrument {as_if_old}"
    );
    assert!(through < 0.1, "through the transfer {through} (old instrument {old})");
    // The answer carries more uncertainty than the old instrument's own (the map's and the
    // own model's).
    let variance = |a: &Value| a["predictions"][0]["variance"][0].as_f64().unwrap();
    assert!(variance(&answer) > variance(&old_answer));
    assert!(variance(&answer).is_finite());

    // The successor alone from now on: its own model learns, the map does not. One batch
    // comes as CSV.
    let c = samples(25, 23);
    let response = app.post_csv("swap", Some("new-3"), csv(&c, None, &successor_readings(&c, 33))).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let bad = csv(&c[..1], None, &successor_readings(&c[..1], 1)).replacen(",0.", ",x", 1);
    let refused = app.post_csv("swap", Some("bad"), bad).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(error_paths(&refused["error"]), ["/rows/0/successor:405nm"]);
    for i in 0..3 {
        let c = samples(25, 20 + i);
        learn(
            &app,
            json!({"batch_id": format!("new-{i}"), "successor": successor_readings(&c, 30 + i), "y": c}),
        )
        .await;
    }
    let view = model(&app, "swap").await;
    assert_eq!(view["observations"], 90.0, "the model learns no successor-only row");
    assert_eq!(view["successor"]["pairs"], 30.0);
    assert_eq!(view["successor"]["own_rows"], 130.0);
    // Here the own model soon predicts the rows it had not seen as well as the map path: the
    // old instrument retired once 30 (weighted) rows had shown it, and its scoring stopped.
    let status = &view["successor"];
    assert_eq!(status["retired"], true, "{status}");
    assert_eq!(status["answered_by"], json!(["own"]));
    assert_eq!(status["own_weight"], 1.0);
    let scored = status["scored_rows"].as_f64().unwrap();
    assert!((30.0..100.0).contains(&scored), "{status}");
    assert!(status["mean_log_score_own"].as_f64() >= status["mean_log_score_map"].as_f64());
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for line in [
        "mordant_successor_pairs{model=\"swap\"} 30",
        "mordant_successor_own_rows{model=\"swap\"} 130",
        "mordant_successor_retired{model=\"swap\"} 1",
        "mordant_successor_own_weight{model=\"swap\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    let (later, _) = rmse(&app, successor_probe.clone(), &probe).await;
    assert!(later < 0.1, "after the successor's own rows {later}");

    // After retirement the old instrument's readings still teach the model, but the map
    // learns no more pairs.
    let late = samples(10, 40);
    learn(
        &app,
        json!({"batch_id": "late", "spectra": old_readings(&late, 41),
               "successor": successor_readings(&late, 42), "y": late}),
    )
    .await;
    let view = model(&app, "swap").await;
    assert_eq!(view["observations"], 100.0);
    assert_eq!(view["successor"]["pairs"], 30.0);
    assert_eq!(view["successor"]["own_rows"], 140.0);

    // A restore of the declaration's version brings back its empty succession; a refit keeps
    // the succession it finds; restoring the last fold brings back what it had learnt.
    let version = view["version"].as_i64().unwrap();
    let restored = app.post("/v1/models/swap/versions/2/restore", &json!({})).await;
    assert_eq!(restored.status(), StatusCode::CREATED);
    assert_eq!(model(&app, "swap").await["successor"]["own_rows"], 0.0);
    let restored = app
        .post(&format!("/v1/models/swap/versions/{version}/restore"), &json!({}))
        .await;
    assert_eq!(restored.status(), StatusCode::CREATED);
    let refit = app.post("/v1/models/swap/refit", &json!({})).await;
    assert_eq!(refit.status(), StatusCode::CREATED);
    let view = model(&app, "swap").await;
    assert_eq!(view["successor"]["own_rows"], 140.0);
    assert_eq!(view["successor"]["retired"], true);
    // A version from before the successor was declared keeps what the transfer has learnt.
    let first = app.post("/v1/models/swap/versions/1/restore", &json!({})).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let view = model(&app, "swap").await;
    assert_eq!(view["observations"], 60.0);
    assert_eq!(view["successor"]["own_rows"], 140.0);
    assert_eq!(view["successor"]["retired"], true);
    let history = get_json(&app.client, &app.url("/v1/models/swap/versions")).await;
    assert!(
        history["versions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["full_state"] == true),
        "a model with a successor keeps its versions in full"
    );

    // The field's name written with an escape is the same field: the successor answers (the
    // model's own instrument was assumed, and the request refused as naming no successor).
    let plain = json!({"instrument": "successor", "spectra": successor_readings(&probe[..2], 10)})
        .to_string();
    let escaped = plain.replacen("\"instrument\"", "\"\\u0069nstrument\"", 1);
    assert!(escaped.contains("\\u0069nstrument"), "{escaped}");
    let mut answers = Vec::new();
    for body in [plain, escaped] {
        let response = app.post_raw("/v1/models/swap/predict", "application/json", body).await;
        assert_eq!(response.status(), StatusCode::OK);
        answers.push(response.json::<Value>().await.unwrap());
    }
    assert_eq!(answers[0], answers[1]);

    // Requests that cannot be answered say why.
    let unknown = predict(&app, &json!({"instrument": "other", "spectra": old_readings(&probe, 1)})).await;
    assert_eq!(unknown.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let mismatched = app
        .post_batch(
            "swap",
            &json!({"batch_id": "short", "successor": successor_readings(&probe[..2], 1), "y": &probe[..3]}),
        )
        .await;
    assert_eq!(mismatched.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // The rows that disagree with `y` are the successor's: the message names them, not the
    // `spectra` the batch does not hold.
    let error: Value = mismatched.json().await.unwrap();
    let detail = &error["error"]["details"][0];
    assert_eq!(detail["path"], "/y", "{error}");
    assert_eq!(detail["message"], "has 3 rows but successor has 2", "{error}");
    app.stop().await;
}

/// Retention empties a successor batch's readings with its rows, and the transfer, which
/// holds what it learnt of them, answers as before.
#[tokio::test]
async fn retention_removes_a_successor_batch_s_readings_and_the_transfer_still_answers() {
    let app = spawn_configured(|s| {
        s.retention.raw_rows_days = 1;
        s.retention.purge_interval_secs = 1;
    })
    .await;
    create_swap(&app, json!({})).await;
    swap_with_overlap(&app, 30).await;
    let probe = samples(5, 9);
    let body = json!({"instrument": "successor", "spectra": successor_readings(&probe, 10)});
    let before: Value = predict(&app, &body).await.json().await.unwrap();

    crate::retention::backdate(app.database()).await;
    wait_until(std::time::Duration::from_secs(30), || async {
        let b = get_json(&app.client, &app.url("/v1/models/swap/batches/overlap")).await;
        (!b["rows_purged_at"].is_null()).then_some(())
    })
    .await
    .expect("the overlap's rows purged within 30 s");
    // The plain batch keeps its statistics; the successor batch keeps nothing of its rows.
    let with_statistics = app
        .database()
        .strings_each(
            "SELECT batch_id FROM batches WHERE length(statistics) > 0 ORDER BY batch_id",
            "SELECT batch_id FROM batches WHERE length(statistics) > 0 ORDER BY batch_id",
        )
        .await;
    assert_eq!(with_statistics, ["old"]);
    let after: Value = predict(&app, &body).await.json().await.unwrap();
    assert_eq!(after["predictions"], before["predictions"]);
    let later = samples(10, 11);
    learn(
        &app,
        json!({"batch_id": "later", "successor": successor_readings(&later, 12), "y": later}),
    )
    .await;
    app.stop().await;
}

/// Reflectance (percent) of a sample dyed with `c` at `λ` nm by the Kubelka–Munk forward model,
/// `K/S = 0.02 + Σ cᵢ kᵢ(λ)`, `R = 1 + K/S − √((K/S)² + 2 K/S)`.
fn dyed(lambda: f64, c: &[f64]) -> f64 {
    let bands = [(430.0, 30.0), (520.0, 40.0), (610.0, 35.0)];
    let ks = 0.02
        + c.iter()
            .zip(bands)
            .map(|(c, (centre, width))| c * 3.0 * (-((lambda - centre) / width).powi(2) / 2.0).exp())
            .sum::<f64>();
    100.0 * (1.0 + ks - (ks * ks + 2.0 * ks).sqrt())
}

/// Dyed samples read on 400–700 nm every 10 nm: by the model's instrument (percent), or by the
/// successor (`successor`: 3 nm off, 5 % low, as a fraction).
fn dyed_readings(c: &[Vec<f64>], successor: bool, seed: u64) -> Value {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let values: Vec<Vec<f64>> = c
        .iter()
        .map(|c| {
            (0..31)
                .map(|j| {
                    let nm = 400.0 + 10.0 * j as f64;
                    let noise = 0.05 * rng.random_range(-1.0..1.0);
                    if successor {
                        (0.95 * dyed(nm + 3.0, c) + noise) / 100.0
                    } else {
                        dyed(nm, c) + noise
                    }
                })
                .collect()
        })
        .collect();
    json!({"start_nm": 400, "interval_nm": 10, "values": values})
}

fn recipes(rows: usize, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..rows)
        .map(|_| (0..3).map(|_| rng.random_range(0.0..2.0)).collect())
        .collect()
}

/// The largest error of a matched recipe's concentrations against `truth`.
async fn match_error(app: &TestApp, body: Value, truth: &[f64]) -> f64 {
    let response = app.post("/v1/models/dyes/match", &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    let found = &answer["recipes"][0]["concentration"];
    truth
        .iter()
        .enumerate()
        .map(|(k, t)| (found[k].as_f64().unwrap() - t).abs())
        .fold(0.0, f64::max)
}

#[tokio::test]
async fn a_target_read_by_the_successor_is_matched_through_the_transfer() {
    let app = spawn_app().await;
    app.create_model(&json!({
        "name": "dyes", "outputs": ["yellow", "red", "blue"], "transform": "kubelka_munk",
        "spectrum": {"start_nm": 400, "interval_nm": 10, "count": 31, "scale": "percent"},
        "first_fit_rows": 40,
    }))
    .await;
    let c = recipes(60, 1);
    let post = |batch: Value| {
        let app = &app;
        async move {
            let id = batch["batch_id"].as_str().unwrap().to_owned();
            assert_eq!(app.post_batch("dyes", &batch).await.status(), StatusCode::ACCEPTED);
            assert_eq!(app.wait_for_batch("dyes", &id).await["status"], "folded");
        }
    };
    post(json!({"batch_id": "old", "spectra": dyed_readings(&c, false, 2), "y": c})).await;
    assert_eq!(
        app.post("/v1/models/dyes/successor", &declaration())
            .await
            .status(),
        StatusCode::OK
    );
    let target = vec![vec![0.8, 0.0, 1.2]];
    let successor_target = dyed_readings(&target, true, 6);
    let by_successor =
        json!({"instrument": "successor", "spectra": successor_target, "candidates": false});
    let early = app.post("/v1/models/dyes/match", &by_successor).await;
    assert_eq!(early.status(), StatusCode::CONFLICT, "nothing learnt yet");

    // Rows of the successor before any overlap: its own model alone answers, and matches.
    let first = recipes(60, 8);
    post(json!({"batch_id": "first", "successor": dyed_readings(&first, true, 9), "y": first}))
        .await;
    assert_eq!(model(&app, "dyes").await["successor"]["answered_by"], json!(["own"]));
    let alone = match_error(&app, by_successor.clone(), &target[0]).await;
    assert!(alone < 0.15, "by the successor's own model {alone}");

    let overlap = recipes(30, 3);
    post(json!({"batch_id": "overlap", "spectra": dyed_readings(&overlap, false, 4),
                "successor": dyed_readings(&overlap, true, 5), "y": overlap}))
    .await;
    assert_eq!(
        model(&app, "dyes").await["successor"]["answered_by"],
        json!(["map"])
    );
    let through = match_error(&app, by_successor, &target[0]).await;
    // The same reading matched as if the model's own instrument had made it.
    let mut as_if_old = successor_target.clone();
    for v in as_if_old["values"][0].as_array_mut().unwrap() {
        *v = json!(v.as_f64().unwrap() * 100.0);
    }
    let naive = match_error(&app, json!({"spectra": as_if_old, "candidates": false}), &target[0]).await;
    let own = match_error(
        &app,
        json!({"spectra": dyed_readings(&target, false, 7), "candidates": false}),
        &target[0],
    )
    .await;
    assert!(
        through < 0.5 * naive,
        "through the transfer {through}, as if old {naive}, own {own}, successor alone {alone}"
    );
    assert!(through < 0.15, "through the transfer {through} (the model's instrument {own})");
    app.stop().await;
}

/// A model with a named feature beside its spectrum: the fabric brightens every band of the old
/// and the new instrument alike, and the transfer must keep the feature apart from the bands.
#[tokio::test]
async fn named_features_go_with_the_successor_s_readings() {
    let app = spawn_app().await;
    create_swap(&app, json!({"features": ["fabric"]})).await;
    // Fabric 1 reads 6 points brighter on either instrument.
    let fabric = |n: usize, seed: u64| -> Vec<Vec<f64>> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| vec![f64::from(rng.random_range(0..2u8))])
            .collect()
    };
    let brighten = |mut readings: Value, x: &[Vec<f64>], full: f64| {
        for (row, f) in readings["values"].as_array_mut().unwrap().iter_mut().zip(x) {
            for v in row.as_array_mut().unwrap() {
                *v = json!(v.as_f64().unwrap() + 6.0 * f[0] * full / 100.0);
            }
        }
        readings
    };
    let c = samples(60, 1);
    let x = fabric(60, 2);
    learn(
        &app,
        json!({"batch_id": "old", "spectra": brighten(old_readings(&c, 3), &x, 100.0), "x": x, "y": c}),
    )
    .await;
    assert_eq!(
        app.post("/v1/models/swap/successor", &declaration())
            .await
            .status(),
        StatusCode::OK
    );
    let overlap = samples(30, 4);
    let xo = fabric(30, 5);
    learn(
        &app,
        json!({"batch_id": "overlap", "spectra": brighten(old_readings(&overlap, 6), &xo, 100.0),
               "successor": brighten(successor_readings(&overlap, 7), &xo, 1.0),
               "x": xo, "y": overlap}),
    )
    .await;
    let probe = samples(40, 8);
    let xp = fabric(40, 9);
    let (through, _) = rmse(
        &app,
        json!({"instrument": "successor", "x": xp,
               "spectra": brighten(successor_readings(&probe, 10), &xp, 1.0)}),
        &probe,
    )
    .await;
    // The same samples on fabric 0 wherever the probe had fabric 1: the model must read the
    // feature to get them right.
    let wrong: Vec<Vec<f64>> = xp.iter().map(|f| vec![1.0 - f[0]]).collect();
    let (ignored, _) = rmse(
        &app,
        json!({"instrument": "successor", "x": wrong,
               "spectra": brighten(successor_readings(&probe, 10), &xp, 1.0)}),
        &probe,
    )
    .await;
    assert!(through < 0.1, "through the transfer {through}");
    assert!(through < 0.5 * ignored, "{through} against the wrong fabric's {ignored}");

    // A prediction that overflows is refused at what made it overflow: the named feature, or
    // the reading.
    let two = samples(2, 11);
    let spectra = successor_readings(&two, 12);
    let refused_at = |body: Value| {
        let app = &app;
        async move {
            let response = predict(app, &body).await;
            assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body}");
            let answer: Value = response.json().await.unwrap();
            answer["error"]["details"][0]["path"].clone()
        }
    };
    let body = json!({"instrument": "successor", "x": [[0.0], [1e300]], "spectra": spectra});
    assert_eq!(refused_at(body).await, "/x/1");
    let mut far = spectra.clone();
    far["values"][1] = json!(vec![1e300; far["values"][1].as_array().unwrap().len()]);
    let body = json!({"instrument": "successor", "x": [[0.0], [1.0]], "spectra": far});
    assert_eq!(refused_at(body).await, "/spectra/values/1");
    app.stop().await;
}

/// A batch of the successor's readings alone on a grid short of its declared range is refused
/// at `/successor`, held to its declared grid, and nowhere else: a model without named features
/// needs no `x`. Predict and match, asked to read the successor's spectra, say the same.
#[tokio::test]
async fn successor_readings_short_of_the_declared_grid_are_refused_there_alone() {
    let app = spawn_app().await;
    create_swap(&app, json!({})).await;
    let c = samples(60, 1);
    learn(&app, json!({"batch_id": "old", "spectra": old_readings(&c, 2), "y": c})).await;
    let declared = app.post("/v1/models/swap/successor", &declaration()).await;
    assert_eq!(declared.status(), StatusCode::OK);
    // A batch of the successor's readings, and requests asking the successor's reading be
    // answered: all held to its declared grid, and told so where they sent it.
    let short = json!({"start_nm": 400, "interval_nm": 50, "values": [[0.8, 0.8, 0.8, 0.8, 0.8, 0.8]]});
    for (endpoint, request, path) in [
        (
            "batches",
            json!({"batch_id": "short", "successor": short, "y": [[0.1, 0.1, 0.1]]}),
            "/successor",
        ),
        ("predict", json!({"instrument": "successor", "spectra": short}), "/spectra"),
        ("match", json!({"instrument": "successor", "spectra": short}), "/spectra"),
    ] {
        let response = app
            .post(&format!("/v1/models/swap/{endpoint}"), &request)
            .await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{endpoint}");
        let answer: Value = response.json().await.unwrap();
        let details = answer["error"]["details"].as_array().unwrap();
        assert_eq!(details.len(), 1, "{answer}");
        assert_eq!(details[0]["path"], path, "{answer}");
        let message = details[0]["message"].as_str().unwrap();
        assert!(
            message.contains("50 nm but the successor instrument is declared on 400–700 nm"),
            "{endpoint}: {message}"
        );
    }
    app.stop().await;
}

/// Readings the statistics cannot hold are refused at ingest wherever a batch holds them, as a
/// batch of the model's own readings is: squares past the largest double in the successor's
/// readings, and in the old instrument's in an overlap even where a colour model's transform
/// reads them as full scale (the transfer's pairs read them as sent: stored, such pairs made
/// every later version unreadable); columns too small to square. Nothing is stored, and the
/// model learns the overlap sent right.
#[tokio::test]
async fn readings_the_statistics_cannot_hold_are_refused_at_ingest() {
    let app = spawn_app().await;
    create_swap(&app, json!({"transform": "kubelka_munk"})).await;
    let c = samples(60, 1);
    learn(&app, json!({"batch_id": "old", "spectra": old_readings(&c, 2), "y": c})).await;
    let declared = app.post("/v1/models/swap/successor", &declaration()).await;
    assert_eq!(declared.status(), StatusCode::OK);

    let both = samples(6, 4);
    let old = old_readings(&both, 5);
    // On the declared grid, so that the values refused are the values sent.
    let new: Vec<Vec<f64>> = read(&both, (400.0, 10.0, 31), 3.0, 0.95, 6)
        .into_iter()
        .map(|row| row.into_iter().map(|v| v / 100.0).collect())
        .collect();
    let successor = |values: &Vec<Vec<f64>>| json!({"start_nm": 400, "interval_nm": 10, "values": values});
    let mut huge_old = old.clone();
    huge_old["values"][1][3] = json!(1e200);
    let mut huge_new = new.clone();
    huge_new[2][5] = 3e200;
    let mut tiny_new = new.clone();
    for row in &mut tiny_new {
        row[7] = 1e-150;
    }
    for (id, spectra, readings, path, says) in [
        ("old-huge", Some(&huge_old), &new, "/spectra/values", "1e200 of the band at 460nm in row 1"),
        // Put on the model's scale, in percent.
        ("new-huge", Some(&old), &huge_new, "/successor/values",
         "e202 of the successor's band at 450nm (on the model's scale) in row 2"),
        ("new-tiny", Some(&old), &tiny_new, "/successor/values",
         "the successor's band at 470nm (on the model's scale) is at most 1e-148"),
    ] {
        let mut batch = json!({"batch_id": id, "successor": successor(readings), "y": both});
        if let Some(spectra) = spectra {
            batch["spectra"] = spectra.clone();
        }
        let response = app.post_batch("swap", &batch).await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{id}");
        let answer: Value = response.json().await.unwrap();
        let detail = &answer["error"]["details"][0];
        assert_eq!(detail["path"], path, "{id}: {answer}");
        let message = detail["message"].as_str().unwrap();
        assert!(message.contains(says), "{id}: {message}");
    }
    // One row: its centred pairs are 0, but any later overlap's would not be finite.
    let mut one_old = json!({"start_nm": OLD.0, "interval_nm": OLD.1, "values": [old["values"][0].clone()]});
    one_old["values"][0][3] = json!(1e200);
    let one = json!({"batch_id": "one-row", "spectra": one_old, "successor": successor(&vec![new[0].clone()]),
                     "y": [both[0].clone()]});
    let response = app.post_batch("swap", &one).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // In CSV, at the row (the successor's columns may be on another grid than the declared).
    let mut huge_csv: Vec<String> = (0..OLD.2).map(|j| format!("{}nm", OLD.0 + OLD.1 * j as f64)).collect();
    huge_csv.extend((0..31).map(|j| format!("successor:{}nm", 400 + 10 * j)));
    huge_csv.extend(["red", "yellow", "blue"].map(String::from));
    let mut huge_csv = huge_csv.join(",") + "\n";
    for (i, (readings, c)) in huge_new.iter().zip(&both).enumerate() {
        let old = old["values"][i].as_array().unwrap().iter().map(|v| v.as_f64().unwrap());
        let cells: Vec<String> = old.chain(readings.iter().chain(c).copied()).map(|v| v.to_string()).collect();
        huge_csv += &(cells.join(",") + "\n");
    }
    let response = app.post_csv("swap", Some("huge-csv"), huge_csv).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["details"][0]["path"], "/rows/2", "{answer}");

    let listed: Value = app.get("/v1/models/swap/batches").await.json().await.unwrap();
    let ids: Vec<&str> = listed["batches"].as_array().unwrap().iter()
        .map(|b| b["batch_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["old"], "{listed}");
    learn(&app, json!({"batch_id": "overlap", "spectra": old, "successor": successor(&new), "y": both})).await;
    // The successor's readings alone: the transform reads them, past full scale as full scale.
    learn(&app, json!({"batch_id": "alone", "successor": successor(&huge_new), "y": both})).await;
    app.stop().await;
}

/// A CSV with the successor's columns is read as any CSV batch: a row with a cell too many (a
/// decimal comma) or too few is refused at the row, not read shifted; blank lines before the
/// header are skipped.
#[tokio::test]
async fn a_successor_csv_row_of_the_wrong_length_is_refused_at_it() {
    let app = spawn_app().await;
    create_swap(&app, json!({})).await;
    let c = samples(60, 1);
    learn(&app, json!({"batch_id": "old", "spectra": old_readings(&c, 2), "y": c})).await;
    let declared = app.post("/v1/models/swap/successor", &declaration()).await;
    assert_eq!(declared.status(), StatusCode::OK);
    let both = samples(6, 4);
    let body = csv(&both, Some(&old_readings(&both, 5)), &successor_readings(&both, 6));
    let columns = body.lines().next().unwrap().split(',').count();
    let mut lines: Vec<String> = body.lines().map(String::from).collect();
    // Row 1 (counting from 0): a decimal comma in its last reading; row 3: its last cell lost.
    let at = lines[2].rfind(",0.").unwrap();
    lines[2].replace_range(at..at + 3, ",0,");
    let cut = lines[4].rfind(',').unwrap();
    lines[4].truncate(cut);
    let broken = lines.join("\n") + "\n";
    let response = app.post_csv("swap", Some("broken"), broken).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let answer: Value = response.json().await.unwrap();
    let details: Vec<(&str, &str)> = answer["error"]["details"].as_array().unwrap().iter()
        .map(|d| (d["path"].as_str().unwrap(), d["message"].as_str().unwrap())).collect();
    let (more, fewer) = (
        format!("has {} values, the header has {columns}", columns + 1),
        format!("has {} values, the header has {columns}", columns - 1),
    );
    assert_eq!(details, [("/rows/1", more.as_str()), ("/rows/3", fewer.as_str())], "{answer}");

    let response = app.post_csv("swap", Some("blank-first"), format!("\r\n\n{body}")).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let status = app.wait_for_batch("swap", "blank-first").await;
    assert_eq!(status["status"], "folded", "{status}");
    assert_eq!(model(&app, "swap").await["successor"]["pairs"], 6.0);
    app.stop().await;
}

/// The successor's readings alone are held for review as any batch is: their surprise is to
/// the successor's own model.
#[tokio::test]
async fn a_surprising_batch_of_the_successor_alone_is_held_for_review() {
    let app = spawn_app().await;
    create_swap(&app, json!({"drift_threshold": 25})).await;
    swap_with_overlap(&app, 40).await;
    let fine = samples(20, 7);
    let agrees = learn(
        &app,
        json!({"batch_id": "agrees", "successor": successor_readings(&fine, 8), "y": fine}),
    )
    .await;
    let z = agrees["surprise"].as_array().unwrap();
    assert!(z.iter().all(|z| z.as_f64().is_some_and(|z| z < 25.0)), "{agrees}");
    // The same kind of rows with the red and blue recipes swapped: a mislabelled batch.
    let swapped: Vec<Vec<f64>> = samples(20, 9).iter().map(|c| vec![c[2], c[1], c[0]]).collect();
    let readings = successor_readings(&samples(20, 9), 10);
    let response = app
        .post_batch("swap", &json!({"batch_id": "swapped", "successor": readings, "y": swapped}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let held = app.wait_for_batch("swap", "swapped").await;
    assert_eq!(held["status"], "held", "{held}");
    let own_rows = model(&app, "swap").await["successor"]["own_rows"].clone();
    assert_eq!(own_rows, 60.0, "a held batch teaches nothing");
    let released = app
        .post("/v1/models/swap/batches/swapped/release", &json!({}))
        .await;
    assert_eq!(released.status(), StatusCode::OK);
    assert_eq!(app.wait_for_batch("swap", "swapped").await["status"], "folded");
    assert_eq!(model(&app, "swap").await["successor"]["own_rows"], 80.0);
    app.stop().await;
}
