//! Spectral models: spectra on any covering grid, resampled onto the model's; Kubelka–Munk on
//! the spectrum only; brighteners flagged, short spectra refused.

use mordant::estimator::{Basis, ModelConfig, ReflectanceScale, Transform};
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

/// Reflectance (percent) of a dyed sample at `λ` nm by the Kubelka–Munk forward model:
/// `K/S = K/S_substrate + Σ cᵢ kᵢ(λ)`, `R = 1 + K/S − √((K/S)² + 2 K/S)`.
fn reflectance(lambda: f64, recipe: &[f64]) -> f64 {
    let bands = [(430.0, 30.0), (520.0, 40.0), (610.0, 35.0)];
    let ks = 0.02
        + recipe
            .iter()
            .zip(bands)
            .map(|(c, (centre, width))| {
                c * 3.0 * (-((lambda - centre) / width).powi(2) / 2.0).exp()
            })
            .sum::<f64>();
    100.0 * (1.0 + ks - (ks * ks + 2.0 * ks).sqrt())
}

/// Lab dips as JSON rows: spectra, fabric codes, recipes.
type LabDips = (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>);

/// What an instrument reads of the same sample when the fabric's surface reflects (Saunderson,
/// k₁ = 0.04, k₂ = 0.6): `R_m = k₁ + (1 − k₁)(1 − k₂) R / (1 − k₂ R)`, percent.
fn surface_reflectance(lambda: f64, recipe: &[f64]) -> f64 {
    let r = reflectance(lambda, recipe) / 100.0;
    100.0 * (0.04 + 0.96 * 0.4 * r / (1.0 - 0.6 * r))
}

/// `rows` lab dips: spectra on 360–780 nm every 5 nm, a fabric code, recipes of three dyes.
fn lab_dips(seed: u64, rows: usize) -> LabDips {
    lab_dips_read(seed, rows, reflectance)
}

/// [`lab_dips`] read by `read` (percent at a wavelength, of a recipe).
fn lab_dips_read(seed: u64, rows: usize, read: fn(f64, &[f64]) -> f64) -> LabDips {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut spectra, mut fabric, mut recipes) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rows {
        let recipe: Vec<f64> = (0..3).map(|_| rng.random_range(0.0..2.0)).collect();
        spectra.push(
            (0..85)
                .map(|i| read(360.0 + 5.0 * i as f64, &recipe) + rng.random_range(-0.05..0.05))
                .collect(),
        );
        fabric.push(vec![f64::from(rng.random_range(0..2u8))]);
        recipes.push(recipe);
    }
    (spectra, fabric, recipes)
}

/// Posts 30 lab dips of `seed` to `model` as batch `batch_id` (spectra on 360–780 nm every
/// 5 nm) and returns them.
async fn post_lab_dips(app: &TestApp, model: &str, batch_id: &str, seed: u64) -> LabDips {
    let (spectra, fabric, recipes) = lab_dips(seed, 30);
    let response = app
        .post_batch(
            model,
            &json!({
                "batch_id": batch_id,
                "spectra": {"start_nm": 360, "interval_nm": 5, "values": spectra},
                "x": fabric,
                "y": recipes,
            }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    (spectra, fabric, recipes)
}

fn spectral_spec(name: &str) -> Value {
    json!({
        "name": name,
        "spectrum": {"start_nm": 400, "interval_nm": 10, "count": 31, "scale": "percent"},
        "features": ["fabric"],
        "outputs": ["yellow", "red", "blue"],
        "transform": "kubelka_munk",
        "first_fit_rows": 40,
    })
}

/// Every fifth value of a 5 nm spectrum from 360 nm, from 400 to 700 nm: the model's grid.
fn on_model_grid(spectrum: &[f64]) -> Vec<f64> {
    (0..31).map(|k| spectrum[8 + 2 * k]).collect()
}

#[tokio::test]
async fn spectra_on_a_finer_wider_grid_train_the_model_the_estimator_computes() {
    let app = spawn_app().await;
    let model = app.create_model(&spectral_spec("dips")).await;
    assert_eq!(model["spectrum"]["count"], 31);
    assert_eq!(model["features"], json!(["fabric"]));
    let mut direct = Vec::new();
    for (b, seed) in [11u64, 12, 13].into_iter().enumerate() {
        let (spectra, fabric, recipes) = post_lab_dips(&app, "dips", &format!("b{b}"), seed).await;
        let x: Vec<Vec<f64>> = spectra
            .iter()
            .zip(&fabric)
            .map(|(s, f)| [on_model_grid(s), f.clone()].concat())
            .collect();
        direct.push((x, recipes));
    }
    let version = app.wait_for_batch("dips", "b2").await["version"]
        .as_i64()
        .unwrap();

    let (spectra, fabric, recipes) = lab_dips(99, 4);
    let api = wait_until(std::time::Duration::from_secs(30), || async {
        let r = app
            .post(
                "/v1/models/dips/predict",
                &json!({"spectra": {"start_nm": 360, "interval_nm": 5, "values": spectra}, "x": fabric}),
            )
            .await;
        let body: Value = r.json().await.ok()?;
        (body["version"].as_i64()? >= version).then_some(body)
    })
    .await
    .expect("predict reaches the version");
    let basis = Basis::spectral(
        31,
        ReflectanceScale::Percent,
        32,
        true,
        Transform::KubelkaMunk,
    );
    let config = ModelConfig::new(basis, 3);
    let probe: Vec<Vec<f64>> = spectra
        .iter()
        .zip(&fabric)
        .map(|(s, f)| [on_model_grid(s), f.clone()].concat())
        .collect();
    let expected = direct_state(&config, &direct, 40)
        .predict(mat(&probe).as_ref())
        .unwrap();
    assert_same_predictions(&api, &expected);
    // Kubelka–Munk makes the recipe linear in the inputs: the learnt recipes are close.
    for (p, recipe) in api["predictions"].as_array().unwrap().iter().zip(&recipes) {
        for k in 0..3 {
            let mean = p["mean"][k].as_f64().unwrap();
            assert!((mean - recipe[k]).abs() < 0.05, "{mean} vs {}", recipe[k]);
        }
    }
    let posterior: Value = app
        .get("/v1/models/dips/posterior")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(posterior["basis"][0], "400nm");
    assert_eq!(posterior["basis"][31], "fabric");
}

#[tokio::test]
async fn a_csv_batch_on_another_grid_is_the_json_batch() {
    let app = spawn_app().await;
    app.create_model(&spectral_spec("dips")).await;
    let (spectra, fabric, recipes) = lab_dips(5, 3);
    let response = app
        .post_batch(
            "dips",
            &json!({
                "batch_id": "same",
                "spectra": {"start_nm": 360, "interval_nm": 5, "values": spectra},
                "x": fabric,
                "y": recipes,
            }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    // The CSV's columns in another order; its bands every 5 nm from 360 nm.
    let mut csv = String::from("red,fabric,blue,yellow");
    for i in 0..85 {
        // Bands written as an instrument's software may write them.
        csv.push_str(&format!(",{}.0nm", 360 + 5 * i));
    }
    csv.push('\n');
    for ((s, f), y) in spectra.iter().zip(&fabric).zip(&recipes) {
        csv.push_str(&format!("{},{},{},{}", y[1], f[0], y[2], y[0]));
        for v in s {
            csv.push_str(&format!(",{v}"));
        }
        csv.push('\n');
    }
    let path = "/v1/models/dips/batches";
    let replay = app.post_csv("dips", Some("same"), csv.clone()).await;
    assert_eq!(replay.status(), StatusCode::ACCEPTED);
    assert_eq!(
        replay
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true"),
        "the CSV reads to the same rows as the JSON batch"
    );
    // A CSV that stops at 690 nm is refused.
    let short: String = csv
        .lines()
        .map(|line| line.split(',').take(4 + 67).collect::<Vec<_>>().join(","))
        .collect::<Vec<_>>()
        .join("\n");
    let response = app.post_raw(path, "text/csv", short).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("never extrapolates"),
        "{body}"
    );
}

/// A CSV on the model's own grid with bands left out names the missing columns (it is no
/// other grid the model could be read from), and so does one without the last band.
#[tokio::test]
async fn a_csv_missing_bands_of_the_model_s_grid_names_them() {
    let app = spawn_app().await;
    app.create_model(&spectral_spec("dips")).await;
    for missing in [vec![550], vec![550, 560, 600], vec![700]] {
        let bands: Vec<String> = (0..31)
            .map(|j| 400 + 10 * j)
            .filter(|nm| !missing.contains(nm))
            .map(|nm| format!("{nm}nm"))
            .collect();
        let mut csv = format!("fabric,yellow,red,blue,{}\n", bands.join(","));
        csv += &format!("1,0.1,0.2,0.3{}\n", ",50".repeat(bands.len()));
        let response = app.post_raw("/v1/models/dips/batches", "text/csv", csv).await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body: Value = response.json().await.unwrap();
        let said: Vec<&str> = body["error"]["details"].as_array().unwrap().iter()
            .map(|d| d["message"].as_str().unwrap()).collect();
        let expected: Vec<String> = missing.iter().map(|nm| format!("column \"{nm}nm\" is missing")).collect();
        assert_eq!(said, expected, "{body}");
    }
}

#[tokio::test]
async fn short_spectra_are_refused_and_brighteners_flagged() {
    let app = spawn_app().await;
    app.create_model(&spectral_spec("dips")).await;
    let (spectra, fabric, recipes) = lab_dips(3, 2);
    // 360–700 nm is fine for a 400–700 nm model; 360–695 nm is not.
    let short: Vec<Vec<f64>> = spectra.iter().map(|s| s[..67].to_vec()).collect();
    let response = app
        .post_batch(
            "dips",
            &json!({"spectra": {"start_nm": 360, "interval_nm": 5, "values": short}, "x": fabric, "y": recipes}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["details"][0]["path"], "/spectra");

    let mut bright = spectra.clone();
    bright[1][10] = 103.5;
    let response = app
        .post_batch(
            "dips",
            &json!({"spectra": {"start_nm": 360, "interval_nm": 5, "values": bright}, "x": fabric, "y": recipes}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["warnings"][0]["path"], "/spectra/values/1/10");
    assert!(
        body["warnings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("410nm")
    );
    // A model without a spectrum has no use for one.
    app.create_model(&spec("plain", 2, 1)).await;
    let response = app
        .post_batch(
            "plain",
            &json!({"spectra": {"start_nm": 400, "interval_nm": 10, "values": [[1.0, 2.0]]}, "x": [[1.0, 2.0]], "y": [[1.0]]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn relevance_lists_the_inputs_no_output_uses_and_posteriors_rank_theirs() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 3, 2)).await;
    assert_eq!(
        app.get("/v1/models/lab/relevance").await.status(),
        StatusCode::CONFLICT
    );
    // The third input never varies from 0: no output can use it.
    let (mut x, y) = random_rows(4, 60, 3, 2);
    for row in &mut x {
        row[2] = 0.0;
    }
    app.post_batch("lab", &json!({"batch_id": "b", "x": x, "y": y}))
        .await;
    let version = app.wait_for_batch("lab", "b").await["version"]
        .as_i64()
        .unwrap();
    let relevance: Value = wait_until(std::time::Duration::from_secs(30), || async {
        let body: Value = app
            .get("/v1/models/lab/relevance")
            .await
            .json()
            .await
            .ok()?;
        (body["version"].as_i64()? >= version).then_some(body)
    })
    .await
    .expect("relevance at the version");
    assert_eq!(relevance["trained_outputs"], 2);
    assert_eq!(relevance["unused"], json!(["R420"]));
    let inputs = relevance["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 3);
    assert_eq!(inputs[2]["name"], "R420");
    assert_eq!(inputs[2]["outputs"], 0);

    let posterior: Value = app
        .get("/v1/models/lab/posterior")
        .await
        .json()
        .await
        .unwrap();
    let basis: Vec<&str> = posterior["basis"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    for output in posterior["outputs"].as_array().unwrap() {
        let prior = |name: &str| {
            let j = basis.iter().position(|b| *b == name).unwrap();
            output["prior_variance"][j].as_f64().unwrap()
        };
        let ranked: Vec<f64> = output["ranked_features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let v = prior(f["name"].as_str().unwrap());
                assert_eq!(f["prior_variance"].as_f64().unwrap(), v);
                v
            })
            .collect();
        // Every active feature is ranked but the intercept, whose prior is flat (null).
        let intercept = basis.iter().position(|b| *b == "intercept").unwrap();
        assert_eq!(output["prior_variance"][intercept], Value::Null);
        assert_eq!(
            ranked.len() + 1,
            output["active_features"].as_array().unwrap().len()
        );
        assert!(!ranked.is_empty());
        assert!(ranked.windows(2).all(|w| w[0] >= w[1]), "{ranked:?}");
        assert!(
            !output["active_features"]
                .as_array()
                .unwrap()
                .contains(&json!("R420"))
        );
    }
}

/// A spectral model "kitchen" trained on three batches of lab dips; the version that folded
/// the last.
async fn trained_kitchen(app: &TestApp, seeds: [u64; 3]) -> i64 {
    app.create_model(&spectral_spec("kitchen")).await;
    for (b, seed) in seeds.into_iter().enumerate() {
        post_lab_dips(app, "kitchen", &format!("k{b}"), seed).await;
    }
    app.wait_for_batch("kitchen", "k2").await["version"]
        .as_i64()
        .unwrap()
}

/// Match's answer to `body` from model `model` once it is at `version` or later.
async fn matched_at(app: &TestApp, model: &str, body: &Value, version: i64) -> Value {
    wait_until(std::time::Duration::from_secs(30), || async {
        let r = app.post(&format!("/v1/models/{model}/match"), body).await;
        let answer: Value = r.json().await.ok()?;
        (answer["version"].as_i64()? >= version).then_some(answer)
    })
    .await
    .expect("match reaches the version")
}

/// The numbers of a JSON array.
fn numbers(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

/// A target dyed with yellow and blue on 360–780 nm every 5 nm, and a match body of it on the
/// first fabric.
fn yellow_and_blue_target() -> (Vec<f64>, Value) {
    let target: Vec<f64> = (0..85)
        .map(|i| reflectance(360.0 + 5.0 * i as f64, &[0.5, 0.0, 1.2]))
        .collect();
    let body = json!({
        "spectra": {"start_nm": 360, "interval_nm": 5, "values": [target]},
        "x": [[0.0]],
    });
    (target, body)
}

#[tokio::test]
async fn candidate_recipes_are_listed_priced_bounded_and_sorted_as_asked() {
    let app = spawn_app().await;
    let version = trained_kitchen(&app, [31u64, 32, 33]).await;
    let (_, body) = yellow_and_blue_target();
    let ask = |options: Value| {
        let mut request = body.clone();
        for (k, v) in options.as_object().unwrap() {
            request[k] = v.clone();
        }
        let app = &app;
        async move {
            let response = app.post("/v1/models/kitchen/match", &request).await;
            assert_eq!(response.status(), StatusCode::OK);
            let answer: Value = response.json().await.unwrap();
            assert!(answer["version"].as_i64().unwrap() >= version, "{answer}");
            answer["recipes"][0].clone()
        }
    };
    let de00 = |c: &Value| c["colour"]["illuminants"][0]["de00"].as_f64().unwrap();

    // By default: every combination of up to three dyes that uses all its dyes, best first;
    // the target's recipe is the best candidate.
    let recipe = ask(json!({})).await;
    let candidates = recipe["candidates"].as_array().unwrap();
    assert!((2..=7).contains(&candidates.len()), "{recipe}");
    // The target's own two dyes make a passing candidate; the best may add a trace of the
    // third, which the rows' noise lets fit a little closer.
    let best: Vec<&str> = recipe["dyes"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert!(best.contains(&"yellow") && best.contains(&"blue"), "{recipe}");
    let own = candidates.iter().find(|c| c["dyes"] == json!(["yellow", "blue"])).unwrap();
    assert_eq!(own["colour"]["verdict"], "pass", "{own}");
    for key in ["dyes", "concentration", "variance", "reflectance_rms", "colour"] {
        assert_eq!(recipe[key], candidates[0][key], "{key}");
    }
    assert_eq!(recipe["colour"]["verdict"], "pass");
    for pair in candidates.windows(2) {
        assert!(de00(&pair[0]) <= de00(&pair[1]), "{recipe}");
    }
    for c in candidates {
        let used: Vec<&str> = c["dyes"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
        for (name, amount) in ["yellow", "red", "blue"].iter().zip(numbers(&c["concentration"])) {
            assert_eq!(used.contains(name), amount > 0.0, "{c}");
        }
        assert!(c.get("cost").is_none());
        assert_eq!(illuminant_names(&c["colour"]), ["D65", "A", "F11"]);
    }

    // One dye at a time from an allow-list.
    let single = ask(json!({"dyes": ["red", "yellow"], "max_dyes": 1})).await;
    let names: Vec<&Value> = single["candidates"].as_array().unwrap().iter().map(|c| &c["dyes"]).collect();
    assert!(!names.is_empty() && names.len() <= 2, "{single}");
    assert!(names.iter().all(|d| *d == &json!(["red"]) || *d == &json!(["yellow"])), "{single}");

    // A cap below what the target needs holds, and shows in the colour.
    let capped = ask(json!({"bounds": {"blue": {"max": 0.6}}, "max_candidates": 3})).await;
    let candidates = capped["candidates"].as_array().unwrap();
    assert!(candidates.len() <= 3);
    assert!(candidates.iter().all(|c| numbers(&c["concentration"])[2] <= 0.6), "{capped}");
    assert!(de00(&capped) > de00(&recipe), "{capped}");

    // Priced and sorted by cost with a lenient tolerance: the cheapest passing candidate first,
    // each cost the sum of its dyes' price × amount.
    let prices = [1.0, 2.0, 5.0];
    let cheap = ask(json!({
        "prices": {"yellow": prices[0], "red": prices[1], "blue": prices[2]},
        "sort": "cost",
        "tolerance": {"de00": 100},
    }))
    .await;
    let candidates = cheap["candidates"].as_array().unwrap();
    for c in candidates {
        let cost: f64 = numbers(&c["concentration"]).iter().zip(prices).map(|(a, p)| a * p).sum();
        assert!((c["cost"].as_f64().unwrap() - cost).abs() < 1e-9, "{c}");
        assert_eq!(c["colour"]["verdict"], "pass");
    }
    for pair in candidates.windows(2) {
        assert!(pair[0]["cost"].as_f64() <= pair[1]["cost"].as_f64(), "{cheap}");
    }

    // Without a list: the non-negative recipe over every dye, as match answered before.
    let single = ask(json!({"candidates": false})).await;
    assert_eq!(single["candidates"], json!([]), "{single}");
    let fitted = numbers(&single["concentration"]);
    assert!((fitted[0] - 0.5).abs() < 0.03 && (fitted[2] - 1.2).abs() < 0.03, "{single}");
    assert_eq!(single["colour"]["verdict"], "pass");

    // Options are checked like the rows, every problem with its path.
    let mut listless = body.clone();
    listless["candidates"] = json!(false);
    listless["max_dyes"] = json!(2);
    listless["sort"] = json!("de00");
    let refused: Value = app.post("/v1/models/kitchen/match", &listless).await.json().await.unwrap();
    let mut paths = error_paths(&refused["error"]);
    paths.sort_unstable();
    assert_eq!(paths, ["/max_dyes", "/sort"], "{refused}");
    let mut wrong = body.clone();
    wrong["dyes"] = json!(["green"]);
    wrong["max_dyes"] = json!(7);
    wrong["bounds"] = json!({"red": {"min": 2, "max": 1}});
    let refused = app.post("/v1/models/kitchen/match", &wrong).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let refused: Value = refused.json().await.unwrap();
    let mut paths = error_paths(&refused["error"]);
    paths.sort_unstable();
    assert_eq!(paths, ["/bounds/red", "/dyes/0", "/max_dyes"], "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("invalid match request"), "{refused}");
    let mut unpriced = body.clone();
    unpriced["sort"] = json!("cost");
    let refused: Value = app.post("/v1/models/kitchen/match", &unpriced).await.json().await.unwrap();
    assert_eq!(error_paths(&refused["error"]), ["/sort"], "{refused}");
}

#[tokio::test]
async fn an_off_shade_dip_is_corrected_and_learnt_once() {
    let app = spawn_app().await;
    let version = trained_kitchen(&app, [41u64, 42, 43]).await;
    let read = |recipe: &[f64]| -> Vec<f64> {
        (0..85)
            .map(|i| reflectance(360.0 + 5.0 * i as f64, recipe))
            .collect()
    };
    let spectrum = |values: Vec<f64>| json!({"start_nm": 360, "interval_nm": 5, "values": values});
    let target = read(&[0.5, 0.0, 1.2]);
    let body = json!({
        "spectra": {"start_nm": 360, "interval_nm": 5, "values": [target]},
        "x": [[0.0]],
    });
    let matched = matched_at(&app, "kitchen", &body, version).await;
    let first = numbers(&matched["recipes"][0]["concentration"]);
    let names = ["yellow", "red", "blue"];
    let dyed: serde_json::Map<String, Value> = names
        .iter()
        .zip(&first)
        .filter(|(_, c)| **c > 0.0)
        .map(|(n, c)| ((*n).to_owned(), json!(c)))
        .collect();
    // The dye house's blue is 15 % stronger than the one in the lab dips the model learnt.
    let dye_house = |c: &[f64]| read(&[c[0], c[1], 1.15 * c[2]]);
    let mut request = body.clone();
    request["recipe"] = Value::Object(dyed.clone());
    request["measured"] = spectrum(dye_house(&first));
    let response = app.post("/v1/models/kitchen/correct", &request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["model"], "kitchen");
    let dip = &answer["dip"];
    assert_eq!(dip["verdict"], "fail", "{answer}");
    assert_eq!(illuminant_names(dip), ["D65", "A", "F11"]);
    let off = dip["illuminants"][0]["de00"].as_f64().unwrap();
    assert!(off > 1.0, "{answer}");
    let recipe = &answer["recipe"];
    // The dyes of the recipe dyed, less any the correction takes out (a trace of red the
    // first match added may go).
    let answered: Vec<&str> = recipe["dyes"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert!(answered.iter().all(|d| dyed.contains_key(*d)), "{answer}");
    assert!(answered.contains(&"yellow") && answered.contains(&"blue"), "{answer}");
    let corrected = numbers(&recipe["concentration"]);
    assert!(corrected[2] < 0.93 * first[2] && corrected[2] > 0.8 * first[2], "{corrected:?} from {first:?}");
    assert_eq!(recipe["colour"]["verdict"], "pass", "{answer}");
    assert!(recipe["colour"]["illuminants"][0]["de00"].as_f64().unwrap() <= off, "{answer}");
    assert!(answer.get("learnt").is_none());
    // A lower bound past the most a match uses of a dye that builds up (100 % owf) is one no
    // recipe meets: refused at its path, neither a server error nor a recipe below it.
    let mut deep = request.clone();
    deep["bounds"] = json!({"blue": {"min": 150.0}});
    let refused = app.post("/v1/models/kitchen/correct", &deep).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(error_paths(&refused["error"]), ["/bounds/blue/min"], "{refused}");
    let mut deep = body.clone();
    deep["bounds"] = json!({"blue": {"min": 150.0}});
    let refused: Value = app.post("/v1/models/kitchen/match", &deep).await.json().await.unwrap();
    assert_eq!(error_paths(&refused["error"]), ["/bounds/blue/min"], "{refused}");
    // Dyed again in the same dye house, the corrected recipe passes.
    let judged: Value = app
        .post(
            "/v1/colour/compare",
            &json!({"reference": spectrum(target_of(&body)), "sample": spectrum(dye_house(&corrected)),
                    "scale": "percent"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(judged["verdict"], "pass", "{judged}");
    assert!(judged["illuminants"][0]["de00"].as_f64().unwrap() < off / 3.0, "{judged}");

    // Learnt: stored once however often it is sent, and folded as a batch of one row.
    let before: Value = app.get("/v1/models/kitchen").await.json().await.unwrap();
    request["learn"] = json!(true);
    let learnt: Value = app.post("/v1/models/kitchen/correct", &request).await.json().await.unwrap();
    let id = learnt["learnt"]["batch_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("dip-"), "{learnt}");
    assert_eq!(learnt["learnt"]["rows"], 1);
    assert_eq!(learnt["learnt"]["replayed"], false);
    let again: Value = app.post("/v1/models/kitchen/correct", &request).await.json().await.unwrap();
    assert_eq!(again["learnt"]["batch_id"], json!(id));
    assert_eq!(again["learnt"]["replayed"], true);
    assert_ne!(app.wait_for_batch("kitchen", &id).await["status"], "rejected");
    let after = wait_until(std::time::Duration::from_secs(30), || async {
        let m: Value = app.get("/v1/models/kitchen").await.json().await.ok()?;
        (m["observations"].as_f64()? > before["observations"].as_f64()?).then_some(m)
    })
    .await
    .expect("the dip is learnt");
    assert_eq!(
        after["observations"].as_f64().unwrap(),
        before["observations"].as_f64().unwrap() + 1.0
    );

    // Every problem with its path.
    let mut wrong = body.clone();
    wrong["recipe"] = json!({"green": 1.0, "blue": -1});
    wrong["measured"] = json!({"start_nm": 420, "interval_nm": 10, "values": [50.0, 50.0]});
    wrong["batch_id"] = json!("dip-7");
    let refused = app.post("/v1/models/kitchen/correct", &wrong).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let refused: Value = refused.json().await.unwrap();
    let mut paths = error_paths(&refused["error"]);
    paths.sort_unstable();
    assert_eq!(
        paths,
        ["/batch_id", "/measured", "/recipe/blue", "/recipe/green"],
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("invalid correction request"), "{refused}");
    let mut nothing = request.clone();
    nothing["recipe"] = json!({});
    nothing["learn"] = json!(false);
    nothing["batch_id"] = json!("dip-8");
    let refused: Value = app.post("/v1/models/kitchen/correct", &nothing).await.json().await.unwrap();
    let mut paths = error_paths(&refused["error"]);
    paths.sort_unstable();
    assert_eq!(paths, ["/batch_id", "/recipe"], "{refused}");
}

/// Inputs no recipe can be read from are the client's to fix: each is a `422` at its path, as
/// predict answers it, never a conflict blamed on the model nor a recipe computed from them.
#[tokio::test]
async fn absurd_targets_fabrics_and_doses_are_422_at_their_paths() {
    let app = spawn_app().await;
    let version = trained_kitchen(&app, [61u64, 62, 63]).await;
    let (target, body) = yellow_and_blue_target();
    matched_at(&app, "kitchen", &body, version).await;
    let refused = |path: &'static str, body: Value| {
        let app = &app;
        async move {
            let response = app.post(&format!("/v1/models/kitchen/{path}"), &body).await;
            assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{path}: {body}");
            let answer: Value = response.json().await.unwrap();
            assert_eq!(answer["error"]["code"], "invalid_input", "{answer}");
            error_paths(&answer["error"])
        }
    };

    // A body that is no object is told what a spectral model's body holds.
    let response = app.post("/v1/models/kitchen/match", &json!([])).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["error"]["message"],
        "the body must be a JSON object with \"spectra\"",
        "{answer}"
    );

    // A fabric far outside the range the model learnt, in any row.
    let mut fabric = body.clone();
    fabric["spectra"]["values"] = json!([target, target]);
    fabric["x"] = json!([[0.0], [1e200]]);
    assert_eq!(refused("match", fabric.clone()).await, ["/x/1"]);
    fabric["candidates"] = json!(false);
    assert_eq!(refused("match", fabric).await, ["/x/1"]);
    // Predict points at the named features too, not at the spectrum.
    let mut overflowing = body.clone();
    overflowing["x"] = json!([[0.0], [1e300]]);
    overflowing["spectra"]["values"] = json!([target, target]);
    assert_eq!(refused("predict", overflowing).await, ["/x/1"]);

    // A target at or above full scale in every band has no absorption to match.
    let mut white = body.clone();
    white["spectra"]["values"] = json!([target, vec![100.0; 85]]);
    white["x"] = json!([[0.0], [0.0]]);
    assert_eq!(refused("match", white).await, ["/spectra/values/1"]);

    // Options that make the answer's numbers overflow: far-out CMC weights and prices.
    let mut weights = body.clone();
    weights["cmc"] = json!({"l": 1e-308, "c": 1e-308});
    assert_eq!(refused("match", weights).await, ["/cmc"]);
    let mut priced = body.clone();
    priced["prices"] = json!({"yellow": 1.7e308, "red": 1.7e308, "blue": 1.7e308});
    assert_eq!(refused("match", priced).await, ["/prices"]);

    // Correct: the same fabric and target, a dose far past anything dyed, a dip that reads
    // full scale everywhere, far-out CMC weights.
    let dip: Vec<f64> = (0..85)
        .map(|i| reflectance(360.0 + 5.0 * i as f64, &[0.5, 0.0, 1.4]))
        .collect();
    let mut correct = body.clone();
    correct["recipe"] = json!({"yellow": 0.5, "blue": 1.2});
    correct["measured"] = json!({"start_nm": 360, "interval_nm": 5, "values": dip});
    let fine = app.post("/v1/models/kitchen/correct", &correct).await;
    assert_eq!(fine.status(), StatusCode::OK);
    let mut fabric = correct.clone();
    fabric["x"] = json!([[1e200]]);
    assert_eq!(refused("correct", fabric).await, ["/x/0"]);
    let mut white = correct.clone();
    white["spectra"]["values"] = json!([vec![100.0; 85]]);
    assert_eq!(refused("correct", white).await, ["/spectra/values/0"]);
    for dose in [1e308, 1e12] {
        let mut dosed = correct.clone();
        dosed["recipe"]["blue"] = json!(dose);
        assert_eq!(refused("correct", dosed).await, ["/recipe/blue"], "{dose}");
    }
    let mut undyed = correct.clone();
    undyed["measured"]["values"] = json!(vec![100.0; 85]);
    assert_eq!(refused("correct", undyed).await, ["/measured"]);
    let mut weights = correct.clone();
    weights["cmc"] = json!({"l": 1e-308, "c": 1e-308});
    assert_eq!(refused("correct", weights).await, ["/cmc"]);
}

/// A target that reads below full scale in as few bands as a recipe has dyes can be matched
/// exactly, so its residual says nothing of the noise: match and correct answer a recipe whose
/// variances are unknown (`null`), not the 0 of an exact fit, nor a conflict.
#[tokio::test]
async fn a_target_with_no_band_to_spare_is_matched_with_unknown_variances() {
    let app = spawn_app().await;
    let version = trained_kitchen(&app, [71u64, 72, 73]).await;
    let (target, body) = yellow_and_blue_target();
    // Full scale (an optical brightener) but at 450 and 600 nm.
    let brightened: Vec<f64> = target
        .iter()
        .enumerate()
        .map(|(i, r)| if [18, 48].contains(&i) { *r } else { 100.0 })
        .collect();
    let mut sparse = body.clone();
    sparse["spectra"]["values"] = json!([brightened]);
    // A recipe of as many dyes as bands has no residual degree of freedom.
    let variances_follow_the_dyes = |recipe: &Value| {
        let used = recipe["dyes"].as_array().unwrap().len();
        let variance = recipe["variance"].as_array().unwrap();
        if used >= 2 {
            assert!(variance.iter().all(Value::is_null), "{recipe}");
        } else {
            assert!(variance.iter().all(Value::is_number), "{recipe}");
        }
    };
    let answer = matched_at(&app, "kitchen", &sparse, version).await;
    let candidates = answer["recipes"][0]["candidates"].as_array().unwrap();
    candidates.iter().for_each(variances_follow_the_dyes);
    // The target's own two dyes reproduce its two bands.
    let own = candidates
        .iter()
        .find(|c| c["dyes"] == json!(["yellow", "blue"]))
        .unwrap();
    let amounts = numbers(&own["concentration"]);
    assert!((amounts[0] - 0.5).abs() < 0.01 && (amounts[2] - 1.2).abs() < 0.02, "{own}");
    assert!(own["reflectance_rms"].as_f64().unwrap() < 1e-6, "{own}");

    let dip: Vec<f64> = (0..85)
        .map(|i| reflectance(360.0 + 5.0 * i as f64, &[0.5, 0.0, 1.4]))
        .collect();
    let mut correct = sparse.clone();
    correct["recipe"] = json!({"yellow": 0.5, "blue": 1.2});
    correct["measured"] = json!({"start_nm": 360, "interval_nm": 5, "values": dip});
    let response = app.post("/v1/models/kitchen/correct", &correct).await;
    let status = response.status();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{answer}");
    variances_follow_the_dyes(&answer["recipe"]);
}

#[tokio::test]
async fn learning_a_corrected_dip_needs_a_key_that_may_ingest() {
    use crate::auth::{ADMIN_KEY, call, new_key};
    let app = spawn_configured(|s| s.auth.admin_key = ADMIN_KEY.into()).await;
    let (_, predict) = new_key(&app, "colour-desk", &["predict"]).await;
    let send = |path: &'static str, body: Value, key: String| {
        let app = &app;
        async move { call(&app.client, &app.address, "POST", path, Some(&body), Some(&key)).await }
    };
    let created = send("/v1/models", spectral_spec("kitchen"), ADMIN_KEY.into()).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    for (b, seed) in [51u64, 52].into_iter().enumerate() {
        let (spectra, fabric, recipes) = lab_dips(seed, 30);
        let batch = json!({"batch_id": format!("k{b}"), "x": fabric, "y": recipes,
                           "spectra": {"start_nm": 360, "interval_nm": 5, "values": spectra}});
        let posted = send("/v1/models/kitchen/batches", batch, ADMIN_KEY.into()).await;
        assert_eq!(posted.status(), StatusCode::ACCEPTED);
    }
    let target: Vec<f64> = (0..85).map(|i| reflectance(360.0 + 5.0 * i as f64, &[0.3, 0.6, 0.0])).collect();
    let dip: Vec<f64> = (0..85).map(|i| reflectance(360.0 + 5.0 * i as f64, &[0.3, 0.7, 0.0])).collect();
    let request = json!({
        "spectra": {"start_nm": 360, "interval_nm": 5, "values": [target]},
        "x": [[1.0]],
        "recipe": {"yellow": 0.3, "red": 0.6},
        "measured": {"start_nm": 360, "interval_nm": 5, "values": dip},
        "learn": true,
    });
    // Trained once the second batch is folded.
    let mut probe = request.clone();
    probe["learn"] = json!(false);
    let corrected = wait_until(std::time::Duration::from_secs(30), || async {
        let r = send("/v1/models/kitchen/correct", probe.clone(), predict.clone()).await;
        (r.status() == StatusCode::OK).then_some(())
    })
    .await;
    assert!(corrected.is_some(), "the model never trained");
    // The predict key may correct, not store the dip.
    let refused = send("/v1/models/kitchen/correct", request.clone(), predict.clone()).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let refused: Value = refused.json().await.unwrap();
    assert!(refused["error"]["message"].as_str().unwrap().contains("ingest"), "{refused}");
    let batches: Value = call(&app.client, &app.address, "GET", "/v1/models/kitchen/batches", None, Some(ADMIN_KEY)).await.json().await.unwrap();
    assert_eq!(batches["batches"].as_array().map(Vec::len), Some(2), "{batches}");
    // An admin key may.
    let learnt = send("/v1/models/kitchen/correct", request, ADMIN_KEY.into()).await;
    assert_eq!(learnt.status(), StatusCode::OK);
    let learnt: Value = learnt.json().await.unwrap();
    assert_eq!(learnt["learnt"]["rows"], 1, "{learnt}");
}

/// The target spectrum of a match or correct body.
fn target_of(body: &Value) -> Vec<f64> {
    numbers(&body["spectra"]["values"][0])
}

#[tokio::test]
async fn recipes_are_matched_to_target_spectra_from_the_learnt_forward_map() {
    let app = spawn_app().await;
    app.create_model(&spectral_spec("kitchen")).await;
    let target = |recipe: &[f64]| -> Vec<f64> {
        (0..85)
            .map(|i| reflectance(360.0 + 5.0 * i as f64, recipe))
            .collect()
    };
    let body = json!({
        "spectra": {"start_nm": 360, "interval_nm": 5,
                    "values": [target(&[0.5, 0.0, 1.2]), target(&[0.0, 0.8, 0.0])]},
        "x": [[0.0], [1.0]],
    });
    // Before the first fit there is nothing to match with.
    let early = app.post("/v1/models/kitchen/match", &body).await;
    assert_eq!(early.status(), StatusCode::CONFLICT);
    let early: Value = early.json().await.unwrap();
    assert_eq!(early["error"]["code"], "model_not_trained");

    for (b, seed) in [21u64, 22, 23].into_iter().enumerate() {
        post_lab_dips(&app, "kitchen", &format!("m{b}"), seed).await;
    }
    let version = app.wait_for_batch("kitchen", "m2").await["version"]
        .as_i64()
        .unwrap();
    let answer = matched_at(&app, "kitchen", &body, version).await;
    let recipes = answer["recipes"].as_array().unwrap();
    assert_eq!(recipes.len(), 2, "{answer}");
    for (recipe, truth) in recipes.iter().zip([[0.5, 0.0, 1.2], [0.0, 0.8, 0.0]]) {
        let c: Vec<f64> = recipe["concentration"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(c.len(), 3);
        for (k, (ck, tk)) in c.iter().zip(truth).enumerate() {
            assert!(*ck >= 0.0, "{answer}");
            // The rows carry 0.05 pp of noise; the targets none.
            assert!((ck - tk).abs() < 0.03, "dye {k}: {ck} vs {tk}: {answer}");
            let variance = recipe["variance"][k].as_f64().unwrap();
            assert!(variance > 0.0 && variance.is_finite());
        }
        let rms = recipe["reflectance_rms"].as_f64().unwrap();
        assert!((0.0..0.002).contains(&rms), "{answer}");
        // The recipe's predicted colour is the target's within the default tolerance, under
        // every light (the simulated dye house has no metamerism the map cannot see).
        let colour = &recipe["colour"];
        assert_eq!(colour["verdict"], "pass", "{colour}");
        assert_eq!(illuminant_names(colour), ["D65", "A", "F11"]);
        for d in colour["illuminants"].as_array().unwrap() {
            assert!(d["de00"].as_f64().unwrap() < 1.0, "{d}");
        }
    }
    // A tolerance tighter than the recipe's difference fails it; the judgement's fields are
    // checked like the rows.
    let d65 = answer["recipes"][0]["colour"]["illuminants"][0]["cmc"]
        .as_f64()
        .unwrap();
    let mut strict = body.clone();
    strict["tolerance"] = json!({"cmc": d65 / 2.0});
    strict["cmc"] = json!({"l": 2, "c": 1});
    let judged: Value = app
        .post("/v1/models/kitchen/match", &strict)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(judged["recipes"][0]["colour"]["verdict"], "fail", "{judged}");
    let mut wrong = body.clone();
    wrong["tolerance"] = json!({"de00": -1});
    wrong["colour"] = json!(true);
    let refused = app.post("/v1/models/kitchen/match", &wrong).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let refused: Value = refused.json().await.unwrap();
    let mut paths = error_paths(&refused["error"]);
    paths.sort_unstable();
    assert_eq!(paths, ["/colour", "/tolerance/de00"], "{refused}");

    // A model on 420–680 nm matches recipes but has no colour to judge them by.
    let mut narrow = spectral_spec("narrow");
    narrow["spectrum"] = json!({"start_nm": 420, "interval_nm": 10, "count": 27, "scale": "percent"});
    app.create_model(&narrow).await;
    post_lab_dips(&app, "narrow", "n0", 24).await;
    post_lab_dips(&app, "narrow", "n1", 25).await;
    let version = app.wait_for_batch("narrow", "n1").await["version"]
        .as_i64()
        .unwrap();
    let narrow = matched_at(&app, "narrow", &body, version).await;
    let recipe = &narrow["recipes"][0];
    assert!(recipe["concentration"].is_array(), "{narrow}");
    assert!(recipe.get("colour").is_none(), "{narrow}");
    // A tolerance it cannot judge by is said to be ignored, not silently dropped.
    let paths = |answer: &Value| -> Vec<String> {
        // Left out when there is none.
        answer["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| w["path"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(!paths(&narrow).contains(&"/tolerance".to_owned()), "{narrow}");
    let mut defaults = body.clone();
    defaults["tolerance"] = Value::Null;
    let answer: Value = app
        .post("/v1/models/narrow/match", &defaults)
        .await
        .json()
        .await
        .unwrap();
    assert!(paths(&answer).is_empty(), "null asks for the default: {answer}");
    let mut tolerant = body.clone();
    tolerant["tolerance"] = json!({"de00": 0.5});
    tolerant["cmc"] = json!({"l": 1, "c": 1});
    let answer: Value = app
        .post("/v1/models/narrow/match", &tolerant)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(answer["recipes"], narrow["recipes"], "{answer}");
    let said = paths(&answer);
    assert!(
        said.contains(&"/tolerance".to_owned()) && said.contains(&"/cmc".to_owned()),
        "{answer}"
    );
    let correction = json!({
        "spectra": {"start_nm": 360, "interval_nm": 5, "values": [target(&[0.5, 0.0, 1.2])]},
        "x": [[0.0]],
        "recipe": {"yellow": 0.5, "blue": 1.2},
        "measured": {"start_nm": 360, "interval_nm": 5, "values": target(&[0.6, 0.0, 1.1])},
        "tolerance": {"de00": 0.5},
    });
    let corrected = app.post("/v1/models/narrow/correct", &correction).await;
    assert_eq!(corrected.status(), StatusCode::OK);
    let corrected: Value = corrected.json().await.unwrap();
    assert_eq!(paths(&corrected), ["/tolerance"], "{corrected}");
    // Without colour there is no pass or fail to rank by cost or metamerism.
    let mut by_metamerism = body.clone();
    by_metamerism["sort"] = json!("metamerism");
    let refused = app.post("/v1/models/narrow/match", &by_metamerism).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(error_paths(&refused["error"]), ["/sort"], "{refused}");

    // A short spectrum is refused as predict refuses it.
    let short = app
        .post(
            "/v1/models/kitchen/match",
            &json!({"spectra": {"start_nm": 420, "interval_nm": 10, "values": [vec![50.0; 20]]},
                    "x": [[0.0]]}),
        )
        .await;
    assert_eq!(short.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let short: Value = short.json().await.unwrap();
    assert_eq!(short["error"]["details"][0]["path"], "/spectra");

    // A model without a spectrum has no forward map: a clear conflict, not a guess.
    app.create_model(
        &json!({"name": "plain", "features": ["a", "b"], "outputs": ["y"],
                             "first_fit_rows": 5}),
    )
    .await;
    let (x, y) = random_rows(5, 20, 2, 1);
    let response = app
        .post_batch("plain", &json!({"batch_id": "p0", "x": x, "y": y}))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    app.wait_for_batch("plain", "p0").await;
    // Until the fold reaches the cache the answer is "not trained"; then it is the conflict.
    let body = wait_until(std::time::Duration::from_secs(30), || async {
        let r = app
            .post("/v1/models/plain/match", &json!({"x": [[0.1, 0.2]]}))
            .await;
        assert_eq!(r.status(), StatusCode::CONFLICT);
        let body: Value = r.json().await.ok()?;
        (body["error"]["code"] == "conflict").then_some(body)
    })
    .await
    .expect("the trained plain model answers with a conflict");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no spectrum"),
        "{body}"
    );
    let missing = app
        .post("/v1/models/nothing/match", &json!({"x": [[0.1, 0.2]]}))
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

/// A model of readings that include the fabric's surface reflection matches recipes exactly
/// under the Saunderson transform, and shows its coefficients.
#[tokio::test]
async fn a_saunderson_model_matches_readings_with_the_surface_included() {
    let app = spawn_app().await;
    let mut spec = spectral_spec("surface");
    spec["transform"] = json!("saunderson");
    app.create_model(&spec).await;
    let model: Value = app.get("/v1/models/surface").await.json().await.unwrap();
    assert_eq!(model["transform"], "saunderson", "{model}");
    assert_eq!(model["saunderson"], json!({"k1": 0.04, "k2": 0.6}), "{model}");
    for (b, seed) in [31u64, 32, 33].into_iter().enumerate() {
        let (spectra, fabric, recipes) = lab_dips_read(seed, 30, surface_reflectance);
        let response = app
            .post_batch(
                "surface",
                &json!({
                    "batch_id": format!("s{b}"),
                    "spectra": {"start_nm": 360, "interval_nm": 5, "values": spectra},
                    "x": fabric,
                    "y": recipes,
                }),
            )
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
    }
    let version = app.wait_for_batch("surface", "s2").await["version"]
        .as_i64()
        .unwrap();
    let truth = [0.3, 1.7, 1.9];
    let target: Vec<f64> = (0..85)
        .map(|i| surface_reflectance(360.0 + 5.0 * i as f64, &truth))
        .collect();
    let body = json!({
        "spectra": {"start_nm": 360, "interval_nm": 5, "values": [target]},
        "x": [[0.0]],
        "candidates": false,
    });
    let answer = matched_at(&app, "surface", &body, version).await;
    let recipe = &answer["recipes"][0];
    for (k, t) in truth.iter().enumerate() {
        let c = recipe["concentration"][k].as_f64().unwrap();
        assert!((c - t).abs() < 0.03, "dye {k}: {c} vs {t}: {answer}");
    }
    assert_eq!(recipe["colour"]["verdict"], "pass", "{answer}");

    // Coefficients come only with the transform, each in [0, 1).
    let mut wrong = spectral_spec("wrong");
    wrong["saunderson"] = json!({"k1": 0.04});
    let mut out_of_range = spectral_spec("wrong");
    out_of_range["transform"] = json!("saunderson");
    out_of_range["saunderson"] = json!({"k1": 0.04, "k2": 1.2});
    for (body, path) in [(wrong, "/saunderson"), (out_of_range, "/saunderson/k2")] {
        let refused = app.post("/v1/models", &body).await;
        assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let refused: Value = refused.json().await.unwrap();
        assert_eq!(error_paths(&refused["error"]), [path], "{refused}");
    }
}

/// A 700-channel near-infrared model (absorbance, as such instruments write it) with the default
/// spec learns from a first batch of 40 rows (Bayesian regression needs no N ≥ p), with the
/// smooth prior along the wavelengths and a flat intercept; absorbances above 1 are no
/// brighteners, and Kubelka–Munk, which reads reflectance, is refused for them.
#[tokio::test]
async fn a_wide_spectrum_trains_from_a_small_first_batch() {
    let app = spawn_app().await;
    let nir = json!({"start_nm": 1100, "interval_nm": 2, "count": 700, "scale": "absorbance"});
    let refused = app
        .post(
            "/v1/models",
            &json!({"name": "nir-km", "spectrum": nir, "outputs": ["oil"], "transform": "kubelka_munk"}),
        )
        .await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["details"][0]["path"], "/transform", "{body}");
    let model = app
        .create_model(&json!({"name": "nir", "spectrum": nir, "outputs": ["oil"]}))
        .await;
    assert_eq!(model["spectrum"]["scale"], "absorbance");
    assert_eq!(model["prior"], "auto");
    assert_eq!(model["first_fit_rows"], 10);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(700);
    let rows: Vec<(Vec<f64>, f64)> = (0..40)
        .map(|_| {
            let (a, b) = (rng.random_range(0.0..1.0), rng.random_range(0.0..1.0));
            let spectrum = (0..700)
                .map(|i| {
                    let t = i as f64 / 700.0;
                    2.3 + a * (-(t - 0.3).powi(2) / 0.01).exp()
                        + b * (-(t - 0.7).powi(2) / 0.02).exp()
                        + 0.001 * rng.random_range(-1.0..1.0)
                })
                .collect();
            (spectrum, 3.0 + 0.5 * a - 0.2 * b)
        })
        .collect();
    let response = app
        .post_batch(
            "nir",
            &json!({
                "batch_id": "calibration",
                "spectra": {"start_nm": 1100, "interval_nm": 2,
                            "values": rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>()},
                "y": rows.iter().map(|r| vec![r.1]).collect::<Vec<_>>(),
            }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let accepted: Value = response.json().await.unwrap();
    assert!(accepted.get("warnings").is_none(), "{accepted}");
    let batch = app.wait_for_batch("nir", "calibration").await;
    assert_eq!(batch["status"], "folded", "{batch}");
    assert!(batch.get("waiting_for").is_none(), "{batch}");
    let posterior: Value = wait_until(std::time::Duration::from_secs(30), || async {
        let r = app.get("/v1/models/nir/posterior").await;
        (r.status() == StatusCode::OK).then_some(r.json().await.ok()?)
    })
    .await
    .expect("posterior");
    let output = &posterior["outputs"][0];
    assert_eq!(output["trained"], true);
    assert_eq!(output["prior"], "smooth", "{}", output["prior"]);
    assert!(output["length_scale_nm"].as_f64().unwrap() > 0.0);
    assert_eq!(
        output["prior_variance"][700],
        Value::Null,
        "the intercept is flat"
    );
    let predicted: Value = app
        .post(
            "/v1/models/nir/predict",
            &json!({"spectra": {"start_nm": 1100, "interval_nm": 2, "values": [rows[0].0]}}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(predicted.get("warnings").is_none(), "{predicted}");
    let mean = predicted["predictions"][0]["mean"][0].as_f64().unwrap();
    assert!((mean - rows[0].1).abs() < 0.1, "{mean} for {}", rows[0].1);
}

/// A wide model's single-row predictions sent at once (answered together by the service) are
/// each the answer the same request gets alone, to the last digit of the JSON.
#[tokio::test]
async fn concurrent_predictions_of_a_wide_model_are_each_the_answer_alone() {
    let app = spawn_app().await;
    let grid = json!({"start_nm": 1100, "interval_nm": 2});
    let nir = json!({"start_nm": 1100, "interval_nm": 2, "count": 400, "scale": "absorbance"});
    app.create_model(&json!({
        "name": "nir4", "spectrum": nir, "outputs": ["oil", "water", "protein", "fat"],
        "prior": "smooth",
    }))
    .await;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(301);
    let spectrum = |rng: &mut rand_chacha::ChaCha8Rng| -> (Vec<f64>, [f64; 2]) {
        let (a, b) = (rng.random_range(0.0..1.0), rng.random_range(0.0..1.0));
        let values = (0..400)
            .map(|i| {
                let t = i as f64 / 400.0;
                2.3 + a * (-(t - 0.3).powi(2) / 0.01).exp()
                    + b * (-(t - 0.7).powi(2) / 0.02).exp()
                    + 0.001 * rng.random_range(-1.0..1.0)
            })
            .collect();
        (values, [a, b])
    };
    let rows: Vec<(Vec<f64>, [f64; 2])> = (0..40).map(|_| spectrum(&mut rng)).collect();
    let y: Vec<Vec<f64>> = rows
        .iter()
        .map(|(_, [a, b])| vec![3.0 + 0.5 * a, 60.0 - b, 12.0 + a - b, 5.0 + 2.0 * b])
        .collect();
    let response = app
        .post_batch(
            "nir4",
            &json!({
                "batch_id": "calibration",
                "spectra": dict_with(&grid, rows.iter().map(|r| r.0.clone()).collect()),
                "y": y,
            }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(app.wait_for_batch("nir4", "calibration").await["status"], "folded");
    let probes: Vec<Value> = (0..24)
        .map(|_| json!({"spectra": dict_with(&grid, vec![spectrum(&mut rng).0])}))
        .collect();
    let url = app.url("/v1/models/nir4/predict");
    // Every model version is answered from the cache once trained: wait for it.
    wait_until(std::time::Duration::from_secs(30), || async {
        let r = app.client.post(&url).json(&probes[0]).send().await.ok()?;
        (r.status() == StatusCode::OK).then_some(())
    })
    .await
    .expect("the model answers");
    let tasks: Vec<_> = probes
        .iter()
        .map(|probe| {
            let (client, url, probe) = (app.client.clone(), url.clone(), probe.clone());
            tokio::spawn(async move {
                let r = client.post(&url).json(&probe).send().await.expect("predict");
                assert_eq!(r.status(), StatusCode::OK);
                r.json::<Value>().await.expect("JSON")
            })
        })
        .collect();
    let mut together = Vec::new();
    for task in tasks {
        together.push(task.await.expect("task"));
    }
    for (probe, concurrent) in probes.iter().zip(&together) {
        let alone: Value = app
            .client
            .post(&url)
            .json(probe)
            .send()
            .await
            .expect("predict")
            .json()
            .await
            .expect("JSON");
        assert_eq!(concurrent["predictions"], alone["predictions"]);
        assert_eq!(concurrent["version"], alone["version"]);
        let variance = alone["predictions"][0]["variance"].as_array().unwrap();
        assert_eq!(variance.len(), 4);
        assert!(variance.iter().all(|v| v.as_f64().unwrap() > 0.0), "{alone}");
    }
    // Every one of those requests (and the first probes) went through the coalescer, and
    // `/metrics` counts them: at least 48 requests, in no more computations than requests.
    let text = app.get("/metrics").await.text().await.expect("metrics");
    let counter = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in /metrics"))
    };
    let requests = counter("mordant_predict_coalesced_requests_total");
    let computations = counter("mordant_predict_coalesced_computations_total");
    assert!(requests >= 48.0, "{requests} requests counted");
    assert!(
        (1.0..=requests).contains(&computations),
        "{computations} computations for {requests} requests"
    );
}

/// `grid` (start and interval) with `values`.
fn dict_with(grid: &Value, values: Vec<Vec<f64>>) -> Value {
    let mut spectra = grid.clone();
    spectra["values"] = json!(values);
    spectra
}

/// The posterior says on how many rows each output's hyperparameters were fitted; one-step
/// folds keep them until the rows have grown by a quarter, then fit them again.
#[tokio::test]
async fn one_step_folds_refit_hyperparameters_once_the_rows_have_grown_by_a_quarter() {
    let app = spawn_app().await;
    app.create_model(&json!({
        "name": "grows", "features": ["a", "b"], "outputs": ["y"], "first_fit_rows": 10,
    }))
    .await;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut fitted = Vec::new();
    for (b, rows) in [10, 2, 1].into_iter().enumerate() {
        let x: Vec<[f64; 2]> = (0..rows)
            .map(|_| [rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)])
            .collect();
        let y: Vec<[f64; 1]> = x
            .iter()
            .map(|r| [2.0 + r[0] - r[1] + 0.05 * rng.random_range(-1.0..1.0)])
            .collect();
        let id = format!("b{b}");
        let response = app
            .post_batch("grows", &json!({"batch_id": id, "x": x, "y": y}))
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let batch = app.wait_for_batch("grows", &id).await;
        assert_eq!(batch["status"], "folded", "{batch}");
        let version = batch["version"].as_i64().expect("folded into a version");
        let posterior: Value = wait_until(std::time::Duration::from_secs(30), || async {
            let r = app.get("/v1/models/grows/posterior").await;
            let v: Value = r.json().await.ok()?;
            (v["version"].as_i64() >= Some(version)).then_some(v)
        })
        .await
        .expect("posterior");
        fitted.push(
            posterior["outputs"][0]["fitted_rows"]
                .as_f64()
                .expect("fitted_rows"),
        );
    }
    // 12 rows on 10 take a step; 13 (a quarter and more) refit, where a rule of 1.5 would not.
    assert_eq!(fitted, [10.0, 10.0, 13.0]);
}

/// A batch that cannot be folded yet says what it waits for; a smaller `first_fit_rows` lets
/// the rows queued be fitted at once (the folder polls once an hour here: the change wakes it),
/// and a trained model's cannot change.
#[tokio::test]
async fn a_batch_waiting_for_the_first_fit_says_so() {
    let app = spawn_configured(|settings| settings.folder.poll_interval_ms = 3_600_000).await;
    app.create_model(&json!({
        "name": "waits", "features": ["a", "b"], "outputs": ["y"], "first_fit_rows": 5,
    }))
    .await;
    let response = app
        .post_batch(
            "waits",
            &json!({"batch_id": "first", "x": [[1, 2], [2, 1], [3, 5]], "y": [[1], [2], [3]]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let status: Value = app
        .get("/v1/models/waits/batches/first")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["status"], "queued");
    let waiting = status["waiting_for"].as_str().expect("waiting_for");
    assert!(
        waiting.contains("5 rows")
            && waiting.contains("(3 are)")
            && waiting.contains("PATCH /v1/models/waits"),
        "{waiting}"
    );
    // The list of batches says it too, for every batch that waits.
    let listed: Value = app
        .get("/v1/models/waits/batches")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["batches"][0]["waiting_for"], waiting, "{listed}");
    let model: Value = app.get("/v1/models/waits").await.json().await.unwrap();
    assert_eq!(model["pending_rows"], 3);

    let lowered = app
        .patch("/v1/models/waits", &json!({"first_fit_rows": 3}))
        .await;
    assert_eq!(lowered.status(), StatusCode::OK);
    let lowered: Value = lowered.json().await.unwrap();
    assert_eq!(lowered["first_fit_rows"], 3, "{lowered}");
    let folded = app.wait_for_batch("waits", "first").await;
    assert_eq!(folded["status"], "folded", "{folded}");
    assert_eq!(folded["version"], 1, "{folded}");

    let trained = app
        .patch("/v1/models/waits", &json!({"first_fit_rows": 2}))
        .await;
    assert_eq!(trained.status(), StatusCode::CONFLICT);
    let trained: Value = trained.json().await.unwrap();
    let message = trained["error"]["message"].as_str().unwrap();
    assert!(message.contains("is trained"), "{message}");
    // Its own value again (a retry) changes nothing.
    let again = app
        .patch("/v1/models/waits", &json!({"first_fit_rows": 3}))
        .await;
    assert_eq!(again.status(), StatusCode::OK);
    let model: Value = app.get("/v1/models/waits").await.json().await.unwrap();
    assert_eq!((&model["first_fit_rows"], &model["version"]), (&json!(3), &json!(1)));
}
