//! `POST /v1/colour/compare`: a lab dip judged against its standard under daylight, tungsten
//! and shop light, over HTTP.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{error_paths, illuminant_names, spawn_app};

/// A red standard's reflectance (percent): low in the blue and green, high in the red.
fn standard(nm: f64) -> f64 {
    8.0 + 62.0 / (1.0 + (-(nm - 600.0) / 15.0).exp())
}

/// A smooth bump around `centre` nm.
fn bump(centre: f64, nm: f64) -> f64 {
    (-((nm - centre) / 25.0).powi(2)).exp()
}

fn spectrum(start: f64, interval: f64, count: usize, r: impl Fn(f64) -> f64) -> Value {
    let values: Vec<f64> = (0..count)
        .map(|i| r(start + i as f64 * interval))
        .collect();
    json!({"start_nm": start, "interval_nm": interval, "values": values})
}

async fn compare(app: &crate::helpers::TestApp, body: &Value) -> Value {
    let response = app.post("/v1/colour/compare", body).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

#[tokio::test]
async fn the_same_colour_on_two_instruments_passes_under_every_light() {
    let app = spawn_app().await;
    let found = compare(
        &app,
        &json!({
            "reference": spectrum(400.0, 10.0, 31, standard),
            "sample": spectrum(360.0, 5.0, 85, standard),
            "scale": "percent",
        }),
    )
    .await;
    assert_eq!(found["verdict"], "pass", "{found}");
    assert_eq!(
        found["tolerance"],
        json!({"metric": "de00", "limit": 1.0, "illuminant": "D65"})
    );
    assert_eq!(found["cmc"], json!({"l": 2.0, "c": 1.0}));
    assert_eq!(illuminant_names(&found), ["D65", "A", "F11"]);
    for d in found["illuminants"].as_array().unwrap() {
        assert!(d["de00"].as_f64().unwrap() < 0.1, "{d}");
        // A red: a* > 0, and warmer (more a*) under tungsten than under daylight.
        assert!(d["reference"]["a"].as_f64().unwrap() > 20.0, "{d}");
    }
    let a_star = |i: usize| found["illuminants"][i]["reference"]["a"].as_f64().unwrap();
    assert!(a_star(1) > a_star(0), "{found}");
    assert!(found.get("warnings").is_none());
}

/// A sample made metameric to the standard: its difference, built from four bumps so that it
/// changes the D65 colour by nothing to first order, is invisible in daylight and not under
/// tungsten light. The verdict (D65) passes; the A figures show the metamerism.
#[tokio::test]
async fn a_metameric_match_passes_in_daylight_and_shows_under_tungsten() {
    let app = spawn_app().await;
    let centres = [430.0, 500.0, 560.0, 640.0];
    let d65 = |r: &dyn Fn(f64) -> f64| -> [f64; 3] {
        let lab =
            mordant_colour::lab(|nm| r(nm) / 100.0, mordant_colour::Illuminant::D65).unwrap();
        lab.to_array()
    };
    // The D65 Lab change of a small step along each bump (3 × 4), and a vector of its null
    // space by the signed 3 × 3 minors.
    let base = d65(&standard);
    let step = 0.01;
    let jacobian: Vec<[f64; 3]> = centres
        .iter()
        .map(|&c| {
            let moved = d65(&|nm| standard(nm) + step * bump(c, nm));
            [0, 1, 2].map(|i| (moved[i] - base[i]) / step)
        })
        .collect();
    let minor = |skip: usize| {
        let cols: Vec<&[f64; 3]> = (0..4).filter(|&k| k != skip).map(|k| &jacobian[k]).collect();
        let (a, b, c) = (cols[0], cols[1], cols[2]);
        a[0] * (b[1] * c[2] - b[2] * c[1]) - b[0] * (a[1] * c[2] - a[2] * c[1])
            + c[0] * (a[1] * b[2] - a[2] * b[1])
    };
    let null: Vec<f64> = (0..4)
        .map(|k| if k % 2 == 0 { minor(k) } else { -minor(k) })
        .collect();
    let norm = null.iter().map(|v| v * v).sum::<f64>().sqrt();
    let weights: Vec<f64> = null.iter().map(|v| 4.0 * v / norm).collect();
    let sample = |nm: f64| {
        standard(nm)
            + centres
                .iter()
                .zip(&weights)
                .map(|(&c, w)| w * bump(c, nm))
                .sum::<f64>()
    };
    let found = compare(
        &app,
        &json!({
            "reference": spectrum(400.0, 10.0, 31, standard),
            "sample": spectrum(400.0, 10.0, 31, sample),
            "scale": "percent",
        }),
    )
    .await;
    let de = |i: usize| found["illuminants"][i]["de00"].as_f64().unwrap();
    assert_eq!(found["verdict"], "pass", "{found}");
    assert!(de(0) < 0.05, "{found}");
    assert!(de(1) > 0.5 && de(2) > 0.5, "{found}");
}

#[tokio::test]
async fn a_tolerance_in_cmc_judges_by_cmc_and_bad_input_is_named() {
    let app = spawn_app().await;
    let paler = |nm: f64| 1.08 * standard(nm);
    let body = json!({
        "reference": spectrum(400.0, 10.0, 31, standard),
        "sample": spectrum(400.0, 10.0, 31, paler),
        "scale": "percent",
        "tolerance": {"cmc": 0.5},
        "cmc": {"l": 2, "c": 1},
    });
    let found = compare(&app, &body).await;
    let d65 = &found["illuminants"][0];
    assert_eq!(found["verdict"], "fail", "{found}");
    assert!(d65["cmc"].as_f64().unwrap() > 0.5, "{d65}");
    assert!(d65["dl"].as_f64().unwrap() > 0.0, "paler is lighter: {d65}");
    let mut lenient = body.clone();
    lenient["tolerance"] = json!({"cmc": d65["cmc"].as_f64().unwrap() + 0.01});
    assert_eq!(compare(&app, &lenient).await["verdict"], "pass");

    let mut short = body.clone();
    short["sample"] = spectrum(420.0, 10.0, 29, standard);
    short["scale"] = json!("absorbance");
    let response = app.post("/v1/colour/compare", &short).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let error: Value = response.json().await.unwrap();
    let mut paths = error_paths(&error["error"]);
    paths.sort();
    assert_eq!(paths, ["/sample", "/scale"], "{error}");
    let response = app
        .post_raw("/v1/colour/compare", "text/csv", "400nm\n1\n")
        .await;
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

/// CMC weights far outside any in use make the CMC difference overflow: refused at `/cmc`, as
/// match refuses them, never a `200` whose differences are `null` (JSON has no infinity).
#[tokio::test]
async fn cmc_weights_whose_difference_overflows_are_refused_at_cmc() {
    let app = spawn_app().await;
    let darker = |nm: f64| 0.9 * standard(nm);
    for tolerance in [json!({"cmc": 1.0}), json!({"de00": 1.0})] {
        let body = json!({
            "reference": spectrum(400.0, 10.0, 31, standard),
            "sample": spectrum(400.0, 10.0, 31, darker),
            "scale": "percent",
            "tolerance": tolerance,
            "cmc": {"l": 1e-200, "c": 1},
        });
        let response = app.post("/v1/colour/compare", &body).await;
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{tolerance}"
        );
        let error: Value = response.json().await.unwrap();
        assert_eq!(error_paths(&error["error"]), ["/cmc"], "{error}");
        // Weights in use answer with finite differences.
        let mut usual = body.clone();
        usual["cmc"] = json!({"l": 2, "c": 1});
        let found = compare(&app, &usual).await;
        assert!(found["illuminants"][0]["cmc"].as_f64().unwrap() > 0.0, "{found}");
    }
}
