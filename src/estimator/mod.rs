//! The mathematics of mordant: incremental Bayesian linear regression (Song & Zhang) with ARD.
//!
//! Every output `k` is an independent regression `y_k = w_kᵀφ(x) + ε, ε ~ N(0, s_k)` with prior
//! `w_kj ~ N(0, v_kj)`. A batch is reduced once to its [`BatchStatistics`]; the first fit runs
//! the evidence approximation ([`evidence::evidence`], Algorithm 2), later batches take one
//! Bayesian step ([`incremental::one_step`], Algorithm 3) or a warm-started refit. Everything
//! here is pure: no I/O, no async, no clocks.

pub mod basis;
pub mod codec;
pub mod drift;
pub mod evidence;
pub mod incremental;
pub mod model;
pub mod posterior;
pub mod predictor;
pub mod recipe;
pub mod statistics;

pub use basis::{Basis, ReflectanceScale, Transform};
pub use codec::DecodeError;
pub use model::{Forgetting, ModelConfig, ModelState, OutputState, Predictions, UpdateMethod};
pub use posterior::OutputPosterior;
pub use predictor::Predictor;
pub use statistics::BatchStatistics;

/// Errors of the estimator. Each names what was wrong so the caller can report it.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EstimatorError {
    #[error("wrong number of {what}: expected {expected}, found {found}")]
    Dimension {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("{0} would not be finite")]
    NonFinite(&'static str),
    #[error("the scaled posterior precision is not positive definite (non-finite input?)")]
    NotPositiveDefinite,
    #[error("the model has no posterior yet")]
    Untrained,
    #[error("recipe matching is not available: {0}")]
    NoForwardMap(&'static str),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// The default absolute floor `s_min` of a noise variance.
pub const DEFAULT_NOISE_FLOOR: f64 = 1e-10;

/// Numerical settings of the evidence approximation and of the noise model.
///
/// # Why an output needs informative rows and a noise prior
///
/// On the dyeing data a dye used in one or two rows of the first batch is an output that is
/// exactly 0 in all other rows. Plain Algorithm 2 then fits those rows exactly with a few large
/// coefficients, drives σ² to its floor and believes itself: we saw a prediction of −836,336
/// with a predicted standard deviation of 0.28 where the truth was 2.5. Two rows cannot
/// determine a regression on 126 basis functions, and no evidence maximisation can know that
/// from the data alone. So mordant keeps the method and adds two weak, documented assumptions:
///
/// * an output counts as **untrained** until at least [`Self::min_informative_rows`] rows in
///   which it is non-zero have been seen. An untrained output predicts 0 (the concentration of
///   a dye that is not in the recipe) with the variance of its non-zero values, and is fitted
///   by Algorithm 2 on its accumulated statistics as soon as it has enough rows;
/// * the noise variance has a weakly informative inverse-gamma prior tied to the output's own
///   scale (see [`NoisePrior`]) and a floor at a small fraction of that scale, so σ² cannot
///   collapse to round-off because the zeros of an unused dye are easy to fit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitOptions {
    /// Stop Algorithm 2 when the largest relative change of `v` and `s` is below this.
    pub tol: f64,
    /// Iteration cap of Algorithm 2.
    pub max_iter: usize,
    /// Prune basis function `j` (`v_j ← 0` for good) when `γ_j` falls below this.
    pub prune_gamma: f64,
    /// Absolute floor `s_min` of the noise variance.
    pub noise_floor: f64,
    /// Floor of the noise variance as a fraction of the output's scale `s₀`.
    pub noise_floor_fraction: f64,
    /// Pseudo-rows `ν₀` of the inverse-gamma prior on the noise variance (0 turns it off).
    pub noise_prior_rows: f64,
    /// Prior noise variance as a fraction of the output's scale `s₀`.
    pub noise_prior_fraction: f64,
    /// Non-zero rows an output needs before it is fitted (0 fits every output at once).
    pub min_informative_rows: f64,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            tol: 1e-6,
            max_iter: 100,
            prune_gamma: 1e-6,
            noise_floor: DEFAULT_NOISE_FLOOR,
            noise_floor_fraction: 1e-2,
            noise_prior_rows: 2.0,
            noise_prior_fraction: 1e-2,
            min_informative_rows: 5.0,
        }
    }
}

impl FitOptions {
    /// Algorithm 2 and 3 exactly as published: no noise prior, no scale floor, every output
    /// fitted at once.
    pub fn plain() -> Self {
        Self {
            noise_floor_fraction: 0.0,
            noise_prior_rows: 0.0,
            noise_prior_fraction: 0.0,
            min_informative_rows: 0.0,
            ..Self::default()
        }
    }
}

/// An inverse-gamma prior on one output's noise variance, `s ~ IG(ν₀/2, ν₀ s_p/2)`, whose mode
/// given `RSS` on `dof` residual degrees of freedom is `(RSS + ν₀ s_p)/(dof + ν₀)`: `ν₀`
/// pseudo-rows with mean squared error `s_p`. `s_p` is a fraction of the output's scale
/// `s₀ = q / nonzero`, the mean square of its non-zero values, so the prior speaks in the
/// output's own units and means "the noise is a few percent of a typical concentration".
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoisePrior {
    /// `ν₀`.
    pub rows: f64,
    /// `s_p`.
    pub scale: f64,
    /// The lowest noise variance allowed.
    pub floor: f64,
}

impl NoisePrior {
    /// The prior for output `k` of the statistics `stats`.
    pub fn for_output(stats: &BatchStatistics, k: usize, options: &FitOptions) -> Self {
        let scale = stats.nonzero_mean_square(k);
        Self {
            rows: options.noise_prior_rows,
            scale: options.noise_prior_fraction * scale,
            floor: options
                .noise_floor
                .max(options.noise_floor_fraction * scale),
        }
    }
}
