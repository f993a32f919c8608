//! Prometheus metrics, one registry per application (tests run several in one process).
//!
//! Names follow Prometheus conventions: the `mordant_` prefix, base units (seconds), `_total`
//! counters. Labels are bounded: routes are the API's path templates, models are created by
//! administrators; batch ids never become labels. Values that describe the current state
//! (model versions, σ², queue depth) are read when scraped.

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    Opts, Registry, TextEncoder,
};

use crate::cache::PosteriorCache;
use crate::store::QueueDepth;

/// Every metric family `/metrics` can show (dashboards are checked against this list, and the
/// metrics test checks the list against a real scrape).
pub const FAMILIES: &[&str] = &[
    "mordant_http_requests_total",
    "mordant_http_request_duration_seconds",
    "mordant_batches_accepted_total",
    "mordant_batches_folded_total",
    "mordant_batches_rejected_total",
    "mordant_rows_folded_total",
    "mordant_fold_duration_seconds",
    "mordant_fold_lag_seconds",
    "mordant_batches_held_total",
    "mordant_batch_surprise",
    "mordant_queue_batches",
    "mordant_queue_rows",
    "mordant_predict_coalesced_requests_total",
    "mordant_predict_coalesced_computations_total",
    "mordant_model_version",
    "mordant_model_observations",
    "mordant_model_noise_variance",
    "mordant_database_up",
    "mordant_build_info",
];

/// Latency buckets from 0.5 ms to about 33 s.
fn latency_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.0005, 2.0, 17).unwrap_or_default()
}

pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    batches_accepted: IntCounterVec,
    batches_folded: IntCounterVec,
    batches_rejected: IntCounterVec,
    rows_folded: IntCounterVec,
    fold_duration: Histogram,
    fold_lag: Histogram,
    batches_held: IntCounterVec,
    batch_surprise: HistogramVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("mordant".into()), None)?;
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let http_requests = counter(
            "http_requests_total",
            "HTTP requests by matched route, method and status.",
            &["route", "method", "status"],
        )?;
        let batches_accepted = counter(
            "batches_accepted_total",
            "Batches durably accepted (replays of a stored batch are not counted).",
            &["model"],
        )?;
        let batches_folded = counter(
            "batches_folded_total",
            "Batches folded into a model version.",
            &["model"],
        )?;
        let batches_rejected = counter(
            "batches_rejected_total",
            "Batches rejected by the folder (see the batch's error).",
            &["model"],
        )?;
        let rows_folded = counter(
            "rows_folded_total",
            "Rows folded into model versions.",
            &["model"],
        )?;
        let http_duration = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "HTTP request latency by matched route and method.",
            )
            .buckets(latency_buckets()),
            &["route", "method"],
        )?;
        registry.register(Box::new(http_duration.clone()))?;
        let fold_duration = Histogram::with_opts(
            HistogramOpts::new("fold_duration_seconds", "Time to fold one model's queue.")
                .buckets(latency_buckets()),
        )?;
        registry.register(Box::new(fold_duration.clone()))?;
        // Up to about 6 hours: an untrained model's batches wait for its first fit.
        let fold_lag = Histogram::with_opts(
            HistogramOpts::new(
                "fold_lag_seconds",
                "Time from a batch's acceptance to the commit of the version it was folded into.",
            )
            .buckets(prometheus::exponential_buckets(0.005, 2.0, 23).unwrap_or_default()),
        )?;
        registry.register(Box::new(fold_lag.clone()))?;
        let batches_held = counter(
            "batches_held_total",
            "Batches held for review: more surprising to the posterior than the model's threshold.",
            &["model"],
        )?;
        // z ≈ 1 for a batch that agrees with the model; buckets from 1/8 to 4096.
        let batch_surprise = HistogramVec::new(
            HistogramOpts::new(
                "batch_surprise",
                "Each batch's surprise to the posterior it met, once, when it is folded or held \
                 (the largest over the outputs of RSS / (N·σ² + tr(ΣG)); about 1 when the batch \
                 agrees).",
            )
            .buckets(prometheus::exponential_buckets(0.125, 2.0, 16).unwrap_or_default()),
            &["model"],
        )?;
        registry.register(Box::new(batch_surprise.clone()))?;
        Ok(Self {
            registry,
            http_requests,
            http_duration,
            batches_accepted,
            batches_folded,
            batches_rejected,
            rows_folded,
            fold_duration,
            fold_lag,
            batches_held,
            batch_surprise,
        })
    }

    pub fn observe_request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let method = match method {
            "GET" | "POST" | "PUT" | "DELETE" | "PATCH" | "HEAD" | "OPTIONS" => method,
            _ => "other",
        };
        self.http_requests
            .with_label_values(&[route, method, &status.to_string()])
            .inc();
        self.http_duration
            .with_label_values(&[route, method])
            .observe(seconds);
    }

    /// Drops a deleted model's series.
    pub fn forget_model(&self, model: &str) {
        for family in [
            &self.batches_accepted,
            &self.batches_folded,
            &self.batches_rejected,
            &self.rows_folded,
            &self.batches_held,
        ] {
            let _ = family.remove_label_values(&[model]);
        }
        let _ = self.batch_surprise.remove_label_values(&[model]);
    }

    /// A batch's surprise per output, observed as its largest (batches of the first fit, and
    /// models with no trained output, have none).
    pub fn batch_surprise(&self, model: &str, surprise: &[Option<f64>]) {
        if let Some(z) = crate::estimator::drift::largest(surprise) {
            self.batch_surprise.with_label_values(&[model]).observe(z);
        }
    }

    pub fn batches_held(&self, model: &str, held: usize) {
        if held > 0 {
            self.batches_held
                .with_label_values(&[model])
                .inc_by(held as u64);
        }
    }

    pub fn batch_accepted(&self, model: &str) {
        self.batches_accepted.with_label_values(&[model]).inc();
    }

    /// One fold: how many batches were folded and rejected, the rows folded, how long it took,
    /// and each folded batch's lag from acceptance.
    pub fn fold(
        &self,
        model: &str,
        folded: usize,
        rejected: usize,
        rows: u64,
        seconds: f64,
        lags: &[f64],
    ) {
        self.batches_folded
            .with_label_values(&[model])
            .inc_by(folded as u64);
        self.batches_rejected
            .with_label_values(&[model])
            .inc_by(rejected as u64);
        self.rows_folded.with_label_values(&[model]).inc_by(rows);
        self.fold_duration.observe(seconds);
        for lag in lags {
            self.fold_lag.observe(lag.max(0.0));
        }
    }

    /// The text exposition of every metric: the counters and histograms, then the state read
    /// now from the cache and (when the database answered) the queue.
    pub fn render(
        &self,
        cache: &PosteriorCache,
        queue: Option<&[QueueDepth]>,
    ) -> Result<String, prometheus::Error> {
        let state = Registry::new_custom(Some("mordant".into()), None)?;
        let gauge_vec =
            |name: &str, help: &str, labels: &[&str]| -> Result<GaugeVec, prometheus::Error> {
                let g = GaugeVec::new(Opts::new(name, help), labels)?;
                state.register(Box::new(g.clone()))?;
                Ok(g)
            };
        let build = gauge_vec("build_info", "Build information; always 1.", &["version"])?;
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1.0);
        let version = gauge_vec(
            "model_version",
            "Version each model is served at (0: untrained).",
            &["model"],
        )?;
        let observations = gauge_vec(
            "model_observations",
            "Rows each model has learnt (forgetting-weighted).",
            &["model"],
        )?;
        let noise = gauge_vec(
            "model_noise_variance",
            "σ² of each trained output of each model.",
            &["model", "output"],
        )?;
        let pairs = gauge_vec(
            "successor_pairs",
            "Samples read by both a model's instrument and its successor.",
            &["model"],
        )?;
        let own_rows = gauge_vec(
            "successor_own_rows",
            "Rows a model's successor's own model has learnt.",
            &["model"],
        )?;
        let own_weight = gauge_vec(
            "successor_own_weight",
            "Weight of the successor's own model in its answers (1 once the old instrument retired).",
            &["model"],
        )?;
        let retired = gauge_vec(
            "successor_retired",
            "1 once a model's old instrument has retired in favour of its successor.",
            &["model"],
        )?;
        for model in cache.models() {
            let name = model.spec.name.as_str();
            version.with_label_values(&[name]).set(model.version as f64);
            if let Some(serving) = &model.successor {
                let status = serving.succession.status();
                pairs.with_label_values(&[name]).set(status.pairs);
                own_rows.with_label_values(&[name]).set(status.own_rows);
                own_weight.with_label_values(&[name]).set(status.own_weight);
                retired
                    .with_label_values(&[name])
                    .set(f64::from(u8::from(status.retired)));
            }
            if let Some(s) = &model.state {
                observations
                    .with_label_values(&[name])
                    .set(s.totals().rows());
                for (output, sigma2) in model.spec.outputs.iter().zip(s.noise_variances()) {
                    if let Some(sigma2) = sigma2 {
                        noise.with_label_values(&[name, output]).set(sigma2);
                    }
                }
            } else {
                observations.with_label_values(&[name]).set(0.0);
            }
        }
        // Counted by the cache's coalescers, whose counts only grow: exposed as counters.
        let (computations, answered) = cache.coalesced().counts();
        for (name, help, value) in [
            (
                "predict_coalesced_requests_total",
                "Small predict requests of wide models answered together with others.",
                answered,
            ),
            (
                "predict_coalesced_computations_total",
                "Computations that answered them (requests / computations: how many together).",
                computations,
            ),
        ] {
            let counter = IntCounter::with_opts(Opts::new(name, help))?;
            counter.inc_by(value);
            state.register(Box::new(counter))?;
        }
        let up = Gauge::with_opts(Opts::new(
            "database_up",
            "1 when the last scrape could read the queue from the database.",
        ))?;
        state.register(Box::new(up.clone()))?;
        if let Some(queue) = queue {
            up.set(1.0);
            let batches = gauge_vec("queue_batches", "Batches waiting to be folded.", &["model"])?;
            let rows = gauge_vec("queue_rows", "Rows waiting to be folded.", &["model"])?;
            for q in queue {
                batches.with_label_values(&[&q.model]).set(q.batches as f64);
                rows.with_label_values(&[&q.model]).set(q.rows as f64);
            }
        }
        let mut families = self.registry.gather();
        families.extend(state.gather());
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out = Vec::new();
        TextEncoder::new().encode(&families, &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}
