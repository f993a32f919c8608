//! Calibration transfer: what the old instrument would have read, learnt from the new one.
//!
//! A spectrophotometer replaced by another reads the same sample differently: its wavelengths
//! are shifted, its gain and offset differ, its grid may be another. During an overlap both
//! instruments read the same samples, and from those pairs each band `j` of the old instrument
//! is learnt as a Bayesian linear regression on the new instrument's bands near it:
//!
//! ```text
//! x_j = c_j + (m_j + δ_j)ᵀ z_W + e_j,   e_j ~ N(0, s_j),   δ_j ~ N(0, a s_j I),   p(s_j) ∝ 1/s_j
//! ```
//!
//! * `m_j` interpolates the new grid linearly at the old band's wavelength: the map when the
//!   instruments agree, so the prior is centred on "no difference";
//! * `W` (window `w`) is the pair of new bands around `λ_j` and `w` more on each side: a
//!   wavelength shift or a change of resolution moves a reading between neighbours only
//!   (the Bayesian form of piecewise direct standardisation);
//! * `c_j` has a flat prior (an offset is free, as centring makes it).
//!
//! With `c_j`, `δ_j` and `s_j` integrated out, the evidence of band `j` over the `N` pairs is
//!
//! ```text
//! log p(x_j) = −½ log|I + a G_j| − ((N − 1)/2) log Q_j + const
//! Q_j = rᵀr − bᵀ (G_j + I/a)⁻¹ b
//! ```
//!
//! with `r = x_j − Z m_j` the residual from the prior mean, `G_j = Z_Wᵀ Z_W` and `b = Z_Wᵀ r`,
//! all centred; every term comes from the pairs' statistics ([`TransferStatistics`]), which add
//! like a model's, so the map after any overlap batches is the map of all their rows. One
//! window and one amplitude `a` serve every band: the pair maximising the summed evidence among
//! those that leave each band three residual degrees of freedom (fewer where the pairs are
//! fewer than seven), as the regression's own priors do (`evidence::residual_cap`): a window as
//! wide as the rows would interpolate them.
//!
//! The posterior of `δ_j` is `N(P_j b, s_j P_j)` with `P_j = (G_j + I/a)⁻¹`, and `s_j` is
//! inverse-gamma with `ν = N − 1` degrees of freedom and scale `Q_j`, so a reconstructed band
//! has mean and variance
//!
//! ```text
//! x̂_j = x̄_j + (m_j + δ̂_j)ᵀ (z_W − z̄_W),   v_j = Q_j / (N − 3) · (1 + 1/N + dᵀ P_j d)
//! ```
//!
//! (`d = z_W − z̄_W`; the variance of the Student-t). The errors of neighbouring bands are
//! correlated (a reconstruction is off by a smooth curve, not by independent noise), so the
//! variance of a linear functional `βᵀx̂`, which a regression on the old bands is, takes the
//! correlation `C` of the pairs' residuals: `Var(βᵀx̂) = uᵀ C u` with `u_j = β_j √v_j`.

use faer::{Accum, Mat, MatRef, Par};

use crate::EstimatorError;
use crate::evidence::residual_cap;
use crate::grid::Grid;
use crate::predictor::Predictor;
use crate::prior::symmetric_eigen;

/// Fewest pairs a map is learnt from: the Student-t variance of a band needs `N − 1 > 2`.
pub const MIN_TRANSFER_ROWS: usize = 4;

/// Windows tried: new bands on each side of the interpolated pair.
const WINDOWS: [usize; 6] = [0, 1, 2, 4, 8, 16];

/// Amplitudes tried, relative to the mean variance of a new band: `a G_j` has a diagonal of
/// about `τ (N − 1)`, from a prior that barely moves the interpolation to one that lets the
/// pairs decide alone.
fn relative_amplitudes() -> impl Iterator<Item = f64> {
    (-6..=16).map(|k| 10f64.powf(f64::from(k) / 2.0))
}

/// The sufficient statistics of pairs of readings of the same samples, the new instrument's
/// `z` (`q` bands) and the old one's `x` (`p` bands): their count, means and centred
/// co-moments. Two sets combine exactly (Chan et al.'s pairwise update), so an overlap is
/// learnt batch by batch and no pair is read twice.
#[derive(Clone, Debug, PartialEq)]
pub struct TransferStatistics {
    rows: f64,
    new_mean: Vec<f64>,
    old_mean: Vec<f64>,
    /// `Σ (z − z̄)(z − z̄)ᵀ`, `q × q`.
    new_new: Mat<f64>,
    /// `Σ (z − z̄)(x − x̄)ᵀ`, `q × p`.
    new_old: Mat<f64>,
    /// `Σ (x − x̄)(x − x̄)ᵀ`, `p × p`.
    old_old: Mat<f64>,
}

impl TransferStatistics {
    /// No pairs yet, for `q` new and `p` old bands.
    pub fn empty(new_bands: usize, old_bands: usize) -> Self {
        Self {
            rows: 0.0,
            new_mean: vec![0.0; new_bands],
            old_mean: vec![0.0; old_bands],
            new_new: Mat::zeros(new_bands, new_bands),
            new_old: Mat::zeros(new_bands, old_bands),
            old_old: Mat::zeros(old_bands, old_bands),
        }
    }

    /// The statistics of pairs given as rows: row `i` of `new` and of `old` read one sample.
    pub fn from_rows(new: MatRef<'_, f64>, old: MatRef<'_, f64>) -> Result<Self, EstimatorError> {
        if new.nrows() != old.nrows() {
            return Err(EstimatorError::Dimension {
                what: "rows read by the old instrument",
                expected: new.nrows(),
                found: old.nrows(),
            });
        }
        // A reading whose square overflows would overflow the co-moments of any merge that
        // moves the mean (`δ²`), however few rows hold it: refused here, not at a later batch.
        let squares = |m: MatRef<'_, f64>| {
            (0..m.nrows()).all(|i| (0..m.ncols()).all(|j| (m[(i, j)] * m[(i, j)]).is_finite()))
        };
        if !squares(new) || !squares(old) {
            return Err(EstimatorError::NonFinite("a transfer pair"));
        }
        let n = new.nrows();
        if n == 0 {
            return Ok(Self::empty(new.ncols(), old.ncols()));
        }
        let (new_mean, new_c) = centred(new);
        let (old_mean, old_c) = centred(old);
        Self {
            rows: n as f64,
            new_mean,
            old_mean,
            new_new: new_c.transpose() * &new_c,
            new_old: new_c.transpose() * &old_c,
            old_old: old_c.transpose() * &old_c,
        }
        .finite()
    }

    /// `self` when its means and co-moments are finite: readings past about `10¹⁵⁴` square
    /// past the largest double, and [`Self::from_parts`] would refuse what was stored.
    fn finite(self) -> Result<Self, EstimatorError> {
        let finite = self
            .new_mean
            .iter()
            .chain(&self.old_mean)
            .all(|v| v.is_finite())
            && self.new_new.is_all_finite()
            && self.new_old.is_all_finite()
            && self.old_old.is_all_finite();
        if finite {
            Ok(self)
        } else {
            Err(EstimatorError::NonFinite("transfer statistics"))
        }
    }

    /// Adds `other`'s pairs: with `δ` the difference of the means and `n = n_a + n_b`,
    /// `M = M_a + M_b + (n_a n_b / n) δ_z δ_xᵀ` for each co-moment, and the means weighted by
    /// their counts.
    pub fn merge(&mut self, other: &Self) -> Result<(), EstimatorError> {
        let (q, p) = (self.new_mean.len(), self.old_mean.len());
        for (what, expected, found) in [
            ("new instrument bands", q, other.new_mean.len()),
            ("old instrument bands", p, other.old_mean.len()),
        ] {
            if expected != found {
                return Err(EstimatorError::Dimension {
                    what,
                    expected,
                    found,
                });
            }
        }
        if other.rows == 0.0 {
            return Ok(());
        }
        if self.rows == 0.0 {
            *self = other.clone().finite()?;
            return Ok(());
        }
        let (na, nb) = (self.rows, other.rows);
        let n = na + nb;
        let dz: Vec<f64> = (0..q)
            .map(|i| other.new_mean[i] - self.new_mean[i])
            .collect();
        let dx: Vec<f64> = (0..p)
            .map(|i| other.old_mean[i] - self.old_mean[i])
            .collect();
        let w = na * nb / n;
        let shift = |mean: &[f64], d: &[f64]| -> Vec<f64> {
            mean.iter().zip(d).map(|(m, d)| m + d * nb / n).collect()
        };
        *self = Self {
            rows: n,
            new_mean: shift(&self.new_mean, &dz),
            old_mean: shift(&self.old_mean, &dx),
            new_new: &self.new_new + &other.new_new + outer(&dz, &dz, w),
            new_old: &self.new_old + &other.new_old + outer(&dz, &dx, w),
            old_old: &self.old_old + &other.old_old + outer(&dx, &dx, w),
        }
        .finite()?;
        Ok(())
    }

    /// Number of pairs.
    pub fn rows(&self) -> f64 {
        self.rows
    }

    /// The means of both readings and the co-moments `(z z, z x, x x)`, as the codec writes
    /// them.
    pub(crate) fn parts(&self) -> (&[f64], &[f64], [MatRef<'_, f64>; 3]) {
        (
            &self.new_mean,
            &self.old_mean,
            [
                self.new_new.as_ref(),
                self.new_old.as_ref(),
                self.old_old.as_ref(),
            ],
        )
    }

    /// The statistics from the parts [`Self::parts`] gives and their count, checked: shapes
    /// that agree, finite entries, a count of at least 0.
    pub(crate) fn from_parts(
        rows: f64,
        new_mean: Vec<f64>,
        old_mean: Vec<f64>,
        [new_new, new_old, old_old]: [Mat<f64>; 3],
    ) -> Result<Self, EstimatorError> {
        let (q, p) = (new_mean.len(), old_mean.len());
        for (what, expected, found) in [
            (
                "new × new co-moments",
                (q, q),
                (new_new.nrows(), new_new.ncols()),
            ),
            (
                "new × old co-moments",
                (q, p),
                (new_old.nrows(), new_old.ncols()),
            ),
            (
                "old × old co-moments",
                (p, p),
                (old_old.nrows(), old_old.ncols()),
            ),
        ] {
            if expected != found {
                return Err(EstimatorError::Dimension {
                    what,
                    expected: expected.0 * expected.1,
                    found: found.0 * found.1,
                });
            }
        }
        let finite = rows.is_finite()
            && new_mean.iter().chain(&old_mean).all(|v| v.is_finite())
            && new_new.is_all_finite()
            && new_old.is_all_finite()
            && old_old.is_all_finite();
        if !finite {
            return Err(EstimatorError::NonFinite("transfer statistics"));
        }
        // A count of pairs; with none, nothing else; co-moments with no negative square.
        let empty = rows == 0.0
            && new_mean.iter().chain(&old_mean).all(|v| *v == 0.0)
            && [&new_new, &new_old, &old_old]
                .iter()
                .all(|m| m.norm_max() == 0.0);
        let squares =
            (0..q).all(|i| new_new[(i, i)] >= 0.0) && (0..p).all(|i| old_old[(i, i)] >= 0.0);
        if rows < 0.0 || rows.fract() != 0.0 || (rows == 0.0 && !empty) || !squares {
            return Err(crate::DecodeError::Invalid("transfer statistics").into());
        }
        Ok(Self {
            rows,
            new_mean,
            old_mean,
            new_new,
            new_old,
            old_old,
        })
    }

    /// Bands of the new instrument.
    pub fn new_bands(&self) -> usize {
        self.new_mean.len()
    }

    /// Bands of the old instrument.
    pub fn old_bands(&self) -> usize {
        self.old_mean.len()
    }
}

/// The column means of `m` and `m` with them taken off.
fn centred(m: MatRef<'_, f64>) -> (Vec<f64>, Mat<f64>) {
    let n = m.nrows() as f64;
    let means: Vec<f64> = (0..m.ncols())
        .map(|j| m.col(j).iter().sum::<f64>() / n)
        .collect();
    let c = Mat::from_fn(m.nrows(), m.ncols(), |i, j| m[(i, j)] - means[j]);
    (means, c)
}

/// `w · a bᵀ`.
fn outer(a: &[f64], b: &[f64], w: f64) -> Mat<f64> {
    Mat::from_fn(a.len(), b.len(), |i, j| w * a[i] * b[j])
}

/// The map of one old band: its window of new bands, the coefficients `m_j + δ̂_j` over it,
/// `P_j` and the band's predictive scale `Q_j / (N − 3)`.
#[derive(Clone, Debug)]
struct BandMap {
    first: usize,
    coefficients: Vec<f64>,
    precision_inverse: Mat<f64>,
    scale: f64,
}

/// What the old instrument would read, learnt from pairs of readings (the module's formulas).
#[derive(Clone, Debug)]
pub struct TransferMap {
    rows: f64,
    new_mean: Vec<f64>,
    old_mean: Vec<f64>,
    bands: Vec<BandMap>,
    /// Correlation of the pairs' residuals across old bands, `p × p`.
    correlation: Mat<f64>,
    window: usize,
    amplitude: f64,
    evidence: f64,
}

/// A new-instrument reading carried to the old instrument: per old band the mean and the
/// predictive variance.
#[derive(Clone, Debug, PartialEq)]
pub struct Reconstruction {
    pub mean: Vec<f64>,
    pub variance: Vec<f64>,
}

/// One band's statistics in a window, residual from `m_j` and centred, on the eigenvectors of
/// `G_j = V Λ Vᵀ`: `λ`, `c = Vᵀ b` and `rᵀr`.
struct BandProblem {
    first: usize,
    prior_mean: Vec<f64>,
    vectors: Mat<f64>,
    values: Vec<f64>,
    rotated: Vec<f64>,
    residual: f64,
}

/// One band's evidence at one amplitude, and the degrees of freedom it spends.
struct BandEvidence {
    log_evidence: f64,
    dof: f64,
    quadratic: f64,
}

impl TransferMap {
    /// The map learnt from `stats`, the new instrument reading on `new_grid` and the old one on
    /// `old_grid` (window and amplitude by the evidence, as the module says).
    pub fn fit(
        stats: &TransferStatistics,
        new_grid: &Grid,
        old_grid: &Grid,
    ) -> Result<Self, EstimatorError> {
        let (q, p) = (stats.new_bands(), stats.old_bands());
        for (what, expected, found) in [
            ("new instrument bands", new_grid.count(), q),
            ("old instrument bands", old_grid.count(), p),
        ] {
            if expected != found {
                return Err(EstimatorError::Dimension {
                    what,
                    expected,
                    found,
                });
            }
        }
        if stats.rows < MIN_TRANSFER_ROWS as f64 {
            return Err(EstimatorError::Untrained);
        }
        let n = stats.rows;
        let cap = residual_cap(n - 1.0);
        let mean_variance =
            (0..q).map(|i| stats.new_new[(i, i)]).sum::<f64>() / (q as f64 * (n - 1.0));
        let unit = if mean_variance > 0.0 {
            1.0 / mean_variance
        } else {
            1.0
        };

        let mut best: Option<(f64, usize, f64)> = None;
        for window in WINDOWS {
            let problems = (0..p)
                .map(|j| band_problem(stats, new_grid, old_grid.wavelength(j), j, window))
                .collect::<Result<Vec<_>, _>>()?;
            for tau in relative_amplitudes() {
                let a = tau * unit;
                let mut total = 0.0;
                let mut admissible = true;
                for problem in &problems {
                    let fit = band_evidence(problem, a, n);
                    if fit.dof > cap {
                        admissible = false;
                        break;
                    }
                    total += fit.log_evidence;
                }
                if admissible && best.is_none_or(|(e, _, _)| total > e) {
                    best = Some((total, window, a));
                }
            }
        }
        let (evidence, window, amplitude) = best.ok_or(EstimatorError::Untrained)?;

        let mut bands = Vec::with_capacity(p);
        for j in 0..p {
            let problem = band_problem(stats, new_grid, old_grid.wavelength(j), j, window)?;
            let fit = band_evidence(&problem, amplitude, n);
            // P_j = V (Λ + I/a)⁻¹ Vᵀ and δ̂_j = P_j b = V (Λ + I/a)⁻¹ c.
            let v = problem.vectors.as_ref();
            let width = problem.values.len();
            let shrunk: Vec<f64> = problem
                .values
                .iter()
                .map(|l| 1.0 / (l + 1.0 / amplitude))
                .collect();
            let coefficients = (0..width)
                .map(|i| {
                    problem.prior_mean[i]
                        + (0..width)
                            .map(|k| v[(i, k)] * shrunk[k] * problem.rotated[k])
                            .sum::<f64>()
                })
                .collect();
            let precision_inverse = Mat::from_fn(width, width, |i, l| {
                (0..width).map(|k| v[(i, k)] * shrunk[k] * v[(l, k)]).sum()
            });
            bands.push(BandMap {
                first: problem.first,
                coefficients,
                precision_inverse,
                scale: fit.quadratic / (n - 3.0),
            });
        }
        let correlation = residual_correlation(stats, &bands);
        Ok(Self {
            rows: n,
            new_mean: stats.new_mean.clone(),
            old_mean: stats.old_mean.clone(),
            bands,
            correlation,
            window,
            amplitude: amplitude / unit,
            evidence,
        })
    }

    /// The old instrument's reading of a sample the new one read as `z`.
    pub fn reconstruct(&self, z: &[f64]) -> Result<Reconstruction, EstimatorError> {
        if z.len() != self.new_mean.len() {
            return Err(EstimatorError::Dimension {
                what: "new instrument bands",
                expected: self.new_mean.len(),
                found: z.len(),
            });
        }
        if !z.iter().all(|v| v.is_finite()) {
            return Err(EstimatorError::NonFinite("a new instrument's reading"));
        }
        let d: Vec<f64> = z.iter().zip(&self.new_mean).map(|(v, m)| v - m).collect();
        let mut mean = Vec::with_capacity(self.bands.len());
        let mut variance = Vec::with_capacity(self.bands.len());
        for (band, x_bar) in self.bands.iter().zip(&self.old_mean) {
            let dw = &d[band.first..band.first + band.coefficients.len()];
            mean.push(x_bar + dot(&band.coefficients, dw));
            let p = band.precision_inverse.as_ref();
            let mut leverage = 0.0;
            for (i, di) in dw.iter().enumerate() {
                for (k, dk) in dw.iter().enumerate() {
                    leverage += di * p[(i, k)] * dk;
                }
            }
            variance.push(band.scale * (1.0 + 1.0 / self.rows + leverage.max(0.0)));
        }
        Ok(Reconstruction { mean, variance })
    }

    /// `Var(βᵀx̂) = uᵀ C u`, `u_j = β_j √v_j`: what the reconstruction's uncertainty adds to
    /// a prediction that is linear in the old bands with coefficients `beta` (for a nonlinear
    /// basis, its derivatives at `x̂` times the coefficients).
    pub fn variance_of(&self, reconstruction: &Reconstruction, beta: &[f64]) -> f64 {
        let u: Vec<f64> = beta
            .iter()
            .zip(&reconstruction.variance)
            .map(|(b, v)| b * v.sqrt())
            .collect();
        let c = self.correlation.as_ref();
        let mut total = 0.0;
        for (j, uj) in u.iter().enumerate() {
            for (k, uk) in u.iter().enumerate() {
                total += uj * c[(j, k)] * uk;
            }
        }
        total.max(0.0)
    }

    /// Pairs the map was learnt from.
    pub fn rows(&self) -> f64 {
        self.rows
    }

    /// New bands on each side of the interpolated pair that each old band reads.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The prior's amplitude relative to the new bands' mean variance.
    pub fn amplitude(&self) -> f64 {
        self.amplitude
    }

    /// The summed log evidence of the chosen window and amplitude (up to a constant).
    pub fn evidence(&self) -> f64 {
        self.evidence
    }

    /// `m_j + δ̂_j` of old band `j` as a row over every new band (zero outside its window).
    pub fn coefficients(&self, j: usize) -> Option<Vec<f64>> {
        let band = self.bands.get(j)?;
        let mut row = vec![0.0; self.new_mean.len()];
        row[band.first..band.first + band.coefficients.len()].copy_from_slice(&band.coefficients);
        Some(row)
    }
}

/// Band `j`'s window on the new grid and its centred statistics, residual from the
/// interpolation `m_j` at `nm` (clamped to the new grid's ends).
fn band_problem(
    stats: &TransferStatistics,
    new_grid: &Grid,
    nm: f64,
    j: usize,
    window: usize,
) -> Result<BandProblem, EstimatorError> {
    let q = new_grid.count();
    let u = ((nm - new_grid.start_nm) / new_grid.interval_nm).clamp(0.0, (q - 1) as f64);
    let low = (u.floor() as usize).min(q - 2);
    let t = u - low as f64;
    let first = low.saturating_sub(window);
    let last = (low + 1 + window).min(q - 1);
    let width = last - first + 1;
    let mut prior_mean = vec![0.0; width];
    prior_mean[low - first] = 1.0 - t;
    prior_mean[low + 1 - first] = t;

    let g_all = stats.new_new.as_ref();
    let c_all = stats.new_old.as_ref();
    // G m over the window and beyond it only through m's two bands.
    let gm = |i: usize| g_all[(i, low)] * (1.0 - t) + g_all[(i, low + 1)] * t;
    let gram = Mat::from_fn(width, width, |a, b| g_all[(first + a, first + b)]);
    let cross: Vec<f64> = (0..width)
        .map(|a| c_all[(first + a, j)] - gm(first + a))
        .collect();
    let m_c = c_all[(low, j)] * (1.0 - t) + c_all[(low + 1, j)] * t;
    let m_g_m = gm(low) * (1.0 - t) + gm(low + 1) * t;
    let residual = (stats.old_old[(j, j)] - 2.0 * m_c + m_g_m).max(0.0);
    let (values, vectors) = symmetric_eigen(gram.as_ref())
        .map_err(|_| EstimatorError::NonFinite("the transfer pairs' co-moments"))?;
    let values: Vec<f64> = values.iter().map(|l| l.max(0.0)).collect();
    let rotated = (0..width)
        .map(|k| (0..width).map(|i| vectors[(i, k)] * cross[i]).sum())
        .collect();
    Ok(BandProblem {
        first,
        prior_mean,
        vectors,
        values,
        rotated,
        residual,
    })
}

/// Band `j` at amplitude `a`, on `G_j`'s eigenpairs: `log|I + aG_j| = Σ log(1 + aλ_k)`,
/// `Q = rᵀr − Σ c_k² / (λ_k + 1/a)`, `γ = Σ aλ_k / (1 + aλ_k)` the well-determined directions.
fn band_evidence(problem: &BandProblem, a: f64, n: f64) -> BandEvidence {
    let (mut log_det, mut dof, mut explained) = (0.0, 0.0, 0.0);
    for (l, c) in problem.values.iter().zip(&problem.rotated) {
        log_det += (a * l).ln_1p();
        dof += a * l / (1.0 + a * l);
        explained += c * c / (l + 1.0 / a);
    }
    // A floor keeps an exact reconstruction (identical instruments) from an infinite evidence.
    let floor = 1e-12 * problem.residual.max(f64::MIN_POSITIVE) + 1e-300;
    let quadratic = (problem.residual - explained).max(floor);
    BandEvidence {
        log_evidence: -0.5 * log_det - 0.5 * (n - 1.0) * quadratic.ln(),
        dof,
        quadratic,
    }
}

/// The correlation of the pairs' residuals `E = X_c − Z_c M̃ᵀ` across old bands:
/// `EᵀE = S_xx − M̃ S_zx − S_zxᵀ M̃ᵀ + M̃ S_zz M̃ᵀ`, scaled to a unit diagonal (a band whose
/// residual vanishes is uncorrelated with the rest).
fn residual_correlation(stats: &TransferStatistics, bands: &[BandMap]) -> Mat<f64> {
    let (q, p) = (stats.new_bands(), stats.old_bands());
    let mut map = Mat::<f64>::zeros(p, q);
    for (j, band) in bands.iter().enumerate() {
        for (k, c) in band.coefficients.iter().enumerate() {
            map[(j, band.first + k)] = *c;
        }
    }
    // M̃ S_zz − S_zxᵀ, then (M̃ S_zz − S_zxᵀ) M̃ᵀ − M̃ S_zx + S_xx.
    let mut left = Mat::<f64>::zeros(p, q);
    faer::linalg::matmul::matmul(
        left.as_mut(),
        Accum::Replace,
        map.as_ref(),
        stats.new_new.as_ref(),
        1.0,
        Par::Seq,
    );
    left -= stats.new_old.transpose();
    let mut residual = stats.old_old.clone();
    faer::linalg::matmul::matmul(
        residual.as_mut(),
        Accum::Add,
        left.as_ref(),
        map.transpose(),
        1.0,
        Par::Seq,
    );
    faer::linalg::matmul::matmul(
        residual.as_mut(),
        Accum::Add,
        map.as_ref(),
        stats.new_old.as_ref(),
        -1.0,
        Par::Seq,
    );
    let scale: Vec<f64> = (0..p)
        .map(|j| {
            let v = residual[(j, j)];
            if v > 1e-300 { v.sqrt() } else { 0.0 }
        })
        .collect();
    Mat::from_fn(p, p, |j, k| {
        if j == k {
            1.0
        } else if scale[j] == 0.0 || scale[k] == 0.0 {
            0.0
        } else {
            (0.5 * (residual[(j, k)] + residual[(k, j)]) / (scale[j] * scale[k])).clamp(-1.0, 1.0)
        }
    })
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Two predictions of one output that share its noise: the old instrument's model through the
/// map (`a`) and the new instrument's own model (`b`), each a mean, a predictive variance and
/// the noise variance inside it. Their means combine by the precision of what each does not
/// know, `e = v − s`, and the noise is counted once:
///
/// ```text
/// μ = (μ_a/e_a + μ_b/e_b) / (1/e_a + 1/e_b),   v = 1/(1/e_a + 1/e_b) + (s_a/e_a + s_b/e_b) / (1/e_a + 1/e_b)
/// ```
///
/// (Product of the two Gaussians as they stand would count the noise twice and answer
/// intervals too narrow by up to √2.)
pub fn combine(a: PathPrediction, b: PathPrediction) -> PathPrediction {
    // What each does not know, floored relative to its variance, and the weights as ratios so
    // that no division by a tiny `e` overflows.
    let ea = (a.variance - a.noise).max(1e-12 * a.variance);
    let eb = (b.variance - b.noise).max(1e-12 * b.variance);
    match (ea.is_finite(), eb.is_finite()) {
        (false, false) => return if a.variance >= b.variance { a } else { b },
        (false, true) => return b,
        (true, false) => return a,
        (true, true) => {}
    }
    if ea + eb <= 0.0 {
        return a;
    }
    let (wa, wb) = (eb / (ea + eb), ea / (ea + eb));
    let noise = wa * a.noise + wb * b.noise;
    PathPrediction {
        mean: wa * a.mean + wb * b.mean,
        variance: ea * eb / (ea + eb) + noise,
        noise,
    }
}

/// The mixture of the two paths with the own model's weight `w` ([`PathRecord::own_weight`]):
///
/// ```text
/// μ = (1 − w) μ_a + w μ_b,   v = (1 − w)(v_a + μ_a²) + w (v_b + μ_b²) − μ²
/// ```
///
/// (the noise is mixed likewise). Measured against [`combine`] in `bench/instrument_swap.py`:
/// a model of a few overlap rows can be sure of itself and wrong, which precision cannot see
/// and its record of scores can.
pub fn mix(a: PathPrediction, b: PathPrediction, w: f64) -> PathPrediction {
    let w = w.clamp(0.0, 1.0);
    if w == 0.0 {
        return a;
    }
    if w == 1.0 {
        return b;
    }
    let mean = (1.0 - w) * a.mean + w * b.mean;
    let second = (1.0 - w) * (a.variance + a.mean * a.mean) + w * (b.variance + b.mean * b.mean);
    PathPrediction {
        mean,
        variance: (second - mean * mean).max((1.0 - w) * a.variance + w * b.variance),
        noise: (1.0 - w) * a.noise + w * b.noise,
    }
}

/// One path's prediction of an output: mean, predictive variance, and the noise variance it
/// includes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathPrediction {
    pub mean: f64,
    pub variance: f64,
    pub noise: f64,
}

/// The old instrument's model answering for the new instrument's reading `z` (on the map's new
/// grid) and the row's named `features`: the model predicts at the reconstructed row
/// `[x̂, features]`, and the map's uncertainty enters through the model's coefficients,
///
/// ```text
/// v_k = v_k(x̂) + Var(β̃_kᵀ x̂),   β̃_kj = μ_kj · dφ_j/dx (x̂_j)
/// ```
///
/// to first order in the reconstruction's error (the product of the model's and the map's
/// uncertainties is left out). An untrained output keeps its wide answer, with no noise of its
/// own to share in [`combine`].
pub fn through_map(
    predictor: &Predictor,
    map: &TransferMap,
    z: &[f64],
    features: &[f64],
) -> Result<Vec<PathPrediction>, EstimatorError> {
    let basis = predictor.basis();
    let bands = map.old_mean.len();
    if basis.spectral != bands {
        return Err(EstimatorError::Dimension {
            what: "old instrument bands of the model",
            expected: bands,
            found: basis.spectral,
        });
    }
    if basis.features != bands + features.len() {
        return Err(EstimatorError::Dimension {
            what: "named features",
            expected: basis.features - bands,
            found: features.len(),
        });
    }
    let reconstruction = map.reconstruct(z)?;
    let row = Mat::from_fn(1, basis.features, |_, j| {
        if j < bands {
            reconstruction.mean[j]
        } else {
            features[j - bands]
        }
    });
    let answered = predictor.predict(row.as_ref())?;
    let weights = predictor.weights();
    let slopes: Vec<f64> = (0..bands)
        .map(|j| basis.slope(j, reconstruction.mean[j]))
        .collect();
    Ok((0..weights.ncols())
        .map(|k| {
            let beta: Vec<f64> = (0..bands).map(|j| weights[(j, k)] * slopes[j]).collect();
            PathPrediction {
                mean: answered.mean[(0, k)],
                variance: answered.variance[(0, k)] + map.variance_of(&reconstruction, &beta),
                noise: predictor
                    .noise_variance_at(k, answered.mean[(0, k)])
                    .unwrap_or(0.0),
            }
        })
        .collect())
}

/// Rows of the new instrument a path must have been scored on before the old path may retire.
pub const RETIREMENT_ROWS: f64 = 30.0;

/// Rows after which a row's weight in a [`PathRecord`] has halved: the record says how the
/// paths do now, not how they did in the first days of the overlap.
pub const RECORD_HALF_LIFE_ROWS: f64 = 200.0;

/// How the two paths predicted new-instrument rows before either learnt them: per row, the log
/// density of its outputs under each path's Gaussian predictive (a proper score, so neither
/// sharper nor wider intervals than the truth warrant pay), weighted to the recent.
///
/// The criterion: the new instrument's own model stands on its own once it has been scored on
/// [`RETIREMENT_ROWS`] (weighted) rows and its mean log score is at least the map path's. From
/// then on the old instrument's model and the map are no longer needed for this instrument.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathRecord {
    /// The weighted count of rows scored.
    pub rows: f64,
    /// Weighted sums of the log scores of the map path and of the own path.
    pub map: f64,
    pub own: f64,
}

impl PathRecord {
    /// Scores one row: its `truth` per output and each path's predictions of it. Outputs that
    /// either path cannot yet answer with a finite, positive variance, or whose truth is not
    /// finite, are left out; a row with no output left is not counted.
    pub fn record(&mut self, truth: &[f64], map: &[PathPrediction], own: &[PathPrediction]) {
        let decay = 0.5f64.powf(1.0 / RECORD_HALF_LIFE_ROWS);
        let (mut map_score, mut own_score, mut scored) = (0.0, 0.0, false);
        for ((y, a), b) in truth.iter().zip(map).zip(own) {
            if !y.is_finite() {
                continue;
            }
            if let (Some(sa), Some(sb)) = (log_density(*y, a), log_density(*y, b)) {
                map_score += sa;
                own_score += sb;
                scored = true;
            }
        }
        // A row neither path could score (an own model still untrained) is no evidence.
        if !scored {
            return;
        }
        self.rows = decay * self.rows + 1.0;
        self.map = decay * self.map + map_score;
        self.own = decay * self.own + own_score;
    }

    /// Whether the new instrument's own model now predicts at least as well as the old model
    /// through the map (the criterion above).
    pub fn own_stands(&self) -> bool {
        self.rows >= RETIREMENT_ROWS * (1.0 - 1e-9) && self.own >= self.map
    }

    /// The weight of the new instrument's own model, `1 / (1 + exp(L_map − L_own))` with `L` the
    /// weighted sums of log scores: each path's posterior probability when the recent rows are
    /// the evidence (Bayesian model averaging on prequential scores), from even odds. 0 before
    /// any row was scored: until then the map path answers alone, since nothing has yet shown
    /// that a model of a few overlap rows predicts anything.
    pub fn own_weight(&self) -> f64 {
        if self.rows == 0.0 {
            return 0.0;
        }
        1.0 / (1.0 + (self.map - self.own).exp())
    }

    /// Mean log scores per row, (map path, own path); `None` before any row.
    pub fn mean_scores(&self) -> Option<(f64, f64)> {
        (self.rows > 0.0).then(|| (self.map / self.rows, self.own / self.rows))
    }
}

/// `log N(y; μ, v)`, if `v` is finite and positive.
fn log_density(y: f64, p: &PathPrediction) -> Option<f64> {
    (p.variance.is_finite() && p.variance > 0.0).then(|| {
        -0.5 * ((2.0 * std::f64::consts::PI * p.variance).ln() + (y - p.mean).powi(2) / p.variance)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Smooth absorbance-like spectra on `grid`: a baseline and three bands of random depth.
    fn spectra(rows: usize, seed: u64) -> Vec<[f64; 4]> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..rows)
            .map(|_| std::array::from_fn(|_| rng.random_range(0.0..1.0)))
            .collect()
    }

    fn read(sample: &[f64; 4], nm: f64) -> f64 {
        let peak = |centre: f64, width: f64| (-0.5 * ((nm - centre) / width).powi(2)).exp();
        0.2 + 0.1 * sample[0]
            + 0.8 * sample[1] * peak(470.0, 25.0)
            + 0.6 * sample[2] * peak(560.0, 30.0)
            + 0.5 * sample[3] * peak(640.0, 20.0)
    }

    /// Readings of `samples` on `grid` by an instrument that shifts wavelengths by `shift` nm,
    /// has gain `gain` and offset `offset`, and noise of sd `noise`.
    fn instrument(
        samples: &[[f64; 4]],
        grid: &Grid,
        (shift, gain, offset, noise): (f64, f64, f64, f64),
        seed: u64,
    ) -> Mat<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        Mat::from_fn(samples.len(), grid.count(), |i, j| {
            let e: f64 = (0..12).map(|_| rng.random_range(-0.5..0.5)).sum();
            gain * read(&samples[i], grid.wavelength(j) + shift) + offset + noise * e
        })
    }

    const OLD: (f64, f64, f64, f64) = (0.0, 1.0, 0.0, 2e-4);
    const NEW: (f64, f64, f64, f64) = (3.0, 0.95, 0.02, 2e-4);

    fn old_grid() -> Grid {
        Grid::new(400.0, 5.0, 61).unwrap()
    }

    /// The map learnt from `samples` read by the new instrument on `new` (noise seed `seed`)
    /// and by the old one on `old` (seed `seed + 1`).
    fn learnt(samples: &[[f64; 4]], new: &Grid, old: &Grid, seed: u64) -> TransferMap {
        let stats = TransferStatistics::from_rows(
            instrument(samples, new, NEW, seed).as_ref(),
            instrument(samples, old, OLD, seed + 1).as_ref(),
        )
        .unwrap();
        TransferMap::fit(&stats, new, old).unwrap()
    }

    fn row(m: &Mat<f64>, i: usize) -> Vec<f64> {
        (0..m.ncols()).map(|j| m[(i, j)]).collect()
    }

    /// RMS of the reconstruction error over the rows, the same of the raw difference, and the
    /// share of errors inside their 95 % interval.
    fn score(map: &TransferMap, new: &Mat<f64>, old: &Mat<f64>) -> (f64, f64, f64) {
        let (mut err, mut raw, mut inside, mut count) = (0.0, 0.0, 0.0, 0.0);
        for i in 0..new.nrows() {
            let z = row(new, i);
            let r = map.reconstruct(&z).unwrap();
            for j in 0..old.ncols() {
                let e = r.mean[j] - old[(i, j)];
                err += e * e;
                if new.ncols() == old.ncols() {
                    raw += (z[j] - old[(i, j)]).powi(2);
                }
                inside += f64::from(u8::from(e.abs() <= 1.96 * r.variance[j].sqrt()));
                count += 1.0;
            }
        }
        ((err / count).sqrt(), (raw / count).sqrt(), inside / count)
    }

    #[test]
    fn a_shifted_instrument_with_another_gain_and_offset_is_read_as_the_old_one() {
        let grid = old_grid();
        let train = spectra(30, 1);
        let test = spectra(200, 2);
        let map = learnt(&train, &grid, &grid, 3);
        let (err, raw, inside) = score(
            &map,
            &instrument(&test, &grid, NEW, 5),
            &instrument(&test, &grid, OLD, 6),
        );
        assert!(err < 0.02 * raw, "error {err} against {raw} unmapped");
        // The noise of both readings (2e-4 each) bounds the error from below.
        assert!(err < 2e-3, "error {err}");
        assert!((0.85..=1.0).contains(&inside), "95 % bands cover {inside}");
        assert!(map.window() > 0, "a 3 nm shift needs the neighbours");
    }

    #[test]
    fn identical_instruments_map_a_reading_to_itself() {
        let grid = old_grid();
        let train = spectra(12, 7);
        let x = instrument(&train, &grid, (0.0, 1.0, 0.0, 0.0), 8);
        let stats = TransferStatistics::from_rows(x.as_ref(), x.as_ref()).unwrap();
        let map = TransferMap::fit(&stats, &grid, &grid).unwrap();
        let test = instrument(&spectra(5, 9), &grid, (0.0, 1.0, 0.0, 0.0), 10);
        for i in 0..test.nrows() {
            let z = row(&test, i);
            let r = map.reconstruct(&z).unwrap();
            for (a, b) in r.mean.iter().zip(&z) {
                assert!((a - b).abs() < 1e-9, "{a} against {b}");
            }
        }
    }

    #[test]
    fn a_new_instrument_on_another_grid_is_read_on_the_old_one() {
        let (old, new) = (old_grid(), Grid::new(390.0, 10.0, 33).unwrap());
        let train = spectra(30, 11);
        let test = spectra(100, 12);
        let map = learnt(&train, &new, &old, 13);
        let (err, _, inside) = score(
            &map,
            &instrument(&test, &new, NEW, 15),
            &instrument(&test, &old, OLD, 16),
        );
        let spread = 0.1;
        assert!(err < 0.02 * spread, "error {err}");
        assert!((0.85..=1.0).contains(&inside), "95 % bands cover {inside}");
    }

    /// Pairs whose co-moments overflow are refused, by themselves and when merged, and a merge
    /// refused leaves the statistics as they were: statistics the codec would refuse to read
    /// back are never formed.
    #[test]
    fn pairs_whose_co_moments_overflow_are_refused() {
        let ordinary = Mat::from_fn(4, 2, |i, j| 0.5 + 0.1 * (i + j) as f64);
        let mut huge = ordinary.clone();
        huge[(1, 0)] = 1e200;
        for (new, old) in [(&huge, &ordinary), (&ordinary, &huge)] {
            let refused = TransferStatistics::from_rows(new.as_ref(), old.as_ref());
            assert!(
                matches!(refused, Err(EstimatorError::NonFinite(_))),
                "{refused:?}"
            );
        }
        // One row alone: its centred co-moments are 0, its square is not finite.
        let one_row = Mat::from_fn(1, 2, |_, j| if j == 0 { 1e200 } else { 0.5 });
        let refused = TransferStatistics::from_rows(one_row.as_ref(), one_row.as_ref());
        assert!(
            matches!(refused, Err(EstimatorError::NonFinite(_))),
            "{refused:?}"
        );
        // Each finite alone (1.2e154² is 1.44e308), their sum is not.
        let mut near = ordinary.clone();
        near[(0, 0)] = 1.2e154;
        let one = TransferStatistics::from_rows(near.as_ref(), ordinary.as_ref()).unwrap();
        let mut merged = one.clone();
        let refused = merged.merge(&one);
        assert!(
            matches!(refused, Err(EstimatorError::NonFinite(_))),
            "{refused:?}"
        );
        assert_eq!(merged, one);
    }

    #[test]
    fn the_map_of_merged_statistics_is_the_map_of_all_rows() {
        let grid = old_grid();
        let samples = spectra(24, 17);
        let new = instrument(&samples, &grid, NEW, 18);
        let old = instrument(&samples, &grid, OLD, 19);
        let all = TransferStatistics::from_rows(new.as_ref(), old.as_ref()).unwrap();
        let mut merged =
            TransferStatistics::from_rows(new.subrows(0, 9), old.subrows(0, 9)).unwrap();
        merged
            .merge(&TransferStatistics::from_rows(new.subrows(9, 15), old.subrows(9, 15)).unwrap())
            .unwrap();
        let (a, b) = (
            TransferMap::fit(&all, &grid, &grid).unwrap(),
            TransferMap::fit(&merged, &grid, &grid).unwrap(),
        );
        assert_eq!((a.window(), a.amplitude()), (b.window(), b.amplitude()));
        let z = row(&instrument(&spectra(1, 20), &grid, NEW, 21), 0);
        let (ra, rb) = (a.reconstruct(&z).unwrap(), b.reconstruct(&z).unwrap());
        for (x, y) in ra.mean.iter().zip(&rb.mean) {
            assert!((x - y).abs() < 1e-9, "{x} against {y}");
        }
        for (x, y) in ra.variance.iter().zip(&rb.variance) {
            assert!((x - y).abs() <= 1e-6 * x.abs(), "{x} against {y}");
        }
    }

    #[test]
    fn too_few_pairs_learn_no_map() {
        let grid = old_grid();
        let samples = spectra(MIN_TRANSFER_ROWS - 1, 22);
        let x = instrument(&samples, &grid, OLD, 23);
        let stats = TransferStatistics::from_rows(x.as_ref(), x.as_ref()).unwrap();
        assert_eq!(
            TransferMap::fit(&stats, &grid, &grid).unwrap_err(),
            EstimatorError::Untrained
        );
    }

    #[test]
    fn the_variance_of_one_band_is_that_bands_and_a_sum_counts_the_correlation() {
        let grid = old_grid();
        let train = spectra(30, 24);
        let map = learnt(&train, &grid, &grid, 25);
        let z = row(&instrument(&spectra(1, 27), &grid, NEW, 28), 0);
        let r = map.reconstruct(&z).unwrap();
        // The neighbours whose residuals correlate most.
        let j = (0..grid.count() - 1)
            .max_by(|&a, &b| {
                let c = &map.correlation;
                c[(a, a + 1)].abs().total_cmp(&c[(b, b + 1)].abs())
            })
            .unwrap();
        let mut beta = vec![0.0; grid.count()];
        beta[j] = 2.0;
        assert!((map.variance_of(&r, &beta) - 4.0 * r.variance[j]).abs() <= 1e-12);
        // Two neighbours: their residuals' correlation counted once each way.
        beta[j + 1] = 1.0;
        let v = map.variance_of(&r, &beta);
        let (a, b) = (4.0 * r.variance[j], r.variance[j + 1]);
        let rho = map.correlation[(j, j + 1)];
        assert!(rho.abs() > 0.1 && rho.abs() < 1.0, "correlation {rho}");
        let expected = a + b + 2.0 * rho * (a * b).sqrt();
        assert!(
            (v - expected).abs() <= 1e-12 * expected,
            "{v} against {expected}"
        );
    }

    /// A concentration behind a sample: a sum of its band depths plus noise.
    fn concentrations(samples: &[[f64; 4]], seed: u64) -> Mat<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        Mat::from_fn(samples.len(), 1, |i, _| {
            let s = &samples[i];
            1.0 + 2.0 * s[1] + 3.0 * s[2] - s[3] + 0.01 * rng.random_range(-1.0..1.0)
        })
    }

    #[test]
    fn the_old_model_answers_for_the_new_instrument_through_the_map() {
        use crate::{Basis, BatchStatistics, ModelConfig, ModelState, ReflectanceScale, Transform};
        let grid = old_grid();
        let bands = grid.count();
        let basis = Basis::spectral(
            bands,
            ReflectanceScale::Fraction,
            bands,
            true,
            Transform::Identity,
        );
        let config = ModelConfig::new(basis, 1);
        let calibration = spectra(80, 30);
        let stats = BatchStatistics::from_rows(
            &basis,
            instrument(&calibration, &grid, OLD, 31).as_ref(),
            concentrations(&calibration, 32).as_ref(),
        )
        .unwrap();
        let predictor = Predictor::new(&ModelState::fit(&config, stats).unwrap());
        let map = learnt(&calibration[..30], &grid, &grid, 33);

        let test = spectra(100, 34);
        let truth = concentrations(&test, 35);
        let (old, new) = (
            instrument(&test, &grid, OLD, 36),
            instrument(&test, &grid, NEW, 37),
        );
        let on_old = predictor.predict(old.as_ref()).unwrap();
        let on_raw_new = predictor.predict(new.as_ref()).unwrap();
        let (mut err_old, mut err_raw, mut err_map, mut inside) = (0.0, 0.0, 0.0, 0.0);
        // What the reconstruction moves the answer by, against the variance the map adds.
        let (mut moved, mut added) = (0.0, 0.0);
        for i in 0..test.len() {
            let answer = through_map(&predictor, &map, &row(&new, i), &[]).unwrap()[0];
            assert!(answer.variance >= answer.noise && answer.noise > 0.0);
            // The map's uncertainty only adds to the model's own at the reconstruction.
            let x_hat = map.reconstruct(&row(&new, i)).unwrap().mean;
            let at = predictor
                .predict(Mat::from_fn(1, bands, |_, j| x_hat[j]).as_ref())
                .unwrap();
            assert!((answer.mean - at.mean[(0, 0)]).abs() <= 1e-12 * (1.0 + answer.mean.abs()));
            assert!(answer.variance >= at.variance[(0, 0)]);
            moved += (answer.mean - on_old.mean[(i, 0)]).powi(2);
            added += answer.variance - at.variance[(0, 0)];
            let y = truth[(i, 0)];
            err_old += (on_old.mean[(i, 0)] - y).powi(2);
            err_raw += (on_raw_new.mean[(i, 0)] - y).powi(2);
            err_map += (answer.mean - y).powi(2);
            inside += f64::from(u8::from(
                (answer.mean - y).abs() <= 1.96 * answer.variance.sqrt(),
            ));
        }
        let n = test.len() as f64;
        let (err_old, err_raw, err_map) = (
            (err_old / n).sqrt(),
            (err_raw / n).sqrt(),
            (err_map / n).sqrt(),
        );
        assert!(
            err_map < 0.1 * err_raw,
            "through the map {err_map}, on the raw reading {err_raw}"
        );
        assert!(
            err_map < 3.0 * err_old,
            "through the map {err_map}, on the old reading {err_old}"
        );
        assert!(inside / n >= 0.85, "95 % intervals cover {}", inside / n);
        assert!(
            (0.25..=4.0).contains(&(moved / added)),
            "moved {} against {} added",
            moved / n,
            added / n
        );
    }

    #[test]
    fn the_old_path_retires_once_the_own_model_scores_as_well_over_enough_rows() {
        let truth = [1.0, -2.0];
        let sharp = |mean: f64| PathPrediction {
            mean,
            variance: 0.01,
            noise: 0.005,
        };
        let map = [sharp(1.05), sharp(-2.05)];
        let better = [sharp(1.0), sharp(-2.0)];
        let worse = [sharp(1.5), sharp(-2.5)];
        let mut record = PathRecord::default();
        assert_eq!(
            record.own_weight(),
            0.0,
            "before any row the map answers alone"
        );
        for _ in 0..29 {
            record.record(&truth, &map, &better);
            assert!(!record.own_stands(), "after {} rows", record.rows);
        }
        for _ in 0..5 {
            record.record(&truth, &map, &better);
        }
        assert!(record.own_stands());
        let (m, o) = record.mean_scores().unwrap();
        assert!(o > m);
        assert!(record.own_weight() > 0.99, "{}", record.own_weight());
        // A worse own model, however long scored, does not retire the map.
        let mut record = PathRecord::default();
        for _ in 0..500 {
            record.record(&truth, &map, &worse);
        }
        assert!(!record.own_stands());
        assert!(record.own_weight() < 1e-6, "{}", record.own_weight());
        // What it did long ago fades: the record follows the recent rows.
        for _ in 0..2000 {
            record.record(&truth, &map, &better);
        }
        assert!(record.own_stands());
        // Rows the own model cannot answer at all are no evidence: it never stands on them.
        let mut record = PathRecord::default();
        let untrained = PathPrediction {
            mean: 0.0,
            variance: f64::INFINITY,
            noise: 0.0,
        };
        for _ in 0..100 {
            record.record(&truth, &map, &[untrained, untrained]);
            record.record(&[f64::NAN, f64::NAN], &map, &better);
        }
        assert_eq!(record.rows, 0.0);
        assert!(!record.own_stands() && record.own_weight() == 0.0);
        // An output a path cannot answer yet is left out of both scores.
        let mut record = PathRecord::default();
        let untrained = PathPrediction {
            mean: 0.0,
            variance: f64::INFINITY,
            noise: 0.0,
        };
        record.record(&truth, &[map[0], untrained], &better);
        let (m, o) = record.mean_scores().unwrap();
        assert!(m.is_finite() && o.is_finite());
    }

    proptest! {
        #[test]
        fn statistics_of_two_batches_merge_to_those_of_all_rows(
            rows in 2usize..20,
            split in 1usize..19,
            seed in 0u64..1000,
        ) {
            let split = split.min(rows - 1);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let new = Mat::from_fn(rows, 5, |_, _| rng.random_range(-3.0..3.0) + 10.0);
            let old = Mat::from_fn(rows, 4, |_, _| rng.random_range(-1.0..1.0));
            let all = TransferStatistics::from_rows(new.as_ref(), old.as_ref()).unwrap();
            let mut merged = TransferStatistics::from_rows(new.subrows(0, split), old.subrows(0, split)).unwrap();
            merged.merge(&TransferStatistics::from_rows(
                new.subrows(split, rows - split), old.subrows(split, rows - split)).unwrap()).unwrap();
            prop_assert_eq!(merged.rows(), all.rows());
            let close = |a: &Mat<f64>, b: &Mat<f64>| (0..a.nrows()).all(|i| (0..a.ncols())
                .all(|j| (a[(i, j)] - b[(i, j)]).abs() <= 1e-9 * (1.0 + b[(i, j)].abs())));
            prop_assert!(close(&merged.new_new, &all.new_new));
            prop_assert!(close(&merged.new_old, &all.new_old));
            prop_assert!(close(&merged.old_old, &all.old_old));
            for (a, b) in merged.new_mean.iter().zip(&all.new_mean).chain(merged.old_mean.iter().zip(&all.old_mean)) {
                prop_assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()));
            }
        }

        #[test]
        fn two_paths_count_the_noise_once(
            mean_a in -10.0f64..10.0, mean_b in -10.0f64..10.0,
            noise_a in 0.01f64..2.0, noise_b in 0.01f64..2.0,
            known_a in 1e-4f64..5.0, known_b in 1e-4f64..5.0,
        ) {
            let a = PathPrediction { mean: mean_a, variance: noise_a + known_a, noise: noise_a };
            let b = PathPrediction { mean: mean_b, variance: noise_b + known_b, noise: noise_b };
            let c = combine(a, b);
            prop_assert!(c.mean >= mean_a.min(mean_b) - 1e-12 && c.mean <= mean_a.max(mean_b) + 1e-12);
            prop_assert!(c.noise >= noise_a.min(noise_b) - 1e-12 && c.noise <= noise_a.max(noise_b) + 1e-12);
            // Less unknown than either path alone, never below the noise.
            prop_assert!(c.variance - c.noise <= known_a.min(known_b) + 1e-12);
            prop_assert!(c.variance >= c.noise);
            // A path whose variance is all noise, or infinite, still combines to finite numbers.
            let sure = PathPrediction { mean: mean_a * 1e3, variance: noise_a, noise: noise_a };
            let c = combine(sure, b);
            prop_assert!(c.mean.is_finite() && c.variance.is_finite() && c.variance >= c.noise);
            let wide = PathPrediction { mean: 0.0, variance: f64::INFINITY, noise: 0.0 };
            prop_assert_eq!(combine(wide, b), b);
            prop_assert_eq!(combine(a, wide), a);
            let same = combine(a, a);
            prop_assert!((same.mean - mean_a).abs() <= 1e-12 * (1.0 + mean_a.abs()));
            prop_assert!((same.variance - (noise_a + known_a / 2.0)).abs() <= 1e-12 * (1.0 + noise_a + known_a));
        }

        #[test]
        fn a_mixture_lies_between_its_paths_and_is_at_least_as_wide_as_their_average(
            mean_a in -10.0f64..10.0, mean_b in -10.0f64..10.0,
            var_a in 0.01f64..5.0, var_b in 0.01f64..5.0,
            w in 0.0f64..1.0,
        ) {
            let a = PathPrediction { mean: mean_a, variance: var_a, noise: var_a / 2.0 };
            let b = PathPrediction { mean: mean_b, variance: var_b, noise: var_b / 3.0 };
            let c = mix(a, b, w);
            prop_assert!(c.mean >= mean_a.min(mean_b) - 1e-9 && c.mean <= mean_a.max(mean_b) + 1e-9);
            let average = (1.0 - w) * var_a + w * var_b;
            prop_assert!(c.variance >= average * (1.0 - 1e-12));
            let spread = w * (1.0 - w) * (mean_a - mean_b).powi(2);
            prop_assert!((c.variance - average - spread).abs() <= 1e-8 * (1.0 + c.variance));
            prop_assert_eq!(mix(a, b, 0.0), a);
            prop_assert_eq!(mix(a, b, 1.0), b);
        }

        #[test]
        fn a_basis_slope_is_the_derivative_of_its_term(
            r in 0.01f64..0.98,
            j in 0usize..3,
            k1 in 0.0f64..0.06,
            k2 in 0.0f64..0.6,
            percent in proptest::bool::ANY,
        ) {
            use crate::{Basis, ReflectanceScale, Saunderson, Transform};
            let scale = if percent { ReflectanceScale::Percent } else { ReflectanceScale::Fraction };
            let x = r / scale.to_fraction();
            for transform in [
                Transform::Identity,
                Transform::KubelkaMunk,
                Transform::Saunderson(Saunderson { k1, k2 }),
            ] {
                let basis = Basis::spectral(2, scale, 3, true, transform);
                let h = 1e-6 * x;
                let at = |v: f64| {
                    let mut row = vec![0.5 / scale.to_fraction(); 3];
                    row[j] = v;
                    basis.row(&row).unwrap()[j]
                };
                let numeric = (at(x + h) - at(x - h)) / (2.0 * h);
                let slope = basis.slope(j, x);
                prop_assert!((slope - numeric).abs() <= 1e-5 * (1.0 + numeric.abs()),
                    "{transform:?} band {j}: {slope} against {numeric}");
            }
        }
    }
}
