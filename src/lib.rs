//! mordant: incremental Bayesian linear regression for dye-concentration prediction.
//!
//! The mathematics lives in [`estimator`]; [`evaluate`] reproduces the paper's experiment.
//! The service: validated [`domain`] types, the [`store`] (PostgreSQL), the [`folder`] that
//! learns queued batches, the posterior [`cache`] predict reads, and the [`http`] API, put
//! together by [`startup`].

pub mod auth;
pub mod cache;
pub mod config;
pub mod domain;
pub mod estimator;
pub mod evaluate;
pub mod folder;
pub mod history;
pub mod http;
pub mod metrics;
pub mod retention;
pub mod simulate;
pub mod startup;
pub mod store;
pub mod tasks;
pub mod telemetry;
