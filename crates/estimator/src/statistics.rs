//! Sufficient statistics of a set of rows.

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::sparse::linalg::matmul::dense_sparse_matmul;
use faer::sparse::{SparseColMatRef, SymbolicSparseColMatRef};
use faer::{Accum, Mat, MatMut, MatRef, Par};

use super::EstimatorError;

/// The statistics of one output: `G` (shared), `b = Σ φ y`, `q = Σ y²`, `N`, and the
/// informative rows `N_inf ≤ N` ([`BatchStatistics::informative_rows`]).
#[derive(Clone, Copy, Debug)]
pub struct OutputData<'a> {
    pub g: MatRef<'a, f64>,
    pub b: &'a [f64],
    pub q: f64,
    pub n: f64,
    pub informative: f64,
}

/// The sufficient statistics of a set of rows for `m` independent linear regressions that share
/// one design matrix `Φ` (rows × p) and have targets `Y` (rows × m):
///
/// * `G = ΦᵀΦ` (p × p, exactly symmetric, shared by every output),
/// * `B = ΦᵀY` (p × m), column `k` is `b_k = Σ φ y_k`,
/// * `q_k = Σ y_k²`,
/// * `N`, the (possibly forgetting-weighted) row count,
/// * `nonzero_k`, the weighted count of rows in which output `k` is not zero. It is what tells a
///   dye that has been used from one that merely appears in the schema (see
///   [`super::FitOptions::min_informative_rows`]).
/// * the rows in which each basis function is 0 ([`ZeroRows`]): where the posterior's basis
///   functions are all 0 a structural zero is predicted, and these say how far the output
///   strays from 0 there;
/// * optionally `YᵀY` (m × m), the cross products of the outputs. Models with a declared
///   spectrum keep it: with it, the normal equations of the forward map (K/S of each band as a
///   regression on the concentrations) are blocks of these statistics
///   ([`super::forward::forward_statistics`]), so recipe matching needs no second pass over the
///   rows;
/// * optionally the build-up statistics ([`BuildUp`]), kept with `YᵀY`: the same blocks for the
///   outputs passed through saturating build-up curves, from which the forward map chooses each
///   dye's curve.
///
/// Statistics of disjoint sets add up; every later step costs O(p³) per output whatever the
/// number of rows behind them.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchStatistics {
    g: Mat<f64>,
    b: Mat<f64>,
    q: Vec<f64>,
    nonzero: Vec<f64>,
    n: f64,
    zero_rows: Option<ZeroRows>,
    yy: Option<Mat<f64>>,
    build_up: Option<BuildUp>,
}

/// The saturation concentrations `s` of the build-up curves the statistics keep besides the
/// linear one (`s = ∞`), in the outputs' units (% owf for dyes): a factor of 2 apart, from a
/// dye that barely bends over 0–4 % owf (`s = 20`: 4 % colours like 3.3 %) to one that is
/// nearly saturated at 2 % (`s = 1.25`: like 0.77 %).
pub const BUILD_UP_SATURATIONS: [f64; 5] = [20.0, 10.0, 5.0, 2.5, 1.25];

/// A build-up curve `h_s(c) = c / (1 + c/s) = s·c / (s + c)`: how much colour `c` of a dye gives
/// when the fibre's dye sites fill (a Langmuir-type isotherm, linear at low `c`, saturating
/// towards `s`); `h_∞(c) = c`. Negative `c` (no recipe has one) is taken as it is.
#[inline]
pub fn build_up(c: f64, saturation: f64) -> f64 {
    if saturation.is_finite() && c > 0.0 {
        saturation * c / (saturation + c)
    } else {
        c
    }
}

/// Its inverse on `[0, s)`: `c = s·u / (s − u)`; `∞` for `u ≥ s`.
#[inline]
pub fn build_up_inverse(u: f64, saturation: f64) -> f64 {
    if !saturation.is_finite() || u <= 0.0 {
        u
    } else if u < saturation {
        saturation * u / (saturation - u)
    } else {
        f64::INFINITY
    }
}

/// `dh_s/dc = s² / (s + c)²` (1 for the linear curve).
#[inline]
pub fn build_up_slope(c: f64, saturation: f64) -> f64 {
    if saturation.is_finite() && c > 0.0 {
        (saturation / (saturation + c)).powi(2)
    } else {
        1.0
    }
}

/// The statistics of the outputs through every build-up curve: with
/// `ψ(y) = (y, h_{s₁}(y), …, h_{s_G}(y))` (curve-major: column `a·m + k` is output `k` through
/// curve `a`, curve 0 the linear one),
///
/// ```text
/// ΨᵀΨ = Σ_rows ψψᵀ     ((G+1)m × (G+1)m)
/// ΦᵀΨ = Σ_rows φψᵀ     (p × (G+1)m)
/// ```
///
/// Additive like the rest. The forward map's normal equations for any blend of neighbouring
/// curves per output are weighted sums of blocks of these
/// ([`super::forward::forward_statistics_with`]).
#[derive(Clone, Debug, PartialEq)]
pub struct BuildUp {
    saturations: Vec<f64>,
    gram: Mat<f64>,
    design: Mat<f64>,
    relative: Option<Relative>,
}

/// A row's level in [`Relative`] is at least this K/S, about a bleached fabric's own (a reading
/// of 87 %): no row weighs more than an undyed white, so one reading near or above full scale
/// (a brightener, a calibration slip) cannot outweigh the pale dips.
pub const MIN_LEVEL: f64 = 1e-2;

/// The forward map's statistics once more, each row weighted by its relative precision
///
/// ```text
/// w = 1 / L²,   L = max(mean_λ φ_λ, MIN_LEVEL)      (the row's mean K/S over the bands)
/// ΨᵀWΨ,  ΦᵀWΨ,  Φ_fᵀWΦ  (f: the basis functions after the bands),  Σ w φ_λ² (bands),  Σ w
/// ```
///
/// so that the forward map is fitted in K/S error relative to each dip's depth (one weight per
/// row, from its mean over the bands: a deep dip's bands off its dyes' peaks are weighted by the
/// same small weight). A dip's K/S scatters in proportion to its depth (the dye taken up varies
/// by a few per cent from one dyeing to the next), and a colour difference follows the relative
/// error of K/S rather than its absolute one. Fitted unweighted, the deep shades' scatter (and
/// any misfit of the build-up curves there) sets the intercept, the fabric's own K/S, of which a
/// pale shade is mostly made. The weight is a function of the row alone, so these statistics are
/// additive like the rest. It is computed from the measured K/S, the response, which biases the
/// fit low by about twice the squared relative scatter (0.2 % at 3 %).
#[derive(Clone, Debug, PartialEq)]
pub struct Relative {
    gram: Mat<f64>,
    design: Mat<f64>,
    fabric: Mat<f64>,
    squares: Vec<f64>,
    weight: f64,
}

/// `a` with its curve-major columns `c·m + k` (curve `c`, output `k`) moved to `c·(m+1) + k`
/// and a zero column at `c·(m+1) + m` for every curve: one more output, 0 in every row.
fn widen_columns(a: MatRef<'_, f64>, m: usize) -> Mat<f64> {
    let curves = a.ncols() / m.max(1);
    Mat::from_fn(a.nrows(), curves * (m + 1), |r, col| {
        let (c, k) = (col / (m + 1), col % (m + 1));
        if k == m || m == 0 {
            0.0
        } else {
            a[(r, c * m + k)]
        }
    })
}

/// `a` with a zero row inserted at `row` and a zero column at `column`, where given.
pub(crate) fn insert_zeros(
    a: MatRef<'_, f64>,
    row: Option<usize>,
    column: Option<usize>,
) -> Mat<f64> {
    // The index in `a` of position `i` of the result, or None at the inserted one.
    let from = |i: usize, at: Option<usize>| match at.map(|at| i.cmp(&at)) {
        None | Some(std::cmp::Ordering::Less) => Some(i),
        Some(std::cmp::Ordering::Equal) => None,
        Some(std::cmp::Ordering::Greater) => Some(i - 1),
    };
    Mat::from_fn(
        a.nrows() + usize::from(row.is_some()),
        a.ncols() + usize::from(column.is_some()),
        |r, c| match (from(r, row), from(c, column)) {
            (Some(r), Some(c)) => a[(r, c)],
            _ => 0.0,
        },
    )
}

/// [`widen_columns`] on both sides of a curve-major Gram matrix.
fn widen_gram(a: MatRef<'_, f64>, m: usize) -> Mat<f64> {
    let curves = a.ncols() / m.max(1);
    let width = curves * (m + 1);
    let at = |i: usize| (i / (m + 1), i % (m + 1));
    Mat::from_fn(width, width, |i, j| {
        let ((ci, ki), (cj, kj)) = (at(i), at(j));
        if ki == m || kj == m || m == 0 {
            0.0
        } else {
            a[(ci * m + ki, cj * m + kj)]
        }
    })
}

impl Relative {
    /// The weighted statistics of design `phi` (its first `bands` columns the bands' K/S) and
    /// the rows' `psi`.
    fn of(phi: MatRef<'_, f64>, psi: MatRef<'_, f64>, bands: usize) -> Self {
        let root: Vec<f64> = (0..phi.nrows())
            .map(|r| {
                let level = (0..bands).map(|l| phi[(r, l)]).sum::<f64>() / bands.max(1) as f64;
                1.0 / level.max(MIN_LEVEL)
            })
            .collect();
        let phi_w = Mat::from_fn(phi.nrows(), phi.ncols(), |r, j| root[r] * phi[(r, j)]);
        let psi_w = Mat::from_fn(psi.nrows(), psi.ncols(), |r, j| root[r] * psi[(r, j)]);
        let mut design = Mat::zeros(phi.ncols(), psi.ncols());
        targets_product(design.as_mut(), phi_w.as_ref(), psi_w.as_ref());
        let fabric = phi_w.subcols(bands, phi.ncols() - bands).transpose() * phi_w.as_ref();
        let squares = (0..bands)
            .map(|l| (0..phi.nrows()).map(|r| phi_w[(r, l)].powi(2)).sum())
            .collect();
        Self {
            gram: gram(psi_w.as_ref()),
            design,
            fabric,
            squares,
            weight: root.iter().map(|w| w * w).sum(),
        }
    }

    /// Reassembles the weighted statistics (used by the decoder).
    pub(crate) fn from_parts(
        gram: Mat<f64>,
        design: Mat<f64>,
        fabric: Mat<f64>,
        squares: Vec<f64>,
        weight: f64,
    ) -> Self {
        Self {
            gram,
            design,
            fabric,
            squares,
            weight,
        }
    }

    /// The same statistics with one more output, 0 in every row (`m` outputs before).
    fn with_output_appended(&self, m: usize) -> Self {
        Self {
            gram: widen_gram(self.gram.as_ref(), m),
            design: widen_columns(self.design.as_ref(), m),
            fabric: self.fabric.clone(),
            squares: self.squares.clone(),
            weight: self.weight,
        }
    }

    /// The same statistics with a basis function inserted at `j` (after the bands) that was 0
    /// in every row.
    fn with_function_inserted(&self, j: usize) -> Self {
        let bands = self.squares.len();
        Self {
            gram: self.gram.clone(),
            design: insert_zeros(self.design.as_ref(), Some(j), None),
            fabric: insert_zeros(self.fabric.as_ref(), Some(j - bands), Some(j)),
            squares: self.squares.clone(),
            weight: self.weight,
        }
    }

    /// `ΨᵀWΨ` (lower triangle kept).
    pub fn gram(&self) -> MatRef<'_, f64> {
        self.gram.as_ref()
    }

    /// `ΦᵀWΨ`.
    pub fn design(&self) -> MatRef<'_, f64> {
        self.design.as_ref()
    }

    /// `Φ_fᵀWΦ`: the rows of `ΦᵀWΦ` of the basis functions after the bands.
    pub fn fabric(&self) -> MatRef<'_, f64> {
        self.fabric.as_ref()
    }

    /// `Σ w φ_λ²` per band.
    pub fn squares(&self) -> &[f64] {
        &self.squares
    }

    /// `Σ w`.
    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// Whether `other` was computed with the same split of bands and other basis functions.
    fn same_shape(&self, other: &Relative) -> bool {
        self.fabric.nrows() == other.fabric.nrows() && self.squares.len() == other.squares.len()
    }

    /// Whether these are the weighted statistics of a basis of `dim` functions whose first
    /// `bands` are the bands, and hold a positive weight wherever they hold rows.
    pub fn fits(&self, dim: usize, bands: usize) -> bool {
        self.squares.len() == bands
            && self.fabric.nrows() + bands == dim
            && self.fabric.ncols() == dim
            && self.design.nrows() == dim
            && self.weight >= 0.0
            && self.squares.iter().all(|v| *v >= 0.0)
    }

    fn add(&mut self, other: &Relative) {
        self.gram += &other.gram;
        self.design += &other.design;
        self.fabric += &other.fabric;
        for (a, b) in self.squares.iter_mut().zip(&other.squares) {
            *a += b;
        }
        self.weight += other.weight;
    }

    fn scale(&mut self, weight: f64) {
        self.gram *= faer::Scale(weight);
        self.design *= faer::Scale(weight);
        self.fabric *= faer::Scale(weight);
        self.squares.iter_mut().for_each(|v| *v *= weight);
        self.weight *= weight;
    }

    fn is_finite(&self) -> bool {
        all_finite(self.gram.as_ref())
            && all_finite(self.design.as_ref())
            && all_finite(self.fabric.as_ref())
            && self.squares.iter().all(|v| v.is_finite())
            && self.weight.is_finite()
    }
}

impl BuildUp {
    /// `ψ(y)` of the rows `y` (rows × m) for the curves `saturations` (the linear one first,
    /// `∞`).
    fn psi(y: MatRef<'_, f64>, saturations: &[f64]) -> Mat<f64> {
        let m = y.ncols();
        Mat::from_fn(y.nrows(), saturations.len() * m, |r, col| {
            build_up(y[(r, col % m)], saturations[col / m])
        })
    }

    /// The statistics of design `phi` (its first `bands` columns the bands' K/S) and targets
    /// `y` through the curves `saturations`, unweighted and weighted ([`Relative`]).
    fn of(phi: MatRef<'_, f64>, y: MatRef<'_, f64>, saturations: &[f64], bands: usize) -> Self {
        let psi = Self::psi(y, saturations);
        let mut design = Mat::zeros(phi.ncols(), psi.ncols());
        targets_product(design.as_mut(), phi, psi.as_ref());
        Self {
            saturations: saturations.to_vec(),
            gram: gram(psi.as_ref()),
            design,
            relative: Some(Relative::of(phi, psi.as_ref(), bands)),
        }
    }

    /// The curves of [`BUILD_UP_SATURATIONS`], the linear one first.
    pub fn default_saturations() -> Vec<f64> {
        std::iter::once(f64::INFINITY)
            .chain(BUILD_UP_SATURATIONS)
            .collect()
    }

    /// Whether `saturations` is a ladder the forward map can blend along: the linear curve
    /// (`∞`) first, then finite positive saturations, strictly decreasing (so that neighbouring
    /// rungs bound every blend between them, [`crate::build_up::Curve`]).
    pub fn is_ladder(saturations: &[f64]) -> bool {
        saturations.first() == Some(&f64::INFINITY)
            && saturations[1..].iter().all(|s| s.is_finite() && *s > 0.0)
            && saturations.windows(2).all(|w| w[1] < w[0])
    }

    /// Reassembles build-up statistics (used by the decoder).
    pub(crate) fn from_parts(
        saturations: Vec<f64>,
        gram: Mat<f64>,
        design: Mat<f64>,
        relative: Option<Relative>,
    ) -> Self {
        Self {
            saturations,
            gram,
            design,
            relative,
        }
    }

    /// The saturation of each curve, `∞` (linear) first.
    pub fn saturations(&self) -> &[f64] {
        &self.saturations
    }

    /// `ΨᵀΨ`.
    pub fn gram(&self) -> MatRef<'_, f64> {
        self.gram.as_ref()
    }

    /// `ΦᵀΨ`.
    pub fn design(&self) -> MatRef<'_, f64> {
        self.design.as_ref()
    }

    /// The same statistics with one more output, 0 in every row (`m` outputs before): `h(0) = 0`
    /// through every curve, so its rows and columns of `ΨᵀΨ` and `ΦᵀΨ` are 0.
    fn with_output_appended(&self, m: usize) -> Self {
        Self {
            saturations: self.saturations.clone(),
            gram: widen_gram(self.gram.as_ref(), m),
            design: widen_columns(self.design.as_ref(), m),
            relative: self
                .relative
                .as_ref()
                .map(|relative| relative.with_output_appended(m)),
        }
    }

    /// The same statistics with a basis function inserted at `j` (after the bands) that was 0
    /// in every row.
    fn with_function_inserted(&self, j: usize) -> Self {
        Self {
            saturations: self.saturations.clone(),
            gram: self.gram.clone(),
            design: insert_zeros(self.design.as_ref(), Some(j), None),
            relative: self
                .relative
                .as_ref()
                .map(|relative| relative.with_function_inserted(j)),
        }
    }

    /// The weighted statistics, kept by the statistics of rows folded since they exist (a sum
    /// with older statistics has none, and its forward map stays unweighted).
    pub fn relative(&self) -> Option<&Relative> {
        self.relative.as_ref()
    }

    fn add(&mut self, other: &BuildUp) {
        self.gram += &other.gram;
        self.design += &other.design;
        self.relative = match (self.relative.take(), &other.relative) {
            (Some(mut a), Some(b)) if a.same_shape(b) => {
                a.add(b);
                Some(a)
            }
            _ => None,
        };
    }

    fn scale(&mut self, weight: f64) {
        self.gram *= faer::Scale(weight);
        self.design *= faer::Scale(weight);
        if let Some(relative) = &mut self.relative {
            relative.scale(weight);
        }
    }

    fn is_finite(&self) -> bool {
        all_finite(self.gram.as_ref())
            && all_finite(self.design.as_ref())
            && self.relative.as_ref().is_none_or(Relative::is_finite)
    }
}

/// Per basis function `j`, the rows in which `φ_j = 0`:
///
/// ```text
/// z_j  = Σ_rows [φ_j = 0]            (weighted count, p)
/// Z_jk = Σ_rows [φ_j = 0] y_k²       (p × m)
/// ```
///
/// Additive like the rest of the statistics. A posterior that uses only the basis functions
/// `U` (its intercept pruned: a dye's zeros are structural) predicts exactly 0 with no weight
/// uncertainty on a row where every `φ_j`, `j ∈ U`, is 0; the output's spread about 0 on such
/// rows is a property of those rows, not of a dose's noise. [`BatchStatistics::zero_regime`]
/// bounds it from these marginals.
#[derive(Clone, Debug, PartialEq)]
pub struct ZeroRows {
    count: Vec<f64>,
    square: Mat<f64>,
}

impl ZeroRows {
    /// A basis function inserted at `j` that was 0 in every one of `n` rows, whose outputs'
    /// sums of squares are `q`: it is 0 in all of them, with all of their squares.
    fn with_function_inserted(&self, j: usize, n: f64, q: &[f64]) -> Self {
        let mut count = self.count.clone();
        count.insert(j, n);
        let mut square = insert_zeros(self.square.as_ref(), Some(j), None);
        for (k, v) in q.iter().enumerate() {
            square[(j, k)] = *v;
        }
        Self { count, square }
    }

    /// One more output, 0 in every row: its squares are 0 wherever a function is.
    fn with_output_appended(&self) -> Self {
        Self {
            count: self.count.clone(),
            square: insert_zeros(self.square.as_ref(), None, Some(self.square.ncols())),
        }
    }

    fn zeros(p: usize, m: usize) -> Self {
        Self {
            count: vec![0.0; p],
            square: Mat::zeros(p, m),
        }
    }

    /// The zero rows of the design `phi` (rows × p) with targets `y` (rows × m): a count per
    /// column, then `O(min(zeros, non-zeros) · m)` for a column that has both. A column without
    /// a 0 (a reflectance, the intercept) costs only its count; a mostly-zero one (a one-hot, an
    /// unused dye's dose) subtracts its few non-zero rows' `y²` from `q` (both summed in row
    /// order, so exactly 0 where every non-zero target sits on a non-zero input; the clamp only
    /// guards the sign); any other adds its zero rows.
    fn of(phi: MatRef<'_, f64>, y: MatRef<'_, f64>) -> Self {
        let (n, p, m) = (phi.nrows(), phi.ncols(), y.ncols());
        let count: Vec<usize> = (0..p)
            .map(|j| phi.col(j).iter().filter(|v| **v == 0.0).count())
            .collect();
        let mut zeros = Self::zeros(p, m);
        zeros.count = count.iter().map(|c| *c as f64).collect();
        if count.iter().all(|c| *c == 0) {
            return zeros;
        }
        // Row r's squared targets as column r, contiguous; their sums, `q`.
        let squares = Mat::from_fn(m, n, |k, r| y[(r, k)] * y[(r, k)]);
        let q: Vec<f64> = (0..m).map(|k| squares.row(k).iter().sum()).collect();
        // Column j holds Z_j· (m values, contiguous).
        let mut square_t = Mat::<f64>::zeros(m, p);
        for (j, &zero_rows) in count.iter().enumerate() {
            let acc = square_t.col_as_slice_mut(j);
            if zero_rows == 0 {
                continue;
            }
            if zero_rows == n {
                acc.copy_from_slice(&q);
                continue;
            }
            let mostly_zero = 2 * zero_rows > n;
            for (r, v) in phi.col(j).iter().enumerate() {
                if (*v == 0.0) != mostly_zero {
                    for (a, s) in acc.iter_mut().zip(squares.col_as_slice(r)) {
                        *a += s;
                    }
                }
            }
            if mostly_zero {
                for (a, q) in acc.iter_mut().zip(&q) {
                    *a = (q - *a).max(0.0);
                }
            }
        }
        zeros.square = square_t.transpose().to_owned();
        zeros
    }

    /// Reassembles zero rows from their parts (used by the decoder).
    pub(crate) fn from_parts(count: Vec<f64>, square: Mat<f64>) -> Self {
        Self { count, square }
    }

    /// `z_j`.
    pub fn count(&self) -> &[f64] {
        &self.count
    }

    /// `Z` (p × m).
    pub fn square(&self) -> MatRef<'_, f64> {
        self.square.as_ref()
    }

    fn add(&mut self, other: &ZeroRows) {
        for (a, b) in self.count.iter_mut().zip(&other.count) {
            *a += b;
        }
        self.square += &other.square;
    }

    fn scale(&mut self, weight: f64) {
        self.count.iter_mut().for_each(|v| *v *= weight);
        self.square *= faer::Scale(weight);
    }

    fn is_finite(&self) -> bool {
        self.count.iter().all(|v| v.is_finite() && *v >= 0.0) && all_finite(self.square.as_ref())
    }

    /// Whether these can be the zero rows of `n` rows: no count above `n` and no negative sum
    /// of squares (up to rounding in the counts, which forgetting scales with `n`).
    pub(crate) fn consistent_with(&self, n: f64) -> bool {
        let most = n * (1.0 + 1e-9) + 1e-9;
        self.count.iter().all(|c| *c <= most)
            && (0..self.square.ncols()).all(|k| self.square.col(k).iter().all(|v| *v >= 0.0))
    }
}

impl BatchStatistics {
    /// Statistics of no rows.
    pub fn zeros(p: usize, m: usize) -> Self {
        Self {
            g: Mat::zeros(p, p),
            b: Mat::zeros(p, m),
            q: vec![0.0; m],
            nonzero: vec![0.0; m],
            n: 0.0,
            zero_rows: Some(ZeroRows::zeros(p, m)),
            yy: None,
            build_up: None,
        }
    }

    /// The statistics of the same rows with one more output (appended after the others) that
    /// was 0 in every row, as a new dye joins a range: every statistic of it is an exact 0
    /// (`ΦᵀY`'s column, its sum of squares and non-zero count, its row and column of `YᵀY`, of
    /// `ΨᵀΨ` and `ΦᵀΨ` and of their weighted copy, its squares over the zero rows), so the
    /// result equals the statistics of those rows computed with the output declared from the
    /// start.
    pub fn with_output_appended(&self) -> Self {
        let m = self.outputs();
        Self {
            g: self.g.clone(),
            b: insert_zeros(self.b.as_ref(), None, Some(m)),
            q: self.q.iter().copied().chain([0.0]).collect(),
            nonzero: self.nonzero.iter().copied().chain([0.0]).collect(),
            n: self.n,
            zero_rows: self.zero_rows.as_ref().map(ZeroRows::with_output_appended),
            yy: self
                .yy
                .as_ref()
                .map(|yy| insert_zeros(yy.as_ref(), Some(m), Some(m))),
            build_up: self
                .build_up
                .as_ref()
                .map(|build_up| build_up.with_output_appended(m)),
        }
    }

    /// The statistics of the same rows with a basis function inserted at `j` that was 0 in
    /// every row, as a new fabric indicator is for every dyeing before it: its row and column of
    /// `G`, its row of `B` and of `ΦᵀΨ` (and of their weighted copies) are exact zeros, and it
    /// was 0 in all `N` rows with all of each output's sum of squares. `j` must not fall among
    /// the bands of the weighted build-up statistics.
    pub fn with_function_inserted(&self, j: usize) -> Result<Self, EstimatorError> {
        let p = self.dim();
        let bands = self
            .build_up
            .as_ref()
            .and_then(BuildUp::relative)
            .map_or(0, |relative| relative.squares.len());
        if j > p || j < bands {
            return Err(EstimatorError::Dimension {
                what: "inserted basis function",
                expected: p,
                found: j,
            });
        }
        Ok(Self {
            g: insert_zeros(self.g.as_ref(), Some(j), Some(j)),
            b: insert_zeros(self.b.as_ref(), Some(j), None),
            q: self.q.clone(),
            nonzero: self.nonzero.clone(),
            n: self.n,
            zero_rows: self
                .zero_rows
                .as_ref()
                .map(|zeros| zeros.with_function_inserted(j, self.n, &self.q)),
            yy: self.yy.clone(),
            build_up: self
                .build_up
                .as_ref()
                .map(|build_up| build_up.with_function_inserted(j)),
        })
    }

    /// Statistics of the rows of a design matrix `phi` (rows × p) and targets `y` (rows × m),
    /// computed with two matrix products (`G` as a symmetric rank-k update of its lower half,
    /// mirrored so that it is exactly symmetric).
    pub fn from_design(phi: MatRef<'_, f64>, y: MatRef<'_, f64>) -> Result<Self, EstimatorError> {
        if phi.nrows() != y.nrows() {
            return Err(EstimatorError::Dimension {
                what: "target rows",
                expected: phi.nrows(),
                found: y.nrows(),
            });
        }
        if !all_finite(phi) || !all_finite(y) {
            return Err(EstimatorError::NonFinite("batch values"));
        }
        let (p, m) = (phi.ncols(), y.ncols());
        let g = gram(phi);
        let mut b = Mat::zeros(p, m);
        targets_product(b.as_mut(), phi, y);
        let q = (0..m).map(|k| y.col(k).squared_norm_l2()).collect();
        let nonzero = (0..m)
            .map(|k| y.col(k).iter().filter(|v| **v != 0.0).count() as f64)
            .collect();
        let stats = Self {
            g,
            b,
            q,
            nonzero,
            n: phi.nrows() as f64,
            zero_rows: Some(ZeroRows::of(phi, y)),
            yy: None,
            build_up: None,
        };
        if !stats.is_finite() {
            return Err(EstimatorError::NonFinite("batch statistics"));
        }
        Ok(stats)
    }

    /// [`Self::from_rows`] of row-major `x` (`rows × x.len() / rows`) and `y` (likewise), as a
    /// batch is read and as it is stored. Every caller that forms a batch's statistics goes
    /// through here, so that the statistics formed when a batch arrives and those formed later
    /// from its stored rows have the same bits (`y` is copied column-major first: faer's
    /// products may add in another order for another layout).
    pub fn from_row_major(
        basis: &super::Basis,
        rows: usize,
        x: &[f64],
        y: &[f64],
    ) -> Result<Self, EstimatorError> {
        let shape = |values: &[f64]| match rows {
            0 => None,
            n if values.len().is_multiple_of(n) => Some(values.len() / n),
            _ => None,
        };
        let (Some(d), Some(m)) = (shape(x), shape(y)) else {
            return Err(EstimatorError::Dimension {
                what: "values to make whole rows",
                expected: rows,
                found: x.len() + y.len(),
            });
        };
        let x = MatRef::from_row_major_slice(x, rows, d);
        let y = MatRef::from_row_major_slice(y, rows, m).to_owned();
        Self::from_rows(basis, x, y.as_ref())
    }

    /// Statistics of raw input rows `x` (rows × d) and targets `y` (rows × m) for a model with
    /// basis `basis`: `Φ = basis(x)`, and `YᵀY` and the build-up statistics too when the model
    /// can match recipes (a declared spectrum under Kubelka–Munk, with an intercept: see
    /// [`super::recipe`]).
    pub fn from_rows(
        basis: &super::Basis,
        x: MatRef<'_, f64>,
        y: MatRef<'_, f64>,
    ) -> Result<Self, EstimatorError> {
        let phi = basis.design(x)?;
        let stats = Self::from_design(phi.as_ref(), y)?;
        if basis.can_match() {
            stats.with_output_products(y)?.with_build_up(
                phi.as_ref(),
                y,
                &BuildUp::default_saturations(),
                basis.spectral,
            )
        } else {
            Ok(stats)
        }
    }

    /// The same statistics with the build-up statistics ([`BuildUp`]) of the design `phi` (its
    /// first `bands` columns the bands' K/S) and targets `y` they were computed from, through
    /// the curves `saturations` (`∞` first).
    pub fn with_build_up(
        mut self,
        phi: MatRef<'_, f64>,
        y: MatRef<'_, f64>,
        saturations: &[f64],
        bands: usize,
    ) -> Result<Self, EstimatorError> {
        if bands == 0 || bands > phi.ncols() {
            return Err(EstimatorError::Dimension {
                what: "build-up bands",
                expected: phi.ncols(),
                found: bands,
            });
        }
        if y.ncols() != self.outputs()
            || y.nrows() != phi.nrows()
            || phi.ncols() != self.dim()
            || y.nrows() as f64 != self.n
        {
            return Err(EstimatorError::Dimension {
                what: "build-up rows",
                expected: self.n as usize,
                found: y.nrows(),
            });
        }
        if !BuildUp::is_ladder(saturations) {
            return Err(EstimatorError::NonFinite("build-up saturations"));
        }
        let build_up = BuildUp::of(phi, y, saturations, bands);
        if !build_up.is_finite() {
            return Err(EstimatorError::NonFinite("build-up statistics"));
        }
        self.build_up = Some(build_up);
        Ok(self)
    }

    /// Sets the build-up statistics (used by the decoder).
    pub(crate) fn set_build_up(&mut self, build_up: BuildUp) {
        self.build_up = Some(build_up);
    }

    /// The build-up statistics, if these statistics keep them.
    pub fn build_up(&self) -> Option<&BuildUp> {
        self.build_up.as_ref()
    }

    /// Reassembles statistics from their parts (used by the state decoder), without zero rows
    /// or `YᵀY`.
    pub(crate) fn from_parts(
        g: Mat<f64>,
        b: Mat<f64>,
        q: Vec<f64>,
        nonzero: Vec<f64>,
        n: f64,
    ) -> Self {
        Self {
            g,
            b,
            q,
            nonzero,
            n,
            zero_rows: None,
            yy: None,
            build_up: None,
        }
    }

    /// Sets the zero rows (used by the decoder).
    pub(crate) fn set_zero_rows(&mut self, zero_rows: ZeroRows) {
        self.zero_rows = Some(zero_rows);
    }

    /// The rows in which each basis function is 0, if these statistics keep them (statistics
    /// stored by releases before them do not).
    pub fn zero_rows(&self) -> Option<&ZeroRows> {
        self.zero_rows.as_ref()
    }

    /// Output `k`'s spread about 0 on the rows where every basis function in `used` is 0, as
    /// `(S, C)`: `S ≥ Σ y_k²` and `C ≤` the weighted count over those rows. The rows are the
    /// intersection of each `φ_j = 0` set, which the marginals bound (exact for one function;
    /// all rows for none):
    ///
    /// ```text
    /// S = min_{j∈U} Z_jk                    (the intersection lies in every set)
    /// C = max(0, Σ_{j∈U} z_j − (|U| − 1) N) (at most N − z_j rows leave per set)
    /// ```
    ///
    /// `None` without zero rows.
    pub fn zero_regime(&self, k: usize, used: &[usize]) -> Option<(f64, f64)> {
        let zeros = self.zero_rows.as_ref()?;
        if used.is_empty() {
            return Some((self.q[k], self.n));
        }
        let sum = used
            .iter()
            .map(|&j| zeros.square[(j, k)])
            .fold(f64::INFINITY, f64::min);
        let missing: f64 = used.iter().map(|&j| self.n - zeros.count[j]).sum();
        Some((sum.max(0.0), (self.n - missing).clamp(0.0, self.n.max(0.0))))
    }

    /// The same statistics with the outputs' cross products `YᵀY` of the rows `y` (rows × m)
    /// they were computed from.
    pub fn with_output_products(mut self, y: MatRef<'_, f64>) -> Result<Self, EstimatorError> {
        if y.ncols() != self.outputs() || y.nrows() as f64 != self.n {
            return Err(EstimatorError::Dimension {
                what: "target rows",
                expected: self.n as usize,
                found: y.nrows(),
            });
        }
        self.yy = Some(gram(y));
        Ok(self)
    }

    /// Sets `YᵀY` (used by the decoder).
    pub(crate) fn set_output_products(&mut self, yy: Mat<f64>) {
        self.yy = Some(yy);
    }

    /// `YᵀY`, if these statistics keep it.
    pub fn output_products(&self) -> Option<MatRef<'_, f64>> {
        self.yy.as_ref().map(Mat::as_ref)
    }

    pub fn dim(&self) -> usize {
        self.g.nrows()
    }

    pub fn outputs(&self) -> usize {
        self.b.ncols()
    }

    /// `G = Σ φφᵀ`.
    pub fn g(&self) -> MatRef<'_, f64> {
        self.g.as_ref()
    }

    /// `B = Σ φ yᵀ`.
    pub fn b(&self) -> MatRef<'_, f64> {
        self.b.as_ref()
    }

    /// Column `k` of `B`, i.e. `b_k = Σ φ y_k`.
    pub fn b_col(&self, k: usize) -> &[f64] {
        self.b.col_as_slice(k)
    }

    /// The statistics of output `k` alone.
    pub fn output(&self, k: usize) -> OutputData<'_> {
        OutputData {
            g: self.g.as_ref(),
            b: self.b_col(k),
            q: self.q[k],
            n: self.n,
            informative: self.informative_rows(k),
        }
    }

    /// [`Self::output`], its informative rows counted as those of an output of the kind
    /// `zero_inflated` says (the model's, from every row it has learnt): the non-zero rows of a
    /// zero-inflated output, every row of another. A batch's own share of zeros does not decide
    /// the kind: a dense output measured 0 in a one-row batch is a measurement, not a row that
    /// says nothing of the noise.
    pub fn output_as(&self, k: usize, zero_inflated: bool) -> OutputData<'_> {
        OutputData {
            informative: self.rows_counted_as(k, zero_inflated),
            ..self.output(k)
        }
    }

    /// `q_k = Σ y_k²`.
    pub fn q(&self) -> &[f64] {
        &self.q
    }

    /// Weighted count of rows in which each output is not zero.
    pub fn nonzero(&self) -> &[f64] {
        &self.nonzero
    }

    /// `q_k / nonzero_k`, the mean square of output `k`'s non-zero values (0 if it has none):
    /// the scale of a concentration of that dye when it is used.
    pub fn nonzero_mean_square(&self, k: usize) -> f64 {
        if self.nonzero[k] > 0.0 {
            self.q[k] / self.nonzero[k]
        } else {
            0.0
        }
    }

    /// The variance of output `k` about its mean, `q_c / N` with `q_c = q − b_f² / N` for the
    /// constant basis function `intercept`, or its mean square `q / N` without one (0 without
    /// rows).
    pub fn output_variance(&self, k: usize, intercept: Option<usize>) -> f64 {
        if self.n <= 0.0 {
            return 0.0;
        }
        let q = self.q[k];
        let centred = match intercept {
            Some(f) if self.g[(f, f)] > 0.0 => q - self.b[(f, k)] * self.b[(f, k)] / self.g[(f, f)],
            _ => q,
        };
        centred.max(0.0) / self.n
    }

    /// The rows that inform output `k` about its noise: for a zero-inflated output, 0 in most
    /// rows (a dye most recipes do not use), the rows in which it is not 0; otherwise every row
    /// (a 0 among mostly non-zero values is a measurement like any other). See
    /// [`super::FitOptions`].
    pub fn informative_rows(&self, k: usize) -> f64 {
        self.rows_counted_as(k, self.zero_inflated(k))
    }

    /// Output `k`'s rows counted as those of a zero-inflated output (its non-zero ones) or of
    /// another (every one).
    fn rows_counted_as(&self, k: usize, zero_inflated: bool) -> f64 {
        if zero_inflated {
            self.nonzero[k]
        } else {
            self.n
        }
    }

    /// The markers `U_k` of output `k`: the basis functions non-zero in a row where the output
    /// was (`B_jk ≠ 0`) and in no more rows than the output is non-zero in (`N − z_j ≤ N_nz,k`),
    /// if it has been non-zero, the zero rows are kept and it has one. A dye's own lab-dip dose,
    /// non-zero exactly where the dye was used, is one; a fabric class shared by other rows is
    /// not (nothing says that the fabric, rather than the colour, called for the dye).
    pub fn markers(&self, k: usize) -> Option<Vec<usize>> {
        let zeros = self.zero_rows.as_ref()?;
        let used = self.nonzero[k];
        if used <= 0.0 {
            return None;
        }
        // Rows are counted in (forgetting-weighted) floating point: a hair of tolerance.
        let rare = |j: usize| self.n - zeros.count()[j] <= used * (1.0 + 1e-9);
        let markers: Vec<usize> = (0..self.dim())
            .filter(|&j| self.b[(j, k)] != 0.0 && rare(j))
            .collect();
        (!markers.is_empty()).then_some(markers)
    }

    /// Whether output `k` is 0 in most rows (`2·N_nz < N`): a dye most recipes do not use,
    /// whose 0 is a structural value rather than a measurement about a level.
    pub fn zero_inflated(&self, k: usize) -> bool {
        2.0 * self.nonzero[k] < self.n
    }

    /// `N`.
    pub fn rows(&self) -> f64 {
        self.n
    }

    /// Adds the statistics of another, disjoint set of rows. `YᵀY`, the build-up statistics
    /// (over the same curves) and the zero rows are each kept when both sides keep them, or when one side holds no rows and the other keeps them;
    /// otherwise they are dropped (a sum with a side that lacks them has none).
    pub fn add(&mut self, other: &BatchStatistics) -> Result<(), EstimatorError> {
        self.check_same_shape(other)?;
        self.yy = match (self.yy.take(), &other.yy) {
            (Some(mut a), Some(b)) => {
                a += b;
                Some(a)
            }
            (None, Some(b)) if self.n == 0.0 => Some(b.clone()),
            (Some(a), None) if other.n == 0.0 => Some(a),
            _ => None,
        };
        self.build_up = match (self.build_up.take(), &other.build_up) {
            (_, Some(b)) if self.n == 0.0 => Some(b.clone()),
            (Some(a), _) if other.n == 0.0 => Some(a),
            (Some(mut a), Some(b)) if a.saturations == b.saturations => {
                a.add(b);
                Some(a)
            }
            _ => None,
        };
        self.zero_rows = match (self.zero_rows.take(), &other.zero_rows) {
            (Some(mut a), Some(b)) => {
                a.add(b);
                Some(a)
            }
            (None, Some(b)) if self.n == 0.0 => Some(b.clone()),
            (Some(a), None) if other.n == 0.0 => Some(a),
            _ => None,
        };
        self.g += &other.g;
        self.b += &other.b;
        for (a, b) in self.q.iter_mut().zip(&other.q) {
            *a += b;
        }
        for (a, b) in self.nonzero.iter_mut().zip(&other.nonzero) {
            *a += b;
        }
        self.n += other.n;
        Ok(())
    }

    /// Multiplies every statistic by `weight` (forgetting: each row's weight decays).
    pub fn scale(&mut self, weight: f64) {
        self.g *= faer::Scale(weight);
        self.b *= faer::Scale(weight);
        self.q.iter_mut().for_each(|v| *v *= weight);
        self.nonzero.iter_mut().for_each(|v| *v *= weight);
        self.n *= weight;
        if let Some(zeros) = &mut self.zero_rows {
            zeros.scale(weight);
        }
        if let Some(yy) = &mut self.yy {
            *yy *= faer::Scale(weight);
        }
        if let Some(build_up) = &mut self.build_up {
            build_up.scale(weight);
        }
    }

    pub fn is_finite(&self) -> bool {
        all_finite(self.g.as_ref())
            && all_finite(self.b.as_ref())
            && self.q.iter().all(|v| v.is_finite())
            && self.nonzero.iter().all(|v| v.is_finite())
            && self.n.is_finite()
            && self.zero_rows.as_ref().is_none_or(ZeroRows::is_finite)
            && self.yy.as_ref().is_none_or(|yy| all_finite(yy.as_ref()))
            && self.build_up.as_ref().is_none_or(BuildUp::is_finite)
    }

    pub(crate) fn check_same_shape(&self, other: &BatchStatistics) -> Result<(), EstimatorError> {
        check_shape(other.dim(), other.outputs(), self.dim(), self.outputs())
    }
}

/// `Ok` when `(dim, outputs)` equals the expected `(p, m)`, else a [`EstimatorError::Dimension`].
pub(crate) fn check_shape(
    dim: usize,
    outputs: usize,
    expected_dim: usize,
    expected_outputs: usize,
) -> Result<(), EstimatorError> {
    if dim != expected_dim {
        return Err(EstimatorError::Dimension {
            what: "basis functions",
            expected: expected_dim,
            found: dim,
        });
    }
    if outputs != expected_outputs {
        return Err(EstimatorError::Dimension {
            what: "outputs",
            expected: expected_outputs,
            found: outputs,
        });
    }
    Ok(())
}

pub(crate) fn all_finite(m: MatRef<'_, f64>) -> bool {
    (0..m.ncols()).all(|j| m.col(j).iter().all(|v| v.is_finite()))
}

/// Copies the strict lower triangle onto the upper one, making the matrix exactly symmetric.
pub(crate) fn mirror_lower(mut a: faer::MatMut<'_, f64>) {
    let n = a.nrows();
    for j in 0..n {
        for i in 0..j {
            a[(i, j)] = a[(j, i)];
        }
    }
}

/// Columns with at most this fraction of non-zero entries enter the products in compressed
/// sparse column form. Dye-house data is mostly zeros: a recipe uses three dyes out of dozens, and
/// fabric classes and recipe combinations are one-hot columns.
const SPARSE_DENSITY: f64 = 0.125;

/// Selected columns of a matrix, in compressed sparse column form.
struct SparseColumns {
    rows: usize,
    col_ptr: Vec<usize>,
    row_idx: Vec<usize>,
    values: Vec<f64>,
}

impl SparseColumns {
    fn gather(a: MatRef<'_, f64>, columns: &[usize]) -> Self {
        let mut col_ptr = Vec::with_capacity(columns.len() + 1);
        let (mut row_idx, mut values) = (Vec::new(), Vec::new());
        col_ptr.push(0);
        for &j in columns {
            for (i, v) in a.col(j).iter().enumerate() {
                if *v != 0.0 {
                    row_idx.push(i);
                    values.push(*v);
                }
            }
            col_ptr.push(row_idx.len());
        }
        Self {
            rows: a.nrows(),
            col_ptr,
            row_idx,
            values,
        }
    }

    fn as_ref(&self) -> SparseColMatRef<'_, usize, f64> {
        let ncols = self.col_ptr.len() - 1;
        let symbolic = SymbolicSparseColMatRef::new_checked(
            self.rows,
            ncols,
            &self.col_ptr,
            None,
            &self.row_idx,
        );
        SparseColMatRef::new(symbolic, &self.values)
    }
}

/// Splits the column indices of `a` into (dense, sparse) by [`SPARSE_DENSITY`].
fn split_by_density(a: MatRef<'_, f64>) -> (Vec<usize>, Vec<usize>) {
    let limit = SPARSE_DENSITY * a.nrows() as f64;
    (0..a.ncols()).partition(|&j| a.col(j).iter().filter(|v| **v != 0.0).count() as f64 > limit)
}

/// `G = ΦᵀΦ`, exactly symmetric. The block of dense columns `D` is a symmetric rank-k update
/// (`DᵀD`, lower half); every column of a sparse block `S` is `ΦᵀS`, a dense × sparse product
/// costing `p · nnz(S)`.
fn gram(phi: MatRef<'_, f64>) -> Mat<f64> {
    let p = phi.ncols();
    let mut g = Mat::zeros(p, p);
    let (dense, sparse) = split_by_density(phi);
    if sparse.is_empty() {
        triangular::matmul(
            g.as_mut(),
            BlockStructure::TriangularLower,
            Accum::Replace,
            phi.transpose(),
            BlockStructure::Rectangular,
            phi,
            BlockStructure::Rectangular,
            1.0,
            Par::Seq,
        );
    } else {
        let d = Mat::from_fn(phi.nrows(), dense.len(), |i, a| phi[(i, dense[a])]);
        let mut gdd = Mat::zeros(dense.len(), dense.len());
        triangular::matmul(
            gdd.as_mut(),
            BlockStructure::TriangularLower,
            Accum::Replace,
            d.transpose(),
            BlockStructure::Rectangular,
            d.as_ref(),
            BlockStructure::Rectangular,
            1.0,
            Par::Seq,
        );
        for (b, &jb) in dense.iter().enumerate() {
            for (a, &ja) in dense.iter().enumerate().skip(b) {
                g[(ja, jb)] = gdd[(a, b)];
            }
        }
        let s = SparseColumns::gather(phi, &sparse);
        let mut x = Mat::zeros(p, sparse.len());
        dense_sparse_matmul(
            x.as_mut(),
            Accum::Replace,
            phi.transpose(),
            s.as_ref(),
            1.0,
            Par::Seq,
        );
        for (c, &j) in sparse.iter().enumerate() {
            for i in 0..p {
                g[(i, j)] = x[(i, c)];
                g[(j, i)] = x[(i, c)];
            }
        }
    }
    mirror_lower(g.as_mut());
    g
}

/// `B = ΦᵀY`, with `Y` in sparse form when few targets are non-zero (cost `p · nnz(Y)`).
fn targets_product(b: MatMut<'_, f64>, phi: MatRef<'_, f64>, y: MatRef<'_, f64>) {
    let (dense, _) = split_by_density(y);
    if dense.is_empty() {
        let all: Vec<usize> = (0..y.ncols()).collect();
        let y_sparse = SparseColumns::gather(y, &all);
        dense_sparse_matmul(
            b,
            Accum::Replace,
            phi.transpose(),
            y_sparse.as_ref(),
            1.0,
            Par::Seq,
        );
    } else {
        matmul(b, Accum::Replace, phi.transpose(), y, 1.0, Par::Seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(rows: &[[f64; 3]]) -> BatchStatistics {
        let phi = Mat::from_fn(rows.len(), 2, |i, j| rows[i][j]);
        let y = Mat::from_fn(rows.len(), 1, |i, _| rows[i][2]);
        BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
    }

    /// Zero rows add up; a sum with a side that lacks them keeps none, unless that side holds
    /// no rows.
    #[test]
    fn zero_rows_are_kept_only_where_every_row_has_them() {
        let (a, b) = (
            batch(&[[0.0, 1.0, 2.0]]),
            batch(&[[3.0, 0.0, 1.0], [0.0, 2.0, 0.0]]),
        );
        let mut sum = a.clone();
        sum.add(&b).unwrap();
        let zeros = sum.zero_rows().unwrap();
        assert_eq!(zeros.count(), &[2.0, 1.0]);
        assert_eq!(zeros.square()[(0, 0)], 4.0);
        assert_eq!(zeros.square()[(1, 0)], 1.0);

        let without = BatchStatistics::from_parts(
            b.g.clone(),
            b.b.clone(),
            b.q.clone(),
            b.nonzero.clone(),
            b.n,
        );
        let mut mixed = a.clone();
        mixed.add(&without).unwrap();
        assert!(mixed.zero_rows().is_none(), "rows without zero rows");
        let mut empty = BatchStatistics::from_parts(
            Mat::zeros(2, 2),
            Mat::zeros(2, 1),
            vec![0.0],
            vec![0.0],
            0.0,
        );
        empty.add(&a).unwrap();
        assert_eq!(empty.zero_rows(), a.zero_rows(), "no rows beside them");
        let mut kept = a.clone();
        kept.add(&BatchStatistics::from_parts(
            Mat::zeros(2, 2),
            Mat::zeros(2, 1),
            vec![0.0],
            vec![0.0],
            0.0,
        ))
        .unwrap();
        assert_eq!(kept.zero_rows(), a.zero_rows());
        let mut fresh = BatchStatistics::zeros(2, 1);
        fresh.add(&b).unwrap();
        assert_eq!(fresh.zero_rows(), b.zero_rows());
    }

    /// Forgetting weighs the zero rows like every other statistic, so the regime's bounds stay
    /// within the weighted row count.
    #[test]
    fn forgetting_scales_the_zero_rows_with_the_rows() {
        let mut stats = batch(&[[0.0, 1.0, 2.0], [1.0, 0.0, 0.0], [0.0, 0.0, 3.0]]);
        assert_eq!(stats.zero_regime(0, &[0, 1]), Some((9.0, 1.0)));
        assert_eq!(stats.zero_regime(0, &[0]), Some((13.0, 2.0)));
        stats.scale(0.5);
        assert_eq!(stats.zero_rows().unwrap().count(), &[1.0, 1.0]);
        assert_eq!(stats.zero_regime(0, &[0]), Some((6.5, 1.0)));
        assert_eq!(stats.zero_regime(0, &[]), Some((6.5, 1.5)));
        assert!(stats.zero_rows().unwrap().consistent_with(stats.rows()));
        assert!(!stats.zero_rows().unwrap().consistent_with(0.5));
    }

    /// A mostly-zero column takes the complement (`q` less its non-zero rows) and a mostly
    /// non-zero one adds its zero rows: both give the brute-force sums, exactly 0 where every
    /// non-zero target sits on a non-zero input.
    #[test]
    fn both_ways_of_forming_zero_rows_give_the_sums() {
        let stats = batch(&[
            [0.0, 1.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.5, 0.0, 1.5],
            [0.0, 2.0, 0.0],
        ]);
        let zeros = stats.zero_rows().unwrap();
        assert_eq!(zeros.count(), &[3.0, 1.0]);
        assert_eq!(
            zeros.square()[(0, 0)],
            0.0,
            "mostly zero: complement, exactly 0"
        );
        assert_eq!(zeros.square()[(1, 0)], 2.25, "mostly non-zero: added");
    }
}
