//! Algorithm 2: the evidence approximation (type-II maximum likelihood), for every prior family.
//!
//! ARD ([`evidence`]) runs MacKay's fixed-point updates, one prior variance per basis function,
//! and moves a variance they would not settle within the iterations left straight to its
//! optimum (Tipping & Faul's, the others held); where its variances spend more than
//! `residual_cap` allows, they are scaled down together to it (`capped_scale`).
//! Ridge and smooth ([`SharedScale`]) have one prior scale over a fixed prior shape (and, for
//! smooth, a length scale among candidates): there the evidence is maximised directly, in the
//! eigenbasis of the shape's data precision, which finds the same fixed point in one
//! eigendecomposition per shape (as small as the data's rank: `data_factor`) instead of one
//! Cholesky factorisation per iteration, keeping three residual degrees of freedom where the rows
//! allow (`residual_cap`).
//!
//! A flat intercept (`v_f = ∞`) takes no part in either: both run on statistics centred by it
//! ([`Centred`]), which is exactly integrating the intercept out under its flat prior, and the
//! residual degrees of freedom lose the one it uses.

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::triangular_solve::{
    solve_lower_triangular_in_place, solve_upper_triangular_in_place,
};
use faer::{Accum, Mat, MatRef, Par};
use rayon::prelude::*;

use super::posterior::{
    FactorWorkspace, OutputPosterior, active_set, lower_inverse, scaled_precision_factor,
};

use super::prior::{FittedFamily, Prior, Smooth, kept_eigen, matern32_product};
use super::statistics::BatchStatistics;
pub use super::statistics::OutputData;
use super::{EstimatorError, FitOptions, NoisePrior};

/// What Algorithm 2 returns: the posterior at the final hyperparameters and how it got there.
#[derive(Clone, Debug)]
pub struct EvidenceFit {
    pub posterior: OutputPosterior,
    pub iterations: usize,
    pub converged: bool,
    /// `−2 log p(y | hyperparameters)` at the end, up to a constant shared by every prior of the
    /// same output (see [`neg2_log_evidence`]).
    pub neg2_log_evidence: f64,
    /// `−2 log` of the Occam factor of the fitted hyperparameters ([`occam_penalty`]; under
    /// ARD also the prior probability of the subset it keeps, [`subset_penalty`]).
    pub occam: f64,
}

impl EvidenceFit {
    /// `−2 log p(y | family)` to the order of MacKay's approximation: the evidence at the fitted
    /// hyperparameters times their Occam factor. What [`super::PriorFamily::Auto`] compares:
    /// ARD's evidence alone always wins, since it maximises over one hyperparameter per basis
    /// function, and its Occam factor is what it pays for them and for its choice of which to
    /// keep.
    pub fn family_score(&self) -> f64 {
        self.neg2_log_evidence + self.occam
    }
}

/// The prior range of `log α` (e-folds) over which a scale hyperparameter is searched, in the
/// Occam factor.
const LOG_SCALE_RANGE: f64 = 52.0;

/// `−2 log` of the Occam factor of scale hyperparameters (MacKay, "Bayesian interpolation",
/// 1992): a hyperparameter that the data determine to within `σ = √(2/γ_h)` in `log α` (`γ_h`
/// the well-determined parameters it governs), out of a prior range `Δ` of `log α`, costs
/// `2 log(Δ/σ)`, with `σ` at most √2 (a scale the data sent to its boundary, everything it
/// governs shrunk away, is still their choice); one chosen among `choices` discrete values (the
/// smooth prior's length scale) costs `2 log choices`. Pruned ARD variances, which the data
/// send to their boundary one by one, cost nothing here; which of them ARD keeps is charged by
/// [`subset_penalty`].
pub fn occam_penalty(gammas: impl Iterator<Item = f64>, choices: usize) -> f64 {
    let scales: f64 = gammas
        .map(|g| {
            let width = (2.0 / g.max(1.0)).sqrt();
            2.0 * (LOG_SCALE_RANGE / width).ln().max(0.0)
        })
        .sum();
    scales + 2.0 * (choices.max(1) as f64).ln()
}

/// `−2 log` of the prior probability of the subset ARD keeps, `k` of `p` candidate basis
/// functions, under a prior uniform over how many are kept and, given that, over which (the
/// multiplicity correction of Bayesian variable selection; Scott & Berger, "Bayes and
/// empirical-Bayes multiplicity adjustment in the variable-selection problem", 2010):
///
/// ```text
/// 2 [log(p + 1) + log C(p, k)]
/// ```
///
/// ARD chooses which basis functions to keep as well as their variances, and the Occam factor
/// of the variances ([`occam_penalty`]) does not count that choice. Among hundreds of collinear
/// inputs and tens of rows, a few can always be found that fit those rows: uncharged, their
/// evidence beats one shared variance's, and their intervals miss new rows.
pub fn subset_penalty(candidates: usize, kept: usize) -> f64 {
    let kept = kept.min(candidates);
    let (p, k) = (candidates as f64, kept.min(candidates - kept) as f64);
    // log C(p, k) = Σ_{i=1..k} log((p − k + i) / i), over the smaller of k and p − k.
    let log_choose: f64 = (1..=k as usize)
        .map(|i| ((p - k + i as f64) / i as f64).ln())
        .sum();
    2.0 * ((p + 1.0).ln() + log_choose)
}

/// `−2 log evidence = N_c log s + log|M| + E/s` (without `N_c log 2π`), with `M = I + RᵀG_cR/s`
/// for the prior factor `R`, `E = q_c − b_cᵀμ` the misfit plus the prior's penalty, and `N_c`
/// the informative rows left after the flat intercept (the tempered likelihood of
/// [`super::FitOptions`]).
pub fn neg2_log_evidence(informative: f64, s: f64, log_det: f64, misfit: f64) -> f64 {
    informative * s.ln() + log_det + misfit / s
}

/// `−2 log` of the noise prior [`NoisePrior`] at `s`, as a density over `log s`, up to a
/// constant:
///
/// ```text
/// ν₀ log s + ν₀ s_p / s
/// ```
///
/// Added to [`neg2_log_evidence`], its minimum over `s` is `(E + ν₀ s_p) / (N + ν₀)`, the
/// noise prior's mode given the misfit `E` on `N` rows.
pub(crate) fn noise_prior_neg2(noise: NoisePrior, s: f64) -> f64 {
    noise.rows * (s.ln() + noise.scale / s)
}

/// One output's statistics with the flat basis function `f` (if any) integrated out:
///
/// ```text
/// G_c = G − g_f g_fᵀ / G_ff,   b_c = b − g_f b_f / G_ff,   q_c = q − b_f² / G_ff,   N_c = N − 1
/// ```
///
/// with row and column `f` of `G_c` and entry `f` of `b_c` exactly 0. For an intercept
/// (`φ_f = 1`) these are the statistics of the rows centred by their means. A basis function
/// constant over the rows (see [`centred_gram`]) has its row, column and entry of `b_c` exactly
/// 0 too.
#[derive(Clone, Debug)]
pub struct Centred {
    pub g: Mat<f64>,
    pub b: Vec<f64>,
    pub q: f64,
    /// Rows left for the other parameters and the noise.
    pub n: f64,
    /// Informative rows left for them.
    pub informative: f64,
}

impl Centred {
    pub fn new(data: OutputData<'_>, flat: Option<usize>) -> Result<Self, EstimatorError> {
        let p = data.g.nrows();
        let Some(f) = flat else {
            return Ok(Self {
                g: data.g.to_owned(),
                b: data.b.to_vec(),
                q: data.q,
                n: data.n,
                informative: data.informative,
            });
        };
        let g = centred_gram(data.g, f)?;
        let gff = data.g[(f, f)];
        let b = (0..p)
            .map(|j| {
                if j == f || constant(data.g, f, j) {
                    0.0
                } else {
                    data.b[j] - data.g[(j, f)] * data.b[f] / gff
                }
            })
            .collect();
        Ok(Self {
            g,
            b,
            q: (data.q - data.b[f] * data.b[f] / gff).max(0.0),
            n: data.n - 1.0,
            informative: (data.informative - 1.0).max(0.0),
        })
    }

    fn data(&self) -> OutputData<'_> {
        OutputData {
            g: self.g.as_ref(),
            b: &self.b,
            q: self.q,
            n: self.n,
            informative: self.informative,
        }
    }
}

/// `G − g_f g_fᵀ / G_ff` with row and column `f` set to 0 (shared by every output), and so the
/// row and column of every basis function constant over the rows: centred, such a column is 0,
/// but `G_jj − G_jf² / G_ff` leaves round-off of either sign where its value has no exact double
/// (a feature at 0.7 in every row), which broke the factorisations.
pub fn centred_gram(g: MatRef<'_, f64>, f: usize) -> Result<Mat<f64>, EstimatorError> {
    let gff = g[(f, f)];
    if !(gff > 0.0 && gff.is_finite()) {
        return Err(EstimatorError::NotPositiveDefinite);
    }
    let p = g.nrows();
    let constant: Vec<bool> = (0..p).map(|j| constant(g, f, j)).collect();
    Ok(Mat::from_fn(p, p, |i, j| {
        if i == f || j == f || constant[i] || constant[j] {
            0.0
        } else {
            g[(i, j)] - g[(i, f)] * g[(j, f)] / gff
        }
    }))
}

/// Whether basis function `j ≠ f` is constant over the rows beside the flat basis function `f`:
/// its centred square sum `G_jj − G_jf² / G_ff` within round-off of 0 (below
/// [`CONSTANT_FEATURE`] of its raw one). A column of 0 counts as constant.
fn constant(g: MatRef<'_, f64>, f: usize, j: usize) -> bool {
    j != f && g[(j, j)] - g[(j, f)] * g[(j, f)] / g[(f, f)] <= CONSTANT_FEATURE * g[(j, j)]
}

/// A basis function whose centred square sum is below this fraction of its raw one is constant
/// over the rows (up to round-off): it carries nothing a flat intercept does not, and is pruned.
const CONSTANT_FEATURE: f64 = 1e-12;

/// Algorithm 2's start in no unit of the inputs: each finite `v_j` (the configured prior
/// variance) or, where the rows would determine a coefficient of that variance less than half
/// way on their own (`v_j G_c,jj / s₀ < 1`), the variance at which they would:
///
/// ```text
/// v_j ← max(v_j, s₀ / G_c,jj)       (γ_j = ½ for basis function j alone at noise s₀)
/// ```
///
/// An input in small units (a concentration in mol/L, about 10⁻⁴) started at the configured
/// variance with a `γ_j` of about 10⁻⁸: MacKay's update, at the first iteration's noise (the
/// output's variance), shrank one that explains a modest share of the output, and pruned it for
/// good. Where the start is `s₀ / G_c,jj`, its path is the same in any units. Inputs that the
/// configured variance already lets the rows determine start where they did; `v_f = ∞` marks a
/// flat intercept and is left as it is.
pub fn unit_free_start(
    data: OutputData<'_>,
    mut v: Vec<f64>,
    s0: f64,
) -> Result<Vec<f64>, EstimatorError> {
    let flat = v.iter().position(|x| *x == f64::INFINITY);
    let centred = Centred::new(data, flat)?;
    for (j, vj) in v.iter_mut().enumerate() {
        let g = centred.g[(j, j)];
        // A subnormal `g` would give ∞, which marks a flat intercept: left at its start.
        if vj.is_finite() && g > 0.0 && *vj * g < s0 && (s0 / g).is_finite() {
            *vj = s0 / g;
        }
    }
    Ok(v)
}

/// Algorithm 2 of Song & Zhang for the ARD prior (MacKay's fixed-point updates), from `(v, s)`;
/// `v_f = ∞` marks a flat intercept, integrated out by centring ([`Centred`]):
///
/// ```text
/// repeat
///     M = I + D^½ G_c,JJ D^½ / s = L Lᵀ        J = {j : 0 < v_j < ∞}, D = diag(v_J)
///     Σ = D^½ M⁻¹ D^½,  μ = Σ b_c,J / s,  γ_j = 1 − (M⁻¹)_jj
///     v_j ← μ_j² / γ_j             (v_j ← 0, pruned for good, when γ_j < prune_gamma and
///                                   the update would not grow v_j: see `keeps_growing`)
///     v_j ← v_j + (v′_j − v_j)/γ_j, or 0 (pruned for good) where v′_j ≤ v_j (1 − γ_j), for the
///           one j whose MacKay update v′_j < v_j would not settle within the iterations left
///           (settle_slow_weights; see slowest_to_settle)
///     s ← noise_update(RSS, N_inf,c − Σγ),  RSS = μᵀG_cμ − 2μᵀb_c + q_c  (clamped at 0)
/// until max relative change of v and s < tol, or max_iter
/// then, where Σγ > residual_cap(N_c + ν₀) (Student-t; not where a noise prior holds a
///     zero-inflated output's σ²):  (v, s) ← capped_scale(v, s)
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
    let flat = start_v.iter().position(|v| *v == f64::INFINITY);
    let centred = Centred::new(data, flat)?;
    let work = centred.data();
    let mut v = start_v;
    if let Some(f) = flat {
        v[f] = 0.0;
    }
    // A basis function that is 0 (or, beside a flat intercept, constant) in every row has
    // G_c,jj = 0, hence γ_j = 0: the first iteration would prune it, so do it before paying for
    // the factorisation.
    let mut candidates = 0;
    for (j, vj) in v.iter_mut().enumerate() {
        if work.g[(j, j)] <= CONSTANT_FEATURE * data.g[(j, j)] {
            *vj = 0.0;
        } else if Some(j) != flat {
            candidates += 1;
        }
    }
    let mut noise = noise;
    let mut s = start_s.max(noise.floor);
    let mut workspace = ArdWorkspace::new(p);
    let mut iterations = 0;
    let mut converged = false;
    while iterations < options.max_iter {
        iterations += 1;
        let mut step = match iterate(work, &v, s, options, &mut workspace) {
            // Rows that fit an output to round-off drive s below what `I + D^½ G_c D^½ / s`
            // can carry beside its identity in double precision: from here on s stays at the
            // round-off floor, where the factor exists.
            Err(EstimatorError::NotPositiveDefinite) => {
                let floor = round_off_floor(work, &v);
                if s >= floor {
                    return Err(EstimatorError::NotPositiveDefinite);
                }
                noise.floor = floor;
                s = floor;
                iterate(work, &v, s, options, &mut workspace)?
            }
            step => step?,
        };
        let s_new = noise_update(step.rss, work.informative - step.gamma_sum, s, noise);
        // Pruning is for good, and every S_j, Q_j scales with 1/s: settle a variance to 0 only
        // once s has stopped moving.
        let noise_settled = relative_change(s, s_new) < options.tol.sqrt();
        if options.settle_slow_weights
            && let Some(j) = slowest_to_settle(
                &v,
                &step,
                options.max_iter - iterations,
                noise_settled,
                options,
            )
        {
            step.v[j] = coordinate_optimum(v[j], step.v[j], step.gamma[j]);
        }
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
    let (mut neg2, mut gammas) = ard_neg2_log_evidence(work, &v, s)?;
    // The cap is for the Student-t predictive's variance (`residual_cap`). A zero-inflated
    // output (its informative rows the non-zero ones, fewer than its rows) has its weights
    // determined by all its rows, its zeros too, but its noise by its non-zero rows and the
    // noise prior: its γ may pass those where the prior's pseudo-rows hold σ².
    let held_by_noise_prior = data.informative < data.n && noise.rows > 0.0;
    let cap = residual_cap(work.informative + noise.rows);
    if options.student
        && !held_by_noise_prior
        && cap >= 1.0
        && gammas.iter().map(|g| g.max(0.0)).sum::<f64>() > cap + CAP_SLACK
        // Should the cap's eigenproblem fail, the fixed point stands, as before the cap existed.
        && let Ok(Some((capped_v, capped_s))) = capped_scale(&centred, &v, noise)
        && let Ok(capped) = ard_neg2_log_evidence(work, &capped_v, capped_s)
    {
        (v, s) = (capped_v, capped_s);
        (neg2, gammas) = capped;
    }
    let kept = v.iter().filter(|vj| **vj > 0.0).count();
    if let Some(f) = flat {
        v[f] = f64::INFINITY;
    }
    let posterior =
        OutputPosterior::from_statistics(Prior::diagonal(FittedFamily::Ard, v), s, data.g, data.b)?;
    Ok(EvidenceFit {
        posterior,
        iterations,
        converged,
        neg2_log_evidence: neg2,
        occam: occam_penalty(gammas.into_iter(), 1) + subset_penalty(candidates, kept),
    })
}

/// ARD's variances `v*` scaled along their own shape, `v = t v*`, to the evidence's maximum over
/// `t` (and `s`) among the scales that keep [`residual_cap`]'s residual degrees of freedom: the
/// ridge search ([`SharedScale`]) on the statistics weighted by `D*^½ = diag(v*)^½`,
///
/// ```text
/// G_w = D*^½ G_c D*^½,   b_w = D*^½ b_c      (a unit prior variance on the kept basis functions)
/// ```
///
/// whose eigenproblem is then free of the basis functions' units. With more basis functions
/// than rows, MacKay's updates can spend every row's degree of freedom, and σ² is then
/// estimated on less than one residual; ARD keeps which basis functions matter and how much
/// relative to each other, and gives up only the overall scale the cap takes from the shared
/// families too. `None` where the search ends at no positive scale.
fn capped_scale(
    centred: &Centred,
    v: &[f64],
    noise: NoisePrior,
) -> Result<Option<(Vec<f64>, f64)>, EstimatorError> {
    let root: Vec<f64> = v.iter().map(|vj| vj.sqrt()).collect();
    let p = root.len();
    let weighted = Centred {
        g: Mat::from_fn(p, p, |i, j| root[i] * centred.g[(i, j)] * root[j]),
        b: centred.b.iter().zip(&root).map(|(b, r)| b * r).collect(),
        q: centred.q,
        n: centred.n,
        informative: centred.informative,
    };
    let z = data_factor(weighted.g.as_ref())?;
    let kept = v
        .iter()
        .map(|vj| if *vj > 0.0 { 1.0 } else { 0.0 })
        .collect();
    let shape = Shape::new(FittedFamily::Ard, None, kept, z.as_ref())?;
    let (_, scale, s, _) = shape.maximise(&weighted, noise);
    Ok((scale > 0.0 && scale.is_finite() && s > 0.0)
        .then(|| (v.iter().map(|vj| scale * vj).collect(), s)))
}

/// How far ARD's `Σγ` may pass [`residual_cap`] before [`capped_scale`] runs: MacKay's fixed
/// point is met to the iteration's tolerance, not to the bit.
const CAP_SLACK: f64 = 1e-6;

/// Whether basis function `j` varies over the rows of the statistics `g` (beside a flat
/// intercept `flat`, about its mean): `G_c,jj = G_jj − G_jf² / G_ff` beyond round-off. One that
/// does not is pruned before the first iteration; one that does could come back if not pruned.
pub fn varies(g: MatRef<'_, f64>, flat: Option<usize>, j: usize) -> bool {
    let centred = match flat {
        Some(f) if f == j => return false,
        Some(f) if g[(f, f)] > 0.0 => g[(j, j)] - g[(j, f)] * g[(j, f)] / g[(f, f)],
        _ => g[(j, j)],
    };
    centred > CONSTANT_FEATURE * g[(j, j)]
}

/// A pruned basis function of an ARD fit, as Tipping & Faul ("Fast marginal likelihood
/// maximisation for sparse Bayesian models", 2003) see it: its sparsity `S_j` and quality `Q_j`
/// under the model without it, at the fit's `(v, s)`,
///
/// ```text
/// S_j = G_c,jj / s − ‖x_j‖² / s²,   Q_j = (b_c,j − x_jᵀ t) / s,
/// x_j = L⁻¹ D^½ G_c,Aj,   t = L⁻¹ D^½ b_c,A / s,   L Lᵀ = I + D^½ G_c,AA D^½ / s
/// ```
///
/// (`A` the active set, `D = diag(v_A)`): `S_j = φ_jᵀ C⁻¹ φ_j` and `Q_j = φ_jᵀ C⁻¹ y` for the
/// marginal covariance `C` of the rows, from the statistics alone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Revival {
    pub index: usize,
    pub sparsity: f64,
    pub quality: f64,
}

impl Revival {
    /// Whether giving `j` back a prior variance raises the evidence: `Q_j² > S_j`, the
    /// condition under which its best variance `v_j = (Q_j² − S_j) / S_j²` is positive.
    pub fn raises_evidence(&self) -> bool {
        self.quality * self.quality > self.sparsity
    }

    /// Whether that rise pays for the new scale hyperparameter: [`Self::gain`] beyond the
    /// smallest Occam factor one costs in [`EvidenceFit::family_score`] (`2 log(Δ/√2)`, a
    /// variance the data determine to within `√2` e-folds; see [`occam_penalty`]). A test, not
    /// a bound: the gain holds `s` and the other variances fixed, a run from another start may
    /// reach another optimum altogether, and the revival's change of [`subset_penalty`] is not
    /// counted (the second start it triggers is scored with it, so it can only lose).
    pub fn pays_its_occam_factor(&self) -> bool {
        self.gain() > occam_penalty(std::iter::once(1.0), 1)
    }

    /// How much `−2 log evidence` falls when `v_j` takes its best value, `s` and the other
    /// variances fixed: `Q_j²/S_j − 1 − ln(Q_j²/S_j)` where that is a gain, else 0.
    pub fn gain(&self) -> f64 {
        if !self.raises_evidence() {
            return 0.0;
        }
        if self.sparsity == 0.0 {
            return f64::INFINITY;
        }
        let ratio = self.quality * self.quality / self.sparsity;
        ratio - 1.0 - ratio.ln()
    }
}

/// [`Revival`] of every basis function the ARD prior `v` (`∞` a flat intercept) has pruned and
/// that varies over the rows ([`varies`]), at noise variance `s`. A fixed point of MacKay's
/// updates never revives one (`v_j = 0` stays 0). Where none [`Revival::raises_evidence`], no
/// single revival raises the evidence at the fit's `s` and other variances; where none
/// [`Revival::pays_its_occam_factor`], no single one pays for its variance there, and a second
/// start that might revive some is taken as not worth its cost (a test of one revival at a
/// time: revivals that pay only together are not seen).
pub fn revivals(data: OutputData<'_>, v: &[f64], s: f64) -> Result<Vec<Revival>, EstimatorError> {
    let p = data.g.nrows();
    for (what, found) in [("prior variances", v.len()), ("Φᵀy entries", data.b.len())] {
        if found != p {
            return Err(EstimatorError::Dimension {
                what,
                expected: p,
                found,
            });
        }
    }
    if v.iter().any(|x| x.is_nan() || *x < 0.0) || !(s.is_finite() && s > 0.0) {
        return Err(EstimatorError::NonFinite(
            "prior variances or noise of a revival",
        ));
    }
    let flat = v.iter().position(|x| *x == f64::INFINITY);
    let pruned: Vec<usize> = (0..p)
        .filter(|&j| v[j] == 0.0 && varies(data.g, flat, j))
        .collect();
    if pruned.is_empty() {
        return Ok(Vec::new());
    }
    let centred = Centred::new(data, flat)?;
    let active: Vec<usize> = (0..p).filter(|&j| v[j] > 0.0 && v[j].is_finite()).collect();
    let n = active.len();
    let sqrt_v: Vec<f64> = active.iter().map(|&j| v[j].sqrt()).collect();
    let (x, t) = if n == 0 {
        (Mat::zeros(0, pruned.len()), Mat::zeros(0, 1))
    } else {
        let l = scaled_precision_factor(&sqrt_v, centred.g.as_ref(), Some(&active), 1.0 / s)?;
        let mut x = Mat::from_fn(n, pruned.len(), |i, c| {
            sqrt_v[i] * centred.g[(active[i], pruned[c])]
        });
        solve_lower_triangular_in_place(l.as_ref(), x.as_mut(), Par::Seq);
        let mut t = Mat::from_fn(n, 1, |i, _| sqrt_v[i] * centred.b[active[i]] / s);
        solve_lower_triangular_in_place(l.as_ref(), t.as_mut(), Par::Seq);
        (x, t)
    };
    pruned
        .iter()
        .enumerate()
        .map(|(c, &j)| {
            let col = x.col(c);
            let fitted: f64 = (0..n).map(|i| col[i] * t[(i, 0)]).sum();
            let sparsity = centred.g[(j, j)] / s - col.squared_norm_l2() / (s * s);
            let quality = (centred.b[j] - fitted) / s;
            // A NaN would answer "no revival" and skip the second start: refuse it instead
            // (before the clamp, which would turn it into 0).
            if !(sparsity.is_finite() && quality.is_finite()) {
                return Err(EstimatorError::NonFinite(
                    "a pruned basis function's revival",
                ));
            }
            Ok(Revival {
                index: j,
                sparsity: sparsity.max(0.0),
                quality,
            })
        })
        .collect()
}

/// [`neg2_log_evidence`] of a diagonal prior `v` (no flat entries) on centred statistics, and
/// the `γ_j` of its active basis functions.
fn ard_neg2_log_evidence(
    data: OutputData<'_>,
    v: &[f64],
    s: f64,
) -> Result<(f64, Vec<f64>), EstimatorError> {
    let active = active_set(v);
    let n = active.len();
    if n == 0 {
        return Ok((
            neg2_log_evidence(data.informative, s, 0.0, data.q),
            Vec::new(),
        ));
    }
    let sqrt_v: Vec<f64> = active.iter().map(|&j| v[j].sqrt()).collect();
    let l = scaled_precision_factor(&sqrt_v, data.g, Some(&active), 1.0 / s)?;
    let log_det: f64 = (0..n).map(|i| 2.0 * l[(i, i)].ln()).sum();
    // b_cᵀμ = ‖L⁻¹ D^½ b_c,J‖² / s
    let mut t = Mat::from_fn(n, 1, |i, _| sqrt_v[i] * data.b[active[i]]);
    solve_lower_triangular_in_place(l.as_ref(), t.as_mut(), Par::Seq);
    let fitted = t.col(0).squared_norm_l2() / s;
    let l_inv = lower_inverse(l.as_ref());
    let gammas = (0..n)
        .map(|j| 1.0 - l_inv.col(j).squared_norm_l2())
        .collect();
    Ok((
        neg2_log_evidence(data.informative, s, log_det, (data.q - fitted).max(0.0)),
        gammas,
    ))
}

/// The smallest noise variance at which `M = I + D^½ G_c D^½ / s` keeps its identity in double
/// precision: its largest eigenvalue is at most `tr(D^½ G_c D^½) / s = Σ_j v_j G_c,jj / s`, so at
///
/// ```text
/// s_round-off = 10⁻¹² Σ_j v_j G_c,jj
/// ```
///
/// `M`'s condition number is at most 10¹², and the round-off of its entries (10⁻¹⁶ of 10¹²)
/// moves its eigenvalues, all at least 1, by far less than 1 for any basis of a few thousand
/// functions.
fn round_off_floor(data: OutputData<'_>, v: &[f64]) -> f64 {
    ROUND_OFF_FLOOR
        * v.iter()
            .enumerate()
            .map(|(j, vj)| vj * data.g[(j, j)])
            .sum::<f64>()
}

/// [`round_off_floor`]'s fraction of `tr(D^½ G_c D^½)`.
const ROUND_OFF_FLOOR: f64 = 1e-12;

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
    /// `γ_j` at the posterior the step was computed from (0 outside the active set).
    gamma: Vec<f64>,
    rss: f64,
    gamma_sum: f64,
}

/// One fixed-point update of `v` and the residual sum of squares at the current posterior, the
/// active block factored in `workspace`.
fn iterate(
    data: OutputData<'_>,
    v: &[f64],
    s: f64,
    options: &FitOptions,
    workspace: &mut ArdWorkspace,
) -> Result<Step, EstimatorError> {
    let active = active_set(v);
    let n = active.len();
    let mut v_new = vec![0.0; v.len()];
    let mut gamma_full = vec![0.0; v.len()];
    if n == 0 {
        return Ok(Step {
            v: v_new,
            gamma: gamma_full,
            rss: data.q.max(0.0),
            gamma_sum: 0.0,
        });
    }
    let sqrt_v: Vec<f64> = active.iter().map(|&j| v[j].sqrt()).collect();
    let (gamma, mu) = workspace.gamma_and_mean(data, &active, &sqrt_v, s)?;
    let mut gamma_sum = 0.0;
    for (c, &j) in active.iter().enumerate() {
        gamma_sum += gamma[c].max(0.0);
        gamma_full[j] = gamma[c];
        let update = mu[c] * mu[c] / gamma[c];
        if gamma[c] >= options.prune_gamma || keeps_growing(gamma[c], v[j], update) {
            v_new[j] = update;
        }
    }
    // RSS = μᵀ G μ − 2 μᵀ b + q on the active set
    let mut quad = 0.0;
    for (c, &jc) in active.iter().enumerate() {
        let g_col = data.g.col(jc);
        let g_mu: f64 = active.iter().zip(mu).map(|(&ja, m)| g_col[ja] * m).sum();
        quad += mu[c] * (g_mu - 2.0 * data.b[jc]);
    }
    let rss = (quad + data.q).max(0.0);
    if !rss.is_finite() || v_new.iter().any(|x| !x.is_finite()) {
        return Err(EstimatorError::NonFinite("evidence iteration"));
    }
    Ok(Step {
        v: v_new,
        gamma: gamma_full,
        rss,
        gamma_sum,
    })
}

/// Whether a variance whose `γ_j` is below `prune_gamma` is kept because MacKay's update grows
/// it (`v′_j = μ_j²/γ_j > v_j`, which holding the others is `Q_j² > S_j (1 + v_j S_j)`, Tipping &
/// Faul's `Q_j² > S_j` at the small `v_j S_j ≈ γ_j` where this applies: the evidence wants it
/// larger). A small `γ_j` then says the start is small for the input's units (a concentration in
/// mol/L), not that the rows disown it: pruned, it stayed pruned for good and the output lost an
/// input that explained it. Only
/// where `γ_j = 1 − (M⁻¹)_jj` is resolved above the round-off of that difference
/// ([`RESOLVED_GAMMA`]); below it, pruned as before.
fn keeps_growing(gamma: f64, v: f64, update: f64) -> bool {
    gamma > RESOLVED_GAMMA && update > v && update.is_finite()
}

/// The smallest `γ_j` that `1 − (M⁻¹)_jj`, a difference of numbers near 1, resolves to a few
/// digits: the column's squared norm is summed to within about `p ε` of 1.
const RESOLVED_GAMMA: f64 = 1e-12;

/// What one ARD run factors and inverts at every iteration, allocated once for all `p` basis
/// functions (the active set only shrinks): the factor `L` of `M = I + D^½ G_c,JJ D^½ / s`, its
/// inverse, and the `γ_J` and `μ_J` computed from them.
struct ArdWorkspace {
    factor: FactorWorkspace,
    inverse: Mat<f64>,
    gamma: Vec<f64>,
    mean: Vec<f64>,
}

impl ArdWorkspace {
    fn new(p: usize) -> Self {
        Self {
            factor: FactorWorkspace::new(p),
            inverse: Mat::zeros(p, p),
            gamma: vec![0.0; p],
            mean: vec![0.0; p],
        }
    }

    /// `γ_j = 1 − (M⁻¹)_jj` and `μ_j` for the active basis functions `J` (prior standard
    /// deviations `sqrt_v`), with `M = L Lᵀ`:
    ///
    /// ```text
    /// (M⁻¹)_jj = ‖L⁻¹ e_j‖²                 (the squared norm of column j of L⁻¹)
    /// μ_J      = D^½ L⁻ᵀ L⁻¹ D^½ b_c,J / s   (one forward and one back substitution)
    /// ```
    fn gamma_and_mean(
        &mut self,
        data: OutputData<'_>,
        active: &[usize],
        sqrt_v: &[f64],
        s: f64,
    ) -> Result<(&[f64], &[f64]), EstimatorError> {
        let n = active.len();
        self.factor.factor(sqrt_v, data.g, Some(active), 1.0 / s)?;
        let inverse = self.inverse.as_mut().submatrix_mut(0, 0, n, n);
        faer::linalg::triangular_inverse::invert_lower_triangular(
            inverse,
            self.factor.lower(n),
            Par::Seq,
        );
        for j in 0..n {
            // column j of L⁻¹ is zero above the diagonal
            let below = &self.inverse.col_as_slice(j)[j..n];
            self.gamma[j] = 1.0 - below.iter().map(|x| x * x).sum::<f64>();
        }
        let mean = &mut self.mean[..n];
        for (m, (&j, sv)) in mean.iter_mut().zip(active.iter().zip(sqrt_v)) {
            *m = sv * data.b[j] / s;
        }
        let l = self.factor.lower(n);
        let mut t = faer::ColMut::from_slice_mut(mean);
        solve_lower_triangular_in_place(l, t.as_mut().as_mat_mut(), Par::Seq);
        solve_upper_triangular_in_place(l.transpose(), t.as_mut().as_mat_mut(), Par::Seq);
        for (m, sv) in self.mean[..n].iter_mut().zip(sqrt_v) {
            *m *= sv;
        }
        Ok((&self.gamma[..n], &self.mean[..n]))
    }
}

/// The basis function whose MacKay update would take the most iterations to settle, if that is
/// more than `remaining`; it then takes its exact coordinate optimum ([`coordinate_optimum`])
/// instead. Only a variance the update shrinks: jumping a growing one to its optimum gives a
/// coefficient the rows barely determine all the freedom the evidence allows it at once, and on
/// a dye seen in a few rows that made wild predictions. One heading for 0, which that optimum
/// prunes for good, only once `noise_settled`.
///
/// Holding the others fixed, MacKay's update is `u ← u (Q_j²/S_j) / (1 + u)` in `u = v_j S_j`,
/// with Tipping & Faul's out-of-model sparsity and quality `S_j`, `Q_j` (those of the model
/// without `j`, fixed while only `v_j` moves). Towards a positive optimum (`Q_j² > S_j`) it
/// converges at the rate `1 − γ_j` there; towards 0 (`Q_j² ≤ S_j`) it shrinks `u` by
/// `(Q_j²/S_j)/(1 + u)` a step. Near the boundary `Q_j² ≈ S_j` both crawl. The iterations left
/// are estimated from the step's relative change `r_j` and the current `γ_j` (a forecast: the
/// rates hold near the fixed point, and towards 0 close to the boundary the decay is slower
/// still):
///
/// ```text
/// Q_j² > S_j  (v′ > v (1 − γ)):  ln(r_j / tol) / −ln(1 − γ_j)            (r_j falls by 1 − γ_j)
/// Q_j² ≤ S_j  (v′ ≤ v (1 − γ)):  ln(γ_j / prune_gamma) / −ln(1 − r_j)    (γ_j falls by 1 − r_j)
/// ```
///
/// One basis function per iteration, so that two collinear ones never leave together.
fn slowest_to_settle(
    v: &[f64],
    step: &Step,
    remaining: usize,
    noise_settled: bool,
    options: &FitOptions,
) -> Option<usize> {
    let mut slowest: Option<(usize, f64)> = None;
    for (j, (&old, &new)) in v.iter().zip(&step.v).enumerate() {
        let gamma = step.gamma[j];
        if !(old > 0.0 && old.is_finite() && new > 0.0 && new < old && gamma < 1.0) {
            continue;
        }
        let r = relative_change(old, new);
        if r < options.tol {
            continue;
        }
        let iterations = if new > old * (1.0 - gamma) {
            (r / options.tol).ln() / -(1.0 - gamma).ln()
        } else if noise_settled {
            (gamma / options.prune_gamma).ln() / -(1.0 - r).ln()
        } else {
            continue;
        };
        if iterations > remaining as f64 && slowest.is_none_or(|(_, most)| iterations > most) {
            slowest = Some((j, iterations));
        }
    }
    slowest.map(|(j, _)| j)
}

/// The prior variance that maximises the evidence over `v_j` alone, the others and `s` held
/// (Tipping & Faul 2003), from MacKay's update `v′ = μ_j²/γ_j` at `v_j`: with
/// `S_j = γ_j / (v_j (1 − γ_j))` and `Q_j = μ_j / (v_j (1 − γ_j))` (the posterior of `w_j` is
/// `N(Q_j / (1/v_j + S_j), 1/(1/v_j + S_j))`),
///
/// ```text
/// v_j* = (Q_j² − S_j) / S_j² = v_j + (v′ − v_j) / γ_j    when Q_j² > S_j,  else 0
/// ```
///
/// MacKay's step taken `1/γ_j` times: it goes all the way where MacKay's goes `γ_j` of it, and
/// shares its fixed point.
fn coordinate_optimum(v: f64, mackay_update: f64, gamma: f64) -> f64 {
    let optimum = v + (mackay_update - v) / gamma;
    if optimum > 0.0 && optimum.is_finite() {
        optimum
    } else {
        0.0
    }
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

/// The smallest `log α` in `[low, high]` at which `γ(α) = Σ λ_i/(λ_i + α) ≤ cap` (γ falls as α
/// grows), by bisection; `low` when γ never exceeds the cap there, or the cap is below 1.
fn lowest_log_alpha(lambda: &[f64], cap: f64, low: f64, high: f64) -> f64 {
    let gamma = |log_alpha: f64| -> f64 {
        let alpha = log_alpha.exp();
        lambda.iter().map(|l| l / (l + alpha)).sum()
    };
    if cap < 1.0 || gamma(low) <= cap {
        return low;
    }
    let (mut lo, mut hi) = (low, high);
    for _ in 0..80 {
        let mid = 0.5 * (lo + hi);
        // Adjacent doubles: no later step moves `hi`.
        if mid == lo || mid == hi {
            break;
        }
        if gamma(mid) > cap {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// The `x` that minimises `f`: the best point of `grid` (ascending), then golden-section search
/// between its neighbours; the search's point where it is no worse than the grid's best.
pub(crate) fn minimise_on_grid(grid: &[f64], f: impl Fn(f64) -> f64) -> f64 {
    let values: Vec<f64> = grid.iter().map(|&x| f(x)).collect();
    refine_on_grid(grid, &values, f)
}

/// [`minimise_on_grid`] given `f`'s `values` on `grid`, evaluated some faster way than one point
/// at a time.
pub(crate) fn refine_on_grid(grid: &[f64], values: &[f64], f: impl Fn(f64) -> f64) -> f64 {
    let Some(best) = (0..grid.len()).min_by(|&a, &b| values[a].total_cmp(&values[b])) else {
        return f64::NAN;
    };
    let (mut lo, mut hi) = (
        grid[best.saturating_sub(1)],
        grid[(best + 1).min(grid.len() - 1)],
    );
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let mut x1 = hi - ratio * (hi - lo);
    let mut x2 = lo + ratio * (hi - lo);
    let (mut f1, mut f2) = (f(x1), f(x2));
    for _ in 0..60 {
        if f1 < f2 {
            hi = x2;
            x2 = x1;
            f2 = f1;
            x1 = hi - ratio * (hi - lo);
            f1 = f(x1);
        } else {
            lo = x1;
            x1 = x2;
            f1 = f2;
            x2 = lo + ratio * (hi - lo);
            f2 = f(x2);
        }
    }
    let candidate = if f1 < f2 { x1 } else { x2 };
    if f(candidate) <= values[best] {
        candidate
    } else {
        grid[best]
    }
}

/// Residual degrees of freedom a fit keeps (a shared-scale fit in its search, ARD by
/// [`capped_scale`]): the most determined weights `γ` it may spend out of `dof` rows. The
/// Student-t predictive ([`super::model::Predictive`]) has a finite variance only with
/// `ν = dof − γ > 2`, and answers it for `ν ≥ 3`; a fit that spent more would answer a variance
/// its own distribution does not have, from a σ² estimated on one or two residuals. So
/// `γ ≤ dof − 3`, and where the rows are too few for that, `γ ≤ min(dof − 1, 1)`: one weight
/// determined, or none (a cap below 1 leaves the search free). `dof` counts a zero-inflated
/// output's noise-prior pseudo-rows, which the predictive's `ν` does not: there the clamp at 3
/// may still apply (ARD does not cap such an output at all: [`evidence`]).
pub(crate) fn residual_cap(dof: f64) -> f64 {
    (dof - MIN_RESIDUAL_DOF).max((dof - 1.0).min(1.0))
}

/// The residual degrees of freedom at which the Student-t predictive's variance is its own.
const MIN_RESIDUAL_DOF: f64 = 3.0;

/// Length scales (in bands) the smooth prior tries: from nearly independent bands to a curve
/// that bends a few times over the whole spectrum.
const LENGTH_SCALES: [f64; 17] = [
    0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0,
];

/// The prior shapes a fit's evidence formed ([`SharedScale`]) on the statistics of the state
/// the fit made, kept for that state's predictor: [`super::mixture::AlternateShapes::with_fitted`] takes the
/// shapes its alternates need from here instead of forming them again (an eigenproblem of the
/// data's rank and products of `rank² p` each). A shape is taken only where `Shape::new` would
/// have been given the very same inputs (the same statistics, by a digest of their rows and Gram
/// matrix; the same centring; the same unit variances to the bit), so the predictor is the one
/// [`super::mixture::AlternateShapes::new`] would make, bit for bit, as any other replica forms it.
pub struct FittedShapes {
    flat: Option<usize>,
    rank: usize,
    pub(crate) shapes: Vec<Shape>,
    statistics: u64,
}

impl FittedShapes {
    /// No shapes: the predictor forms what it needs.
    pub fn none() -> Self {
        Self {
            flat: None,
            rank: 0,
            shapes: Vec::new(),
            statistics: 0,
        }
    }

    /// The shapes of `shared`, prepared on `totals`.
    pub(crate) fn new(shared: Option<SharedScale>, totals: &BatchStatistics) -> Self {
        match shared {
            Some(shared) => {
                let (flat, rank, shapes) = shared.into_parts();
                Self {
                    flat,
                    rank,
                    shapes,
                    statistics: statistics_digest(totals),
                }
            }
            None => Self::none(),
        }
    }

    /// How many shapes are kept.
    pub fn len(&self) -> usize {
        self.shapes.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }

    /// The data's rank, where the shapes were formed on `totals` centred on `flat`.
    pub(crate) fn rank_of(&self, totals: &BatchStatistics, flat: Option<usize>) -> Option<usize> {
        (!self.is_empty() && self.flat == flat && self.statistics == statistics_digest(totals))
            .then_some(self.rank)
    }

    /// The shape of `family` and `smooth` and its index, if kept: a shared-scale fit has one
    /// shape per family and length scale (the caller checks with [`Self::rank_of`] that the
    /// shapes were formed on its statistics).
    #[cfg(test)]
    pub(crate) fn find(
        &self,
        family: FittedFamily,
        smooth: Option<Smooth>,
    ) -> Option<(usize, &Shape)> {
        self.shapes
            .iter()
            .enumerate()
            .find(|(_, shape)| shape.family() == family && shape.smooth() == smooth)
    }

    /// Takes the shape of `family`, `smooth` and exactly the unit variances `unit`, if kept.
    pub(crate) fn take(
        &mut self,
        family: FittedFamily,
        smooth: Option<Smooth>,
        unit: &[f64],
    ) -> Option<Shape> {
        let at = self.shapes.iter().position(|shape| {
            shape.family() == family && shape.smooth() == smooth && shape.unit_variance() == unit
        })?;
        Some(self.shapes.swap_remove(at))
    }
}

impl Default for FittedShapes {
    fn default() -> Self {
        Self::none()
    }
}

impl std::fmt::Debug for FittedShapes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FittedShapes")
            .field("flat", &self.flat)
            .field("shapes", &self.shapes.len())
            .finish_non_exhaustive()
    }
}

/// A digest of `totals`' row count and Gram matrix (every entry's bits, a multiply–rotate hash):
/// what binds [`FittedShapes`] to the statistics they were formed on.
fn statistics_digest(totals: &BatchStatistics) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let g = totals.g();
    let mut h = (g.nrows() as u64).wrapping_mul(K) ^ totals.rows().to_bits();
    for j in 0..g.ncols() {
        for v in g.col(j).iter() {
            h = (h.rotate_left(5) ^ v.to_bits()).wrapping_mul(K);
        }
    }
    h
}

/// A prior shape of the shared-scale families: `w_W ~ N(0, v R̃ R̃ᵀ)` with a fixed unit factor
/// `R̃` and one scale `v` found by the evidence. Prepared once per model (the data precision `G`
/// is shared by every output), used for each output.
#[derive(Clone, Debug)]
pub struct Shape {
    family: FittedFamily,
    smooth: Option<Smooth>,
    /// Prior variance of each basis function at `v = 1` (0 pruned, `∞` flat).
    unit_variance: Vec<f64>,
    /// The non-zero eigenvalues `λ` of `R̃ᵀ G_c R̃`.
    eigenvalues: Vec<f64>,
    /// `(R̃ U)ᵀ` (r × p) for their eigenvectors `U`: maps `b_c` to `Uᵀ R̃ᵀ b_c`.
    projection: Mat<f64>,
}

/// `P b` for a shape's projection `P` (r × p, column-major), each `Σ_j P_ij b_j` summed over `j`
/// in order as a row's sum would be, but read a column at a time, in `P`'s storage order: a row
/// of a 700-band projection strides across its whole matrix.
pub(crate) fn project(projection: MatRef<'_, f64>, b: &[f64]) -> Vec<f64> {
    debug_assert_eq!(b.len(), projection.ncols());
    // `-0.0`, where `Iterator::sum` starts, so that every element that is not NaN has the bits
    // a row's sum gives it.
    let mut t = vec![-0.0; projection.nrows()];
    for (j, &b_j) in b.iter().enumerate() {
        for (t, p) in t.iter_mut().zip(projection.col(j).iter()) {
            *t += p * b_j;
        }
    }
    t
}

/// `G_c = Zᵀ Z` (`Z` is rank × p), with the directions the rows never moved in dropped: formed
/// once and shared by every shape. With fewer rows than basis functions (a wide spectrum) `Z` has
/// fewer rows than columns, and each shape's eigenproblem is only as large as the data's rank.
///
/// Any `Z` serves (a shape's eigenvalues and `R̃ U` are those of `Z R̃ R̃ᵀ Zᵀ` whatever the
/// rotation of `Z`'s rows), so it is the Cholesky factor with complete pivoting, `Π G_c Πᵀ =
/// L Lᵀ`, stopped where the largest pivot left falls below `p ε` of the largest diagonal entry
/// (LAPACK's `dpstrf` rule; faer's): `Z = (Πᵀ L)ᵀ` over the pivots taken, `p·rank²` products
/// where an eigendecomposition takes several `p³`.
pub(crate) fn data_factor(g_c: MatRef<'_, f64>) -> Result<Mat<f64>, EstimatorError> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::cholesky::llt_pivoting::factor as pivoted;
    let p = g_c.nrows();
    if p == 0 || (0..p).all(|j| g_c[(j, j)] <= 0.0) {
        return Ok(Mat::zeros(0, p));
    }
    let mut l = g_c.to_owned();
    let (mut forward, mut inverse) = (vec![0usize; p], vec![0usize; p]);
    let par = crate::decomposition_par();
    let mut scratch = MemBuffer::new(pivoted::cholesky_in_place_scratch::<usize, f64>(
        p,
        par,
        Default::default(),
    ));
    let (info, _) = pivoted::cholesky_in_place(
        l.as_mut(),
        &mut forward,
        &mut inverse,
        par,
        MemStack::new(&mut scratch),
        Default::default(),
    )
    .map_err(|_| EstimatorError::NotPositiveDefinite)?;
    // Row i of L is basis function forward[i]: G_c[forward[i], forward[j]] = Σ_c L[i, c] L[j, c].
    let mut z = Mat::zeros(info.rank, p);
    for c in 0..info.rank {
        for i in c..p {
            z[(c, forward[i])] = l[(i, c)];
        }
    }
    Ok(z)
}

/// `Σ_i ln(1 + x_i)` for `x_i ≥ 0`, as the logarithms of running products `Π (1 + x_i)`: the
/// evidence's `log|I + Λ/α|`, which the scale search evaluates at every trial `α`, for one
/// logarithm per product instead of one per eigenvalue. A product is taken into the sum before
/// it could overflow; `1 + x` drops an `x` below the rounding of 1, which moves the sum by less
/// than its own rounding.
pub(crate) fn sum_ln_1p(xs: impl Iterator<Item = f64>) -> f64 {
    const FLUSH: f64 = 1e150;
    let (mut sum, mut product) = (0.0, 1.0_f64);
    for x in xs {
        let factor = 1.0 + x;
        if product > FLUSH || factor > FLUSH {
            sum += product.ln();
            product = 1.0;
        }
        product *= factor;
    }
    sum + product.ln()
}

/// Eigenvalues of a shape's `Z R̃ R̃ᵀ Zᵀ` (n × n) below `n ε` of the largest are round-off, the
/// eigensolver's own error (LAPACK's and numpy's rule for a numerical rank): the direction
/// carries none of the prior. A fixed fraction (10⁻¹² once) dropped real directions where the
/// inputs' units differ by 10⁶: the evidence then counted what they explain as noise.
fn rank_tolerance(n: usize) -> f64 {
    n as f64 * f64::EPSILON
}

/// The ridge and smooth families: one prior scale per output over candidate shapes, chosen with
/// it by the evidence.
///
/// For a shape with `λ_i`, `t_i = (Uᵀ R̃ᵀ b_c)_i`, writing the prior scale as `v = s/α`, the
/// evidence profiled over the noise variance is
///
/// ```text
/// E(α) = q_c − Σ_i t_i² / (λ_i + α)            (= RSS + α‖μ‖²/… : the data misfit plus penalty)
/// ŝ(α) = (E(α) + ν₀ s_p) / (N_c + ν₀)           (with the noise prior of [`NoisePrior`])
/// −2 log evidence(α) = N_c log ŝ(α) + Σ_i log(1 + λ_i/α) + E(α)/ŝ(α) + const
///                      + ν₀ log ŝ(α) + ν₀ s_p/ŝ(α)   (the noise prior, [`noise_prior_neg2`])
/// ```
///
/// where `N_c` counts the informative rows less the flat intercept's one (the likelihood
/// tempered by `N_inf / N`, see [`super::FitOptions`]), and `ν₀ = 0` unless the output is
/// zero-inflated; it is minimised over `log α` (a grid, then golden-section search). At its
/// minimum the fixed point of Algorithm 2 holds: `v = ‖μ‖²_R̃ / γ` and
/// `s = (RSS + ν₀ s_p) / (N_c − γ + ν₀)` with `γ = Σ λ_i/(λ_i + α)` (ARD's update with the
/// noise prior), so this is Algorithm 2 for a prior with one scale, found without iterating.
/// The shape (ridge, or smooth at each candidate length scale) with the largest evidence at
/// its optimum wins, the noise prior's term left out: the predictor weighs a model average's
/// shapes by that evidence again ([`super::mixture`]), from the state alone.
#[derive(Clone, Debug)]
pub struct SharedScale {
    shapes: Vec<Shape>,
    flat: Option<usize>,
    /// The data's rank: the rows of the factor `Z` the shapes were formed on.
    rank: usize,
}

impl SharedScale {
    /// The candidate shapes of `family` for a model whose first `bands` basis functions are a
    /// declared spectrum (0 without), with totals `g` over `rows` rows and the flat basis
    /// function `flat`.
    ///
    /// * ridge: `R̃ = I` over the basis functions that vary: one shared variance in the inputs'
    ///   own units. Not standardised: dividing by the training spread amplifies exactly the
    ///   inputs that hardly varied in training, which are the ones a new instrument or a new
    ///   kind of sample moves most (on the fermentation set, synthetic training spectra and real
    ///   test spectra, standardising made the error 70 times larger);
    /// * smooth: `R̃ = diag(K_ℓ^½, σ̄/σ_j)` for each candidate `ℓ`, the bands on their own scale and
    ///   the named features standardised to the bands' mean spread `σ̄`;
    /// * auto: both.
    pub fn prepare(
        family: super::PriorFamily,
        bands: usize,
        g: MatRef<'_, f64>,
        rows: f64,
        flat: Option<usize>,
    ) -> Result<Self, EstimatorError> {
        use super::PriorFamily;
        let p = g.nrows();
        let g_c = match flat {
            Some(f) => centred_gram(g, f)?,
            None => g.to_owned(),
        };
        let n = rows.max(f64::MIN_POSITIVE);
        let varying: Vec<bool> = (0..p)
            .map(|j| Some(j) != flat && g_c[(j, j)] > CONSTANT_FEATURE * g[(j, j)])
            .collect();
        let spread = |j: usize| g_c[(j, j)] / n;
        let z = data_factor(g_c.as_ref())?;
        let mut shapes = Vec::new();
        let smooth = bands >= 2 && matches!(family, PriorFamily::Smooth | PriorFamily::Auto);
        if !smooth || family == PriorFamily::Auto {
            let unit_variance = (0..p)
                .map(|j| match j {
                    _ if Some(j) == flat => f64::INFINITY,
                    _ if varying[j] => 1.0,
                    _ => 0.0,
                })
                .collect();
            shapes.push(Shape::new(
                FittedFamily::Ridge,
                None,
                unit_variance,
                z.as_ref(),
            )?);
        }
        if smooth {
            let band_spread = (0..bands).map(spread).sum::<f64>() / bands as f64;
            let band_spread = if band_spread > 0.0 { band_spread } else { 1.0 };
            let unit_variance: Vec<f64> = (0..p)
                .map(|j| match j {
                    _ if j < bands => 1.0,
                    _ if Some(j) == flat => f64::INFINITY,
                    _ if varying[j] => band_spread / spread(j),
                    _ => 0.0,
                })
                .collect();
            // The shapes are independent, so they are formed in parallel; they stay in the
            // scales' order because `fit` keeps the first of equal evidences.
            let smooth_shapes = LENGTH_SCALES
                .par_iter()
                .copied()
                .filter(|l| *l <= 2.0 * bands as f64)
                .map(|length| {
                    Shape::new(
                        FittedFamily::Smooth,
                        Some(Smooth { bands, length }),
                        unit_variance.clone(),
                        z.as_ref(),
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            shapes.extend(smooth_shapes);
        }
        Ok(Self {
            shapes,
            flat,
            rank: z.nrows(),
        })
    }

    /// How many shapes there are.
    pub(crate) fn len(&self) -> usize {
        self.shapes.len()
    }

    /// The flat basis function the shapes were centred on, the data's rank and the shapes.
    pub(crate) fn into_parts(self) -> (Option<usize>, usize, Vec<Shape>) {
        (self.flat, self.rank, self.shapes)
    }

    /// The evidence-maximising prior of one output and its posterior, with the other shapes
    /// the model average needs ([`super::mixture`]): the most probable first, until the shapes
    /// kept carry all but [`UNCOVERED_WEIGHT`] of the evidence's weight, none less probable than
    /// the best by more than [`ALTERNATE_LOG_RATIO`], at most [`MAX_ALTERNATES`]; each at its
    /// own evidence-maximising scale and noise variance.
    pub fn fit(
        &self,
        data: OutputData<'_>,
        noise: NoisePrior,
    ) -> Result<(EvidenceFit, Vec<Alternate>), EstimatorError> {
        self.fit_checked(data, noise, None)
            .map(|(fit, alternates, _)| (fit, alternates))
    }

    /// [`Self::fit`], each member of the model average then given the larger `α` that `larger`
    /// finds for its shape (by index) from the evidence's `α = s/v`, if any, with its scale and
    /// noise variance there ([`Shape::at_alpha`]): a first fit's shrinkage checked on its rows
    /// ([`super::leave_one_out`]). The members and their order are the evidence's; the
    /// posterior is formed once, at the scale it keeps. A member whose checked scale or noise
    /// variance is not finite and positive, or whose posterior cannot be formed there, keeps the
    /// evidence's: the check may move a fit, never fail it. With how many members moved.
    pub(crate) fn fit_checked(
        &self,
        data: OutputData<'_>,
        noise: NoisePrior,
        larger: Option<LargerAlpha<'_>>,
    ) -> Result<(EvidenceFit, Vec<Alternate>, usize), EstimatorError> {
        let centred = Centred::new(data, self.flat)?;
        // A member's (scale, s) at the larger `α` the rows ask for, if any.
        let checked = |i: usize, scale: f64, s: f64| -> Option<(f64, f64)> {
            let shape = &self.shapes[i];
            let alpha = larger?(i, shape, s / scale)?;
            let (scale, s) = shape.at_alpha(&centred, noise, alpha);
            (scale.is_finite() && scale > 0.0 && s.is_finite() && s > 0.0).then_some((scale, s))
        };
        let form = |i: usize, scale: f64, s: f64| {
            let prior = self.shapes[i].prior(scale);
            // The evidence needed only `K_ℓ`; the posterior takes `K_ℓ^½` from the process's
            // table (`Prior::factor`), so the outputs that pick this shape share it.
            let factor = prior.factor()?;
            OutputPosterior::from_statistics_with_factor(prior, factor, s, data.g, data.b)
        };
        let mut moved = 0;
        // (−2 log evidence, shape, v, ŝ, γ) of every shape, the most probable first; a sort
        // that keeps the first of equal evidences.
        let mut fits: Vec<(f64, usize, f64, f64, f64)> = self
            .shapes
            .iter()
            .enumerate()
            .map(|(i, shape)| {
                let (objective, scale, s, gamma) = shape.maximise(&centred, noise);
                (objective, i, scale, s, gamma)
            })
            .collect();
        fits.sort_by(|a, b| a.0.total_cmp(&b.0));
        let Some(&(neg2, i, scale, s, gamma)) = fits.first() else {
            return Err(EstimatorError::Dimension {
                what: "prior shapes",
                expected: 1,
                found: 0,
            });
        };
        let posterior = match checked(i, scale, s).map(|(scale, s)| form(i, scale, s)) {
            Some(Ok(posterior)) => {
                moved += 1;
                posterior
            }
            _ => form(i, scale, s)?,
        };
        // The shapes' weights `e^(−(x_i − x_best)/2)`, normalised over every shape: the most
        // probable join until they carry all but `UNCOVERED_WEIGHT` of it.
        let relative: Vec<f64> = fits
            .iter()
            .map(|f| {
                let x = (-0.5 * (f.0 - neg2)).exp();
                if x.is_finite() { x } else { 0.0 }
            })
            .collect();
        let total: f64 = relative.iter().sum();
        let mut carried = relative[0];
        let alternates = fits[1..]
            .iter()
            .zip(&relative[1..])
            .take_while(|(f, w)| {
                let wanted = carried < (1.0 - UNCOVERED_WEIGHT) * total
                    && f.0 - neg2 <= 2.0 * ALTERNATE_LOG_RATIO;
                carried += **w;
                wanted
            })
            .filter(|(f, _)| f.3.is_finite() && f.3 > 0.0)
            .take(MAX_ALTERNATES)
            .map(|(&(_, i, scale, s, _), _)| {
                let (scale, s) = checked(i, scale, s).map_or((scale, s), |moves| {
                    moved += 1;
                    moves
                });
                Alternate {
                    prior: self.shapes[i].prior(scale),
                    noise_variance: s,
                }
            })
            .collect();
        let fit = EvidenceFit {
            posterior,
            iterations: 1,
            converged: true,
            neg2_log_evidence: neg2,
            occam: occam_penalty(std::iter::once(gamma), self.shapes.len()),
        };
        Ok((fit, alternates, moved))
    }
}

/// For [`SharedScale::fit_checked`]: the larger `α` a member of shape `index` (`shape`) takes
/// from the evidence's `α`, if any.
pub(crate) type LargerAlpha<'a> = &'a dyn Fn(usize, &Shape, f64) -> Option<f64>;

/// A prior shape of an output's model average besides the one its posterior has: the prior at
/// its evidence-maximising scale and the noise variance found with it, both held fixed until
/// the output is fitted again. Its posterior is that of the model's statistics under them
/// ([`super::mixture`]), so it needs no state of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct Alternate {
    pub prior: Prior,
    pub noise_variance: f64,
}

/// How much less probable than the most probable shape (a factor `e^x`, `x` this) a shape may
/// be and still join the model average: a thousandth of the weight moves neither a mean nor a
/// variance by what the benchmark's scores resolve.
pub const ALTERNATE_LOG_RATIO: f64 = 3.0 * std::f64::consts::LN_10;

/// The weight the model average may leave out: the most probable shapes join until they carry
/// all but this of the evidence's weight over every shape. Where the rows pin the length
/// scale down (hundreds of rows), that is the best shape alone or with one neighbour, and the
/// model pays for no posterior it would hardly use.
pub const UNCOVERED_WEIGHT: f64 = 0.01;

/// At most this many shapes join the most probable one: each costs a posterior per model
/// version. On 21 rows of a NIR spectrum five to eight shapes hold most of the weight; fewer
/// (four, within a factor 100) left part of the length scale's uncertainty out of the
/// intervals (ACCURACY.md, "Averaged over prior shapes").
pub const MAX_ALTERNATES: usize = 8;

impl Shape {
    /// The shape with unit prior covariance `C = R̃ R̃ᵀ` (`K_ℓ` over the bands of a smooth shape,
    /// `diag(unit_variance)` elsewhere) on the data `G_c = Zᵀ Z` ([`data_factor`]). The
    /// non-zero eigenvalues of `R̃ᵀ G_c R̃ = (Z R̃)ᵀ (Z R̃)` are those of `S = Z C Zᵀ` (as small as
    /// the data's rank); for `S = W diag(λ) Wᵀ` the eigenvectors are `U = (Z R̃)ᵀ W λ^-½`, so
    ///
    /// ```text
    /// (R̃ U)ᵀ = λ^-½ Wᵀ Z C
    /// ```
    ///
    /// and neither `R̃` nor an eigendecomposition of `K_ℓ` is needed; `Z K_ℓ` itself is formed
    /// by the kernel's recursions ([`matern32_product`]), in `rank · bands` steps instead of
    /// `rank · bands²` products. The directions `S` leaves at 0 add nothing to the evidence
    /// (`log(1 + 0/α) = 0`, and `b_c` has no part in them).
    pub(crate) fn new(
        family: FittedFamily,
        smooth: Option<Smooth>,
        unit_variance: Vec<f64>,
        z: MatRef<'_, f64>,
    ) -> Result<Self, EstimatorError> {
        let p = unit_variance.len();
        let weighted: Vec<usize> = (0..p)
            .filter(|&j| unit_variance[j] > 0.0 && unit_variance[j] < f64::INFINITY)
            .collect();
        let rows = z.nrows();
        // Z C over the weighted basis functions; a smooth shape's bands are its first ones.
        let bands = smooth.map_or(0, |s| s.bands);
        if weighted.iter().take(bands).copied().ne(0..bands) {
            return Err(EstimatorError::Dimension {
                what: "smooth prior bands",
                expected: bands,
                found: weighted.iter().take_while(|&&j| j < bands).count(),
            });
        }
        let mut zc = Mat::from_fn(rows, weighted.len(), |i, a| {
            let j = weighted[a];
            if j < bands {
                0.0
            } else {
                z[(i, j)] * unit_variance[j]
            }
        });
        if let Some(smooth) = smooth {
            let product = matern32_product(z.subcols(0, bands), smooth.length);
            zc.as_mut().subcols_mut(0, bands).copy_from(&product);
        }
        let z_w = Mat::from_fn(rows, weighted.len(), |i, a| z[(i, weighted[a])]);
        // S is symmetric: its lower triangle, mirrored.
        let mut s = Mat::zeros(rows, rows);
        triangular::matmul(
            s.as_mut(),
            BlockStructure::TriangularLower,
            Accum::Replace,
            zc.as_ref(),
            BlockStructure::Rectangular,
            z_w.transpose(),
            BlockStructure::Rectangular,
            1.0,
            faer::get_global_parallelism(),
        );
        super::statistics::mirror_lower(s.as_mut());
        let (eigenvalues, projection) = if rows == 0 || weighted.is_empty() {
            (Vec::new(), Mat::zeros(0, p))
        } else {
            let (values, w) = kept_eigen(s.as_ref(), rank_tolerance(rows))?;
            let scaled = Mat::from_fn(rows, values.len(), |i, c| w[(i, c)] / values[c].sqrt());
            let projected = scaled.transpose() * &zc;
            let mut projection = Mat::zeros(values.len(), p);
            for (a, &j) in weighted.iter().enumerate() {
                for i in 0..values.len() {
                    projection[(i, j)] = projected[(i, a)];
                }
            }
            (values, projection)
        };
        Ok(Self {
            family,
            smooth,
            unit_variance,
            eigenvalues,
            projection,
        })
    }

    /// The family.
    pub(crate) fn family(&self) -> FittedFamily {
        self.family
    }

    /// The bands and length scale of a smooth shape.
    pub(crate) fn smooth(&self) -> Option<Smooth> {
        self.smooth
    }

    /// Prior variance of each basis function at `v = 1` (0 pruned, `∞` flat): `C`'s diagonal
    /// outside the bands.
    pub(crate) fn unit_variance(&self) -> &[f64] {
        &self.unit_variance
    }

    /// The non-zero eigenvalues `λ` of `R̃ᵀ G_c R̃`.
    pub(crate) fn eigenvalues(&self) -> &[f64] {
        &self.eigenvalues
    }

    /// `(R̃ U)ᵀ` (one row per eigenvalue, p columns, 0 outside the weighted basis functions).
    pub(crate) fn projection(&self) -> MatRef<'_, f64> {
        self.projection.as_ref()
    }

    /// The prior of this shape at scale `v` (a scale of 0, nothing varying, prunes every
    /// weighted basis function).
    pub(crate) fn prior(&self, scale: f64) -> Prior {
        let variance = self
            .unit_variance
            .iter()
            .map(|u| if *u == f64::INFINITY { *u } else { scale * u })
            .collect();
        Prior {
            family: self.family,
            variance,
            smooth: self.smooth.filter(|_| scale > 0.0),
        }
    }

    /// `t_i² = (Uᵀ R̃ᵀ b_c)_i²` of one output's centred statistics.
    fn projected_squares(&self, data: &Centred) -> Vec<f64> {
        let mut t = project(self.projection.as_ref(), &data.b);
        for t in &mut t {
            *t *= *t;
        }
        t
    }

    /// `(−2 log of evidence × noise prior, ŝ, −2 log evidence)` at `α = e^log_alpha` for the
    /// projected squares `t2` ([`Self::projected_squares`]): the search minimises the first, the
    /// shape is weighed by the last (as the predictor weighs it again).
    fn profile(
        &self,
        t2: &[f64],
        data: &Centred,
        noise: NoisePrior,
        log_alpha: f64,
    ) -> (f64, f64, f64) {
        let lambda = &self.eigenvalues;
        let dof = data.informative + noise.rows;
        let alpha = log_alpha.exp();
        let fitted: f64 = lambda.iter().zip(t2).map(|(l, t)| t / (l + alpha)).sum();
        let misfit = (data.q - fitted).max(0.0);
        // Fewer than one residual degree of freedom says nothing about the noise: as one.
        let s = ((misfit + noise.rows * noise.scale) / dof.max(1.0)).max(noise.floor);
        let log_det = sum_ln_1p(lambda.iter().map(|l| l / alpha));
        let neg2 = neg2_log_evidence(data.informative, s, log_det, misfit);
        // The noise prior's own term, so that `ŝ` and `α` maximise evidence × prior together;
        // left out at `ν₀ = 0`, where it is 0.
        let joint = if noise.rows > 0.0 {
            neg2 + noise_prior_neg2(noise, s)
        } else {
            neg2
        };
        (joint, s, neg2)
    }

    /// `(v, s)` at a given `α`: `s` by Algorithm 2's noise update there,
    ///
    /// ```text
    /// RSS(α) = q_c − Σ_i t_i² (λ_i + 2α) / (λ_i + α)²,    γ = Σ_i λ_i / (λ_i + α)
    /// s      = (RSS(α) + ν₀ s_p) / (N_c − γ + ν₀),        v = s / α
    /// ```
    ///
    /// the residuals' own variance with the degrees of freedom the fit spent taken out. At the
    /// evidence's optimum this is its `ŝ` (the fixed point); above it, where the evidence's `ŝ`
    /// would count the penalty `α‖μ‖²` as noise too, it is not.
    pub(crate) fn at_alpha(&self, data: &Centred, noise: NoisePrior, alpha: f64) -> (f64, f64) {
        let t2 = self.projected_squares(data);
        let (mut explained, mut gamma) = (0.0, 0.0);
        for (l, t) in self.eigenvalues.iter().zip(&t2) {
            // Two quotients, not `(λ + α)²`: that square overflows (or underflows) for inputs
            // whose squares' squares leave the doubles' range, where each quotient does not.
            explained += t / (l + alpha) * ((l + 2.0 * alpha) / (l + alpha));
            gamma += l / (l + alpha);
        }
        let rss = (data.q - explained).max(0.0);
        let dof = (data.informative - gamma + noise.rows).max(1.0);
        let s = ((rss + noise.rows * noise.scale) / dof).max(noise.floor);
        let scale = s / alpha;
        (if scale.is_finite() { scale } else { 0.0 }, s)
    }

    /// `(−2 log evidence, v, ŝ, γ)` at the `α` that maximises the evidence times the noise
    /// prior for the centred statistics of one output.
    fn maximise(&self, data: &Centred, noise: NoisePrior) -> (f64, f64, f64, f64) {
        let lambda = &self.eigenvalues;
        let t2 = self.projected_squares(data);
        let dof = data.informative + noise.rows;
        let profile = |log_alpha: f64| self.profile(&t2, data, noise, log_alpha);
        let largest = lambda.iter().fold(0.0_f64, |a, l| a.max(*l));
        if largest <= 0.0 || largest.is_nan() || dof <= 0.0 {
            let (_, s, neg2) = profile(0.0);
            return (neg2, 0.0, s, 0.0);
        }
        // A coarse grid over 52 e-folds around the data's scale, then golden-section search in
        // the bracket around the best grid point.
        let centre = largest.ln();
        // A shape that can fit every row (rank ≥ N_c: a wide spectrum) has a second minimum as
        // α → 0, where the rows are interpolated and ŝ → 0 on no residual at all. The search
        // keeps the residual degrees of freedom of `residual_cap`.
        let lowest = lowest_log_alpha(lambda, residual_cap(dof), centre - 40.0, centre + 12.0);
        let grid: Vec<f64> = (0..=104)
            .map(|i| centre - 40.0 + 0.5 * i as f64)
            .filter(|a| *a >= lowest)
            .collect();
        let grid = if grid.is_empty() { vec![lowest] } else { grid };
        let log_alpha = minimise_on_grid(&grid, |a| profile(a).0);
        let (_, s, neg2) = profile(log_alpha);
        let alpha = log_alpha.exp();
        let gamma = lambda.iter().map(|l| l / (l + alpha)).sum();
        let scale = s / alpha;
        if !scale.is_finite() {
            return (neg2, 0.0, s, 0.0);
        }
        (neg2, scale, s, gamma)
    }
}

#[cfg(test)]
mod tests {
    use faer::Side;
    use faer::linalg::solvers::DenseSolveCore;

    use super::*;

    proptest::proptest! {
        /// The running products give `Σ ln(1 + x_i)` to the rounding of the sum of logarithms,
        /// over ratios from below the rounding of 1 to far beyond what one product could hold.
        #[test]
        fn the_sum_of_logarithms_by_products_is_the_sum_of_log1p(
            exponents in proptest::collection::vec(-20.0_f64..200.0, 0..400),
        ) {
            let xs: Vec<f64> = exponents.iter().map(|e| 10f64.powf(*e)).collect();
            let direct: f64 = xs.iter().map(|x| x.ln_1p()).sum();
            let by_products = sum_ln_1p(xs.iter().copied());
            let bound = 1e-14 * direct.max(1.0);
            proptest::prop_assert!(
                (by_products - direct).abs() <= bound,
                "{by_products} against {direct}"
            );
        }
    }

    /// The data factor reproduces `G` and has the rows' rank, on a design with fewer rows than
    /// columns and one column repeated.
    #[test]
    fn the_data_factor_reproduces_the_gram_matrix_at_its_rank() {
        let (rows, p) = (30, 50);
        let mut x = Mat::from_fn(rows, p, |i, j| ((i * 7 + j * 13) % 17) as f64 / 17.0 - 0.5);
        for i in 0..rows {
            x[(i, 3)] = (i as f64 * 0.37).sin();
            x[(i, 40)] = x[(i, 3)];
        }
        let g = x.transpose() * &x;
        let z = data_factor(g.as_ref()).unwrap();
        let rebuilt = z.transpose() * &z;
        let largest = (0..p).map(|j| g[(j, j)]).fold(0.0_f64, f64::max);
        for i in 0..p {
            for j in 0..p {
                assert!((rebuilt[(i, j)] - g[(i, j)]).abs() <= 1e-10 * largest);
            }
        }
        let (values, _) = kept_eigen(g.as_ref(), rank_tolerance(p)).unwrap();
        assert_eq!(z.nrows(), values.len());
        assert!(z.nrows() < rows.min(p));
    }

    /// The parallel decompositions a fit makes give the same bits on any number of threads
    /// (`crate::DECOMPOSITION_SPLIT`), at a size well past those where faer splits its work (the
    /// eigensolver's from a few hundred, the pivoted factor's from about 650): a state folded on
    /// one machine replays to its digest on another.
    #[test]
    fn the_decompositions_give_the_same_bits_on_any_number_of_threads() {
        let (rows, p) = (890, 900);
        let mut state = 11;
        let x = Mat::from_fn(rows, p, |_, _| uniform(&mut state));
        let g = x.transpose() * &x;
        let bits = |m: &Mat<f64>| -> Vec<u64> {
            (0..m.ncols())
                .flat_map(|c| m.col(c).iter().map(|v| v.to_bits()).collect::<Vec<_>>())
                .collect()
        };
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let (values, vectors) = crate::prior::symmetric_eigen(g.as_ref()).unwrap();
                let values: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
                let z = data_factor(g.as_ref()).unwrap();
                (values, bits(&vectors), bits(&z))
            })
        };
        let one = on(1);
        assert_eq!(one.2.len(), rows * p, "the factor has the rows' rank");
        for threads in [2, 3] {
            let other = on(threads);
            assert!(one.0 == other.0, "eigenvalues on {threads} threads");
            assert!(one.1 == other.1, "eigenvectors on {threads} threads");
            assert!(one.2 == other.2, "data factor on {threads} threads");
        }
    }

    /// `2 [log(p + 1) + log C(p, k)]`, symmetric in `k` and `p − k`, and growing with the
    /// candidates for a fixed number kept.
    #[test]
    fn the_subset_penalty_is_the_log_prior_of_the_subset() {
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        assert!(close(
            subset_penalty(5, 2),
            2.0 * (6.0f64.ln() + 10.0f64.ln())
        ));
        assert!(close(subset_penalty(401, 0), 2.0 * 402.0f64.ln()));
        assert!(close(subset_penalty(401, 401), 2.0 * 402.0f64.ln()));
        assert!(close(subset_penalty(40, 3), subset_penalty(40, 37)));
        assert!(close(
            subset_penalty(30, 1),
            2.0 * (31.0f64.ln() + 30.0f64.ln())
        ));
        assert_eq!(subset_penalty(0, 0), 0.0);
        for k in 1..10 {
            assert!(subset_penalty(400, k) > subset_penalty(40, k));
            assert!(subset_penalty(400, k + 1) > subset_penalty(400, k));
        }
    }

    /// ARD's workspace gives `γ_j = 1 − (M⁻¹)_jj` and `μ_J = D^½ M⁻¹ D^½ b_J / s` as `M`'s
    /// dense inverse does, for an active set that shrinks between calls, and reads only what
    /// the call itself wrote: every buffer is filled with NaN before it.
    #[test]
    fn the_reused_factor_gives_the_posterior_of_each_active_set() {
        let (rows, p) = (60, 24);
        let x = design(rows, p);
        let g = x.transpose() * &x;
        let b: Vec<f64> = (0..p).map(|j| (j as f64 * 0.7).cos()).collect();
        let data = OutputData {
            g: g.as_ref(),
            b: &b,
            q: 10.0,
            n: rows as f64,
            informative: rows as f64,
        };
        let s = 0.3;
        let mut workspace = ArdWorkspace::new(p);
        for keep in [24, 17, 9, 1] {
            let active: Vec<usize> = (0..p)
                .filter(|j| j * keep / p < (j + 1) * keep / p)
                .collect();
            assert_eq!(active.len(), keep);
            let v: Vec<f64> = active.iter().map(|&j| 0.5 + 0.1 * j as f64).collect();
            let sqrt_v: Vec<f64> = v.iter().map(|x| x.sqrt()).collect();
            let n = active.len();
            let m = Mat::from_fn(n, n, |i, k| {
                f64::from(u8::from(i == k)) + sqrt_v[i] * g[(active[i], active[k])] * sqrt_v[k] / s
            });
            let m_inv = m.llt(Side::Lower).unwrap().inverse();
            workspace.factor.poison();
            workspace.inverse.as_mut().fill(f64::NAN);
            workspace.gamma.fill(f64::NAN);
            workspace.mean.fill(f64::NAN);
            let (gamma, mean) = workspace.gamma_and_mean(data, &active, &sqrt_v, s).unwrap();
            for i in 0..n {
                assert!(
                    (gamma[i] - (1.0 - m_inv[(i, i)])).abs() <= 1e-12,
                    "γ_{i} of {n}"
                );
                let expected: f64 = (0..n)
                    .map(|k| sqrt_v[i] * m_inv[(i, k)] * sqrt_v[k] * b[active[k]] / s)
                    .sum();
                assert!(
                    (mean[i] - expected).abs() <= 1e-10 * expected.abs().max(1.0),
                    "μ_{i} of {n}: {} against {expected}",
                    mean[i]
                );
            }
        }
    }

    /// The next of a deterministic sequence uniform on [−0.5, 0.5) (xorshift; `state` ≠ 0).
    fn uniform(state: &mut u64) -> f64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    }

    /// Rows of a smooth curve plus noise, deterministic.
    fn design(rows: usize, p: usize) -> Mat<f64> {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        Mat::from_fn(rows, p, |i, j| {
            (0.1 * (i + 1) as f64 * j as f64 / p as f64).sin() + 0.05 * uniform(&mut state)
        })
    }

    /// The statistics of rows `x` with an intercept column appended (last) and output `y`.
    struct WithIntercept {
        g: Mat<f64>,
        b: Vec<f64>,
        q: f64,
        rows: f64,
    }

    impl WithIntercept {
        fn new(x: &Mat<f64>, y: &[f64]) -> Self {
            let (rows, d) = (x.nrows(), x.ncols());
            let phi = Mat::from_fn(rows, d + 1, |i, j| if j < d { x[(i, j)] } else { 1.0 });
            let b = (0..=d)
                .map(|j| (0..rows).map(|i| phi[(i, j)] * y[i]).sum())
                .collect();
            Self {
                g: phi.transpose() * &phi,
                b,
                q: y.iter().map(|v| v * v).sum(),
                rows: rows as f64,
            }
        }

        fn data(&self) -> OutputData<'_> {
            OutputData {
                g: self.g.as_ref(),
                b: &self.b,
                q: self.q,
                n: self.rows,
                informative: self.rows,
            }
        }
    }

    fn gram(rows: usize, p: usize) -> Mat<f64> {
        let phi = design(rows, p);
        phi.transpose() * &phi
    }

    /// The non-zero eigenvalues of `R̃ᵀ G R̃` and `(Uᵀ R̃ᵀ b)²`, by the definition.
    fn by_definition(shape: &Shape, g: &Mat<f64>, b: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let prior = Prior {
            family: shape.family,
            variance: shape.unit_variance.clone(),
            smooth: shape.smooth,
        };
        let factor = prior.factor().unwrap();
        let weighted = prior.weighted();
        let g_w = Mat::from_fn(weighted.len(), weighted.len(), |i, k| {
            g[(weighted[i], weighted[k])]
        });
        let h = factor.congruence(g_w.as_ref());
        let eig = h.self_adjoint_eigen(Side::Lower).unwrap();
        let b_w: Vec<f64> = weighted.iter().map(|&j| b[j]).collect();
        let rb = factor.t_mul(&b_w);
        let largest = eig
            .S()
            .column_vector()
            .iter()
            .fold(0.0_f64, |a, v| a.max(*v));
        let mut pairs: Vec<(f64, f64)> = (0..h.nrows())
            .filter(|&i| eig.S().column_vector()[i] > 1e-9 * largest)
            .map(|i| {
                let t: f64 = (0..rb.len()).map(|k| eig.U()[(k, i)] * rb[k]).sum();
                (eig.S().column_vector()[i], t * t)
            })
            .collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        pairs.into_iter().unzip()
    }

    #[test]
    fn a_shape_that_can_interpolate_the_rows_keeps_three_residual_degrees_of_freedom() {
        // 12 rows of 40 smooth bands and an intercept: every shape can fit the rows exactly.
        let (rows, bands) = (12, 40);
        let x = design(rows, bands);
        let phi = Mat::from_fn(
            rows,
            bands + 1,
            |i, j| if j < bands { x[(i, j)] } else { 1.0 },
        );
        let g = phi.transpose() * &phi;
        // Targets a smooth curve of coefficients reads off the rows exactly.
        let w = Mat::from_fn(bands + 1, 1, |j, _| (j as f64 / 8.0).sin());
        let y = &phi * &w;
        let b: Vec<f64> = (0..=bands)
            .map(|j| (0..rows).map(|i| phi[(i, j)] * y[(i, 0)]).sum())
            .collect();
        let q: f64 = (0..rows).map(|i| y[(i, 0)] * y[(i, 0)]).sum();
        let shared = SharedScale::prepare(
            super::super::PriorFamily::Smooth,
            bands,
            g.as_ref(),
            rows as f64,
            Some(bands),
        )
        .unwrap();
        let data = OutputData {
            g: g.as_ref(),
            b: &b,
            q,
            n: rows as f64,
            informative: rows as f64,
        };
        let centred = Centred::new(data, Some(bands)).unwrap();
        let noise = NoisePrior {
            rows: 0.0,
            scale: 0.0,
            floor: 1e-300,
        };
        for shape in &shared.shapes {
            let (_, _, s, gamma) = shape.maximise(&centred, noise);
            assert!(
                gamma <= centred.informative - 3.0 + 1e-9,
                "γ {gamma} of {} rows ({:?})",
                centred.informative,
                shape.smooth
            );
            // The Student-t predictive's variance is its own: ν ≥ 3 without a clamp.
            let inflation =
                super::super::model::Predictive::Student.inflation(rows as f64, 1, gamma);
            let nu = rows as f64 - 1.0 - gamma;
            assert!((inflation - nu / (nu - 2.0)).abs() < 1e-9, "ν {nu}");
            assert!(s > 1e-12, "ŝ {s} ({:?})", shape.smooth);
        }
    }

    /// The ridge family prepared on rows `x` (an intercept appended) and output `y`, and the
    /// centred statistics.
    fn ridge_on(x: &Mat<f64>, y: &[f64]) -> (SharedScale, Centred) {
        let statistics = WithIntercept::new(x, y);
        let data = statistics.data();
        let d = x.ncols();
        let shared = SharedScale::prepare(
            super::super::PriorFamily::Ridge,
            0,
            data.g,
            x.nrows() as f64,
            Some(d),
        )
        .unwrap();
        let centred = Centred::new(data, Some(d)).unwrap();
        (shared, centred)
    }

    /// `(v, s)` at a given `α` ([`Shape::at_alpha`], where the leave-one-out check takes a
    /// larger `α` than the evidence's) are the same in any units the inputs share, `v` in their
    /// squares' and `α` with it. With `(λ + α)²` formed, inputs of 10¹⁰⁰ overflowed it (10⁻¹⁰⁰
    /// underflowed it) and `s` fell to the noise floor.
    #[test]
    fn a_given_alpha_reads_alike_in_any_units_the_inputs_share() {
        let (rows, d) = (30, 6);
        let x = design(rows, d);
        let mut state = 7_u64;
        let y: Vec<f64> = (0..rows)
            .map(|i| 1.0 + 2.0 * x[(i, 1)] - x[(i, 4)] + 0.1 * uniform(&mut state))
            .collect();
        let noise = NoisePrior {
            rows: 0.0,
            scale: 0.0,
            floor: 1e-300,
        };
        let at = |unit: f64, alpha: f64| {
            let (shared, centred) = ridge_on(&Mat::from_fn(rows, d, |i, j| x[(i, j)] * unit), &y);
            shared.shapes[0].at_alpha(&centred, noise, alpha)
        };
        let (v0, s0) = at(1.0, 0.3);
        assert!(s0 > 1e-6 && v0 > 0.0, "({v0}, {s0})");
        for unit in [1e-100, 1e-60, 1e60, 1e100, 1e140] {
            let (v, s) = at(unit, 0.3 * unit * unit);
            assert!(
                (s - s0).abs() <= 1e-9 * s0,
                "units of {unit}: s {s} against {s0}"
            );
            let v = v * unit * unit;
            assert!(
                (v - v0).abs() <= 1e-9 * v0,
                "units of {unit}: v {v} against {v0}"
            );
        }
    }

    /// The fixed point [`SharedScale`]'s optimum satisfies for one noise prior and the noise
    /// of `seed`: `s = (RSS + ν₀ s_p) / (N_c − γ + ν₀)` and `v = ‖μ‖² / γ`, as ARD's update
    /// has it with the prior's pseudo-rows (Algorithm 2's at `ν₀ = 0`). `false` when the
    /// optimum is not inside the search's range (a prior noise so large that the evidence
    /// prefers no signal: `α` at the top), where no fixed point holds.
    fn assert_shared_scale_fixed_point(seed: u64, nu0: f64, s_p: f64) -> bool {
        let (rows, d) = (30, 6);
        let x = design(rows, d);
        let mut state = seed | 1;
        let y: Vec<f64> = (0..rows)
            .map(|i| 1.0 + 2.0 * x[(i, 1)] - x[(i, 4)] + 0.1 * uniform(&mut state))
            .collect();
        let (shared, centred) = ridge_on(&x, &y);
        let noise = NoisePrior {
            rows: nu0,
            scale: s_p,
            floor: 1e-300,
        };
        let shape = &shared.shapes[0];
        let (_, v, s, gamma) = shape.maximise(&centred, noise);
        let top = shape
            .eigenvalues
            .iter()
            .fold(0.0_f64, |a, l| a.max(*l))
            .ln()
            + 12.0;
        if (s / v).ln() > top - 1.0 {
            return false;
        }
        // The posterior mean of the centred problem: (G_c + (s/v) I) μ = b_c over the features
        // (the intercept's row and column of G_c are 0).
        let mut a = Mat::from_fn(d, d, |i, j| centred.g[(i, j)]);
        for j in 0..d {
            a[(j, j)] += s / v;
        }
        let b_c = Mat::from_fn(d, 1, |j, _| centred.b[j]);
        let mu = a.as_ref().llt(Side::Lower).unwrap().inverse() * &b_c;
        let fitted: f64 = (0..d).map(|j| mu[(j, 0)] * centred.b[j]).sum();
        let quadratic: f64 = (0..d)
            .map(|i| {
                (0..d)
                    .map(|j| mu[(i, 0)] * centred.g[(i, j)] * mu[(j, 0)])
                    .sum::<f64>()
            })
            .sum();
        let rss = centred.q - 2.0 * fitted + quadratic;
        let norm: f64 = (0..d).map(|j| mu[(j, 0)] * mu[(j, 0)]).sum();
        let expected_s = (rss + nu0 * s_p) / (centred.informative - gamma + nu0);
        assert!(
            (s - expected_s).abs() <= 1e-7 * expected_s,
            "ν₀ {nu0}, s_p {s_p}: ŝ {s} against {expected_s}"
        );
        assert!(
            (v * gamma - norm).abs() <= 1e-6 * norm,
            "ν₀ {nu0}, s_p {s_p}: vγ {} against ‖μ‖² {norm}",
            v * gamma
        );
        true
    }

    #[test]
    fn without_a_noise_prior_a_shared_scale_is_algorithm_2s_fixed_point() {
        assert!(assert_shared_scale_fixed_point(7, 0.0, 0.0));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// With a noise prior, a shared scale's optimum is the joint maximum of the evidence
        /// and the prior on the noise variance, whose fixed point is ARD's update with the
        /// prior's pseudo-rows: from a prior far below the residuals to far above them.
        #[test]
        fn with_a_noise_prior_a_shared_scale_is_algorithm_2s_fixed_point(
            seed in proptest::prelude::any::<u64>(),
            nu0 in 0.5_f64..20.0,
            log_s_p in -12.0_f64..1.0,
        ) {
            proptest::prop_assume!(assert_shared_scale_fixed_point(seed, nu0, log_s_p.exp()));
        }
    }

    #[test]
    fn a_revival_lowers_the_evidence_by_its_gain_and_only_where_it_says_so() {
        // 40 rows of 6 features and an intercept (last); y needs features 0 and 2, plus noise.
        let (rows, d) = (40, 6);
        let x = design(rows, d);
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let y: Vec<f64> = (0..rows)
            .map(|i| 2.0 + x[(i, 0)] - 1.5 * x[(i, 2)] + 0.3 * uniform(&mut state))
            .collect();
        let statistics = WithIntercept::new(&x, &y);
        let data = statistics.data();
        let centred = Centred::new(data, Some(d)).unwrap();
        let s = 0.3 * 0.3 / 12.0;
        let neg2 = |v: &[f64]| {
            let mut v = v.to_vec();
            v[d] = 0.0;
            ard_neg2_log_evidence(centred.data(), &v, s).unwrap().0
        };
        // Feature 2 pruned: its revival pays. Feature 2 kept: the three that y does not use
        // mostly do not.
        let missing = vec![0.8, 0.3, 0.0, 0.0, 0.0, 0.0, f64::INFINITY];
        let complete = vec![0.8, 0.3, 2.0, 0.0, 0.0, 0.0, f64::INFINITY];
        for (v, pruned) in [(&missing, vec![2, 3, 4, 5]), (&complete, vec![3, 4, 5])] {
            let found = revivals(data, v, s).unwrap();
            assert_eq!(found.iter().map(|r| r.index).collect::<Vec<_>>(), pruned);
            let base = neg2(v);
            for r in &found {
                if r.raises_evidence() {
                    // At its best variance the evidence rises by exactly the gain.
                    let mut revived = v.clone();
                    revived[r.index] =
                        (r.quality * r.quality - r.sparsity) / (r.sparsity * r.sparsity);
                    let fall = base - neg2(&revived);
                    assert!(r.gain() > 0.0);
                    assert!(
                        (fall - r.gain()).abs() <= 1e-8 * r.gain().max(1.0),
                        "{r:?}: fall {fall}, gain {}",
                        r.gain()
                    );
                } else {
                    // No variance of its own raises the evidence.
                    assert_eq!(r.gain(), 0.0);
                    for variance in [1e-4, 1e-2, 1.0, 100.0] {
                        let mut revived = v.clone();
                        revived[r.index] = variance;
                        assert!(neg2(&revived) >= base, "{r:?} at {variance}");
                    }
                }
            }
        }
        let worth = |v: &[f64]| {
            revivals(data, v, s)
                .unwrap()
                .iter()
                .filter(|r| r.raises_evidence())
                .map(|r| r.index)
                .collect::<Vec<_>>()
        };
        assert!(worth(&missing).contains(&2));
        // Feature 2's revival pays for its variance; a revival pays exactly when its gain
        // exceeds one scale's least Occam factor.
        let occam = occam_penalty(std::iter::once(1.0), 1);
        for r in revivals(data, &missing, s).unwrap() {
            assert_eq!(r.pays_its_occam_factor(), r.gain() > occam, "{r:?}");
            if r.index == 2 {
                assert!(r.pays_its_occam_factor(), "{r:?}");
            }
        }
        assert!(worth(&complete).len() < 3, "{:?}", worth(&complete));
        // Nothing pruned, nothing to revive.
        assert!(revivals(data, &[0.8; 7], s).unwrap().is_empty());
    }

    /// [`slowest_to_settle`] picks the variance whose MacKay update needs the most iterations,
    /// only where that is more than the iterations left, and one heading for 0 only once the
    /// noise has settled.
    #[test]
    fn only_a_variance_that_would_not_settle_in_time_is_settled() {
        let options = FitOptions::default();
        let step = |new: Vec<f64>, gamma: Vec<f64>| Step {
            v: new,
            gamma,
            rss: 1.0,
            gamma_sum: 0.0,
        };
        // Towards a positive optimum at the rate 1 − γ = 0.99 from r = 0.01: about 920
        // iterations. Towards 0 with r = 0.5 from γ = 1e-3: about 10.
        let old = [1.0, 1.0];
        let crawling = step(vec![0.99, 0.5], vec![0.01, 1e-3]);
        assert_eq!(
            slowest_to_settle(&old, &crawling, 1000, true, &options),
            None
        );
        assert_eq!(
            slowest_to_settle(&old, &crawling, 100, true, &options),
            Some(0)
        );
        assert_eq!(
            slowest_to_settle(&old, &crawling, 5, true, &options),
            Some(0)
        );
        let pruning = step(vec![1.0 - 1e-7, 0.5], vec![0.01, 1e-3]);
        assert_eq!(
            slowest_to_settle(&old, &pruning, 5, true, &options),
            Some(1)
        );
        assert_eq!(slowest_to_settle(&old, &pruning, 5, false, &options), None);
        assert_eq!(slowest_to_settle(&old, &pruning, 20, true, &options), None);
        // Of two that crawl, the slower (the smaller γ).
        let two = step(vec![0.99, 0.99], vec![0.02, 0.01]);
        assert_eq!(slowest_to_settle(&old, &two, 100, true, &options), Some(1));
        // Never one that grows, however slowly.
        let growing = step(vec![1.01, 1.01], vec![0.02, 0.01]);
        assert_eq!(slowest_to_settle(&old, &growing, 100, true, &options), None);
        // Never a pruned, flat or well-determined one.
        let none = step(vec![0.0, 0.0, 0.99], vec![0.0, 0.0, 0.999]);
        let with_flat = [1.0, f64::INFINITY, 1.0];
        assert_eq!(
            slowest_to_settle(&with_flat, &none, 2, true, &options),
            None
        );
    }

    /// [`coordinate_optimum`], from one MacKay step's `v′_j` and `γ_j`, is Tipping & Faul's best
    /// variance for `j` with the others held: the one [`revivals`] finds for `j`
    /// pruned, and no nearby variance (nor 0, nor the variance it started from) has a higher
    /// evidence.
    #[test]
    fn the_coordinate_optimum_maximises_the_evidence_over_one_variance() {
        let (rows, d) = (40, 6);
        let x = design(rows, d);
        let y: Vec<f64> = (0..rows)
            .map(|i| 2.0 + 20.0 * x[(i, 0)] - 1.5 * x[(i, 2)] + 0.02 * (i % 7) as f64)
            .collect();
        let statistics = WithIntercept::new(&x, &y);
        let data = statistics.data();
        let centred = Centred::new(data, Some(d)).unwrap();
        let s = 0.01;
        let neg2 = |v: &[f64]| ard_neg2_log_evidence(centred.data(), v, s).unwrap().0;
        let v = vec![0.8, 0.3, 2.0, 0.05, 1e-3, 0.2, 0.0];
        let one_step = |v: &[f64]| {
            let mut workspace = ArdWorkspace::new(v.len());
            iterate(centred.data(), v, s, &FitOptions::default(), &mut workspace).unwrap()
        };
        let step = one_step(&v);
        let (mut positive, mut zero) = (0, 0);
        for j in 0..d {
            let best = coordinate_optimum(v[j], step.v[j], step.gamma[j]);
            let with = |vj: f64| {
                let mut w = v.clone();
                w[j] = vj;
                neg2(&w)
            };
            let mut pruned = v.clone();
            pruned[j] = 0.0;
            pruned[d] = f64::INFINITY;
            let revival = revivals(data, &pruned, s).unwrap();
            assert_eq!(revival.len(), 1);
            let at_best = with(best);
            assert!(at_best <= with(v[j]) + 1e-9, "{j}: {best} against {}", v[j]);
            if revival[0].raises_evidence() {
                positive += 1;
                let (q2, sj) = (revival[0].quality.powi(2), revival[0].sparsity);
                let expected = (q2 - sj) / (sj * sj);
                assert!(
                    (best - expected).abs() <= 1e-8 * expected,
                    "{j}: {best} against {expected}"
                );
                for factor in [0.9, 0.99, 1.01, 1.1] {
                    assert!(at_best <= with(best * factor) + 1e-9, "{j} at {factor}");
                }
                assert!(at_best < with(0.0), "{j}");
            } else {
                zero += 1;
                assert_eq!(best, 0.0, "{j}");
                for small in [1e-8, 1e-5, 1e-2] {
                    assert!(at_best <= with(small) + 1e-9, "{j} at {small}");
                }
            }
        }
        // Both branches are exercised: y uses features 0 and 2 only.
        assert!(positive >= 2 && zero >= 1, "{positive} {zero}");
        // S_j and Q_j leave j out, so the optimum is the same from any start of v_j, and it is
        // where MacKay's update for j alone settles.
        for j in [0, 2] {
            let from = |vj: f64| {
                let mut w = v.clone();
                w[j] = vj;
                let step = one_step(&w);
                (step.v[j], coordinate_optimum(vj, step.v[j], step.gamma[j]))
            };
            let (_, best) = from(v[j]);
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-8 * b;
            assert!(close(from(10.0 * v[j]).1, best), "{j}");
            let mut vj = v[j];
            for _ in 0..200 {
                vj = from(vj).0;
            }
            assert!(close(vj, best), "{j}: MacKay {vj}, optimum {best}");
        }
    }

    #[test]
    fn the_residual_cap_keeps_three_degrees_of_freedom_where_the_rows_allow() {
        assert_eq!(residual_cap(20.0), 17.0);
        assert_eq!(residual_cap(4.0), 1.0);
        // Too few rows for three: one weight determined at most, as before.
        assert_eq!(residual_cap(3.0), 1.0);
        assert_eq!(residual_cap(2.0), 1.0);
        // Below one residual row the cap is below 1, which leaves the search free.
        assert!(residual_cap(1.5) < 1.0);
    }

    #[test]
    fn shapes_from_the_data_factor_match_their_definition() {
        // Wide (rows < p, as a spectrum's first batch) and tall.
        for (rows, p) in [(12, 40), (60, 25)] {
            let g = gram(rows, p);
            let b: Vec<f64> = (0..p).map(|j| g[(j, 3)] - 0.5 * g[(j, 7)]).collect();
            let z = data_factor(g.as_ref()).unwrap();
            assert!(z.nrows() <= rows.min(p), "{} rows of Z", z.nrows());
            // The bands at 1 (the smooth shapes' first p − 2), then a named feature at 3.5, one
            // pruned.
            let mut unit = vec![1.0; p];
            unit[p - 2] = 3.5;
            unit[p - 1] = 0.0;
            let mut shapes = vec![Shape::new(
                FittedFamily::Ridge,
                None,
                unit.clone(),
                z.as_ref(),
            )];
            for length in [0.5, 4.0, 32.0] {
                shapes.push(Shape::new(
                    FittedFamily::Smooth,
                    Some(Smooth {
                        bands: p - 2,
                        length,
                    }),
                    unit.clone(),
                    z.as_ref(),
                ));
            }
            for shape in shapes {
                let shape = shape.unwrap();
                let (lambda, t2) = by_definition(&shape, &g, &b);
                let largest = lambda.last().copied().unwrap_or(0.0);
                let mut ours: Vec<(f64, f64)> = (0..shape.eigenvalues.len())
                    .map(|i| {
                        let t: f64 = (0..p).map(|j| shape.projection[(i, j)] * b[j]).sum();
                        (shape.eigenvalues[i], t * t)
                    })
                    .filter(|(l, _)| *l > 1e-9 * largest)
                    .collect();
                ours.sort_by(|a, b| a.0.total_cmp(&b.0));
                assert_eq!(ours.len(), lambda.len(), "{rows}×{p} {:?}", shape.smooth);
                let t2_scale = t2.iter().fold(0.0_f64, |a, v| a.max(*v));
                for (i, (l, t)) in ours.iter().enumerate() {
                    assert!(
                        (l - lambda[i]).abs() <= 1e-8 * largest,
                        "λ {l} vs {}",
                        lambda[i]
                    );
                    assert!((t - t2[i]).abs() <= 1e-6 * t2_scale, "t² {t} vs {}", t2[i]);
                }
            }
        }
    }
}
