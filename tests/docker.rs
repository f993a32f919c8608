//! The compose stack's files (its images cannot be pulled here): the YAML and JSON parse, the
//! services and scrape target are wired together, and every metric the Grafana dashboard queries
//! exists. The image itself is built and run in `tests/api/container.rs`.

use std::fs;
use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

fn docker(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docker")
        .join(path)
}

fn yaml(path: &str) -> Yaml {
    let text = fs::read_to_string(docker(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(docs.len(), 1, "{path}: one document");
    docs.remove(0)
}

#[test]
fn compose_wires_postgres_mordant_prometheus_and_grafana() {
    let compose = yaml("compose.yaml");
    let services = &compose["services"];
    for name in ["postgres", "mordant", "prometheus", "grafana"] {
        assert!(!services[name].is_badvalue(), "service {name} is missing");
    }
    let mordant = &services["mordant"];
    assert_eq!(
        mordant["build"]["dockerfile"].as_str(),
        Some("docker/Dockerfile")
    );
    let url = mordant["environment"]["DATABASE_URL"].as_str().unwrap();
    assert!(
        url.contains("@postgres:5432/"),
        "mordant reaches the postgres service: {url}"
    );
    assert_eq!(
        mordant["environment"]["MORDANT_ENV"].as_str(),
        Some("production")
    );

    let prometheus = yaml("prometheus/prometheus.yml");
    let target = &prometheus["scrape_configs"][0]["static_configs"][0]["targets"][0];
    assert_eq!(target.as_str(), Some("mordant:8080"));
    assert_eq!(
        prometheus["scrape_configs"][0]["metrics_path"].as_str(),
        Some("/metrics")
    );

    let datasource = yaml("grafana/provisioning/datasources/prometheus.yaml");
    assert_eq!(
        datasource["datasources"][0]["url"].as_str(),
        Some("http://prometheus:9090")
    );
    let dashboards = yaml("grafana/provisioning/dashboards/mordant.yaml");
    assert_eq!(
        dashboards["providers"][0]["options"]["path"].as_str(),
        Some("/var/lib/grafana/dashboards")
    );
}

#[test]
fn the_dashboard_queries_only_metrics_that_exist() {
    let text = fs::read_to_string(docker("grafana/dashboards/mordant.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let exprs: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    assert!(exprs.len() >= 8);
    let mut used = Vec::new();
    for expr in &exprs {
        let mut rest = *expr;
        while let Some(at) = rest.find("mordant_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name)
                .to_owned();
            assert!(
                mordant::metrics::FAMILIES.contains(&family.as_str()),
                "the dashboard queries {name}, which mordant does not export ({expr})"
            );
            used.push(family);
        }
    }
    for needed in [
        "mordant_http_requests_total",
        "mordant_http_request_duration_seconds",
        "mordant_queue_batches",
        "mordant_fold_lag_seconds",
        "mordant_rows_folded_total",
        "mordant_model_noise_variance",
    ] {
        assert!(
            used.iter().any(|u| u == needed),
            "the dashboard does not show {needed}"
        );
    }
}
