//! The plain variables DESIGN.md §5 makes a contract with deployment tools (`DATABASE_URL`,
//! `MORDANT_ADDR`, `MORDANT_ENV`, `MORDANT_ADMIN_KEY`), one test each, on the real binary with
//! nothing else in its environment.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::helpers::{fresh_postgres_database, get_json};
use crate::process::free_port;

const KEY: &str = "plain-admin-k3y-0123456789abcdef0123456789";

/// `mordant serve` with exactly `env` (and the configuration directory).
fn command(env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mordant"));
    command
        .arg("serve")
        .env_clear()
        .env(
            "MORDANT_CONFIG_DIR",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("config"),
        )
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Starts the service and waits until `address` answers `/healthz`.
async fn serve(address: &str, env: &[(&str, &str)]) -> Child {
    let mut child = command(env)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mordant");
    wait_healthy(&mut child, address).await;
    child
}

async fn wait_healthy(child: &mut Child, address: &str) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("status") {
            panic!("mordant exited during start-up: {status}");
        }
        let answered = client
            .get(format!("{address}/healthz"))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if answered {
            return;
        }
        assert!(Instant::now() < deadline, "mordant did not start in 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs the service expecting it to refuse to start: its exit status and standard error.
async fn refused(env: &[(&str, &str)]) -> String {
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        command(env)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output(),
    )
    .await
    .expect("the service should have refused to start")
    .expect("run mordant");
    assert!(!output.status.success(), "{:?}", output.status);
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mordant_env_{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

#[tokio::test]
async fn mordant_addr_is_where_the_service_listens() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("m.db").display());
    // The layered address is held by this test: had server.addr won, the service could not
    // bind and would exit, and no other process can answer there in the meantime.
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    let layered = held.local_addr().expect("local address").port();
    let plain = free_port();
    let mut child = serve(
        &format!("http://{}", addr(plain)),
        &[
            ("DATABASE_URL", &url),
            ("MORDANT_ADDR", &addr(plain)),
            ("MORDANT__SERVER__ADDR", &addr(layered)),
        ],
    )
    .await;
    let health = reqwest::Client::new()
        .get(format!("http://{}/healthz", addr(plain)))
        .send()
        .await
        .expect("healthz on MORDANT_ADDR");
    assert_eq!(health.status(), StatusCode::OK, "MORDANT_ADDR wins over server.addr");
    assert!(
        child.try_wait().expect("status").is_none(),
        "the service runs on MORDANT_ADDR, not on the held server.addr"
    );
    drop(held);
    child.kill().await.expect("kill");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn database_url_chooses_the_database() {
    // PostgreSQL, over a layered URL that points nowhere.
    let db = fresh_postgres_database().await;
    let port = free_port();
    let address = format!("http://{}", addr(port));
    let mut child = serve(
        &address,
        &[
            ("DATABASE_URL", &db.url),
            (
                "MORDANT__DATABASE__URL",
                "postgres://nobody@127.0.0.1:1/none",
            ),
            ("MORDANT_ADDR", &addr(port)),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let ready = client
        .get(format!("{address}/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), StatusCode::OK);
    let created = client
        .post(format!("{address}/v1/models"))
        .json(&json!({"name": "lab", "features": ["a"], "outputs": ["o"]}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(db.strings("SELECT name FROM models").await, ["lab"]);
    child.kill().await.expect("kill");

    // A sqlite: URL, over the embedded store's configured path.
    let dir = temp_dir();
    let file = dir.join("plant.db");
    let port = free_port();
    let mut child = serve(
        &format!("http://{}", addr(port)),
        &[
            ("DATABASE_URL", &format!("sqlite://{}", file.display())),
            (
                "MORDANT__DATABASE__PATH",
                &dir.join("other.db").display().to_string(),
            ),
            ("MORDANT_ADDR", &addr(port)),
        ],
    )
    .await;
    assert!(file.exists(), "the store is the file DATABASE_URL names");
    assert!(!dir.join("other.db").exists());
    child.kill().await.expect("kill");
    let _ = std::fs::remove_dir_all(dir);

    // A URL of no known scheme is refused, naming the variable.
    let stderr = refused(&[("DATABASE_URL", "mysql://db/plant")]).await;
    assert!(stderr.contains("DATABASE_URL"), "{stderr}");
}

#[tokio::test]
async fn mordant_env_production_requires_a_key_and_logs_json() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("m.db").display());
    let stderr = refused(&[("MORDANT_ENV", "production"), ("DATABASE_URL", &url)]).await;
    assert!(stderr.contains("MORDANT_ADMIN_KEY"), "{stderr}");
    let stderr = refused(&[("MORDANT_ENV", "staging"), ("DATABASE_URL", &url)]).await;
    assert!(stderr.contains("MORDANT_ENV"), "{stderr}");

    let port = free_port();
    let address = format!("http://{}", addr(port));
    let mut child = command(&[
        ("MORDANT_ENV", "production"),
        ("MORDANT_ADMIN_KEY", KEY),
        ("DATABASE_URL", &url),
        ("MORDANT_ADDR", &addr(port)),
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start mordant");
    // Logs go to standard error, one JSON object per line.
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    wait_healthy(&mut child, &address).await;
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a log line")
        .expect("read")
        .expect("a line");
    let line: Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert!(line["level"].is_string(), "{line}");
    let status = reqwest::get(format!("{address}/v1/models"))
        .await
        .expect("GET")
        .status();
    assert_eq!(status, StatusCode::UNAUTHORIZED, "production requires keys");
    child.kill().await.expect("kill");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn mordant_admin_key_is_the_bootstrap_key() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("m.db").display());
    let port = free_port();
    let address = format!("http://{}", addr(port));
    let mut child = serve(
        &address,
        &[
            ("MORDANT_ENV", "production"),
            ("MORDANT_ADMIN_KEY", KEY),
            ("DATABASE_URL", &url),
            ("MORDANT_ADDR", &addr(port)),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let keys = |key: Option<&str>| {
        let mut request = client.get(format!("{address}/v1/keys"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    assert_eq!(keys(Some(KEY)).await.expect("GET").status(), StatusCode::OK);
    assert_eq!(
        keys(None).await.expect("GET").status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        keys(Some("plain-admin-k3y-0123456789abcdef012345678X"))
            .await
            .expect("GET")
            .status(),
        StatusCode::UNAUTHORIZED
    );
    let listed = get_json(&client, &format!("{address}/healthz")).await;
    assert_eq!(listed["status"], "ok");
    child.kill().await.expect("kill");

    // The layered name with the same key is fine; with another, start-up refuses and says
    // why, without printing either key.
    let port = free_port();
    let mut child = serve(
        &format!("http://{}", addr(port)),
        &[
            ("MORDANT_ENV", "production"),
            ("MORDANT_ADMIN_KEY", KEY),
            ("MORDANT__AUTH__ADMIN_KEY", KEY),
            ("DATABASE_URL", &url),
            ("MORDANT_ADDR", &addr(port)),
        ],
    )
    .await;
    child.kill().await.expect("kill");
    let other = "layered-admin-k3y-0123456789abcdef01234567";
    let stderr = refused(&[
        ("MORDANT_ENV", "production"),
        ("MORDANT_ADMIN_KEY", KEY),
        ("MORDANT__AUTH__ADMIN_KEY", other),
        ("DATABASE_URL", &url),
    ])
    .await;
    assert!(
        stderr.contains("MORDANT_ADMIN_KEY") && stderr.contains("MORDANT__AUTH__ADMIN_KEY"),
        "{stderr}"
    );
    assert!(!stderr.contains("k3y"), "no key in the message: {stderr}");
    let _ = std::fs::remove_dir_all(dir);
}
