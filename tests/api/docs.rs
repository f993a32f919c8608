//! The reference page at `/docs/` is served entirely by mordant and renders in a real browser
//! with no network beyond the service itself.
//!
//! The browser part runs Debian's headless Chromium. CI installs it and sets
//! `MORDANT_REQUIRE_CHROMIUM=1`; elsewhere it runs when `chromium` is on the PATH. The screenshot
//! is left at `target/tmp/docs-page/docs.png` for a person to look at.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::helpers::spawn_app;

#[tokio::test]
async fn reference_page_is_self_contained_and_renders_in_chromium() {
    let app = spawn_app().await;

    // `/docs` sends the browser to `/docs/`, relative to where it is mounted.
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = no_redirects.get(app.url("/docs")).send().await.unwrap();
    assert_eq!(response.status(), 308);
    assert_eq!(response.headers()["location"], "docs/");

    let response = app.get("/docs/").await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let policy = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.starts_with("default-src 'self'"), "{policy}");
    let html = response.text().await.unwrap();

    // Every file the page names is relative, served by us, and of the right type.
    let referenced = referenced_files(&html);
    assert!(referenced.len() >= 3, "{referenced:?}");
    for file in &referenced {
        assert!(file.starts_with("./"), "{file} is not one of ours");
        let response = app.get(&format!("/docs/{}", &file[2..])).await;
        assert_eq!(response.status(), 200, "{file}");
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        let expected = match file.rsplit('.').next() {
            Some("js") => "text/javascript",
            Some("css") => "text/css",
            Some("png") => "image/png",
            other => panic!("unexpected file type {other:?}"),
        };
        assert!(kind.starts_with(expected), "{file}: {kind}");
        assert!(
            !response.bytes().await.unwrap().is_empty(),
            "{file} is empty"
        );
    }
    let missing = app.get("/docs/no-such-file.js").await;
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().await.unwrap()["error"]["code"],
        "not_found"
    );

    let Some(chromium) = crate::browser::required_program("chromium") else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("docs-page");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let page = app.url("/docs");

    // 1. The rendered DOM, with every host but the service's made unresolvable and the
    //    browser's network activity logged.
    let net_log = dir.join("net-log.json");
    let dom = run_chromium(
        &chromium,
        &dir.join("profile-dom"),
        &[
            format!("--log-net-log={}", net_log.display()),
            "--dump-dom".to_owned(),
            page.clone(),
        ],
    )
    .await;
    let doc: Value = app.get("/openapi.json").await.json().await.unwrap();
    let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
    assert!(paths.len() >= 15, "{paths:?}");
    for path in paths {
        assert!(
            dom.contains(&format!("data-path=\"{path}\"")),
            "the rendered page does not show {path}"
        );
    }
    assert!(dom.contains("Predict concentrations and their variances."));

    // Every request the page made went to the service (the browser's own background traffic,
    // which belongs to no page, is not the page's doing).
    let origin = app.address.clone();
    let requests = page_requests(&net_log);
    assert!(
        requests
            .iter()
            .any(|u| u.ends_with("/docs/swagger-ui-bundle.js"))
            && requests.iter().any(|u| u.ends_with("/openapi.json")),
        "{requests:?}"
    );
    for url in &requests {
        assert!(url.starts_with(&origin), "the page loaded {url}");
    }

    // 2. A screenshot to look at.
    let screenshot = dir.join("docs.png");
    run_chromium(
        &chromium,
        &dir.join("profile-shot"),
        &[
            "--window-size=1280,1600".to_owned(),
            format!("--screenshot={}", screenshot.display()),
            page,
        ],
    )
    .await;
    let png = std::fs::read(&screenshot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    // A blank 1280×1600 page compresses to a few kilobytes; the rendered reference is far more.
    assert!(png.len() > 50_000, "screenshot of {} bytes", png.len());
    eprintln!("screenshot of /docs: {}", screenshot.display());
}

/// The `src` and `href` values of an HTML page.
fn referenced_files(html: &str) -> Vec<String> {
    let mut files = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        for (start, _) in html.match_indices(attribute) {
            let rest = &html[start + attribute.len()..];
            if let Some(end) = rest.find('"') {
                files.push(rest[..end].to_owned());
            }
        }
    }
    files
}

/// Runs headless Chromium on the page with no name resolution but 127.0.0.1; returns stdout.
async fn run_chromium(chromium: &Path, profile: &Path, args: &[String]) -> String {
    let mut command = tokio::process::Command::new(chromium);
    command
        .arg("--headless")
        .args(crate::browser::QUIET_LOOPBACK)
        // Time runs fast-forwarded until the page has been idle this long (virtual ms).
        .arg("--virtual-time-budget=10000")
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("chromium finished within 120 s")
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The URLs of the requests a page made, from a Chromium net log: the jobs whose network
/// isolation key names a site (the browser's own requests carry `null` or their own site).
fn page_requests(net_log: &Path) -> Vec<String> {
    let log: Value = serde_json::from_slice(&std::fs::read(net_log).unwrap()).unwrap();
    let start_job = &log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"];
    assert!(
        start_job.is_number(),
        "net log without URL_REQUEST_START_JOB"
    );
    log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| &event["type"] == start_job)
        .filter(|event| {
            event["params"]["network_isolation_key"]
                .as_str()
                .is_some_and(|key| key.starts_with("http://127.0.0.1"))
        })
        .filter_map(|event| event["params"]["url"].as_str().map(str::to_owned))
        .collect()
}
