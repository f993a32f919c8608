//! The README's `curl` walkthrough works, in its order, against a freshly started service.

use std::time::{Duration, Instant};

use crate::helpers::spawn_app;

const README: &str = include_str!("../../README.md");
const SECTION: &str = "## The service, step by step";

/// The shell commands of the section's `sh` blocks, one per `curl` (continuation lines and
/// multi-line quoted arguments joined back).
fn walkthrough() -> Vec<String> {
    let start = README
        .find(SECTION)
        .expect("the README has the walkthrough section");
    let section = &README[start + SECTION.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut commands: Vec<String> = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        match line.trim_end() {
            "```sh" => in_block = true,
            "```" => in_block = false,
            line if !in_block || line.is_empty() || line.starts_with('#') => {}
            line if line.starts_with("curl ") => commands.push(line.to_owned()),
            line => {
                let last = commands
                    .last_mut()
                    .expect("a continuation follows a curl line");
                last.push('\n');
                last.push_str(line);
            }
        }
    }
    commands
}

#[tokio::test]
async fn readme_walkthrough_works_against_a_fresh_service() {
    let commands = walkthrough();
    assert!(commands.len() >= 16, "{commands:#?}");
    let app = spawn_app().await;
    let host = app.address.trim_start_matches("http://").to_owned();

    let mut outputs = Vec::new();
    for command in &commands {
        assert!(command.contains("localhost:8080"), "{command}");
        // `--fail-with-body`: an HTTP error status fails the command.
        let runnable = command
            .replacen("curl ", "curl --fail-with-body --max-time 30 ", 1)
            .replace("localhost:8080", &host);
        // A batch folds in the background: "check that it folded" is retried for a while, as
        // a person would; every other command must succeed the first time.
        let waits_for_fold = command.contains("/batches/");
        let deadline = Instant::now() + Duration::from_secs(20);
        let output = loop {
            let output = tokio::process::Command::new("bash")
                .args(["-c", &runnable])
                .output()
                .await
                .expect("bash runs");
            let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            let done = output.status.success()
                && (!waits_for_fold || stdout.contains("\"status\":\"folded\""));
            if done {
                break stdout;
            }
            assert!(
                waits_for_fold && Instant::now() < deadline,
                "README command failed:\n{command}\nstdout: {stdout}\nstderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
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
    assert!(answer("/metrics").contains("mordant_build_info"));
    assert!(answer("/openapi.json").contains("\"openapi\""));
    // After the final delete, the model is gone.
    let gone = app.get("/v1/models/cotton-reactive").await;
    assert_eq!(gone.status(), 404);
}
