//! Algorithm 2: the evidence approximation (type-II maximum likelihood) with ARD.

use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Mat, Par};

use super::posterior::{OutputPosterior, active_set, lower_inverse, scaled_precision_factor};
pub use super::statistics::OutputData;
use super::{EstimatorError, FitOptions, NoisePrior};

/// What Algorithm 2 returns: the posterior at the final `(v, s)` and how it got there.
#[derive(Clone, Debug)]
pub struct EvidenceFit {
    pub posterior: OutputPosterior,
    pub iterations: usize,
    pub converged: bool,
}

/// Algorithm 2 of Song & Zhang (MacKay's fixed-point updates for ARD), from `(v, s)`:
///
/// ```text
/// repeat
///     M = I + D^½ G_JJ D^½ / s = L Lᵀ        J = {j : v_j > 0}, D = diag(v_J)
///     Σ = D^½ M⁻¹ D^½,  μ = Σ b_J / s,  γ_j = 1 − (M⁻¹)_jj
///     v_j ← μ_j² / γ_j             (v_j ← 0, pruned for good, when γ_j < prune_gamma)
///     s ← noise_update(RSS, N − Σγ),  RSS = μᵀGμ − 2μᵀb + q  (clamped at 0)
/// until max relative change of v and s < tol, or max_iter
/// ```
///
/// `(M⁻¹)_jj` is the squared norm of column `j` of `L⁻¹`, so an iteration costs one Cholesky
/// factorisation and one triangular inverse of the active block.
pub fn evidence(
    data: OutputData<'_>,
    start_v: Vec<f64>,
    start_s: f64,
    noise: NoisePrior,
    options: &FitOptions,
) -> Result<EvidenceFit, EstimatorError> {
    let p = data.g.nrows();
    if start_v.len() != p || data.b.len() != p {
        return Err(EstimatorError::Dimension {
            what: "prior variances",
            expected: p,
            found: start_v.len(),
        });
    }
    let mut v = start_v;
    // A basis function that is 0 in every row has G_jj = 0, hence γ_j = 0: the first iteration
    // would prune it, so do it before paying for the factorisation.
    for (j, vj) in v.iter_mut().enumerate() {
        if data.g[(j, j)] == 0.0 {
            *vj = 0.0;
        }
    }
    let mut s = start_s.max(noise.floor);
    let mut iterations = 0;
    let mut converged = false;
    while iterations < options.max_iter {
        iterations += 1;
        let step = iterate(data, &v, s, options)?;
        let s_new = noise_update(step.rss, data.n - step.gamma_sum, s, noise);
        let change = v
            .iter()
            .zip(&step.v)
            .map(|(a, b)| relative_change(*a, *b))
            .fold(relative_change(s, s_new), f64::max);
        v = step.v;
        s = s_new;
        if change < options.tol {
            converged = true;
            break;
        }
    }
    let posterior = OutputPosterior::from_statistics(v, s, data.g, data.b)?;
    Ok(EvidenceFit {
        posterior,
        iterations,
        converged,
    })
}

/// `s = max(s_floor, (RSS + ν₀ s_p) / (dof + ν₀))`: MacKay's update `RSS / (N − Σγ)` with
/// `ν₀` pseudo-rows of mean squared error `s_p` from [`NoisePrior`] added. When fewer than one
/// residual degree of freedom is left (`dof + ν₀ < 1`, possible when forgetting has shrunk the
/// weighted row count below `Σγ`) the rows say nothing about the noise, and `s` is kept.
pub fn noise_update(rss: f64, dof: f64, previous: f64, noise: NoisePrior) -> f64 {
    let denominator = dof + noise.rows;
    if denominator < 1.0 {
        return previous.max(noise.floor);
    }
    ((rss + noise.rows * noise.scale) / denominator).max(noise.floor)
}

struct Step {
    v: Vec<f64>,
    rss: f64,
    gamma_sum: f64,
}

/// One fixed-point update of `v` and the residual sum of squares at the current posterior.
fn iterate(
    data: OutputData<'_>,
    v: &[f64],
    s: f64,
    options: &FitOptions,
) -> Result<Step, EstimatorError> {
    let active = active_set(v);
    let n = active.len();
    let mut v_new = vec![0.0; v.len()];
    if n == 0 {
        return Ok(Step {
            v: v_new,
            rss: data.q.max(0.0),
            gamma_sum: 0.0,
        });
    }
    let sqrt_v: Vec<f64> = active.iter().map(|&j| v[j].sqrt()).collect();
    let l = scaled_precision_factor(&sqrt_v, data.g, Some(&active), 1.0 / s)?;
    let l_inv = lower_inverse(l.as_ref());
    // μ_J = D^½ L⁻ᵀ L⁻¹ D^½ b_J / s
    let mut t = Mat::from_fn(n, 1, |i, _| sqrt_v[i] * data.b[active[i]] / s);
    solve_lower_triangular_in_place(l.as_ref(), t.as_mut(), Par::Seq);
    let mut mu = vec![0.0; n];
    let mut gamma_sum = 0.0;
    for j in 0..n {
        // column j of L⁻¹ is zero above the diagonal
        let col = l_inv.col(j);
        let mut m_inv_jj = 0.0;
        let mut dot = 0.0;
        for i in j..n {
            m_inv_jj += col[i] * col[i];
            dot += col[i] * t[(i, 0)];
        }
        mu[j] = sqrt_v[j] * dot;
        let gamma = 1.0 - m_inv_jj;
        gamma_sum += gamma.max(0.0);
        if gamma >= options.prune_gamma {
            v_new[active[j]] = mu[j] * mu[j] / gamma;
        }
    }
    // RSS = μᵀ G μ − 2 μᵀ b + q on the active set
    let mut quad = 0.0;
    for (c, &jc) in active.iter().enumerate() {
        let g_col = data.g.col(jc);
        let g_mu: f64 = active.iter().zip(&mu).map(|(&ja, m)| g_col[ja] * m).sum();
        quad += mu[c] * (g_mu - 2.0 * data.b[jc]);
    }
    let rss = (quad + data.q).max(0.0);
    if !rss.is_finite() || v_new.iter().any(|x| !x.is_finite()) {
        return Err(EstimatorError::NonFinite("evidence iteration"));
    }
    Ok(Step {
        v: v_new,
        rss,
        gamma_sum,
    })
}

/// `|a − b| / max(|a|, |b|)`, 0 when both are 0.
fn relative_change(a: f64, b: f64) -> f64 {
    let scale = a.abs().max(b.abs());
    if scale == 0.0 {
        0.0
    } else {
        (a - b).abs() / scale
    }
}
