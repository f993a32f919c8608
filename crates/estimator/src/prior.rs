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

use std::sync::{Arc, Mutex, PoisonError, Weak};

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::{Accum, Mat, MatMut, MatRef};

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
                let kernel = shared_kernel_factor(smooth.bands, smooth.length)?;
                self.factor_with_kernel(Some(&kernel))
            }
        }
    }

    /// [`Self::factor`] given `K_ℓ^½` of the smooth part, computed once for many outputs and
    /// shared by their factors.
    pub(crate) fn factor_with_kernel(
        &self,
        kernel: Option<&Arc<KernelRoot>>,
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
    /// `R = [√a·K_ℓ^½, 0; 0, diag(rest)]`. `K_ℓ^½` is shared by every output of the process's
    /// models at the same bands and length scale (a 700-band spectrum's is 3.75 MiB;
    /// [`shared_kernel_factor`]); each entry of `R` is formed as
    /// `scale · kernel[(i, k)]` where it is used, the same product an owned scaled copy held.
    Smooth {
        kernel: Arc<KernelRoot>,
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
            Factor::Smooth {
                kernel,
                scale,
                rest,
            } => match kernel.symmetric {
                Some(symmetric) => split_congruence(a, kernel, *scale, rest, symmetric),
                None => self.dense_congruence(a),
            },
        }
    }

    /// `Rᵀ A R` with `R` formed dense.
    fn dense_congruence(&self, a: MatRef<'_, f64>) -> Mat<f64> {
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

/// `Rᵀ A R` for `R = [√a·K_ℓ^½, 0; 0, diag(rest)]` whose kernel part has `s` symmetric columns
/// then skew ones ([`KernelRoot`]). With `m = ⌊n/2⌋`, `i′ = n−1−i`, the rows `pᵢ = eᵢ + e_{i′}`
/// (and `e_m` for odd `n`) and `qᵢ = eᵢ − e_{i′}`, `R = Pᵀ H` with `H` block diagonal: the
/// symmetric columns' top half (and middle) `H_s` and the skew columns' top half `H_k`, so
///
/// ```text
/// Rᵀ A R = Hᵀ (P A Pᵀ) H,   P A Pᵀ formed in O(n²) by sums and differences of A's entries,
/// ```
///
/// and the products run on half-order blocks: about 0.4 of the dense congruence's work.
fn split_congruence(
    a: MatRef<'_, f64>,
    kernel: &KernelRoot,
    scale: f64,
    rest: &[f64],
    s: usize,
) -> Mat<f64> {
    let (n, rb) = (kernel.nrows(), kernel.ncols());
    let (m, nr) = (n / 2, rest.len());
    let h = n - m;
    let mirror = |i: usize| n - 1 - i;
    // Symmetric (first h: the top half, then the middle band of an odd order) and skew (m)
    // coordinates of the bands; the named features after them.
    let sym = |x: &dyn Fn(usize) -> f64, i: usize| {
        if i < m { x(i) + x(mirror(i)) } else { x(m) }
    };
    let skew = |x: &dyn Fn(usize) -> f64, i: usize| x(i) - x(mirror(i));
    let a_ss = Mat::from_fn(h, h, |i, j| sym(&|r| sym(&|c| a[(r, c)], j), i));
    let a_sk = Mat::from_fn(h, m, |i, j| sym(&|r| skew(&|c| a[(r, c)], j), i));
    let a_kk = Mat::from_fn(m, m, |i, j| skew(&|r| skew(&|c| a[(r, c)], j), i));
    let a_sr = Mat::from_fn(h, nr, |i, t| sym(&|r| a[(r, n + t)], i));
    let a_kr = Mat::from_fn(m, nr, |i, t| skew(&|r| a[(r, n + t)], i));
    let h_s = Mat::from_fn(h, s, |i, c| scale * kernel[(i, c)]);
    let h_k = Mat::from_fn(m, rb - s, |i, c| scale * kernel[(i, s + c)]);
    let par = faer::get_global_parallelism();
    let r = rb + nr;
    let mut out = Mat::zeros(r, r);
    // Lower triangle by blocks: [ss; ks kk; rs rk rr].
    let lower = |out: MatMut<'_, f64>, left: MatRef<'_, f64>, right: MatRef<'_, f64>| {
        triangular::matmul(
            out,
            BlockStructure::TriangularLower,
            Accum::Replace,
            left,
            BlockStructure::Rectangular,
            right,
            BlockStructure::Rectangular,
            1.0,
            par,
        );
    };
    let a_ss_h = &a_ss * &h_s;
    lower(
        out.as_mut().submatrix_mut(0, 0, s, s),
        h_s.transpose(),
        a_ss_h.as_ref(),
    );
    let a_kk_h = &a_kk * &h_k;
    lower(
        out.as_mut().submatrix_mut(s, s, rb - s, rb - s),
        h_k.transpose(),
        a_kk_h.as_ref(),
    );
    let ks = h_k.transpose() * (a_sk.transpose() * &h_s);
    out.as_mut().submatrix_mut(s, 0, rb - s, s).copy_from(&ks);
    let rs = a_sr.transpose() * &h_s;
    let rk = a_kr.transpose() * &h_k;
    for t in 0..nr {
        for c in 0..s {
            out[(rb + t, c)] = rest[t] * rs[(t, c)];
        }
        for c in 0..rb - s {
            out[(rb + t, s + c)] = rest[t] * rk[(t, c)];
        }
        for u in 0..=t {
            out[(rb + t, rb + u)] = rest[t] * a[(n + t, n + u)] * rest[u];
        }
    }
    super::statistics::mirror_lower(out.as_mut());
    out
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

/// `X K_ℓ` for rows `X` (r × bands), in `O(r · bands)` where the dense product takes
/// `O(r · bands²)`. With `a = √3/ℓ` and `ρ = e^−a`, the kernel is `k(d) = (1 + a d) ρ^d`, so each
/// row `x` of the product is `y_j = x_j + (F_j + a H_j) + (F′_j + a H′_j)` with the sums over
/// the bands before `j`
///
/// ```text
/// F_j = Σ_{i<j} ρ^(j−i) x_i,      H_j = Σ_{i<j} (j − i) ρ^(j−i) x_i,
/// F_{j+1} = ρ (F_j + x_j),        H_{j+1} = ρ (H_j + F_j + x_j)
/// ```
///
/// and `F′`, `H′` the same over the bands after `j` (the Matérn-3/2 process is Markov in its
/// value and slope). Every weight the recursions put on an `x_i` is a product of non-negative
/// factors, so their round-off is bounded as the dense sums' is, relative to
/// `Σ_i k(|j − i|) |x_i|`.
pub fn matern32_product(x: MatRef<'_, f64>, length: f64) -> Mat<f64> {
    let (rows, bands) = (x.nrows(), x.ncols());
    let a = 3f64.sqrt() / length;
    let rho = (-a).exp();
    let mut out = Mat::zeros(rows, bands);
    let mut f = vec![0.0; rows];
    let mut h = vec![0.0; rows];
    // Columns are contiguous: each pass walks the bands once with every row side by side.
    for j in 0..bands {
        let (column, y) = (x.col(j), out.col_mut(j));
        for (r, y) in y.iter_mut().enumerate() {
            let xj = column[r];
            *y = xj + f[r] + a * h[r];
            h[r] = rho * (h[r] + f[r] + xj);
            f[r] = rho * (f[r] + xj);
        }
    }
    f.fill(0.0);
    h.fill(0.0);
    for j in (0..bands).rev() {
        let (column, y) = (x.col(j), out.col_mut(j));
        for (r, y) in y.iter_mut().enumerate() {
            let xj = column[r];
            *y += f[r] + a * h[r];
            h[r] = rho * (h[r] + f[r] + xj);
            f[r] = rho * (f[r] + xj);
        }
    }
    out
}

/// [`kernel_factor`], shared by every model of the process at the same bands and length scale:
/// models of one instrument's grid pick their length scales from the same candidates, and each
/// square root of a 700-band kernel is 3.75 MiB and an eigendecomposition. The process keeps only
/// weak references, so a kernel lives as long as some model holds it; the lock is never held
/// while one is formed (two callers may both form it, and the later finds the earlier's).
pub fn shared_kernel_factor(bands: usize, length: f64) -> Result<Arc<KernelRoot>, EstimatorError> {
    type Kernels = Vec<((usize, u64), Weak<KernelRoot>)>;
    static KERNELS: Mutex<Kernels> = Mutex::new(Vec::new());
    let key = (bands, length.to_bits());
    let live = |kernels: &Kernels| {
        kernels
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, kernel)| kernel.upgrade())
    };
    // A poisoned lock still holds valid weak references: nothing is written while a kernel is
    // formed.
    if let Some(kernel) = live(&KERNELS.lock().unwrap_or_else(PoisonError::into_inner)) {
        return Ok(kernel);
    }
    let formed = Arc::new(kernel_root(bands, length)?);
    let mut kernels = KERNELS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kernel) = live(&kernels) {
        return Ok(kernel);
    }
    kernels.retain(|(_, kernel)| kernel.strong_count() > 0);
    kernels.push((key, Arc::downgrade(&formed)));
    Ok(formed)
}

/// `K_ℓ^½` (bands × r): `V_r diag(√κ_r)` from the eigendecomposition `K_ℓ = V diag(κ) Vᵀ`,
/// keeping the eigenvalues above `KERNEL_RANK_TOLERANCE` of the largest, so that
/// `K_ℓ^½ (K_ℓ^½)ᵀ = K_ℓ` to round-off.
///
/// `K_ℓ` is symmetric Toeplitz, so centrosymmetric (`J K J = K`, `J` the exchange matrix), and
/// its eigenvectors can be taken symmetric (`J v = v`) or skew (`J v = −v`) (Cantoni & Butler,
/// 1976). With `n` bands, `m = ⌊n/2⌋`, `A = K[..m, ..m]`, `(BJ)[i, j] = K[i, n−1−j]` and, for
/// odd `n`, the middle column `k = K[..m, m]`, the two halves are
///
/// ```text
/// skew:       (A − BJ) x = κ x,                        v = [x; 0; −Jx] / √2
/// symmetric:  [A + BJ, √2 k; √2 kᵀ, K_mm] [x; c] = κ [x; c],   v = [x/√2; c; Jx/√2]
/// ```
///
/// (no middle row or `c` for even `n`): two eigenproblems of half the order, a quarter of the
/// flops of one of the full order, solved side by side.
pub fn kernel_factor(bands: usize, length: f64) -> Result<Mat<f64>, EstimatorError> {
    kernel_root(bands, length).map(|root| root.factor)
}

/// [`kernel_factor`] with the count of its symmetric columns.
fn kernel_root(bands: usize, length: f64) -> Result<KernelRoot, EstimatorError> {
    let kernel = kernel_matrix(bands, length);
    let m = bands / 2;
    let odd = bands % 2 == 1;
    let h = m + usize::from(odd);
    let k = kernel.as_ref();
    let symmetric = Mat::from_fn(h, h, |i, j| match (i < m, j < m) {
        (true, true) => k[(i, j)] + k[(i, bands - 1 - j)],
        (true, false) => std::f64::consts::SQRT_2 * k[(i, m)],
        (false, true) => std::f64::consts::SQRT_2 * k[(m, j)],
        (false, false) => k[(m, m)],
    });
    let skew = Mat::from_fn(m, m, |i, j| k[(i, j)] - k[(i, bands - 1 - j)]);
    let (even_half, odd_half) = rayon::join(
        || half_eigen(symmetric.as_ref()),
        || half_eigen(skew.as_ref()),
    );
    let ((sym_values, sym_vectors), (skew_values, skew_vectors)) = (even_half?, odd_half?);
    let largest = sym_values
        .iter()
        .chain(&skew_values)
        .fold(0.0_f64, |a, v| a.max(*v));
    let kept = |values: &[f64]| -> Vec<usize> {
        (0..values.len())
            .filter(|&c| values[c] > KERNEL_RANK_TOLERANCE * largest)
            .collect()
    };
    let (sym_kept, skew_kept) = (kept(&sym_values), kept(&skew_values));
    let half = std::f64::consts::FRAC_1_SQRT_2;
    let mut factor = Mat::zeros(bands, sym_kept.len() + skew_kept.len());
    for (col, &c) in sym_kept.iter().enumerate() {
        let root = sym_values[c].sqrt();
        for i in 0..m {
            let x = half * sym_vectors[(i, c)] * root;
            factor[(i, col)] = x;
            factor[(bands - 1 - i, col)] = x;
        }
        if odd {
            factor[(m, col)] = sym_vectors[(m, c)] * root;
        }
    }
    for (a, &c) in skew_kept.iter().enumerate() {
        let col = sym_kept.len() + a;
        let root = skew_values[c].sqrt();
        for i in 0..m {
            let x = half * skew_vectors[(i, c)] * root;
            factor[(i, col)] = x;
            factor[(bands - 1 - i, col)] = -x;
        }
    }
    Ok(KernelRoot {
        factor,
        symmetric: Some(sym_kept.len()),
    })
}

/// `K_ℓ^½` (bands × r) and, as [`kernel_factor`] forms it, the count `s` of its first columns
/// that are symmetric about the middle band (`R[n−1−i, c] = R[i, c]`); the others are skew
/// (`R[n−1−i, c] = −R[i, c]`, 0 on an odd order's middle band). [`Factor::congruence`] works
/// in that basis.
#[derive(Debug, PartialEq)]
pub struct KernelRoot {
    factor: Mat<f64>,
    symmetric: Option<usize>,
}

impl KernelRoot {
    /// A square root of no known symmetry, used as it stands.
    pub fn dense(factor: Mat<f64>) -> Self {
        Self {
            factor,
            symmetric: None,
        }
    }
}

impl std::ops::Deref for KernelRoot {
    type Target = Mat<f64>;

    fn deref(&self) -> &Mat<f64> {
        &self.factor
    }
}

/// Every eigenpair of a symmetric matrix, eigenvectors as columns (none for an empty matrix).
fn half_eigen(a: MatRef<'_, f64>) -> Result<(Vec<f64>, Mat<f64>), EstimatorError> {
    symmetric_eigen(a).map_err(|_| EstimatorError::NotPositiveDefinite)
}

/// Every eigenpair `A = U diag(λ) Uᵀ` of a symmetric matrix (its lower triangle read),
/// eigenvalues ascending and eigenvectors as columns, the same bits on any number of threads
/// ([`crate::DECOMPOSITION_SPLIT`]).
pub(crate) fn symmetric_eigen(
    a: MatRef<'_, f64>,
) -> Result<(Vec<f64>, Mat<f64>), faer::linalg::evd::EvdError> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::evd::{self, ComputeEigenvectors};
    let n = a.nrows();
    if n == 0 {
        // faer's scratch for eigenvectors counts `n − 1` reflections.
        return Ok((Vec::new(), Mat::zeros(0, 0)));
    }
    let par = crate::decomposition_par();
    let mut vectors = Mat::zeros(n, n);
    let mut values = faer::diag::Diag::zeros(n);
    let scratch =
        evd::self_adjoint_evd_scratch::<f64>(n, ComputeEigenvectors::Yes, par, Default::default());
    evd::self_adjoint_evd(
        a,
        values.as_mut(),
        Some(vectors.as_mut()),
        par,
        MemStack::new(&mut MemBuffer::new(scratch)),
        Default::default(),
    )?;
    Ok((values.column_vector().iter().copied().collect(), vectors))
}

/// The eigenpairs of a symmetric positive semidefinite `a` whose eigenvalues exceed `tolerance`
/// times the largest (the rest are round-off), eigenvectors as columns.
pub(crate) fn kept_eigen(
    a: MatRef<'_, f64>,
    tolerance: f64,
) -> Result<(Vec<f64>, Mat<f64>), EstimatorError> {
    let n = a.nrows();
    let (values, u) = symmetric_eigen(a).map_err(|_| EstimatorError::NotPositiveDefinite)?;
    let largest = values.iter().fold(0.0_f64, |a, v| a.max(*v));
    let keep: Vec<usize> = (0..n)
        .filter(|&i| values[i] > tolerance * largest)
        .collect();
    Ok((
        keep.iter().map(|&i| values[i]).collect(),
        Mat::from_fn(n, keep.len(), |i, c| u[(i, keep[c])]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The recursions give the dense product `X K_ℓ` to the round-off of its sums, from
        /// one band up, for length scales from a fraction of a band to far beyond the grid.
        #[test]
        fn the_matern_product_by_recursion_is_the_dense_product(
            rows in 1usize..5,
            bands in 1usize..90,
            log_length in -2.0..9.0f64,
            seed in 0u64..1000,
        ) {
            use rand::{Rng, SeedableRng};
            let length = log_length.exp();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let x = Mat::from_fn(rows, bands, |_, _| rng.random_range(-1.0..1.0));
            let fast = matern32_product(x.as_ref(), length);
            let kernel = kernel_matrix(bands, length);
            let dense = &x * &kernel;
            for r in 0..rows {
                for j in 0..bands {
                    // The dense sum's own error bound: bands ε Σ_i k(|j − i|) |x_i|.
                    let scale: f64 = (0..bands).map(|i| kernel[(i, j)] * x[(r, i)].abs()).sum();
                    let tolerance = 8.0 * bands as f64 * f64::EPSILON * scale;
                    proptest::prop_assert!(
                        (fast[(r, j)] - dense[(r, j)]).abs() <= tolerance,
                        "row {r}, band {j}: {} against {}", fast[(r, j)], dense[(r, j)]
                    );
                }
            }
        }
    }

    #[test]
    fn kernel_factor_reproduces_the_kernel() {
        // Odd and even orders, down to one band, where the halves are uneven or empty.
        for bands in [1, 2, 3, 30, 31, 200, 201] {
            for length in [0.5, 3.0, 40.0, 1000.0] {
                let f = kernel_factor(bands, length).unwrap();
                let k = &f * f.transpose();
                for i in 0..bands {
                    for j in 0..bands {
                        let want = matern32((i as f64 - j as f64).abs(), length);
                        assert!(
                            (k[(i, j)] - want).abs() < 1e-9,
                            "{bands} bands, {length}: {i},{j}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn kernel_factor_columns_are_the_kernels_scaled_eigenvectors() {
        for bands in [2, 7, 64, 151] {
            for length in [1.5, 24.0, 400.0] {
                let f = kernel_factor(bands, length).unwrap();
                let (values, _) =
                    kept_eigen(kernel_matrix(bands, length).as_ref(), KERNEL_RANK_TOLERANCE)
                        .unwrap();
                let largest = values.iter().fold(0.0_f64, |a, v| a.max(*v));
                // `RᵀR = diag(κ)`: orthogonal columns whose squared norms are the eigenvalues
                // the full eigendecomposition keeps.
                let gram = f.transpose() * &f;
                let mut norms: Vec<f64> = (0..f.ncols()).map(|c| gram[(c, c)]).collect();
                norms.sort_by(f64::total_cmp);
                assert_eq!(norms.len(), values.len(), "{bands} bands, {length}");
                for (a, b) in norms.iter().zip(&values) {
                    assert!(
                        (a - b).abs() < 1e-10 * largest,
                        "{bands}, {length}: {a} {b}"
                    );
                }
                for a in 0..f.ncols() {
                    for b in 0..a {
                        assert!(gram[(a, b)].abs() < 1e-10 * largest, "{bands}, {length}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_posterior_does_not_depend_on_which_square_root_of_the_kernel() {
        use crate::posterior::OutputPosterior;
        // `Σ = R M⁻¹ Rᵀ` is the same for every `R` with `R Rᵀ = a K_ℓ`: the split factor against
        // the full eigendecomposition's, odd and even bands, short and long length scales.
        for (bands, length) in [(40, 3.0), (41, 30.0), (64, 200.0)] {
            let (n, a, s) = (30, 0.7, 0.01);
            let p = bands + 1;
            let x = Mat::from_fn(n, p, |i, j| {
                if j == bands {
                    1.0
                } else {
                    (((i * 7 + 3) * (j + 1)) as f64 * 0.37).sin() + 0.1 * i as f64
                }
            });
            let y: Vec<f64> = (0..n).map(|i| (i as f64 * 0.3).cos()).collect();
            let precision = Mat::from_fn(p, p, |j, k| {
                (0..n).map(|i| x[(i, j)] * x[(i, k)]).sum::<f64>() / s
            });
            let natural: Vec<f64> = (0..p)
                .map(|j| (0..n).map(|i| x[(i, j)] * y[i]).sum::<f64>() / s)
                .collect();
            let mut variance = vec![a; bands];
            variance.push(f64::INFINITY);
            let prior = Prior {
                family: FittedFamily::Smooth,
                variance,
                smooth: Some(Smooth { bands, length }),
            };
            let split =
                OutputPosterior::from_natural(prior.clone(), s, precision.clone(), natural.clone())
                    .unwrap();
            let (values, vectors) =
                kept_eigen(kernel_matrix(bands, length).as_ref(), KERNEL_RANK_TOLERANCE).unwrap();
            let full_root = Mat::from_fn(bands, values.len(), |i, c| {
                vectors[(i, c)] * values[c].sqrt()
            });
            let factor = Factor::Smooth {
                kernel: Arc::new(KernelRoot::dense(full_root)),
                scale: a.sqrt(),
                rest: Vec::new(),
            };
            let full = OutputPosterior::with_factor(prior, factor, s, precision, natural).unwrap();
            let (cs, cf) = (split.covariance(), full.covariance());
            let largest = (0..p).map(|j| cf[(j, j)].abs()).fold(0.0, f64::max);
            for j in 0..p {
                for k in 0..p {
                    assert!(
                        (cs[(j, k)] - cf[(j, k)]).abs() <= 1e-9 * largest,
                        "{bands}, {length}: Σ[{j},{k}]"
                    );
                }
            }
            let scale = full.mean().iter().fold(0.0_f64, |m, v| m.max(v.abs()));
            for (a, b) in split.mean().iter().zip(full.mean()) {
                assert!((a - b).abs() <= 1e-9 * scale, "{bands}, {length}: {a} {b}");
            }
        }
    }

    #[test]
    fn the_split_congruence_is_the_dense_one() {
        // Odd and even orders, with and without named features beside the bands, a kernel of
        // full rank and one whose square root drops columns.
        for (bands, length, named) in [
            (1, 2.0, 1),
            (2, 2.0, 0),
            (9, 1.5, 2),
            (40, 8.0, 3),
            (41, 3000.0, 1),
        ] {
            let root = Arc::new(kernel_root(bands, length).unwrap());
            let factor = Factor::Smooth {
                kernel: Arc::clone(&root),
                scale: 0.8,
                rest: (0..named).map(|t| 0.5 + t as f64).collect(),
            };
            let w = bands + named;
            let x = Mat::from_fn(w + 3, w, |i, j| ((i * 31 + j * 17) as f64 * 0.13).sin());
            let a = x.transpose() * &x;
            let split = factor.congruence(a.as_ref());
            let r = factor.to_dense();
            let dense = r.transpose() * &a * &r;
            let largest = (0..r.ncols()).map(|c| dense[(c, c)]).fold(0.0, f64::max);
            assert_eq!((split.nrows(), split.ncols()), (r.ncols(), r.ncols()));
            for i in 0..r.ncols() {
                for j in 0..r.ncols() {
                    assert!(
                        (split[(i, j)] - dense[(i, j)]).abs() <= 1e-12 * largest,
                        "{bands}, {length}, {named}: ({i},{j}) {} {}",
                        split[(i, j)],
                        dense[(i, j)]
                    );
                    assert_eq!(split[(i, j)], split[(j, i)]);
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
