//! mordant: incremental Bayesian linear regression for dye-concentration prediction.
//!
//! The mathematics lives in the `mordant-estimator` crate ([`estimator`]); the simulator and the
//! paper's experiment in `mordant-lab`, which only the binary's commands use.
//! The service: validated [`domain`] types, the [`store`] (PostgreSQL), the [`folder`] that
//! learns queued batches, the posterior [`cache`] predict reads, and the [`http`] API, put
//! together by [`startup`].

pub mod auth;
pub mod cache;
pub mod coalesce;
pub mod config;
pub mod domain;
/// The estimator crate, under the name the service has always used for it.
pub use mordant_estimator as estimator;
pub mod folder;
pub mod history;
pub mod http;
pub mod metrics;
pub mod retention;
pub mod startup;
pub mod store;
pub mod successor;
pub mod tasks;
pub mod telemetry;
