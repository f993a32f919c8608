use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn a_created_model_can_be_read_listed_and_deleted() {
    let app = spawn_app().await;
    let created = app.create_model(&spec("cotton", 3, 2)).await;
    assert_eq!(created["name"], "cotton");
    assert_eq!(created["version"], 0);
    assert_eq!(created["intercept"], true);
    assert_eq!(created["transform"], "none");
    assert_eq!(created["update"], "one_step");
    assert_eq!(created["prior_variance"], 1.0);
    assert_eq!(created["first_fit_rows"], 4, "p = 3 features + intercept");
    assert_eq!(created["pending_batches"], 0);

    let one: Value = app.get("/v1/models/cotton").await.json().await.unwrap();
    assert_eq!(one["features"], json!(["R400", "R410", "R420"]));
    let list: Value = app.get("/v1/models").await.json().await.unwrap();
    assert_eq!(list["models"].as_array().unwrap().len(), 1);

    let response = app
        .client
        .delete(app.url("/v1/models/cotton"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        app.get("/v1/models/cotton").await.status(),
        StatusCode::NOT_FOUND
    );
    let response = app
        .client
        .delete(app.url("/v1/models/cotton"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_taken_name_is_a_conflict() {
    let app = spawn_app().await;
    app.create_model(&spec("cotton", 3, 2)).await;
    let response = app.post("/v1/models", &spec("cotton", 5, 1)).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "conflict");
    let one: Value = app.get("/v1/models/cotton").await.json().await.unwrap();
    assert_eq!(
        one["features"].as_array().unwrap().len(),
        3,
        "the first model is untouched"
    );
}

#[tokio::test]
async fn an_invalid_specification_names_every_bad_field() {
    let app = spawn_app().await;
    let response = app
        .post(
            "/v1/models",
            &json!({
                "name": "Cotton Reactive",
                "features": ["R400", "R410", "R400", "", " R420"],
                "outputs": ["red", "R410"],
                "transform": "log",
                "prior_variance": -1,
                "forgetting": {"half_life_rows": 0},
                "colour": "blue"
            }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_input");
    let paths: Vec<&str> = body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    for expected in [
        "/name",
        "/features/2",
        "/features/3",
        "/features/4",
        "/outputs/1",
        "/transform",
        "/prior_variance",
        "/forgetting/half_life_rows",
        "/colour",
    ] {
        assert!(
            paths.contains(&expected),
            "{expected} missing from {paths:?}"
        );
    }
    let list: Value = app.get("/v1/models").await.json().await.unwrap();
    assert_eq!(list["models"], json!([]), "nothing was created");
}

/// A change of settings names every bad field, changes nothing when one is bad, and refuses the
/// fields fixed at creation.
#[tokio::test]
async fn invalid_settings_name_every_bad_field_and_change_nothing() {
    let app = spawn_app().await;
    let mut model = spec("lab", 3, 2);
    model["drift_threshold"] = json!(25);
    app.create_model(&model).await;
    let response = app
        .patch(
            "/v1/models/lab",
            &json!({"drift_threshold": 40, "first_fit_rows": 0, "outputs": ["blue"], "colour": 1}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_input");
    let details = body["error"]["details"].as_array().unwrap();
    let message = |path: &str| {
        details
            .iter()
            .find(|d| d["path"] == path)
            .and_then(|d| d["message"].as_str())
            .unwrap_or_else(|| panic!("{path} missing from {body}"))
            .to_owned()
    };
    assert!(message("/first_fit_rows").contains("from 1"), "{body}");
    assert!(message("/outputs").contains("fixed"), "{body}");
    assert_eq!(message("/colour"), "unknown field");
    assert_eq!(details.len(), 3, "{body}");
    for bad in [
        json!({"drift_threshold": 0}),
        json!({"drift_threshold": "high"}),
        json!({"first_fit_rows": null}),
        json!({"first_fit_rows": 2.5}),
    ] {
        let response = app.patch("/v1/models/lab", &bad).await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    }
    let not_object = app.patch("/v1/models/lab", &json!([1])).await;
    assert_eq!(not_object.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let model: Value = app.get("/v1/models/lab").await.json().await.unwrap();
    assert_eq!(
        (&model["drift_threshold"], &model["first_fit_rows"]),
        (&json!(25.0), &json!(4)),
        "nothing changed: {model}"
    );
    let nothing = app.patch("/v1/models/lab", &json!({})).await;
    assert_eq!(nothing.status(), StatusCode::OK);
    let missing = app
        .patch("/v1/models/nothing", &json!({"drift_threshold": 3}))
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn unknown_models_and_endpoints_are_404_in_the_error_format() {
    let app = spawn_app().await;
    for path in [
        "/v1/models/nope",
        "/v1/models/nope/versions",
        "/v1/models/Not%20A%20Slug",
        "/v2/x",
    ] {
        let response = app.get(path).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{path}");
    }
    let response = app
        .post("/v1/models/nope/predict", &json!({"x": [[1.0]]}))
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let response = app
        .post(
            "/v1/models/nope/batches",
            &json!({"x": [[1.0]], "y": [[1.0]]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

/// A dye seen in one row of its model's first batch stays untrained and follows its lab-dip
/// dose (the input non-zero in that row alone), rather than a shading dose of the same row that
/// is fifty times smaller: the posterior says which input and in what proportion, and predict
/// answers that proportion of the dose, 0 without it. A trained dye follows nothing.
#[tokio::test]
async fn an_untrained_dye_says_which_input_it_follows() {
    let app = spawn_app().await;
    app.create_model(&json!({
        "name": "dips",
        "features": ["R400", "lab_red", "lab_blue", "lab_yellow"],
        "outputs": ["red", "blue"],
    }))
    .await;
    let x: Vec<Vec<f64>> = (0..40)
        .map(|i| {
            let red = if i % 4 == 0 { 0.5 + 0.05 * (i % 9) as f64 } else { 0.0 };
            let (blue, yellow) = if i == 5 { (2.0, 0.04) } else { (0.0, 0.0) };
            vec![1.0 + 0.1 * (i % 7) as f64, red, blue, yellow]
        })
        .collect();
    let y: Vec<Vec<f64>> = x
        .iter()
        .map(|r| vec![1.02 * r[1], if r[2] > 0.0 { 2.1 } else { 0.0 }])
        .collect();
    let response = app
        .post_batch("dips", &json!({"batch_id": "b1", "x": x, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(app.wait_for_batch("dips", "b1").await["status"], "folded");
    // Once this replica serves version 1, its posterior is that version's.
    app.predict_at("dips", &json!([[1.0, 0.0, 0.0, 0.0]]), 1).await;

    let posterior = get_json(&app.client, &app.url("/v1/models/dips/posterior")).await;
    let (red, blue) = (&posterior["outputs"][0], &posterior["outputs"][1]);
    assert_eq!(red["trained"], true);
    assert_eq!(red["follows"], Value::Null);
    assert_eq!(blue["trained"], false);
    assert_eq!(blue["follows"]["name"], "lab_blue");
    let proportion = blue["follows"]["proportion"].as_f64().unwrap();
    assert!((proportion - 2.1 / 2.0).abs() < 1e-12, "{proportion}");

    let answer = app
        .predict_at("dips", &json!([[1.0, 0.0, 1.0, 0.0], [1.0, 0.5, 0.0, 0.3]]), 1)
        .await;
    let blue_means: Vec<f64> = answer["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["mean"][1].as_f64().unwrap())
        .collect();
    assert!((blue_means[0] - 1.05).abs() < 1e-12, "{blue_means:?}");
    assert_eq!(blue_means[1], 0.0, "no blue dose: no blue");
}

/// A dose measured to 5 % of itself, posted in one batch that the store keeps as statistics: the
/// first fit reads the batch's raw rows back, the rows set the output's noise shape (power 1),
/// the posterior says so, and predict answers a dose near 0 with a small share of the output's
/// noise variance and a large dose with more than all of it. A later batch, folded by one
/// step, keeps the shape.
#[tokio::test]
async fn the_noise_of_a_dose_measured_to_a_share_of_itself_follows_the_dose() {
    let app = spawn_app().await;
    app.create_model(&spec("cv", 2, 1)).await;
    let noise = |i: usize| ((i as f64 * 0.754_877_666).fract() - 0.5) * 12f64.sqrt();
    let (x, y): (Vec<Vec<f64>>, Vec<Vec<f64>>) = (0..320)
        .map(|i| {
            let t = (i % 300) as f64 / 300.0;
            let x = vec![t * t, (i as f64 * 0.37).sin().abs()];
            let dose = 0.01 + 4.0 * x[0] + 0.5 * x[1];
            (x, vec![dose * (1.0 + 0.05 * noise(i))])
        })
        .unzip();
    let first = json!({"batch_id": "first", "x": x[..300], "y": y[..300]});
    assert_eq!(app.post_batch("cv", &first).await.status(), StatusCode::ACCEPTED);
    assert_eq!(app.wait_for_batch("cv", "first").await["status"], "folded");
    let posterior: Value = app.get("/v1/models/cv/posterior").await.json().await.unwrap();
    let output = &posterior["outputs"][0];
    assert_eq!(output["noise_shape"]["power"], 1.0, "{output}");
    let s = output["noise_variance"].as_f64().unwrap();
    let answer = app.predict_at("cv", &json!([[0.0, 0.0], [1.0, 0.5]]), 1).await;
    let variance = |r: usize| answer["predictions"][r]["variance"][0].as_f64().unwrap();
    assert!(variance(0) < 0.1 * s, "{answer} against σ² {s}");
    assert!(variance(1) > s, "{answer} against σ² {s}");

    let later = json!({"batch_id": "later", "x": x[300..], "y": y[300..]});
    assert_eq!(app.post_batch("cv", &later).await.status(), StatusCode::ACCEPTED);
    assert_eq!(app.wait_for_batch("cv", "later").await["status"], "folded");
    let posterior: Value = app.get("/v1/models/cv/posterior").await.json().await.unwrap();
    assert_eq!(posterior["version"], 2);
    assert_eq!(posterior["outputs"][0]["noise_shape"], output["noise_shape"]);
}

/// Errors more peaked than a Gaussian, with a few far off (a t with 4 degrees of freedom), in
/// a first batch the store keeps as statistics: the first fit reads its raw rows back, their
/// residuals set a tail, the posterior names its degrees of freedom and every prediction
/// carries them, the variance unchanged in meaning. A later batch, folded by one step, keeps
/// it. A model whose errors are Gaussian answers without `dof`, as before.
#[tokio::test]
async fn heavy_tailed_errors_give_answers_a_students_t() {
    let app = spawn_app().await;
    let u = |i: usize, a: f64| ((i as f64 + 0.5) * a).fract();
    // t₄'s quantile (closed form) and the normal's by Box–Muller, from fixed sequences.
    let student = |i: usize| {
        let p = u(i, 0.618_033_988_749_895);
        let alpha = 4.0 * p * (1.0 - p);
        let q = (alpha.sqrt().acos() / 3.0).cos() / alpha.sqrt();
        (p - 0.5).signum() * 2.0 * (q - 1.0).sqrt()
    };
    let normal = |i: usize| {
        (-2.0 * u(i, 0.618_033_988_749_895).ln()).sqrt()
            * (std::f64::consts::TAU * u(i, 0.754_877_666_246_692_7)).cos()
    };
    let rows = |noise: &dyn Fn(usize) -> f64| -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
        (0..420)
            .map(|i| {
                let x = vec![(i as f64 * 0.13).fract(), (i as f64 * 0.29).fract()];
                let y = vec![
                    1.0 + 2.0 * x[0] - x[1] + 0.1 * noise(i),
                    3.0 - x[0] + 0.2 * noise(i + 7),
                ];
                (x, y)
            })
            .unzip()
    };
    for (name, noise, tailed) in [
        ("tailed", &student as &dyn Fn(usize) -> f64, true),
        ("gaussian", &normal, false),
    ] {
        app.create_model(&spec(name, 2, 2)).await;
        let (x, y) = rows(noise);
        let first = json!({"batch_id": "first", "x": x[..400], "y": y[..400]});
        assert_eq!(app.post_batch(name, &first).await.status(), StatusCode::ACCEPTED);
        assert_eq!(app.wait_for_batch(name, "first").await["status"], "folded");
        let posterior: Value = app.get(&format!("/v1/models/{name}/posterior")).await.json().await.unwrap();
        let answer = app.predict_at(name, &json!([[0.2, 0.4], [0.9, 0.1]]), 1).await;
        if !tailed {
            assert_eq!(posterior["dof"], Value::Null, "{posterior}");
            assert!(answer["predictions"][0].get("dof").is_none(), "{answer}");
            continue;
        }
        let nu = posterior["dof"].as_f64().unwrap_or_else(|| panic!("{posterior}"));
        assert!((3.0..=5.0).contains(&nu), "{posterior}");
        for r in 0..2 {
            assert_eq!(answer["predictions"][r]["dof"], json!([nu, nu]), "{answer}");
        }
        let later = json!({"batch_id": "later", "x": x[400..], "y": y[400..]});
        assert_eq!(app.post_batch(name, &later).await.status(), StatusCode::ACCEPTED);
        assert_eq!(app.wait_for_batch(name, "later").await["status"], "folded");
        let again = app.predict_at(name, &json!([[0.2, 0.4]]), 2).await;
        assert_eq!(again["predictions"][0]["dof"], json!([nu, nu]), "{again}");
    }
}
