//! The lab console at `/console/` in a real browser (headless Chromium over WebDriver), against
//! the real service on the binary's store: it asks for a key, shows a model learning, lets an
//! admin release a held batch, change the drift threshold and refit, matches a target to the
//! numbers the API gives, and shows a key without admin scope no admin action. No page logs an error or asks another host.
//! Screenshots of every page are left in `target/tmp/console-<store>/` for a person to look at.

use std::path::PathBuf;
use std::time::Duration;

use fantoccini::Locator;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::auth::ADMIN_KEY;
use crate::browser::Browser;
use crate::helpers::*;

pub(crate) const DYES: [&str; 10] = [
    "yellow_1",
    "yellow_2",
    "orange_1",
    "red_1",
    "red_2",
    "violet_1",
    "blue_1",
    "turquoise_1",
    "navy_1",
    "black_1",
];
const WAIT: Duration = Duration::from_secs(30);

fn authorised(key: &str) -> reqwest::Client {
    let mut headers = HeaderMap::new();
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// Runs `mordant simulate` with `args` in `dir`; returns what it wrote to standard output.
async fn simulate(dir: &std::path::Path, args: &[&str]) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
        .arg("simulate")
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .expect("mordant simulate runs");
    assert!(
        output.status.success(),
        "simulate {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The lab dips of `csv` with every concentration multiplied by `factor`: a mislabelled lot.
fn scaled_concentrations(csv: &str, factor: f64) -> String {
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    let names: Vec<&str> = header.split(',').collect();
    let mut out = vec![header.to_owned()];
    for line in lines {
        let cells: Vec<String> = line
            .split(',')
            .zip(&names)
            .map(|(cell, name)| {
                if DYES.contains(name) {
                    (cell.parse::<f64>().unwrap() * factor).to_string()
                } else {
                    cell.to_owned()
                }
            })
            .collect();
        out.push(cells.join(","));
    }
    out.join("\n") + "\n"
}

/// The `…nm` columns of a CSV of one simulated dip (header and values) as a spectrum, and its
/// fabric columns.
fn dip_spectrum(csv: &str) -> (Value, [f64; 2]) {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let values: Vec<f64> = lines
        .next()
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    let bands: Vec<(f64, f64)> = header
        .iter()
        .zip(&values)
        .filter_map(|(h, v)| Some((h.strip_suffix("nm")?.parse().ok()?, *v)))
        .collect();
    let fabric = |name: &str| values[header.iter().position(|h| *h == name).unwrap()];
    let spectrum = json!({
        "start_nm": bands[0].0,
        "interval_nm": bands[1].0 - bands[0].0,
        "values": bands.iter().map(|b| b.1).collect::<Vec<_>>(),
    });
    (
        spectrum,
        [fabric("greige_cotton"), fabric("polyester_cotton")],
    )
}

/// The match body the console sends for a target CSV of one simulated dip.
fn match_body(target_csv: &str) -> Value {
    let (spectrum, fabric) = dip_spectrum(target_csv);
    json!({
        "spectra": {
            "start_nm": spectrum["start_nm"],
            "interval_nm": spectrum["interval_nm"],
            "values": [spectrum["values"]],
        },
        "max_dyes": 3,
        "tolerance": {"de00": 1.0},
        "x": [fabric],
    })
}

/// The first row of `table` as the console shows it agrees with `recipe` as the API gives it:
/// the same dyes and ΔE00 under D65 to the digits shown.
async fn shows_recipe(browser: &Browser, table: &str, recipe: &Value) {
    let shown = text_of(browser, &format!("{table} tr.candidate td.dyes")).await;
    let dyes: Vec<&str> = shown
        .split(", ")
        .map(|d| d.split_whitespace().next().unwrap())
        .collect();
    let expected: Vec<&str> = recipe["dyes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(dyes, expected, "{shown} / {recipe}");
    let de00: f64 = text_of(browser, &format!("{table} tr.candidate td.de00"))
        .await
        .parse()
        .unwrap();
    let d65 = &recipe["colour"]["illuminants"][0];
    assert_eq!(d65["illuminant"], "D65");
    let expected = d65["de00"].as_f64().unwrap();
    assert!(
        (de00 - expected).abs() <= 0.006 * expected.max(0.01),
        "{de00} against {expected}"
    );
}

/// The text of the element `css` names, once the page shows it (the page's text if it never
/// does). The console replaces a page's elements when it shows it again (after an action), so
/// an element found just before that is looked for again.
async fn text_of(browser: &Browser, css: &str) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let found = browser
            .client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await;
        let element = match found {
            Ok(element) => element,
            Err(e) => {
                let page = match browser.client.find(Locator::Css("main")).await {
                    Ok(main) => main.text().await.unwrap_or_default(),
                    Err(_) => String::new(),
                };
                panic!("{css} is not on the page ({e}); the page shows:\n{page}")
            }
        };
        match element.text().await {
            Ok(text) => return text,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("{css}: {e}; looking again");
            }
            Err(e) => panic!("{css}: {e}"),
        }
    }
}


/// A number as the console shows it: three significant digits.
fn three_digits(value: f64) -> String {
    let digits = 2 - value.abs().log10().floor() as i32;
    let rounded = format!("{:.*}", digits.max(0) as usize, value);
    // As JavaScript's `Number(…).toString()`: no trailing zeros.
    if rounded.contains('.') {
        rounded
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    } else {
        rounded
    }
}

/// Clicks the element `css` names (found at once: the page already shows it).
async fn click(browser: &Browser, css: &str) {
    browser
        .client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
}

/// The points a chart draws as dots, over its series.
async fn points(browser: &Browser, chart: &str) -> i64 {
    let mut total = 0;
    for dots in browser
        .client
        .find_all(Locator::Css(&format!("{chart} path.dots")))
        .await
        .unwrap()
    {
        total += dots
            .attr("data-points")
            .await
            .unwrap()
            .and_then(|n| n.parse::<i64>().ok())
            .expect("a dot series says how many points it has");
    }
    total
}

async fn count(browser: &Browser, css: &str) -> usize {
    browser
        .client
        .find_all(Locator::Css(css))
        .await
        .unwrap()
        .len()
}

async fn forget_key(browser: &Browser) {
    browser
        .client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#forget-key"))
        .await
        .expect("a key to forget")
        .click()
        .await
        .unwrap();
}

/// Waits until the model's drift threshold, as the API reads it, is `want`.
async fn threshold_becomes(app: &crate::helpers::TestApp, want: Value) {
    crate::helpers::wait_until(WAIT, || async {
        let model: Value = app.get("/v1/models/dips").await.json().await.ok()?;
        (model["drift_threshold"] == want).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the model's drift threshold is not {want}"));
}

/// Waits until the page, shown again after a change, shows the drift threshold `value`.
async fn threshold_shown(browser: &Browser, value: &str) {
    crate::helpers::wait_until(WAIT, || async {
        let input = browser
            .client
            .find(Locator::Css("#threshold-form input[name=threshold]"))
            .await
            .ok()?;
        (input.attr("value").await.ok()?.as_deref() == Some(value)).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the page shows the threshold {value}"));
}

/// Types `value` into the field `css` names once the page shows it (emptied first).
async fn type_into(browser: &Browser, css: &str, value: &str) {
    let input = browser
        .client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("the page shows no {css}: {e}"));
    input.clear().await.unwrap();
    input.send_keys(value).await.unwrap();
}

/// Types `value` into the drift threshold's field and sends the form.
async fn set_threshold(browser: &Browser, value: &str) {
    type_into(browser, "#threshold-form input[name=threshold]", value).await;
    click(browser, "#threshold-form button[type=submit]").await;
}

async fn sign_in(browser: &Browser, key: &str) {
    type_into(browser, "#key-form input[name=key]", key).await;
    click(browser, "#key-form button[type=submit]").await;
    text_of(browser, "#models").await;
}

#[tokio::test]
async fn console_shows_models_reviews_batches_and_matches_in_chromium() {
    let mut app = spawn_configured(|s| s.auth.admin_key = ADMIN_KEY.into()).await;
    app.client = authorised(ADMIN_KEY);

    // The page and its two files are ours, with a same-origin policy, open to anyone.
    let anonymous = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = anonymous.get(app.url("/console")).send().await.unwrap();
    assert_eq!(redirect.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(redirect.headers()["location"], "console/");
    for (file, kind) in [
        ("", "text/html"),
        ("console.js", "text/javascript"),
        ("console.css", "text/css"),
    ] {
        let response = anonymous
            .get(app.url(&format!("/console/{file}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{file}");
        let headers = response.headers();
        assert!(headers["content-type"].to_str().unwrap().starts_with(kind));
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("connect-src 'self'"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
    }
    // Every module the entry point imports, and those they import, is served.
    let mut modules = vec!["console.js".to_owned()];
    let mut seen = 0;
    while seen < modules.len() {
        let source = anonymous
            .get(app.url(&format!("/console/{}", modules[seen])))
            .send()
            .await
            .unwrap();
        assert_eq!(source.status(), StatusCode::OK, "{}", modules[seen]);
        for line in source.text().await.unwrap().lines() {
            if let Some(name) = line
                .strip_prefix("import ")
                .and_then(|l| l.split("from \"./").nth(1))
                .and_then(|l| l.strip_suffix("\";"))
                && !modules.iter().any(|m| m == name)
            {
                modules.push(name.to_owned());
            }
        }
        seen += 1;
    }
    assert!(modules.len() >= 5, "{modules:?}");
    // The page preloads exactly the imported modules, so none waits for the one importing it.
    let html = anonymous
        .get(app.url("/console/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut preloaded: Vec<&str> = html
        .lines()
        .filter_map(|l| l.strip_prefix("<link rel=\"modulepreload\" href=\"./"))
        .filter_map(|l| l.strip_suffix("\">"))
        .collect();
    preloaded.sort_unstable();
    let mut imported: Vec<&str> = modules[1..].iter().map(String::as_str).collect();
    imported.sort_unstable();
    assert_eq!(preloaded, imported);
    assert_eq!(
        anonymous
            .get(app.url("/console/other.js"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    // Who the caller is: nobody without a key, which the console takes as "ask for one".
    let nobody: Value = anonymous
        .get(app.url("/v1/keys/self"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        nobody,
        json!({"name": null, "scopes": [], "enforced": true})
    );

    // A colour model that holds surprising batches, trained on simulated lab dips.
    let dir = std::env::temp_dir().join(format!("mordant-console-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    app.create_model(&json!({
        "name": "dips",
        "spectrum": {"start_nm": 400, "interval_nm": 10, "count": 31, "scale": "percent"},
        "features": ["greige_cotton", "polyester_cotton"],
        "outputs": DYES,
        "transform": "saunderson",
        "drift_threshold": 30.0,
    }))
    .await;
    simulate(
        &dir,
        &[
            "--rows",
            "300",
            "--seed",
            "1",
            "--batch-rows",
            "50",
            "--post",
            &app.address,
            "--model",
            "dips",
            "--key",
            ADMIN_KEY,
        ],
    )
    .await;
    let odd = scaled_concentrations(&simulate(&dir, &["--rows", "20", "--seed", "5"]).await, 4.0);
    let posted = app.post_csv("dips", Some("odd-lot"), odd).await;
    assert_eq!(posted.status(), StatusCode::ACCEPTED);
    assert_eq!(app.wait_for_batch("dips", "odd-lot").await["status"], "held");
    let model: Value = app.get("/v1/models/dips").await.json().await.unwrap();
    assert_eq!(model["held_batches"], 1, "{model}");
    assert_eq!(model["pending_batches"], 0, "{model}");
    let version = model["version"].as_i64().unwrap();

    // A key that may predict and nothing else, and one that may ingest and nothing else.
    let new_key = |name: &'static str, scope: &'static str| {
        let app = &app;
        async move {
            let created: Value = app
                .post("/v1/keys", &json!({"name": name, "scopes": [scope]}))
                .await
                .json()
                .await
                .unwrap();
            created["key"].as_str().unwrap().to_owned()
        }
    };
    let colourist = new_key("bench-colourist", "predict").await;
    let mes = new_key("mes-line-3", "ingest").await;

    let Some(browser) = Browser::start(1280, 1700).await else {
        return;
    };
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("console-{:?}", crate::BACKEND).to_lowercase());
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let console = app.url("/console/");
    let client = &browser.client;

    // 1. The console asks for a key. One that may ingest sees the held batch, without the
    //    admin's release and reject, and no restore or refit.
    client.goto(&console).await.unwrap();
    browser.screenshot(&shots.join("key.png")).await;
    sign_in(&browser, &mes).await;
    click(&browser, "#models tr[data-model=dips] a").await;
    text_of(&browser, "#held tr[data-batch=odd-lot]").await;
    assert_eq!(count(&browser, "button.release, button.reject").await, 0);
    assert_eq!(
        count(&browser, "#refit, button[data-restore], #threshold-form").await,
        0
    );
    browser.screenshot(&shots.join("model-ingest-key.png")).await;
    forget_key(&browser).await;

    // 2. An admin key: the models, each with its drift alarms.
    sign_in(&browser, ADMIN_KEY).await;
    let row = text_of(&browser, "#models tr[data-model=dips]").await;
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..2], ["dips", &version.to_string()], "{row}");
    let held = text_of(&browser, "#models tr[data-model=dips] .alarm").await;
    assert_eq!(held, "1");
    assert!(
        text_of(&browser, "#who")
            .await
            .contains("bootstrap admin key")
    );
    browser.screenshot(&shots.join("models.png")).await;

    // 3. The model: its versions, its batches' surprise, the held batch, its relevance.
    click(&browser, "#models tr[data-model=dips] a").await;
    text_of(&browser, "#held tr[data-batch=odd-lot]").await;
    let versions = count(&browser, "#versions tbody tr").await;
    assert_eq!(versions as i64, version.min(15));
    assert_eq!(points(&browser, "#chart-observations").await, version);
    // Every batch after the first fit has a surprise; the held one is drawn too.
    assert!(points(&browser, "#chart-surprise").await >= 6);
    assert_eq!(count(&browser, "#chart-coefficients path").await, 1);
    browser.screenshot(&shots.join("model.png")).await;

    // 4. An admin releases the held batch: it is queued again and folded.
    click(&browser, "#held tr[data-batch=odd-lot] button.release").await;
    let released = crate::helpers::wait_until(WAIT, || async {
        let batch: Value = app
            .get("/v1/models/dips/batches/odd-lot")
            .await
            .json()
            .await
            .ok()?;
        (batch["status"] == "folded").then_some(batch)
    })
    .await;
    assert!(released.is_some(), "the released batch is folded");
    crate::helpers::wait_until(WAIT, || async {
        (count(&browser, "#batches-section").await == 1 && count(&browser, "#held").await == 0)
            .then_some(())
    })
    .await
    .expect("the page, shown again, holds no batch");

    // 5. The admin changes the drift threshold on the page: a value the service refuses is shown
    //    at its path and changes nothing; a good one is the model's; "turn off" asks first.
    set_threshold(&browser, "-2").await;
    let refused = text_of(&browser, "main .error").await;
    assert!(refused.contains("/drift_threshold"), "{refused}");
    threshold_becomes(&app, json!(30.0)).await;
    set_threshold(&browser, "12.5").await;
    threshold_becomes(&app, json!(12.5)).await;
    threshold_shown(&browser, "12.5").await;
    click(&browser, "#threshold-off").await;
    client.accept_alert().await.expect("a confirmation");
    threshold_becomes(&app, Value::Null).await;
    crate::helpers::wait_until(WAIT, || async {
        (count(&browser, "#threshold-off").await == 0).then_some(())
    })
    .await
    .expect("the page, shown again, has nothing to turn off");
    set_threshold(&browser, "30").await;
    threshold_becomes(&app, json!(30.0)).await;
    threshold_shown(&browser, "30").await;

    // 6. A refit, after the confirmation the console asks for.
    click(&browser, "#refit").await;
    client.accept_alert().await.expect("a confirmation");
    let refit = crate::helpers::wait_until(WAIT, || async {
        let list: Value = app
            .get("/v1/models/dips/versions")
            .await
            .json()
            .await
            .ok()?;
        list["versions"]
            .as_array()?
            .iter()
            .any(|v| v["origin"] == "refit")
            .then_some(())
    })
    .await;
    assert!(refit.is_some(), "the refit made a version");

    // 7. Match: a target dyed on greige cotton, pasted as the instrument's CSV, gives the
    //    candidates the API gives for the same body, with swatches under D65 and A.
    let target = simulate(
        &dir,
        &[
            "--rows",
            "1",
            "--seed",
            "99",
            "--dye",
            "yellow_1=0.12,red_1=1.05,navy_1=0.02",
            "--fabric",
            "greige_cotton",
        ],
    )
    .await;
    let answer: Value = app
        .post("/v1/models/dips/match", &match_body(&target))
        .await
        .json()
        .await
        .unwrap();
    let first = &answer["recipes"][0]["candidates"][0];
    assert!(first["dyes"].is_array(), "{answer}");
    client
        .goto(&format!("{console}#/match/dips"))
        .await
        .unwrap();
    let area = client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#target"))
        .await
        .unwrap();
    area.send_keys(&target).await.unwrap();
    click(&browser, "#match-form button[type=submit]").await;
    shows_recipe(&browser, "#match-result", first).await;
    let candidates = answer["recipes"][0]["candidates"].as_array().unwrap().len();
    assert_eq!(count(&browser, "#match-result tr.candidate").await, candidates);
    // Two swatches for the target and two per candidate, coloured by the page.
    assert_eq!(
        count(&browser, "#match-result .swatch").await,
        2 + 2 * candidates
    );
    let colours = client
        .execute(
            "return [...document.querySelectorAll('#match-result .swatch')]\
             .map((e) => getComputedStyle(e).backgroundColor);",
            vec![],
        )
        .await
        .unwrap();
    let colours: Vec<&str> = colours
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(colours.iter().all(|c| c.starts_with("rgb(")), "{colours:?}");
    assert!(
        colours.iter().any(|c| *c != colours[0]),
        "every swatch the same colour: {colours:?}"
    );
    browser.screenshot(&shots.join("match.png")).await;
    // The same target as a spreadsheet writes it where the comma is the decimal mark (cells
    // separated by semicolons) gives the same candidates.
    let european = target.replace(',', ";").replace('.', ",");
    assert_ne!(european, target);
    client
        .execute(
            "document.getElementById('target').value = arguments[0];",
            vec![json!(european)],
        )
        .await
        .unwrap();
    click(&browser, "#match-form button[type=submit]").await;
    shows_recipe(&browser, "#match-result", first).await;

    // 8. Correct: the first candidate dyed on a production lot comes out off; its dip pasted
    //    beside the recipe gives the correction the API gives for the same body.
    let dyed_it = client
        .find(Locator::Css("#match-result tr.candidate button[data-recipe-text]"))
        .await
        .unwrap();
    let recipe_text = dyed_it.attr("data-recipe-text").await.unwrap().unwrap();
    dyed_it.click().await.unwrap();
    let filled = client
        .find(Locator::Css("#dyed-recipe"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap();
    assert_eq!(filled.as_deref(), Some(recipe_text.as_str()));
    let dip = simulate(
        &dir,
        &[
            "--rows",
            "1",
            "--seed",
            "3",
            "--dye",
            &recipe_text.replace(' ', ""),
            "--fabric",
            "greige_cotton",
            "--lot",
            "1",
            "--scenario",
            "dye_lot",
        ],
    )
    .await;
    let recipe: serde_json::Map<String, Value> = recipe_text
        .split(", ")
        .map(|part| {
            let (dye, amount) = part.split_once('=').unwrap();
            (dye.to_owned(), json!(amount.parse::<f64>().unwrap()))
        })
        .collect();
    let target_body = match_body(&target);
    let correction: Value = app
        .post(
            "/v1/models/dips/correct",
            &json!({
                "spectra": target_body["spectra"],
                "x": target_body["x"],
                "tolerance": {"de00": 1.0},
                "recipe": recipe,
                "measured": dip_spectrum(&dip).0,
            }),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(correction["recipe"]["dyes"].is_array(), "{correction}");
    client
        .find(Locator::Css("#dip"))
        .await
        .unwrap()
        .send_keys(&dip)
        .await
        .unwrap();
    // An admin key may ingest: the dip is also learnt.
    click(&browser, "#learn").await;
    click(&browser, "#correct-form button[type=submit]").await;
    shows_recipe(&browser, "#corrected", &correction["recipe"]).await;
    let dip_de00 = correction["dip"]["illuminants"][0]["de00"].as_f64().unwrap();
    let dip_line = text_of(&browser, "#dip-colour").await;
    assert!(
        dip_line.contains(&format!("ΔE00 {}", three_digits(dip_de00))),
        "{dip_line} / {dip_de00}"
    );
    let learnt = text_of(&browser, "#correct-result .learnt").await;
    let batch_id = learnt
        .strip_prefix("learnt as batch ")
        .unwrap_or_else(|| panic!("{learnt}"));
    let stored = app
        .get(&format!("/v1/models/dips/batches/{batch_id}"))
        .await;
    assert_eq!(stored.status(), StatusCode::OK, "{learnt}");
    browser.screenshot(&shots.join("correct.png")).await;

    // Nothing went to another host, and nothing was logged as an error but the browser's own
    // line for the one refusal asked for (the threshold of -2).
    for url in browser.requests().await {
        assert!(url.starts_with(&app.address), "the console loaded {url}");
    }
    let (refusals, errors): (Vec<_>, Vec<_>) = browser
        .console_log()
        .await
        .into_iter()
        .filter(|(level, _)| level == "SEVERE")
        .partition(|(_, message)| message.contains("/v1/models/dips ") && message.contains("422"));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(refusals.len(), 1, "{refusals:?}");

    // 9. A key that may only predict sees the model but no admin action and no batches.
    client.goto(&console).await.unwrap();
    forget_key(&browser).await;
    sign_in(&browser, &colourist).await;
    assert!(text_of(&browser, "#who").await.contains("bench-colourist"));
    click(&browser, "#models tr[data-model=dips] a").await;
    text_of(&browser, "#versions").await;
    assert_eq!(count(&browser, "button.release, button.reject").await, 0);
    assert_eq!(
        count(&browser, "#refit, button[data-restore], #threshold-form").await,
        0
    );
    assert_eq!(count(&browser, "#batches-section").await, 0);
    browser.screenshot(&shots.join("model-predict-key.png")).await;
    let errors: Vec<_> = browser
        .console_log()
        .await
        .into_iter()
        .filter(|(level, _)| level == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "{errors:?}");

    // The key lived in the tab's session storage only.
    let stored = client
        .execute(
            "return [Object.keys(localStorage).length, document.cookie, \
             sessionStorage.getItem('mordant.console.key')];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(stored, json!([0, "", colourist]));

    // Closing the browser stops Chromium too, not only its driver.
    let group = browser.process_group().expect("the driver runs");
    assert!(crate::browser::alive_in_group(group) > 1, "the driver and Chromium run");
    drop(browser);
    let stopped = crate::helpers::wait_until(Duration::from_secs(10), || async {
        (crate::browser::alive_in_group(group) == 0).then_some(())
    })
    .await;
    assert!(
        stopped.is_some(),
        "{} processes of the browser's group still run",
        crate::browser::alive_in_group(group)
    );

    let _ = std::fs::remove_dir_all(&dir);
}
