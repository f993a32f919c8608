//! API tests: the real application on a random port, a real PostgreSQL, a fresh database per
//! test. The tests that do not depend on the backend also run on the embedded store
//! (`tests/api_sqlite`).

mod auth;
mod client;
mod container;
mod copy;
mod crash;
mod csv_ingest;
mod docs;
mod drift;
mod environment;
mod helpers;
mod hostile;
mod ingest;
mod limits;
mod load;
mod metrics;
mod models;
mod outage;
mod process;
mod readme;
#[path = "../readme/mod.rs"]
mod readme_walkthrough;
mod replicas;
mod resilience;
mod retention;
mod schemathesis;
mod spectra;
mod validation;
mod versions;

/// The store every test of this binary runs the application on.
pub const BACKEND: helpers::Backend = helpers::Backend::Postgres;
