//! `mordant copy`: a lab's embedded store, filled through the API (trained models with thin
//! versions, a held batch, keys), copied into PostgreSQL with the real binary; the service on
//! PostgreSQL then answers as the embedded one did. A copy into a store that holds something
//! is refused, and a copy killed midway leaves the target empty or complete.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::helpers::*;

const ADMIN: &str = "copy-test-admin-key-0123456789abcdef0123";

async fn spawn_keyed(url: &str) -> TestApp {
    let mut settings = test_settings(url);
    settings.auth.admin_key = ADMIN.to_owned();
    settings.database.full_state_every = 3;
    let mut app = spawn_with(settings).await;
    let mut headers = HeaderMap::new();
    let bearer = HeaderValue::from_str(&format!("Bearer {ADMIN}")).expect("header");
    headers.insert(AUTHORIZATION, bearer);
    app.client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client");
    app
}

/// A new API key (the answer to `POST /v1/keys`, with the key itself).
async fn create_key(app: &TestApp, name: &str, scopes: &[&str]) -> Value {
    let response = app
        .client
        .post(app.url("/v1/keys"))
        .json(&json!({"name": name, "scopes": scopes}))
        .send()
        .await
        .expect("POST /v1/keys");
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.expect("key JSON")
}

fn copy_command(from: &str, to: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"));
    command
        .args(["copy", "--from", from, "--to", to])
        .env_remove("DATABASE_URL")
        .kill_on_drop(true);
    command
}

/// Runs a copy that must succeed; what it said on standard output.
async fn copied(from: &str, to: &str) -> String {
    let output = copy_command(from, to).output().await.expect("run copy");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    stdout
}

/// Runs a copy that must fail; what it said on standard error.
async fn refused(from: &str, to: &str) -> String {
    let output = copy_command(from, to).output().await.expect("run copy");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "copied: {stderr}");
    stderr
}

/// Timestamps to the microsecond (PostgreSQL's precision); everything else as it is.
fn to_micros(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match v.as_str().map(chrono::DateTime::parse_from_rfc3339) {
                        Some(Ok(t)) if k.ends_with("_at") => json!(t.timestamp_micros()),
                        _ => to_micros(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(to_micros).collect()),
        other => other.clone(),
    }
}

/// What the copy must carry over, read through the API.
async fn observe(app: &TestApp, probe: &Value) -> Vec<Value> {
    let mut seen = Vec::new();
    for path in [
        "/v1/models/lab",
        "/v1/models/lab/versions",
        "/v1/models/lab/batches?limit=1000",
        "/v1/models/watch/batches",
        "/v1/models/lab/posterior",
        "/v1/keys",
    ] {
        seen.push(to_micros(&get_json(&app.client, &app.url(path)).await));
    }
    let predicted = app
        .post("/v1/models/lab/predict", &json!({ "x": probe }))
        .await;
    seen.push(predicted.json().await.expect("predict JSON"));
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_store_answers_as_the_original_did() {
    let embedded = fresh_sqlite_database();
    let app = spawn_keyed(&embedded.url).await;
    app.create_model(&spec("lab", 3, 2)).await;
    let sizes = [8usize, 1, 8, 2, 8, 8];
    let mut sent = Vec::new();
    for (i, rows) in sizes.iter().enumerate() {
        let (x, y) = random_rows(60 + i as u64, *rows, 3, 2);
        let body = json!({"batch_id": format!("b{i}"), "x": x, "y": y});
        assert_eq!(
            app.post_batch("lab", &body).await.status(),
            StatusCode::ACCEPTED
        );
        app.wait_for_batch("lab", &format!("b{i}")).await;
        sent.push(body);
    }
    let mut watched = spec("watch", 3, 2);
    watched["drift_threshold"] = json!(20.0);
    app.create_model(&watched).await;
    let (x, y) = random_rows(1, 20, 3, 2);
    let shifted: Vec<Vec<f64>> = y
        .iter()
        .map(|r| r.iter().map(|v| v + 50.0).collect())
        .collect();
    for (id, y) in [("base", &y), ("shifted", &shifted)] {
        let body = json!({"batch_id": id, "x": x, "y": y});
        assert_eq!(
            app.post_batch("watch", &body).await.status(),
            StatusCode::ACCEPTED
        );
    }
    assert_eq!(
        app.wait_for_batch("watch", "shifted").await["status"],
        "held"
    );
    let ingest = create_key(&app, "mes-line-3", &["ingest"]).await;
    let revoked = create_key(&app, "old", &["predict"]).await;
    let revoke = app
        .client
        .delete(app.url(&format!("/v1/keys/{}", revoked["id"])))
        .send()
        .await
        .expect("revoke");
    assert!(revoke.status().is_success());
    let (probe, _) = random_rows(7, 4, 3, 2);
    let probe = json!(probe);
    let version3 = app.predict_at("lab", &probe, 6).await;
    // Version 4 is thin on the embedded store; its restore there is the reference.
    let restored = app
        .post("/v1/models/lab/versions/4/restore", &json!({}))
        .await;
    assert_eq!(restored.status(), StatusCode::CREATED);
    let at4 = app.predict_at("lab", &probe, 7).await;
    assert!(at4["predictions"].is_array());
    assert_ne!(at4["predictions"], version3["predictions"]);
    let before_after_restore = observe(&app, &probe).await;
    app.stop().await;

    let postgres = fresh_postgres_database().await;
    let stdout = copied(&embedded.url, &postgres.url).await;
    assert!(
        stdout.contains("copied 2 models, 8 versions, 8 batches and 2 API keys"),
        "{stdout}"
    );

    // A source that does not exist is refused, not created and copied as nothing.
    let missing = std::env::temp_dir().join(format!("mordant-missing-{}.db", uuid::Uuid::new_v4()));
    let typo = refused(&format!("sqlite://{}", missing.display()), &postgres.url).await;
    assert!(typo.contains("does not exist"), "{typo}");
    assert!(!missing.exists());

    // Into a store that holds something: refused, and nothing changes.
    let again = refused(&embedded.url, &postgres.url).await;
    assert!(again.contains("not empty"), "{again}");

    let app = spawn_keyed(&postgres.url).await;
    assert_eq!(observe(&app, &probe).await, before_after_restore);
    // The same replays and conflicts.
    let replay = app.post_batch("lab", &sent[2]).await;
    assert_eq!(replay.status(), StatusCode::ACCEPTED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let mut changed = sent[2].clone();
    changed["y"][0][0] = json!(1234.5);
    assert_eq!(
        app.post_batch("lab", &changed).await.status(),
        StatusCode::CONFLICT
    );
    // Restoring a thin version replays from the copied statistics and rows, to the same bits.
    let restored = app
        .post("/v1/models/lab/versions/4/restore", &json!({}))
        .await;
    assert_eq!(restored.status(), StatusCode::CREATED);
    let now = app.predict_at("lab", &probe, 8).await;
    assert_eq!(now["predictions"], at4["predictions"]);
    // Keys: the copied ingest key works, the revoked one does not, new ids follow the old.
    let with = |key: &str| {
        reqwest::Client::new()
            .get(app.url("/v1/models/lab"))
            .bearer_auth(key.to_owned())
            .send()
    };
    assert_eq!(
        with(ingest["key"].as_str().unwrap())
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        with(revoked["key"].as_str().unwrap())
            .await
            .unwrap()
            .status(),
        StatusCode::UNAUTHORIZED
    );
    let newer = create_key(&app, "new", &["predict"]).await;
    assert!(newer["id"].as_i64() > revoked["id"].as_i64(), "{newer}");
    // The held batch is still held, and an admin can release it.
    let release = app
        .post("/v1/models/watch/batches/shifted/release", &json!({}))
        .await;
    assert_eq!(release.status(), StatusCode::OK);
    app.wait_for_batch("watch", "shifted").await;
    let on_postgres = observe(&app, &probe).await;
    app.stop().await;

    // And back: PostgreSQL into a new embedded store answers as PostgreSQL did.
    let back = fresh_sqlite_database();
    copied(&postgres.url, &back.url).await;
    let app = spawn_keyed(&back.url).await;
    assert_eq!(observe(&app, &probe).await, on_postgres);
    let newest = create_key(&app, "newest", &["predict"]).await;
    assert!(newest["id"].as_i64() > newer["id"].as_i64(), "{newest}");
    app.stop().await;

    // A copy killed at any moment leaves the target empty or complete.
    for delay in [5u64, 20, 60] {
        let target = fresh_postgres_database().await;
        // Migrated first, so that the kill falls in the copy itself.
        let migrated = tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
            .arg("migrate")
            .env("DATABASE_URL", &target.url)
            .env("MORDANT__LOG__FILTER", "error")
            .status()
            .await
            .expect("migrate");
        assert!(migrated.success());
        let mut child = copy_command(&embedded.url, &target.url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run copy");
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let _ = child.start_kill();
        let _ = child.wait().await;
        let counts = target
            .strings(
                "SELECT concat((SELECT count(*) FROM models), ' ', \
                 (SELECT count(*) FROM batches), ' ', (SELECT count(*) FROM versions), ' ', \
                 (SELECT count(*) FROM api_keys))",
            )
            .await;
        assert!(
            counts == ["0 0 0 0"] || counts == ["2 8 8 2"],
            "after {delay} ms: {counts:?}"
        );
    }
}

/// A source a newer release migrated holds what this release does not know (tables, columns,
/// a migration's data): the copy is refused and says why, where it copied what it knew and
/// dropped the rest with exit 0. The target is not touched, not even created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_a_newer_release_migrated_is_refused() {
    for source in [fresh_sqlite_database(), fresh_postgres_database().await] {
        let app = spawn_keyed(&source.url).await;
        app.create_model(&spec("lab", 3, 2)).await;
        app.stop().await;
        source.mark_migrated_by_a_later_release().await;
        let target = fresh_sqlite_database();
        let stderr = refused(&source.url, &target.url).await;
        assert!(
            stderr.contains("newer release") && stderr.contains("99991231000000"),
            "{stderr}"
        );
        let file = target.url.trim_start_matches("sqlite://");
        assert!(!std::path::Path::new(file).exists(), "{file} was created");

        // A migration of this release's whose text differs is refused too.
        source
            .execute(
                "DELETE FROM _sqlx_migrations WHERE version = 99991231000000",
                "DELETE FROM _sqlx_migrations WHERE version = 99991231000000",
            )
            .await;
        let altered = "UPDATE _sqlx_migrations SET checksum = X'00' \
                       WHERE version = (SELECT max(version) FROM _sqlx_migrations)";
        source
            .execute(&altered.replace("X'00'", "'\\x00'::bytea"), altered)
            .await;
        let stderr = refused(&source.url, &target.url).await;
        assert!(stderr.contains("differs from this release's"), "{stderr}");
        assert!(!std::path::Path::new(file).exists(), "{file} was created");
    }
    // A file no release migrated is not a store.
    let blank = fresh_sqlite_database();
    let path = blank.url.trim_start_matches("sqlite://");
    std::fs::File::create(path).expect("an empty file");
    let target = fresh_sqlite_database();
    let stderr = refused(&blank.url, &target.url).await;
    assert!(
        stderr.contains("the database holds no mordant store"),
        "{stderr}"
    );
}

/// `copy --to` a PostgreSQL database the server does not have creates it, as it creates the
/// embedded store's file (`copy --help` says so). A server that does not answer is said at once
/// and each cause once, where the pool waited 30 s and said "pool timed out" twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_database_the_server_lacks_is_created() {
    let embedded = fresh_sqlite_database();
    let app = spawn_keyed(&embedded.url).await;
    app.create_model(&spec("lab", 3, 2)).await;
    app.stop().await;
    let target = crate::test_database::unmade_postgres_database();
    let stdout = copied(&embedded.url, &target.url).await;
    assert!(stdout.contains("created the target database"), "{stdout}");
    assert!(stdout.contains("copied 1 models"), "{stdout}");
    assert_eq!(target.strings("SELECT name FROM models").await, ["lab"]);

    // Nothing listens on port 9 (discard) here.
    let down = "postgres://postgres@127.0.0.1:9/mordant";
    for (from, to, which) in [
        (embedded.url.as_str(), down, "target"),
        (down, embedded.url.as_str(), "source"),
    ] {
        let stderr = refused(from, to).await;
        assert!(
            stderr.contains(&format!("cannot open the {which} store")),
            "{stderr}"
        );
        let causes: Vec<&str> = stderr.trim().split(": ").collect();
        for (i, cause) in causes.iter().enumerate() {
            assert!(!causes[i + 1..].contains(cause), "{cause:?} twice: {stderr}");
        }
    }
    // A server that takes the connection and never answers is given up on, not waited on for
    // ever.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_url = format!(
        "postgres://postgres@{}/mordant",
        silent.local_addr().expect("address")
    );
    let stderr = tokio::time::timeout(
        Duration::from_secs(120),
        refused(&embedded.url, &silent_url),
    )
    .await
    .expect("copy gave up on a silent server");
    assert!(stderr.contains("did not answer"), "{stderr}");
    drop(silent);
}
