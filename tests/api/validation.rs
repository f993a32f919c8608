//! Bad input gets a clear error, with a path for every invalid value, and changes nothing.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

async fn error_of(response: reqwest::Response, status: StatusCode) -> Value {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.expect("error body is JSON");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    body["error"].clone()
}

/// The model is as it was: nothing queued, never trained.
async fn assert_untouched(app: &TestApp) {
    let model: Value = app.get("/v1/models/lab").await.json().await.unwrap();
    assert_eq!(model["pending_batches"], 0);
    assert_eq!(model["version"], 0);
    assert_eq!(model["observations"], 0.0);
}

#[tokio::test]
async fn malformed_json_is_400() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let response = app
        .post_raw(
            "/v1/models/lab/batches",
            "application/json",
            r#"{"x": [[1, 2]], "y": [[1]"#,
        )
        .await;
    let error = error_of(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["code"], "malformed_json");
    // JSON has no NaN literal.
    let response = app
        .post_raw(
            "/v1/models/lab/batches",
            "application/json",
            r#"{"x": [[NaN, 1]], "y": [[1]]}"#,
        )
        .await;
    assert_eq!(
        error_of(response, StatusCode::BAD_REQUEST).await["code"],
        "malformed_json"
    );
    // 1e999 is JSON no double holds: in a row its cell is named, as a CSV's is, and so is the
    // member that holds it anywhere else.
    for (path, body, at) in [
        (
            "/v1/models/lab/batches",
            r#"{"x": [[1, 2], [1e999, 1]], "y": [[1], [2]]}"#,
            "/x/1/0",
        ),
        (
            "/v1/models/lab/batches",
            r#"{"x": [[1, 2]], "y": [[-1e999]]}"#,
            "/y/0/0",
        ),
        ("/v1/models/lab/predict", r#"{"x": [[0.5, 1e309]]}"#, "/x/0/1"),
        (
            "/v1/models",
            r#"{"name": "huge", "features": ["a"], "outputs": ["b"], "prior_variance": 1e999}"#,
            "/prior_variance",
        ),
        (
            "/v1/models/lab/batches",
            r#"{"x": [[1, 2]], "y": [[1]], "batch_id": -1e400}"#,
            "/batch_id",
        ),
    ] {
        let response = app.post_raw(path, "application/json", body).await;
        let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(error["code"], "invalid_input", "{body}");
        assert_eq!(error_paths(&error), [at], "{body}");
    }
    let response = app
        .post_raw("/v1/models/lab/batches", "text/plain", "x=1")
        .await;
    let error = error_of(response, StatusCode::UNSUPPORTED_MEDIA_TYPE).await;
    assert_eq!(error["code"], "unsupported_media_type");
    // Read as UTF-8, a UTF-16 body would be misread: refused, whatever the route.
    for (path, content_type) in [
        ("/v1/models/lab/batches", "application/json; charset=utf-16"),
        ("/v1/models/lab/batches", "text/csv; charset=\"ISO-8859-1\""),
        (
            "/v1/models/lab/predict",
            "application/json;charset=UTF-16LE",
        ),
        ("/v1/models", "application/json; charset=latin1"),
    ] {
        let response = app
            .post_raw(path, content_type, r#"{"x": [[1, 2]], "y": [[1]]}"#)
            .await;
        let error = error_of(response, StatusCode::UNSUPPORTED_MEDIA_TYPE).await;
        assert!(
            error["message"].as_str().unwrap().contains("UTF-8"),
            "{error}"
        );
    }
    // A key given twice means different things to different parsers: refused.
    let response = app
        .post_raw(
            "/v1/models/lab/batches",
            "application/json; charset=UTF-8",
            r#"{"x": [[1, 2]], "y": [[1]], "x": [[3, 4]]}"#,
        )
        .await;
    let error = error_of(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["code"], "malformed_json");
    assert!(
        error["message"].as_str().unwrap().contains("\"x\""),
        "{error}"
    );
    assert_untouched(&app).await;
}

/// A body sent with a content coding (gzip, say) is refused with `415`, naming the coding and
/// answering `Accept-Encoding: identity`: bodies are read as sent, so a compressed one was
/// answered `400 malformed_json`, and an uncompressed one labelled gzip was stored.
#[tokio::test]
async fn a_body_in_a_content_coding_is_415_and_says_so() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let gzip_magic: &[u8] = &[0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03];
    let json = br#"{"x": [[1, 2]], "y": [[1]]}"#.to_vec();
    for (path, content_type, coding, body) in [
        ("/v1/models/lab/batches", "application/json", "gzip", json.clone()),
        ("/v1/models/lab/batches", "application/json", "gzip", gzip_magic.to_vec()),
        ("/v1/models/lab/batches", "text/csv", "br", b"a,b,y\n1,2,1\n".to_vec()),
        ("/v1/models/lab/batches", "application/json", "identity, gzip", json.clone()),
        ("/v1/models/lab/predict", "application/json", "deflate", json.clone()),
        ("/v1/models", "application/json", "GZIP", json.clone()),
    ] {
        let response = app
            .client
            .post(app.url(path))
            .header("content-type", content_type)
            .header("content-encoding", coding)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.headers().get("accept-encoding").map(|v| v.as_bytes()),
            Some(&b"identity"[..]),
            "{path} {coding}"
        );
        let error = error_of(response, StatusCode::UNSUPPORTED_MEDIA_TYPE).await;
        assert_eq!(error["code"], "unsupported_media_type");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("Content-Encoding") && message.contains(&format!("{coding:?}")),
            "{path} {coding}: {message}"
        );
    }
    assert_untouched(&app).await;
    // `identity` is no coding at all: read as it is.
    let response = app
        .client
        .post(app.url("/v1/models/lab/batches"))
        .header("content-type", "application/json")
        .header("content-encoding", "identity")
        .body(json)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}

/// A transfer coding other than `chunked` (`Transfer-Encoding: gzip, chunked`) is one the
/// server does not implement: `501` (RFC 9112, 6.1), whatever the body holds and whatever the
/// route. hyper undoes the chunking only, so such a body was misread or stored as sent.
#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_501_and_says_so() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let address = app.address.trim_start_matches("http://").to_owned();
    let json = br#"{"x": [[1, 2]], "y": [[1]]}"#.to_vec();
    let gzip_magic: &[u8] = &[0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03];
    let send = |path: &'static str, coding: &'static str, body: Vec<u8>| {
        let address = address.clone();
        async move {
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            let mut request = format!(
                "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
                 idempotency-key: coded\r\ntransfer-encoding: {coding}\r\n\
                 connection: close\r\n\r\n{:x}\r\n",
                body.len()
            )
            .into_bytes();
            request.extend_from_slice(&body);
            request.extend_from_slice(b"\r\n0\r\n\r\n");
            stream.write_all(&request).await.unwrap();
            let mut response = Vec::new();
            stream.read_to_end(&mut response).await.unwrap();
            String::from_utf8_lossy(&response).into_owned()
        }
    };
    for (path, coding, body) in [
        ("/v1/models/lab/batches", "gzip, chunked", json.clone()),
        ("/v1/models/lab/batches", "gzip, chunked", gzip_magic.to_vec()),
        ("/v1/models/lab/batches", "deflate,chunked", json.clone()),
        ("/v1/models/lab/predict", "br, chunked", json.clone()),
        ("/v1/models", "GZIP, chunked", json.clone()),
    ] {
        let response = send(path, coding, body).await;
        assert!(
            response.starts_with("HTTP/1.1 501 "),
            "{path} {coding}: {response}"
        );
        assert!(response.contains("\r\nx-request-id: "), "{response}");
        let body = &response[response.find("\r\n\r\n").unwrap() + 4..];
        let error: Value = serde_json::from_str(body).unwrap();
        assert_eq!(error["error"]["code"], "not_implemented", "{body}");
        let message = error["error"]["message"].as_str().unwrap();
        let named = coding.split(',').next().unwrap();
        assert!(
            message.contains("Transfer-Encoding") && message.contains(named),
            "{path} {coding}: {message}"
        );
    }
    assert_untouched(&app).await;
    // Chunked alone is the framing hyper reads: the batch is taken as sent.
    let response = send("/v1/models/lab/batches", "chunked", json).await;
    assert!(response.starts_with("HTTP/1.1 202 "), "{response}");
}

/// A path segment that is not UTF-8 names nothing: a `404` in the error shape, on every kind of
/// route.
#[tokio::test]
async fn path_segments_that_name_nothing_are_404_in_the_error_shape() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    for (method, path) in [
        ("GET", "/v1/models/lab/batches/%FF%FE"),
        ("GET", "/v1/models/%FF"),
        ("DELETE", "/v1/keys/%FF"),
        ("POST", "/v1/models/lab/versions/%FF/restore"),
        ("GET", "/console/%FF"),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = app.client.request(method, app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let error = error_of(response, StatusCode::NOT_FOUND).await;
        assert_eq!(error["code"], "not_found", "{path}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains("names nothing"),
            "{path}: {error}"
        );
    }
}

/// A batch id no batch can have (too long, or with a character ids never hold) is a `404` that
/// says why, on every route that names a batch; an id that could exist only says it does not.
#[tokio::test]
async fn batch_ids_that_cannot_exist_say_why() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    // The message of the 404 each route that names batch `id` answers, with the path asked.
    let answers = async |id: &str| {
        let mut messages = Vec::new();
        for (method, suffix) in [("GET", ""), ("POST", "/release"), ("POST", "/reject")] {
            let path = format!("/v1/models/lab/batches/{id}{suffix}");
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let response = app.client.request(method, app.url(&path)).send().await.unwrap();
            let error = error_of(response, StatusCode::NOT_FOUND).await;
            assert_eq!(error["code"], "not_found", "{path}: {error}");
            messages.push((path, error["message"].as_str().unwrap().to_owned()));
        }
        messages
    };
    let long = "a".repeat(129);
    for id in [long.as_str(), "a%20b", "lot%2F7"] {
        for (path, message) in answers(id).await {
            assert!(
                message.contains("a batch id must be 1 to 128 characters"),
                "{path}: {message}"
            );
        }
    }
    for (path, message) in answers(&long[1..]).await {
        assert!(
            message.contains("has no batch") && !message.contains("must be"),
            "{path}: {message}"
        );
    }
}

#[tokio::test]
async fn bad_query_parameters_are_invalid_query() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    for query in [
        "status=melted",
        "limit=0",
        "limit=ten",
        "limit=1001",
        "limit=5&limit=10",
        "status=held&limit=5&status=folded",
    ] {
        let response = app.get(&format!("/v1/models/lab/batches?{query}")).await;
        let error = error_of(response, StatusCode::BAD_REQUEST).await;
        assert_eq!(error["code"], "invalid_query", "{query}: {error}");
    }
    let response = app.get("/v1/models/lab/batches?status=held&limit=5").await;
    assert_eq!(response.status(), StatusCode::OK);

    // A parameter the endpoint does not document is refused by name, not ignored: a misspelt
    // filter would answer every batch, another endpoint's `after` the first page forever, a
    // posterior's `version` the current one.
    for (uri, named, takes) in [
        ("/v1/models/lab/batches?staus=held", "\"staus\"", "takes status, limit"),
        ("/v1/models/lab/batches?limit=5&after=3", "\"after\"", "takes status, limit"),
        ("/v1/models/lab/posterior?version=3", "\"version\"", "takes none"),
        ("/v1/models?limit=1", "\"limit\"", "takes none"),
        ("/v1/models/lab/versions?page=2", "\"page\"", "takes after, limit"),
    ] {
        let error = error_of(app.get(uri).await, StatusCode::BAD_REQUEST).await;
        assert_eq!(error["code"], "invalid_query", "{uri}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(named) && message.ends_with(takes), "{uri}: {message}");
    }
    let response = app
        .post("/v1/models/lab/predict?verbose=1", &json!({"x": [[1.0, 2.0]]}))
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    // A method the route does not have is still a 405.
    let response = app
        .client
        .put(app.url("/v1/models?limit=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    // Documented parameters pass; outside the API (health, pages) a query is not the API's.
    let response = app.get("/v1/models/lab/versions?after=0&limit=5").await;
    assert_eq!(response.status(), StatusCode::OK);
    let response = app.get("/healthz?probe=1").await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn every_invalid_value_is_reported_with_its_path() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let response = app
        .post_batch(
            "lab",
            &json!({
                "x": [[1.0, 2.0], [1.0], [1.0, "NaN"], [1.0, "Infinity"], "row", [null, true]],
                "y": [[1.0], [1.0, 2.0], [1.0], [1.0], [1.0], [1.0]],
                "extra": 1
            }),
        )
        .await;
    let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(error["code"], "invalid_input");
    let paths = error_paths(&error);
    for expected in [
        "/x/1", "/x/2/1", "/x/3/1", "/x/4", "/x/5/0", "/x/5/1", "/y/1", "/extra",
    ] {
        assert!(
            paths.contains(&expected.to_owned()),
            "{expected} missing from {paths:?}"
        );
    }
    let nan = error["details"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"] == "/x/2/1")
        .unwrap();
    assert!(nan["message"].as_str().unwrap().contains("\"NaN\""));
    assert_untouched(&app).await;
}

#[tokio::test]
async fn row_counts_must_agree_and_a_batch_needs_rows() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let response = app
        .post_batch("lab", &json!({"x": [[1.0, 2.0], [3.0, 4.0]], "y": [[1.0]]}))
        .await;
    let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(error_paths(&error), ["/y"]);
    let response = app.post_batch("lab", &json!({"x": [], "y": []})).await;
    let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(error_paths(&error), ["/x", "/y"]);
    let response = app.post_batch("lab", &json!({"y": [[1.0]]})).await;
    let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(error_paths(&error), ["/x"]);
    let response = app.post_batch("lab", &json!([1, 2])).await;
    error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    let response = app
        .post_batch(
            "lab",
            &json!({"batch_id": "no spaces", "x": [[1.0, 2.0]], "y": [[1.0]]}),
        )
        .await;
    let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(error_paths(&error), ["/batch_id"]);
    assert_untouched(&app).await;
}

#[tokio::test]
async fn predict_validates_its_rows_too() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let response = app
        .post(
            "/v1/models/lab/predict",
            &json!({"x": [[1.0, "NaN"], [1.0]]}),
        )
        .await;
    let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(error_paths(&error), ["/x/0/1", "/x/1"]);
    let response = app.post("/v1/models/lab/predict", &json!({"x": []})).await;
    error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
}

#[tokio::test]
async fn inputs_whose_prediction_overflows_are_422_not_null() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 3, 2)).await;
    let (x, y) = random_rows(7, 40, 3, 2);
    app.post_batch("lab", &json!({"batch_id": "b", "x": x, "y": y}))
        .await;
    assert_eq!(app.wait_for_batch("lab", "b").await["status"], "folded");
    for x in [
        json!([[0.5, 0.5, 0.5], [1e308, 1e308, -1e308]]),
        json!([[0.5, 0.5, 0.5], [1e200, 1e200, 1e200]]),
    ] {
        let response = app.post("/v1/models/lab/predict", &json!({"x": x})).await;
        let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(error_paths(&error), ["/x/1"], "{x}: {error}");
    }
    let fine: Value = app
        .post("/v1/models/lab/predict", &json!({"x": [[0.5, 0.5, 0.5]]}))
        .await
        .json()
        .await
        .unwrap();
    assert!(fine["predictions"][0]["variance"][1].is_f64(), "{fine}");
}

#[tokio::test]
async fn oversized_bodies_and_too_many_rows_are_413() {
    let database = fresh_database().await;
    let mut settings = test_settings(&database.url);
    settings.limits.max_body_bytes = 4096;
    settings.limits.max_rows_per_request = 50;
    let app = spawn_with(settings).await;
    app.create_model(&spec("lab", 2, 1)).await;

    let (x, y) = random_rows(1, 200, 2, 1);
    let response = app.post_batch("lab", &json!({"x": x, "y": y})).await;
    let error = error_of(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert_eq!(error["code"], "payload_too_large");

    let x: Vec<[f64; 2]> = vec![[1.0, 2.0]; 60];
    let y: Vec<[f64; 1]> = vec![[1.0]; 60];
    let response = app.post_batch("lab", &json!({"x": x, "y": y})).await;
    let error = error_of(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert!(error["message"].as_str().unwrap().contains("too many rows"));
    let response = app.post("/v1/models/lab/predict", &json!({"x": x})).await;
    error_of(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert_untouched(&app).await;
}

/// `.` and `..` cannot be a batch's id, in the body or as its `Idempotency-Key`: a URL cannot
/// name them, so the batch could never be read back. Ids that merely contain dots are ids.
#[tokio::test]
async fn dot_segments_are_refused_as_batch_ids() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    for id in [".", ".."] {
        let response = app
            .post_batch("lab", &json!({"batch_id": id, "x": [[1.0, 2.0]], "y": [[1.0]]}))
            .await;
        let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(error_paths(&error), ["/batch_id"], "{id}: {error}");
        assert!(error.to_string().contains("read back"), "{id}: {error}");
        let response = app
            .client
            .post(app.url("/v1/models/lab/batches"))
            .header("Idempotency-Key", id)
            .json(&json!({"x": [[1.0, 2.0]], "y": [[1.0]]}))
            .send()
            .await
            .unwrap();
        error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    }
    assert_untouched(&app).await;
    for id in ["...", ".a", "a..b"] {
        let response = app
            .post_batch("lab", &json!({"batch_id": id, "x": [[1.0, 2.0]], "y": [[1.0]]}))
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{id}");
        let response = app.get(&format!("/v1/models/lab/batches/{id}")).await;
        assert_eq!(response.status(), StatusCode::OK, "{id}");
        let batch: Value = response.json().await.unwrap();
        assert_eq!(batch["batch_id"], id, "{batch}");
    }
}

/// Two `Idempotency-Key` headers with different ids name no one batch: which counts would be a
/// guess, and a retry that sent the other first would store the rows again. Refused, JSON and
/// CSV alike, and nothing stored. The same id twice names one batch.
#[tokio::test]
async fn idempotency_keys_naming_different_ids_are_refused() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let twice = |first: &str, second: &str| {
        app.client
            .post(app.url("/v1/models/lab/batches"))
            .header("Idempotency-Key", first)
            .header("Idempotency-Key", second)
    };
    let json = twice("key-1", "key-2").json(&json!({"x": [[1.0, 2.0]], "y": [[1.0]]}));
    let csv = twice("key-1", "key-2")
        .header("content-type", "text/csv")
        .body("R400,R410,dye_0\n1.0,2.0,1.0\n");
    for request in [json, csv] {
        let error = error_of(
            request.send().await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert!(error.to_string().contains("different ids"), "{error}");
    }
    assert_untouched(&app).await;
    let same = twice("key-1", "key-1")
        .json(&json!({"x": [[1.0, 2.0]], "y": [[1.0]]}))
        .send()
        .await
        .unwrap();
    assert_eq!(same.status(), StatusCode::ACCEPTED);
    let batch: Value = same.json().await.unwrap();
    assert_eq!(batch["batch_id"], "key-1", "{batch}");
}

#[tokio::test]
async fn a_batch_id_that_differs_from_the_idempotency_key_is_refused() {
    let app = spawn_app().await;
    app.create_model(&spec("lab", 2, 1)).await;
    let response = app
        .client
        .post(app.url("/v1/models/lab/batches"))
        .header("Idempotency-Key", "key-1")
        .json(&json!({"batch_id": "key-2", "x": [[1.0, 2.0]], "y": [[1.0]]}))
        .send()
        .await
        .unwrap();
    let error = error_of(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(error_paths(&error), ["/batch_id"]);
    let response = app
        .client
        .put(app.url("/v1/models/lab"))
        .send()
        .await
        .unwrap();
    let error = error_of(response, StatusCode::METHOD_NOT_ALLOWED).await;
    assert_eq!(error["code"], "method_not_allowed");
    assert_untouched(&app).await;
}
