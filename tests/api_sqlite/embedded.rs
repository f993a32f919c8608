//! What only the embedded store promises: it needs no configuration, and one process owns its
//! file (a second one is refused, and the first is untouched).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{ServiceProcess, free_port};

/// `mordant <args>` with `DATABASE_URL` (or none), run to completion within 60 s.
async fn run_mordant(
    args: &[&str],
    database_url: Option<&str>,
    dir: &Path,
) -> std::process::Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"));
    command
        .args(args)
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env("MORDANT_ADDR", format!("127.0.0.1:{}", free_port()))
        .env(
            "MORDANT_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(url) = database_url {
        command.env("DATABASE_URL", url);
    }
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("mordant should exit at once when its database is taken")
        .expect("run mordant")
}

#[tokio::test]
async fn a_second_process_on_the_same_file_is_refused_and_the_first_is_untouched() {
    let database = fresh_database().await;
    let app = spawn_with(test_settings(&database.url)).await;
    app.create_model(&spec("lab", 2, 1)).await;
    let (x, y) = random_rows(1, 6, 2, 1);
    let r = app
        .post_batch("lab", &json!({"batch_id": "b1", "x": x, "y": y}))
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert_eq!(app.wait_for_batch("lab", "b1").await["status"], "folded");

    // `serve` and `migrate` both refuse, naming the file and the process that holds it.
    let here = std::env::temp_dir();
    for command in [&["serve"][..], &["migrate"][..]] {
        let output = run_mordant(command, Some(&database.url), &here).await;
        assert!(
            !output.status.success(),
            "{command:?} started on a taken file"
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("in use by another mordant process")
                && stderr.contains(&format!("process {}", std::process::id()))
                && stderr.contains("mordant.db")
                && stderr.contains("PostgreSQL"),
            "{command:?}: {stderr}"
        );
    }

    // Nor under another name for the same file: a hard link (in another directory, as a
    // container's bind mount of the file would be) has a lock file of its own beside it, but
    // the file itself is locked.
    let file = Path::new(database.url.strip_prefix("sqlite://").unwrap());
    let elsewhere = file.with_file_name("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::hard_link(file, elsewhere.join("linked.db")).unwrap();
    let linked = format!("sqlite://{}", elsewhere.join("linked.db").display());
    let output = run_mordant(&["serve"], Some(&linked), &here).await;
    assert!(
        !output.status.success(),
        "serve started on a hard link to a taken file"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("in use by another mordant process")
            && stderr.contains("under another name")
            && stderr.contains("linked.db"),
        "{stderr}"
    );

    // The first process did not notice: it still learns and answers.
    let (x, y) = random_rows(2, 6, 2, 1);
    let r = app
        .post_batch("lab", &json!({"batch_id": "b2", "x": x, "y": y}))
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert_eq!(app.wait_for_batch("lab", "b2").await["version"], 2);
    let probe = json!([[0.3, 0.6]]);
    let before = app.predict_at("lab", &probe, 2).await;
    app.stop().await;

    // Once it has stopped, the file is free: another process takes it over, with everything.
    let mut next = ServiceProcess::start(&database.url, free_port(), &[]).await;
    let client = reqwest::Client::new();
    let answer: Value = client
        .post(format!("{}/v1/models/lab/predict", next.address))
        .json(&json!({"x": probe}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer, before);
    next.kill().await;
}

#[tokio::test]
async fn serve_without_a_database_url_uses_a_file_under_the_working_directory() {
    let database = fresh_database().await;
    let dir = std::env::temp_dir().join(&database.name);
    let port = free_port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
        .arg("serve")
        .current_dir(&dir)
        .env_remove("DATABASE_URL")
        .env("MORDANT_ADDR", format!("127.0.0.1:{port}"))
        .env(
            "MORDANT_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .env("MORDANT__LOG__FILTER", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start mordant");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let created = wait_until(Duration::from_secs(60), || async {
        let r = client
            .post(format!("{base}/v1/models"))
            .json(&spec("lab", 2, 1))
            .send()
            .await
            .ok()?;
        Some(r.status())
    })
    .await;
    assert_eq!(created, Some(StatusCode::CREATED));
    let ready = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);

    let file = dir.join("data/mordant.db");
    assert!(file.is_file(), "no database at {}", file.display());
    let owner = std::fs::read_to_string(dir.join("data/mordant.db.lock")).unwrap();
    assert_eq!(owner.trim(), child.id().unwrap().to_string());
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}
