//! A real PostgreSQL server stopped (`pg_ctl stop -m fast`: sessions are terminated, the port
//! closes) and started again while the service runs: predict keeps answering from the cache,
//! ingest answers 503 with Retry-After, /readyz says not ready; afterwards everything resumes
//! without a restart and nothing that was queued is lost.
//!
//! The test runs its own throw-away cluster (Debian's PostgreSQL server binaries, as
//! `scripts/with-postgres` uses). CI sets `MORDANT_REQUIRE_PG_SERVER=1`; elsewhere the test is
//! skipped when the binaries are absent.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::free_port;

/// A batch refused while the database is down: `503 database_unavailable` with Retry-After.
async fn assert_database_unavailable(response: reqwest::Response) {
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["code"],
        "database_unavailable"
    );
}

/// A private PostgreSQL cluster in a temporary directory, stopped and removed on drop.
struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl Cluster {
    fn create() -> Option<Self> {
        let required = std::env::var("MORDANT_REQUIRE_PG_SERVER").is_ok_and(|v| v == "1");
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|versions| {
                versions
                    .filter_map(Result::ok)
                    .map(|v| v.path().join("bin"))
                    .filter(|b| b.join("pg_ctl").is_file())
                    .max()
            });
        let Some(bin) = bin else {
            assert!(
                !required,
                "MORDANT_REQUIRE_PG_SERVER=1 but no /usr/lib/postgresql/*/bin"
            );
            eprintln!("PostgreSQL server binaries not found: the outage test is skipped here");
            return None;
        };
        // The system's temporary directory, not the build's: as root the cluster runs as the
        // postgres user, who cannot reach a build directory under a home like /root.
        let dir = std::env::temp_dir()
            .join(format!("mordant-outage-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let cluster = Self {
            bin,
            dir,
            port: free_port(),
        };
        if is_root() {
            // PostgreSQL refuses to run as root: the package's postgres user runs it.
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&cluster.dir)
                .status()
                .unwrap();
            assert!(status.success());
        }
        cluster.run(
            "initdb",
            &["-U", "postgres", "--auth=trust", "-E", "UTF8", "-D"],
        );
        cluster.start();
        Some(cluster)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log");
        let log = log.to_str().unwrap();
        self.run("pg_ctl", &["-w", "-l", log, "-o", &options, "start", "-D"]);
    }

    fn stop(&self) {
        self.run("pg_ctl", &["-w", "-m", "fast", "stop", "-D"]);
    }

    /// Runs `tool args… <data directory>` (as the postgres user when we are root).
    fn run(&self, tool: &str, args: &[&str]) {
        let output = self.command(tool, args).output().unwrap();
        assert!(
            output.status.success(),
            "{tool} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn command(&self, tool: &str, args: &[&str]) -> Command {
        let program = self.bin.join(tool);
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        command
            .args(args)
            .arg(self.dir.join("data"))
            .current_dir(&self.dir);
        command
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl", &["-m", "immediate", "stop", "-D"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[tokio::test]
async fn the_service_rides_out_postgresql_being_stopped_and_started() {
    let Some(cluster) = Cluster::create() else {
        return;
    };
    let app = spawn_with(test_settings(&cluster.url())).await;
    // One model trained, one with a batch queued that waits for more rows.
    app.create_model(&spec("lab", 2, 1)).await;
    let mut waiting = spec("waiting", 2, 1);
    waiting["first_fit_rows"] = json!(20);
    app.create_model(&waiting).await;
    let (x, y) = random_rows(1, 10, 2, 1);
    app.post_batch("lab", &json!({"batch_id": "before", "x": x, "y": y}))
        .await;
    app.wait_for_batch("lab", "before").await;
    let (wx, wy) = random_rows(2, 10, 2, 1);
    let queued = app
        .post_batch("waiting", &json!({"batch_id": "w1", "x": wx, "y": wy}))
        .await;
    assert_eq!(queued.status(), StatusCode::ACCEPTED);
    let probe = json!([[0.2, 0.7]]);
    let before = app.predict_at("lab", &probe, 1).await;

    cluster.stop();
    let response = app
        .post("/v1/models/lab/predict", &json!({"x": probe}))
        .await;
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "predict answers from the cache"
    );
    assert_eq!(response.json::<Value>().await.unwrap(), before);
    let (x2, y2) = random_rows(3, 10, 2, 1);
    let batch = json!({"batch_id": "after", "x": x2, "y": y2});
    let response = app.post_batch("lab", &batch).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let readiness = wait_until(Duration::from_secs(5), || async {
        (app.get("/readyz").await.status() == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;
    assert!(
        readiness.is_some(),
        "/readyz still says ready with the database stopped"
    );
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(2)).await;

    cluster.start();
    let accepted = wait_until(Duration::from_secs(30), || async {
        (app.post_batch("lab", &batch).await.status() == StatusCode::ACCEPTED).then_some(())
    })
    .await;
    assert!(accepted.is_some(), "ingest resumes when PostgreSQL is back");
    assert_eq!(app.wait_for_batch("lab", "after").await["version"], 2);
    let after = app.predict_at("lab", &probe, 2).await;
    assert_ne!(after["predictions"], before["predictions"]);
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);

    // The batch queued before the stop is still there, and is folded with the next one.
    let (wx2, wy2) = random_rows(4, 10, 2, 1);
    let more = app
        .post_batch("waiting", &json!({"batch_id": "w2", "x": wx2, "y": wy2}))
        .await;
    assert_eq!(more.status(), StatusCode::ACCEPTED);
    let first = app.wait_for_batch("waiting", "w1").await;
    let second = app.wait_for_batch("waiting", "w2").await;
    assert_eq!(first["status"], "folded");
    assert_eq!(
        (first["version"].clone(), second["version"].clone()),
        (json!(1), json!(1))
    );
    let model: Value = app.get("/v1/models/waiting").await.json().await.unwrap();
    assert_eq!(model["observations"], 20.0);
    app.stop().await;
}

/// The same through a TCP proxy that drops every connection: a restart as the service sees it.
#[tokio::test]
async fn the_service_rides_out_a_database_restart() {
    let database = fresh_database().await;
    let proxy = DbProxy::start(&database.url).await;
    let app = spawn_with(test_settings(&proxy.url)).await;
    app.create_model(&spec("lab", 2, 1)).await;
    let (x, y) = random_rows(1, 10, 2, 1);
    app.post_batch("lab", &json!({"batch_id": "before", "x": x, "y": y}))
        .await;
    app.wait_for_batch("lab", "before").await;
    let probe = json!([[0.2, 0.7]]);
    let before = app.predict_at("lab", &probe, 1).await;

    proxy.cut();
    // Predict keeps answering from the cache.
    let response = app
        .post("/v1/models/lab/predict", &json!({"x": probe}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.json::<Value>().await.unwrap(), before);
    // Ingest says to come back later; readiness says not ready.
    let (x2, y2) = random_rows(2, 10, 2, 1);
    let batch = json!({"batch_id": "after", "x": x2, "y": y2});
    let response = app.post_batch("lab", &batch).await;
    assert_database_unavailable(response).await;
    assert_eq!(
        app.get("/readyz").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
    let refused_before = proxy.refused();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The folder and the cache follower retry with a doubling pause: a handful of attempts in
    // 3 s, not a spin.
    let attempts = proxy.refused() - refused_before;
    assert!(
        attempts <= 30,
        "{attempts} connection attempts in 3 s while the database was down"
    );

    proxy.restore();
    let accepted = wait_until(Duration::from_secs(30), || async {
        (app.post_batch("lab", &batch).await.status() == StatusCode::ACCEPTED).then_some(())
    })
    .await;
    assert!(
        accepted.is_some(),
        "ingest resumes when the database is back"
    );
    let folded = app.wait_for_batch("lab", "after").await;
    assert_eq!(folded["version"], 2, "the folder reconnected by itself");
    let after = app.predict_at("lab", &probe, 2).await;
    assert_ne!(after["predictions"], before["predictions"]);
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
}

/// While the database hangs (connections accepted, never answered), a request on a model the
/// cache holds untrained is answered from the cache at once (409), not after the pool's
/// acquire timeout; the trained model's predict answers as ever.
#[tokio::test]
async fn a_model_held_untrained_is_answered_at_once_while_the_database_hangs() {
    let database = fresh_database().await;
    let proxy = DbProxy::start(&database.url).await;
    let mut settings = test_settings(&proxy.url);
    settings.database.acquire_timeout_secs = 20;
    let app = spawn_with(settings).await;
    app.create_model(&spec("lab", 2, 1)).await;
    app.create_model(&spec("untrained", 2, 1)).await;
    let (x, y) = random_rows(1, 10, 2, 1);
    app.post_batch("lab", &json!({"batch_id": "b", "x": x, "y": y}))
        .await;
    app.wait_for_batch("lab", "b").await;
    let probe = json!({"x": [[0.2, 0.7]]});
    assert_eq!(
        app.post("/v1/models/untrained/predict", &probe)
            .await
            .status(),
        StatusCode::CONFLICT
    );

    proxy.stall();
    for (model, status) in [("untrained", StatusCode::CONFLICT), ("lab", StatusCode::OK)] {
        let asked = std::time::Instant::now();
        let response = app
            .post(&format!("/v1/models/{model}/predict"), &probe)
            .await;
        assert_eq!(response.status(), status, "{model}");
        // The acquire timeout is 20 s: an answer within a quarter of it did not wait for it.
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{model} answered after {:?}",
            asked.elapsed()
        );
    }
    proxy.restore();
    app.stop().await;
}

/// A database that refuses new sessions (`ALLOW_CONNECTIONS false`, as an operator closes one
/// for maintenance; PostgreSQL answers SQLSTATE 55000) is a database that is down: ingest
/// answers 503 `database_unavailable` with Retry-After, not a 500, and takes the batch once
/// the database admits sessions again.
#[tokio::test]
async fn a_database_that_refuses_sessions_is_unavailable_not_an_error() {
    use sqlx::Connection;
    let app = spawn_app().await;
    app.create_model(&json!({"name": "lab", "features": ["a", "b"], "outputs": ["y"]}))
        .await;
    let name = app.database().name.clone();
    let admin = || async {
        sqlx::PgConnection::connect(&crate::test_database::server_url())
            .await
            .expect("the server's own database")
    };
    let mut conn = admin().await;
    for sql in [
        format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"),
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"),
    ] {
        sqlx::query(&sql).execute(&mut conn).await.expect(&sql);
    }
    let (x, y) = random_rows(1, 10, 2, 1);
    let batch = json!({"batch_id": "closed", "x": x, "y": y});
    let response = app.post_batch("lab", &batch).await;
    assert_database_unavailable(response).await;
    let sql = format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true");
    sqlx::query(&sql).execute(&mut conn).await.expect(&sql);
    let accepted = wait_until(Duration::from_secs(30), || async {
        let response = app.post_batch("lab", &batch).await;
        (response.status() == StatusCode::ACCEPTED).then_some(())
    })
    .await;
    assert!(accepted.is_some(), "the batch was not taken once sessions were admitted");
    let folded = app.wait_for_batch("lab", "closed").await;
    assert_eq!(folded["status"], "folded", "{folded}");
}
