//! The API tests again, on the embedded SQLite store: a fresh database file per test. The
//! modules are `tests/api`'s, except the PostgreSQL-only ones (several replicas, a database
//! server stopped under the service) and the reference page, which does not touch the store;
//! `embedded.rs` adds what only the embedded store promises.

// The helpers serve both test binaries; some are for PostgreSQL only.
#[allow(dead_code)]
#[path = "../api/helpers.rs"]
mod helpers;
#[allow(dead_code)]
#[path = "../api/process.rs"]
mod process;

#[path = "../api/auth.rs"]
mod auth;
#[path = "../api/crash.rs"]
mod crash;
#[path = "../api/csv_ingest.rs"]
mod csv_ingest;
#[path = "../api/drift.rs"]
mod drift;
mod embedded;
#[path = "../api/hostile.rs"]
mod hostile;
#[path = "../api/ingest.rs"]
mod ingest;
#[path = "../api/limits.rs"]
mod limits;
#[path = "../api/metrics.rs"]
mod metrics;
#[path = "../api/models.rs"]
mod models;
#[path = "../api/readme.rs"]
mod readme;
#[path = "../readme/mod.rs"]
mod readme_walkthrough;
#[path = "../api/resilience.rs"]
mod resilience;
#[path = "../api/retention.rs"]
mod retention;
#[path = "../api/schemathesis.rs"]
mod schemathesis;
#[path = "../api/validation.rs"]
mod validation;
#[path = "../api/versions.rs"]
mod versions;

/// The store every test of this binary runs the application on.
pub const BACKEND: helpers::Backend = helpers::Backend::Sqlite;
