//! Incremental Bayesian linear regression from sufficient statistics: the estimator of
//! mordant, usable on its own.
//!
//! # The model
//!
//! Every output `k` of a model is an independent regression on a basis `φ(x)` of `p`
//! functions (the inputs, possibly a reflectance spectrum turned into Kubelka–Munk `K/S`, and
//! an intercept: [`Basis`]):
//!
//! ```text
//! y_k = w_kᵀ φ(x) + ε,   ε ~ N(0, s_k),   w_k ~ N(0, V_k)
//! ```
//!
//! The prior covariance `V_k` belongs to a family ([`PriorFamily`]): ARD, one variance per
//! basis function (Tipping 2001, the family of Song & Zhang); ridge, one shared variance; or
//! smooth, a Gaussian process over a spectrum's coefficient curve (a Matérn-3/2 covariance along
//! the wavelengths). Its hyperparameters and `s_k` are set by the evidence (MacKay 1992), and
//! `auto` lets the evidence choose the family per output. The intercept has a flat prior,
//! exactly what centring does, except where an output's zeros are structural (see below).
//!
//! # Notation
//!
//! A batch of rows is reduced once to its statistics ([`BatchStatistics`]): `G = ΦᵀΦ` (`p × p`),
//! `B = ΦᵀY` (`p × m`), `q_k = Σ y_k²`, `N` rows, and per output the count of its non-zero
//! values. Statistics of two batches add, so nothing needs a row twice:
//!
//! * the first fit runs the evidence approximation on them ([`evidence::evidence`], Algorithm 2
//!   of Song & Zhang);
//! * each later batch takes one Bayesian step from the current posterior
//!   ([`incremental::one_step`], Algorithm 3): the posterior after it is the posterior of all
//!   rows under the same hyperparameters;
//! * [`ModelState::refit`] runs Algorithm 2 again on all the statistics kept.
//!
//! The posterior of output `k` is `N(μ_k, Σ_k)` with `Σ_k = (G/s_k + V_k⁻¹)⁻¹` and
//! `μ_k = Σ_k B_k / s_k`; a prediction's variance is `s_k + φᵀ Σ_k φ`, or with `s_k` integrated
//! over its posterior, the noise and the part of `φᵀ Σ_k φ` it drives inflated by the
//! Student-t's `ν/(ν − 2)` ([`model::Predictive`]).
//!
//! # Example
//!
//! Learn two batches of a noisy line, the second by one step, and predict with the variance:
//!
//! ```
//! use faer::Mat;
//! use mordant_estimator::{Basis, BatchStatistics, ModelConfig, ModelState, Transform};
//!
//! // y = 1 + 2x plus a little noise, in two batches of 20 rows.
//! let batch = |from: usize| {
//!     let x = Mat::from_fn(20, 1, |i, _| (from + i) as f64 / 40.0);
//!     let y = Mat::from_fn(20, 1, |i, _| {
//!         1.0 + 2.0 * x[(i, 0)] + 0.01 * (((from + i) * 7919 % 13) as f64 - 6.0)
//!     });
//!     (x, y)
//! };
//! let basis = Basis::new(1, true, Transform::Identity);
//! let config = ModelConfig::new(basis, 1);
//!
//! let (x, y) = batch(0);
//! let first = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
//! let state = ModelState::fit(&config, first).unwrap();
//!
//! let (x, y) = batch(20);
//! let second = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
//! let state = state.update(&config, &second).unwrap();
//!
//! let at = Mat::from_fn(1, 1, |_, _| 0.5);
//! let predicted = state.predict(at.as_ref()).unwrap();
//! assert!((predicted.mean[(0, 0)] - 2.0).abs() < 0.02);
//! // The predictive variance is at least the noise variance (here about 0.037²).
//! let noise = state.noise_variances()[0].unwrap();
//! assert!(predicted.variance[(0, 0)] >= noise && predicted.variance[(0, 0)] < 0.01);
//! ```
//!
//! `examples/spectrum.rs` fits a smooth prior to a simulated spectrum.
//!
//! # An instrument replaced
//!
//! [`transfer`] learns, from samples read by both an old and a new spectrophotometer, what the
//! old one would read from the new one's reading (a Bayesian regression per old band on the
//! new bands near it, from additive statistics of the pairs), answers for a new reading through
//! a model of the old instrument with the map's uncertainty added, combines that answer with a
//! model of the new instrument's own, and says when the new instrument's model stands alone.
//!
//! Everything here is pure: no I/O, no async, no clocks. A state encodes to a versioned,
//! checksummed byte string ([`codec`]) for whoever stores it.
//!
//! # References
//!
//! * Song, Zhang: *Incremental learning for Bayesian linear regression and its application in
//!   dyeing industry* (Algorithms 2 and 3). Two bugs of the authors' published code are not
//!   copied: it stores `N ×` the posterior covariance (Algorithm 2 divides `G` by `N` and never
//!   undoes it), and its one-step noise update takes the residual sum where the mean belongs.
//! * Tipping (2001): *Sparse Bayesian learning and the relevance vector machine*, JMLR 1.
//! * MacKay (1992): *Bayesian interpolation*, Neural Computation 4(3).
//! * Rasmussen, Williams (2006): *Gaussian processes for machine learning* (the Matérn kernel).
//! * Kubelka, Munk (1931): *Ein Beitrag zur Optik der Farbanstriche*; `K/S = (1 − R)²/(2R)`.
//! * Wang, Veltkamp, Kowalski (1991): *Multivariate instrument standardization*, Analytical
//!   Chemistry 63 (piecewise direct standardisation, the chemometric form of [`transfer`]'s map).
//! * Chan, Golub, LeVeque (1979): *Updating formulae and a pairwise algorithm for computing
//!   sample variances* (how [`transfer::TransferStatistics`] merge).

pub mod basis;
pub mod build_up;
pub mod codec;
pub mod drift;
mod error;
pub mod evidence;
pub mod first_fit;
pub mod forward;
pub mod grid;
pub mod incremental;
mod leave_one_out;
pub mod mixture;
pub mod model;
pub mod noise_shape;
mod options;
pub mod posterior;
pub mod predictor;
pub mod prior;
pub mod recipe;
pub mod statistics;
pub mod succession;
pub mod tail;
pub mod transfer;

pub use basis::{Basis, ReflectanceScale, Saunderson, Transform};
pub use error::DecodeError;
pub use error::EstimatorError;
pub use evidence::FittedShapes;
pub use model::{Forgetting, ModelConfig, ModelState, OutputState, Predictions, UpdateMethod};
pub use noise_shape::NoiseShape;
pub use options::{DEFAULT_NOISE_FLOOR, FitOptions, NoisePrior};
pub use posterior::OutputPosterior;
pub use predictor::Predictor;
pub use prior::{FittedFamily, Prior, PriorFamily};
pub use statistics::BatchStatistics;

/// Basis functions from which forming the outputs' posteriors or predictor terms one rayon
/// task each pays: below it a task costs more than its work (a 32-band model's whole predictor
/// takes microseconds), above it one output's is a dense factorisation or solve. A server may
/// use it the same way: below it, a one-step update is not worth a hop to another thread.
pub const PARALLEL_FROM: usize = 64;

/// How many parts the estimator's parallel decompositions (faer's symmetric eigensolver and its
/// pivoted Cholesky factor) split their work into. They sum their reductions part by part, so
/// their bits depend on that count: at `Par::rayon(0)`, one part per thread of the pool, a state
/// folded on one machine would replay to other bits on a machine with another number of cores,
/// and a thin version's digest would refuse it. A fixed count gives the same bits on any number
/// of threads; two keeps those of the two-core machines that stored states before it was fixed.
/// A decomposition then keeps at most two cores busy; a fit keeps the rest busy with its other
/// shapes and outputs.
pub(crate) const DECOMPOSITION_SPLIT: usize = 2;

/// [`DECOMPOSITION_SPLIT`] as faer's parallelism, for every decomposition that is not
/// sequential.
pub(crate) fn decomposition_par() -> faer::Par {
    faer::Par::rayon(DECOMPOSITION_SPLIT)
}

/// `A B` in [`DECOMPOSITION_SPLIT`] parts. Where the product has one column and `A` is stored
/// by columns, faer sums it in one part per thread it is given (from 65,536 entries of `A` on),
/// so at `Par::rayon(0)` its bits would depend on the pool's size; a fixed count gives the bits
/// that a two-thread pool gave before.
pub(crate) fn product(a: faer::MatRef<'_, f64>, b: faer::MatRef<'_, f64>) -> faer::Mat<f64> {
    let mut out = faer::Mat::zeros(a.nrows(), b.ncols());
    faer::linalg::matmul::matmul(
        out.as_mut(),
        faer::Accum::Replace,
        a,
        b,
        1.0,
        decomposition_par(),
    );
    out
}

/// `f(k)` for every output `k < outputs`, in order: one rayon task each where `parallel`, else
/// on the calling thread. A rayon call from outside its pool hands the work to the pool's
/// threads and sleeps until they are done; for a narrow output's few microseconds of work those
/// wake-ups cost more than the work, and on a busy machine they wait for a core.
pub(crate) fn map_outputs<T, F>(outputs: usize, parallel: bool, f: F) -> Vec<T>
where
    T: Send,
    F: Fn(usize) -> T + Sync + Send,
{
    use rayon::prelude::*;
    if parallel {
        (0..outputs).into_par_iter().map(f).collect()
    } else {
        (0..outputs).map(f).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::map_outputs;

    /// Both ways give every output's value in order; only the parallel one enters rayon's pool,
    /// so a narrow model's step never waits for the pool's threads.
    #[test]
    fn outputs_are_mapped_in_order_and_off_the_pool_unless_parallel() {
        for parallel in [false, true] {
            let mapped = map_outputs(9, parallel, |k| (k * k, rayon::current_thread_index()));
            let values: Vec<usize> = mapped.iter().map(|(v, _)| *v).collect();
            assert_eq!(values, (0..9).map(|k| k * k).collect::<Vec<_>>());
            assert!(
                mapped.iter().all(|(_, pool)| pool.is_some() == parallel),
                "parallel = {parallel}: {mapped:?}"
            );
        }
    }
}
