//! mordant: incremental Bayesian linear regression for dye-concentration prediction.
//!
//! The mathematics lives in [`estimator`]; [`evaluate`] reproduces the paper's experiment.

pub mod estimator;
pub mod evaluate;
