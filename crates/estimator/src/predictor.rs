//! Predictions, with every output's posterior put once into the form a prediction needs.
//!
//! For output `k` with weighted set `W`, prior factor `R`, the Cholesky factor `L` of
//! `M = I + Rᵀ A_c R` and, with a flat intercept `f`, its centre `m̄` and variance `1/A_ff`
//! (see [`super::OutputPosterior`]),
//!
//! ```text
//! mean_k     = φᵀμ_k
//! variance_k = κ_k (s_k + φᵀΣ_kφ) = κ_k (s_k + ‖F_k x‖² + φ_f²/A_ff),
//! F_k        = L⁻¹ Rᵀ  (r × |W|),      x = φ_W − φ_f m̄   (x = φ_W without a flat intercept),
//! ```
//!
//! with `κ_k = ν/(ν − 2)` under the Student-t predictive and 1 under the plug-in one
//! ([`super::model::Predictive`]). Under [`Predictive::StudentNoise`] (every state fitted since
//! it exists) `κ_k` inflates only what the noise drives, the prior's own part `ΣA₀Σ` of `Σ`
//! staying as it is, and `F_k` is replaced by `Uᵀ F_k`, a factor of `κ_k Σ − (κ_k − 1) ΣA₀Σ`
//! ([`super::OutputPosterior::noise_inflated_factor_trapezoidal`]):
//!
//! ```text
//! variance_k = κ_k (s_k + φ_f²/A_ff) + ‖Uᵀ F_k x‖²
//! ```
//!
//! `F_k` is formed once per model version, so a prediction is
//! a product and a squared norm, with no solve. Forming it explicitly is safe: every eigenvalue
//! of `M` is ≥ 1, so `‖L⁻¹‖ ≤ 1` and the inverse amplifies no rounding error; the variance stays
//! a sum of squares, never below `s_k`, except at a structural zero.
//!
//! What is kept is `F_k`'s (under [`Predictive::StudentNoise`], `Uᵀ F_k`'s) lower trapezoidal
//! equivalent `T_k` (`T_kᵀT_k = F_kᵀF_k`,
//! [`super::OutputPosterior::covariance_factor_trapezoidal`]), its rows' leading parts stored one
//! after the other. Under a diagonal prior `F_k = L⁻¹D^½` is lower triangular and is `T_k`; under
//! the smooth prior `F_k` is dense, and `T_k`, from its QR factorisation, holds about half its
//! entries: a wide model's prediction reads half the memory and does half the products.
//!
//! An output with a noise shape ([`super::noise_shape`], set on the rows of its first fit, or of
//! a refit given every row) has its
//! noise variance `s_k` multiplied by `w_k(mean_k)` row by row, `w_k(μ) = (c_k + |μ|)^{2θ_k} m_k`;
//! the factor's part and the flat intercept's stay as they are.
//!
//! A structural zero is that exception. Where the posterior has pruned the intercept (a
//! zero-inflated output under ARD) and every weighted basis function is 0 in a row (`φ_W = 0`:
//! a dye the lab recipe does not use), the mean is exactly 0 and `φᵀΣφ = 0`; `s_k` is the noise
//! of a dose, which that row does not have. Its variance is instead the output's mean square
//! over the training rows where `φ_W = 0`, bounded from the statistics' zero rows (`S`, `C` of
//! [`super::statistics::BatchStatistics::zero_regime`]) with one pseudo-row at `s_k` (so that
//! rows that were all exactly 0 still leave a positive variance), and never above the variance
//! answered otherwise, when at least one training row is known to be in the regime (`C ≥ 1`):
//!
//! ```text
//! variance_k = min(κ_k s_k, (S + s_k) / (C + 1))      where φ_W = 0, the intercept pruned
//! ```
//!
//! Statistics without zero rows (states stored before them) answer `κ_k s_k` there, as before.
//!
//! An output with alternates ([`super::mixture`]) predicts by its model average: its column of
//! the means is `μ̄`, its noise variance `Σ_j w_j κ_j s_j` (`κ` then 1) and its factor one of
//! `Σ̄` over every member's weighted basis functions and flat intercept, which the factor then
//! carries like any other column ([`super::mixture::average`]).
//!
//! An untrained output predicts 0 with `v_k`, the mean square of its non-zero values: it cannot
//! tell the rows that use it from the rest, unless an input marks them. An output 0 in all `N`
//! rows (a dye no recipe has used yet) has no scale of its own, and `v_k = v̄ / (N + 1)`, the rule
//! of succession at the used outputs' dose scale `v̄ = Σ q_j / Σ N_nz,j`
//! (`ModelState::untrained_variance`). Its markers `U_k` are
//! the basis functions non-zero in a row where the output was (`B_jk ≠ 0`) and in no more rows
//! than the output is non-zero in (`N − z_j ≤ N_nz,k`): a dye's own lab-dip dose, non-zero
//! exactly where the dye was used, is one; a fabric class shared by other rows is not (nothing
//! says that the fabric, rather than the colour, called for the dye). On a row where every
//! marker is 0 it answers, as for a structural zero,
//!
//! ```text
//! variance_k = min(v_k, (S + v_k) / (C + 1))      (S, C over U_k; one pseudo-row at v_k)
//! ```
//!
//! and `v_k` elsewhere, or everywhere when it has no marker. With one pseudo-row that is the
//! rule of succession: no use seen in `C` rows like this one. `B_jk ≠ 0` assumes that the
//! products `φ_j y_k` of the rows do not cancel (doses and concentrations are not negative); a
//! marker lost that way leaves the rows it marks in `S`, which widens the answer.
//!
//! Where an untrained output is zero-inflated (0 in most rows), its mean follows one marker `j`
//! in proportion, `β_j = B_jk / G_jj` (from one row, the dye's bulk dose in proportion to its
//! lab-dip dose, which is all one row can say), and is 0 wherever that marker is 0. With
//! several markers (a row that used two rare dyes marks both with both doses) the evidence of
//! a single-coefficient model picks the one, under a coefficient's prior variance learnt from
//! the trained outputs' own markers (`follow_markers`, `marker_scale`); a least-squares fit
//! on all of them would put a small shading dye on its row's large dose. Its variance stays
//! `v_k`, or the mean's square where that is larger: one row says nothing of how far the
//! proportion holds.
//!
//! A handful of rows (a colour-matching front end asks for one) are computed row by row with
//! plain loops; more rows go sixteen side by side, each row's sums in the order it has alone,
//! so that a row's answer is the same bits however many rows come with it: a client that asks
//! for a row alone and among a thousand gets one answer, and a server can answer several
//! requests' rows at once ([`Predictor::predict_each_row`]), each with its own. A design
//! matrix ([`Predictor::predict_design`]) goes through `faer`'s blocked products instead,
//! whose order of additions differs.

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par};

use super::EstimatorError;
use super::basis::Basis;
use super::evidence::FittedShapes;
use super::model::{ModelState, OutputState, Predictions, Predictive};
use super::noise_shape::NoiseShape;
use super::options::FitOptions;
use super::tail::Tail;

/// Requests of at most this many rows are computed row by row.
const ROW_BY_ROW: usize = 8;

/// Rows computed side by side when rows are predicted together (`Predictor::rows_together`).
const BLOCK: usize = 16;

/// Rows of one task when a wide model's rows are spread over the pool
/// (`Predictor::predict_spread`): two whole blocks, so that the tasks' blocks are
/// [`Predictor::predict`]'s.
const SPREAD: usize = 2 * BLOCK;
const _: () = assert!(SPREAD.is_multiple_of(BLOCK));

/// What predicting needs of a [`ModelState`], built once per version.
#[derive(Clone, Debug)]
pub struct Predictor {
    basis: Basis,
    /// Posterior means, p × m (for an untrained output 0, or a marker followed).
    weights: Mat<f64>,
    outputs: Vec<Term>,
    /// Outputs with alternates whose model average could not be formed, and why.
    unaveraged: Vec<(usize, EstimatorError)>,
    /// The degrees of freedom of the predictive's tail ([`super::tail`]), if any.
    tail: Option<f64>,
}

/// `κ_k` and what it inflates: the whole of `s_k + φᵀΣ_kφ` ([`Predictive::Plugin`], where it is
/// 1, and [`Predictive::Student`]), or all but the prior's part, which the factor then carries
/// ([`Predictive::StudentNoise`], [`super::OutputPosterior::noise_inflated_factor_trapezoidal`]).
#[derive(Clone, Copy, Debug)]
struct Inflation {
    kappa: f64,
    prior_inflated: bool,
}

/// The noise variance `s` of an answer of mean `mean`: `s · w(μ)` under a noise shape.
fn shaped(s: f64, shape: &Option<NoiseShape>, mean: f64) -> f64 {
    shape.map_or(s, |shape| s * shape.weight(mean))
}

impl Inflation {
    /// The predictive variance from the noise variance `s`, the factor's quadratic form and the
    /// flat intercept's part.
    fn variance(self, s: f64, quadratic: f64, flat: f64) -> f64 {
        if self.prior_inflated {
            self.kappa * (s + quadratic + flat)
        } else {
            self.kappa * s + quadratic + self.kappa * flat
        }
    }
}

#[derive(Clone, Debug)]
enum Term {
    Trained {
        noise_variance: f64,
        weighted: Vec<usize>,
        /// `T_k`, a lower trapezoidal factor of `Σ_WW` (`‖T_k x‖ = ‖F_k x‖`), its rows'
        /// non-zeros one after the other.
        factor: Packed,
        /// The flat intercept: its index, `m̄` over `W` and `1/A_ff`.
        flat: Option<(usize, Vec<f64>, f64)>,
        /// `κ_k`, and what it multiplies.
        inflation: Inflation,
        /// The variance of a structural zero (a row with `φ_W = 0`), if the output can predict
        /// one.
        zero: Option<f64>,
        /// How the noise variance grows with the answer, if it does ([`NoiseShape`]).
        shape: Option<NoiseShape>,
    },
    /// Predicts its column of `weights` (0, or a marker followed) with this variance (or the
    /// mean's square where that is larger), or with the second where every marker (the first)
    /// is 0 (see the module's doc).
    Untrained {
        variance: f64,
        unlike: Option<(Vec<usize>, f64)>,
    },
}

impl Predictor {
    /// Forms every output's terms; the outputs in parallel where the basis is wide enough to pay
    /// for it ([`super::PARALLEL_FROM`]: a 700-band output's `F_k` is a triangular solve with
    /// 700 right-hand sides, a 32-band model's whole predictor takes microseconds).
    pub fn new(state: &ModelState) -> Self {
        Self::with_fitted_shapes(state, FittedShapes::none())
    }

    /// [`Self::new`] with the prior shapes of the fit that made `state`
    /// ([`ModelState::fit_with_shapes`] and its kind): the model averages take the ones they
    /// need from there instead of forming them again. Shapes formed on other statistics are
    /// not used.
    pub fn with_fitted_shapes(state: &ModelState, fitted: FittedShapes) -> Self {
        let totals = state.totals();
        let markers: Vec<Option<Vec<usize>>> = state
            .outputs()
            .iter()
            .enumerate()
            .map(|(k, output)| match output {
                OutputState::Untrained => totals.markers(k),
                OutputState::Trained(_) => None,
            })
            .collect();
        // An output with alternates predicts by its model average ([`super::mixture`]); should
        // the average fail to form, by its own posterior alone ([`Self::unaveraged`] says so).
        let shapes = super::mixture::AlternateShapes::with_fitted(state, fitted);
        let average = |k: usize| match &shapes {
            Ok(shapes) => super::mixture::average(state, k, shapes),
            Err(why) => (state.outputs()[k].posterior().is_some()
                && !state.alternates(k).is_empty())
            .then(|| Err(why.clone())),
        };
        let parallel = state.basis().dim() >= super::PARALLEL_FROM;
        let attempts: Vec<Option<Result<super::mixture::Averaged, EstimatorError>>> =
            super::map_outputs(state.outputs().len(), parallel, average);
        let mut unaveraged = Vec::new();
        let averaged: Vec<Option<super::mixture::Averaged>> = attempts
            .into_iter()
            .enumerate()
            .map(|(k, attempt)| match attempt? {
                Ok(averaged) => Some(averaged),
                Err(why) => {
                    unaveraged.push((k, why));
                    None
                }
            })
            .collect();
        let term = |(k, output): (usize, &OutputState)| match (output, &averaged[k]) {
            (OutputState::Trained(_), Some(averaged)) => Term::Trained {
                noise_variance: averaged.noise_variance,
                weighted: averaged.support.clone(),
                factor: Packed::new(averaged.factor.as_ref()),
                flat: None,
                inflation: Inflation {
                    kappa: 1.0,
                    prior_inflated: false,
                },
                zero: None,
                shape: state.noise_shape(k),
            },
            (OutputState::Trained(post), None) => {
                let prior_inflated = match state.predictive() {
                    Predictive::Plugin | Predictive::Student => true,
                    Predictive::StudentNoise => false,
                };
                // γ and the noise-inflated factor both read `L⁻¹`: inverted once for both.
                let l_inv = (!prior_inflated).then(|| post.cholesky_inverse());
                let gamma = match &l_inv {
                    Some(l_inv) => post.effective_parameters_with(l_inv),
                    None => post.effective_parameters(),
                };
                let flat = post.flat().map(|f| (f.index, f.centre.clone(), f.variance));
                let inflation = state.predictive().inflation(
                    state.totals().output(k).informative,
                    usize::from(flat.is_some()),
                    gamma,
                );
                let factor = Packed::new(
                    match &l_inv {
                        Some(l_inv) => {
                            post.noise_inflated_factor_trapezoidal_with(inflation, l_inv)
                        }
                        None => post.covariance_factor_trapezoidal(),
                    }
                    .as_ref(),
                );
                let zero = state
                    .pruned_intercept(post)
                    .then(|| zero_variance(state, k, post.weighted(), post.noise_variance()))
                    .flatten()
                    .map(|v| v.min(inflation * post.noise_variance()));
                Term::Trained {
                    noise_variance: post.noise_variance(),
                    weighted: post.weighted().to_vec(),
                    factor,
                    flat,
                    inflation: Inflation {
                        kappa: inflation,
                        prior_inflated,
                    },
                    zero,
                    shape: state.noise_shape(k),
                }
            }
            (OutputState::Untrained, _) => {
                let variance = state.untrained_variance(k);
                Term::Untrained {
                    variance,
                    unlike: markers[k].clone().and_then(|markers| {
                        let unlike = zero_variance(state, k, &markers, variance)?;
                        Some((markers, unlike.min(variance)))
                    }),
                }
            }
        };
        let outputs: Vec<Term> = super::map_outputs(state.outputs().len(), parallel, |k| {
            term((k, &state.outputs()[k]))
        });
        let mut weights = state.coefficients();
        for (k, averaged) in averaged.iter().enumerate() {
            if let Some(averaged) = averaged {
                for (j, m) in averaged.mean.iter().enumerate() {
                    weights[(j, k)] = *m;
                }
            }
        }
        let followers: Vec<(usize, &[usize])> = markers
            .iter()
            .enumerate()
            .filter(|(k, _)| totals.zero_inflated(*k))
            .filter_map(|(k, markers)| Some((k, markers.as_deref()?)))
            .collect();
        let scale = followers
            .iter()
            .any(|(_, markers)| markers.len() > 1)
            .then(|| marker_scale(state, &weights))
            .flatten();
        for (k, markers) in followers {
            if let Some((j, w)) = follow_markers(state, k, markers, scale) {
                weights[(j, k)] = w;
            }
        }
        Self {
            basis: *state.basis(),
            weights,
            outputs,
            unaveraged,
            tail: state.tail(),
        }
    }

    /// This predictor with the tail `tail`: what [`Self::new`] forms for its state with that
    /// tail, without forming the rest again.
    pub fn with_tail(mut self, tail: Option<Tail>) -> Self {
        self.tail = tail.map(Tail::degrees_of_freedom);
        self
    }

    /// The degrees of freedom of output `k`'s answer of mean `mean` ([`super::tail`]): the
    /// model's tail for a trained output whose mean is not 0, else `None` (a Gaussian).
    pub fn degrees_of_freedom(&self, k: usize, mean: f64) -> Option<f64> {
        match self.outputs.get(k)? {
            Term::Trained { .. } if mean != 0.0 => self.tail,
            _ => None,
        }
    }

    /// The tail ([`super::tail::choose`]) that the rows `x`, `y` (raw inputs and outputs, as a
    /// batch holds them; a wide model's predicted on rayon's pool) choose: the standardised
    /// residuals `(y − μ)/√v` of this predictor's answers for each trained output where neither
    /// the value nor the mean is 0 (a dose, not the exact 0 of a dye a recipe does not use).
    pub fn tail_of_rows(
        &self,
        x: MatRef<'_, f64>,
        y: MatRef<'_, f64>,
    ) -> Result<Option<Tail>, EstimatorError> {
        if y.nrows() != x.nrows() || y.ncols() != self.outputs.len() {
            return Err(EstimatorError::Dimension {
                what: "tail rows",
                expected: self.outputs.len(),
                found: y.ncols(),
            });
        }
        let answers = self.predict_spread(x)?;
        let residuals: Vec<Vec<f64>> = (0..self.outputs.len())
            .filter(|&k| matches!(self.outputs[k], Term::Trained { .. }))
            .map(|k| {
                (0..y.nrows())
                    .map(|i| (y[(i, k)], answers.mean[(i, k)], answers.variance[(i, k)]))
                    .filter(|&(value, mean, variance)| {
                        value != 0.0 && mean != 0.0 && variance > 0.0
                    })
                    .map(|(value, mean, variance)| (value - mean) / variance.sqrt())
                    .collect()
            })
            .collect();
        Ok(super::tail::choose(&residuals))
    }

    /// Whether some answer can have a tail ([`Self::degrees_of_freedom`]).
    pub fn has_tail(&self) -> bool {
        self.tail.is_some()
    }

    /// The outputs with alternates whose model average could not be formed (a factor that
    /// would not factor, a member that is not finite), each with why: they predict by their own
    /// posterior alone, which is what they predicted before the model average.
    pub fn unaveraged(&self) -> &[(usize, EstimatorError)] {
        &self.unaveraged
    }

    /// The basis the predictions are made in.
    pub fn basis(&self) -> &Basis {
        &self.basis
    }

    /// The coefficients of the means, `p × m`: the posterior means, and the marker an untrained
    /// output follows (see the module's doc).
    pub fn weights(&self) -> MatRef<'_, f64> {
        self.weights.as_ref()
    }

    /// The basis function untrained output `k` follows and its proportion (see the module's
    /// doc); `None` for a trained output and for one that predicts 0.
    pub fn follows(&self, k: usize) -> Option<(usize, f64)> {
        if !matches!(self.outputs.get(k)?, Term::Untrained { .. }) {
            return None;
        }
        let column = self.weights.col_as_slice(k);
        column
            .iter()
            .position(|w| *w != 0.0)
            .map(|j| (j, column[j]))
    }

    /// The noise variance inside output `k`'s predictive variance, `κ_k s_k` (the Student-t's
    /// inflation included, as the variance has it; before any noise shape, which multiplies it
    /// by `w(μ)` row by row); `None` while it is untrained.
    pub fn noise_variance(&self, k: usize) -> Option<f64> {
        match self.outputs.get(k)? {
            Term::Trained {
                noise_variance,
                inflation,
                ..
            } => Some(inflation.kappa * noise_variance),
            Term::Untrained { .. } => None,
        }
    }

    /// [`Self::noise_variance`] inside the variance of an answer of mean `mean`: `κ_k s_k` times
    /// `w_k(mean)` under a noise shape, the part of that variance the noise makes.
    pub fn noise_variance_at(&self, k: usize, mean: f64) -> Option<f64> {
        match self.outputs.get(k)? {
            Term::Trained {
                noise_variance,
                inflation,
                shape,
                ..
            } => Some(inflation.kappa * shaped(*noise_variance, shape, mean)),
            Term::Untrained { .. } => None,
        }
    }

    /// Predictions for the raw input rows `x` (rows × d), each row's bit for bit what it gets
    /// alone: a few rows one after the other, more `BLOCK` at a time (`rows_together`).
    pub fn predict(&self, x: MatRef<'_, f64>) -> Result<Predictions, EstimatorError> {
        self.check_columns(x)?;
        if x.nrows() <= ROW_BY_ROW {
            Ok(self.row_by_row(x))
        } else {
            Ok(self.rows_together(x))
        }
    }

    /// Predictions for the raw input rows `x`, each row's bit for bit what [`Self::predict`]
    /// answers for that row alone, however many rows there are: requests of a few rows can be
    /// answered together (every factor read once for all of them) and each still gets its own
    /// answer. [`Self::predict`] of the same rows, without its lean path for a few rows.
    pub fn predict_each_row(&self, x: MatRef<'_, f64>) -> Result<Predictions, EstimatorError> {
        self.check_columns(x)?;
        Ok(self.rows_together(x))
    }

    /// [`Self::predict`] of a wide model's many rows (a fit's own, to read its tail) across
    /// rayon's pool, [`SPREAD`] rows a task: the tasks' blocks of rows are `predict`'s, and each
    /// row's answer is the same bits in any block ([`Self::predict_each_row`]), so the answer is
    /// `predict`'s, from every thread of the pool where one thread would leave the rest idle.
    pub(crate) fn predict_spread(&self, x: MatRef<'_, f64>) -> Result<Predictions, EstimatorError> {
        use rayon::prelude::*;
        let rows = x.nrows();
        if self.basis.dim() < super::PARALLEL_FROM || rows <= SPREAD {
            return self.predict(x);
        }
        self.check_columns(x)?;
        let parts: Vec<Predictions> = (0..rows.div_ceil(SPREAD))
            .into_par_iter()
            .map(|c| {
                let start = c * SPREAD;
                self.rows_together(x.subrows(start, SPREAD.min(rows - start)))
            })
            .collect();
        let mut mean = Mat::zeros(rows, self.outputs.len());
        let mut variance = Mat::zeros(rows, self.outputs.len());
        for (c, part) in parts.iter().enumerate() {
            let n = part.mean.nrows();
            mean.as_mut()
                .subrows_mut(c * SPREAD, n)
                .copy_from(part.mean.as_ref());
            variance
                .as_mut()
                .subrows_mut(c * SPREAD, n)
                .copy_from(part.variance.as_ref());
        }
        Ok(Predictions { mean, variance })
    }

    /// Multiply-adds of one row's prediction: `Σ_k r_k·|W_k|` for the variances (half of it for
    /// a triangular factor) and `p·m` for the means.
    pub fn work_per_row(&self) -> usize {
        let means = self.basis.dim() * self.outputs.len();
        let variances: usize = self
            .outputs
            .iter()
            .map(|term| match term {
                Term::Trained { factor, .. } => factor.values.len(),
                Term::Untrained { .. } => 0,
            })
            .sum();
        means + variances
    }

    fn check_columns(&self, x: MatRef<'_, f64>) -> Result<(), EstimatorError> {
        if x.ncols() != self.basis.features {
            return Err(EstimatorError::Dimension {
                what: "input columns",
                expected: self.basis.features,
                found: x.ncols(),
            });
        }
        Ok(())
    }

    /// Row by row: `φ` of one row in a buffer, then dot products, one row after the other (the
    /// lean path of a request of a few rows; [`Self::rows_together`] gives the same bits).
    fn row_by_row(&self, x: MatRef<'_, f64>) -> Predictions {
        let (rows, m) = (x.nrows(), self.outputs.len());
        let mut mean = Mat::zeros(rows, m);
        let mut variance = Mat::zeros(rows, m);
        // `φ` and its weighted part, centred where the intercept is flat, in one buffer.
        let mut buffer = vec![0.0; 2 * self.basis.dim()];
        let (phi, centred) = buffer.split_at_mut(self.basis.dim());
        for r in 0..rows {
            self.basis.fill_row(x.row(r).iter().copied(), phi);
            for (k, term) in self.outputs.iter().enumerate() {
                mean[(r, k)] = dot(phi, self.weights.col_as_slice(k));
                variance[(r, k)] = match term {
                    Term::Trained {
                        noise_variance,
                        weighted,
                        factor,
                        flat,
                        inflation,
                        zero,
                        shape,
                    } => {
                        let centred = &mut centred[..weighted.len()];
                        let flat_part = match flat {
                            None => {
                                for (c, &j) in centred.iter_mut().zip(weighted) {
                                    *c = phi[j];
                                }
                                0.0
                            }
                            Some((f, centre, v)) => {
                                let pf = phi[*f];
                                for ((c, &j), m) in centred.iter_mut().zip(weighted).zip(centre) {
                                    *c = phi[j] - pf * m;
                                }
                                pf * pf * v
                            }
                        };
                        match zero {
                            Some(v) if centred.iter().all(|c| *c == 0.0) => *v,
                            _ => {
                                let quadratic = quadratic_form(factor, centred);
                                let noise = shaped(*noise_variance, shape, mean[(r, k)]);
                                inflation.variance(noise, quadratic, flat_part)
                            }
                        }
                    }
                    Term::Untrained { variance, unlike } => {
                        untrained(*variance, unlike, |j| phi[j], mean[(r, k)])
                    }
                };
            }
        }
        Predictions { mean, variance }
    }

    /// Row by row as [`Self::row_by_row`], [`BLOCK`] rows at a time, so that `T_k` is read from
    /// memory once for the block, each row's products with it exactly those it has alone
    /// ([`quadratic_forms`], [`dots`]).
    fn rows_together(&self, x: MatRef<'_, f64>) -> Predictions {
        let (rows, m, p) = (x.nrows(), self.outputs.len(), self.basis.dim());
        let mut mean = Mat::zeros(rows, m);
        let mut variance = Mat::zeros(rows, m);
        // Sized for the rows at hand: a single row's buffers stay small allocations.
        let mut phi = vec![0.0; p * rows.min(BLOCK)];
        let mut centred = vec![0.0; p * rows.min(BLOCK)];
        for start in (0..rows).step_by(BLOCK) {
            let block = BLOCK.min(rows - start);
            let phi = &mut phi[..block * p];
            for (b, row) in phi.chunks_exact_mut(p).enumerate() {
                self.basis.fill_row(x.row(start + b).iter().copied(), row);
            }
            let mut rows_phi: [&[f64]; BLOCK] = [&[]; BLOCK];
            for (slot, row) in rows_phi.iter_mut().zip(phi.chunks_exact(p)) {
                *slot = row;
            }
            let rows_phi = &rows_phi[..block];
            for (k, term) in self.outputs.iter().enumerate() {
                let mut means = [0.0; BLOCK];
                dots_dispatched(self.weights.col_as_slice(k), rows_phi, &mut means[..block]);
                for (b, m) in means[..block].iter().enumerate() {
                    mean[(start + b, k)] = *m;
                }
                match term {
                    Term::Trained {
                        noise_variance,
                        weighted,
                        factor,
                        flat,
                        inflation,
                        zero,
                        shape,
                    } => {
                        let w = weighted.len();
                        let mut flat_part = [0.0; BLOCK];
                        for (b, (row, c)) in phi
                            .chunks_exact(p)
                            .zip(centred.chunks_exact_mut(w.max(1)))
                            .enumerate()
                        {
                            let c = &mut c[..w];
                            match flat {
                                None => {
                                    for (c, &j) in c.iter_mut().zip(weighted) {
                                        *c = row[j];
                                    }
                                }
                                Some((f, centre, v)) => {
                                    let pf = row[*f];
                                    for ((c, &j), m) in c.iter_mut().zip(weighted).zip(centre) {
                                        *c = row[j] - pf * m;
                                    }
                                    flat_part[b] = pf * pf * v;
                                }
                            }
                        }
                        // A structural zero's variance needs no quadratic form.
                        let mut active: [&[f64]; BLOCK] = [&[]; BLOCK];
                        let mut which = [0; BLOCK];
                        let mut n = 0;
                        for (b, c) in centred.chunks_exact(w.max(1)).take(block).enumerate() {
                            let c = &c[..w];
                            match zero {
                                Some(v) if c.iter().all(|c| *c == 0.0) => {
                                    variance[(start + b, k)] = *v;
                                }
                                _ => {
                                    active[n] = c;
                                    which[n] = b;
                                    n += 1;
                                }
                            }
                        }
                        let mut quadratic = [0.0; BLOCK];
                        quadratic_forms(factor, &active[..n], &mut quadratic[..n]);
                        for (&b, q) in which[..n].iter().zip(quadratic) {
                            let noise = shaped(*noise_variance, shape, mean[(start + b, k)]);
                            variance[(start + b, k)] = inflation.variance(noise, q, flat_part[b]);
                        }
                    }
                    Term::Untrained {
                        variance: v,
                        unlike,
                    } => {
                        for (b, row) in phi.chunks_exact(p).enumerate() {
                            variance[(start + b, k)] =
                                untrained(*v, unlike, |j| row[j], mean[(start + b, k)]);
                        }
                    }
                }
            }
        }
        Predictions { mean, variance }
    }

    /// Predictions for a design matrix `Φ` (rows × p): the means as one product `Φ W`, the
    /// variances as the squared row norms of `X F_kᵀ`, one product per output.
    pub fn predict_design(&self, phi: MatRef<'_, f64>) -> Predictions {
        let (rows, m) = (phi.nrows(), self.outputs.len());
        let mut mean = Mat::zeros(rows, m);
        matmul(
            mean.as_mut(),
            Accum::Replace,
            phi,
            self.weights.as_ref(),
            1.0,
            Par::Seq,
        );
        let mut variance = Mat::zeros(rows, m);
        for (k, term) in self.outputs.iter().enumerate() {
            match term {
                Term::Trained {
                    noise_variance,
                    weighted,
                    factor,
                    flat,
                    inflation,
                    zero,
                    shape,
                } => {
                    let x = Mat::from_fn(rows, weighted.len(), |r, i| match flat {
                        None => phi[(r, weighted[i])],
                        Some((f, centre, _)) => phi[(r, weighted[i])] - phi[(r, *f)] * centre[i],
                    });
                    let mut t = Mat::zeros(rows, factor.k);
                    matmul(
                        t.as_mut(),
                        Accum::Replace,
                        x.as_ref(),
                        factor.dense_transpose().as_ref(),
                        1.0,
                        Par::Seq,
                    );
                    for r in 0..rows {
                        let flat_part = flat.as_ref().map_or(0.0, |(f, _, v)| {
                            let pf = phi[(r, *f)];
                            pf * pf * v
                        });
                        variance[(r, k)] = match zero {
                            Some(v) if x.row(r).iter().all(|c| *c == 0.0) => *v,
                            _ => inflation.variance(
                                shaped(*noise_variance, shape, mean[(r, k)]),
                                t.row(r).squared_norm_l2(),
                                flat_part,
                            ),
                        };
                    }
                }
                Term::Untrained {
                    variance: v,
                    unlike,
                } => {
                    for r in 0..rows {
                        variance[(r, k)] = untrained(*v, unlike, |j| phi[(r, j)], mean[(r, k)]);
                    }
                }
            }
        }
        Predictions { mean, variance }
    }
}

/// `(S + s) / (C + 1)` for output `k` of `state` with weighted set `used` and noise variance
/// `s` (see the module's doc), if its statistics keep zero rows and at least one row is known
/// to be in the regime (`C ≥ 1`): with none, nothing speaks for a variance below `κ s`.
fn zero_variance(state: &ModelState, k: usize, used: &[usize], s: f64) -> Option<f64> {
    let (sum, count) = state.totals().zero_regime(k, used)?;
    (count >= 1.0).then(|| (sum + s) / (count + 1.0))
}

/// An untrained output's variance on a row with basis functions `phi` and mean `mean`: where
/// every marker is 0 the spread of the rows like it (the second of `unlike`), else `v_k`, or
/// the square of the mean where a followed marker answers more than `v_k`'s scale (a dose
/// several times the one seen: one row says nothing of how far the proportion holds).
#[inline]
fn untrained(
    v: f64,
    unlike: &Option<(Vec<usize>, f64)>,
    phi: impl Fn(usize) -> f64,
    mean: f64,
) -> f64 {
    match unlike {
        Some((support, u)) if support.iter().all(|&j| phi(j) == 0.0) => *u,
        _ => v.max(mean * mean),
    }
}

/// What untrained output `k` with markers `U` follows (see the module's doc): the
/// least-squares proportion `β_j = B_jk / G_jj` of one marker `j`, and with several markers the
/// one whose single-coefficient model explains the output best,
///
/// ```text
/// j = argmax_j  −½ log(1 + a g/s) + a b² / (2 s (s + a g)),    g = G_jj / N_nz,  b = B_jk / N_nz
/// ```
///
/// the log evidence of `y_k = β φ_j + ε`, `β ~ N(0, a)`, `ε ~ N(0, s)`, up to the terms every
/// `j` shares, for one informative row with the rows' mean products (from one row, `log N(y;
/// 0, s + a φ_j²)`: the marker whose scale matches the output's; forgetting, which scales the
/// statistics, leaves the choice alone). `s` is `v_k` times the zero-inflated noise prior's default fraction and `a` is
/// `scale`, what a followed input's coefficient is in this model ([`marker_scale`]); without it
/// several markers cannot be told apart and the output follows none.
fn follow_markers(
    state: &ModelState,
    k: usize,
    markers: &[usize],
    scale: Option<f64>,
) -> Option<(usize, f64)> {
    let totals = state.totals();
    let (g, b, used) = (totals.g(), totals.b(), totals.nonzero()[k]);
    let proportion = |j: usize| (g[(j, j)] > 0.0).then(|| (j, b[(j, k)] / g[(j, j)]));
    match (markers, scale) {
        ([], _) => None,
        ([j], _) => proportion(*j),
        (_, None) => None,
        (_, Some(a)) => {
            let s =
                state.untrained_variance(k) * FitOptions::default().zero_inflated_noise_fraction;
            let evidence = |j: usize| {
                // Per informative row: forgetting scales the statistics, not the choice.
                let (gjj, bjk) = (g[(j, j)] / used, b[(j, k)] / used);
                -0.5 * (a * gjj / s).ln_1p() + a * bjk * bjk / (2.0 * s * (s + a * gjj))
            };
            markers
                .iter()
                .copied()
                .map(|j| (j, evidence(j)))
                .filter(|(_, e)| e.is_finite())
                .max_by(|x, y| x.1.total_cmp(&y.1))
                .and_then(|(j, _)| proportion(j))
        }
    }
}

/// The mean square, over the trained zero-inflated outputs which have markers, of each one's
/// largest posterior coefficient on a marker: the prior variance `a` of
/// [`follow_markers`], learnt from the outputs that have their rows (a dye's bulk dose follows
/// its lab-dip dose at about the same proportion from one dye to the next). `None` without
/// such an output.
fn marker_scale(state: &ModelState, weights: &Mat<f64>) -> Option<f64> {
    let (sum, count) = state
        .outputs()
        .iter()
        .enumerate()
        .filter(|(k, output)| output.posterior().is_some() && state.totals().zero_inflated(*k))
        .filter_map(|(k, _)| {
            let markers = state.totals().markers(k)?;
            Some(
                markers
                    .iter()
                    .map(|&j| weights[(j, k)].powi(2))
                    .fold(0.0, f64::max),
            )
        })
        .filter(|a| *a > 0.0)
        .fold((0.0, 0usize), |(sum, count), a| (sum + a, count + 1));
    (count > 0).then(|| sum / count as f64)
}

/// `Σ aᵢbᵢ` over four interleaved partial sums (which lets the loop use SIMD lanes; the order
/// of the additions is fixed, so the result is deterministic).
#[inline(always)]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0; 4];
    let (a4, a_rest) = a.split_at(a.len() - a.len() % 4);
    let (b4, b_rest) = b.split_at(a4.len());
    for (x, y) in a4.chunks_exact(4).zip(b4.chunks_exact(4)) {
        for l in 0..4 {
            acc[l] += x[l] * y[l];
        }
    }
    finish(acc, a_rest, b_rest)
}

/// The last step of [`dot`]: its partial sums, then the products past the last full chunk.
#[inline(always)]
fn finish(acc: [f64; 4], a_rest: &[f64], b_rest: &[f64]) -> f64 {
    let tail: f64 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `out_r = dot(a, xs_r[..a.len()])` for every `r`, each bit for bit [`dot`]'s: eight rows at
/// a time (then four) share each load of `a`, and their partial sums are independent chains of
/// additions (one [`dot`] waits on four). Where `simd` has four lanes of `f64` (AVX2), a row's
/// four partial sums are one vector: lane `l` adds the products [`dot`]'s `acc[l]` adds, in the
/// same order (a multiply, then an add, never fused).
#[inline(always)]
fn dots<S: pulp::Simd>(simd: S, a: &[f64], xs: &[&[f64]], out: &mut [f64]) {
    let n = a.len();
    let full = n - n % 4;
    let (a4, _) = a[..full].as_chunks::<4>();
    let mut done = 0;
    while xs.len() - done >= 8 {
        let group: [&[f64]; 8] = std::array::from_fn(|j| xs[done + j]);
        let acc = group_sums(simd, a4, group.map(|x| x[..full].as_chunks::<4>().0));
        for (j, acc) in acc.into_iter().enumerate() {
            out[done + j] = finish(acc, &a[full..], &group[j][full..n]);
        }
        done += 8;
    }
    if xs.len() - done >= 4 {
        let group: [&[f64]; 4] = std::array::from_fn(|j| xs[done + j]);
        let acc = group_sums(simd, a4, group.map(|x| x[..full].as_chunks::<4>().0));
        for (j, acc) in acc.into_iter().enumerate() {
            out[done + j] = finish(acc, &a[full..], &group[j][full..n]);
        }
        done += 4;
    }
    for (o, x) in out[done..].iter_mut().zip(&xs[done..]) {
        *o = dot(a, &x[..n]);
    }
}

/// [`dots`] compiled for the widest vectors the CPU has: `out_r = dot(a, xs_r)`, each bit for
/// bit [`dot`]'s.
fn dots_dispatched(a: &[f64], xs: &[&[f64]], out: &mut [f64]) {
    pulp::Arch::new().dispatch(Dots { a, xs, out });
}

/// [`dots_dispatched`]' arguments, for `pulp` to compile its body once per instruction set.
struct Dots<'a> {
    a: &'a [f64],
    xs: &'a [&'a [f64]],
    out: &'a mut [f64],
}

impl pulp::WithSimd for Dots<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        dots(simd, self.a, self.xs, self.out);
    }
}

/// The partial sums of [`dot`] for `G` rows at once: `acc_j[l] = Σ_i a_i[l]·x_j,i[l]`, chunk
/// by chunk, one vector per row where `simd` has four lanes of `f64`.
#[inline(always)]
fn group_sums<S: pulp::Simd, const G: usize>(
    simd: S,
    a4: &[[f64; 4]],
    x: [&[[f64; 4]]; G],
) -> [[f64; 4]; G] {
    let x = x.map(|x| &x[..a4.len()]);
    if S::F64_LANES == 4 {
        let lanes = |v: &[f64; 4]| -> S::f64s { pulp::bytemuck::cast(*v) };
        let mut acc = [simd.splat_f64s(0.0); G];
        for (i, a) in a4.iter().enumerate() {
            let a = lanes(a);
            for (acc, x) in acc.iter_mut().zip(&x) {
                *acc = simd.add_f64s(*acc, simd.mul_f64s(a, lanes(&x[i])));
            }
        }
        acc.map(pulp::bytemuck::cast)
    } else {
        let mut acc = [[0.0; 4]; G];
        for (i, a) in a4.iter().enumerate() {
            for (acc, x) in acc.iter_mut().zip(&x) {
                *acc = add4(*acc, mul4(*a, x[i]));
            }
        }
        acc
    }
}

/// Lane by lane, as one vector instruction where the CPU has four lanes.
#[inline(always)]
fn mul4(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
    [a[0] * b[0], a[1] * b[1], a[2] * b[2], a[3] * b[3]]
}

#[inline(always)]
fn add4(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]]
}

/// A lower trapezoidal `T` (k × w, row `i` zero past column `w − k + i`) stored as its rows'
/// leading parts one after the other, so that a quadratic form reads one contiguous stream
/// (half of a square factor's, and no gaps for the prefetcher to stumble on).
#[derive(Clone, Debug)]
struct Packed {
    values: Vec<f64>,
    k: usize,
    w: usize,
}

impl Packed {
    fn new(t: MatRef<'_, f64>) -> Self {
        let (k, w) = (t.nrows(), t.ncols());
        let mut values = Vec::with_capacity(k * (w - k) + k * (k + 1) / 2);
        for i in 0..k {
            values.extend((0..Self::len(k, w, i)).map(|j| t[(i, j)]));
        }
        Self { values, k, w }
    }

    /// The length of row `i`'s leading part: `w − k + i + 1`.
    fn len(k: usize, w: usize, i: usize) -> usize {
        w - k + i + 1
    }

    /// Row `i`'s leading part, `i` upwards.
    fn rows(&self) -> impl Iterator<Item = &[f64]> {
        self.rows_between(0, self.k)
    }

    /// Rows `first..end`'s leading parts (row `i` starts after `i (w − k + 1) + i (i − 1) / 2`
    /// values).
    fn rows_between(&self, first: usize, end: usize) -> impl Iterator<Item = &[f64]> {
        let start = first * (self.w - self.k + 1) + first * first.saturating_sub(1) / 2;
        let mut rest = &self.values[start..];
        (first..end).map(move |i| {
            let (row, tail) = rest.split_at(Self::len(self.k, self.w, i));
            rest = tail;
            row
        })
    }

    /// `Tᵀ` (w × k) in full, for the blocked products of many rows.
    fn dense_transpose(&self) -> Mat<f64> {
        let mut out = Mat::zeros(self.w, self.k);
        for (i, row) in self.rows().enumerate() {
            out.col_as_slice_mut(i)[..row.len()].copy_from_slice(row);
        }
        out
    }
}

/// `out_r = ‖T x_r‖²` for rows `x_r` of length `w`, summed in the order of a single row's:
/// `Σᵢ (Tᵢ·x_r)²` for `i` upwards, each product over row `i`'s leading part. `T` is taken a
/// panel of rows at a time ([`PANEL_VALUES`]) and the rows [`GROUP`] at a time against it, so
/// that `T` is read from memory once for all the rows and the rows stay in the first-level
/// cache: a 700-band factor row's products with sixteen rows of 701 inputs (90 kB) would
/// otherwise read those rows from the second-level cache for every row of `T`.
fn quadratic_forms(factor: &Packed, xs: &[&[f64]], out: &mut [f64]) {
    // Compiled again for the widest vectors the CPU has (AVX2 where present): the same
    // additions in the same order on wider lanes (Rust never fuses a multiply and an add), so
    // the same bits on every CPU.
    pulp::Arch::new().dispatch(QuadraticForms { factor, xs, out });
}

/// [`quadratic_forms`]' arguments, for `pulp` to compile its body once per instruction set.
struct QuadraticForms<'a> {
    factor: &'a Packed,
    xs: &'a [&'a [f64]],
    out: &'a mut [f64],
}

impl pulp::WithSimd for QuadraticForms<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        quadratic_forms_inline(simd, self.factor, self.xs, self.out);
    }
}

/// Values of `T` in a panel of its rows: read once from memory for all the rows at hand, then
/// from the core's second-level cache once per [`GROUP`].
const PANEL_VALUES: usize = 16 * 1024;

/// Rows whose products with a panel are formed together: four rows of 701 inputs (22 kB) stay
/// in the first-level cache while the panel streams past them, where sixteen would not.
const GROUP: usize = 4;

#[inline(always)]
fn quadratic_forms_inline<S: pulp::Simd>(simd: S, factor: &Packed, xs: &[&[f64]], out: &mut [f64]) {
    out.fill(0.0);
    let mut t = [0.0; GROUP];
    let (k, w) = (factor.k, factor.w);
    let mut first = 0;
    while first < k {
        // Row `first`, and the rows after it while the panel has room for them.
        let mut end = first + 1;
        let mut values = Packed::len(k, w, first);
        while end < k && values + Packed::len(k, w, end) <= PANEL_VALUES {
            values += Packed::len(k, w, end);
            end += 1;
        }
        for (xs, out) in xs.chunks(GROUP).zip(out.chunks_mut(GROUP)) {
            let t = &mut t[..xs.len()];
            for row in factor.rows_between(first, end) {
                dots(simd, row, xs, t);
                for (o, t) in out.iter_mut().zip(t.iter()) {
                    *o += t * t;
                }
            }
        }
        first = end;
    }
}

/// The longest rows of a factor whose quadratic form [`quadratic_form`] takes four at a time:
/// four long rows read at once are four streams from memory, which a factor larger than the
/// last-level cache reads more slowly than the one stream of a row after another.
const GROUPED_ROW: usize = 128;

/// `‖T x‖² = Σᵢ (Tᵢ·x)²` for one row `x`, bit for bit [`quadratic_forms`]' (each product
/// [`dot`]'s, summed for `i` upwards): short rows of `T` four at a time share each load of `x`,
/// and their partial sums are four independent chains of additions, where one [`dot`] after
/// another would wait on each row's short chain in turn; rows longer than [`GROUPED_ROW`] one
/// at a time.
fn quadratic_form(factor: &Packed, x: &[f64]) -> f64 {
    pulp::Arch::new().dispatch(QuadraticForm { factor, x })
}

/// [`quadratic_form`]'s arguments, for `pulp` to compile its body once per instruction set.
struct QuadraticForm<'a> {
    factor: &'a Packed,
    x: &'a [f64],
}

impl pulp::WithSimd for QuadraticForm<'_> {
    type Output = f64;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) -> f64 {
        quadratic_form_inline(simd, self.factor, self.x)
    }
}

#[inline(always)]
fn quadratic_form_inline<S: pulp::Simd>(simd: S, factor: &Packed, x: &[f64]) -> f64 {
    let (k, w) = (factor.k, factor.w);
    let mut values = factor.values.as_slice();
    let mut sum = 0.0;
    let mut i = 0;
    // Rows `i..i + 4`, of lengths `n, n + 1, n + 2, n + 3`, while they are short.
    while i + 4 <= k && Packed::len(k, w, i + 3) <= GROUPED_ROW {
        let n = Packed::len(k, w, i);
        let (a, rest) = values.split_at(n);
        let (b, rest) = rest.split_at(n + 1);
        let (c, rest) = rest.split_at(n + 2);
        let (d, rest) = rest.split_at(n + 3);
        values = rest;
        for t in row_dots(simd, [a, b, c, d], &x[..n + 3]) {
            sum += t * t;
        }
        i += 4;
    }
    for i in i..k {
        let (row, rest) = values.split_at(Packed::len(k, w, i));
        values = rest;
        let t = dot(row, &x[..row.len()]);
        sum += t * t;
    }
    sum
}

/// `dot(row_j, x[..row_j.len()])` for four rows of lengths `n + j`, each bit for bit
/// [`dot`]'s: the chunks of four all four rows have are summed together ([`group_sums`], each
/// chunk of `x` loaded once for the four), then each row's last chunk where it has one more,
/// and its tail, in [`dot`]'s order.
#[inline(always)]
fn row_dots<S: pulp::Simd>(simd: S, rows: [&[f64]; 4], x: &[f64]) -> [f64; 4] {
    let n = rows[0].len();
    let shared = n - n % 4;
    let (x4, _) = x[..shared].as_chunks::<4>();
    let acc = group_sums(simd, x4, rows.map(|row| row[..shared].as_chunks::<4>().0));
    let mut out = [0.0; 4];
    for (j, (row, acc)) in rows.into_iter().zip(acc).enumerate() {
        let full = row.len() - row.len() % 4;
        // At most one chunk more than the first row's: lengths `n..n + 3`.
        let acc = if full > shared {
            let (a, b) = (&row[shared..full], &x[shared..full]);
            add4(
                acc,
                mul4([a[0], a[1], a[2], a[3]], [b[0], b[1], b[2], b[3]]),
            )
        } else {
            acc
        };
        out[j] = finish(acc, &row[full..], &x[full..row.len()]);
    }
    out
}

/// Prediction straight from a state (a server keeps a [`Predictor`] per version instead).
impl ModelState {
    /// Predictions for the raw input rows `x` (rows × d): `mean_k = φᵀμ_k` and
    /// `variance_k = κ_k (s_k + φᵀΣ_kφ)` (the prior's part of `φᵀΣ_kφ` not inflated under
    /// [`Predictive::StudentNoise`]), or a structural zero's variance (see [`Predictor`],
    /// which a server keeps per version). An untrained output predicts 0, or in proportion to
    /// the inputs that marked its uses where its zeros are structural, with the mean square of
    /// its non-zero values (for an output no row has used, the used outputs' scale once in
    /// `N + 1` rows), or less on a row where every input that marked its uses is 0.
    pub fn predict(&self, x: MatRef<'_, f64>) -> Result<Predictions, EstimatorError> {
        Predictor::new(self).predict(x)
    }

    /// Predictions for a design matrix `Φ` (rows × p).
    pub fn predict_design(&self, phi: MatRef<'_, f64>) -> Predictions {
        Predictor::new(self).predict_design(phi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchStatistics, ModelConfig, PriorFamily, Transform};

    /// Along a direction the training rows never spanned, the answer carries the prior's
    /// variance as it is: σ²'s uncertainty inflates the noise and the intercept it drives, not
    /// the prior ([`Predictive::StudentNoise`]). [`Predictive::Student`], which states stored
    /// before it keep, inflates it all; rows and blocks agree under both.
    #[test]
    fn the_student_t_inflates_only_what_the_noise_drives() {
        // 8 rows of 12 inputs, every input a mix of 3 hidden ones: the centred rows span 3
        // directions of 12, and ridge keeps every input (each varies).
        let (n, d) = (8, 12);
        let hidden = Mat::from_fn(n, 3, |i, h| ((i * (h + 2)) as f64 * 0.71 + h as f64).sin());
        let mix = Mat::from_fn(3, d, |h, j| ((h * 5 + j) as f64 * 1.3).cos());
        let x = &hidden * &mix;
        let y = Mat::from_fn(n, 1, |i, _| {
            1.0 + x[(i, 0)] - 0.5 * x[(i, 3)] + 0.05 * (i as f64).sin()
        });
        let basis = Basis::new(d, true, Transform::Identity);
        let config = ModelConfig {
            prior: PriorFamily::Ridge,
            ..ModelConfig::new(basis, 1)
        };
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let noise_state = ModelState::fit(&config, stats).unwrap();
        assert_eq!(noise_state.predictive(), Predictive::StudentNoise);
        let student_state = ModelState::from_parts(
            *noise_state.basis(),
            noise_state.totals().clone(),
            noise_state.outputs().to_vec(),
            Predictive::Student,
            noise_state.fitted_rows().to_vec(),
            vec![Vec::new(); noise_state.outputs().len()],
        )
        .unwrap();
        let post = noise_state.outputs()[0].posterior().unwrap();
        let flat = post.flat().expect("a flat intercept").clone();
        let kappa = Predictive::Student.inflation(
            noise_state.totals().output(0).informative,
            1,
            post.effective_parameters(),
        );
        assert!(kappa > 1.1, "few rows, a real inflation: {kappa}");
        // The weighted mean plus a direction orthogonal to every centred row: a vector less
        // its projection on the rows' span, through the eigenvectors of their Gram.
        let centred = Mat::from_fn(n, d, |i, j| x[(i, j)] - flat.centre[j]);
        let mut z: Vec<f64> = (0..d).map(|j| ((j * j) as f64 * 0.37).sin()).collect();
        let gram = &centred * centred.transpose();
        let eigen = gram.as_ref().self_adjoint_eigen(faer::Side::Lower).unwrap();
        let (values, vectors) = (eigen.S().column_vector(), eigen.U());
        let top = values.iter().fold(0.0_f64, |a, v| a.max(*v));
        let rows_z: Vec<f64> = (0..n)
            .map(|i| (0..d).map(|j| centred[(i, j)] * z[j]).sum())
            .collect();
        for c in (0..n).filter(|&c| values[c] > 1e-10 * top) {
            let weight = (0..n).map(|i| vectors[(i, c)] * rows_z[i]).sum::<f64>() / values[c];
            for (j, z) in z.iter_mut().enumerate() {
                *z -= weight
                    * (0..n)
                        .map(|i| vectors[(i, c)] * centred[(i, j)])
                        .sum::<f64>();
            }
        }
        for i in 0..n {
            let along: f64 = (0..d).map(|j| centred[(i, j)] * z[j]).sum();
            assert!(along.abs() < 1e-9, "row {i}: {along}");
        }
        let probe = Mat::from_fn(1, d, |_, j| flat.centre[j] + z[j]);
        let phi: Vec<f64> = (0..basis.dim())
            .map(|j| if j < d { probe[(0, j)] } else { 1.0 })
            .collect();
        let s = post.noise_variance();
        let total = post.weight_variance(&phi);
        let prior_part = total - flat.variance;
        assert!(
            prior_part > s,
            "the probe is where the prior speaks: {prior_part} against s {s}"
        );
        let many = Mat::from_fn(20, d, |_, j| probe[(0, j)]);
        for (state, expected) in [
            (&noise_state, kappa * (s + flat.variance) + prior_part),
            (&student_state, kappa * (s + total)),
        ] {
            let one = state.predict(probe.as_ref()).unwrap().variance[(0, 0)];
            let blocked = state
                .predict_design(state.basis().design(many.as_ref()).unwrap().as_ref())
                .variance[(0, 0)];
            assert!(
                (one - expected).abs() <= 1e-9 * expected,
                "{one} against {expected}"
            );
            assert!(
                (blocked - one).abs() <= 1e-12 * one,
                "{blocked} against {one}"
            );
        }
        // A training row, where the noise drives part of φᵀΣφ: that part, `(Σφ)ᵀA(Σφ)` on the
        // support, is inflated with s, the rest is not.
        let row = Mat::from_fn(1, d, |_, j| x[(2, j)]);
        let phi: Vec<f64> = (0..basis.dim())
            .map(|j| if j < d { row[(0, j)] } else { 1.0 })
            .collect();
        let (support, sigma, a) = (
            post.active(),
            post.covariance_active(),
            post.precision_data(),
        );
        let f: Vec<f64> = support.iter().map(|&j| phi[j]).collect();
        let sf: Vec<f64> = (0..f.len())
            .map(|i| (0..f.len()).map(|j| sigma[(i, j)] * f[j]).sum())
            .collect();
        let total = dot(&f, &sf);
        let driven: f64 = (0..f.len())
            .map(|i| (0..f.len()).map(|j| sf[i] * a[(i, j)] * sf[j]).sum::<f64>())
            .sum();
        assert!(
            driven > 0.1 * total && driven < total,
            "{driven} of {total}"
        );
        let noise = noise_state.predict(row.as_ref()).unwrap().variance[(0, 0)];
        let expected = kappa * (s + driven) + (total - driven);
        assert!(
            (noise - expected).abs() <= 1e-9 * expected,
            "{noise} against {expected}"
        );
        let student = student_state.predict(row.as_ref()).unwrap().variance[(0, 0)];
        assert!(noise < student, "{noise} against {student}");
    }

    /// A dye used once, in a row that also doses a rare shading dye at a fiftieth of its dose
    /// (both doses mark it), follows its own dose, at the proportion a trained dye's bulk dose
    /// has to its lab dose; and forgetting, which scales every statistic by the rows' weight,
    /// changes neither the marker nor the proportion, down to a weight of 10⁻⁶.
    #[test]
    fn a_followed_marker_is_chosen_alike_however_faded_its_row() {
        let n = 40;
        // Inputs: a dense one, the trained dye's dose, the once-used dye's dose, a shading dose.
        let x = Mat::from_fn(n, 4, |i, j| match j {
            0 => 1.0 + 0.1 * (i % 7) as f64,
            1 if i % 4 == 0 => 0.5 + 0.05 * (i % 9) as f64,
            2 | 3 if i == 5 => [0.0, 0.0, 2.0, 0.04][j],
            _ => 0.0,
        });
        let y = Mat::from_fn(n, 2, |i, k| match k {
            0 => 1.02 * x[(i, 1)],
            _ if i == 5 => 2.1,
            _ => 0.0,
        });
        let basis = Basis::new(4, true, Transform::Identity);
        let config = ModelConfig::new(basis, 2);
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let state = ModelState::fit(&config, stats.clone()).unwrap();
        assert!(state.outputs()[0].posterior().is_some());
        assert!(matches!(state.outputs()[1], OutputState::Untrained));
        let followed = |state: &ModelState| {
            let weights = Predictor::new(state).weights().to_owned();
            (0..weights.nrows())
                .map(|j| weights[(j, 1)])
                .collect::<Vec<_>>()
        };
        let fresh = followed(&state);
        assert_eq!(fresh[3], 0.0, "not the shading dose");
        assert!((fresh[2] - 2.1 / 2.0).abs() < 1e-12, "{fresh:?}");
        for weight in [0.5, 1e-3, 1e-6] {
            let mut faded = stats.clone();
            faded.scale(weight);
            let faded = ModelState::from_parts(
                basis,
                faded,
                state.outputs().to_vec(),
                state.predictive(),
                state.fitted_rows().to_vec(),
                vec![Vec::new(); state.outputs().len()],
            )
            .unwrap();
            let answer = followed(&faded);
            for (a, b) in answer.iter().zip(&fresh) {
                assert!(
                    (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                    "weight {weight}: {answer:?}"
                );
            }
        }
    }

    /// A reproducible stream of numbers in [−½, ½) (a linear congruential generator).
    fn uniform(mut seed: u64) -> impl FnMut() -> f64 {
        move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        }
    }

    /// A block's quadratic forms are each row's own, bit for bit, where the factor is split into
    /// several panels and the rows into several groups, with and without the CPU's vectors:
    /// `Σᵢ dot(Tᵢ, x)²` with `i` upwards.
    #[test]
    fn quadratic_forms_are_each_rows_own_across_panels_and_groups() {
        let mut next = uniform(11);
        for (k, w) in [(0, 5), (3, 3), (200, 200), (64, 701)] {
            let dense = Mat::from_fn(k, w, |i, j| if j <= w - k + i { next() } else { 0.0 });
            let factor = Packed::new(dense.as_ref());
            if k >= 64 {
                assert!(factor.values.len() > PANEL_VALUES, "{k} x {w}: one panel");
            }
            let xs: Vec<Vec<f64>> = (0..BLOCK)
                .map(|_| (0..w).map(|_| next()).collect())
                .collect();
            for rows in 0..=BLOCK {
                let views: Vec<&[f64]> = xs[..rows].iter().map(Vec::as_slice).collect();
                let mut out = vec![f64::NAN; rows];
                quadratic_forms(&factor, &views, &mut out);
                let mut scalar = vec![f64::NAN; rows];
                quadratic_forms_inline(pulp::Scalar::new(), &factor, &views, &mut scalar);
                let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&scalar), bits(&out), "{k} x {w}, {rows} rows");
                for (o, x) in out.iter().zip(&views) {
                    let own: f64 = factor
                        .rows()
                        .map(|row| {
                            let t = dot(row, &x[..row.len()]);
                            t * t
                        })
                        .fold(0.0, |sum, t| sum + t);
                    assert_eq!(o.to_bits(), own.to_bits(), "{k} x {w}, {rows} rows");
                }
            }
        }
    }

    /// One row's quadratic form, short rows of the factor four at a time, is the one
    /// [`quadratic_forms`] gives that row, bit for bit, with and without the CPU's vectors, for
    /// factors whose rows' lengths cross the chunks of four at every offset and [`GROUPED_ROW`].
    #[test]
    fn a_rows_quadratic_form_is_the_blocks_bit_for_bit() {
        let mut next = uniform(13);
        let shapes = [
            (0, 5),
            (1, 1),
            (3, 3),
            (4, 4),
            (5, 9),
            (7, 7),
            (32, 33),
            (33, 33),
            (150, 150),
            (100, 160),
        ];
        let offsets = (1..12).flat_map(|k| [(k, k + 2), (k, k + 3)]);
        for (k, w) in shapes.into_iter().chain(offsets) {
            let dense = Mat::from_fn(k, w, |i, j| if j <= w - k + i { next() } else { 0.0 });
            let factor = Packed::new(dense.as_ref());
            for _ in 0..4 {
                let x: Vec<f64> = (0..w).map(|_| 1e3 * next()).collect();
                let mut block = [f64::NAN];
                quadratic_forms(&factor, &[&x], &mut block);
                let alone = quadratic_form(&factor, &x);
                let scalar = quadratic_form_inline(pulp::Scalar::new(), &factor, &x);
                assert_eq!(alone.to_bits(), block[0].to_bits(), "{k} x {w}");
                assert_eq!(scalar.to_bits(), block[0].to_bits(), "{k} x {w}");
            }
        }
    }

    /// A wide model's rows spread over the pool answer what [`Predictor::predict`] answers, and
    /// what each row alone answers, bit for bit, however the rows fall into tasks (one task and a
    /// row, two whole tasks, three and a part); a row of the wrong width is refused.
    #[test]
    fn a_wide_models_rows_spread_over_the_pool_answer_as_predict_does() {
        let bands = super::super::PARALLEL_FROM + 6;
        let mut next = uniform(29);
        let spectrum = |next: &mut dyn FnMut() -> f64, n: usize, bands: usize| {
            Mat::from_fn(n, bands, |_, j| {
                0.4 + 0.3 * (j as f64 / 9.0).sin() * next() + 0.05 * next()
            })
        };
        let x = spectrum(&mut next, 60, bands);
        let y = Mat::from_fn(60, 2, |i, k| {
            (0..bands)
                .map(|j| x[(i, j)] * ((j + k) as f64 / 11.0).cos())
                .sum::<f64>()
                + 0.01 * next()
        });
        let basis = Basis::spectral(
            bands,
            crate::ReflectanceScale::Fraction,
            bands,
            true,
            Transform::Identity,
        );
        let config = ModelConfig::new(basis, 2);
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let state = ModelState::fit(&config, stats).unwrap();
        let predictor = Predictor::new(&state);
        for n in [SPREAD + 1, 2 * SPREAD, 3 * SPREAD + 5] {
            let probe = spectrum(&mut next, n, bands);
            let spread = predictor.predict_spread(probe.as_ref()).unwrap();
            let whole = predictor.predict(probe.as_ref()).unwrap();
            for i in 0..n {
                let alone = predictor.predict(probe.subrows(i, 1)).unwrap();
                for k in 0..2 {
                    let bits = |p: &Predictions, r: usize| {
                        (p.mean[(r, k)].to_bits(), p.variance[(r, k)].to_bits())
                    };
                    let (ours, context) = (bits(&spread, i), format!("{n} rows, row {i}, {k}"));
                    assert_eq!(
                        ours,
                        bits(&whole, i),
                        "{context}: against the rows together"
                    );
                    assert_eq!(ours, bits(&alone, 0), "{context}: against the row alone");
                }
            }
            assert!((0..n).all(|i| spread.variance[(i, 0)] > 0.0));
        }
        for wrong in [bands - 1, bands + 1] {
            let probe = spectrum(&mut next, 3 * SPREAD + 5, wrong);
            assert!(
                predictor.predict_spread(probe.as_ref()).is_err(),
                "{wrong} columns"
            );
        }
    }

    /// An output that is 0 in every row (a dye no recipe has used yet) predicts 0 with the rule
    /// of succession's second moment at the used outputs' dose scale, `v̄ / (N + 1)`, not with
    /// the noise floor: a recipe may yet use it.
    #[test]
    fn an_output_never_used_answers_the_used_outputs_scale_once_in_n_plus_one_rows() {
        let n = 40;
        let x = Mat::from_fn(n, 2, |i, j| ((i * (j + 2)) as f64 * 0.7).sin());
        // Output 0 is dense, output 1 used in 10 rows, output 2 never.
        let y = Mat::from_fn(n, 3, |i, k| match k {
            0 => 2.0 + x[(i, 0)],
            1 if i % 4 == 0 => 0.5 + 0.1 * x[(i, 1)],
            _ => 0.0,
        });
        let basis = Basis::new(2, true, Transform::Identity);
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let pooled = stats.q().iter().sum::<f64>() / stats.nonzero().iter().sum::<f64>();
        let state = ModelState::fit(&ModelConfig::new(basis, 3), stats).unwrap();
        assert!(
            state.outputs()[2].posterior().is_none(),
            "never used: untrained"
        );
        let probe = Mat::from_fn(2, 2, |i, j| (i + j) as f64 * 0.3);
        let predictions = state.predict(probe.as_ref()).unwrap();
        let expected = pooled / (n as f64 + 1.0);
        for r in 0..2 {
            assert_eq!(predictions.mean[(r, 2)], 0.0);
            let v = predictions.variance[(r, 2)];
            assert!(
                (v - expected).abs() <= 1e-12 * expected,
                "{v} against {expected}"
            );
        }
    }

    /// `dots` is `dot` for every row, bit for bit, at lengths around the chunks of four and for
    /// any number of rows around the groups of four, with and without the CPU's vectors.
    #[test]
    fn dots_are_each_the_single_dot() {
        let mut next = uniform(7);
        for len in [0, 1, 3, 4, 5, 8, 31, 32, 33, 701] {
            let a: Vec<f64> = (0..len).map(|_| next()).collect();
            let xs: Vec<Vec<f64>> = (0..BLOCK)
                .map(|_| (0..len + 2).map(|_| next()).collect())
                .collect();
            for rows in 0..=BLOCK {
                let views: Vec<&[f64]> = xs[..rows].iter().map(Vec::as_slice).collect();
                let mut out = vec![f64::NAN; rows];
                dots(pulp::Scalar::new(), &a, &views, &mut out);
                let mut simd = vec![f64::NAN; rows];
                dots_dispatched(&a, &views, &mut simd);
                assert_eq!(
                    simd.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
                for (o, x) in out.iter().zip(&views) {
                    assert_eq!(
                        o.to_bits(),
                        dot(&a, &x[..len]).to_bits(),
                        "length {len}, {rows} rows"
                    );
                }
            }
        }
    }
}
