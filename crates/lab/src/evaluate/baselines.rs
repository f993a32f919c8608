//! The paper's reference models, one regression per output, both with an unpenalised intercept
//! (inputs and targets centred) and both computed from one thin SVD `X_c = U S Vᵀ` of the
//! centred inputs shared by all outputs.

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par};

/// A fitted linear model per output: `ŷ = x·W + intercept`, and for Bayesian ridge a predictive
/// variance `1/α_k + (x − x̄)ᵀ Σ_k (x − x̄)`.
pub struct LinearFit {
    x_mean: Vec<f64>,
    coef: Mat<f64>,
    intercept: Vec<f64>,
    /// Right singular vectors of the centred inputs.
    v: Mat<f64>,
    /// Per output: noise variance `1/α` and `d` with `Σ = (1/λ) I + V diag(d) Vᵀ`.
    uncertainty: Option<Vec<RidgeCovariance>>,
}

struct RidgeCovariance {
    noise_variance: f64,
    inv_lambda: f64,
    d: Vec<f64>,
}

struct CenteredSvd {
    x_mean: Vec<f64>,
    y_mean: Vec<f64>,
    u_t_y: Mat<f64>,
    s: Vec<f64>,
    v: Mat<f64>,
    y_centered_sq: Vec<f64>,
    n: usize,
}

fn centered_svd(x: MatRef<'_, f64>, y: MatRef<'_, f64>) -> anyhow::Result<CenteredSvd> {
    let (n, d, m) = (x.nrows(), x.ncols(), y.ncols());
    let x_mean: Vec<f64> = (0..d).map(|j| x.col(j).sum() / n as f64).collect();
    let y_mean: Vec<f64> = (0..m).map(|k| y.col(k).sum() / n as f64).collect();
    let xc = Mat::from_fn(n, d, |i, j| x[(i, j)] - x_mean[j]);
    let yc = Mat::from_fn(n, m, |i, k| y[(i, k)] - y_mean[k]);
    let svd = xc
        .thin_svd()
        .map_err(|e| anyhow::anyhow!("SVD of the centred inputs failed: {e:?}"))?;
    let r = svd.S().dim();
    let s: Vec<f64> = (0..r).map(|i| svd.S()[i]).collect();
    let mut u_t_y = Mat::zeros(r, m);
    matmul(
        u_t_y.as_mut(),
        Accum::Replace,
        svd.U().transpose(),
        yc.as_ref(),
        1.0,
        Par::Seq,
    );
    let y_centered_sq = (0..m).map(|k| yc.col(k).squared_norm_l2()).collect();
    Ok(CenteredSvd {
        x_mean,
        y_mean,
        u_t_y,
        s,
        v: svd.V().to_owned(),
        y_centered_sq,
        n,
    })
}

impl CenteredSvd {
    /// `W = V diag(f) Uᵀ Y_c` column by column, for per-output spectral filters `f`.
    fn coefficients(&self, filters: &[Vec<f64>]) -> Mat<f64> {
        let r = self.s.len();
        let m = self.y_mean.len();
        let scaled = Mat::from_fn(r, m, |i, k| filters[k][i] * self.u_t_y[(i, k)]);
        let mut coef = Mat::zeros(self.v.nrows(), m);
        matmul(
            coef.as_mut(),
            Accum::Replace,
            self.v.as_ref(),
            scaled.as_ref(),
            1.0,
            Par::Seq,
        );
        coef
    }

    fn finish(self, coef: Mat<f64>, uncertainty: Option<Vec<RidgeCovariance>>) -> LinearFit {
        let intercept = (0..coef.ncols())
            .map(|k| {
                self.y_mean[k]
                    - (0..coef.nrows())
                        .map(|j| self.x_mean[j] * coef[(j, k)])
                        .sum::<f64>()
            })
            .collect();
        LinearFit {
            x_mean: self.x_mean,
            coef,
            intercept,
            v: self.v,
            uncertainty,
        }
    }
}

/// Ordinary least squares, minimum-norm where the inputs are rank deficient (singular values
/// below `ε · max(n, d) · s_max` are dropped, as LAPACK's `gelsd` does).
pub fn ols(x: MatRef<'_, f64>, y: MatRef<'_, f64>) -> anyhow::Result<LinearFit> {
    let svd = centered_svd(x, y)?;
    let s_max = svd.s.iter().copied().fold(0.0, f64::max);
    let cutoff = f64::EPSILON * x.nrows().max(x.ncols()) as f64 * s_max;
    let filter: Vec<f64> = svd
        .s
        .iter()
        .map(|&s| if s > cutoff { 1.0 / s } else { 0.0 })
        .collect();
    let coef = svd.coefficients(&vec![filter; y.ncols()]);
    Ok(svd.finish(coef, None))
}

/// Bayesian ridge regression (MacKay; scikit-learn's `BayesianRidge` with its defaults):
/// `w ~ N(0, λ⁻¹ I)`, noise precision `α`, Gamma(1e-6, 1e-6) hyperpriors on both, fixed-point
/// updates
///
/// ```text
/// w = V diag(s / (s² + λ/α)) Uᵀ y,   γ = Σ α s² / (λ + α s²),
/// λ ← (γ + 2λ₁) / (‖w‖² + 2λ₂),      α ← (n − γ + 2α₁) / (‖y − Xw‖² + 2α₂)
/// ```
///
/// until the coefficients change by less than 1e-3 (L1) or 300 iterations.
pub fn bayesian_ridge(x: MatRef<'_, f64>, y: MatRef<'_, f64>) -> anyhow::Result<LinearFit> {
    const HYPER: f64 = 1e-6;
    const TOL: f64 = 1e-3;
    const MAX_ITER: usize = 300;
    let svd = centered_svd(x, y)?;
    let r = svd.s.len();
    let s2: Vec<f64> = svd.s.iter().map(|s| s * s).collect();
    let n = svd.n as f64;
    let mut filters = Vec::with_capacity(y.ncols());
    let mut uncertainty = Vec::with_capacity(y.ncols());
    for k in 0..y.ncols() {
        let uty: Vec<f64> = (0..r).map(|i| svd.u_t_y[(i, k)]).collect();
        // ‖y_c‖² − ‖Uᵀy_c‖²: the part of y no coefficient can reach.
        let outside = (svd.y_centered_sq[k] - uty.iter().map(|v| v * v).sum::<f64>()).max(0.0);
        let mut alpha = 1.0 / (svd.y_centered_sq[k] / n + f64::EPSILON);
        let mut lambda = 1.0;
        // coefficients in the V basis: c_i = s_i uty_i / (s_i² + λ/α)
        let coef_v = |alpha: f64, lambda: f64| -> Vec<f64> {
            (0..r)
                .map(|i| svd.s[i] * uty[i] / (s2[i] + lambda / alpha))
                .collect()
        };
        let mut coef_old: Option<Mat<f64>> = None;
        for _ in 0..MAX_ITER {
            let c = coef_v(alpha, lambda);
            let rss = outside
                + (0..r)
                    .map(|i| (uty[i] - svd.s[i] * c[i]).powi(2))
                    .sum::<f64>();
            let gamma: f64 = s2.iter().map(|&e| alpha * e / (lambda + alpha * e)).sum();
            let norm2: f64 = c.iter().map(|v| v * v).sum();
            lambda = (gamma + 2.0 * HYPER) / (norm2 + 2.0 * HYPER);
            alpha = (n - gamma + 2.0 * HYPER) / (rss + 2.0 * HYPER);
            let coef = Mat::from_fn(svd.v.nrows(), 1, |j, _| {
                (0..r).map(|i| svd.v[(j, i)] * c[i]).sum::<f64>()
            });
            if let Some(old) = &coef_old {
                let change: f64 = (0..coef.nrows())
                    .map(|j| (coef[(j, 0)] - old[(j, 0)]).abs())
                    .sum();
                if change < TOL {
                    break;
                }
            }
            coef_old = Some(coef);
        }
        filters.push(
            (0..r)
                .map(|i| svd.s[i] / (s2[i] + lambda / alpha))
                .collect(),
        );
        uncertainty.push(RidgeCovariance {
            noise_variance: 1.0 / alpha,
            inv_lambda: 1.0 / lambda,
            d: s2
                .iter()
                .map(|&e| 1.0 / (alpha * e + lambda) - 1.0 / lambda)
                .collect(),
        });
    }
    let coef = svd.coefficients(&filters);
    Ok(svd.finish(coef, Some(uncertainty)))
}

/// Predicted means and (for Bayesian ridge) variances, rows × outputs.
pub struct LinearPrediction {
    pub mean: Mat<f64>,
    pub variance: Option<Mat<f64>>,
}

impl LinearFit {
    pub fn predict(&self, x: MatRef<'_, f64>) -> LinearPrediction {
        let fit = self;
        let (rows, m) = (x.nrows(), fit.coef.ncols());
        let mut mean = Mat::from_fn(rows, m, |_, k| fit.intercept[k]);
        matmul(
            mean.as_mut(),
            Accum::Add,
            x,
            fit.coef.as_ref(),
            1.0,
            Par::Seq,
        );
        let variance = fit.uncertainty.as_ref().map(|covs| {
            let xc = Mat::from_fn(rows, x.ncols(), |i, j| x[(i, j)] - fit.x_mean[j]);
            let mut proj = Mat::zeros(rows, self.v.ncols());
            matmul(
                proj.as_mut(),
                Accum::Replace,
                xc.as_ref(),
                self.v.as_ref(),
                1.0,
                Par::Seq,
            );
            let norms: Vec<f64> = (0..rows).map(|i| xc.row(i).squared_norm_l2()).collect();
            Mat::from_fn(rows, m, |i, k| {
                let cov = &covs[k];
                let low_rank: f64 = (0..proj.ncols())
                    .map(|c| cov.d[c] * proj[(i, c)] * proj[(i, c)])
                    .sum();
                cov.noise_variance + (cov.inv_lambda * norms[i] + low_rank).max(0.0)
            })
        });
        LinearPrediction { mean, variance }
    }
}
