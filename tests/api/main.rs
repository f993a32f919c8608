//! API tests: the real application on a random port, a real PostgreSQL, a fresh database per
//! test. `suite.rs` declares the modules; `tests/api_sqlite` runs the same ones on the embedded
//! store.

/// The modules that run in this binary only: all of them here.
macro_rules! run_once {
    ($($module:item)*) => { $($module)* };
}

include!("suite.rs");

/// The store every test of this binary runs the application on.
pub const BACKEND: helpers::Backend = helpers::Backend::Postgres;
