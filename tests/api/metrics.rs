//! `/metrics` after real traffic: the families exist, the values count what happened, and
//! `promtool check metrics` accepts the text.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

/// The value of the sample `name{labels}` (labels as written in the exposition, sorted).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_count_real_traffic() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    for i in 0..2 {
        let (x, y) = random_rows(i, 10, 2, 1);
        let r = app
            .post_batch("lab", &json!({"batch_id": format!("b{i}"), "x": x, "y": y}))
            .await;
        assert_eq!(r.status(), StatusCode::ACCEPTED);
    }
    // A replay is not a new batch.
    let (x, y) = random_rows(0, 10, 2, 1);
    app.post_batch("lab", &json!({"batch_id": "b0", "x": x, "y": y}))
        .await;
    let bad = app
        .post_batch("lab", &json!({"x": [[1.0]], "y": [[1.0]]}))
        .await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    app.wait_for_batch("lab", "b0").await;
    let version = app.wait_for_batch("lab", "b1").await["version"]
        .as_i64()
        .unwrap();
    app.predict_at("lab", &json!([[0.5, 0.5]]), version).await;

    let response = app.get("/metrics").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = response.text().await.unwrap();
    let batches = "/v1/models/{name}/batches";
    assert_eq!(
        sample(
            &text,
            &format!(
                "mordant_http_requests_total{{method=\"POST\",route=\"{batches}\",status=\"202\"}}"
            )
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!(
                "mordant_http_requests_total{{method=\"POST\",route=\"{batches}\",status=\"422\"}}"
            )
        ),
        Some(1.0)
    );
    assert!(
        sample(
            &text,
            &format!(
                "mordant_http_request_duration_seconds_count{{method=\"POST\",route=\"{batches}\"}}"
            )
        ) == Some(4.0)
    );
    assert_eq!(
        sample(&text, "mordant_batches_accepted_total{model=\"lab\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "mordant_batches_folded_total{model=\"lab\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "mordant_rows_folded_total{model=\"lab\"}"),
        Some(20.0)
    );
    assert_eq!(
        sample(&text, "mordant_batches_rejected_total{model=\"lab\"}"),
        Some(0.0)
    );
    assert_eq!(sample(&text, "mordant_fold_lag_seconds_count"), Some(2.0));
    assert!(sample(&text, "mordant_fold_duration_seconds_count").is_some_and(|n| n >= 1.0));
    assert_eq!(
        sample(&text, "mordant_model_version{model=\"lab\"}"),
        Some(version as f64)
    );
    assert_eq!(
        sample(&text, "mordant_model_observations{model=\"lab\"}"),
        Some(20.0)
    );
    assert!(
        sample(
            &text,
            "mordant_model_noise_variance{model=\"lab\",output=\"dye_0\"}"
        )
        .is_some_and(|s| s > 0.0)
    );
    assert_eq!(
        sample(&text, "mordant_queue_batches{model=\"lab\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "mordant_queue_rows{model=\"lab\"}"),
        Some(0.0)
    );
    assert_eq!(sample(&text, "mordant_database_up"), Some(1.0));
    assert_eq!(
        sample(&text, "mordant_build_info{version=\"0.1.0\"}"),
        Some(1.0)
    );
    assert!(
        !text.contains("b0") && !text.contains("b1"),
        "no batch id is a label"
    );

    promtool_accepts(&text).await;
}

/// Runs `promtool check metrics` on the text. CI installs promtool and sets
/// `MORDANT_REQUIRE_PROMTOOL=1`; elsewhere the check runs when promtool is on the PATH.
async fn promtool_accepts(text: &str) {
    use tokio::io::AsyncWriteExt;
    let required = std::env::var("MORDANT_REQUIRE_PROMTOOL").is_ok_and(|v| v == "1");
    let child = tokio::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if !required => {
            eprintln!("promtool not run ({e}); CI runs it");
            return;
        }
        Err(e) => panic!("promtool is required but cannot run: {e}"),
    };
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
