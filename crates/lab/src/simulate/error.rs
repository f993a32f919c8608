//! The simulator's errors.

use mordant_estimator::EstimatorError;

use super::colour;

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error("invalid simulation options: {0}")]
    Options(String),
    #[error("estimator: {0}")]
    Estimator(#[from] EstimatorError),
    #[error(transparent)]
    Colour(#[from] colour::ColourError),
    #[error("colour kitchen: {0}")]
    Kitchen(#[from] mordant_kitchen::KitchenError),
    #[error("writing CSV: {0}")]
    Csv(#[from] csv::Error),
}
