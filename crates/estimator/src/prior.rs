//! The prior of one output's weights: which family, its fitted hyperparameters, and the factor
//! `R` with `Cov(w_W) = R Rᵀ` that the posterior works with.
//!
//! Every family is a Gaussian prior `w ~ N(0, S)` over the basis functions, with three kinds of
//! entries, told apart by the prior variance `v_j` kept per basis function:
//!
//! * `v_j = ∞`: a **flat** prior (the intercept of every model created since the prior family
//!   exists, but for an output whose zeros are structural, see [`super::FitOptions`]): never
//!   shrunk, never pruned. Eliminating it from the posterior precision is exactly
//!   centring `x` and `y` by the (noise-weighted) means of all rows seen (see
//!   [`super::posterior`]).
//! * `v_j = 0`: pruned, `w_j ≡ 0`.
//! * `0 < v_j < ∞`: weighted. Their joint prior covariance is `S_WW = R Rᵀ`:
//!   - [`PriorFamily::Ard`] and [`PriorFamily::Ridge`]: `S_WW = diag(v_W)`, `R = diag(√v_W)`;
//!   - [`PriorFamily::Smooth`]: the first `bands` basis functions (a declared spectrum) have
//!     `S = a·K_ℓ`, `K_ℓ` the Matérn-3/2 correlation over the band index,
//!     `K_ℓ(i, j) = (1 + √3|i−j|/ℓ) exp(−√3|i−j|/ℓ)`, so neighbouring wavelengths get similar
//!     coefficients; the other weighted basis functions stay diagonal. `R` is `√a·K_ℓ^½` (from
//!     the eigendecomposition of `K_ℓ`, truncated where its eigenvalues vanish) beside
//!     `diag(√v)`.

use std::sync::Arc;

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::{Accum, Mat, MatRef, Side};

use super::EstimatorError;

/// Eigenvalues of `K_ℓ` below this fraction of the largest are dropped from its square root:
/// they carry no prior variance a double can tell from zero.
const KERNEL_RANK_TOLERANCE: f64 = 1e-12;

/// How a model's prior is chosen, as a model declares it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PriorFamily {
    /// One variance per basis function by the evidence (Algorithm 2, the paper's).
    Ard,
    /// One shared variance of the basis functions (in their own units), by the evidence.
    Ridge,
    /// A Gaussian-process prior over the spectrum's coefficient curve (amplitude and length
    /// scale by the evidence); named features as in ridge. Ridge for a model without spectrum.
    Smooth,
    /// The evidence (with its Occam factor) chooses per output among ridge, smooth (with a
    /// declared spectrum) and ARD (unless the inputs are a spectrum alone); an output whose
    /// zeros are structural (0 in most rows) is fitted by ARD.
    #[default]
    Auto,
}

impl PriorFamily {
    /// The family of an API name (`ard`, `ridge`, `smooth`, `auto`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "ard" => PriorFamily::Ard,
            "ridge" => PriorFamily::Ridge,
            "smooth" => PriorFamily::Smooth,
            "auto" => PriorFamily::Auto,
            _ => return None,
        })
    }

    /// The API name.
    pub fn name(self) -> &'static str {
        match self {
            PriorFamily::Ard => "ard",
            PriorFamily::Ridge => "ridge",
            PriorFamily::Smooth => "smooth",
            PriorFamily::Auto => "auto",
        }
    }
}

/// What a fitted prior is, as the posterior endpoint reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FittedFamily {
    Ard,
    Ridge,
    Smooth,
}

impl FittedFamily {
    /// The API name.
    pub fn name(self) -> &'static str {
        match self {
            FittedFamily::Ard => "ard",
            FittedFamily::Ridge => "ridge",
            FittedFamily::Smooth => "smooth",
        }
    }
}

/// The smooth part of a prior: the first `bands` basis functions have covariance
/// `a·K_ℓ` with `a` their (equal) prior variance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Smooth {
    pub bands: usize,
    /// `ℓ`, in bands.
    pub length: f64,
}

/// A fitted prior: the prior variance of every basis function (`∞` flat, `0` pruned) and, for
/// the smooth family, the correlation of the spectral bands.
#[derive(Clone, Debug, PartialEq)]
pub struct Prior {
    pub family: FittedFamily,
    pub variance: Vec<f64>,
    pub smooth: Option<Smooth>,
}

impl Prior {
    /// A diagonal prior (ARD or ridge) with variances `variance`.
    pub fn diagonal(family: FittedFamily, variance: Vec<f64>) -> Self {
        Self {
            family,
            variance,
            smooth: None,
        }
    }

    /// Number of basis functions `p`.
    pub fn dim(&self) -> usize {
        self.variance.len()
    }

    /// The flat basis function, if any (at most one: the intercept).
    pub fn flat(&self) -> Option<usize> {
        self.variance.iter().position(|v| *v == f64::INFINITY)
    }

    /// The weighted basis functions `W = {j : 0 < v_j < ∞}`, ascending.
    pub fn weighted(&self) -> Vec<usize> {
        (0..self.dim())
            .filter(|&j| self.variance[j] > 0.0 && self.variance[j] < f64::INFINITY)
            .collect()
    }

    /// Checks what a decoded or computed prior must satisfy.
    pub fn validate(&self) -> Result<(), EstimatorError> {
        let p = self.dim();
        if self
            .variance
            .iter()
            .any(|v| v.is_nan() || *v < 0.0 || *v == f64::NEG_INFINITY)
        {
            return Err(EstimatorError::NonFinite("prior variances"));
        }
        if self
            .variance
            .iter()
            .filter(|v| **v == f64::INFINITY)
            .count()
            > 1
        {
            return Err(EstimatorError::Dimension {
                what: "flat basis functions",
                expected: 1,
                found: self
                    .variance
                    .iter()
                    .filter(|v| **v == f64::INFINITY)
                    .count(),
            });
        }
        if let Some(smooth) = self.smooth {
            let bands_ok = smooth.bands > 0
                && smooth.bands <= p
                && smooth.length.is_finite()
                && smooth.length > 0.0
                && self.variance[..smooth.bands]
                    .iter()
                    .all(|v| *v == self.variance[0] && *v > 0.0 && v.is_finite());
            if !bands_ok {
                return Err(EstimatorError::NonFinite("smooth prior"));
            }
        }
        Ok(())
    }

    /// The factor `R` of `S_WW = R Rᵀ` over the weighted set.
    pub fn factor(&self) -> Result<Factor, EstimatorError> {
        self.validate()?;
        match self.smooth {
            None => self.factor_with_kernel(None),
            Some(smooth) => {
                let kernel = Arc::new(kernel_factor(smooth.bands, smooth.length)?);
                self.factor_with_kernel(Some(&kernel))
            }
        }
    }

    /// [`Self::factor`] given `K_ℓ^½` of the smooth part, computed once for many outputs and
    /// shared by their factors.
    pub(crate) fn factor_with_kernel(
        &self,
        kernel: Option<&Arc<Mat<f64>>>,
    ) -> Result<Factor, EstimatorError> {
        let weighted = self.weighted();
        match (self.smooth, kernel) {
            (None, _) => Ok(Factor::Diagonal(
                weighted.iter().map(|&j| self.variance[j].sqrt()).collect(),
            )),
            (Some(smooth), Some(kernel)) if kernel.nrows() == smooth.bands => {
                let scale = self.variance[0].sqrt();
                let rest = weighted[smooth.bands..]
                    .iter()
                    .map(|&j| self.variance[j].sqrt())
                    .collect();
                Ok(Factor::Smooth {
                    kernel: Arc::clone(kernel),
                    scale,
                    rest,
                })
            }
            (Some(smooth), _) => Err(EstimatorError::Dimension {
                what: "smooth prior bands",
                expected: smooth.bands,
                found: kernel.map_or(0, |k| k.nrows()),
            }),
        }
    }
}

/// `R` with `S_WW = R Rᵀ` (|W| × r). For the smooth family the weighted set starts with the
/// bands.
#[derive(Clone, Debug, PartialEq)]
pub enum Factor {
    Diagonal(Vec<f64>),
    /// `R = [√a·K_ℓ^½, 0; 0, diag(rest)]`. `K_ℓ^½` is shared by every output of a model at the
    /// same length scale (a 700-band spectrum's is 3.75 MiB); each entry of `R` is formed as
    /// `scale · kernel[(i, k)]` where it is used, the same product an owned scaled copy held.
    Smooth {
        kernel: Arc<Mat<f64>>,
        /// `√a`.
        scale: f64,
        rest: Vec<f64>,
    },
}

impl Factor {
    /// `|W|`.
    pub fn rows(&self) -> usize {
        match self {
            Factor::Diagonal(d) => d.len(),
            Factor::Smooth { kernel, rest, .. } => kernel.nrows() + rest.len(),
        }
    }

    /// `r`, the number of columns.
    pub fn rank(&self) -> usize {
        match self {
            Factor::Diagonal(d) => d.len(),
            Factor::Smooth { kernel, rest, .. } => kernel.ncols() + rest.len(),
        }
    }

    /// `R` as a dense matrix.
    pub fn to_dense(&self) -> Mat<f64> {
        match self {
            Factor::Diagonal(d) => {
                Mat::from_fn(d.len(), d.len(), |i, j| if i == j { d[i] } else { 0.0 })
            }
            Factor::Smooth {
                kernel,
                scale,
                rest,
            } => {
                let (b, rb) = (kernel.nrows(), kernel.ncols());
                Mat::from_fn(b + rest.len(), rb + rest.len(), |i, j| {
                    match (i < b, j < rb) {
                        (true, true) => scale * kernel[(i, j)],
                        (false, false) if i - b == j - rb => rest[i - b],
                        _ => 0.0,
                    }
                })
            }
        }
    }

    /// `Rᵀ A R` (r × r) of a symmetric `A` (|W| × |W|), exactly symmetric.
    pub fn congruence(&self, a: MatRef<'_, f64>) -> Mat<f64> {
        match self {
            Factor::Diagonal(d) => Mat::from_fn(d.len(), d.len(), |i, j| {
                let (i, j) = if i >= j { (i, j) } else { (j, i) };
                d[i] * a[(i, j)] * d[j]
            }),
            Factor::Smooth { .. } => {
                let r = self.to_dense();
                let ar = a * &r;
                // Only the lower triangle of `Rᵀ(AR)` is formed (half that product's work), then
                // mirrored.
                let mut out = Mat::zeros(r.ncols(), r.ncols());
                triangular::matmul(
                    out.as_mut(),
                    BlockStructure::TriangularLower,
                    Accum::Replace,
                    r.transpose(),
                    BlockStructure::Rectangular,
                    ar.as_ref(),
                    BlockStructure::Rectangular,
                    1.0,
                    faer::get_global_parallelism(),
                );
                super::statistics::mirror_lower(out.as_mut());
                out
            }
        }
    }

    /// `Rᵀ U` of a |W| × k matrix `U` (r × k).
    pub fn t_mul_mat(&self, u: MatRef<'_, f64>) -> Mat<f64> {
        match self {
            Factor::Diagonal(d) => Mat::from_fn(d.len(), u.ncols(), |i, j| d[i] * u[(i, j)]),
            Factor::Smooth {
                kernel,
                scale,
                rest,
            } => {
                let (b, rb) = (kernel.nrows(), kernel.ncols());
                // `R`'s entries as products, so the result is the one an owned copy gave.
                let scaled = Mat::from_fn(b, rb, |i, k| scale * kernel[(i, k)]);
                let mut out = Mat::zeros(rb + rest.len(), u.ncols());
                out.as_mut()
                    .subrows_mut(0, rb)
                    .copy_from(scaled.transpose() * u.subrows(0, b));
                for (i, d) in rest.iter().enumerate() {
                    for j in 0..u.ncols() {
                        out[(rb + i, j)] = d * u[(b + i, j)];
                    }
                }
                out
            }
        }
    }

    /// `Rᵀ x`.
    pub fn t_mul(&self, x: &[f64]) -> Vec<f64> {
        match self {
            Factor::Diagonal(d) => d.iter().zip(x).map(|(d, x)| d * x).collect(),
            Factor::Smooth {
                kernel,
                scale,
                rest,
            } => {
                let b = kernel.nrows();
                let mut out: Vec<f64> = (0..kernel.ncols())
                    .map(|k| (0..b).map(|i| scale * kernel[(i, k)] * x[i]).sum())
                    .collect();
                out.extend(rest.iter().zip(&x[b..]).map(|(d, x)| d * x));
                out
            }
        }
    }

    /// `R u`.
    pub fn mul(&self, u: &[f64]) -> Vec<f64> {
        match self {
            Factor::Diagonal(d) => d.iter().zip(u).map(|(d, u)| d * u).collect(),
            Factor::Smooth {
                kernel,
                scale,
                rest,
            } => {
                let rb = kernel.ncols();
                let mut out: Vec<f64> = (0..kernel.nrows())
                    .map(|i| (0..rb).map(|k| scale * kernel[(i, k)] * u[k]).sum())
                    .collect();
                out.extend(rest.iter().zip(&u[rb..]).map(|(d, u)| d * u));
                out
            }
        }
    }
}

/// The Matérn-3/2 correlation of bands `i`, `j` at length scale `ℓ` (in bands).
pub fn matern32(distance: f64, length: f64) -> f64 {
    let t = 3f64.sqrt() * distance / length;
    (1.0 + t) * (-t).exp()
}

/// `K_ℓ` (bands × bands): the Matérn-3/2 correlation of every pair of bands, which depends on
/// their distance alone (one kernel evaluation per distance).
pub fn kernel_matrix(bands: usize, length: f64) -> Mat<f64> {
    let by_distance: Vec<f64> = (0..bands).map(|d| matern32(d as f64, length)).collect();
    Mat::from_fn(bands, bands, |i, j| by_distance[i.abs_diff(j)])
}

/// `K_ℓ^½` (bands × r): `V_r diag(√κ_r)` from the eigendecomposition `K_ℓ = V diag(κ) Vᵀ`,
/// keeping the eigenvalues above `KERNEL_RANK_TOLERANCE` of the largest, so that
/// `K_ℓ^½ (K_ℓ^½)ᵀ = K_ℓ` to round-off.
pub fn kernel_factor(bands: usize, length: f64) -> Result<Mat<f64>, EstimatorError> {
    let (values, vectors) =
        kept_eigen(kernel_matrix(bands, length).as_ref(), KERNEL_RANK_TOLERANCE)?;
    Ok(Mat::from_fn(bands, values.len(), |i, c| {
        vectors[(i, c)] * values[c].sqrt()
    }))
}

/// The eigenpairs of a symmetric positive semidefinite `a` whose eigenvalues exceed `tolerance`
/// times the largest (the rest are round-off), eigenvectors as columns.
pub(crate) fn kept_eigen(
    a: MatRef<'_, f64>,
    tolerance: f64,
) -> Result<(Vec<f64>, Mat<f64>), EstimatorError> {
    let n = a.nrows();
    if n == 0 {
        return Ok((Vec::new(), Mat::zeros(0, 0)));
    }
    let eig = a
        .self_adjoint_eigen(Side::Lower)
        .map_err(|_| EstimatorError::NotPositiveDefinite)?;
    let values = eig.S().column_vector();
    let largest = values.iter().fold(0.0_f64, |a, v| a.max(*v));
    let keep: Vec<usize> = (0..n)
        .filter(|&i| values[i] > tolerance * largest)
        .collect();
    let u = eig.U();
    Ok((
        keep.iter().map(|&i| values[i]).collect(),
        Mat::from_fn(n, keep.len(), |i, c| u[(i, keep[c])]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_factor_reproduces_the_kernel() {
        for length in [0.5, 3.0, 40.0] {
            let f = kernel_factor(30, length).unwrap();
            let k = &f * f.transpose();
            for i in 0..30 {
                for j in 0..30 {
                    let want = matern32((i as f64 - j as f64).abs(), length);
                    assert!((k[(i, j)] - want).abs() < 1e-9, "{length}: {i},{j}");
                }
            }
        }
    }

    #[test]
    fn an_inconsistent_smooth_prior_is_an_error_not_a_panic() {
        let smooth = |bands: usize, length: f64, variance: Vec<f64>| Prior {
            family: FittedFamily::Smooth,
            variance,
            smooth: Some(Smooth { bands, length }),
        };
        for prior in [
            smooth(5, 2.0, vec![1.0; 3]),
            smooth(2, 0.0, vec![1.0; 3]),
            smooth(2, f64::NAN, vec![1.0; 3]),
            smooth(2, 2.0, vec![1.0, 0.0, 1.0]),
            smooth(2, 2.0, vec![1.0, 2.0, 1.0]),
        ] {
            assert!(prior.validate().is_err(), "{prior:?}");
            assert!(prior.factor().is_err(), "{prior:?}");
        }
        let two_flat = Prior::diagonal(FittedFamily::Ard, vec![f64::INFINITY, f64::INFINITY]);
        assert!(two_flat.validate().is_err());
    }

    #[test]
    fn factor_products_agree_with_the_dense_factor() {
        let prior = Prior {
            family: FittedFamily::Smooth,
            variance: vec![2.0, 2.0, 2.0, 2.0, 0.5, 0.0, f64::INFINITY],
            smooth: Some(Smooth {
                bands: 4,
                length: 2.0,
            }),
        };
        prior.validate().unwrap();
        assert_eq!(prior.flat(), Some(6));
        assert_eq!(prior.weighted(), vec![0, 1, 2, 3, 4]);
        let factor = prior.factor().unwrap();
        let dense = factor.to_dense();
        let x = [0.3, -1.0, 2.0, 0.5, 1.5];
        let want: Vec<f64> = (0..dense.ncols())
            .map(|k| (0..5).map(|i| dense[(i, k)] * x[i]).sum())
            .collect();
        let got = factor.t_mul(&x);
        for (a, b) in want.iter().zip(&got) {
            assert!((a - b).abs() < 1e-12);
        }
        let back = factor.mul(&got);
        let want: Vec<f64> = (0..5)
            .map(|i| (0..dense.ncols()).map(|k| dense[(i, k)] * got[k]).sum())
            .collect();
        for (a, b) in want.iter().zip(&back) {
            assert!((a - b).abs() < 1e-12);
        }
        // The covariance of the bands is a·K.
        let s = &dense * dense.transpose();
        assert!((s[(0, 1)] - 2.0 * matern32(1.0, 2.0)).abs() < 1e-9);
        assert!((s[(4, 4)] - 0.5).abs() < 1e-12);
        assert_eq!(s[(0, 4)], 0.0);
    }
}
