//! The request time limit: a request that is not done in time is answered `503 timeout`, and
//! the service keeps serving.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::spawn_configured;

#[tokio::test]
async fn a_request_slower_than_the_limit_is_answered_503() {
    let app = spawn_configured(|s| s.limits.request_timeout_secs = 1).await;
    app.create_model(&serde_json::json!({
        "name": "cotton", "features": ["R400"], "outputs": ["red"]
    }))
    .await;

    // A client that announces a body and then stalls (a slow or stuck MES connection).
    let address = app.address.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v1/models/cotton/batches HTTP/1.1\r\nhost: {address}\r\n\
         content-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"x\": [[0.1"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let start = Instant::now();
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    // Read until the status line and the body's code have arrived.
    while !String::from_utf8_lossy(&response).contains("\"timeout\"") {
        let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buffer))
            .await
            .expect("an answer within 20 s")
            .unwrap();
        assert!(
            n > 0,
            "connection closed: {}",
            String::from_utf8_lossy(&response)
        );
        response.extend_from_slice(&buffer[..n]);
    }
    let elapsed = start.elapsed();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.to_ascii_lowercase().contains("retry-after"), "{text}");
    assert!(text.contains("longer than the limit of 1 s"), "{text}");
    assert!(
        elapsed >= Duration::from_millis(900),
        "answered after {elapsed:?}"
    );

    // Nothing was stored, and the service answers other requests.
    let batches = app
        .get("/v1/models/cotton")
        .await
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(batches["pending_batches"], 0);
    assert_eq!(app.get("/healthz").await.status(), 200);
}
