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
//! costs what one member's does: `Σ̄`'s factor is formed once per model version ([`average`]).
//! The alternates enter it through their shapes' eigenbases ([`AlternateShapes`]), formed once
//! for all the model's outputs at the data's rank, not as posteriors of their own: [`members`]
//! forms those, the same members by the textbook route, for whoever wants them one by one.

use std::borrow::Cow;

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::{Accum, Mat, MatMut, MatRef, Par};
use rayon::prelude::*;

use super::EstimatorError;
use super::evidence::{
    Alternate, Centred, FittedShapes, OutputData, Shape, centred_gram, data_factor,
    neg2_log_evidence as neg2_from_parts, project, sum_ln_1p,
};
use super::model::{ModelState, OutputState, Predictive};
use super::posterior::{OutputPosterior, cholesky_lower};
use super::prior::{FittedFamily, Prior, Smooth, matern32};
use super::statistics::mirror_lower;

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
        let neg2: Vec<f64> = members.iter().map(|m| m.0).collect();
        weights(&neg2)
            .into_iter()
            .zip(members)
            .map(|(w, (_, member))| (w, member))
            .collect()
    }))
}

/// Normalised weights `e^(−(x_j − min x)/2) / Σ` of members with `x_j = −2 log p(y | θ_j)`.
fn weights(neg2: &[f64]) -> Vec<f64> {
    let best = neg2.iter().copied().fold(f64::INFINITY, f64::min);
    let unnormalised: Vec<f64> = neg2.iter().map(|x| (-0.5 * (x - best)).exp()).collect();
    let total: f64 = unnormalised.iter().sum();
    unnormalised.into_iter().map(|w| w / total).collect()
}

/// An alternate prior as a shape's unit covariance and its scale: `v` the variance of its first
/// weighted basis function (a smooth prior's first band, whose unit variance is 1), `C = V/v`.
/// `None` for a prior that weights nothing (a scale of 0).
fn unit_and_scale(prior: &Prior) -> Option<(Vec<f64>, f64)> {
    let scale = prior
        .variance
        .iter()
        .copied()
        .find(|v| *v > 0.0 && v.is_finite())?;
    let unit = prior
        .variance
        .iter()
        .map(|v| if v.is_finite() { v / scale } else { *v })
        .collect();
    Some((unit, scale))
}

/// Two outputs' alternates at one candidate shape have unit variances equal up to the rounding
/// of `(v·u)/v`; a shape is shared where they agree to this relative tolerance.
const SAME_SHAPE: f64 = 1e-12;

/// Whether `prior`, of unit variances `unit`, is the shape of `family`, `smooth` and `known`.
fn is_shape(
    family: FittedFamily,
    smooth: Option<Smooth>,
    known: &[f64],
    prior: &Prior,
    unit: &[f64],
) -> bool {
    family == prior.family && smooth == prior.smooth && same_unit(known, unit)
}

/// Whether two unit variances are one shape's ([`SAME_SHAPE`]).
fn same_unit(known: &[f64], unit: &[f64]) -> bool {
    known.len() == unit.len()
        && known
            .iter()
            .zip(unit)
            .all(|(a, b)| a == b || (a - b).abs() <= SAME_SHAPE * a.abs().max(b.abs()))
}

/// The prior shapes of a model's alternates (and of the own posteriors that join the average
/// by their shape, `own_shape`) on its current statistics, each formed once for every output
/// that averages over it ([`Shape`]: the non-zero eigenvalues `λ` of
/// `R̃ᵀ G_c R̃` and `P = R̃ U`, at the data's rank, from one factor `G_c = ZᵀZ`). The outputs of a
/// model choose their alternates among the same candidates, so m outputs with n alternates each
/// need at most the candidates' count of eigendecompositions, where posteriors of their own
/// would be m·n factorisations of order p.
pub struct AlternateShapes {
    flat: Option<usize>,
    shapes: Vec<Shape>,
    /// How many shapes this formed (or tried to) rather than took from a fit's [`FittedShapes`].
    formed: usize,
}

impl AlternateShapes {
    /// The shapes of `state`'s alternates, and of the outputs' own posteriors that are members
    /// of their shape (`own_shape`) where the shape costs no more than the dense route it
    /// replaces; none, and no factorisation, without alternates.
    pub fn new(state: &ModelState) -> Result<Self, EstimatorError> {
        Self::with_fitted(state, FittedShapes::none())
    }

    /// [`Self::new`], taking the shapes `fitted` holds where it was formed on `state`'s
    /// statistics (the fit that made `state` formed them) from exactly the inputs `new` would
    /// form them from, and forming only the rest: the same shapes, bit for bit.
    pub fn with_fitted(
        state: &ModelState,
        mut fitted: FittedShapes,
    ) -> Result<Self, EstimatorError> {
        let mut flat = None;
        let mut wanted: Vec<(FittedFamily, Option<Smooth>, Vec<f64>)> = Vec::new();
        let mut own = Vec::new();
        for k in 0..state.outputs().len() {
            for alternate in state.alternates(k) {
                let Some((unit, _)) = unit_and_scale(&alternate.prior) else {
                    continue;
                };
                if wanted.is_empty() {
                    flat = alternate.prior.flat();
                }
                if alternate.prior.flat() == flat {
                    add_shape(&mut wanted, &alternate.prior, unit);
                }
            }
            if let Some(primary) = own_shape(state, k) {
                own.push(primary);
            }
        }
        if wanted.is_empty() {
            return Ok(Self {
                flat,
                shapes: Vec::new(),
                formed: 0,
            });
        }
        // The fit's shapes serve only where they are of these statistics and this centring.
        let fitted_rank = fitted.rank_of(state.totals(), flat);
        let centred_factor = || -> Result<Mat<f64>, EstimatorError> {
            let g = state.totals().g();
            let g_c = match flat {
                Some(f) => centred_gram(g, f)?,
                None => g.to_owned(),
            };
            data_factor(g_c.as_ref())
        };
        let mut z = None;
        let rank = match fitted_rank {
            Some(rank) => rank,
            None => z.insert(centred_factor()?).nrows(),
        };
        // A shape no alternate needs costs an eigenproblem of the data's rank `r` and products of
        // `r² p`: no more than the own posterior's dense route (about `2 p³`) while `r ≤ p/2`.
        let extra_pays = 2 * rank <= state.basis().dim();
        let mut extra = Vec::new();
        for primary in own.into_iter().filter(|_| extra_pays) {
            let Some((unit, _)) = unit_and_scale(primary.prior()) else {
                continue;
            };
            let known = wanted.iter().any(|(family, smooth, known)| {
                is_shape(*family, *smooth, known, primary.prior(), &unit)
            });
            if primary.prior().flat() == flat && !known {
                add_shape(&mut extra, primary.prior(), unit);
            }
        }
        let needed = wanted.len();
        wanted.extend(extra);
        // Each shape is the fit's where it kept it; the data's factor only for the rest.
        let jobs: Vec<_> = wanted
            .into_iter()
            .map(|(family, smooth, unit)| {
                let kept = fitted_rank.and_then(|_| fitted.take(family, smooth, &unit));
                (kept, (family, smooth, unit))
            })
            .collect();
        drop(fitted);
        let formed = jobs.iter().filter(|(kept, _)| kept.is_none()).count();
        if formed > 0 && z.is_none() {
            z = Some(centred_factor()?);
        }
        let shapes: Vec<Result<Shape, EstimatorError>> = jobs
            .into_par_iter()
            .map(|(kept, (family, smooth, unit))| match (kept, &z) {
                (Some(shape), _) => Ok(shape),
                (None, Some(z)) => Shape::new(family, smooth, unit, z.as_ref()),
                (None, None) => Err(EstimatorError::Dimension {
                    what: "data factors for the prior shapes",
                    expected: 1,
                    found: 0,
                }),
            })
            .collect();
        let mut kept = Vec::with_capacity(shapes.len());
        for (i, shape) in shapes.into_iter().enumerate() {
            match shape {
                Ok(shape) => kept.push(shape),
                Err(why) if i < needed => return Err(why),
                // An own posterior's shape only saves work: one that does not form leaves its
                // output on the dense route.
                Err(_) => {}
            }
        }
        Ok(Self {
            flat,
            shapes: kept,
            formed,
        })
    }

    /// How many shapes this formed (or tried to) rather than took from a fit's
    /// [`FittedShapes`].
    pub fn formed(&self) -> usize {
        self.formed
    }

    fn find(&self, prior: &Prior, unit: &[f64]) -> Result<&Shape, EstimatorError> {
        self.shapes
            .iter()
            .find(|shape| {
                prior.flat() == self.flat
                    && is_shape(
                        shape.family(),
                        shape.smooth(),
                        shape.unit_variance(),
                        prior,
                        unit,
                    )
            })
            .ok_or(EstimatorError::Dimension {
                what: "prior shapes matching an alternate",
                expected: 1,
                found: 0,
            })
    }
}

/// Adds `prior`'s shape (unit variances `unit`) to `wanted` unless it is there.
fn add_shape(
    wanted: &mut Vec<(FittedFamily, Option<Smooth>, Vec<f64>)>,
    prior: &Prior,
    unit: Vec<f64>,
) {
    let known = wanted
        .iter()
        .any(|(family, smooth, known)| is_shape(*family, *smooth, known, prior, &unit));
    if !known {
        wanted.push((prior.family, prior.smooth, unit));
    }
}

/// Output `k`'s own posterior where it is the member its prior shape makes, so that it can join
/// the average in the shape's eigenbasis like the alternates instead of by a dense factor of its
/// own (it does where [`AlternateShapes`] holds that shape): an output with alternates, a
/// shared-scale prior (ridge or smooth), and the posterior of the model's statistics under that
/// prior and its noise variance ([`is_of_the_statistics`]: a fit's or a refit's).
fn own_shape(state: &ModelState, k: usize) -> Option<&OutputPosterior> {
    let primary = state.outputs().get(k)?.posterior()?;
    (!state.alternates(k).is_empty()
        && primary.prior().family != FittedFamily::Ard
        && is_of_the_statistics(primary, state.totals().output(k)))
    .then_some(primary)
}

/// Whether `posterior` is the posterior of the statistics `data` under its own prior and noise
/// variance, `A = G_JJ / s` and `c = b_J / s` exactly as [`OutputPosterior::from_statistics`]
/// forms them. A one-step update adds each batch at the `s` of its time and then moves `s`, so
/// its posterior is in general not (one that left `s` where it was and matches to the last bit
/// is that posterior; one that matches to round-off only takes the dense route, which is never
/// wrong).
fn is_of_the_statistics(posterior: &OutputPosterior, data: OutputData<'_>) -> bool {
    let support = posterior.active();
    let inv_s = 1.0 / posterior.noise_variance();
    let a = posterior.precision_data();
    posterior
        .natural_mean()
        .iter()
        .zip(support)
        .all(|(c, &j)| *c == data.b[j] * inv_s)
        && support.iter().enumerate().all(|(col, &c)| {
            let (from, g) = (a.col(col), data.g.col(c));
            support
                .iter()
                .enumerate()
                .all(|(row, &r)| from[row] == g[r] * inv_s)
        })
}

/// An alternate as a model-average member: its posterior under `w_W ~ N(0, v C)` and noise
/// variance `s` in its shape's eigenbasis. With `α = s/v`, `τ = Pᵀ b_c`, `u_i = λ_i/(λ_i + α)`
/// and `t_i = 1 − u_i`,
///
/// ```text
/// μ_W = P diag(1/(λ + α)) τ,           μ_f = (b_f − g_fᵀ μ_W) / g_ff
/// log|M| = Σ log(1 + λ_i/α),           γ = Σ u_i,       E = q_c − Σ τ_i²/(λ_i + α)
/// Σ_W = v C − P diag(v u) Pᵀ
/// ```
///
/// (the prior's covariance less what the data determine; `C − P Pᵀ` the prior in the directions
/// the rows never moved). The part of the predictive variance the weights carry,
/// `Σ̃_W = κ Σ_W` for [`Predictive::Plugin`] and [`Predictive::Student`], and for
/// [`Predictive::StudentNoise`] `κ ΣA_cΣ + ΣA₀Σ` (only the noise-driven part inflated), is
/// `c C − P diag(d) Pᵀ` with
///
/// ```text
/// Plugin, Student:   c = κ v,   d_i = κ v u_i
/// StudentNoise:      c = v,     d_i = v u_i (1 + t_i − κ t_i)
/// ```
///
/// (in the eigenbasis `ΣA_cΣ` is `v u_i t_i` and `ΣA₀Σ` is `v t_i²`).
struct ShapeMember<'a> {
    neg2: f64,
    mean: Vec<f64>,
    kappa: f64,
    noise_variance: f64,
    shape: Option<&'a Shape>,
    c: f64,
    d: Vec<f64>,
}

impl<'a> ShapeMember<'a> {
    fn new(
        alternate: &Alternate,
        shapes: &'a AlternateShapes,
        data: OutputData<'_>,
        centred: &Centred,
        predictive: Predictive,
    ) -> Result<Self, EstimatorError> {
        let p = data.g.nrows();
        let s = alternate.noise_variance;
        let flat = alternate.prior.flat();
        let (shape, scale) = match unit_and_scale(&alternate.prior) {
            Some((unit, scale)) => (Some(shapes.find(&alternate.prior, &unit)?), scale),
            None => (None, 0.0),
        };
        let alpha = s / scale;
        let (lambda, projection) = match shape {
            Some(shape) => (shape.eigenvalues(), shape.projection()),
            None => (&[][..], MatRef::from_column_major_slice(&[], 0, p)),
        };
        let tau = project(projection, &centred.b);
        let coefficient: Vec<f64> = lambda
            .iter()
            .zip(&tau)
            .map(|(l, t)| t / (l + alpha))
            .collect();
        let fitted: f64 = tau.iter().zip(&coefficient).map(|(t, c)| t * c).sum();
        let log_det = sum_ln_1p(lambda.iter().map(|l| l / alpha));
        let determined: Vec<f64> = lambda.iter().map(|l| l / (l + alpha)).collect();
        let gamma: f64 = determined.iter().sum();
        // `Σ_i P_ij c_i` for each `j`, summed over `i` in order, a column of `P` at a time: `P` is
        // stored by columns, and a 700-band row strides across all of it.
        let mut mean = vec![0.0; p];
        for (j, m) in mean.iter_mut().enumerate() {
            for (x, c) in projection.col(j).iter().zip(&coefficient) {
                *m += x * c;
            }
        }
        if let Some(f) = flat {
            let explained: f64 = (0..p)
                .filter(|&j| j != f)
                .map(|j| data.g[(f, j)] * mean[j])
                .sum();
            mean[f] = (data.b[f] - explained) / data.g[(f, f)];
        }
        let misfit = (centred.q - fitted).max(0.0);
        let neg2 = neg2_from_parts(centred.informative, s, log_det, misfit);
        let kappa = predictive.inflation(data.informative, usize::from(flat.is_some()), gamma);
        let (c, d) = match predictive {
            Predictive::Plugin | Predictive::Student => (
                kappa * scale,
                determined.iter().map(|u| kappa * scale * u).collect(),
            ),
            Predictive::StudentNoise => (
                scale,
                lambda
                    .iter()
                    .zip(&determined)
                    .map(|(l, u)| {
                        let t = alpha / (l + alpha);
                        scale * u * (1.0 + t - kappa * t)
                    })
                    .collect(),
            ),
        };
        if !(neg2.is_finite() && mean.iter().all(|m| m.is_finite())) {
            return Err(EstimatorError::NonFinite(
                "a model-average member's posterior",
            ));
        }
        Ok(Self {
            neg2,
            mean,
            kappa,
            noise_variance: s,
            shape,
            c,
            d,
        })
    }
}

/// What a prediction needs of an averaged output: `μ̄` (length p), `Σ_j w_j κ_j s_j`, the basis
/// functions `U` where `Σ̄` lives (every member's weighted ones and flat intercept) and a lower
/// triangular factor `T` of `Σ̄_UU` (`TᵀT = Σ̄_UU`).
#[derive(Clone, Debug)]
pub struct Averaged {
    pub mean: Vec<f64>,
    pub noise_variance: f64,
    pub support: Vec<usize>,
    pub factor: Mat<f64>,
}

/// Output `k`'s model average (see the module's doc), its alternates taken from `shapes`
/// (formed for `state`); `None` for an output without alternates.
pub fn average(
    state: &ModelState,
    k: usize,
    shapes: &AlternateShapes,
) -> Option<Result<Averaged, EstimatorError>> {
    let alternates = state.alternates(k);
    let OutputState::Trained(primary) = state.outputs().get(k)? else {
        return None;
    };
    if alternates.is_empty() {
        return None;
    }
    Some(average_of(state, k, primary, alternates, shapes))
}

/// The average of `primary` and `alternates` on output `k`'s statistics.
///
/// Over `U` a member's variance is `κ_j s_j + ψ_jᵀ Σ̃_j ψ_j + κ_j φ_f² s_j/g_ff` with
/// `ψ_j = φ_W − φ_f m̄_j` (`m̄_j` the flat intercept's centre; `g_f/g_ff` for an alternate, whose
/// precision is `G/s`), and `(φᵀd_j)²` adds the spread of the means, so
///
/// ```text
/// Σ̄_UU = w_0 S_0ᵀS_0 + Eᵀ (Σ_{j≥1} w_j Σ̃_j) E + e_f e_fᵀ Σ_j w_j κ_j s_j/g_ff + Σ_j w_j d_j d_jᵀ
/// ```
///
/// with `S_0 = [T_0, −T_0 m̄_0]` the output's own posterior's factor rows (its precision moved
/// with the one-step updates, so it keeps its own factor, [`Predictive`]; [`own_by_factor`])
/// and `E` the map `φ_U ↦ ψ`. The alternates' part is `Σ_j w_j (c_j C_j − P_j diag(d_j) P_jᵀ)`
/// ([`ShapeMember`]): a product of order `|U|² × rank` each, where a posterior of its own would
/// be several of order `p³`. An own posterior that is its shape's member ([`own_shape`]: a
/// fit's, whose precision is `G/s` plus its prior's), where `shapes` holds that shape, joins
/// that part as member 0 (the sum then runs from `j = 0`) instead of `w_0 S_0ᵀS_0`: the same
/// covariance in its eigenbasis. `T` is [`gram_factor`]'s.
fn average_of(
    state: &ModelState,
    k: usize,
    primary: &OutputPosterior,
    alternates: &[Alternate],
    shapes: &AlternateShapes,
) -> Result<Averaged, EstimatorError> {
    let p = state.basis().dim();
    let data = state.totals().output(k);
    let flat = primary.prior().flat();
    let centred = Centred::new(data, flat)?;
    let predictive = state.predictive();
    let others = alternates
        .iter()
        .map(|alternate| ShapeMember::new(alternate, shapes, data, &centred, predictive))
        .collect::<Result<Vec<_>, _>>()?;
    let neg2: Vec<f64> = std::iter::once(centred_neg2_log_evidence(primary, &centred)?)
        .chain(others.iter().map(|m| m.neg2))
        .collect();
    let weights = weights(&neg2);
    let means = std::iter::once(primary.mean()).chain(others.iter().map(|m| &m.mean[..]));
    let mut mean = vec![0.0; p];
    for (w, member) in weights.iter().zip(means.clone()) {
        for (m, x) in mean.iter_mut().zip(member) {
            *m += w * x;
        }
    }
    let mut support: Vec<usize> = primary
        .weighted()
        .iter()
        .copied()
        .chain(flat)
        .chain(others.iter().flat_map(|m| {
            m.shape.into_iter().flat_map(|shape| {
                let unit = shape.unit_variance();
                (0..p).filter(move |&j| unit[j] > 0.0 && unit[j].is_finite())
            })
        }))
        .collect();
    support.sort_unstable();
    support.dedup();
    let n = support.len();
    let column = |j: usize| support.binary_search(&j).unwrap_or(usize::MAX);
    let flat_column = flat.map(column);
    let mut gram = Mat::zeros(n, n);

    // The output's own posterior: in its shape's eigenbasis where it is that shape's member
    // (a fit's), else by its own factor.
    let w0 = weights[0];
    let own = own_shape(state, k)
        .filter(|own| {
            unit_and_scale(own.prior())
                .is_none_or(|(unit, _)| shapes.find(own.prior(), &unit).is_ok())
        })
        .and_then(|own| {
            let own = Alternate {
                prior: own.prior().clone(),
                noise_variance: own.noise_variance(),
            };
            // A member that does not form (not finite) leaves the dense route, as before.
            ShapeMember::new(&own, shapes, data, &centred, predictive).ok()
        });
    let (mut noise_variance, mut flat_variance) = match &own {
        Some(_) => (0.0, 0.0),
        None => own_by_factor(primary, predictive, data, w0, gram.as_mut(), &column),
    };

    // The shaped members, `Σ_j w_j (c_j C_j − P_j diag(d_j) P_jᵀ)` over U (lower triangle).
    let shaped: Vec<(f64, &ShapeMember)> = own
        .iter()
        .map(|member| (w0, member))
        .chain(weights[1..].iter().copied().zip(&others))
        .collect();
    let mut others_part = Mat::zeros(n, n);
    for &(w, member) in &shaped {
        noise_variance += w * member.kappa * member.noise_variance;
        if let Some(f) = flat {
            flat_variance += w * member.kappa * member.noise_variance / data.g[(f, f)];
        }
        let Some(shape) = member.shape else {
            continue;
        };
        let unit = shape.unit_variance();
        let bands = shape.smooth().map_or(0, |s| s.bands);
        if let Some(smooth) = shape.smooth() {
            let by_distance: Vec<f64> = (0..bands)
                .map(|d| w * member.c * matern32(d as f64, smooth.length))
                .collect();
            let columns: Vec<usize> = (0..bands).map(column).collect();
            if columns.iter().enumerate().all(|(a, &c)| a == c) {
                // The bands lead U, as they lead the basis: each column's part below the
                // diagonal is a slice, added to as the loop below adds to it.
                for b in 0..bands {
                    let to = &mut others_part.col_as_slice_mut(b)[b..bands];
                    for (t, v) in to.iter_mut().zip(&by_distance) {
                        *t += v;
                    }
                }
            } else {
                for (b, &cb) in columns.iter().enumerate() {
                    let mut to = others_part.col_mut(cb);
                    for (a, &ca) in columns.iter().enumerate().skip(b) {
                        to[ca] += by_distance[a - b];
                    }
                }
            }
        }
        for (j, u) in unit.iter().enumerate().skip(bands) {
            if *u > 0.0 && u.is_finite() {
                let cj = column(j);
                others_part[(cj, cj)] += w * member.c * u;
            }
        }
    }
    // `Σ_j P_j diag(w_j d_j) P_jᵀ` as one product of the members' projections side by side.
    // Held transposed (one row per projection), so that both are filled a column at a time.
    let members: Vec<(&Shape, Vec<f64>)> = shaped
        .iter()
        .filter_map(|&(w, member)| {
            let scales = member.d.iter().map(|d| w * d).collect();
            member.shape.map(|shape| (shape, scales))
        })
        .collect();
    let total: usize = members.iter().map(|(_, scales)| scales.len()).sum();
    let mut projections = Mat::zeros(total, n);
    let mut scaled = Mat::zeros(total, n);
    for (r, &j) in support.iter().enumerate() {
        let (mut to, mut to_scaled) = (projections.col_mut(r), scaled.col_mut(r));
        let mut at = 0;
        for (shape, scales) in &members {
            let from = shape.projection().col(j);
            for (i, scale) in scales.iter().enumerate() {
                to[at + i] = from[i];
                to_scaled[at + i] = scale * from[i];
            }
            at += scales.len();
        }
    }
    triangular::matmul(
        others_part.as_mut(),
        BlockStructure::TriangularLower,
        Accum::Add,
        scaled.transpose(),
        BlockStructure::Rectangular,
        projections.as_ref(),
        BlockStructure::Rectangular,
        -1.0,
        Par::rayon(0),
    );
    mirror_lower(others_part.as_mut());
    for c in 0..n {
        let (mut to, from) = (gram.col_mut(c), others_part.col(c));
        for r in c..n {
            to[r] += from[r];
        }
    }
    if let (Some(f), Some(fc)) = (flat, flat_column) {
        // `Eᵀ X E` for the alternates' common centre `m̄ = g_f/g_ff` (0 at `f`, where their part
        // is 0).
        let centre: Vec<f64> = support
            .iter()
            .map(|&j| {
                if j == f {
                    0.0
                } else {
                    data.g[(f, j)] / data.g[(f, f)]
                }
            })
            .collect();
        // `others_part` is symmetric: row r is column r.
        let y: Vec<f64> = (0..n)
            .map(|r| {
                let row = others_part.col(r);
                centre.iter().enumerate().map(|(c, m)| row[c] * m).sum()
            })
            .collect();
        for (r, y_r) in y.iter().enumerate() {
            if r > fc {
                gram[(r, fc)] -= y_r;
            } else if r < fc {
                gram[(fc, r)] -= y_r;
            }
        }
        let quadratic: f64 = centre.iter().zip(&y).map(|(m, y)| m * y).sum();
        gram[(fc, fc)] += quadratic + flat_variance;
    }

    // The spread of the members' means: rows `√w_j (μ_j − μ̄)`.
    let means: Vec<&[f64]> = means.collect();
    let spread = Mat::from_fn(means.len(), n, |i, c| {
        weights[i].sqrt() * (means[i][support[c]] - mean[support[c]])
    });
    triangular::matmul(
        gram.as_mut(),
        BlockStructure::TriangularLower,
        Accum::Add,
        spread.transpose(),
        BlockStructure::Rectangular,
        spread.as_ref(),
        BlockStructure::Rectangular,
        1.0,
        Par::Seq,
    );
    mirror_lower(gram.as_mut());
    let factor = gram_factor(&gram).ok_or(EstimatorError::NotPositiveDefinite)?;
    Ok(Averaged {
        mean,
        noise_variance,
        support,
        factor,
    })
}

/// The own posterior's part of `Σ̄_UU` by its factor, `w_0 S_0ᵀS_0` with `S_0 = [T_0, −T_0 m̄_0]`
/// (see [`average_of`]), written into `gram`'s lower triangle over `U` (`column` maps a basis
/// function to its place there); its `(w_0 κ_0 s_0, w_0 κ_0 / A_ff)`, the noise's and the flat
/// intercept's variance.
fn own_by_factor(
    primary: &OutputPosterior,
    predictive: Predictive,
    data: OutputData<'_>,
    w0: f64,
    gram: MatMut<'_, f64>,
    column: &dyn Fn(usize) -> usize,
) -> (f64, f64) {
    let n = gram.nrows();
    let l_inv = primary.cholesky_inverse();
    let gamma = primary.effective_parameters_with(&l_inv);
    let flat = primary.flat();
    let kappa0 = predictive.inflation(data.informative, usize::from(flat.is_some()), gamma);
    let factor0 = match predictive {
        Predictive::Plugin | Predictive::Student => {
            let f = primary.covariance_factor();
            let scale = kappa0.sqrt();
            Mat::from_fn(f.nrows(), f.ncols(), |i, c| scale * f[(i, c)])
        }
        Predictive::StudentNoise => primary.noise_inflated_factor_with(kappa0, &l_inv),
    };
    let root = w0.sqrt();
    let mut rows0 = Mat::zeros(factor0.nrows(), n);
    // Column by column: the matrices are column-major.
    for (c, j) in primary.weighted().iter().enumerate() {
        rows0.col_mut(column(*j)).copy_from(factor0.col(c) * root);
    }
    if let Some(f) = flat {
        let mut shift = rows0.col_mut(column(f.index));
        for (c, m) in f.centre.iter().enumerate() {
            shift += factor0.col(c) * (-root * m);
        }
    }
    triangular::matmul(
        gram,
        BlockStructure::TriangularLower,
        Accum::Replace,
        rows0.transpose(),
        BlockStructure::Rectangular,
        rows0.as_ref(),
        BlockStructure::Rectangular,
        1.0,
        Par::rayon(0),
    );
    (
        w0 * kappa0 * primary.noise_variance(),
        flat.map_or(0.0, |f| w0 * kappa0 * f.variance),
    )
}

/// A lower triangular `T` (n × n) with `TᵀT = Γ` for a symmetric `Γ`, from the Cholesky
/// factorisation with rows and columns reversed: `J Γ J = L Lᵀ` gives `T = J Lᵀ J`. Where `Γ` is
/// positive semi-definite only, or indefinite by its round-off (the alternates' part is a
/// difference: the prior less what the data determine), the factorisation is of `Γ + δI` with
/// `δ = n ε max_i Γ_ii`, which widens a variance by as much and never narrows it. `None` where
/// even that fails (a column no member moves).
fn gram_factor(gram: &Mat<f64>) -> Option<Mat<f64>> {
    let n = gram.nrows();
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
        averaged_state_of(seed, 30)
    }

    /// [`averaged_state`] on `n` rows.
    fn averaged_state_of(seed: u64, n: usize) -> ModelState {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (x, y) = rows(&mut rng, n);
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

    /// `state` (of one output) with output 0's alternates replaced by `alternates`.
    fn with_alternates(state: &ModelState, alternates: Vec<Alternate>) -> ModelState {
        ModelState::from_parts(
            *state.basis(),
            state.totals().clone(),
            state.outputs().to_vec(),
            state.predictive(),
            state.fitted_rows().to_vec(),
            vec![alternates],
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
        let t = gram_factor(&(s.transpose() * &s)).unwrap();
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
        let t = gram_factor(&(equal.transpose() * &equal)).unwrap();
        let (want, got) = (equal.transpose() * &equal, t.transpose() * &t);
        let largest = (0..9).map(|i| want[(i, i)]).fold(0.0_f64, f64::max);
        for i in 0..9 {
            assert!(got[(i, i)] >= want[(i, i)] - 1e-12 * largest);
            for j in 0..9 {
                assert!((want[(i, j)] - got[(i, j)]).abs() <= 1e-12 * largest);
            }
        }
        // A column no row moves: not positive definite.
        let deficient = Mat::from_fn(40, 9, |i, j| if j == 4 { 0.0 } else { s[(i, j)] });
        assert!(gram_factor(&(deficient.transpose() * &deficient)).is_none());
    }

    #[test]
    fn outputs_share_the_shapes_of_their_alternates() {
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        let (x, y) = rows(&mut rng, 30);
        let noise = Mat::from_fn(30, 3, |_, _| rng.random::<f64>() - 0.5);
        let y = Mat::from_fn(30, 3, |i, k| {
            y[(i, 0)] * (1.0 + 0.5 * k as f64) + 0.1 * noise[(i, k)]
        });
        let config = ModelConfig {
            prior: PriorFamily::Smooth,
            ..ModelConfig::new(basis(), 3)
        };
        let state = ModelState::fit(&config, statistics(&x, &y)).unwrap();
        let shapes = AlternateShapes::new(&state).unwrap();
        let alternates: usize = (0..3).map(|k| state.alternates(k).len()).sum();
        assert!(
            shapes.shapes.len() < alternates,
            "{} shapes for {alternates} alternates",
            shapes.shapes.len()
        );
        for k in 0..3 {
            for alternate in state.alternates(k) {
                let (unit, _) = unit_and_scale(&alternate.prior).unwrap();
                assert!(shapes.find(&alternate.prior, &unit).is_ok());
            }
        }
    }

    #[test]
    fn one_member_averages_to_itself() {
        let state = averaged_state(5);
        let posterior = state.outputs()[0].posterior().unwrap();
        let x = probe(6);
        let expected = Predictor::new(&alone(&state, posterior))
            .predict(x.as_ref())
            .unwrap();
        let shapes = AlternateShapes::new(&state).unwrap();
        let averaged = average_of(&state, 0, posterior, &[], &shapes).unwrap();
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

    /// Output 0 of `state` predicts `x` by the mixture of its members, each formed as a
    /// posterior of its own ([`members`]) and predicted alone.
    fn assert_the_mixture(state: &ModelState, x: &Mat<f64>) {
        let members = members(state, 0).unwrap().unwrap();
        assert_eq!(members.len(), 1 + state.alternates(0).len());
        let total: f64 = members.iter().map(|m| m.0).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert!(members.iter().all(|m| m.0 > 0.0));
        let got = Predictor::new(state).predict(x.as_ref()).unwrap();
        let each: Vec<_> = members
            .iter()
            .map(|(_, member)| {
                Predictor::new(&alone(state, member))
                    .predict(x.as_ref())
                    .unwrap()
            })
            .collect();
        let noise: f64 = members
            .iter()
            .map(|(w, member)| {
                let one = Predictor::new(&alone(state, member));
                w * one.noise_variance(0).unwrap()
            })
            .sum();
        // The predictor forms the alternates in their shapes' eigenbases, the members here by
        // Cholesky factorisations: the two routes agree to the conditioning of the long length
        // scales' kernels.
        let averaged_noise = Predictor::new(state).noise_variance(0).unwrap();
        assert!(
            (averaged_noise - noise).abs() <= 1e-7 * noise,
            "{averaged_noise} vs {noise}"
        );
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
            assert!(v >= noise * (1.0 - 1e-7), "{v} below the noise {noise}");
        }
    }

    /// An output whose average cannot form predicts by its own posterior alone, bit for bit,
    /// and the predictor says which output and why.
    #[test]
    fn an_average_that_cannot_form_is_reported_and_the_posterior_answers_alone() {
        let state = averaged_state(5);
        assert!(Predictor::new(&state).unaveraged().is_empty());
        // An alternate that shrinks the intercept its companions leave flat has no shape among
        // theirs.
        let mut alternates = state.alternates(0).to_vec();
        let mut stray = alternates[0].clone();
        let flat = stray.prior.flat().unwrap();
        stray.prior.variance[flat] = 1.0;
        alternates.push(stray);
        let broken = with_alternates(&state, alternates);
        let predictor = Predictor::new(&broken);
        assert_eq!(predictor.unaveraged().len(), 1);
        assert_eq!(predictor.unaveraged()[0].0, 0);
        let primary = state.outputs()[0].posterior().unwrap();
        let x = probe(7);
        let got = predictor.predict(x.as_ref()).unwrap();
        let own = Predictor::new(&alone(&state, primary))
            .predict(x.as_ref())
            .unwrap();
        let averaged = Predictor::new(&state).predict(x.as_ref()).unwrap();
        for i in 0..x.nrows() {
            assert_eq!(got.mean[(i, 0)], own.mean[(i, 0)]);
            assert_eq!(got.variance[(i, 0)], own.variance[(i, 0)]);
        }
        assert!((0..x.nrows()).any(|i| averaged.variance[(i, 0)] != own.variance[(i, 0)]));
    }

    #[test]
    fn the_average_has_the_mixtures_mean_and_variance() {
        for seed in [5, 8, 13] {
            assert_the_mixture(&averaged_state(seed), &probe(seed + 100));
        }
    }

    /// A fit's own posterior is its shape's member and, on rows of half the basis's order or
    /// fewer (where the shape no alternate needs pays for itself), joins the average in the
    /// shape's eigenbasis; a one-step update's, whose `s` moved, keeps its own factor. Every
    /// route averages to the mixture of the members formed as posteriors.
    #[test]
    fn a_fits_posterior_joins_by_its_shape_and_a_one_steps_by_its_factor() {
        for seed in [5, 8] {
            let state = averaged_state_of(seed, 16);
            assert!(own_shape(&state, 0).is_some());
            let shapes = AlternateShapes::new(&state).unwrap();
            let primary = state.outputs()[0].posterior().unwrap();
            let (unit, _) = unit_and_scale(primary.prior()).unwrap();
            assert!(shapes.find(primary.prior(), &unit).is_ok());
            assert_the_mixture(&state, &probe(seed + 100));

            // On 30 rows of 41 basis functions its shape, which no alternate shares, would cost
            // more than its factor.
            let denser = averaged_state(seed);
            assert!(own_shape(&denser, 0).is_some());
            let dense_primary = denser.outputs()[0].posterior().unwrap();
            let (unit, _) = unit_and_scale(dense_primary.prior()).unwrap();
            let shapes = AlternateShapes::new(&denser).unwrap();
            assert!(shapes.find(dense_primary.prior(), &unit).is_err());

            // Three rows on 16: fewer than a quarter more, one step.
            let (x, y) = rows(&mut ChaCha8Rng::seed_from_u64(seed + 50), 3);
            let config = ModelConfig {
                prior: PriorFamily::Smooth,
                ..ModelConfig::new(basis(), 1)
            };
            let stepped = state.update(&config, &statistics(&x, &y)).unwrap();
            let moved = stepped.outputs()[0].posterior().unwrap();
            assert_ne!(moved.noise_variance(), primary.noise_variance());
            assert!(!stepped.alternates(0).is_empty());
            assert!(own_shape(&stepped, 0).is_none());
            assert_the_mixture(&stepped, &probe(seed + 200));
        }
    }

    /// `state`'s predictor given `fitted` predicts `x` to the bit as one that formed its own.
    fn assert_predicts_as_one_that_formed_its_shapes(
        state: &ModelState,
        fitted: FittedShapes,
        x: &Mat<f64>,
    ) {
        let got = Predictor::with_fitted_shapes(state, fitted)
            .predict(x.as_ref())
            .unwrap();
        let expected = Predictor::new(state).predict(x.as_ref()).unwrap();
        assert_eq!(got.mean, expected.mean);
        assert_eq!(got.variance, expected.variance);
    }

    fn smooth_config() -> ModelConfig {
        ModelConfig {
            prior: PriorFamily::Smooth,
            ..ModelConfig::new(basis(), 1)
        }
    }

    /// A fit's shapes serve its state's predictor: none is formed again, and the predictions are
    /// those of a predictor that formed its own, to the last bit. On 30 rows of 41 basis
    /// functions the own posterior's shape, which no alternate shares, is not taken: a predictor
    /// that formed its own would not have formed it (it would cost more than the factor).
    #[test]
    fn a_predictor_takes_its_fits_shapes_and_answers_as_one_that_formed_them() {
        for (seed, n) in [(5, 16), (8, 16), (5, 30)] {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let (x, y) = rows(&mut rng, n);
            let fit = || ModelState::fit_with_shapes(&smooth_config(), statistics(&x, &y)).unwrap();
            let (state, fitted) = fit();
            assert!(!state.alternates(0).is_empty());
            assert!(fitted.len() > state.alternates(0).len());
            let afresh = AlternateShapes::new(&state).unwrap();
            assert_eq!(afresh.formed(), afresh.shapes.len());
            let taken = AlternateShapes::with_fitted(&state, fitted).unwrap();
            assert_eq!(taken.formed(), 0);
            assert_eq!(taken.shapes.len(), afresh.shapes.len());
            let primary = state.outputs()[0].posterior().unwrap();
            let (unit, _) = unit_and_scale(primary.prior()).unwrap();
            assert_eq!(taken.find(primary.prior(), &unit).is_ok(), n == 16);
            assert_eq!(afresh.find(primary.prior(), &unit).is_ok(), n == 16);

            assert_predicts_as_one_that_formed_its_shapes(&state, fit().1, &probe(seed + 300));
        }
    }

    /// Named features beside the spectrum: their unit variances, recovered from an alternate's
    /// prior by a division, may differ from the fit's in the last bit, and a shape is taken only
    /// for the very inputs a predictor of its own would form it from.
    #[test]
    fn a_predictor_with_named_features_beside_the_spectrum_answers_as_one_that_formed_its_shapes() {
        let mut rng = ChaCha8Rng::seed_from_u64(31);
        let (bands, y) = rows(&mut rng, 16);
        let named = 3;
        let x = Mat::from_fn(16, BANDS + named, |i, j| {
            if j < BANDS {
                bands[(i, j)]
            } else {
                0.37 * (i * j) as f64 % 1.9 + rng.random::<f64>()
            }
        });
        let basis = Basis::spectral(
            BANDS,
            ReflectanceScale::Fraction,
            BANDS + named,
            true,
            Transform::Identity,
        );
        let config = ModelConfig {
            prior: PriorFamily::Smooth,
            ..ModelConfig::new(basis, 1)
        };
        let stats = || {
            let phi = basis.design(x.as_ref()).unwrap();
            BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
        };
        let (state, fitted) = ModelState::fit_with_shapes(&config, stats()).unwrap();
        assert!(!state.alternates(0).is_empty());
        let afresh = AlternateShapes::new(&state).unwrap();
        let taken = AlternateShapes::with_fitted(&state, fitted).unwrap();
        assert!(taken.formed() <= afresh.formed());
        let x_new = Mat::from_fn(5, BANDS + named, |i, j| x[(i + 3, j)] * 1.01);
        let (_, fitted) = ModelState::fit_with_shapes(&config, stats()).unwrap();
        assert_predicts_as_one_that_formed_its_shapes(&state, fitted, &x_new);
    }

    /// A kept shape is taken for its own family, length scale and unit variances to the bit,
    /// and then no more.
    #[test]
    fn a_kept_shape_is_taken_only_for_its_very_unit_variances() {
        let mut rng = ChaCha8Rng::seed_from_u64(41);
        let (x, y) = rows(&mut rng, 16);
        let (_, mut fitted) =
            ModelState::fit_with_shapes(&smooth_config(), statistics(&x, &y)).unwrap();
        let (family, smooth, unit) = {
            let shape = &fitted.shapes[1];
            (
                shape.family(),
                shape.smooth(),
                shape.unit_variance().to_vec(),
            )
        };
        let mut off = unit.clone();
        off[0] = off[0].next_up();
        assert!(fitted.take(family, smooth, &off).is_none());
        let other = smooth.map(|s| Smooth {
            length: s.length * 1.1,
            ..s
        });
        assert!(fitted.take(family, other, &unit).is_none());
        let kept = fitted.len();
        assert!(fitted.take(family, smooth, &unit).is_some());
        assert_eq!(fitted.len(), kept - 1);
        assert!(fitted.take(family, smooth, &unit).is_none());
    }

    /// Shapes formed on other statistics are never taken: the predictor forms its own.
    #[test]
    fn a_predictor_forms_its_own_shapes_where_the_fits_are_of_other_statistics() {
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        let (x, y) = rows(&mut rng, 16);
        let (_, other) = ModelState::fit_with_shapes(&smooth_config(), statistics(&x, &y)).unwrap();
        let state = averaged_state_of(22, 16);
        let afresh = AlternateShapes::new(&state).unwrap();
        assert!(afresh.formed() > 0);
        let given = AlternateShapes::with_fitted(&state, other).unwrap();
        assert_eq!(given.formed(), afresh.formed());
        let (_, other) = ModelState::fit_with_shapes(&smooth_config(), statistics(&x, &y)).unwrap();
        assert_predicts_as_one_that_formed_its_shapes(&state, other, &probe(23));
    }

    /// An update hands on the shapes of its refits' evidence, none where every output took one
    /// step; a refit its own.
    #[test]
    fn updates_and_refits_hand_on_the_shapes_their_evidence_formed() {
        let config = smooth_config();
        let state = averaged_state_of(5, 16);
        // Three rows on 16: fewer than a quarter more, one step.
        let (x, y) = rows(&mut ChaCha8Rng::seed_from_u64(6), 3);
        let update = |stats: BatchStatistics| {
            state
                .update_with_shapes(&config, &stats, &state.surprise(&stats))
                .unwrap()
        };
        let (stepped, shapes) = update(statistics(&x, &y));
        assert!(shapes.is_empty());
        assert!(own_shape(&stepped, 0).is_none());

        // Sixteen more rows, past a quarter: the output is fitted again.
        let (x, y) = rows(&mut ChaCha8Rng::seed_from_u64(7), 16);
        let (refitted, shapes) = update(statistics(&x, &y));
        assert!(own_shape(&refitted, 0).is_some());
        assert!(!shapes.is_empty());
        assert_eq!(
            AlternateShapes::with_fitted(&refitted, shapes)
                .unwrap()
                .formed(),
            0
        );
        let x_new = probe(8);
        let (_, shapes) = update(statistics(&x, &y));
        assert_predicts_as_one_that_formed_its_shapes(&refitted, shapes, &x_new);

        let (again, shapes) = refitted.refit_with_shapes(&config).unwrap();
        assert_eq!(
            AlternateShapes::with_fitted(&again, shapes)
                .unwrap()
                .formed(),
            0
        );
        let (_, shapes) = refitted.refit_with_shapes(&config).unwrap();
        assert_predicts_as_one_that_formed_its_shapes(&again, shapes, &x_new);
    }

    /// An alternate whose scale is 0 weights nothing but the flat intercept: it joins the
    /// mixture with no shape of its own. On an output the spectra do not explain, so that its
    /// evidence is near the fitted shape's.
    #[test]
    fn an_alternate_that_weights_nothing_joins_the_average() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (x, _) = rows(&mut rng, 30);
        let y = Mat::from_fn(30, 1, |_, _| 1.0 + rng.random::<f64>());
        let config = ModelConfig {
            prior: PriorFamily::Smooth,
            ..ModelConfig::new(basis(), 1)
        };
        let state = ModelState::fit(&config, statistics(&x, &y)).unwrap();
        let posterior = state.outputs()[0].posterior().unwrap();
        let flat = posterior.prior().flat().unwrap();
        let prior = Prior::diagonal(
            posterior.prior().family,
            (0..basis().dim())
                .map(|j| if j == flat { f64::INFINITY } else { 0.0 })
                .collect(),
        );
        let centred = Centred::new(state.totals().output(0), Some(flat)).unwrap();
        let mut alternates = state.alternates(0).to_vec();
        alternates.push(Alternate {
            prior,
            noise_variance: centred.q / centred.informative,
        });
        let with = with_alternates(&state, alternates);
        let weights = members(&with, 0).unwrap().unwrap();
        let last = weights.last().unwrap().0;
        assert!(last > 0.01, "the shapeless member's weight {last}");
        assert_the_mixture(&with, &probe(105));
    }
}
