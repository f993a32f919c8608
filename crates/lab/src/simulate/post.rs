//! Posting simulated lab dips to a running mordant service: a demo and a load generator.
//!
//! The model is created if it does not exist (`GET /v1/models/{name}` is 404; then `POST
//! /v1/models`, 201, or 409 when another client made it meanwhile), so a key that may ingest
//! but not create models posts to one an admin made. Then the rows go in batches to `POST
//! /v1/models/{name}/batches` (202) with the spectrum on the instrument's grid (the service
//! resamples it to the model's), the fabric code as the one named feature, and the recipe.
//! Every batch has an id fixed by the seed, the scenario and the batch index, so a retry after
//! a dropped connection or a 503 is idempotent.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::generate::{Grid, Simulator, World};
use mordant_estimator::Transform;

/// Where and how to post.
#[derive(Clone, Debug)]
pub struct PostOptions {
    /// Base URL of the service, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer <key>`.
    pub key: Option<String>,
    pub rows: usize,
    pub batch_rows: usize,
    /// The model's spectral grid (used when the model is created).
    pub model_grid: Grid,
    /// Attempts per request on a connection error or a 503, with doubling back-off.
    pub attempts: u32,
}

/// What was posted.
#[derive(Clone, Debug)]
pub struct PostSummary {
    /// Whether this run created the model (false: it existed).
    pub created: bool,
    pub rows: usize,
    pub batches: usize,
    /// Requests sent again after a connection error or a 503.
    pub retries: usize,
    pub elapsed: Duration,
}

/// A JSON number that is an integer when the value is one (400, not 400.0).
fn number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        json!(v as i64)
    } else {
        json!(v)
    }
}

/// The body that creates the model, with the transform of `world`'s readings
/// ([`World::transform`]).
pub fn model_body(name: &str, fabrics: &[&str], grid: &Grid, dyes: &[&str], world: World) -> Value {
    let mut body = json!({
        "name": name,
        "features": fabrics,
        "spectrum": {
            "start_nm": number(grid.start_nm),
            "interval_nm": number(grid.interval_nm),
            "count": grid.count,
            "scale": "percent",
        },
        "outputs": dyes,
        "transform": "kubelka_munk",
    });
    if let Transform::Saunderson(surface) = world.transform() {
        body["transform"] = json!("saunderson");
        body["saunderson"] = json!({"k1": surface.k1, "k2": surface.k2});
    }
    body
}

/// The id of batch `index`: fixed by the simulation's seed, scenario, drift row and batch size.
pub fn batch_id(sim: &Simulator, batch_rows: usize, index: usize) -> String {
    let c = sim.config();
    format!(
        "sim-{}-{}-{}-{}-{:06}",
        c.seed, c.scenario, c.drift_at, batch_rows, index
    )
}

/// The body of the batch of rows `rows`.
pub fn batch_body(sim: &Simulator, id: &str, rows: std::ops::Range<usize>) -> Value {
    let grid = sim.config().grid;
    let dips = sim.lab_dips(rows);
    json!({
        "batch_id": id,
        "spectra": {
            "start_nm": number(grid.start_nm),
            "interval_nm": number(grid.interval_nm),
            "values": dips.iter().map(|d| &d.reflectance).collect::<Vec<_>>(),
        },
        "x": dips
            .iter()
            .map(|d| sim.fabric_indicators(d.sample.substrate))
            .collect::<Vec<_>>(),
        "y": dips.iter().map(|d| &d.sample.recipe).collect::<Vec<_>>(),
    })
}

struct Client {
    http: reqwest::Client,
    key: Option<String>,
    attempts: u32,
    retries: usize,
}

impl Client {
    /// POSTs `body` to `url`, as [`Self::send`] does.
    async fn post(&mut self, url: &str, body: &Value) -> anyhow::Result<(StatusCode, String)> {
        self.send(reqwest::Method::POST, url, Some(body)).await
    }

    /// Sends `method` to `url` (with `body` as JSON when given), retrying connection errors,
    /// timeouts and 503 with back-off 0.25 s, 0.5 s, 1 s, …; answers the final status and body
    /// text.
    async fn send(
        &mut self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, String)> {
        let mut delay = Duration::from_millis(250);
        let mut attempt = 1;
        loop {
            let mut request = self.http.request(method.clone(), url);
            if let Some(body) = body {
                request = request.json(body);
            }
            if let Some(key) = &self.key {
                request = request.bearer_auth(key);
            }
            let retry_reason = match request.send().await {
                Ok(response) if response.status() == StatusCode::SERVICE_UNAVAILABLE => {
                    "503 Service Unavailable".to_owned()
                }
                Ok(response) => {
                    let status = response.status();
                    let text = response
                        .text()
                        .await
                        .with_context(|| format!("reading the answer of {method} {url}"))?;
                    return Ok((status, text));
                }
                Err(err) if err.is_connect() || err.is_timeout() || err.is_request() => {
                    format!("{err}")
                }
                Err(err) => return Err(err).with_context(|| format!("{method} {url}")),
            };
            if attempt >= self.attempts {
                bail!("{method} {url}: {retry_reason} after {attempt} attempts");
            }
            tracing::warn!(url, attempt, "{retry_reason}; retrying in {delay:?}");
            tokio::time::sleep(delay).await;
            delay *= 2;
            attempt += 1;
            self.retries += 1;
        }
    }
}

/// Creates the model if needed and posts rows `0..options.rows` of `sim` in batches.
pub async fn post(sim: &Simulator, options: &PostOptions) -> anyhow::Result<PostSummary> {
    anyhow::ensure!(options.batch_rows > 0, "--batch-rows must be at least 1");
    let base = options.url.trim_end_matches('/');
    let started = Instant::now();
    let mut client = Client {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?,
        key: options.key.clone(),
        attempts: options.attempts.max(1),
        retries: 0,
    };
    let models_url = format!("{base}/v1/models");
    let model_url = format!("{models_url}/{}", options.model);
    let (status, text) = client.send(reqwest::Method::GET, &model_url, None).await?;
    let created = match status {
        StatusCode::OK => false,
        StatusCode::NOT_FOUND => {
            let body = model_body(
                &options.model,
                &super::fabric_names(sim),
                &options.model_grid,
                &sim.dye_names(),
                sim.config().world,
            );
            let (status, text) = client.post(&models_url, &body).await?;
            match status {
                StatusCode::CREATED => true,
                StatusCode::CONFLICT => false,
                other => bail!("creating model {:?}: {other}: {text}", options.model),
            }
        }
        other => bail!("looking up model {:?}: {other}: {text}", options.model),
    };
    let batches_url = format!("{base}/v1/models/{}/batches", options.model);
    let mut batches = 0;
    let mut row = 0;
    while row < options.rows {
        let end = (row + options.batch_rows).min(options.rows);
        let id = batch_id(sim, options.batch_rows, batches);
        let (status, text) = client
            .post(&batches_url, &batch_body(sim, &id, row..end))
            .await?;
        if status != StatusCode::ACCEPTED {
            bail!("batch {id} (rows {row}..{end}): {status}: {text}");
        }
        batches += 1;
        row = end;
    }
    Ok(PostSummary {
        created,
        rows: options.rows,
        batches,
        retries: client.retries,
        elapsed: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::{Scenario, SimulationConfig};

    #[test]
    fn bodies_follow_the_contract() {
        let sim = Simulator::new(SimulationConfig {
            scenario: Scenario::DyeLot,
            drift_at: 2,
            ..SimulationConfig::new(7)
        });
        let model = model_body(
            "dyehouse",
            &super::super::fabric_names(&sim),
            &crate::simulate::MODEL_GRID,
            &sim.dye_names(),
            World::Ideal,
        );
        assert_eq!(model["spectrum"]["start_nm"], json!(400));
        assert_eq!(model["spectrum"]["count"], json!(31));
        assert_eq!(
            model["features"],
            json!(["greige_cotton", "polyester_cotton"])
        );
        assert_eq!(model["outputs"].as_array().unwrap().len(), 10);
        assert_eq!(model["transform"], json!("kubelka_munk"));
        let realistic = model_body(
            "d",
            &[],
            &crate::simulate::MODEL_GRID,
            &[],
            World::Realistic,
        );
        assert_eq!(realistic["transform"], json!("saunderson"));
        assert_eq!(realistic["saunderson"], json!({"k1": 0.04, "k2": 0.6}));
        let id = batch_id(&sim, 100, 3);
        assert_eq!(id, "sim-7-dye_lot-2-100-000003");
        let batch = batch_body(&sim, &id, 0..4);
        assert_eq!(batch["spectra"]["start_nm"], json!(360));
        assert_eq!(batch["spectra"]["values"].as_array().unwrap().len(), 4);
        assert_eq!(batch["spectra"]["values"][0].as_array().unwrap().len(), 43);
        let code = sim.lab_dip(1).sample.substrate;
        assert_eq!(
            batch["x"][1],
            json!([
                f64::from(u8::from(code == 1)),
                f64::from(u8::from(code == 2))
            ])
        );
        assert_eq!(batch["y"][2].as_array().unwrap().len(), 10);
        // The same seed and index give the same batch: retries are idempotent.
        assert_eq!(batch, batch_body(&sim, &id, 0..4));
        assert_eq!(number(2.5), json!(2.5));
    }
}
