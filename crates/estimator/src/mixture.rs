//! Bayesian model averaging over an output's prior shapes.
//!
//! A shared-scale fit ([`super::evidence::SharedScale`]) keeps the most probable prior shape as
//! the output's posterior, and the shapes whose evidence comes close to it as alternates
//! ([`super::evidence::Alternate`]): under the smooth prior the evidence over the length scale
//! is seldom so sharp that one scale holds all of it, and intervals from the best one alone
//! leave out how much the rest disagree. Each member `j` (the posterior, then the alternates)
//! has hyperparameters `θ_j` held fixed between fits, and
//!
//! ```text
//! w_j ∝ p(y | θ_j),   −2 log p(y | θ_j) = N_c log s_j + log|M_j| + (q_c − b_cᵀμ_j)/s_j
//! ```
//!
//! on the model's statistics of every row so far ([`neg2_log_evidence`], the evidence of
//! [`super::evidence`] at `θ_j`; with `θ_j` fixed it is the evidence of the first batch times
//! the predictive density of each later one, so the weights follow the rows as they arrive).
//! An alternate's posterior is that of the statistics under `θ_j`, which the one-step updates
//! would reach with `s_j` held, so an alternate needs no state of its own. The output's own
//! posterior is the one its one-step updates made (its `s` moved with them; its evidence is
//! taken at the current `s`, with the same formula).
//!
//! The predictive distribution is the mixture `Σ_j w_j N(φᵀμ_j, V_j(φ))`, `V_j` member `j`'s
//! predictive variance (noise inflation included, [`super::model::Predictive`]); its mean and
//! variance are those of one Gaussian over the weights,
//!
//! ```text
//! μ̄ = Σ_j w_j μ_j,    variance = Σ_j w_j κ_j s_j + φᵀ Σ̄ φ,
//! Σ̄ = Σ_j w_j (Σ̃_j + d_j d_jᵀ),    d_j = μ_j − μ̄
//! ```
//!
//! (`Σ̃_j` member `j`'s weights' part of `V_j`, the flat intercept's included), so a prediction
//! costs what one member's does: `Σ̄`'s factor is formed once per model version, from the
//! members' stacked factors scaled by `√w_j` ([`average`]).

use std::borrow::Cow;

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par};

use super::EstimatorError;
use super::evidence::{Centred, OutputData, neg2_log_evidence as neg2_from_parts};
use super::model::{ModelState, OutputState, Predictive};
use super::posterior::{OutputPosterior, cholesky_lower, lower_trapezoidal};

/// `−2 log p(y | θ)` of `posterior`'s hyperparameters on the statistics `data`, up to the
/// constant every prior of the output shares ([`super::evidence::neg2_log_evidence`]): with
/// `M = L Lᵀ` the posterior's, `log|M| = 2 Σ log L_ii`, and the misfit from its mean over the
/// weighted set. Exact for a posterior of `data` under its own `s`; for one whose `s` moved
/// with the one-step updates, the same formula at the current `s`.
pub fn neg2_log_evidence(
    posterior: &OutputPosterior,
    data: OutputData<'_>,
) -> Result<f64, EstimatorError> {
    centred_neg2_log_evidence(posterior, &Centred::new(data, posterior.prior().flat())?)
}

/// [`neg2_log_evidence`] on statistics already centred by the posterior's flat intercept.
fn centred_neg2_log_evidence(
    posterior: &OutputPosterior,
    centred: &Centred,
) -> Result<f64, EstimatorError> {
    let chol = posterior.cholesky();
    let log_det: f64 = (0..chol.nrows()).map(|i| 2.0 * chol[(i, i)].ln()).sum();
    let mean = posterior.mean();
    let fitted: f64 = posterior
        .weighted()
        .iter()
        .map(|&j| centred.b[j] * mean[j])
        .sum();
    let misfit = (centred.q - fitted).max(0.0);
    let value = neg2_from_parts(
        centred.informative,
        posterior.noise_variance(),
        log_det,
        misfit,
    );
    if value.is_finite() {
        Ok(value)
    } else {
        Err(EstimatorError::NonFinite(
            "evidence of a model-average member",
        ))
    }
}

/// A member of a model average: its weight and its posterior.
pub type Member<'a> = (f64, Cow<'a, OutputPosterior>);

/// The members of output `k`'s model average and their weights (summing to 1), its own
/// posterior first; `None` for an output without alternates.
pub fn members(state: &ModelState, k: usize) -> Option<Result<Vec<Member<'_>>, EstimatorError>> {
    let alternates = state.alternates(k);
    let OutputState::Trained(primary) = state.outputs().get(k)? else {
        return None;
    };
    if alternates.is_empty() {
        return None;
    }
    let data = state.totals().output(k);
    // Every member shares the output's flat intercept, so its centred statistics once (a
    // member with another, which no fit makes, centres its own).
    let flat = primary.prior().flat();
    let centred = match Centred::new(data, flat) {
        Ok(centred) => centred,
        Err(e) => return Some(Err(e)),
    };
    let neg2_log_evidence_shared = |member: &OutputPosterior| {
        if member.prior().flat() == flat {
            centred_neg2_log_evidence(member, &centred)
        } else {
            neg2_log_evidence(member, data)
        }
    };
    let members = std::iter::once(Ok(Cow::Borrowed(primary.as_ref())))
        .chain(alternates.iter().map(|alternate| {
            OutputPosterior::from_statistics(
                alternate.prior.clone(),
                alternate.noise_variance,
                data.g,
                data.b,
            )
            .map(Cow::Owned)
        }))
        .map(|member| {
            let member = member?;
            Ok((neg2_log_evidence_shared(&member)?, member))
        })
        .collect::<Result<Vec<_>, EstimatorError>>();
    Some(members.map(|members| {
        let best = members.iter().map(|m| m.0).fold(f64::INFINITY, f64::min);
        let unnormalised: Vec<f64> = members
            .iter()
            .map(|m| (-0.5 * (m.0 - best)).exp())
            .collect();
        let total: f64 = unnormalised.iter().sum();
        unnormalised
            .into_iter()
            .zip(members)
            .map(|(w, (_, member))| (w / total, member))
            .collect()
    }))
}

/// What a prediction needs of an averaged output: `μ̄` (length p), `Σ_j w_j κ_j s_j`, the basis
/// functions `U` where `Σ̄` lives (every member's weighted ones and flat intercept) and a lower
/// trapezoidal factor `T` of `Σ̄_UU` (`TᵀT = Σ̄_UU`).
#[derive(Clone, Debug)]
pub struct Averaged {
    pub mean: Vec<f64>,
    pub noise_variance: f64,
    pub support: Vec<usize>,
    pub factor: Mat<f64>,
}

/// Averages `members` (weights summing to 1) of output `k` of `state` (see the module's doc).
///
/// Member `j`'s variance is `κ_j s_j + ‖T_j(φ_W − φ_f m̄_j)‖² + κ_j φ_f²/A_ff` (its factor `T_j`
/// as the predictor forms it: [`Predictive`]); over `U` that is `κ_j s_j + ‖S_j φ_U‖²` with the
/// rows `S_j = [T_j, −T_j m̄_j]` and `[0, √(κ_j/A_ff)]`, and `(φᵀd_j)²` is one more row (`T_j`
/// any factor of member `j`'s, not reduced on its own). The rows of every member, scaled by
/// `√w_j`, are stacked as `S` and reduced to `T` ([`gram_factor`]; by QR where that fails).
pub fn average(state: &ModelState, k: usize, members: &[Member<'_>]) -> Averaged {
    let p = state.basis().dim();
    let informative = state.totals().output(k).informative;
    let mut mean = vec![0.0; p];
    for (w, member) in members {
        for (m, x) in mean.iter_mut().zip(member.mean()) {
            *m += w * x;
        }
    }
    let mut support: Vec<usize> = members
        .iter()
        .flat_map(|(_, member)| {
            let flat = member.flat().map(|f| f.index);
            member.weighted().iter().copied().chain(flat)
        })
        .collect();
    support.sort_unstable();
    support.dedup();
    let column = |j: usize| support.binary_search(&j).unwrap_or(usize::MAX);
    let mut noise_variance = 0.0;
    let mut factors = Vec::with_capacity(members.len());
    for (w, member) in members {
        let flat = member.flat();
        let l_inv = member.cholesky_inverse();
        let gamma = member.effective_parameters_with(&l_inv);
        let kappa = state
            .predictive()
            .inflation(informative, usize::from(flat.is_some()), gamma);
        noise_variance += w * kappa * member.noise_variance();
        let factor = match state.predictive() {
            Predictive::Plugin | Predictive::Student => {
                let f = member.covariance_factor();
                let scale = kappa.sqrt();
                Mat::from_fn(f.nrows(), f.ncols(), |i, c| scale * f[(i, c)])
            }
            Predictive::StudentNoise => member.noise_inflated_factor_with(kappa, &l_inv),
        };
        factors.push((kappa, factor));
    }
    let rows: usize = members
        .iter()
        .zip(&factors)
        .map(|((_, member), (_, f))| f.nrows() + usize::from(member.flat().is_some()) + 1)
        .sum();
    let mut stacked = Mat::zeros(rows, support.len());
    let mut at = 0;
    for ((w, member), (kappa, factor)) in members.iter().zip(&factors) {
        let root = w.sqrt();
        let weighted = member.weighted();
        let columns: Vec<usize> = weighted.iter().map(|&j| column(j)).collect();
        for i in 0..factor.nrows() {
            for (c, &to) in columns.iter().enumerate() {
                stacked[(at, to)] = root * factor[(i, c)];
            }
            if let Some(flat) = member.flat() {
                let shift: f64 = (0..weighted.len())
                    .map(|c| factor[(i, c)] * flat.centre[c])
                    .sum();
                stacked[(at, column(flat.index))] = -root * shift;
            }
            at += 1;
        }
        if let Some(flat) = member.flat() {
            stacked[(at, column(flat.index))] = root * (kappa * flat.variance).sqrt();
            at += 1;
        }
        for (c, &j) in support.iter().enumerate() {
            stacked[(at, c)] = root * (member.mean()[j] - mean[j]);
        }
        at += 1;
    }
    let factor = gram_factor(stacked.as_ref()).unwrap_or_else(|| lower_trapezoidal(stacked));
    Averaged {
        mean,
        noise_variance,
        support,
        factor,
    }
}

/// A lower triangular `T` (n × n) with `TᵀT = SᵀS` for `S` (m × n), from the Cholesky
/// factorisation of the Gram matrix with rows and columns reversed: `J SᵀS J = L Lᵀ` gives
/// `T = J Lᵀ J`. One blocked matrix product and one factorisation of order `n`, where the QR of
/// `S` reflects each column over all `m` rows (the members' stacked factors: `m` several times
/// `n`). Backward stable for `SᵀS`, which is all a quadratic form `‖T x‖² = xᵀSᵀSx` needs.
/// Where `SᵀS` is positive semi-definite only (smooth members whose kernel roots have dropped
/// their negligible directions), the factorisation is of `SᵀS + δI` with `δ = n ε max_i (SᵀS)_ii`,
/// the round-off the product itself carries, which widens a variance by as much and never
/// narrows it. `None` where even that fails (a column no member moves), for the QR to answer.
fn gram_factor(s: MatRef<'_, f64>) -> Option<Mat<f64>> {
    let n = s.ncols();
    let mut gram = Mat::zeros(n, n);
    matmul(
        gram.as_mut(),
        Accum::Replace,
        s.transpose(),
        s,
        1.0,
        Par::rayon(0),
    );
    let reversed = |jitter: f64| {
        Mat::from_fn(n, n, |i, j| {
            gram[(n - 1 - i, n - 1 - j)] + if i == j { jitter } else { 0.0 }
        })
    };
    let largest = (0..n).map(|i| gram[(i, i)]).fold(0.0_f64, f64::max);
    let jitter = n as f64 * f64::EPSILON * largest;
    let l = cholesky_lower(reversed(0.0))
        .or_else(|_| {
            if (0..n).any(|i| gram[(i, i)] <= 0.0) {
                return Err(EstimatorError::NotPositiveDefinite);
            }
            cholesky_lower(reversed(jitter))
        })
        .ok()?;
    Some(Mat::from_fn(n, n, |i, j| {
        if j <= i {
            l[(n - 1 - j, n - 1 - i)]
        } else {
            0.0
        }
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use faer::Mat;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::evidence::{ALTERNATE_LOG_RATIO, SharedScale};
    use crate::{
        Basis, BatchStatistics, FitOptions, ModelConfig, NoisePrior, Predictor, PriorFamily,
        ReflectanceScale, Transform,
    };

    const BANDS: usize = 40;

    /// Rows of smooth spectra (a bump and independent noise per band) and an output that is a
    /// smooth curve's product with them plus noise.
    fn rows(rng: &mut ChaCha8Rng, n: usize) -> (Mat<f64>, Mat<f64>) {
        let mut x = Mat::zeros(n, BANDS);
        for i in 0..n {
            let (centre, width) = (rng.random_range(0.0..40.0), rng.random_range(4.0..12.0));
            for j in 0..BANDS {
                let t = j as f64 - centre;
                x[(i, j)] = (-t * t / (2.0 * width * width)).exp() + 0.2 * rng.random::<f64>();
            }
        }
        let y = Mat::from_fn(n, 1, |i, _| {
            let signal: f64 = (0..BANDS).map(|j| x[(i, j)] * (j as f64 / 7.0).sin()).sum();
            1.0 + signal + 0.3 * (rng.random::<f64>() - 0.5)
        });
        (x, y)
    }

    fn basis() -> Basis {
        Basis::spectral(
            BANDS,
            ReflectanceScale::Fraction,
            BANDS,
            true,
            Transform::Identity,
        )
    }

    fn statistics(x: &Mat<f64>, y: &Mat<f64>) -> BatchStatistics {
        let phi = basis().design(x.as_ref()).unwrap();
        BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
    }

    /// A state fitted under the smooth prior on 30 rows, whose output keeps alternates.
    pub(crate) fn averaged_state(seed: u64) -> ModelState {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (x, y) = rows(&mut rng, 30);
        let config = ModelConfig {
            prior: PriorFamily::Smooth,
            ..ModelConfig::new(basis(), 1)
        };
        let state = ModelState::fit(&config, statistics(&x, &y)).unwrap();
        assert!(
            !state.alternates(0).is_empty(),
            "the evidence over the length scale left one shape alone"
        );
        state
    }

    /// `state` with output 0's posterior replaced by `posterior` and no alternates.
    fn alone(state: &ModelState, posterior: &OutputPosterior) -> ModelState {
        ModelState::from_parts(
            *state.basis(),
            state.totals().clone(),
            vec![OutputState::Trained(Box::new(posterior.clone()))],
            state.predictive(),
            state.fitted_rows().to_vec(),
            vec![Vec::new()],
        )
        .unwrap()
    }

    fn probe(seed: u64) -> Mat<f64> {
        rows(&mut ChaCha8Rng::seed_from_u64(seed), 25).0
    }

    #[test]
    fn the_evidence_at_fixed_hyperparameters_is_the_fits_and_ranks_the_alternates() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (x, y) = rows(&mut rng, 30);
        let stats = statistics(&x, &y);
        let flat = Some(BANDS);
        let shared =
            SharedScale::prepare(PriorFamily::Smooth, BANDS, stats.g(), stats.rows(), flat)
                .unwrap();
        let data = stats.output(0);
        let noise = NoisePrior::for_output(&stats, 0, flat, &FitOptions::default());
        let (fit, alternates) = shared.fit(data, noise).unwrap();
        let at_fit = neg2_log_evidence(&fit.posterior, data).unwrap();
        let scale = fit.neg2_log_evidence.abs().max(1.0);
        assert!(
            (at_fit - fit.neg2_log_evidence).abs() < 1e-7 * scale,
            "{at_fit} against the fit's {}",
            fit.neg2_log_evidence
        );
        assert!(!alternates.is_empty());
        let mut previous = at_fit;
        for alternate in &alternates {
            let posterior = OutputPosterior::from_statistics(
                alternate.prior.clone(),
                alternate.noise_variance,
                data.g,
                data.b,
            )
            .unwrap();
            let value = neg2_log_evidence(&posterior, data).unwrap();
            assert!(
                value >= previous - 1e-7 * scale,
                "{value} before {previous}"
            );
            assert!(value <= at_fit + 2.0 * ALTERNATE_LOG_RATIO + 1e-7 * scale);
            previous = value;
        }
    }

    #[test]
    fn the_gram_factor_is_a_lower_triangular_factor_or_none() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let s = Mat::from_fn(40, 9, |_, _| rng.random::<f64>() - 0.5);
        let t = gram_factor(s.as_ref()).unwrap();
        let (want, got) = (s.transpose() * &s, t.transpose() * &t);
        for i in 0..9 {
            for j in 0..9 {
                assert!((want[(i, j)] - got[(i, j)]).abs() < 1e-12 * want[(i, i)].max(1.0));
                if j > i {
                    assert_eq!(t[(i, j)], 0.0);
                }
            }
        }
        // Two equal columns: semi-definite, factored with its round-off on the diagonal.
        let equal = Mat::from_fn(40, 9, |i, j| s[(i, if j == 5 { 4 } else { j })]);
        let t = gram_factor(equal.as_ref()).unwrap();
        let (want, got) = (equal.transpose() * &equal, t.transpose() * &t);
        let largest = (0..9).map(|i| want[(i, i)]).fold(0.0_f64, f64::max);
        for i in 0..9 {
            assert!(got[(i, i)] >= want[(i, i)] - 1e-12 * largest);
            for j in 0..9 {
                assert!((want[(i, j)] - got[(i, j)]).abs() <= 1e-12 * largest);
            }
        }
        // A column no row moves: not positive definite, left to the QR.
        let deficient = Mat::from_fn(40, 9, |i, j| if j == 4 { 0.0 } else { s[(i, j)] });
        assert!(gram_factor(deficient.as_ref()).is_none());
    }

    #[test]
    fn one_member_averages_to_itself() {
        let state = averaged_state(5);
        let posterior = state.outputs()[0].posterior().unwrap();
        let x = probe(6);
        let expected = Predictor::new(&alone(&state, posterior))
            .predict(x.as_ref())
            .unwrap();
        let averaged = average(&state, 0, &[(1.0, Cow::Borrowed(posterior))]);
        let phi = basis().design(x.as_ref()).unwrap();
        for i in 0..x.nrows() {
            let mean: f64 = (0..phi.ncols())
                .map(|j| phi[(i, j)] * averaged.mean[j])
                .sum();
            let quadratic: f64 = (0..averaged.factor.nrows())
                .map(|r| {
                    let t: f64 = averaged
                        .support
                        .iter()
                        .enumerate()
                        .map(|(c, &j)| averaged.factor[(r, c)] * phi[(i, j)])
                        .sum();
                    t * t
                })
                .sum();
            let variance = averaged.noise_variance + quadratic;
            let (m, v) = (expected.mean[(i, 0)], expected.variance[(i, 0)]);
            assert!((mean - m).abs() <= 1e-9 * m.abs().max(1.0), "{mean} vs {m}");
            assert!((variance - v).abs() <= 1e-9 * v, "{variance} vs {v}");
        }
    }

    #[test]
    fn the_average_has_the_mixtures_mean_and_variance() {
        for seed in [5, 8, 13] {
            let state = averaged_state(seed);
            let members = members(&state, 0).unwrap().unwrap();
            assert_eq!(members.len(), 1 + state.alternates(0).len());
            let total: f64 = members.iter().map(|m| m.0).sum();
            assert!((total - 1.0).abs() < 1e-12);
            assert!(members.iter().all(|m| m.0 > 0.0));
            let x = probe(seed + 100);
            let got = Predictor::new(&state).predict(x.as_ref()).unwrap();
            let each: Vec<_> = members
                .iter()
                .map(|(_, member)| {
                    Predictor::new(&alone(&state, member))
                        .predict(x.as_ref())
                        .unwrap()
                })
                .collect();
            let noise: f64 = members
                .iter()
                .map(|(w, member)| {
                    let one = Predictor::new(&alone(&state, member));
                    w * one.noise_variance(0).unwrap()
                })
                .sum();
            let averaged_noise = Predictor::new(&state).noise_variance(0).unwrap();
            assert!((averaged_noise - noise).abs() <= 1e-12 * noise);
            for i in 0..x.nrows() {
                let mean: f64 = members
                    .iter()
                    .zip(&each)
                    .map(|((w, _), one)| w * one.mean[(i, 0)])
                    .sum();
                let second: f64 = members
                    .iter()
                    .zip(&each)
                    .map(|((w, _), one)| w * (one.variance[(i, 0)] + one.mean[(i, 0)].powi(2)))
                    .sum();
                let variance = second - mean * mean;
                let (m, v) = (got.mean[(i, 0)], got.variance[(i, 0)]);
                assert!((mean - m).abs() <= 1e-8 * m.abs().max(1.0), "{mean} vs {m}");
                assert!((variance - v).abs() <= 1e-7 * v, "{variance} vs {v}");
                assert!(v >= noise * (1.0 - 1e-12), "{v} below the noise {noise}");
            }
        }
    }
}
