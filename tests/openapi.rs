//! The committed OpenAPI document is the one the code generates, and it documents every route
//! with the access it needs.

use mordant::http::auth::Access;
use serde_json::Value;

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

/// The document and the policy come from the same declarations (`src/http/routes.rs`): every
/// operation documented has its access, every access its operation, and the document says
/// which need a key and what they answer without one.
#[test]
fn every_route_has_its_entry_and_its_access() {
    let doc: Value = serde_json::from_str(&mordant::http::openapi_json().unwrap()).unwrap();
    let policy = mordant::http::policy();
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in ["get", "post", "put", "delete", "patch"] {
            if let Some(operation) = item.get(method) {
                documented.push((method.to_uppercase(), path.clone(), operation.clone()));
            }
        }
    }
    let mut listed: Vec<(String, String)> = policy
        .rules()
        .iter()
        .map(|rule| (rule.method.to_string(), rule.path.clone()))
        .collect();
    listed.sort();
    let mut names: Vec<(String, String)> = documented
        .iter()
        .map(|(m, p, _)| (m.clone(), p.clone()))
        .collect();
    names.sort();
    assert_eq!(listed, names, "the policy and the OpenAPI document differ");
    // The README's endpoints are among them (a route dropped from the declarations would be
    // dropped from both).
    for (method, path) in [
        ("POST", "/v1/models"),
        ("POST", "/v1/models/{name}/batches"),
        ("GET", "/v1/models/{name}/batches/{batch_id}"),
        ("POST", "/v1/models/{name}/predict"),
        ("GET", "/metrics"),
    ] {
        assert!(
            names.contains(&(method.to_owned(), path.to_owned())),
            "{method} {path}"
        );
    }
    for (method, path, operation) in documented {
        let access = policy.access(&method, &path);
        let secured = operation.get("security").is_some();
        assert_eq!(secured, access != Access::Open, "{method} {path}");
        if secured {
            assert!(
                operation["responses"].get("401").is_some(),
                "{method} {path}"
            );
            assert!(
                operation["responses"].get("403").is_some(),
                "{method} {path}"
            );
        }
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
}

/// `openapi-spec-validator` (PyPI) accepts the committed document. CI installs it and sets
/// `MORDANT_REQUIRE_OPENAPI_VALIDATOR=1`; elsewhere the test runs when the tool is on the PATH.
#[test]
fn the_document_validates() {
    let required = std::env::var("MORDANT_REQUIRE_OPENAPI_VALIDATOR").is_ok_and(|v| v == "1");
    let document = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let run = std::process::Command::new("openapi-spec-validator")
        .arg(document)
        .output();
    let Ok(output) = run else {
        assert!(
            !required,
            "MORDANT_REQUIRE_OPENAPI_VALIDATOR=1 but openapi-spec-validator does not run"
        );
        eprintln!("openapi-spec-validator not found: skipped here; CI runs it");
        return;
    };
    assert!(
        output.status.success(),
        "openapi-spec-validator refuses the document:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Generators name a client's methods after operation ids: each is unique.
#[test]
fn operation_ids_are_unique() {
    let doc: serde_json::Value =
        serde_json::from_str(&mordant::http::openapi_json().unwrap()).unwrap();
    let mut ids = Vec::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for operation in item.as_object().unwrap().values() {
            ids.push(
                operation["operationId"]
                    .as_str()
                    .expect("every operation has an id")
                    .to_owned(),
            );
        }
    }
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "repeated operation ids among {ids:?}");
}

/// The limits the document states are the ones the server enforces.
#[test]
fn stated_limits_are_the_enforced_ones() {
    use mordant::domain::model::{MAX_FEATURES, MAX_NAME_LEN, MAX_OUTPUTS};
    let doc: serde_json::Value =
        serde_json::from_str(&mordant::http::openapi_json().unwrap()).unwrap();
    let create = &doc["components"]["schemas"]["CreateModel"]["properties"];
    assert_eq!(create["features"]["maxItems"], MAX_FEATURES, "{create}");
    assert_eq!(create["outputs"]["maxItems"], MAX_OUTPUTS, "{create}");
    let name = doc["paths"]["/v1/models/{name}"]["get"]["parameters"][0]["schema"].clone();
    assert_eq!(name["maxLength"], MAX_NAME_LEN, "{name}");
}

/// Every batch id the document describes (the path's, the `Idempotency-Key`'s, a correction's
/// `batch_id`) has the parser's pattern, and the pattern accepts exactly the ids of up to 128
/// characters that the service accepts.
#[test]
fn the_documented_batch_id_pattern_is_the_parsers() {
    use mordant::domain::{BATCH_ID_PATTERN, BatchId, MAX_BATCH_ID_LEN};
    use proptest::prelude::*;

    fn patterns(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("pattern", Value::String(p)) if p.contains("_:-") => out.push(p.clone()),
                        _ => patterns(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| patterns(v, out)),
            _ => {}
        }
    }
    let doc: Value = serde_json::from_str(&mordant::http::openapi_json().unwrap()).unwrap();
    let mut found = Vec::new();
    patterns(&doc, &mut found);
    assert!(found.len() >= 5, "{found:?}");
    assert!(found.iter().all(|p| p == BATCH_ID_PATTERN), "{found:?}");

    let pattern = regex::Regex::new(BATCH_ID_PATTERN).unwrap();
    let agree = |id: &str| {
        let documented = pattern.is_match(id) && id.len() <= MAX_BATCH_ID_LEN;
        assert_eq!(documented, BatchId::parse(id).is_ok(), "{id:?}");
    };
    for id in [
        "", ".", "..", "...", ".a", "..a", "a.", "a..b", "-", "x y", "é", "a/b",
    ] {
        agree(id);
    }
    agree(&"a".repeat(MAX_BATCH_ID_LEN));
    agree(&"a".repeat(MAX_BATCH_ID_LEN + 1));
    proptest!(|(id in "[._:aZ0 /-]{0,5}")| agree(&id));
}

/// `mordant openapi | head -c 10`, `mordant simulate | head`: a reader that closes the pipe
/// once it has what it wanted stops the command quietly and successfully, as it stops a filter;
/// "Broken pipe" and exit 1 read as a failure of a command that did its part.
#[test]
fn a_reader_that_closes_the_pipe_early_stops_a_command_quietly() {
    use std::io::Read as _;
    for args in [&["openapi"][..], &["simulate", "--rows", "20000"]] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run mordant");
        let mut stdout = child.stdout.take().expect("piped standard output");
        let mut head = [0u8; 10];
        stdout
            .read_exact(&mut head)
            .expect("the output's first bytes");
        // The output is far larger than a pipe's buffer: the rest meets a closed pipe.
        drop(stdout);
        let output = child.wait_with_output().expect("wait for mordant");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{args:?}: {:?}: {stderr}",
            output.status
        );
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}

/// `mordant openapi` into an output that cannot be written (a full disk) says so and exits 1,
/// where a print would panic (exit 101, a backtrace).
#[test]
fn a_document_that_cannot_be_written_is_an_error_not_a_panic() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return;
    };
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
        .arg("openapi")
        .stdout(full)
        .output()
        .expect("run mordant openapi");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    // Standard error unwritable too: the error cannot be told, and the exit code still says
    // it (eprintln! panicked: 101).
    let (Ok(out), Ok(err)) = (
        std::fs::OpenOptions::new().write(true).open("/dev/full"),
        std::fs::OpenOptions::new().write(true).open("/dev/full"),
    ) else {
        return;
    };
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
        .arg("openapi")
        .stdout(out)
        .stderr(err)
        .status()
        .expect("run mordant openapi");
    assert_eq!(status.code(), Some(1));
}
