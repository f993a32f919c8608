//! The README's `curl` walkthrough works, in its order, against a freshly started service.

use std::time::Duration;

use crate::helpers::spawn_app;
use crate::readme_walkthrough::{CARGO_RUN, run_curl, section, walkthrough};

const SECTION: &str = "## The service, step by step";
const COLOUR_EXAMPLE: &str = "### A worked example: a colour-matching front end";
const SWAP_EXAMPLE: &str = "### A worked example: an instrument swap";

#[tokio::test]
async fn readme_walkthrough_works_against_a_fresh_service() {
    let commands = walkthrough(SECTION);
    assert!(commands.len() >= 16, "{commands:#?}");
    let app = spawn_app().await;
    let host = app.address.trim_start_matches("http://").to_owned();

    let mut outputs = Vec::new();
    for command in &commands {
        let output = run_curl(command, &host, "").await;
        outputs.push((command.as_str(), output));
    }

    // The answers are the ones the README describes.
    let answer = |fragment: &str| -> &str {
        outputs
            .iter()
            .find(|(command, _)| command.contains(fragment))
            .map(|(_, output)| output.as_str())
            .unwrap_or_else(|| panic!("no command with {fragment}"))
    };
    let json = |text: &str| -> serde_json::Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let batch = json(answer("/batches/lot-0042"));
    assert_eq!(batch["status"], "folded");
    assert_eq!(batch["version"], 1);
    let prediction = json(answer("/predict"));
    let predictions = prediction["predictions"].as_array().unwrap();
    assert_eq!(predictions.len(), 1);
    for (mean, variance) in predictions[0]["mean"]
        .as_array()
        .unwrap()
        .iter()
        .zip(predictions[0]["variance"].as_array().unwrap())
    {
        assert!(mean.as_f64().unwrap().is_finite());
        assert!(variance.as_f64().unwrap() > 0.0);
    }
    let csv = json(answer("text/csv"));
    assert_eq!(csv["batch_id"], "lot-0043");
    assert_eq!(csv["rows"], 1);
    let restored = json(answer("/versions/1/restore"));
    assert_eq!(restored["restored_from"], 1);
    let settings = json(answer("-X PATCH"));
    assert_eq!(settings["drift_threshold"], 40.0);
    assert!(answer("/metrics").contains("mordant_build_info"));
    assert!(answer("/openapi.json").contains("\"openapi\""));
    // After the final delete, the model is gone.
    let gone = app.get("/v1/models/cotton-reactive").await;
    assert_eq!(gone.status(), 404);
}

/// Runs `command` as the README gives it, against the service at `host`, in `dir`: `curl` fails
/// on an HTTP error status, `cargo run` is the binary under test.
async fn run(command: &str, host: &str, dir: &std::path::Path) -> String {
    let runnable = command
        .replacen("curl ", "curl --fail-with-body --max-time 30 ", 1)
        .replacen(CARGO_RUN, &format!("{} ", env!("CARGO_BIN_EXE_mordant")), 1)
        .replace("localhost:8080", host);
    let output = tokio::process::Command::new("bash")
        .args(["-c", &runnable])
        .current_dir(dir)
        .output()
        .await
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "README command failed:\n{command}\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test]
async fn readme_colour_matching_example_works_against_a_fresh_service() {
    let commands = walkthrough(COLOUR_EXAMPLE);
    assert!(commands.len() >= 4, "{commands:#?}");
    let app = spawn_app().await;
    let host = app.address.trim_start_matches("http://").to_owned();
    let dir = std::env::temp_dir().join(format!("mordant-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut outputs = Vec::new();
    for command in &commands {
        if command.contains("/match") {
            // The simulated dips are folded in the background: wait for every one of them.
            crate::helpers::wait_until(Duration::from_secs(60), || async {
                let model: serde_json::Value =
                    app.get("/v1/models/cotton-dips").await.json().await.ok()?;
                (model["pending_batches"] == 0 && model["version"].as_i64()? > 0).then_some(())
            })
            .await
            .expect("the simulated dips are folded");
        }
        outputs.push((command.clone(), run(command, &host, &dir).await));
    }
    let answer = |path: &str| -> serde_json::Value {
        outputs
            .iter()
            .find(|(c, _)| c.contains(path))
            .map(|(_, out)| serde_json::from_str(out).expect("the service answers JSON"))
            .unwrap_or_else(|| panic!("the example calls {path}"))
    };
    let prediction = answer("/predict");
    let p = &prediction["predictions"][0];
    assert_eq!(p["mean"].as_array().unwrap().len(), 10, "{prediction}");
    assert!(
        p["variance"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v.as_f64().unwrap() > 0.0)
    );
    let matched = answer("/match");
    let recipe = &matched["recipes"][0];
    let concentration: Vec<f64> = recipe["concentration"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(concentration.len(), 10, "{matched}");
    // The recipe of the target dip is in the CSV the example wrote: the match finds its main
    // dyes within their uncertainty (or 15 %), and no dye far from what the target was dyed with.
    let csv =
        std::fs::read_to_string(dir.join("target.csv")).expect("the example writes target.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<f64> = lines
        .next()
        .unwrap()
        .split(',')
        .map(|c| c.parse().unwrap())
        .collect();
    let dyes: Vec<&str> = header.iter().rev().take(10).rev().copied().collect();
    let truth = &row[row.len() - 10..];
    for (k, dye) in dyes.iter().enumerate() {
        let (c, t) = (concentration[k], truth[k]);
        let sd = recipe["variance"][k].as_f64().unwrap_or(0.0).sqrt();
        assert!(c >= 0.0, "{dye}: {c}");
        let tolerance = if t > 0.1 {
            (0.15 * t).max(4.0 * sd)
        } else {
            0.1
        };
        assert!(
            (c - t).abs() < tolerance,
            "{dye}: matched {c} ± {sd}, used {t}: {matched}"
        );
    }
    assert!(
        recipe["reflectance_rms"].as_f64().unwrap() < 0.01,
        "{matched}"
    );
    // The five best candidates of up to three dyes, priced; the recipe is the first.
    let candidates = recipe["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 5, "{matched}");
    assert_eq!(candidates[0]["concentration"], recipe["concentration"]);
    for c in candidates {
        assert!(c["dyes"].as_array().unwrap().len() <= 3, "{c}");
        assert!(c["cost"].as_f64().unwrap() > 0.0, "{c}");
    }
    // The figures the prose quotes of the candidates are the answer's, to the digits quoted
    // (the forward map is the statistics', whichever batches a fold took together).
    let prose = section_prose(COLOUR_EXAMPLE);
    let (best, next) = (&candidates[0], &candidates[1]);
    let de00 = |c: &serde_json::Value, light: usize| {
        c["colour"]["illuminants"][light]["de00"].as_f64().unwrap()
    };
    for quoted in [
        format!("ΔE00 {:.2} from the target under D65", de00(best, 0)),
        format!("({:.2} under A, {:.2} under F11", de00(best, 1), de00(best, 2)),
        format!("`reflectance_rms` {:.4}", best["reflectance_rms"].as_f64().unwrap()),
        format!("a cost of {:.2}", best["cost"].as_f64().unwrap()),
        format!("(ΔE00 {:.2}, {:.2})", de00(next, 0), next["cost"].as_f64().unwrap()),
    ] {
        assert!(prose.contains(&quoted), "the README does not say {quoted:?}");
    }
    // The recipe the example dyes is the best candidate, to the four decimals it quotes, and
    // the correction starts from that recipe.
    let dyed = commands.iter().find(|c| c.contains("--dye")).unwrap();
    let correct = commands.iter().find(|c| c.contains("/correct")).unwrap();
    let mut dyed_red = 0.0;
    for (k, dye) in dyes.iter().enumerate() {
        if concentration[k] > 0.0 {
            let quoted = format!("{dye}={:.4}", concentration[k]);
            assert!(dyed.contains(&quoted), "{quoted} is not what the README dyes: {dyed}");
            let sent = format!("\"{dye}\": {:.4}", concentration[k]);
            assert!(correct.contains(&sent), "{sent} is not what the README corrects");
            if *dye == "red_1" {
                dyed_red = (concentration[k] * 1e4).round() / 1e4;
            }
        }
    }
    // The dip the example dyed is the one its correction quotes, spectrum for spectrum.
    let dip = std::fs::read_to_string(dir.join("dip.csv")).expect("the example writes dip.csv");
    let dip: Vec<&str> = dip.lines().nth(1).unwrap().split(',').skip(2).take(43).collect();
    let quoted = &correct[correct.find("\"measured\"").unwrap()..];
    for value in &dip {
        assert!(quoted.contains(value), "{value} of dip.csv is not in the README's /correct");
    }
    // The stronger red lot made the dip miss; the correction takes red down, keeps the dyes,
    // predicts a pass, and the dip is learnt.
    let corrected = answer("/correct");
    assert_eq!(corrected["dip"]["verdict"], "fail", "{corrected}");
    let recipe = &corrected["recipe"];
    assert_eq!(recipe["dyes"], serde_json::json!(["yellow_1", "red_1", "navy_1"]));
    let red = recipe["concentration"][3].as_f64().unwrap();
    assert!(
        red < 0.9 * dyed_red && red > 0.8 * dyed_red,
        "{red} against {dyed_red}: {corrected}"
    );
    assert_eq!(recipe["colour"]["verdict"], "pass", "{corrected}");
    assert_eq!(corrected["learnt"]["rows"], 1, "{corrected}");
    // The example's target is within the dyes' reach; a near-black one is not, and its
    // nearest recipe, holding dyes at the most a match uses, says so.
    assert!(matched.get("warnings").is_none(), "{matched}");
    let black = serde_json::json!({
        "spectra": {"start_nm": 360, "interval_nm": 10, "values": [vec![0.5; 43]]},
        "x": [[1, 0]],
    });
    let deep: serde_json::Value = app
        .post("/v1/models/cotton-dips/match", &black)
        .await
        .json()
        .await
        .unwrap();
    let warnings = deep["warnings"].as_array().unwrap_or_else(|| panic!("{deep}"));
    assert_eq!(warnings.len(), 1, "{deep}");
    assert_eq!(warnings[0]["path"], "/spectra/values/0", "{deep}");
    assert!(
        deep["recipes"][0]["concentration"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_f64() == Some(100.0)),
        "{deep}"
    );
    assert_eq!(deep["recipes"][0]["colour"]["verdict"], "fail", "{deep}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The text of the README's section under `heading`, its line breaks read as spaces.
fn section_prose(heading: &str) -> String {
    section(heading)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn readme_instrument_swap_example_works_against_a_fresh_service() {
    let commands = walkthrough(SWAP_EXAMPLE);
    assert_eq!(commands.len(), 7, "{commands:#?}");
    let app = spawn_app().await;
    let host = app.address.trim_start_matches("http://").to_owned();
    let mut outputs = Vec::new();
    for command in &commands {
        // Batches fold in the background: each step after a batch waits for it, as a person
        // reading the model's view would.
        crate::helpers::wait_until(Duration::from_secs(30), || async {
            let model: serde_json::Value =
                app.get("/v1/models/swap-demo").await.json().await.ok()?;
            (model.is_null() || model["pending_batches"] == 0 || model["error"].is_object())
                .then_some(())
        })
        .await
        .expect("the example's batches are folded");
        outputs.push((command.clone(), run_curl(command, &host, "").await));
    }
    let answer = |fragment: &str| -> serde_json::Value {
        outputs
            .iter()
            .rev()
            .find(|(c, _)| c.contains(fragment))
            .map(|(_, out)| serde_json::from_str(out).expect("the service answers JSON"))
            .unwrap_or_else(|| panic!("the example calls {fragment}"))
    };
    let declared = answer("/successor");
    assert_eq!(declared["version"], 2, "{declared}");
    // The dip of step 4 was dyed with 0.62 % red and 0.35 % blue; the README gives the
    // answer as 0.621 ± 0.001 and 0.349 ± 0.002.
    let prediction = answer("\"instrument\": \"successor\"");
    let p = &prediction["predictions"][0];
    for (k, (said, sd)) in [(0.621, 0.001), (0.349, 0.002)].into_iter().enumerate() {
        let (mean, variance) = (p["mean"][k].as_f64().unwrap(), p["variance"][k].as_f64().unwrap());
        assert!((mean - said).abs() < 5e-4, "{prediction}");
        assert!((variance.sqrt() - sd).abs() < 5e-4, "{prediction}");
    }
    let view: serde_json::Value =
        serde_json::from_str(&outputs.last().expect("the example ends with the view").1)
            .expect("the service answers JSON");
    let status = &view["successor"];
    assert_eq!(status["pairs"], 6.0, "{status}");
    assert_eq!(status["own_rows"], 10.0, "{status}");
    assert_eq!(status["answered_by"], serde_json::json!(["map", "own"]));
    assert_eq!(status["retired"], false);
    let weight = status["own_weight"].as_f64().unwrap();
    assert!(weight > 0.0 && weight < 1e-9, "{status}");
    assert!((status["scored_rows"].as_f64().unwrap() - 3.98).abs() < 0.005, "{status}");
    for (path, said) in [("map", 10.4), ("own", 4.7)] {
        let score = status[format!("mean_log_score_{path}")].as_f64().unwrap();
        assert!((score - said).abs() < 0.05, "{status}");
    }
}
