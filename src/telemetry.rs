//! Logging: `tracing` with a human format in development and JSON lines in production.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber. `RUST_LOG`, when set, replaces the configured filter.
pub fn init(settings: &LogSettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::NONE)
        .with_writer(std::io::stderr);
    // JSON lines carry every enclosing span, so the request span's `request_id` is on each line
    // logged while serving a request. A second initialisation (tests start several applications) keeps the first subscriber.
    let _ = match settings.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}
