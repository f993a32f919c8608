use mordant::estimator::{Basis, BatchStatistics, ModelConfig, ModelState, Transform};
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
async fn versions_are_listed_a_page_at_a_time() {
    let app = spawn_app().await;
    train_three_versions(&app).await;
    let page = |query: &'static str| {
        let app = &app;
        async move {
            let response = app.get(&format!("/v1/models/lab/versions{query}")).await;
            assert_eq!(response.status(), StatusCode::OK, "{query}");
            let list: Value = response.json().await.unwrap();
            let versions: Vec<u64> = list["versions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["version"].as_u64().unwrap())
                .collect();
            (versions, list.get("next_after").cloned())
        }
    };
    // Without a limit: every version, and no next page.
    assert_eq!(page("").await, (vec![1, 2, 3], None));
    assert_eq!(page("?limit=2").await, (vec![1, 2], Some(json!(2))));
    assert_eq!(page("?after=2&limit=2").await, (vec![3], None));
    assert_eq!(page("?after=1&limit=2").await, (vec![2, 3], None));
    assert_eq!(page("?after=1").await, (vec![2, 3], None));
    assert_eq!(page("?after=3").await, (vec![], None));
    // The pages of a longer history join up to the whole of it.
    for i in 3..7u64 {
        let batch = random_rows(20 + i, 8, 3, 2);
        app.post_batch(
            "lab",
            &json!({"batch_id": format!("b{i}"), "x": batch.0, "y": batch.1}),
        )
        .await;
        app.wait_for_batch("lab", &format!("b{i}")).await;
    }
    let (mut seen, mut after) = (Vec::new(), 0);
    loop {
        let list: Value = app
            .get(&format!("/v1/models/lab/versions?after={after}&limit=3"))
            .await
            .json()
            .await
            .unwrap();
        let versions = list["versions"].as_array().unwrap();
        assert!(versions.len() <= 3);
        seen.extend(versions.iter().map(|v| v["batches"][0].clone()));
        match list["next_after"].as_i64() {
            Some(next) => after = next,
            None => break,
        }
    }
    let every: Value = app.get("/v1/models/lab/versions").await.json().await.unwrap();
    let every: Vec<Value> = every["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["batches"][0].clone())
        .collect();
    assert_eq!(every.len(), 7);
    assert_eq!(seen, every);
    for query in ["limit=0", "limit=1001", "limit=x", "after=-1", "after=y", "after=1&after=2"] {
        let response = app.get(&format!("/v1/models/lab/versions?{query}")).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_query", "{query}: {body}");
        let key = query.split('=').next().unwrap();
        assert!(
            body["error"]["message"].as_str().unwrap().starts_with(key),
            "{query}: {body}"
        );
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
    assert_eq!(body["left_out"], json!({"count": 2, "batch_ids": ["b1", "b2"]}));
    assert_eq!(body["brought_back"], json!({"count": 0, "batch_ids": []}));

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

/// A restore says which batches it leaves out and which it brings back, over restores before
/// it: restoring a version from before a restore brings back what that restore left out.
#[tokio::test]
async fn a_restore_names_the_batches_it_leaves_out_and_brings_back() {
    let app = spawn_app().await;
    train_three_versions(&app).await;
    let first = app.restore("lab", 1).await;
    assert_eq!(first["left_out"]["batch_ids"], json!(["b1", "b2"]));
    let (x, y) = random_rows(20, 8, 3, 2);
    let response = app
        .post_batch("lab", &json!({"batch_id": "b3", "x": x, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(app.wait_for_batch("lab", "b3").await["version"], 5);
    // Version 3 held b0–b2; version 5, the current one, held b0 and b3.
    let back = app.restore("lab", 3).await;
    assert_eq!((&back["version"], &back["restored_from"]), (&json!(6), &json!(3)));
    assert_eq!(back["left_out"], json!({"count": 1, "batch_ids": ["b3"]}));
    assert_eq!(back["brought_back"], json!({"count": 2, "batch_ids": ["b1", "b2"]}));
    // The same version again changes nothing.
    let again = app.restore("lab", 3).await;
    assert_eq!(again["left_out"]["count"], 0, "{again}");
    assert_eq!(again["brought_back"]["count"], 0, "{again}");
}

/// A refit after a restore reads back the rows of the batches the restored state holds, and
/// only those, whether a fold makes it or an operator asks for it: a model restored past a batch
/// answers as one that never had that batch.
#[tokio::test]
async fn a_refit_after_a_restore_reads_the_rows_the_restored_state_holds() {
    let app = spawn_app().await;
    let post = |model: &'static str, id: &'static str, seed: u64| {
        let app = &app;
        async move {
            let (x, y) = random_rows(seed, 12, 3, 2);
            let response = app
                .post_batch(model, &json!({"batch_id": id, "x": x, "y": y}))
                .await;
            assert_eq!(response.status(), StatusCode::ACCEPTED);
            app.wait_for_batch(model, id).await["version"]
                .as_i64()
                .unwrap()
        }
    };
    let refit = |model: &'static str| {
        let app = &app;
        async move {
            let response = app
                .post(&format!("/v1/models/{model}/refit"), &json!({}))
                .await;
            assert_eq!(response.status(), StatusCode::CREATED, "refit {model}");
            let body: Value = response.json().await.unwrap();
            body["version"].as_i64().unwrap()
        }
    };
    // `left` learns b0 and b1, and is restored to b0 alone; `never` learns b0 alone. Each then
    // learns b2 (as many rows again as it has: a refit on every row) and is refitted.
    for model in ["left", "never"] {
        app.create_model(&spec(model, 3, 2)).await;
        assert_eq!(post(model, "b0", 60).await, 1);
    }
    assert_eq!(post("left", "b1", 61).await, 2);
    assert_eq!(app.restore("left", 1).await["version"], 3);
    let (probe, _) = random_rows(7, 4, 3, 2);
    let answers = |model: &'static str, version: i64| {
        let (app, probe) = (&app, &probe);
        async move { app.predict_at(model, &json!(probe), version).await["predictions"].clone() }
    };
    let (folded, alone) = (post("left", "b2", 62).await, post("never", "b2", 62).await);
    assert_eq!(
        answers("left", folded).await,
        answers("never", alone).await,
        "the fold after the restore"
    );
    let (left, never) = (refit("left").await, refit("never").await);
    assert_eq!(
        answers("left", left).await,
        answers("never", never).await,
        "the refit after the restore"
    );
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
    let refitted = direct_refit(&config, &batches, 4);
    assert_same_predictions(&api, &refitted.predict(mat(&probe).as_ref()).unwrap());

    app.create_model(&spec("fresh", 3, 2)).await;
    let untrained = app.post("/v1/models/fresh/refit", &json!({})).await;
    assert_eq!(untrained.status(), StatusCode::CONFLICT);
}

/// Folds after a restore and after a refit are kept thin like any other: restoring one replays
/// its folds from the restore's or the refit's full state, and serves the very predictions the
/// fold served (with a full state every 3 versions: version 8 replays from the restore at 7,
/// version 11 from the refit at 10).
#[tokio::test]
async fn folds_after_a_restore_or_a_refit_are_replayed_from_it() {
    let app = spawn_configured(|s| s.database.full_state_every = 3).await;
    // ARD: no refit checks its shrinkage on the rows behind it, and these rows choose no noise
    // shape or tail (either would keep a refit's version whole).
    let mut spec = spec("lab", 3, 2);
    spec["prior"] = json!("ard");
    app.create_model(&spec).await;
    let (probe, _) = random_rows(7, 4, 3, 2);
    let mut served: Vec<Value> = Vec::new();
    let mut next = 0u64;
    let fold = |rows: usize, seed: u64| {
        let (app, probe) = (&app, &probe);
        async move {
            let (x, y) = random_rows(40 + seed, rows, 3, 2);
            let id = format!("b{seed}");
            let response = app
                .post_batch("lab", &json!({"batch_id": id, "x": x, "y": y}))
                .await;
            assert_eq!(response.status(), StatusCode::ACCEPTED);
            let version = app.wait_for_batch("lab", &id).await["version"]
                .as_i64()
                .unwrap();
            let body = app.predict_at("lab", &json!(probe), version).await;
            assert_eq!(body["version"], json!(version), "{body}");
            (version, body)
        }
    };
    for rows in [8usize, 1, 2, 8, 1, 3] {
        let (version, body) = fold(rows, next).await;
        next += 1;
        assert_eq!(version, served.len() as i64 + 1);
        served.push(body["predictions"].clone());
    }
    let made = |served: &[Value], body: Value, origin: &str| {
        assert_eq!(body["origin"], origin, "{body}");
        let version = body["version"].as_i64().unwrap();
        assert_eq!(version, served.len() as i64 + 1);
        version
    };
    // 7: version 2 restored (itself thin), then two folds after it.
    let version = made(&served, app.restore("lab", 2).await, "restore");
    let now = app.predict_at("lab", &json!(probe), version).await;
    assert_eq!(now["predictions"], served[1], "the restore serves version 2");
    served.push(now["predictions"].clone());
    for rows in [8usize, 2] {
        let (version, body) = fold(rows, next).await;
        next += 1;
        assert_eq!(version, served.len() as i64 + 1);
        served.push(body["predictions"].clone());
    }
    // 10: a refit, then three folds after it.
    let response = app.post("/v1/models/lab/refit", &json!({})).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let version = made(&served, response.json().await.unwrap(), "refit");
    served.push(
        app.predict_at("lab", &json!(probe), version).await["predictions"].clone(),
    );
    for rows in [8usize, 1, 3] {
        let (version, body) = fold(rows, next).await;
        next += 1;
        assert_eq!(version, served.len() as i64 + 1);
        served.push(body["predictions"].clone());
    }

    let list = get_json(&app.client, &app.url("/v1/models/lab/versions")).await;
    let kept: Vec<(bool, String)> = list["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let origin = v["origin"].as_str().unwrap().to_owned();
            (v["full_state"].as_bool().unwrap(), origin)
        })
        .collect();
    let thin: Vec<usize> = (1..=kept.len()).filter(|v| !kept[v - 1].0).collect();
    assert_eq!(thin, [2, 4, 5, 8, 11], "{kept:?}");
    assert_eq!(kept[6].1, "restore");
    assert_eq!(kept[9].1, "refit");

    for source in [8usize, 11, 7, 10] {
        let body = app.restore("lab", source).await;
        let version = body["version"].as_i64().unwrap();
        let now = app.predict_at("lab", &json!(probe), version).await;
        assert_eq!(
            now["predictions"],
            served[source - 1],
            "version {version} restores version {source}"
        );
    }
}

/// With a full state kept every 3 versions, the folds in between keep only their batches and a
/// digest; restoring any version (a thin one replays up to two folds, some of batches kept as
/// rows) serves the very predictions that version served. A thin version whose replay does not
/// give back its digest is refused with 409, naming the version kept in full.
#[tokio::test]
async fn thin_versions_restore_to_the_predictions_they_served() {
    let app = spawn_configured(|s| s.database.full_state_every = 3).await;
    // ARD: no refit checks its shrinkage on the rows behind it, and these rows choose no noise
    // shape or tail (either would keep a refit's version whole), so every fold between full
    // states is kept thin.
    let mut spec = spec("lab", 3, 2);
    spec["prior"] = json!("ard");
    app.create_model(&spec).await;
    let (probe, _) = random_rows(7, 4, 3, 2);
    // Batches of 1 and 2 rows cost less as rows than as statistics: kept as rows.
    let sizes = [8usize, 1, 2, 8, 1, 3, 8];
    let served = fold_one_version_each(&app, "lab", &sizes, 20, &probe).await;
    let list = get_json(&app.client, &app.url("/v1/models/lab/versions")).await;
    let full: Vec<bool> = list["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["full_state"].as_bool().unwrap())
        .collect();
    assert_eq!(full, [true, false, true, false, false, true, true]);

    for source in [5, 2, 4, 1, 3, 7] {
        let body = app.restore("lab", source).await;
        assert_eq!(body["full_state"], true);
        let version = body["version"].as_i64().unwrap();
        let now = app.predict_at("lab", &json!(probe), version).await;
        assert_eq!(now["version"], version);
        assert_eq!(
            now["predictions"],
            served[source - 1],
            "version {version} restores version {source}"
        );
    }

    // Version 5 is thin: a digest its replay cannot give back (as after an upgrade whose
    // estimator computes differently).
    let changed = app
        .database()
        .execute(
            "UPDATE versions SET state_digest = decode(repeat('00', 32), 'hex') WHERE version = 5",
            "UPDATE versions SET state_digest = zeroblob(32) WHERE version = 5",
        )
        .await;
    assert_eq!(changed, 1);
    let response = app
        .post("/v1/models/lab/versions/5/restore", &json!({}))
        .await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "conflict");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("version 3 is kept in full"), "{message}");
    // The model still serves what it did.
    let now = app.predict_at("lab", &json!(probe), 13).await;
    assert_eq!(now["version"], 13);
}

/// Deterministic draws in [0, 1) from `seed` (a 64-bit linear congruential generator).
fn uniform_draws(mut state: u64) -> impl FnMut() -> f64 {
    move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` rows of `p` inputs in [0, 1) and one output: a linear law plus a bump the linear model
/// cannot follow, which the evidence reads as signal and leave-one-out does not.
fn bumped_rows(from: usize, n: usize, p: usize) -> RowsXY {
    let mut uniform = uniform_draws(1);
    let rows: Vec<(Vec<f64>, Vec<f64>)> = (0..from + n)
        .map(|_| {
            let x: Vec<f64> = (0..p).map(|_| uniform()).collect();
            let linear: f64 = (0..p).map(|j| x[j] * (0.3 * j as f64 - 1.0)).sum();
            let bump = 3.0 * (3.0 * x[0]).sin() * (2.0 * x[1]).cos();
            let y = linear + bump + 0.05 * (uniform() - 0.5);
            (x, vec![y])
        })
        .skip(from)
        .collect();
    rows.into_iter().unzip()
}

/// Rows `from..from + n` of 80 (of a seed) on one linear law of 6 inputs: the first 40 small,
/// their noise small and even; the last 40 ten times larger, their noise growing with the
/// answer and heavy-tailed (one row in eight ten times off).
fn two_kinds_of_rows(seed: u64, from: usize, n: usize) -> RowsXY {
    let p = 6;
    let mut uniform = uniform_draws(seed);
    let x: Vec<Vec<f64>> = (0..80)
        .map(|i| {
            let size = if i < 40 { 1.0 } else { 10.0 };
            (0..p).map(|_| size * uniform()).collect()
        })
        .collect();
    let y: Vec<Vec<f64>> = (0..80)
        .map(|i| {
            let mean: f64 = 2.0 + (0..p).map(|j| x[i][j] * (j as f64 - 2.0)).sum::<f64>();
            let e = uniform() + uniform() + uniform() - 1.5;
            let noise = if i < 40 {
                0.05 * e
            } else {
                let off = if i % 8 == 0 { 10.0 } else { 1.0 };
                0.05 * mean.abs() * off * e
            };
            vec![mean + noise]
        })
        .collect();
    (x[from..from + n].to_vec(), y[from..from + n].to_vec())
}

/// A model fed rows of two kinds in two batches, the second fitting it again, reads the noise
/// shape and the tail off every row as a first fit on them all does: its answers (variance and
/// degrees of freedom) are the estimator's given every row, though the first batch alone chose
/// neither and leave-one-out moves no `α`; the predictor formed to read the tail serves them. A
/// replay of the batch alone would not give them back, so that version is kept whole: restoring
/// it after a later, thin version serves it again, and the thin version replays its one step
/// from it. An explicit refit reads them off every row too.
#[tokio::test]
async fn a_folded_refit_reads_the_noise_shape_and_tail_off_every_row() {
    let app = spawn_configured(|s| s.database.full_state_every = 100).await;
    let mut spec = spec("kinds", 6, 1);
    spec["prior"] = json!("ridge");
    spec["first_fit_rows"] = json!(40);
    app.create_model(&spec).await;
    let batches = [
        two_kinds_of_rows(2, 0, 40),
        two_kinds_of_rows(2, 40, 40),
        two_kinds_of_rows(2, 0, 2),
    ];
    let mut config = ModelConfig::new(Basis::new(6, true, Transform::Identity), 1);
    config.prior = mordant::estimator::PriorFamily::Ridge;
    let first = direct_state(&config, &batches[..1], 40);
    assert_eq!((first.noise_shape(0), first.tail()), (None, None));
    let both = direct_state(&config, &batches[..2], 40);
    assert_eq!(both.fitted_rows(), &[80.0], "the second batch refits");
    assert!(both.noise_shape(0).is_some() && both.tail().is_some());
    assert_eq!(
        alpha_of(&both),
        alpha_of(&first.update(&config, &stats_of(&config, &batches[1])).unwrap()),
        "leave-one-out moved α: the shape alone should make the difference"
    );
    fold_one_by_one(&app, "kinds", &batches[..2], 0).await;
    assert_posterior_shaped_as(&app, "kinds", &both).await;
    let (probe, _) = two_kinds_of_rows(3, 30, 20);
    let expected = both.predict(mat(&probe).as_ref()).unwrap();
    let nu = json!(both.tail());
    // The predictor the fold formed to read the tail serves version 2.
    let api = app.predict_at("kinds", &json!(probe), 2).await;
    assert_same_predictions(&api, &expected);
    assert_eq!(api["predictions"][0]["dof"], json!([nu]), "{api}");
    fold_one_by_one(&app, "kinds", &batches[2..], 2).await;
    // An explicit refit of version 3 reads them off its 82 rows, as the estimator given them.
    let refit = app.post("/v1/models/kinds/refit", &json!({})).await;
    assert_eq!(refit.status(), StatusCode::CREATED);
    let api = app.predict_at("kinds", &json!(probe), 4).await;
    let refitted = direct_refit(&config, &batches, 40);
    assert_ne!(refitted.noise_shape(0), both.noise_shape(0));
    assert_same_predictions(&api, &refitted.predict(mat(&probe).as_ref()).unwrap());
    assert_eq!(api["predictions"][0]["dof"], json!([refitted.tail()]), "{api}");
    // Version 2 after version 3 (one step, kept thin) was written.
    let restored = app.restore("kinds", 2).await;
    assert_eq!(restored["version"], 5, "{restored}");
    let api = app.predict_at("kinds", &json!(probe), 5).await;
    assert_same_predictions(&api, &expected);
    assert_eq!(api["predictions"][0]["dof"], json!([nu]), "{api}");
    let again = app.restore("kinds", 3).await;
    assert_eq!(again["version"], 6, "{again}");
    let api = app.predict_at("kinds", &json!(probe), 6).await;
    let third = direct_state(&config, &batches, 40);
    assert_same_predictions(&api, &third.predict(mat(&probe).as_ref()).unwrap());
}

/// Under ARD, which checks no shrinkage, a fold's refit reads the noise shape and tail off every
/// row too, as the estimator given them does.
#[tokio::test]
async fn an_ard_refit_reads_the_noise_shape_and_tail_off_every_row_too() {
    let app = spawn_app().await;
    let mut spec = spec("ard", 6, 1);
    spec["prior"] = json!("ard");
    spec["first_fit_rows"] = json!(40);
    app.create_model(&spec).await;
    let batches = [two_kinds_of_rows(2, 0, 40), two_kinds_of_rows(2, 40, 40)];
    let mut config = ModelConfig::new(Basis::new(6, true, Transform::Identity), 1);
    config.prior = mordant::estimator::PriorFamily::Ard;
    let first = direct_state(&config, &batches[..1], 40);
    assert_eq!((first.noise_shape(0), first.tail()), (None, None));
    let both = direct_state(&config, &batches, 40);
    assert_eq!(both.fitted_rows(), &[80.0], "the second batch refits");
    assert!(both.noise_shape(0).is_some(), "every row chooses a shape");
    fold_one_by_one(&app, "ard", &batches, 0).await;
    assert_posterior_shaped_as(&app, "ard", &both).await;
    let (probe, _) = two_kinds_of_rows(3, 30, 20);
    let api = app.predict_at("ard", &json!(probe), 2).await;
    assert_same_predictions(&api, &both.predict(mat(&probe).as_ref()).unwrap());
}

/// Asserts that `model`'s posterior names `state`'s noise shape (its power) and tail.
async fn assert_posterior_shaped_as(app: &TestApp, model: &str, state: &ModelState) {
    let posterior: Value = app
        .get(&format!("/v1/models/{model}/posterior"))
        .await
        .json()
        .await
        .unwrap();
    let power = state.noise_shape(0).map(|shape| shape.power());
    assert_eq!(
        posterior["outputs"][0]["noise_shape"]["power"],
        json!(power),
        "{posterior}"
    );
    assert_eq!(posterior["dof"], json!(state.tail()), "{posterior}");
}

/// Posts `batches` to `model` one at a time, batch `b{i}` (`i` from `done`, the versions the
/// model has), each folded into version `i + 1` before the next is posted.
async fn fold_one_by_one(app: &TestApp, model: &str, batches: &[RowsXY], done: usize) {
    for (i, (x, y)) in batches.iter().enumerate().map(|(i, b)| (done + i, b)) {
        let id = format!("b{i}");
        let response = app
            .post_batch(model, &json!({"batch_id": id, "x": x, "y": y}))
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert_eq!(app.wait_for_batch(model, &id).await["version"], json!(i + 1));
    }
}

/// `α = σ²/v` of output 0's posterior (a ridge prior: every input's variance is `v`).
fn alpha_of(state: &ModelState) -> f64 {
    let post = state.outputs()[0].posterior().unwrap();
    post.noise_variance() / post.prior().variance[0]
}

/// The statistics of a batch's rows in `config`'s basis.
fn stats_of(config: &ModelConfig, (x, y): &RowsXY) -> BatchStatistics {
    let phi = config.basis.design(mat(x).as_ref()).unwrap();
    BatchStatistics::from_design(phi.as_ref(), mat(y).as_ref()).unwrap()
}

/// A model fed its rows in two batches, the second fitting it again (a quarter more rows),
/// checks that refit's shrinkage on every row, as its first fit did: it answers as the
/// estimator given them all, not as the evidence alone. The version that refit made cannot be
/// replayed from its batch alone, so it is kept whole: restoring it after later folds (each
/// kept thin) serves it again.
#[tokio::test]
async fn a_folded_refit_checks_its_shrinkage_on_every_row_and_keeps_its_version_whole() {
    let app = spawn_configured(|s| s.database.full_state_every = 100).await;
    let p = 10;
    let mut spec = spec("bumps", p, 1);
    spec["prior"] = json!("ridge");
    spec["first_fit_rows"] = json!(24);
    app.create_model(&spec).await;
    let batches = [
        bumped_rows(0, 24, p),
        bumped_rows(24, 16, p),
        bumped_rows(40, 2, p),
        bumped_rows(42, 2, p),
    ];
    fold_one_by_one(&app, "bumps", &batches, 0).await;
    let mut config = ModelConfig::new(Basis::new(p, true, Transform::Identity), 1);
    config.prior = mordant::estimator::PriorFamily::Ridge;
    let checked = direct_state(&config, &batches[..2], 24);
    let first = direct_state(&config, &batches[..1], 24);
    let batch = stats_of(&config, &batches[1]);
    let evidence = first.update(&config, &batch).unwrap();
    assert_eq!(checked.fitted_rows(), &[40.0], "the second batch refits");
    let (probe, _) = bumped_rows(100, 5, p);
    let (expected, alone) = (
        checked.predict(mat(&probe).as_ref()).unwrap(),
        evidence.predict(mat(&probe).as_ref()).unwrap(),
    );
    assert!(
        (0..5).any(|r| (expected.mean[(r, 0)] - alone.mean[(r, 0)]).abs() > 1e-6),
        "the check moved nothing on these rows"
    );
    // Version 2, the checked refit, after versions 3 and 4 (one step each) were written.
    let restored = app.restore("bumps", 2).await;
    assert_eq!(restored["version"], 5, "{restored}");
    let api = app.predict_at("bumps", &json!(probe), 5).await;
    assert_same_predictions(&api, &expected);
    // Version 3 was kept thin: restoring it replays its one step from version 2's state.
    let again = app.restore("bumps", 3).await;
    assert_eq!(again["version"], 6, "{again}");
    let api = app.predict_at("bumps", &json!(probe), 6).await;
    let third = direct_state(&config, &batches[..3], 24);
    assert_same_predictions(&api, &third.predict(mat(&probe).as_ref()).unwrap());
}

/// A fold reads the raw rows its refits may check only as far as the rows' budget reaches
/// (`folder::CHECK_VALUES`): a queue that runs past it is folded in two, the batches that start
/// within the budget first, the rest by the next fold, and the model learns what one batch at a
/// time teaches it. Three ways in: a queue that starts with the first fit, one behind it, and one
/// behind it whose first batch is held for review, which leaves the batch past the cut within
/// the budget (the next fold hands it every row behind it).
#[tokio::test]
async fn a_fold_reads_rows_only_within_their_budget_and_leaves_the_rest_to_the_next() {
    // 30 features and 2 outputs: 32 values a row, 8,192 rows within the budget.
    let (d, m, first) = (30, 2, 200);
    let config = ModelConfig::new(Basis::new(d, true, Transform::Identity), m);
    assert_eq!(mordant::folder::max_check_rows(&config), 8_192.0);
    let (x, y) = random_rows(17, first + 4 * 3_000, d, m);
    let batches: Vec<RowsXY> = std::iter::once(0..first)
        .chain((0..4).map(|i| first + 3_000 * i..first + 3_000 * (i + 1)))
        .map(|r| (x[r.clone()].to_vec(), y[r].to_vec()))
        .collect();
    // Behind b0: b1 far off the law (held), then 3,000, 2,000 and 2,000 rows of it.
    let rows = |r: std::ops::Range<usize>| (x[r.clone()].to_vec(), y[r].to_vec());
    let mut off = batches[1].clone();
    off.1.iter_mut().flatten().for_each(|v| *v += 100.0);
    let held = [
        batches[0].clone(),
        off,
        batches[2].clone(),
        rows(6_200..8_200),
        rows(8_200..10_200),
    ];
    let database = fresh_database().await;
    let mut settings = test_settings(&database.url);
    let app = spawn_with(settings.clone()).await;
    for model in ["queued", "behind", "held"] {
        let mut spec = spec(model, d, m);
        spec["first_fit_rows"] = json!(first);
        if model == "held" {
            spec["drift_threshold"] = json!(30);
        }
        app.create_model(&spec).await;
    }
    post_numbered(&app, "behind", 0, &batches[0]).await;
    post_numbered(&app, "held", 0, &held[0]).await;
    assert_eq!(app.wait_for_batch("behind", "b0").await["version"], 1);
    assert_eq!(app.wait_for_batch("held", "b0").await["version"], 1);
    app.stop().await;

    settings.folder.enabled = false;
    let app = spawn_with(settings.clone()).await;
    for (i, batch) in batches.iter().enumerate() {
        post_numbered(&app, "queued", i, batch).await;
    }
    for (i, batch) in batches.iter().enumerate().skip(1) {
        post_numbered(&app, "behind", i, batch).await;
    }
    for (i, batch) in held.iter().enumerate().skip(1) {
        post_numbered(&app, "held", i, batch).await;
    }
    app.stop().await;

    settings.folder.enabled = true;
    let app = spawn_with(settings).await;
    for model in ["queued", "behind", "held"] {
        app.wait_for_batch(model, "b4").await;
    }
    assert_eq!(app.wait_for_batch("held", "b1").await["status"], "held");
    let versions = |model: &'static str| fold_history(&app.client, &app.address, model);
    let numbered = |history: &[(i64, &str)]| -> Vec<(i64, String)> {
        history.iter().map(|&(v, b)| (v, b.to_owned())).collect()
    };
    // The first fit's 200 rows and 9,000 more: b4 starts 9,200 rows in, past 8,192.
    assert_eq!(
        versions("queued").await,
        numbered(&[(1, "b0"), (1, "b1"), (1, "b2"), (1, "b3"), (2, "b4")])
    );
    // Behind a state of 200 rows, 7,992 are left: b4 starts 9,000 rows into the queue.
    assert_eq!(
        versions("behind").await,
        numbered(&[(1, "b0"), (2, "b1"), (2, "b2"), (2, "b3"), (3, "b4")])
    );
    // b1 held: b4 starts 8,000 rows into the queue, past the 7,992 left, but 5,200 rows into
    // the state, and refits on all 7,200 (its 2,000 are more than a quarter of 5,200).
    assert_eq!(
        versions("held").await,
        numbered(&[(1, "b0"), (2, "b2"), (2, "b3"), (3, "b4")])
    );
    let expected = direct_state(&config, &batches, first);
    let learnt: Vec<RowsXY> = [0, 2, 3, 4].iter().map(|&i| held[i].clone()).collect();
    let without_held = direct_state(&config, &learnt, first);
    assert_eq!(without_held.fitted_rows(), &[7_200.0, 7_200.0], "b4 refits");
    let (probe, _) = random_rows(18, 5, d, m);
    for (model, version, state) in [
        ("queued", 2, &expected),
        ("behind", 3, &expected),
        ("held", 3, &without_held),
    ] {
        let api = app.predict_at(model, &json!(probe), version).await;
        assert_same_predictions(&api, &state.predict(mat(&probe).as_ref()).unwrap());
    }
    app.stop().await;
}

/// Posts `rows` to `model` as batch `b{i}`, accepted.
async fn post_numbered(app: &TestApp, model: &str, i: usize, (x, y): &RowsXY) {
    let body = json!({"batch_id": format!("b{i}"), "x": x, "y": y});
    let response = app.post_batch(model, &body).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}

/// A backlog is folded a bounded piece at a time (`folder.max_fold_bytes`): the first fit's
/// batches together, whatever their size, then as many as the bytes allow, one at least; and
/// the model learns what one fold of the whole queue would teach it.
#[tokio::test]
async fn a_backlog_is_folded_a_bounded_piece_at_a_time() {
    let (d, m, first) = (3, 2, 40);
    let config = ModelConfig::new(Basis::new(d, true, Transform::Identity), m);
    let (x, y) = random_rows(23, 100, d, m);
    let batches: Vec<RowsXY> = [0..20, 20..40, 40..70, 70..100]
        .into_iter()
        .map(|r| (x[r.clone()].to_vec(), y[r].to_vec()))
        .collect();
    let database = fresh_database().await;
    let mut settings = test_settings(&database.url);
    settings.folder.enabled = false;
    let app = spawn_with(settings.clone()).await;
    let mut spec = spec("backlog", d, m);
    spec["first_fit_rows"] = json!(first);
    app.create_model(&spec).await;
    for (i, batch) in batches.iter().enumerate() {
        post_numbered(&app, "backlog", i, batch).await;
    }
    app.stop().await;

    settings.folder.enabled = true;
    settings.folder.max_fold_bytes = 1;
    let app = spawn_with(settings).await;
    app.wait_for_batch("backlog", "b3").await;
    let history = fold_history(&app.client, &app.address, "backlog").await;
    let folds: Vec<(i64, &str)> = history.iter().map(|(v, b)| (*v, b.as_str())).collect();
    assert_eq!(folds, [(1, "b0"), (1, "b1"), (2, "b2"), (3, "b3")]);
    let expected = direct_state(&config, &batches, first);
    let (probe, _) = random_rows(24, 5, d, m);
    let api = app.predict_at("backlog", &json!(probe), 3).await;
    assert_same_predictions(&api, &expected.predict(mat(&probe).as_ref()).unwrap());
    app.stop().await;
}
