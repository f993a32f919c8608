//! The API tests again, on the embedded SQLite store: a fresh database file per test. The
//! modules are those `tests/api/suite.rs` declares for both stores; `embedded.rs` adds what only
//! the embedded store promises.

/// The modules that run once, in `tests/api`: none here.
macro_rules! run_once {
    ($($module:item)*) => {};
}

include!("../api/suite.rs");

mod embedded;

/// The store every test of this binary runs the application on.
pub const BACKEND: helpers::Backend = helpers::Backend::Sqlite;
