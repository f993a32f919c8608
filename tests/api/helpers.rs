//! Starting the real application on a random port against a fresh database of the test
//! binary's backend ([`crate::BACKEND`]): a PostgreSQL database of its own, or an embedded
//! SQLite file in a directory of its own.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mordant::config::{Environment, Settings};
use mordant::startup::Application;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use crate::test_database::{TestDatabase, fresh_postgres_database, fresh_sqlite_database};

/// The store a test binary runs the application on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// Creates an empty database on the test binary's backend.
pub async fn fresh_database() -> TestDatabase {
    match crate::BACKEND {
        Backend::Postgres => fresh_postgres_database().await,
        Backend::Sqlite => fresh_sqlite_database(),
    }
}

pub fn test_settings(database_url: &str) -> Settings {
    let mut settings = Settings::load_from(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("config"),
        Environment::Development,
    )
    .expect("test settings");
    settings.server.addr = "127.0.0.1:0".into();
    settings.database.url = database_url.to_owned();
    settings.database.max_connections = 8;
    settings.database.acquire_timeout_secs = 2;
    settings.folder.poll_interval_ms = 200;
    settings.folder.max_backoff_secs = 1;
    settings.cache.poll_interval_ms = 200;
    settings.log.filter = "warn".into();
    settings
}

pub struct TestApp {
    pub address: String,
    /// `http://host:port` of the `/metrics` listener, when it has its own.
    pub metrics_address: Option<String>,
    /// The database `spawn_app` made for this application (dropped after it stops).
    database: Option<TestDatabase>,
    pub client: reqwest::Client,
    shutdown: CancellationToken,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

/// The application on a fresh database.
pub async fn spawn_app() -> TestApp {
    spawn_configured(|_| {}).await
}

/// The application on a fresh database, with settings changed by `configure`.
pub async fn spawn_configured(configure: impl FnOnce(&mut Settings)) -> TestApp {
    let database = fresh_database().await;
    let mut settings = test_settings(&database.url);
    configure(&mut settings);
    let mut app = spawn_with(settings).await;
    app.database = Some(database);
    app
}

pub async fn spawn_with(settings: Settings) -> TestApp {
    mordant::telemetry::init(&settings.log);
    let app = Application::build(settings)
        .await
        .expect("build application");
    serve(app)
}

/// [`spawn_with`] for a start in the process whose previous service abandoned a fold: on the
/// embedded store the abandoned fold's computation, which a shutdown cannot stop, holds the
/// database file until it ends (a new process would not share it), so the start is retried
/// while the file is this process's, for up to three minutes.
pub async fn spawn_after_abandoned_fold(settings: Settings) -> TestApp {
    mordant::telemetry::init(&settings.log);
    let started = Instant::now();
    loop {
        match Application::build(settings.clone()).await {
            Ok(app) => return serve(app),
            Err(e)
                if format!("{e:#}").contains("already open in this process")
                    && started.elapsed() < Duration::from_secs(180) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("build application: {e:#}"),
        }
    }
}

fn serve(app: Application) -> TestApp {
    let address = format!("http://{}", app.local_addr());
    let metrics_address = app.metrics_addr().map(|a| format!("http://{a}"));
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    TestApp {
        address,
        metrics_address,
        database: None,
        client: reqwest::Client::new(),
        shutdown,
        handle: Some(handle),
    }
}

impl TestApp {
    /// The database `spawn_app` created.
    pub fn database(&self) -> &TestDatabase {
        self.database.as_ref().expect("spawn_app's database")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    pub async fn get(&self, path: &str) -> Response {
        self.client.get(self.url(path)).send().await.expect("GET")
    }

    pub async fn post(&self, path: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("POST")
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Response {
        self.client
            .patch(self.url(path))
            .json(body)
            .send()
            .await
            .expect("PATCH")
    }

    /// POST with a raw body and content type.
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Response {
        self.client
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("POST")
    }

    /// POSTs a CSV batch to `model`, under an idempotency key where one is given.
    pub async fn post_csv(
        &self,
        model: &str,
        key: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> Response {
        let mut request = self
            .client
            .post(self.url(&format!("/v1/models/{model}/batches")))
            .header("content-type", "text/csv; charset=utf-8")
            .body(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.expect("POST")
    }

    pub async fn create_model(&self, spec: &Value) -> Value {
        let response = self.post("/v1/models", spec).await;
        assert_eq!(response.status(), StatusCode::CREATED, "create model");
        response.json().await.expect("model JSON")
    }

    pub async fn post_batch(&self, model: &str, batch: &Value) -> Response {
        self.post(&format!("/v1/models/{model}/batches"), batch)
            .await
    }

    /// Waits until the batch has left the queue; returns its status document.
    pub async fn wait_for_batch(&self, model: &str, batch_id: &str) -> Value {
        self.wait_for_batch_within(model, batch_id, Duration::from_secs(30))
            .await
    }

    /// [`TestApp::wait_for_batch`] for up to `timeout`.
    pub async fn wait_for_batch_within(
        &self,
        model: &str,
        batch_id: &str,
        timeout: Duration,
    ) -> Value {
        wait_until(timeout, || async {
            let b: Value = self
                .get(&format!("/v1/models/{model}/batches/{batch_id}"))
                .await
                .json()
                .await
                .ok()?;
            (b["status"] != "queued").then_some(b)
        })
        .await
        .unwrap_or_else(|| panic!("batch {batch_id} was not folded in time"))
    }

    /// Predicts once this replica's cache serves at least `version`.
    pub async fn predict_at(&self, model: &str, x: &Value, version: i64) -> Value {
        wait_until(Duration::from_secs(30), || async {
            let r = self
                .post(&format!("/v1/models/{model}/predict"), &json!({ "x": x }))
                .await;
            let body: Value = r.json().await.ok()?;
            (body["version"].as_i64()? >= version).then_some(body)
        })
        .await
        .unwrap_or_else(|| panic!("predict never reached version {version}"))
    }

    /// Restores version `source` of `model` as a new version (201) and returns its answer.
    pub async fn restore(&self, model: &str, source: usize) -> Value {
        let response = self
            .post(
                &format!("/v1/models/{model}/versions/{source}/restore"),
                &json!({}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED, "restore {source}");
        response.json().await.unwrap()
    }

    /// Graceful stop, as on SIGTERM.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(handle) = self.handle.take() {
            handle.await.expect("join").expect("clean shutdown");
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Polls `check` every 50 ms until it gives a value or `timeout` passes.
pub async fn wait_until<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A TCP proxy in front of PostgreSQL that can be cut, to play a database outage or restart
/// without touching the shared server.
pub struct DbProxy {
    pub url: String,
    up: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// Connections accepted while stalled: held open, never answered.
    held: Arc<Mutex<Option<Vec<TcpStream>>>>,
}

impl DbProxy {
    pub async fn start(database_url: &str) -> Self {
        let upstream = upstream_addr(database_url);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy addr").port();
        let url = database_url.replacen(&upstream, &format!("127.0.0.1:{port}"), 1);
        let up = Arc::new(AtomicBool::new(true));
        let refused = Arc::new(AtomicUsize::new(0));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let held: Arc<Mutex<Option<Vec<TcpStream>>>> = Arc::default();
        let (up2, conns2, refused2) = (up.clone(), connections.clone(), refused.clone());
        let held2 = held.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let mut client = match held2.lock().expect("lock").as_mut() {
                    Some(held) => {
                        held.push(client);
                        continue;
                    }
                    None => client,
                };
                if !up2.load(Ordering::SeqCst) {
                    refused2.fetch_add(1, Ordering::SeqCst);
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                conns2.lock().expect("lock").push(task);
            }
        });
        Self {
            url,
            up,
            refused,
            connections,
            held,
        }
    }

    /// Drops every connection, and holds new ones open without answering them: a database
    /// that hangs (a network that drops packets) rather than refuses.
    pub fn stall(&self) {
        *self.held.lock().expect("lock") = Some(Vec::new());
        for task in self.connections.lock().expect("lock").drain(..) {
            task.abort();
        }
    }

    /// Connection attempts refused while cut.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for task in self.connections.lock().expect("lock").drain(..) {
            task.abort();
        }
    }

    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
        self.held.lock().expect("lock").take();
    }
}

/// `host:port` of a PostgreSQL URL.
fn upstream_addr(url: &str) -> String {
    let rest = &url[url.find("://").map_or(0, |i| i + 3)..];
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5432")
    }
}

/// Inputs and outputs of a batch, as JSON rows.
pub type RowsXY = (Vec<Vec<f64>>, Vec<Vec<f64>>);

/// A random regression problem: `rows` rows of `d` features and `m` outputs.
pub fn random_rows(seed: u64, rows: usize, d: usize, m: usize) -> RowsXY {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let w: Vec<Vec<f64>> = (0..m)
        .map(|_| (0..d).map(|_| rng.random_range(-2.0..2.0)).collect())
        .collect();
    let x: Vec<Vec<f64>> = (0..rows)
        .map(|_| (0..d).map(|_| rng.random_range(0.0..1.0)).collect())
        .collect();
    let y = x
        .iter()
        .map(|row| {
            w.iter()
                .map(|wk| {
                    let clean: f64 = wk.iter().zip(row).map(|(a, b)| a * b).sum();
                    clean + 0.5 + rng.random_range(-0.05..0.05)
                })
                .collect()
        })
        .collect();
    (x, y)
}

pub fn spec(name: &str, d: usize, m: usize) -> Value {
    json!({
        "name": name,
        "features": (0..d).map(|j| format!("R{}", 400 + 10 * j)).collect::<Vec<_>>(),
        "outputs": (0..m).map(|k| format!("dye_{k}")).collect::<Vec<_>>(),
    })
}

/// Rows as a faer matrix.
pub fn mat(rows: &[Vec<f64>]) -> faer::Mat<f64> {
    let width = rows.first().map_or(0, Vec::len);
    faer::Mat::from_fn(rows.len(), width, |i, j| rows[i][j])
}

/// What the estimator computes directly from `batches` in this order, as the service should:
/// the first fit on the shortest prefix with `first_fit_rows` rows, completed on that prefix's
/// rows (shrinkage, noise shapes, tail), then one update per batch (given every row so far
/// where it may fit the model again).
pub fn direct_state(
    config: &mordant::estimator::ModelConfig,
    batches: &[RowsXY],
    first_fit_rows: usize,
) -> mordant::estimator::ModelState {
    use mordant::estimator::BatchStatistics;
    let stats = |(x, y): &RowsXY| {
        let phi = config.basis.design(mat(x).as_ref()).unwrap();
        BatchStatistics::from_design(phi.as_ref(), mat(y).as_ref()).unwrap()
    };
    let mut totals = BatchStatistics::zeros(config.basis.dim(), config.outputs);
    let mut used = 0;
    for batch in batches {
        totals.add(&stats(batch)).unwrap();
        used += 1;
        if totals.rows() >= first_fit_rows as f64 {
            break;
        }
    }
    let rows = |part: fn(&RowsXY) -> &Vec<Vec<f64>>| {
        mat(&batches[..used].iter().flat_map(|b| part(b).clone()).collect::<Vec<_>>())
    };
    let (x, y) = (rows(|b| &b.0), rows(|b| &b.1));
    let done =
        mordant::estimator::first_fit::on_rows(config, totals, x.as_ref(), y.as_ref()).unwrap();
    assert!(done.skipped.is_empty(), "{:?}", done.skipped);
    let mut state = done.state;
    // A batch that may fit the model again is handed every row behind it, as the folder does.
    for (i, batch) in batches.iter().enumerate().skip(used) {
        let stats = stats(batch);
        let surprise = state.surprise(&stats);
        state = if mordant::folder::may_refit_on_rows(config, &state, stats.rows()) {
            let (x, y) = (
                mat(&batches[..=i].iter().flat_map(|b| b.0.clone()).collect::<Vec<_>>()),
                mat(&batches[..=i].iter().flat_map(|b| b.1.clone()).collect::<Vec<_>>()),
            );
            let rows = Some((x.as_ref(), y.as_ref()));
            mordant::estimator::first_fit::update_on_rows(&state, config, &stats, &surprise, rows)
                .unwrap()
                .state
        } else {
            state.update(config, &stats).unwrap()
        };
    }
    state
}

/// What an explicit refit of [`direct_state`]'s state answers, as the service computes it:
/// Algorithm 2 on the statistics, completed on every row where it reads them back (its
/// shrinkage checked, its noise shapes and tail read).
pub fn direct_refit(
    config: &mordant::estimator::ModelConfig,
    batches: &[RowsXY],
    first_fit_rows: usize,
) -> mordant::estimator::ModelState {
    let state = direct_state(config, batches, first_fit_rows);
    let x = mat(&batches.iter().flat_map(|b| b.0.clone()).collect::<Vec<_>>());
    let y = mat(&batches.iter().flat_map(|b| b.1.clone()).collect::<Vec<_>>());
    let rows = mordant::folder::rows_within_check(config, state.totals().rows())
        .then_some((x.as_ref(), y.as_ref()));
    mordant::estimator::first_fit::refit_on_rows(&state, config, rows)
        .unwrap()
        .state
}

/// Asserts that the API's predictions are exactly the estimator's.
pub fn assert_same_predictions(api: &Value, expected: &mordant::estimator::Predictions) {
    let predictions = api["predictions"].as_array().expect("predictions");
    assert_eq!(predictions.len(), expected.mean.nrows());
    for (r, p) in predictions.iter().enumerate() {
        for k in 0..expected.mean.ncols() {
            assert_eq!(
                p["mean"][k].as_f64().unwrap(),
                expected.mean[(r, k)],
                "mean row {r} output {k}"
            );
            assert_eq!(
                p["variance"][k].as_f64().unwrap(),
                expected.variance[(r, k)],
                "variance row {r} output {k}"
            );
        }
    }
}

/// Whether an external tool a test drives runs here (`command --version` succeeds). When it
/// does not, the test is skipped, unless CI set `require` (e.g. `MORDANT_REQUIRE_SCHEMATHESIS`)
/// to 1: then it fails.
pub fn tool_runs(command: &str, require: &str) -> bool {
    let runs = std::process::Command::new(command)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        let required = std::env::var(require).is_ok_and(|v| v == "1");
        assert!(!required, "{require}=1 but `{command}` does not run");
        eprintln!("`{command}` not found: skipped here; CI runs it");
    }
    runs
}

/// `GET url`, its JSON body.
/// The paths of an error body's `details` (`error` is the body's `"error"` object), in order.
pub fn error_paths(error: &Value) -> Vec<String> {
    error["details"]
        .as_array()
        .expect("details")
        .iter()
        .map(|d| d["path"].as_str().expect("a detail's path").to_owned())
        .collect()
}

/// The illuminants a colour judgement lists (compare's answer, or a matched recipe's
/// `colour`), in order.
pub fn illuminant_names(judged: &Value) -> Vec<&str> {
    judged["illuminants"]
        .as_array()
        .expect("illuminants")
        .iter()
        .map(|d| d["illuminant"].as_str().expect("an illuminant's name"))
        .collect()
}

pub async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    let response = client.get(url).send().await.expect("GET");
    response.json().await.expect("a JSON body")
}

/// A model's fold history from `GET …/versions` at `base`: (version, batch id) in fold order,
/// after checking that the versions run 1, 2, 3, … without a gap.
pub async fn fold_history(client: &reqwest::Client, base: &str, model: &str) -> Vec<(i64, String)> {
    let list = get_json(client, &format!("{base}/v1/models/{model}/versions")).await;
    let mut history = Vec::new();
    for (i, v) in list["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .enumerate()
    {
        let version = i as i64 + 1;
        assert_eq!(v["version"], version, "{model}: versions are consecutive");
        for b in v["batches"].as_array().expect("batches") {
            history.push((version, b.as_str().expect("a batch id").to_owned()));
        }
    }
    history
}

/// Posts one batch of each size to `model` (d = 3, m = 2; rows from `random_rows(seed + i)`),
/// each folded into its own version before the next is sent; what each version predicted at
/// `probe`, every one of them different.
pub async fn fold_one_version_each(
    app: &TestApp,
    model: &str,
    sizes: &[usize],
    seed: u64,
    probe: &[Vec<f64>],
) -> Vec<Value> {
    let mut served: Vec<Value> = Vec::new();
    for (i, rows) in sizes.iter().enumerate() {
        let (x, y) = random_rows(seed + i as u64, *rows, 3, 2);
        let id = format!("b{i}");
        let response = app
            .post_batch(model, &json!({"batch_id": id, "x": x, "y": y}))
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert_eq!(app.wait_for_batch(model, &id).await["version"], i + 1);
        let body = app.predict_at(model, &json!(probe), i as i64 + 1).await;
        let predictions = body["predictions"].clone();
        assert_eq!(
            predictions.as_array().map(Vec::len),
            Some(probe.len()),
            "{body}"
        );
        assert!(
            served.iter().all(|q| *q != predictions),
            "version {} predicts anew",
            i + 1
        );
        served.push(predictions);
    }
    served
}
