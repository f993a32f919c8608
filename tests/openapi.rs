//! The committed OpenAPI document is the one the code generates, and it documents every route.

#[test]
fn committed_openapi_document_is_up_to_date() {
    let generated = mordant::http::openapi_json().expect("serialise the OpenAPI document");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let committed = std::fs::read_to_string(path).expect("read openapi/openapi.json");
    assert!(
        committed.trim_end() == generated.trim_end(),
        "openapi/openapi.json is stale: regenerate it with \
         `cargo run -- openapi > openapi/openapi.json`"
    );
}

#[test]
fn every_route_is_documented() {
    let doc: serde_json::Value =
        serde_json::from_str(&mordant::http::openapi_json().unwrap()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for (path, methods) in [
        ("/v1/models", &["get", "post"][..]),
        ("/v1/models/{name}", &["get", "delete"]),
        ("/v1/models/{name}/posterior", &["get"]),
        ("/v1/models/{name}/batches", &["post"]),
        ("/v1/models/{name}/batches/{batch_id}", &["get"]),
        ("/v1/models/{name}/predict", &["post"]),
        ("/v1/models/{name}/match", &["post"]),
        ("/v1/models/{name}/versions", &["get"]),
        ("/v1/models/{name}/versions/{version}/restore", &["post"]),
        ("/v1/models/{name}/refit", &["post"]),
        ("/metrics", &["get"]),
        ("/healthz", &["get"]),
        ("/readyz", &["get"]),
        ("/openapi.json", &["get"]),
        ("/docs", &["get"]),
    ] {
        for method in methods {
            assert!(
                paths.get(path).and_then(|p| p.get(*method)).is_some(),
                "{method} {path} is not documented"
            );
        }
    }
}
