//! The Gaussian posterior of one output's weights, kept in a well-conditioned natural form.

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::triangular_solve::{
    solve_lower_triangular_in_place, solve_upper_triangular_in_place,
};
use faer::{Accum, Mat, MatRef, Par};

use super::EstimatorError;
use super::prior::{Factor, Prior, symmetric_eigen};
use super::statistics::mirror_lower;

/// The posterior `N(μ, Σ)` of one output's weights `w` for a fixed prior (see [`Prior`]: prior
/// variances `v`, `∞` for the flat intercept, `0` for pruned basis functions, and the factor
/// `R` with `S_WW = R Rᵀ` over the weighted set `W`) and noise variance `s`.
///
/// It is stored in natural form on the support `J = {j : v_j > 0}` (the weighted set and the
/// flat intercept `f`, if any):
///
/// * `A = Σ_b λ_b G_b,JJ / s_b`, the data part of the posterior precision,
/// * `c = Σ_b λ_b b_b,J / s_b`, the precision-weighted mean,
///
/// summed over the batches `b` seen, each with the noise variance `s_b` current when it was
/// folded and its forgetting weight `λ_b`. The flat intercept has no prior precision, so it is
/// eliminated exactly (its Schur complement), which is centring by the weighted means
/// `m̄ = a_f / A_ff` (`a_f` the intercept's column of `A` on `W`):
///
/// ```text
/// A_c = A_WW − a_f a_fᵀ / A_ff,       c_c = c_W − a_f c_f / A_ff,
/// M = I + Rᵀ A_c R = L Lᵀ,            Σ_WW = R M⁻¹ Rᵀ,       μ_W = Σ_WW c_c,
/// μ_f = (c_f − a_fᵀ μ_W) / A_ff,      Σ_fW = −m̄ᵀ Σ_WW,      Σ_ff = 1/A_ff + m̄ᵀ Σ_WW m̄.
/// ```
///
/// Without a flat intercept `A_c = A_WW`, `c_c = c_W`. `M` is symmetric positive definite with
/// every eigenvalue ≥ 1, so its Cholesky factor `L` exists even when some prior variances are
/// tiny (where `S⁻¹ + A` itself would be hopelessly ill-conditioned). One Bayesian step on a new
/// batch only adds to `A` and `c` (Algorithm 3), and Algorithm 2 starts each iteration from
/// `A = G/s, c = b/s`.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputPosterior {
    prior: Prior,
    noise_variance: f64,
    support: Vec<usize>,
    precision_data: Mat<f64>,
    natural_mean: Vec<f64>,
    // Derived from the fields above by `Self::from_natural`.
    factor: Factor,
    weighted: Vec<usize>,
    flat: Option<Flat>,
    chol: Mat<f64>,
    mean: Vec<f64>,
}

/// The flat intercept's part of the posterior.
#[derive(Clone, Debug, PartialEq)]
pub struct Flat {
    /// Its basis function.
    pub index: usize,
    /// `1 / A_ff`, the variance of the intercept at `φ_W = m̄`.
    pub variance: f64,
    /// `m̄ = a_f / A_ff` over the weighted set: the (noise-weighted) mean of the basis functions.
    pub centre: Vec<f64>,
}

impl OutputPosterior {
    /// The posterior for `prior` (a [`Prior`], or prior variances `v` of length p for an ARD
    /// prior) and noise variance `s` given natural parameters `A` (|J| × |J|, symmetric) and
    /// `c` (|J|) on the support of the prior.
    pub fn from_natural(
        prior: impl Into<Prior>,
        noise_variance: f64,
        precision_data: Mat<f64>,
        natural_mean: Vec<f64>,
    ) -> Result<Self, EstimatorError> {
        let prior = prior.into();
        prior.validate()?;
        let factor = prior.factor()?;
        Self::with_factor(prior, factor, noise_variance, precision_data, natural_mean)
    }

    /// [`Self::from_natural`] with the prior's factor already computed.
    pub(crate) fn with_factor(
        prior: Prior,
        factor: Factor,
        noise_variance: f64,
        precision_data: Mat<f64>,
        natural_mean: Vec<f64>,
    ) -> Result<Self, EstimatorError> {
        prior.validate()?;
        let support = active_set(&prior.variance);
        let n = support.len();
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
        let weighted = prior.weighted();
        if factor.rows() != weighted.len() {
            return Err(EstimatorError::Dimension {
                what: "prior factor rows",
                expected: weighted.len(),
                found: factor.rows(),
            });
        }
        // Positions in the support.
        let pos = |j: usize| support.binary_search(&j).unwrap_or(usize::MAX);
        let w_pos: Vec<usize> = weighted.iter().map(|&j| pos(j)).collect();
        let (a_c, c_c, flat) = match prior.flat() {
            None => (
                Mat::from_fn(n, n, |i, k| precision_data[(w_pos[i], w_pos[k])]),
                w_pos.iter().map(|&i| natural_mean[i]).collect::<Vec<_>>(),
                None,
            ),
            Some(f) => {
                let fp = pos(f);
                let a_ff = precision_data[(fp, fp)];
                if !(a_ff > 0.0 && a_ff.is_finite()) {
                    return Err(EstimatorError::NotPositiveDefinite);
                }
                let a_f: Vec<f64> = w_pos.iter().map(|&i| precision_data[(i, fp)]).collect();
                let centre: Vec<f64> = a_f.iter().map(|a| a / a_ff).collect();
                let a_c = Mat::from_fn(w_pos.len(), w_pos.len(), |i, k| {
                    precision_data[(w_pos[i], w_pos[k])] - a_f[i] * centre[k]
                });
                let c_f = natural_mean[fp];
                let c_c = w_pos
                    .iter()
                    .zip(&centre)
                    .map(|(&i, m)| natural_mean[i] - m * c_f)
                    .collect();
                (
                    a_c,
                    c_c,
                    Some(Flat {
                        index: f,
                        variance: 1.0 / a_ff,
                        centre,
                    }),
                )
            }
        };
        let mut m = factor.congruence(a_c.as_ref());
        for i in 0..m.nrows() {
            m[(i, i)] += 1.0;
        }
        // Rare: the congruence is formed again rather than copied on every posterior.
        let chol = match cholesky_lower(m) {
            Ok(chol) => chol,
            Err(_) => cholesky_lower(unit_plus_psd_part(factor.congruence(a_c.as_ref()))?)?,
        };
        // μ_W = R L⁻ᵀ L⁻¹ Rᵀ c_c
        let mut t = Mat::zeros(chol.nrows(), 1);
        for (i, v) in factor.t_mul(&c_c).into_iter().enumerate() {
            t[(i, 0)] = v;
        }
        solve_lower_triangular_in_place(chol.as_ref(), t.as_mut(), Par::Seq);
        solve_upper_triangular_in_place(chol.transpose(), t.as_mut(), Par::Seq);
        let u: Vec<f64> = (0..t.nrows()).map(|i| t[(i, 0)]).collect();
        let mu_w = factor.mul(&u);
        let mut mean = vec![0.0; prior.dim()];
        for (&j, m) in weighted.iter().zip(&mu_w) {
            mean[j] = *m;
        }
        if let Some(flat) = &flat {
            let fp = pos(flat.index);
            let cross: f64 = w_pos
                .iter()
                .zip(&mu_w)
                .map(|(&i, m)| precision_data[(i, fp)] * m)
                .sum();
            mean[flat.index] = (natural_mean[fp] - cross) * flat.variance;
        }
        if mean.iter().any(|v| !v.is_finite()) {
            return Err(EstimatorError::NonFinite("posterior mean"));
        }
        Ok(Self {
            prior,
            noise_variance,
            support,
            precision_data,
            natural_mean,
            factor,
            weighted,
            flat,
            chol,
            mean,
        })
    }

    /// The posterior of `prior`, `s` given statistics `G`, `b` of all rows seen:
    /// `A = G_JJ / s`, `c = b_J / s`.
    pub fn from_statistics(
        prior: impl Into<Prior>,
        noise_variance: f64,
        g: MatRef<'_, f64>,
        b: &[f64],
    ) -> Result<Self, EstimatorError> {
        let prior = prior.into();
        prior.validate()?;
        let factor = prior.factor()?;
        Self::from_statistics_with_factor(prior, factor, noise_variance, g, b)
    }

    pub(crate) fn from_statistics_with_factor(
        prior: Prior,
        factor: Factor,
        noise_variance: f64,
        g: MatRef<'_, f64>,
        b: &[f64],
    ) -> Result<Self, EstimatorError> {
        let support = active_set(&prior.variance);
        let inv_s = 1.0 / noise_variance;
        let a = Mat::from_fn(support.len(), support.len(), |i, j| {
            g[(support[i], support[j])] * inv_s
        });
        let c = support.iter().map(|&j| b[j] * inv_s).collect();
        Self::with_factor(prior, factor, noise_variance, a, c)
    }

    /// Number of basis functions `p`.
    pub fn dim(&self) -> usize {
        self.prior.dim()
    }

    /// The prior.
    pub fn prior(&self) -> &Prior {
        &self.prior
    }

    /// Prior variances `v` (0 for a pruned basis function, `∞` for the flat intercept).
    pub fn prior_variance(&self) -> &[f64] {
        &self.prior.variance
    }

    /// Noise variance `s = σ²`.
    pub fn noise_variance(&self) -> f64 {
        self.noise_variance
    }

    /// The support `J = {j : v_j > 0}` (the weighted basis functions and the flat intercept),
    /// ascending: where `A`, `c` and [`Self::covariance_active`] live.
    pub fn active(&self) -> &[usize] {
        &self.support
    }

    /// The weighted basis functions `W`, ascending.
    pub fn weighted(&self) -> &[usize] {
        &self.weighted
    }

    /// The flat intercept's part, if the prior has one.
    pub fn flat(&self) -> Option<&Flat> {
        self.flat.as_ref()
    }

    /// Posterior mean `μ` (length p, exactly 0 where pruned).
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

    /// Lower Cholesky factor `L` of `M = I + Rᵀ A_c R`.
    pub fn cholesky(&self) -> MatRef<'_, f64> {
        self.chol.as_ref()
    }

    /// The prior's factor `R` over the weighted set.
    pub fn factor(&self) -> &Factor {
        &self.factor
    }

    /// `γ = r − tr(M⁻¹)`, the number of weighted parameters the data determine (MacKay's
    /// well-determined parameters), not counting the flat intercept.
    pub fn effective_parameters(&self) -> f64 {
        self.effective_parameters_with(&self.cholesky_inverse())
    }

    /// `L⁻¹`, for a caller that needs both [`Self::effective_parameters_with`] and
    /// [`Self::noise_inflated_factor_trapezoidal_with`] and would otherwise invert `L` twice.
    pub(crate) fn cholesky_inverse(&self) -> CholeskyInverse {
        CholeskyInverse(lower_inverse(self.chol.as_ref()))
    }

    /// [`Self::effective_parameters`] from `L⁻¹` (`tr(M⁻¹) = ‖L⁻¹‖²_F`).
    pub(crate) fn effective_parameters_with(&self, l_inv: &CholeskyInverse) -> f64 {
        let l_inv = &l_inv.0;
        let trace: f64 = (0..l_inv.ncols())
            .map(|j| l_inv.col(j).squared_norm_l2())
            .sum();
        (l_inv.nrows() as f64 - trace).max(0.0)
    }

    pub(crate) fn with_noise_variance(mut self, noise_variance: f64) -> Self {
        self.noise_variance = noise_variance;
        self
    }

    /// `F = L⁻¹ Rᵀ` (r × |W|): `Σ_WW = Fᵀ F`.
    pub fn covariance_factor(&self) -> Mat<f64> {
        let r = self.factor.to_dense();
        let mut f = r.transpose().to_owned();
        solve_lower_triangular_in_place(self.chol.as_ref(), f.as_mut(), Par::Seq);
        f
    }

    /// A lower trapezoidal factor of `Σ_WW`: `T` (k × |W|, `k = min(r, |W|)`) with
    /// `TᵀT = FᵀF = Σ_WW`, row `i` zero past column `|W| − k + i`, so that `φᵀΣφ = ‖T x‖²`
    /// takes about half the products `‖F x‖²` does when `F` is dense (a smooth prior's).
    /// With a diagonal prior factor `R`, `F` is lower triangular already and is `T`. Otherwise,
    /// from the QR factorisation of `F` with its columns in reverse order, `F J = Q U` (`U`
    /// upper trapezoidal, `J` the reversal), `T = J U J`: `‖T x‖ = ‖U J x‖ = ‖F x‖`, by
    /// Householder reflections, which are backward stable.
    pub fn covariance_factor_trapezoidal(&self) -> Mat<f64> {
        self.trapezoidal(self.covariance_factor())
    }

    /// A lower trapezoidal factor, as [`Self::covariance_factor_trapezoidal`], of the weights'
    /// part of the predictive variance when σ²'s uncertainty inflates only what the noise
    /// drives ([`super::model::Predictive::StudentNoise`]): with `Σ_WW = ΣA₀Σ + ΣA_cΣ` (the
    /// prior's part and the data's),
    ///
    /// ```text
    /// κ ΣA_cΣ + ΣA₀Σ = κ Σ_WW − (κ − 1) R M⁻² Rᵀ = Fᵀ C F,     C = κ I − (κ − 1) L⁻¹ L⁻ᵀ
    /// ```
    ///
    /// (`ΣA₀Σ = R M⁻¹ Rᵀ (R Rᵀ)⁺ R M⁻¹ Rᵀ = R M⁻² Rᵀ`, `R` of full column rank). `C ≥ I`, for
    /// `L⁻¹L⁻ᵀ` has the eigenvalues of `M⁻¹`, all in `(0, 1]`; its root `U`, `C = U Uᵀ` with `U`
    /// upper triangular (the Cholesky factor of `C` with rows and columns reversed, reversed
    /// back), keeps `Uᵀ F` lower triangular where `F` is. `κ = 1` gives the covariance's own
    /// factor; should `C` fail to factor by round-off, the factor of `κ Σ_WW` stands (the wider
    /// answer).
    pub fn noise_inflated_factor_trapezoidal(&self, kappa: f64) -> Mat<f64> {
        self.noise_inflated_factor_trapezoidal_with(kappa, &self.cholesky_inverse())
    }

    /// [`Self::noise_inflated_factor_trapezoidal`] from `L⁻¹`. `F` is not formed on its own:
    /// `Uᵀ F = (Uᵀ L⁻¹) Rᵀ`, a product of two lower triangles and then one with `Rᵀ`, where
    /// `F = L⁻¹ Rᵀ` and `Uᵀ F` would be two products with `Rᵀ`'s width.
    pub(crate) fn noise_inflated_factor_trapezoidal_with(
        &self,
        kappa: f64,
        l_inv: &CholeskyInverse,
    ) -> Mat<f64> {
        self.trapezoidal(self.noise_inflated_factor_with(kappa, l_inv))
    }

    /// The factor of [`Self::noise_inflated_factor_trapezoidal`] before its reduction to
    /// trapezoidal form (`Uᵀ F`, r × |W|; `F` itself where `κ = 1`), for a caller that reduces
    /// several factors together.
    pub(crate) fn noise_inflated_factor_with(
        &self,
        kappa: f64,
        l_inv: &CholeskyInverse,
    ) -> Mat<f64> {
        let l_inv = &l_inv.0;
        let r = l_inv.nrows();
        if kappa == 1.0 || r == 0 {
            return self.covariance_factor();
        }
        let mut prior_part = Mat::zeros(r, r);
        triangular::matmul(
            prior_part.as_mut(),
            BlockStructure::TriangularLower,
            Accum::Replace,
            l_inv.as_ref(),
            BlockStructure::TriangularLower,
            l_inv.transpose(),
            BlockStructure::TriangularUpper,
            1.0,
            Par::Seq,
        );
        // C's lower triangle with rows and columns reversed: entry (i, j), i ≥ j, is C's (b, a)
        // with b = r − 1 − j ≥ a = r − 1 − i.
        let reversed = Mat::from_fn(r, r, |i, j| {
            let (a, b) = (r - 1 - i, r - 1 - j);
            if i < j {
                0.0
            } else if a == b {
                kappa - (kappa - 1.0) * prior_part[(b, a)]
            } else {
                -(kappa - 1.0) * prior_part[(b, a)]
            }
        });
        let Ok(root) = cholesky_lower(reversed) else {
            let f = self.covariance_factor();
            let scale = kappa.sqrt();
            return Mat::from_fn(r, f.ncols(), |i, j| scale * f[(i, j)]);
        };
        // Uᵀ, lower triangular: (Uᵀ)_ik = U_ki = root_(r−1−k, r−1−i).
        let u_t = Mat::from_fn(r, r, |i, k| {
            if k <= i {
                root[(r - 1 - k, r - 1 - i)]
            } else {
                0.0
            }
        });
        let mut left = Mat::zeros(r, r);
        triangular::matmul(
            left.as_mut(),
            BlockStructure::TriangularLower,
            Accum::Replace,
            u_t.as_ref(),
            BlockStructure::TriangularLower,
            l_inv.as_ref(),
            BlockStructure::TriangularLower,
            1.0,
            Par::Seq,
        );
        match &self.factor {
            // `Rᵀ` diagonal: `(Uᵀ L⁻¹) Rᵀ` scales the columns and stays lower triangular.
            Factor::Diagonal(d) => Mat::from_fn(r, d.len(), |i, j| left[(i, j)] * d[j]),
            Factor::Smooth { .. } => {
                let rt = self.factor.to_dense();
                let mut out = Mat::zeros(r, rt.nrows());
                triangular::matmul(
                    out.as_mut(),
                    BlockStructure::Rectangular,
                    Accum::Replace,
                    left.as_ref(),
                    BlockStructure::TriangularLower,
                    rt.transpose(),
                    BlockStructure::Rectangular,
                    1.0,
                    Par::Seq,
                );
                out
            }
        }
    }

    /// `f` (r × |W|, a factor of `Σ_WW` or of another form) as a lower trapezoidal factor:
    /// itself under a diagonal prior factor, where it is lower triangular, else from its QR
    /// factorisation (see [`Self::covariance_factor_trapezoidal`]).
    fn trapezoidal(&self, f: Mat<f64>) -> Mat<f64> {
        if matches!(self.factor, Factor::Diagonal(_)) {
            return f;
        }
        lower_trapezoidal(f)
    }

    /// `Σ_JJ` on the support (|J| × |J|, in the order of [`Self::active`]), exactly symmetric.
    pub fn covariance_active(&self) -> Mat<f64> {
        let f = self.covariance_factor();
        let nw = self.weighted.len();
        let mut sigma_w = Mat::zeros(nw, nw);
        triangular::matmul(
            sigma_w.as_mut(),
            BlockStructure::TriangularLower,
            Accum::Replace,
            f.transpose(),
            BlockStructure::Rectangular,
            f.as_ref(),
            BlockStructure::Rectangular,
            1.0,
            Par::Seq,
        );
        mirror_lower(sigma_w.as_mut());
        let pos = |j: usize| self.support.binary_search(&j).unwrap_or(usize::MAX);
        let n = self.support.len();
        let mut sigma = Mat::zeros(n, n);
        for (a, &i) in self.weighted.iter().enumerate() {
            for (b, &j) in self.weighted.iter().enumerate() {
                sigma[(pos(i), pos(j))] = sigma_w[(a, b)];
            }
        }
        if let Some(flat) = &self.flat {
            let fp = pos(flat.index);
            // Σ_fW = −m̄ᵀ Σ_WW, Σ_ff = 1/A_ff + m̄ᵀ Σ_WW m̄
            let cross: Vec<f64> = (0..nw)
                .map(|b| {
                    -(0..nw)
                        .map(|a| flat.centre[a] * sigma_w[(a, b)])
                        .sum::<f64>()
                })
                .collect();
            let quad: f64 = -(0..nw).map(|b| cross[b] * flat.centre[b]).sum::<f64>();
            for (b, &j) in self.weighted.iter().enumerate() {
                sigma[(fp, pos(j))] = cross[b];
                sigma[(pos(j), fp)] = cross[b];
            }
            sigma[(fp, fp)] = flat.variance + quad;
        }
        sigma
    }

    /// The full posterior covariance `Σ` (p × p, zero rows and columns outside `J`).
    pub fn covariance(&self) -> Mat<f64> {
        let p = self.dim();
        let mut full = Mat::zeros(p, p);
        let sigma = self.covariance_active();
        for (a, &i) in self.support.iter().enumerate() {
            for (b, &j) in self.support.iter().enumerate() {
                full[(i, j)] = sigma[(a, b)];
            }
        }
        full
    }

    /// `φᵀΣφ = ‖L⁻¹ Rᵀ (φ_W − φ_f m̄)‖² + φ_f² / A_ff` for one basis vector, non-negative by
    /// construction.
    pub fn weight_variance(&self, phi: &[f64]) -> f64 {
        let (x, flat_part) = self.centred(phi);
        let mut t = Mat::zeros(self.chol.nrows(), 1);
        for (i, v) in self.factor.t_mul(&x).into_iter().enumerate() {
            t[(i, 0)] = v;
        }
        solve_lower_triangular_in_place(self.chol.as_ref(), t.as_mut(), Par::Seq);
        t.col(0).squared_norm_l2() + flat_part
    }

    /// `tr(Σ U Uᵀ) = Σ_c u_cᵀ Σ u_c` over the columns of `U` (p × k): [`Self::weight_variance`]
    /// of each column, `‖L⁻¹ Rᵀ (U_W − m̄ u_f)‖²_F + ‖u_f‖² / A_ff`, with one product by `Rᵀ` and
    /// one triangular solve for all of them.
    pub fn weight_variance_sum(&self, u: MatRef<'_, f64>) -> f64 {
        let k = u.ncols();
        let (x, flat_part) = match &self.flat {
            None => (
                Mat::from_fn(self.weighted.len(), k, |i, c| u[(self.weighted[i], c)]),
                0.0,
            ),
            Some(flat) => (
                Mat::from_fn(self.weighted.len(), k, |i, c| {
                    u[(self.weighted[i], c)] - u[(flat.index, c)] * flat.centre[i]
                }),
                u.row(flat.index).squared_norm_l2() * flat.variance,
            ),
        };
        let mut t = self.factor.t_mul_mat(x.as_ref());
        solve_lower_triangular_in_place(self.chol.as_ref(), t.as_mut(), Par::Seq);
        t.squared_norm_l2() + flat_part
    }

    /// `(φ_W − φ_f m̄, φ_f² / A_ff)`, or `(φ_W, 0)` without a flat intercept.
    fn centred(&self, phi: &[f64]) -> (Vec<f64>, f64) {
        match &self.flat {
            None => (self.weighted.iter().map(|&j| phi[j]).collect(), 0.0),
            Some(flat) => {
                let pf = phi[flat.index];
                (
                    self.weighted
                        .iter()
                        .zip(&flat.centre)
                        .map(|(&j, m)| phi[j] - pf * m)
                        .collect(),
                    pf * pf * flat.variance,
                )
            }
        }
    }
}

impl From<Vec<f64>> for Prior {
    /// An ARD prior with these variances.
    fn from(variance: Vec<f64>) -> Self {
        Prior::diagonal(super::prior::FittedFamily::Ard, variance)
    }
}

/// A lower trapezoidal `T` (k × w, `k = min(r, w)`, row `i` zero past column `w − k + i`) with
/// `TᵀT = fᵀf` for any `f` (r × w): from the QR factorisation of `f` with its columns in
/// reverse order (see [`OutputPosterior::covariance_factor_trapezoidal`]).
pub(crate) fn lower_trapezoidal(f: Mat<f64>) -> Mat<f64> {
    let (r, w) = (f.nrows(), f.ncols());
    let k = r.min(w);
    if k == 0 {
        return Mat::zeros(0, w);
    }
    let mut reversed = Mat::from_fn(r, w, |i, j| f[(i, w - 1 - j)]);
    householder_upper(reversed.as_mut());
    Mat::from_fn(k, w, |i, j| {
        let (ui, uj) = (k - 1 - i, w - 1 - j);
        if uj >= ui { reversed[(ui, uj)] } else { 0.0 }
    })
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
    let mut m = Mat::<f64>::zeros(n, n);
    fill_scaled_precision(sqrt_v, a, index, scale, m.as_mut());
    cholesky_lower(m)
}

/// The lower triangle of `M = I + scale · D^½ A_II D^½` ([`scaled_precision_factor`]) into
/// `m`, which is `sqrt_v.len()` square; its strict upper triangle is left as it was.
fn fill_scaled_precision(
    sqrt_v: &[f64],
    a: MatRef<'_, f64>,
    index: Option<&[usize]>,
    scale: f64,
    mut m: faer::MatMut<'_, f64>,
) {
    let n = sqrt_v.len();
    let at = |k: usize| index.map_or(k, |ix| ix[k]);
    for c in 0..n {
        let a_col = a.col(at(c));
        let w = sqrt_v[c] * scale;
        let mut out = m.as_mut().col_mut(c);
        for r in c..n {
            out[r] = sqrt_v[r] * a_col[at(r)] * w;
        }
        out[c] += 1.0;
    }
}

/// The factor of [`scaled_precision_factor`] for a run of fits that each keep a subset of the
/// same basis functions (ARD's iterations): its matrix and the factorisation's scratch are
/// allocated once, for all `p` of them, and reused.
pub(crate) struct FactorWorkspace {
    l: Mat<f64>,
    scratch: faer::dyn_stack::MemBuffer,
}

impl FactorWorkspace {
    pub(crate) fn new(p: usize) -> Self {
        use faer::linalg::cholesky::llt::factor::cholesky_in_place_scratch;
        Self {
            l: Mat::zeros(p, p),
            scratch: faer::dyn_stack::MemBuffer::new(cholesky_in_place_scratch::<f64>(
                p,
                Par::Seq,
                Default::default(),
            )),
        }
    }

    /// Factors `M = I + scale · D^½ A_II D^½` into its lower Cholesky factor `L`, `sqrt_v.len()`
    /// square, which [`Self::lower`] reads until the next call.
    pub(crate) fn factor(
        &mut self,
        sqrt_v: &[f64],
        a: MatRef<'_, f64>,
        index: Option<&[usize]>,
        scale: f64,
    ) -> Result<(), EstimatorError> {
        use faer::dyn_stack::MemStack;
        use faer::linalg::cholesky::llt::factor::cholesky_in_place;
        let n = sqrt_v.len();
        let mut m = self.l.as_mut().submatrix_mut(0, 0, n, n);
        fill_scaled_precision(sqrt_v, a, index, scale, m.as_mut());
        cholesky_in_place(
            m,
            Default::default(),
            Par::Seq,
            MemStack::new(&mut self.scratch),
            Default::default(),
        )
        .map_err(|_| EstimatorError::NotPositiveDefinite)?;
        Ok(())
    }

    /// The last factor `L`, `n` square. Only its lower triangle is meaningful: the strict upper
    /// one holds whatever an earlier factorisation left there.
    pub(crate) fn lower(&self, n: usize) -> MatRef<'_, f64> {
        self.l.as_ref().submatrix(0, 0, n, n)
    }

    /// Fills the whole matrix with NaN, so that a test can tell whether anything reads what a
    /// factorisation did not write.
    #[cfg(test)]
    pub(crate) fn poison(&mut self) {
        self.l.as_mut().fill(f64::NAN);
    }
}

/// `I + P₊` for `P = RᵀA_cR`, with `P₊` its positive semidefinite part (`U max(Λ, 0) Uᵀ`).
///
/// `A_c` is positive semidefinite in exact arithmetic, but the Schur complement that eliminates
/// the flat intercept subtracts large, nearly equal numbers where the inputs sit on a large
/// common level (spectra on a baseline) and vary little; scaled by a tiny noise variance and a
/// wide prior, its round-off can reach eigenvalues below −1, and `M = I + P` then has no
/// Cholesky factor. Those eigenvalues are round-off: set to 0, as the evidence's own
/// eigendecomposition of the same congruence does.
fn unit_plus_psd_part(mut p: Mat<f64>) -> Result<Mat<f64>, EstimatorError> {
    let n = p.nrows();
    for i in 0..n {
        for k in 0..i {
            let mean = 0.5 * (p[(i, k)] + p[(k, i)]);
            p[(i, k)] = mean;
            p[(k, i)] = mean;
        }
    }
    let (values, u) =
        symmetric_eigen(p.as_ref()).map_err(|_| EstimatorError::NotPositiveDefinite)?;
    let scaled = Mat::from_fn(n, n, |i, c| u[(i, c)] * values[c].max(0.0));
    let mut m = &scaled * u.transpose();
    for i in 0..n {
        m[(i, i)] += 1.0;
    }
    Ok(m)
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

/// Overwrites `a` with the `R` of its QR factorisation in its upper trapezoid (the Householder
/// vectors below it), computed sequentially: the caller parallelises across outputs, and the
/// result does not depend on the number of threads.
fn householder_upper(mut a: faer::MatMut<'_, f64>) {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::qr::no_pivoting::factor::{
        qr_in_place, qr_in_place_scratch, recommended_block_size,
    };
    let (r, w) = (a.nrows(), a.ncols());
    let block = recommended_block_size::<f64>(r, w);
    let mut coefficients = Mat::zeros(block, r.min(w));
    let mut mem = MemBuffer::new(qr_in_place_scratch::<f64>(
        r,
        w,
        block,
        Par::Seq,
        Default::default(),
    ));
    qr_in_place(
        a.as_mut(),
        coefficients.as_mut(),
        Par::Seq,
        MemStack::new(&mut mem),
        Default::default(),
    );
}

/// `L⁻¹` of a posterior's Cholesky factor ([`OutputPosterior::cholesky_inverse`]).
#[derive(Clone, Debug)]
pub(crate) struct CholeskyInverse(Mat<f64>);

/// `L⁻¹` of a lower triangular `L`.
pub(crate) fn lower_inverse(l: MatRef<'_, f64>) -> Mat<f64> {
    let n = l.nrows();
    let mut out = Mat::zeros(n, n);
    faer::linalg::triangular_inverse::invert_lower_triangular(out.as_mut(), l, Par::Seq);
    out
}
