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

/// Reads from `stream` until the peer closes it (or `within` passes: a panic); what it sent.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> String {
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, stream.read(&mut buffer))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "still open after {within:?}: {}",
                    String::from_utf8_lossy(&response)
                )
            })
            .unwrap_or(0);
        if n == 0 {
            return String::from_utf8_lossy(&response).into_owned();
        }
        response.extend_from_slice(&buffer[..n]);
    }
}

/// The JSON body of a raw HTTP/1.1 response.
fn body_of(response: &str) -> serde_json::Value {
    let (_, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}"))
}

#[tokio::test]
async fn connections_that_send_no_headers_are_closed_after_the_header_timeout() {
    let app = spawn_configured(|s| s.limits.header_read_timeout_secs = 1).await;
    let address = app.address.trim_start_matches("http://").to_owned();

    // Silent from the start.
    let start = Instant::now();
    let mut silent = TcpStream::connect(&address).await.unwrap();
    let sent = read_until_closed(&mut silent, Duration::from_secs(20)).await;
    assert_eq!(
        sent, "",
        "nothing is answered to a connection that asked nothing"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );

    // Headers a byte at a time, never finished: cut off at the same limit, however busy.
    let start = Instant::now();
    let mut slow = TcpStream::connect(&address).await.unwrap();
    let trickle = async {
        for byte in b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: "
            .iter()
            .cycle()
        {
            if slow.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), trickle)
        .await
        .expect("the server closes a connection that trickles its headers");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );

    // Idle after an answered request (keep-alive): closed once the limit passes.
    let mut idle = TcpStream::connect(&address).await.unwrap();
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nhost: {address}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let sent = read_until_closed(&mut idle, Duration::from_secs(20)).await;
    assert!(sent.starts_with("HTTP/1.1 200"), "{sent}");

    assert_eq!(app.get("/healthz").await.status(), 200);
}

#[tokio::test]
async fn a_body_announced_over_the_limit_is_refused_before_it_is_sent() {
    let app = spawn_configured(|s| s.limits.max_body_bytes = 1024 * 1024).await;
    app.create_model(&serde_json::json!({
        "name": "cotton", "features": ["R400"], "outputs": ["red"]
    }))
    .await;
    let address = app.address.trim_start_matches("http://").to_owned();
    for path in [
        "/v1/models/cotton/batches",
        "/v1/models/cotton/predict",
        "/v1/models",
    ] {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
             content-length: 209715200\r\n\r\n{{\"x\": [["
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let start = Instant::now();
        // The rest of the body never comes: the answer must not wait for it.
        let sent = read_until_closed(&mut stream, Duration::from_secs(10)).await;
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert!(sent.starts_with("HTTP/1.1 413"), "{path}: {sent}");
        let body = body_of(&sent);
        assert_eq!(body["error"]["code"], "payload_too_large", "{path}: {sent}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("209715200"),
            "{sent}"
        );
    }
    let pending = app
        .get("/v1/models/cotton")
        .await
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(pending["pending_batches"], 0);
}

#[tokio::test]
async fn headers_over_the_limits_are_refused_in_the_error_shape() {
    let app = spawn_configured(|s| {
        s.limits.max_header_bytes = 4096;
        s.limits.max_headers = 20;
    })
    .await;
    let address = app.address.trim_start_matches("http://").to_owned();
    let long = format!("x-long: {}\r\n", "a".repeat(5000));
    let many: String = (0..30).map(|i| format!("x-h{i}: {i}\r\n")).collect();
    for (what, extra) in [("long", long), ("many", many)] {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        let request =
            format!("GET /healthz HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n{extra}\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let sent = read_until_closed(&mut stream, Duration::from_secs(10)).await;
        assert!(sent.starts_with("HTTP/1.1 431"), "{what}: {sent}");
        assert_eq!(
            body_of(&sent)["error"]["code"],
            "headers_too_large",
            "{what}"
        );
    }
    // Within the limits, the same request is served.
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "GET /healthz HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\nx-short: {}\r\n\r\n",
        "a".repeat(1000)
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let sent = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(sent.starts_with("HTTP/1.1 200"), "{sent}");
}
