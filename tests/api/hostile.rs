//! Bodies built to cost the server memory: rows far beyond the row limit inside the body size
//! limit, sent 8 at a time to the real binary, whose peak resident memory is then read.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{fresh_database, get_json};
use crate::process::{ServiceProcess, free_port};

/// The default `limits.max_body_bytes`.
const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// `prefix`, then `row` repeated (comma-separated) to just under the body limit, then `suffix`.
fn filled(prefix: &str, row: &str, separator: &str, suffix: &str) -> Vec<u8> {
    let room = BODY_LIMIT - prefix.len() - suffix.len();
    let count = room / (row.len() + separator.len());
    let mut body = Vec::with_capacity(BODY_LIMIT);
    body.extend_from_slice(prefix.as_bytes());
    for i in 0..count {
        if i > 0 {
            body.extend_from_slice(separator.as_bytes());
        }
        body.extend_from_slice(row.as_bytes());
    }
    body.extend_from_slice(suffix.as_bytes());
    assert!(body.len() <= BODY_LIMIT);
    body
}

/// Sends `body` on a connection of its own; the status the server answered, or `None` when
/// it closed the connection before a status arrived (it may refuse a body it has not read).
async fn send(
    address: String,
    path: &'static str,
    content_type: &'static str,
    body: Vec<u8>,
) -> Option<u16> {
    let mut stream = TcpStream::connect(&address).await.ok()?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: {content_type}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let (mut read, mut write) = stream.split();
    let writing = async {
        let _ = write.write_all(head.as_bytes()).await;
        let _ = write.write_all(&body).await;
    };
    let reading = async {
        let mut response = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(60), read.read_to_end(&mut response)).await;
        response
    };
    let ((), response) = tokio::join!(writing, reading);
    let text = String::from_utf8_lossy(&response);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

#[tokio::test]
async fn bodies_of_millions_of_rows_are_refused_within_a_bounded_memory() {
    let database = fresh_database().await;
    let mut service = ServiceProcess::start(&database.url, free_port(), &[]).await;
    let client = reqwest::Client::new();
    let created = client
        .post(format!("{}/v1/models", service.address))
        .json(&serde_json::json!({"name": "one", "features": ["a"], "outputs": ["red"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let address = service.address.trim_start_matches("http://").to_owned();
    let baseline = service.peak_rss();

    // 8.4 million rows of one number each, where 100,000 are allowed.
    let predict = filled("{\"x\": [", "[1]", ",", "]}");
    let ingest = filled("{\"x\": [[1]], \"y\": [", "[1]", ",", "]}");
    let csv = filled("a,red\n", "1,1", "\n", "\n");
    let mut statuses = Vec::new();
    for (path, content_type, body) in [
        ("/v1/models/one/predict", "application/json", predict),
        ("/v1/models/one/batches", "application/json", ingest),
        ("/v1/models/one/batches", "text/csv", csv),
    ] {
        let sends: Vec<_> = (0..8)
            .map(|_| tokio::spawn(send(address.clone(), path, content_type, body.clone())))
            .collect();
        for sent in sends {
            statuses.push((path, content_type, sent.await.unwrap()));
        }
    }
    let peak = service.peak_rss();
    for (path, content_type, status) in &statuses {
        assert!(
            matches!(status, Some(413 | 503) | None),
            "{path} ({content_type}): {status:?}"
        );
    }
    // Most are read in full and refused for their rows (the others found the budget full).
    let refused_for_rows = statuses.iter().filter(|(_, _, s)| *s == Some(413)).count();
    assert!(refused_for_rows >= 12, "{statuses:?}");
    // The bodies in flight (128 MiB by default) and what their parse may cost: stated in
    // SECURITY.md, measured by bench/hostile.
    let grown = peak.saturating_sub(baseline);
    assert!(
        grown < 640 * 1024 * 1024,
        "peak resident memory grew by {} MiB",
        grown >> 20
    );
    eprintln!(
        "peak RSS grew by {} MiB (baseline {} MiB)",
        grown >> 20,
        baseline >> 20
    );

    // Nothing was stored, and the service still serves.
    let model = get_json(&client, &format!("{}/v1/models/one", service.address)).await;
    assert_eq!(model["pending_batches"], 0, "{model}");
    assert!(service.running().is_ok());
}
