//! A first fit's shrinkage checked against its rows' leave-one-out error.
//!
//! The evidence chooses a shared-scale prior's `α = s/v` as if the rows were the model's own
//! Gaussian noise about a linear mean. Where they are not (a calibration whose spectra respond
//! to the content non-linearly, scattering that varies from sample to sample), it takes too
//! little shrinkage: the misfit it cannot explain it reads as signal, and the noise it estimates
//! is smaller than the error on new rows. Leave-one-out, which predicts each row from the others
//! whatever their distribution, then asks for more. Where it asks for less (rows fitted to
//! round-off, which it cannot tell from rows that will never be seen again on a new instrument),
//! the evidence stands: the larger of the two is taken, an error of too much shrinkage costing
//! little where one of too little costs a great deal.
//!
//! For a shape with the non-zero eigenvalues `λ_c` of `R̃ᵀ G_c R̃` and `P = (R̃ U)ᵀ`
//! ([`super::evidence::Shape`]), the rows' centred design `Φ_c` (the rows of `G_c = Φ_cᵀ Φ_c`)
//! and centred values `y_c`,
//!
//! ```text
//! W      = Φ_c Pᵀ Λ^-½                          (N × r, orthonormal columns, to round-off)
//! z      = Wᵀ y_c
//! ŷ(α)   = W diag(λ/(λ + α)) z                  (the posterior mean's fit at α)
//! h_i(α) = 1/N + Σ_c W_ic² λ_c/(λ_c + α)         (1/N: the flat intercept's leverage)
//! PRESS(α) = Σ_i ((y_c,i − ŷ_i(α)) / (1 − h_i(α)))²
//! ```
//!
//! the exact leave-one-out squared error of the posterior mean at `α`, with the intercept
//! refitted without the row (as centring on the other rows does). The grid runs from the
//! evidence's `α` upwards; the evidence's own `α` stands unless one larger by more than
//! [`RESOLUTION`] has a smaller PRESS.

use std::sync::OnceLock;

use faer::{Mat, MatRef};

use super::evidence::{Shape, refine_on_grid};
use super::{Basis, BatchStatistics, EstimatorError};

/// Steps of `log α` on the grid searched above the evidence's `α`.
const STEP: f64 = 0.25;

/// How far above the largest eigenvalue the grid reaches (in e-folds): shrinkage beyond it
/// leaves the mean at the intercept.
const REACH: f64 = 12.0;

/// A larger `α` is taken only this far above the evidence's (in `log α`): where leave-one-out's
/// error rises from the evidence's `α`, the search ends a round-off's width above it, and no
/// such step is a finding.
const RESOLUTION: f64 = 1e-6;

/// The rows' sums agree with the statistics' to this relative tolerance, or they are not the
/// rows behind them.
const SAME_ROWS: f64 = 1e-9;

/// A first fit's rows made ready for the check: the design centred as the statistics are (on the
/// flat intercept, if any), the outputs, and each shape's eigenvectors in the rows' space,
/// formed by the first output that asks for them and kept for every output after it. Formed
/// without a lock (two outputs may form the same at once, and the second's is dropped): the
/// product runs on the rayon pool, whose waiting threads take up other outputs, and one of
/// those asking for a kernel its own thread is forming under a lock would wait on itself.
pub(crate) struct Rows<'a> {
    design: Mat<f64>,
    y: MatRef<'a, f64>,
    flat: bool,
    kernels: Vec<OnceLock<(Mat<f64>, Mat<f64>)>>,
}

impl<'a> Rows<'a> {
    /// The rows `x` (raw inputs, as a batch holds them) and `y` of `totals`, for `shapes` shapes
    /// centred on `flat`; [`EstimatorError::NotTheRows`] if they are not the rows `totals` were
    /// summed from (their count, the Gram matrix's diagonal, `B` and `q`).
    pub(crate) fn new(
        basis: &Basis,
        totals: &BatchStatistics,
        x: MatRef<'_, f64>,
        y: MatRef<'a, f64>,
        flat: Option<usize>,
        shapes: usize,
    ) -> Result<Self, EstimatorError> {
        let design = design_of_rows(basis, totals, x, y)?;
        let n = x.nrows();
        let design = match flat {
            Some(_) => {
                let means: Vec<f64> = (0..design.ncols())
                    .map(|j| design.col(j).iter().sum::<f64>() / n as f64)
                    .collect();
                Mat::from_fn(n, design.ncols(), |i, j| design[(i, j)] - means[j])
            }
            None => design,
        };
        Ok(Self {
            design,
            y,
            flat: flat.is_some(),
            kernels: (0..shapes).map(|_| OnceLock::new()).collect(),
        })
    }

    /// [`larger_alpha`] for output `k` under shape `index` (`shape`) from the evidence's
    /// `alpha`.
    pub(crate) fn larger_alpha(
        &self,
        k: usize,
        index: usize,
        shape: &Shape,
        alpha: f64,
    ) -> Option<f64> {
        let cell = self.kernels.get(index)?;
        if cell.get().is_none() {
            let w = eigenvectors(
                shape.eigenvalues(),
                shape.projection(),
                self.design.as_ref(),
            );
            let w2 = squared(w.as_ref());
            // Another output may have set it meanwhile: the same values, either serves.
            let _ = cell.set((w, w2));
        }
        let (w, w2) = cell.get()?;
        let y = self.y.col(k);
        let y_c: Vec<f64> = if self.flat {
            let mean = y.iter().sum::<f64>() / y.nrows() as f64;
            y.iter().map(|v| v - mean).collect()
        } else {
            y.iter().copied().collect()
        };
        larger_alpha(
            shape.eigenvalues(),
            w.as_ref(),
            w2.as_ref(),
            &y_c,
            self.flat,
            alpha,
        )
    }
}

/// The design of the rows `x` (raw inputs, as a batch holds them), `y`, if they are the rows
/// `totals` were summed from (their count, the Gram matrix's diagonal, `B` and `q`); else
/// [`EstimatorError::NotTheRows`], or a dimension error where they are not of its shape.
pub(crate) fn design_of_rows(
    basis: &Basis,
    totals: &BatchStatistics,
    x: MatRef<'_, f64>,
    y: MatRef<'_, f64>,
) -> Result<Mat<f64>, EstimatorError> {
    let m = totals.outputs();
    if y.nrows() != x.nrows() || y.ncols() != m {
        return Err(EstimatorError::Dimension {
            what: "rows behind the statistics",
            expected: m,
            found: y.ncols(),
        });
    }
    if x.nrows() as f64 != totals.rows() {
        return Err(EstimatorError::NotTheRows);
    }
    let design = basis.design(x)?;
    let g = totals.g();
    let diagonal: Vec<f64> = (0..g.nrows()).map(|j| g[(j, j)]).collect();
    if !same_rows(design.as_ref(), y, &diagonal, totals.b(), totals.q()) {
        return Err(EstimatorError::NotTheRows);
    }
    Ok(design)
}

/// Whether the design `design` (N × p, uncentred) and outputs `y` (N × m) have the statistics'
/// Gram diagonal `g_diag`, `B = Φᵀ Y` and `q_k = Σ y_k²`: the rows the statistics were summed
/// from (their count is checked by the caller).
pub(crate) fn same_rows(
    design: MatRef<'_, f64>,
    y: MatRef<'_, f64>,
    g_diag: &[f64],
    b: MatRef<'_, f64>,
    q: &[f64],
) -> bool {
    let close = |sum: f64, kept: f64, scale: f64| {
        (sum - kept).abs() <= SAME_ROWS * scale.max(f64::MIN_POSITIVE)
    };
    if design.ncols() != g_diag.len() || b.nrows() != g_diag.len() || y.ncols() != q.len() {
        return false;
    }
    let squares = |m: MatRef<'_, f64>, j: usize| m.col(j).iter().map(|x| x * x).sum::<f64>();
    (0..g_diag.len()).all(|j| close(squares(design, j), g_diag[j], g_diag[j].abs()))
        && (0..q.len()).all(|k| {
            close(squares(y, k), q[k], q[k].abs())
                && (0..g_diag.len()).all(|j| {
                    let sum: f64 = design
                        .col(j)
                        .iter()
                        .zip(y.col(k).iter())
                        .map(|(a, b)| a * b)
                        .sum();
                    // |Σ φ y| ≤ √(Σ φ² Σ y²): the scale its round-off is relative to.
                    close(sum, b[(j, k)], (g_diag[j] * q[k]).sqrt())
                })
        })
}

/// The eigenvectors `W` of the rows' kernel matrix `Φ_c R̃ R̃ᵀ Φ_cᵀ` for a shape with
/// `eigenvalues` and `projection` ([`super::evidence::Shape::projection`]), from the centred
/// design `design` (N × p): `Φ_c Pᵀ Λ^-½`. The shape's eigenvalues come from the statistics,
/// whose centring loses digits that the rows keep: directions of the smallest eigenvalues are
/// round-off there, and shrunk away at any `α` the evidence takes.
pub(crate) fn eigenvectors(
    eigenvalues: &[f64],
    projection: MatRef<'_, f64>,
    design: MatRef<'_, f64>,
) -> Mat<f64> {
    // One column where the shape keeps one eigenvalue.
    let mut w = crate::product(design, projection.transpose());
    for (c, &l) in eigenvalues.iter().enumerate() {
        let root = l.sqrt();
        w.col_mut(c).iter_mut().for_each(|x| *x /= root);
    }
    w
}

/// The leverages' squares `W_ic²` of the kernel's eigenvectors `w`, shared by every output of a
/// shape.
pub(crate) fn squared(w: MatRef<'_, f64>) -> Mat<f64> {
    Mat::from_fn(w.nrows(), w.ncols(), |i, c| w[(i, c)] * w[(i, c)])
}

/// `PRESS(α)` (see the module's doc) for eigenvalues `lambda`, eigenvectors `w` and their squares
/// `w2`, projected values `z = Wᵀ y_c` and centred values `y_c`; `flat` adds the intercept's
/// leverage `1/N`. Infinite where a row's leverage reaches 1 (it alone determines its fit).
pub(crate) fn press(
    lambda: &[f64],
    w: MatRef<'_, f64>,
    w2: MatRef<'_, f64>,
    z: &[f64],
    y_c: &[f64],
    flat: bool,
    alpha: f64,
) -> f64 {
    press_on_grid(lambda, w, w2, z, y_c, flat, &[alpha])[0]
}

/// [`press`] at every `α` of `alphas` at once: the fits `W diag(z) S` and the leverages `W² S`
/// for the shrinkage factors `S_cg = λ_c/(λ_c + α_g)`, two matrix products (matrix–vector
/// products for one `α`). Sequential: the outputs are in parallel.
pub(crate) fn press_on_grid(
    lambda: &[f64],
    w: MatRef<'_, f64>,
    w2: MatRef<'_, f64>,
    z: &[f64],
    y_c: &[f64],
    flat: bool,
    alphas: &[f64],
) -> Vec<f64> {
    use faer::linalg::matmul::matmul;
    use faer::{Accum, Par};
    let n = y_c.len();
    let base = if flat { 1.0 / n as f64 } else { 0.0 };
    let shrink = Mat::from_fn(lambda.len(), alphas.len(), |c, g| {
        lambda[c] / (lambda[c] + alphas[g])
    });
    let weighted = Mat::from_fn(lambda.len(), alphas.len(), |c, g| z[c] * shrink[(c, g)]);
    let mut fitted = Mat::<f64>::zeros(n, alphas.len());
    let mut leverage = Mat::<f64>::zeros(n, alphas.len());
    matmul(
        fitted.as_mut(),
        Accum::Replace,
        w,
        weighted.as_ref(),
        1.0,
        Par::Seq,
    );
    matmul(
        leverage.as_mut(),
        Accum::Replace,
        w2,
        shrink.as_ref(),
        1.0,
        Par::Seq,
    );
    (0..alphas.len())
        .map(|g| {
            let mut total = 0.0;
            for ((y, f), h) in y_c
                .iter()
                .zip(fitted.col(g).iter())
                .zip(leverage.col(g).iter())
            {
                let left = 1.0 - base - h;
                if left <= 1e-12 {
                    return f64::INFINITY;
                }
                let r = (y - f) / left;
                total += r * r;
            }
            total
        })
        .collect()
}

/// The `α ≥ alpha` with the smallest [`press`]: a grid of `log α` in steps of [`STEP`] from
/// `alpha` up to [`REACH`] e-folds above the largest eigenvalue, then golden-section search
/// between the best grid point's neighbours (never below `alpha`). `None` where that is within
/// [`RESOLUTION`] of `alpha` (the evidence's shrinkage stands), or nothing can be said (no
/// eigenvalue, a non-finite value).
pub(crate) fn larger_alpha(
    lambda: &[f64],
    w: MatRef<'_, f64>,
    w2: MatRef<'_, f64>,
    y_c: &[f64],
    flat: bool,
    alpha: f64,
) -> Option<f64> {
    let largest = lambda.iter().fold(0.0_f64, |a, l| a.max(*l));
    if !(alpha > 0.0 && alpha.is_finite() && largest > 0.0 && largest.is_finite()) {
        return None;
    }
    if y_c.iter().any(|y| !y.is_finite()) {
        return None;
    }
    let z: Vec<f64> = (0..lambda.len())
        .map(|c| (0..y_c.len()).map(|i| w[(i, c)] * y_c[i]).sum())
        .collect();
    let at = |log_alpha: f64| press(lambda, w, w2, &z, y_c, flat, log_alpha.exp());
    let start = alpha.ln();
    if !at(start).is_finite() {
        return None;
    }
    let steps = ((largest.ln() + REACH - start) / STEP).floor().max(0.0) as usize;
    let grid: Vec<f64> = (0..=steps).map(|i| start + STEP * i as f64).collect();
    let alphas: Vec<f64> = grid.iter().map(|a| a.exp()).collect();
    let values = press_on_grid(lambda, w, w2, &z, y_c, flat, &alphas);
    let log_alpha = refine_on_grid(&grid, &values, at);
    (log_alpha > start + RESOLUTION && at(log_alpha) < at(start)).then(|| log_alpha.exp())
}

#[cfg(test)]
pub(crate) mod tests {
    use faer::linalg::solvers::Solve;

    use super::*;
    use crate::evidence::minimise_on_grid;

    /// A design with an intercept's rows centred, its SVD's eigen-structure as a ridge shape
    /// gives it (`R̃ = I`): `λ = d²`, `P = Vᵀ`.
    fn ridge_structure(x: &Mat<f64>) -> (Mat<f64>, Vec<f64>, Mat<f64>) {
        let (n, p) = (x.nrows(), x.ncols());
        let means: Vec<f64> = (0..p)
            .map(|j| x.col(j).iter().sum::<f64>() / n as f64)
            .collect();
        let centred = Mat::from_fn(n, p, |i, j| x[(i, j)] - means[j]);
        let svd = centred.thin_svd().expect("svd");
        let d = svd.S().column_vector().to_owned();
        let keep: Vec<usize> = (0..d.nrows()).filter(|&c| d[c] > 1e-9 * d[0]).collect();
        let lambda: Vec<f64> = keep.iter().map(|&c| d[c] * d[c]).collect();
        let v = svd.V();
        let projection = Mat::from_fn(keep.len(), p, |r, j| v[(j, keep[r])]);
        (centred, lambda, projection)
    }

    fn rows(n: usize, p: usize, seed: u64) -> Mat<f64> {
        let mut state = seed;
        Mat::from_fn(n, p, |_, _| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
    }

    /// Ridge with a free intercept on rows `x`, `y` at `α`, solved directly: the coefficients,
    /// then the intercept.
    pub(crate) fn ridge(x: &Mat<f64>, y: &[f64], alpha: f64) -> Vec<f64> {
        let (n, p) = (x.nrows(), x.ncols());
        let xm: Vec<f64> = (0..p)
            .map(|j| x.col(j).iter().sum::<f64>() / n as f64)
            .collect();
        let ym = y.iter().sum::<f64>() / n as f64;
        let xc = Mat::from_fn(n, p, |i, j| x[(i, j)] - xm[j]);
        let a = xc.transpose() * &xc + Mat::<f64>::identity(p, p) * alpha;
        let b = Mat::from_fn(p, 1, |j, _| (0..n).map(|i| xc[(i, j)] * (y[i] - ym)).sum());
        let w = a.llt(faer::Side::Lower).expect("llt").solve(&b);
        let mut coefficients: Vec<f64> = (0..p).map(|j| w[(j, 0)]).collect();
        coefficients.push(ym - (0..p).map(|j| xm[j] * w[(j, 0)]).sum::<f64>());
        coefficients
    }

    /// [`ridge`]'s prediction at inputs `t`.
    fn ridge_predict(x: &Mat<f64>, y: &[f64], alpha: f64, t: &[f64]) -> f64 {
        let c = ridge(x, y, alpha);
        c[t.len()] + t.iter().zip(&c).map(|(t, c)| t * c).sum::<f64>()
    }

    #[test]
    fn press_is_the_error_of_each_row_predicted_from_the_others() {
        let (n, p) = (14, 5);
        let x = rows(n, p, 3);
        let y: Vec<f64> = (0..n)
            .map(|i| 1.0 + 2.0 * x[(i, 0)] - x[(i, 3)] + 0.3 * (i as f64).sin())
            .collect();
        let (centred, lambda, projection) = ridge_structure(&x);
        let w = eigenvectors(&lambda, projection.as_ref(), centred.as_ref());
        let w2 = squared(w.as_ref());
        let ym = y.iter().sum::<f64>() / n as f64;
        let y_c: Vec<f64> = y.iter().map(|v| v - ym).collect();
        let z: Vec<f64> = (0..lambda.len())
            .map(|c| (0..n).map(|i| w[(i, c)] * y_c[i]).sum())
            .collect();
        for alpha in [1e-3, 0.1, 2.0] {
            let by_formula = press(&lambda, w.as_ref(), w2.as_ref(), &z, &y_c, true, alpha);
            let by_refits: f64 = (0..n)
                .map(|out| {
                    let keep: Vec<usize> = (0..n).filter(|&i| i != out).collect();
                    let xs = Mat::from_fn(n - 1, p, |i, j| x[(keep[i], j)]);
                    let ys: Vec<f64> = keep.iter().map(|&i| y[i]).collect();
                    let t: Vec<f64> = (0..p).map(|j| x[(out, j)]).collect();
                    let e = y[out] - ridge_predict(&xs, &ys, alpha, &t);
                    e * e
                })
                .sum();
            assert!(
                (by_formula - by_refits).abs() <= 1e-9 * by_refits,
                "α {alpha}: {by_formula} against {by_refits}"
            );
        }
    }

    #[test]
    fn rows_other_than_the_statistics_are_refused() {
        let x = rows(12, 4, 5);
        let y = Mat::from_fn(12, 2, |i, k| (i * (k + 2)) as f64 * 0.1 - 0.4);
        let sums = |x: &Mat<f64>, y: &Mat<f64>| {
            let diag: Vec<f64> = (0..4)
                .map(|j| x.col(j).iter().map(|v| v * v).sum())
                .collect();
            let b = x.transpose() * y;
            let q: Vec<f64> = (0..2)
                .map(|k| y.col(k).iter().map(|v| v * v).sum())
                .collect();
            (diag, b, q)
        };
        let (diag, b, q) = sums(&x, &y);
        let same =
            |x: &Mat<f64>, y: &Mat<f64>| same_rows(x.as_ref(), y.as_ref(), &diag, b.as_ref(), &q);
        assert!(same(&x, &y));
        let fewer = Mat::from_fn(8, 4, |i, j| x[(i, j)]);
        let fewer_y = Mat::from_fn(8, 2, |i, k| y[(i, k)]);
        assert!(!same(&fewer, &fewer_y));
        let other = Mat::from_fn(12, 4, |i, j| x[(i, j)] * 1.001);
        assert!(!same(&other, &y));
        // The inputs' squares kept, the outputs another row's: refused on `B`.
        let shuffled = Mat::from_fn(12, 2, |i, k| y[((i + 1) % 12, k)]);
        assert!(!same(&x, &shuffled));
        let swapped = Mat::from_fn(12, 2, |i, k| y[(i, 1 - k)]);
        assert!(!same(&x, &swapped));
    }

    /// [`press`]'s signature.
    type Press = fn(&[f64], MatRef<'_, f64>, MatRef<'_, f64>, &[f64], &[f64], bool, f64) -> f64;

    /// [`press`] written out one row at a time: what the matrix products must give.
    fn reference_press(
        lambda: &[f64],
        w: MatRef<'_, f64>,
        w2: MatRef<'_, f64>,
        z: &[f64],
        y_c: &[f64],
        flat: bool,
        alpha: f64,
    ) -> f64 {
        let n = y_c.len();
        let base = if flat { 1.0 / n as f64 } else { 0.0 };
        // Row by row, as the module's doc writes it.
        let shrink: Vec<f64> = lambda.iter().map(|l| l / (l + alpha)).collect();
        let fitted: Vec<f64> = (0..n)
            .map(|i| {
                (0..lambda.len())
                    .map(|c| w[(i, c)] * shrink[c] * z[c])
                    .sum()
            })
            .collect();
        let leverage: Vec<f64> = (0..n)
            .map(|i| {
                base + (0..lambda.len())
                    .map(|c| w2[(i, c)] * shrink[c])
                    .sum::<f64>()
            })
            .collect();
        let mut total = 0.0;
        for ((y, f), h) in y_c.iter().zip(&fitted).zip(&leverage) {
            let left = 1.0 - h;
            if left <= 1e-12 {
                return f64::INFINITY;
            }
            let r = (y - f) / left;
            total += r * r;
        }
        total
    }

    /// The matrix products, on a grid of `α` or at one, give PRESS as the formula written out
    /// row by row does, to round-off; a leverage of 1 (fewer rows than inputs, `α` → 0) is
    /// infinite in each.
    #[test]
    fn press_on_a_grid_and_at_one_alpha_is_the_formulas() {
        let (n, p) = (25, 40);
        let x = rows(n, p, 5);
        let (centred, lambda, projection) = ridge_structure(&x);
        let w = eigenvectors(&lambda, projection.as_ref(), centred.as_ref());
        let w2 = squared(w.as_ref());
        let y: Vec<f64> = (0..n)
            .map(|i| x[(i, 0)] - 2.0 * x[(i, 3)] + 0.1 * x[(i, 7)])
            .collect();
        let mean = y.iter().sum::<f64>() / n as f64;
        let y_c: Vec<f64> = y.iter().map(|v| v - mean).collect();
        let z: Vec<f64> = (0..lambda.len())
            .map(|c| (0..n).map(|i| w[(i, c)] * y_c[i]).sum())
            .collect();
        let (w, w2) = (w.as_ref(), w2.as_ref());
        let press_at = |alphas: &[f64]| {
            let grid = press_on_grid(&lambda, w, w2, &z, &y_c, true, alphas);
            assert_eq!(grid.len(), alphas.len());
            let each = |f: Press| {
                alphas
                    .iter()
                    .map(|&a| f(&lambda, w, w2, &z, &y_c, true, a))
                    .collect::<Vec<f64>>()
            };
            (grid, each(press), each(reference_press))
        };
        // Below about 10⁻⁴ of the smallest eigenvalue every row's leverage is within 10⁻⁸ of 1,
        // and `1 − h` keeps only the digits the sums' order leaves.
        let smallest = lambda.iter().fold(f64::INFINITY, |a, l| a.min(*l));
        let alphas: Vec<f64> = (0..60)
            .map(|g| 1e-4 * smallest * 10f64.powf(g as f64 * 0.25))
            .collect();
        let (grid, one, formula) = press_at(&alphas);
        for g in 0..alphas.len() {
            assert!(formula[g].is_finite(), "α {}", alphas[g]);
            for (how, value) in [("grid", grid[g]), ("one α", one[g])] {
                assert!(
                    (value - formula[g]).abs() <= 1e-9 * formula[g],
                    "α {}, {how}: {value} against {}",
                    alphas[g],
                    formula[g]
                );
            }
        }
        let (grid, one, formula) = press_at(&[1e-20 * smallest]);
        assert!(
            grid[0].is_infinite() && one[0].is_infinite() && formula[0].is_infinite(),
            "{grid:?} {one:?} {formula:?}"
        );
    }

    #[test]
    fn a_larger_alpha_is_found_only_where_leave_one_out_asks_for_it() {
        let (n, p) = (30, 12);
        let x = rows(n, p, 11);
        // Pure noise: leave-one-out asks for the intercept alone, far above a tiny α.
        let noise: Vec<f64> = (0..n).map(|i| ((i * 7919) % 31) as f64 / 31.0).collect();
        let (centred, lambda, projection) = ridge_structure(&x);
        let w = eigenvectors(&lambda, projection.as_ref(), centred.as_ref());
        let w2 = squared(w.as_ref());
        let centre = |y: &[f64]| {
            let m = y.iter().sum::<f64>() / y.len() as f64;
            y.iter().map(|v| v - m).collect::<Vec<_>>()
        };
        let tiny = 1e-6 * lambda[0];
        let found = larger_alpha(
            &lambda,
            w.as_ref(),
            w2.as_ref(),
            &centre(&noise),
            true,
            tiny,
        )
        .expect("noise asks for more shrinkage");
        assert!(found > 1e3 * tiny, "{found}");
        // Where leave-one-out's error rises from α, however little: nothing larger, not even a
        // round-off's width above it.
        let signal: Vec<f64> = (0..n)
            .map(|i| (0..p).map(|j| (j as f64 - 5.0) * x[(i, j)]).sum::<f64>() + noise[i] * 0.01)
            .collect();
        let at_optimum = |y: &[f64]| {
            let z: Vec<f64> = (0..lambda.len())
                .map(|c| (0..n).map(|i| w[(i, c)] * y[i]).sum())
                .collect();
            let grid: Vec<f64> = (0..200)
                .map(|k| (tiny * 10.0).ln() + 0.1 * k as f64)
                .collect();
            minimise_on_grid(&grid, |a| {
                press(&lambda, w.as_ref(), w2.as_ref(), &z, y, true, a.exp())
            })
            .exp()
        };
        let best = at_optimum(&centre(&signal));
        for above in [best, best * (1.0 + 1e-13), best * 1.5] {
            assert_eq!(
                larger_alpha(
                    &lambda,
                    w.as_ref(),
                    w2.as_ref(),
                    &centre(&signal),
                    true,
                    above
                ),
                None,
                "from {above} (the optimum {best})"
            );
        }
        // An exact linear law: the least shrinkage on the grid is the best, nothing larger.
        let exact: Vec<f64> = (0..n)
            .map(|i| (0..p).map(|j| (j as f64 - 5.0) * x[(i, j)]).sum())
            .collect();
        assert_eq!(
            larger_alpha(
                &lambda,
                w.as_ref(),
                w2.as_ref(),
                &centre(&exact),
                true,
                tiny
            ),
            None
        );
    }
}
