//! The Gaussian posterior of one output's weights, kept in a well-conditioned natural form.

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::triangular_solve::{
    solve_lower_triangular_in_place, solve_upper_triangular_in_place,
};
use faer::{Accum, Mat, MatRef, Par};

use super::EstimatorError;
use super::statistics::mirror_lower;

/// The posterior `N(μ, Σ)` of one output's weights `w` for fixed hyperparameters: prior
/// variances `v` (ARD, `v_j = 0` means basis function `j` is pruned) and noise variance `s`.
///
/// It is stored in natural form on the active set `J = {j : v_j > 0}`:
///
/// * `A = Σ_b λ_b G_b,JJ / s_b`, the data part of the posterior precision,
/// * `c = Σ_b λ_b b_b,J / s_b`, the precision-weighted mean,
///
/// summed over the batches `b` seen, each with the noise variance `s_b` current when it was
/// folded and its forgetting weight `λ_b`. Then, with `D = diag(v_J)`,
///
/// ```text
/// Σ⁻¹ = D⁻¹ + A,    M = I + D^½ A D^½ = L Lᵀ,    Σ = D^½ M⁻¹ D^½,    μ = Σ c.
/// ```
///
/// `M` is symmetric positive definite with every eigenvalue ≥ 1, so its Cholesky factor `L`
/// exists even when some `v_j` are tiny (where `D⁻¹ + A` itself would be hopelessly
/// ill-conditioned). One Bayesian step on a new batch only adds to `A` and `c` (Algorithm 3),
/// and Algorithm 2 starts each iteration from `A = G/s, c = b/s`.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputPosterior {
    prior_variance: Vec<f64>,
    noise_variance: f64,
    active: Vec<usize>,
    precision_data: Mat<f64>,
    natural_mean: Vec<f64>,
    // Derived from the fields above by `Self::from_natural`.
    chol: Mat<f64>,
    mean: Vec<f64>,
}

impl OutputPosterior {
    /// The posterior for prior variances `v` (length p) and noise variance `s` given natural
    /// parameters `A` (|J| × |J|, symmetric) and `c` (|J|) on the active set of `v`.
    pub fn from_natural(
        prior_variance: Vec<f64>,
        noise_variance: f64,
        precision_data: Mat<f64>,
        natural_mean: Vec<f64>,
    ) -> Result<Self, EstimatorError> {
        let active: Vec<usize> = active_set(&prior_variance);
        let n = active.len();
        if precision_data.nrows() != n || precision_data.ncols() != n || natural_mean.len() != n {
            return Err(EstimatorError::Dimension {
                what: "active basis functions",
                expected: n,
                found: natural_mean.len(),
            });
        }
        if !(noise_variance.is_finite() && noise_variance > 0.0) {
            return Err(EstimatorError::NonFinite("noise variance"));
        }
        let sqrt_v: Vec<f64> = active.iter().map(|&j| prior_variance[j].sqrt()).collect();
        let chol = scaled_precision_factor(&sqrt_v, precision_data.as_ref(), None, 1.0)?;
        // μ_J = D^½ M⁻¹ D^½ c = D^½ L⁻ᵀ L⁻¹ (D^½ c)
        let mut t = Mat::from_fn(n, 1, |i, _| sqrt_v[i] * natural_mean[i]);
        solve_lower_triangular_in_place(chol.as_ref(), t.as_mut(), Par::Seq);
        solve_upper_triangular_in_place(chol.transpose(), t.as_mut(), Par::Seq);
        let mut mean = vec![0.0; prior_variance.len()];
        for (i, &j) in active.iter().enumerate() {
            mean[j] = sqrt_v[i] * t[(i, 0)];
        }
        if mean.iter().any(|v| !v.is_finite()) {
            return Err(EstimatorError::NonFinite("posterior mean"));
        }
        Ok(Self {
            prior_variance,
            noise_variance,
            active,
            precision_data,
            natural_mean,
            chol,
            mean,
        })
    }

    /// The posterior of `v`, `s` given statistics `G`, `b` of all rows seen:
    /// `A = G_JJ / s`, `c = b_J / s`.
    pub fn from_statistics(
        prior_variance: Vec<f64>,
        noise_variance: f64,
        g: MatRef<'_, f64>,
        b: &[f64],
    ) -> Result<Self, EstimatorError> {
        let active = active_set(&prior_variance);
        let inv_s = 1.0 / noise_variance;
        let a = Mat::from_fn(active.len(), active.len(), |i, j| {
            g[(active[i], active[j])] * inv_s
        });
        let c = active.iter().map(|&j| b[j] * inv_s).collect();
        Self::from_natural(prior_variance, noise_variance, a, c)
    }

    /// Number of basis functions `p`.
    pub fn dim(&self) -> usize {
        self.prior_variance.len()
    }

    /// Prior variances `v` (0 for a pruned basis function).
    pub fn prior_variance(&self) -> &[f64] {
        &self.prior_variance
    }

    /// Noise variance `s = σ²`.
    pub fn noise_variance(&self) -> f64 {
        self.noise_variance
    }

    /// The active set `J`, ascending.
    pub fn active(&self) -> &[usize] {
        &self.active
    }

    /// Posterior mean `μ` (length p, exactly 0 outside `J`).
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// `A`, the data part of the posterior precision on `J`.
    pub fn precision_data(&self) -> MatRef<'_, f64> {
        self.precision_data.as_ref()
    }

    /// `c = Σ⁻¹ μ` on `J`.
    pub fn natural_mean(&self) -> &[f64] {
        &self.natural_mean
    }

    /// Lower Cholesky factor `L` of `M = I + D^½ A D^½`.
    pub fn cholesky(&self) -> MatRef<'_, f64> {
        self.chol.as_ref()
    }

    pub(crate) fn with_noise_variance(mut self, noise_variance: f64) -> Self {
        self.noise_variance = noise_variance;
        self
    }

    /// `Σ_JJ = D^½ M⁻¹ D^½`, exactly symmetric (|J| × |J|, in the order of [`Self::active`]).
    pub fn covariance_active(&self) -> Mat<f64> {
        let m_inv = inverse_from_factor(self.chol.as_ref());
        let sqrt_v = self.sqrt_prior_variance();
        let mut sigma = Mat::from_fn(m_inv.nrows(), m_inv.ncols(), |i, j| {
            if j <= i {
                sqrt_v[i] * m_inv[(i, j)] * sqrt_v[j]
            } else {
                0.0
            }
        });
        mirror_lower(sigma.as_mut());
        sigma
    }

    /// The full posterior covariance `Σ` (p × p, zero rows and columns outside `J`).
    pub fn covariance(&self) -> Mat<f64> {
        let p = self.dim();
        let mut full = Mat::zeros(p, p);
        let sigma = self.covariance_active();
        for (a, &i) in self.active.iter().enumerate() {
            for (b, &j) in self.active.iter().enumerate() {
                full[(i, j)] = sigma[(a, b)];
            }
        }
        full
    }

    /// `φᵀΣφ = ‖L⁻¹ D^½ φ_J‖²` for one basis vector, non-negative by construction.
    pub fn weight_variance(&self, phi: &[f64]) -> f64 {
        let sqrt_v = self.sqrt_prior_variance();
        let mut t = Mat::from_fn(self.active.len(), 1, |i, _| sqrt_v[i] * phi[self.active[i]]);
        solve_lower_triangular_in_place(self.chol.as_ref(), t.as_mut(), Par::Seq);
        t.col(0).squared_norm_l2()
    }

    /// `φᵢᵀΣφᵢ` for every row of a design matrix at once: one triangular solve with all rows
    /// as right-hand sides, then squared column norms.
    pub fn weight_variances(&self, phi: MatRef<'_, f64>) -> Vec<f64> {
        let sqrt_v = self.sqrt_prior_variance();
        let mut t = Mat::from_fn(self.active.len(), phi.nrows(), |i, r| {
            sqrt_v[i] * phi[(r, self.active[i])]
        });
        solve_lower_triangular_in_place(self.chol.as_ref(), t.as_mut(), Par::Seq);
        (0..phi.nrows())
            .map(|r| t.col(r).squared_norm_l2())
            .collect()
    }

    fn sqrt_prior_variance(&self) -> Vec<f64> {
        self.active
            .iter()
            .map(|&j| self.prior_variance[j].sqrt())
            .collect()
    }
}

/// Indices of the basis functions with a positive prior variance.
pub fn active_set(prior_variance: &[f64]) -> Vec<usize> {
    prior_variance
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0.0)
        .map(|(j, _)| j)
        .collect()
}

/// Lower Cholesky factor of `M = I + scale · D^½ A_II D^½` with `D^½ = diag(sqrt_v)`, where
/// `A_II` is `A` itself (`index = None`) or its rows and columns `index`. Only the lower
/// triangle of `M` is formed.
pub(crate) fn scaled_precision_factor(
    sqrt_v: &[f64],
    a: MatRef<'_, f64>,
    index: Option<&[usize]>,
    scale: f64,
) -> Result<Mat<f64>, EstimatorError> {
    let n = sqrt_v.len();
    let at = |k: usize| index.map_or(k, |ix| ix[k]);
    let mut m = Mat::<f64>::zeros(n, n);
    for c in 0..n {
        let a_col = a.col(at(c));
        let w = sqrt_v[c] * scale;
        let out = m.col_as_slice_mut(c);
        for r in c..n {
            out[r] = sqrt_v[r] * a_col[at(r)] * w;
        }
        out[c] += 1.0;
    }
    cholesky_lower(m)
}

/// The lower Cholesky factor of a symmetric positive definite matrix, computed in place and
/// sequentially: the matrices here are at most a few hundred wide, and the caller already
/// parallelises across outputs.
pub(crate) fn cholesky_lower(mut m: Mat<f64>) -> Result<Mat<f64>, EstimatorError> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
    let n = m.nrows();
    let mut mem = MemBuffer::new(cholesky_in_place_scratch::<f64>(
        n,
        Par::Seq,
        Default::default(),
    ));
    cholesky_in_place(
        m.as_mut(),
        Default::default(),
        Par::Seq,
        MemStack::new(&mut mem),
        Default::default(),
    )
    .map_err(|_| EstimatorError::NotPositiveDefinite)?;
    for j in 1..n {
        for i in 0..j {
            m[(i, j)] = 0.0;
        }
    }
    Ok(m)
}

/// `M⁻¹ = L⁻ᵀ L⁻¹`, exactly symmetric.
pub(crate) fn inverse_from_factor(l: MatRef<'_, f64>) -> Mat<f64> {
    let l_inv = lower_inverse(l);
    let n = l.nrows();
    let mut out = Mat::zeros(n, n);
    triangular::matmul(
        out.as_mut(),
        BlockStructure::TriangularLower,
        Accum::Replace,
        l_inv.transpose(),
        BlockStructure::TriangularUpper,
        l_inv.as_ref(),
        BlockStructure::TriangularLower,
        1.0,
        Par::Seq,
    );
    mirror_lower(out.as_mut());
    out
}

/// `L⁻¹` of a lower triangular `L`.
pub(crate) fn lower_inverse(l: MatRef<'_, f64>) -> Mat<f64> {
    let n = l.nrows();
    let mut out = Mat::zeros(n, n);
    faer::linalg::triangular_inverse::invert_lower_triangular(out.as_mut(), l, Par::Seq);
    out
}
