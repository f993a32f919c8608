//! Predictions, with every output's posterior put once into the form a prediction needs.
//!
//! For output `k` with active set `J`, prior variances `D = diag(v_J)` and the Cholesky factor
//! `L` of `M = I + D^½ A D^½` (see [`OutputPosterior`]),
//!
//! ```text
//! mean_k     = φᵀμ_k
//! variance_k = s_k + φᵀΣ_kφ = s_k + φ_Jᵀ D^½ L⁻ᵀ L⁻¹ D^½ φ_J = s_k + ‖R_k φ_J‖²,
//! R_k        = L⁻¹ D^½   (lower triangular, |J| × |J|).
//! ```
//!
//! `R_k` is formed once per model version, so a prediction is a product and a squared norm,
//! with no solve. Forming it explicitly is safe: every eigenvalue of `M` is ≥ 1, so
//! `‖L⁻¹‖ ≤ 1` and the inverse amplifies no rounding error; the variance stays a sum of
//! squares, never below `s_k`.
//!
//! A handful of rows (a colour-matching front end asks for one) are computed row by row with
//! plain loops; more rows go through `faer`'s blocked products. The two differ only in the
//! order of their additions, and a given request always takes the same one.

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::{Accum, Mat, MatRef, Par};

use super::EstimatorError;
use super::basis::Basis;
use super::model::{ModelState, OutputState, Predictions};
use super::posterior::lower_inverse;

/// Requests of at most this many rows are computed row by row.
const ROW_BY_ROW: usize = 8;

/// What predicting needs of a [`ModelState`], built once per version.
#[derive(Clone, Debug)]
pub struct Predictor {
    basis: Basis,
    /// Posterior means, p × m (a zero column for an untrained output).
    weights: Mat<f64>,
    outputs: Vec<Term>,
}

#[derive(Clone, Debug)]
enum Term {
    Trained {
        noise_variance: f64,
        active: Vec<usize>,
        /// `R_kᵀ` (upper triangular): its column `i` is row `i` of `R_k`, contiguous.
        factor_t: Mat<f64>,
    },
    /// Predicts 0 with this variance.
    Untrained { variance: f64 },
}

impl Predictor {
    pub fn new(state: &ModelState) -> Self {
        let outputs = state
            .outputs()
            .iter()
            .enumerate()
            .map(|(k, output)| match output {
                OutputState::Trained(post) => {
                    let sqrt_v: Vec<f64> = post
                        .active()
                        .iter()
                        .map(|&j| post.prior_variance()[j].sqrt())
                        .collect();
                    let l_inv = lower_inverse(post.cholesky());
                    // R = L⁻¹ D^½: column j of L⁻¹ scaled by √v_j; stored transposed.
                    let n = sqrt_v.len();
                    let factor_t = Mat::from_fn(n, n, |j, i| {
                        if j <= i {
                            l_inv[(i, j)] * sqrt_v[j]
                        } else {
                            0.0
                        }
                    });
                    Term::Trained {
                        noise_variance: post.noise_variance(),
                        active: post.active().to_vec(),
                        factor_t,
                    }
                }
                OutputState::Untrained => Term::Untrained {
                    variance: state.untrained_variance(k),
                },
            })
            .collect();
        Self {
            basis: *state.basis(),
            weights: state.coefficients(),
            outputs,
        }
    }

    /// Predictions for the raw input rows `x` (rows × d).
    pub fn predict(&self, x: MatRef<'_, f64>) -> Result<Predictions, EstimatorError> {
        if x.ncols() != self.basis.features {
            return Err(EstimatorError::Dimension {
                what: "input columns",
                expected: self.basis.features,
                found: x.ncols(),
            });
        }
        if x.nrows() <= ROW_BY_ROW {
            Ok(self.row_by_row(x))
        } else {
            Ok(self.predict_design(self.basis.design(x)?.as_ref()))
        }
    }

    /// Row by row: `φ` of one row in a buffer, then dot products.
    fn row_by_row(&self, x: MatRef<'_, f64>) -> Predictions {
        let (rows, m) = (x.nrows(), self.outputs.len());
        let mut mean = Mat::zeros(rows, m);
        let mut variance = Mat::zeros(rows, m);
        let mut phi = vec![0.0; self.basis.dim()];
        let mut phi_j = Vec::with_capacity(phi.len());
        for r in 0..rows {
            self.basis.fill_row(x.row(r).iter().copied(), &mut phi);
            for (k, term) in self.outputs.iter().enumerate() {
                mean[(r, k)] = dot(&phi, self.weights.col_as_slice(k));
                variance[(r, k)] = match term {
                    Term::Trained {
                        noise_variance,
                        active,
                        factor_t,
                    } => {
                        phi_j.clear();
                        phi_j.extend(active.iter().map(|&j| phi[j]));
                        let quadratic: f64 = (0..phi_j.len())
                            .map(|i| {
                                let t = dot(&factor_t.col_as_slice(i)[..=i], &phi_j[..=i]);
                                t * t
                            })
                            .sum();
                        noise_variance + quadratic
                    }
                    Term::Untrained { variance } => *variance,
                };
            }
        }
        Predictions { mean, variance }
    }

    /// Predictions for a design matrix `Φ` (rows × p): the means as one product `Φ W`, the
    /// variances as the squared row norms of `Φ_J R_kᵀ`, one triangular product per output.
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
                    active,
                    factor_t,
                } => {
                    let phi_j = Mat::from_fn(rows, active.len(), |r, i| phi[(r, active[i])]);
                    let mut t = Mat::zeros(rows, active.len());
                    triangular::matmul(
                        t.as_mut(),
                        BlockStructure::Rectangular,
                        Accum::Replace,
                        phi_j.as_ref(),
                        BlockStructure::Rectangular,
                        factor_t.as_ref(),
                        BlockStructure::TriangularUpper,
                        1.0,
                        Par::Seq,
                    );
                    for r in 0..rows {
                        variance[(r, k)] = noise_variance + t.row(r).squared_norm_l2();
                    }
                }
                Term::Untrained { variance: v } => {
                    for r in 0..rows {
                        variance[(r, k)] = *v;
                    }
                }
            }
        }
        Predictions { mean, variance }
    }
}

/// `Σ aᵢbᵢ` over four interleaved partial sums (which lets the loop use SIMD lanes; the order
/// of the additions is fixed, so the result is deterministic).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0; 4];
    let (a4, a_rest) = a.split_at(a.len() - a.len() % 4);
    let (b4, b_rest) = b.split_at(a4.len());
    for (x, y) in a4.chunks_exact(4).zip(b4.chunks_exact(4)) {
        for l in 0..4 {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f64 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}
