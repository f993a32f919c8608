// The API test modules, declared once for both test binaries: `tests/api` runs them on
// PostgreSQL, `tests/api_sqlite` on the embedded store (each binary's `BACKEND`). The modules in
// `run_once!` run only in `tests/api`; each group says why.
//
// Every path starts from `../api/` so that it names the same file from either binary.

// Support shared by the tests; each binary uses part of it.
#[allow(dead_code)]
#[path = "../api/helpers.rs"]
mod helpers;
#[allow(dead_code)]
#[path = "../api/process.rs"]
mod process;
#[allow(dead_code)]
#[path = "../api/browser.rs"]
mod browser;
#[path = "../support/database.rs"]
mod test_database;
#[path = "../support/readme.rs"]
mod readme_walkthrough;

#[path = "../api/auth.rs"]
mod auth;
#[path = "../api/console.rs"]
mod console;
#[path = "../api/crash.rs"]
mod crash;
#[path = "../api/csv_ingest.rs"]
mod csv_ingest;
#[path = "../api/drift.rs"]
mod drift;
#[path = "../api/growth.rs"]
mod growth;
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
#[path = "../api/resilience.rs"]
mod resilience;
#[path = "../api/retention.rs"]
mod retention;
#[path = "../api/schemathesis.rs"]
mod schemathesis;
#[path = "../api/spectra.rs"]
mod spectra;
#[path = "../api/succession.rs"]
mod succession;
#[path = "../api/validation.rs"]
mod validation;
#[path = "../api/versions.rs"]
mod versions;

run_once! {
    // Several service processes on one database, which the embedded store refuses by design.
    #[path = "../api/load.rs"]
    mod load;
    #[path = "../api/replicas.rs"]
    mod replicas;
    // The database server stopped under the service.
    #[path = "../api/outage.rs"]
    mod outage;
    // Both stores inside each test.
    #[path = "../api/container.rs"]
    mod container;
    #[path = "../api/copy.rs"]
    mod copy;
    // The binary's environment and the reference page and generated client, which do not
    // depend on the store the service runs on.
    #[path = "../api/client.rs"]
    mod client;
    // Colour differences: computed from the request alone.
    #[path = "../api/colour.rs"]
    mod colour;
    #[path = "../api/docs.rs"]
    mod docs;
    #[path = "../api/environment.rs"]
    mod environment;
}
