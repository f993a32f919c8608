//! Recipe matching: the non-negative recipe whose colour best fits a target's, from a forward
//! map learnt with the same estimator.
//!
//! **The forward map.** Kubelka–Munk's single-constant theory makes the dyed fabric's K/S at
//! every wavelength additive in the concentrations:
//! `K/S(λ) = a_λ + Σ_o u_λo x_o + Σ_i k_λi c_i`, where `a_λ + Σ_o u_λo x_o` is the undyed
//! substrate (described by the model's other features `x_o`, e.g. fabric indicators) and `k_λi`
//! the unit K/S of dye `i`. This is the physical direction: one linear regression per band with
//! the concentrations as inputs, whose noise sits in its outputs as the regression assumes.
//! [`ForwardMap`] holds its posterior means, one ARD regression per band.
//!
//! **The match.** For a target reflectance `R_λ` (fraction) and its other features, the recipe
//! is
//!
//! ```text
//! ĉ = argmin_{c ≥ 0} Σ_λ w_λ (t_λ − Σ_i k_λi c_i)²,   t_λ = K/S(R_λ) − a_λ − Σ_o u_λo x_o,
//! w_λ = (dR/d(K/S))² = (2R_λ² / (1 − R_λ²))²,
//! ```
//!
//! (under the Saunderson transform `K/S(R)` reads the body's reflectance `R_i` behind the reading
//! and `w_λ` gains the factor `(dR_m/dR_i)²`, see [`Transform::sensitivity`]),
//! the first-order image in K/S of an equally weighted least-squares fit in reflectance, where a
//! spectrophotometer's noise is about the same at every band (K/S magnifies a reading's noise a
//! hundredfold where a deep shade absorbs most). `R` is capped at 0.95 in the weight (the
//! first-order weight grows without bound towards 1), and a band at or above full scale (an
//! optical brightener's fluorescence, not an absorption) gets `w_λ = 0`. The constraint `c ≥ 0`
//! is solved exactly by Lawson & Hanson's active-set method ([`nnls`]); the dyes it leaves at
//! exactly 0 are the ones the fit does not need (noise can still give small amounts of dyes the
//! target was not dyed with).
//!
//! Measured on simulated dips (`docs/simulate.md`): the constraint is what matters. An
//! unconstrained fit, clamped afterwards, trades small negative amounts of unused dyes against
//! the used ones and misses the dye house's acceptance with a benchtop instrument's noise; the
//! weighting changes the result by less than 0.03 ΔE00 there and is kept as the
//! maximum-likelihood weighting for that noise. An inverse linear map (the concentrations as
//! outputs of K/S, what predict answers) has neither: it weighs every band alike whatever the
//! target, and predicts every dye, also the ones a recipe does not use.
//!
//! **Build-up.** A dye's colour grows more slowly than its concentration at depth (the fibre's
//! dye sites fill), so the map is linear in `h_i(c_i)` rather than in `c_i`, with each dye's
//! curve `h_i` a blend of two neighbouring Langmuir curves `h_s(c) = s·c/(s + c)` on the
//! statistics' ladder of saturations
//! (`∞`, the linear map, and [`crate::statistics::BUILD_UP_SATURATIONS`]), placed by the
//! forward regressions' profile likelihood ([`crate::build_up`], [`crate::forward::choose`]).
//! `h` is increasing, so the match solves the same quadratic in `u = h(c)`, with `c`'s bounds
//! mapped through `h`, and answers `c = h⁻¹(u)`. Models folded before the build-up statistics
//! existed keep the linear map.
//!
//! **Uncertainty.** With `J` the columns `k_λi` of the dyes the match uses (the free set `F`)
//! and `W = diag(w)`, the covariance of `ĉ_F` is `s² (J_FᵀWJ_F)⁻¹` with
//! `s² = Σ_λ w_λ r_λ² / (n − |F|)` the weighted residual variance (reflectance², the
//! instrument's noise plus what the map misses) over the `n` bands that count (`w_λ > 0`). A dye
//! at 0 reports `s² / (JᵀWJ)_ii`: how much of it the fit could take before the residual grows by
//! one `s²`. Where `n ≤ |F|` the fit can reproduce every band that counts, its residual says
//! nothing of the noise, and every variance is `∞` (unknown), never the `0` of an exact fit.
//!
//! **Residual.** A recipe's `residual_rms` is the reflectance residual itself,
//! `√(Σ_λ (R_λ − R̂_λ(ĉ))² / n)` over the `n` bands with `w_λ > 0`, not its first-order image
//! `√(Σ_λ w_λ r_λ² / n)`, which misjudges a poor fit: it overstates one darker than the target
//! (a pale target's, where the weight is large, can read above 1) and understates one paler.

use faer::linalg::triangular_solve::{
    solve_lower_triangular_in_place, solve_upper_triangular_in_place,
};
use faer::{Mat, MatRef, Par};

use super::build_up::{Curve, curves_at};
use super::forward::{choose, forward_statistics_with};
use super::posterior::cholesky_lower;
use super::{
    Basis, EstimatorError, FitOptions, ModelConfig, ModelState, ReflectanceScale, Transform,
};

/// The smallest reflectance the match reads (as the Kubelka–Munk basis clamps it).
const R_MIN: f64 = 1e-3;
/// The largest reflectance whose weight the match uses: `dR/d(K/S)` grows without bound at 1,
/// where the first-order weighting no longer holds. 0.95 is above any dyed or undyed textile
/// without brightener (bleached cotton reads about 0.85–0.90).
const R_WEIGHT_MAX: f64 = 0.95;

/// Settings of the forward map's fit (ARD, one regression per band). Its outputs are K/S values
/// computed from readings that are good to about 10⁻⁴ of full scale, and it has only
/// `dyes + others + 1` basis functions against thousands of rows, so its noise prior is
/// negligible: a noise variance held up by a prior makes ARD shrink the unit K/S curves
/// (`docs/simulate.md`). Every band is fitted, and predictions plug σ² in.
pub fn forward_fit_options() -> FitOptions {
    FitOptions {
        noise_prior_fraction: 1e-6,
        min_informative_rows: 0.0,
        min_zero_inflated_rows: 0.0,
        student: false,
        ..FitOptions::default()
    }
}

impl ModelState {
    /// The forward map of this model (a model with a declared spectrum whose statistics keep
    /// `YᵀY`): Algorithm 2 on [`forward_statistics`](super::forward::forward_statistics) of
    /// everything folded so far, forgetting included. Costs O(s · p_f³) per evidence iteration
    /// whatever the number of rows.
    pub fn forward_map(&self) -> Result<ForwardMap, EstimatorError> {
        let positions = choose(self.totals(), self.basis())?;
        let stats = forward_statistics_with(self.totals(), self.basis(), positions.as_deref())?;
        let m = self.outputs().len();
        let others = self.basis().features - self.basis().spectral;
        let config = ModelConfig {
            options: forward_fit_options(),
            prior: super::PriorFamily::Ard,
            ..ModelConfig::new(
                Basis::new(m + others, true, Transform::Identity),
                stats.outputs(),
            )
        };
        let mut map = ForwardMap::from_state(&ModelState::fit(&config, stats)?, m)?;
        map.scale = self.basis().scale;
        map.transform = self.basis().transform;
        if let (Some(positions), Some(build_up)) = (positions, self.totals().build_up()) {
            map.curves = curves_at(build_up, &positions);
        }
        Ok(map)
    }
}

/// Posterior means of the forward map `K/S(λ) = a_λ + Σ_o u_λo x_o + Σ_i k_λi c_i`.
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardMap {
    dyes: usize,
    others: usize,
    /// `p_f × bands`: rows `0..dyes` are `k_·i`, then `u_·o`, then `a` (the intercept).
    coefficients: Mat<f64>,
    /// The scale of the model's spectral inputs ([`Self::match_inputs`]).
    scale: ReflectanceScale,
    /// The model's transform from a reading to K/S, and back ([`Transform::reflectance`]).
    transform: Transform,
    /// Each dye's build-up curve `h_i` ([`Curve::LINEAR`] for none): the map is linear in
    /// `h_i(c_i)`.
    curves: Vec<Curve>,
}

/// A matched recipe.
#[derive(Clone, Debug, PartialEq)]
pub struct RecipeMatch {
    /// `ĉ ≥ 0`, one per dye.
    pub concentration: Vec<f64>,
    /// Variance of each `ĉ_i` (see the module documentation).
    pub variance: Vec<f64>,
    /// Root mean square of the reflectance residual `R_λ − R̂_λ(ĉ)` (fraction) over the bands
    /// that count (`w_λ > 0`): between 0 and 1.
    pub residual_rms: f64,
}

impl ForwardMap {
    /// The forward map of `state`, a model whose basis is `[c (dyes), x (others), 1]` with the
    /// identity transform and whose outputs are the K/S of the bands.
    pub fn from_state(state: &ModelState, dyes: usize) -> Result<Self, EstimatorError> {
        let basis = state.basis();
        if !basis.intercept || basis.transform != Transform::Identity || basis.features < dyes {
            return Err(EstimatorError::Dimension {
                what: "forward map inputs",
                expected: dyes,
                found: basis.features,
            });
        }
        Ok(Self {
            dyes,
            others: basis.features - dyes,
            coefficients: state.coefficients(),
            scale: ReflectanceScale::Fraction,
            transform: Transform::KubelkaMunk,
            curves: vec![Curve::LINEAR; dyes],
        })
    }

    /// The recipe matching one raw input row of the model (its bands on the model's scale,
    /// then its other features), as predict reads it.
    pub fn match_inputs(&self, x: &[f64]) -> Result<RecipeMatch, EstimatorError> {
        let (r, others) = self.split_inputs(x);
        self.match_recipe(&r, others)
    }

    /// One raw input row of the model read as match reads it: its bands' reflectance as
    /// fractions, and its other features.
    pub fn split_inputs<'x>(&self, x: &'x [f64]) -> (Vec<f64>, &'x [f64]) {
        let bands = self.bands().min(x.len());
        let fraction = self.scale.to_fraction();
        let r = x[..bands].iter().map(|v| v * fraction).collect();
        (r, &x[bands..])
    }

    /// Number of bands.
    pub fn bands(&self) -> usize {
        self.coefficients.ncols()
    }

    /// Number of dyes.
    pub fn dyes(&self) -> usize {
        self.dyes
    }

    /// The K/S the map predicts for recipe `c` with other features `others`, per band.
    pub fn ks(&self, c: &[f64], others: &[f64]) -> Vec<f64> {
        let w = &self.coefficients;
        let u = self.built_up(c);
        (0..self.bands())
            .map(|l| {
                let dyes: f64 = u.iter().enumerate().map(|(i, ui)| ui * w[(i, l)]).sum();
                let subs: f64 = others
                    .iter()
                    .enumerate()
                    .map(|(o, x)| x * w[(self.dyes + o, l)])
                    .sum();
                dyes + subs + w[(self.dyes + self.others, l)]
            })
            .collect()
    }

    /// The reflectance (fraction) the map predicts for recipe `c` with other features `others`,
    /// per band: its K/S, read back through the model's transform ([`Transform::reflectance`]).
    pub fn reflectance(&self, c: &[f64], others: &[f64]) -> Vec<f64> {
        self.ks(c, others)
            .into_iter()
            .map(|ks| self.transform.reflectance(ks))
            .collect()
    }

    /// The transform between a reading and K/S the map was learnt under.
    pub fn transform(&self) -> Transform {
        self.transform
    }

    /// Each dye's build-up curve ([`Curve::is_linear`] for a dye whose colour the map takes as
    /// linear in its concentration): the map's K/S is linear in `h_i(c_i)`.
    pub fn curves(&self) -> &[Curve] {
        &self.curves
    }

    /// `h_i(c_i)` of every dye: what the map is linear in.
    fn built_up(&self, c: &[f64]) -> Vec<f64> {
        c.iter()
            .zip(&self.curves)
            .map(|(c, h)| h.value(*c))
            .collect()
    }

    /// The recipe matching reflectance `r` (fraction, one per band) with other features
    /// `others`: every dye may be used, each at least 0.
    pub fn match_recipe(&self, r: &[f64], others: &[f64]) -> Result<RecipeMatch, EstimatorError> {
        let all: Vec<usize> = (0..self.dyes).collect();
        self.problem(r, others)?.nonnegative(&all)
    }

    /// The weighted least-squares problem of matching reflectance `r` (fraction, one per band)
    /// with other features `others` (module documentation): its normal equations over every dye.
    pub fn problem(&self, r: &[f64], others: &[f64]) -> Result<MatchProblem<'_>, EstimatorError> {
        self.problem_with_offset(r, others, None)
    }

    /// The problem of correcting a dyeing. A dip dyed with recipe `c_d` on fabric `others` and
    /// measured `R_m` came out off the map by `Δ_λ = K/S(R_m(λ)) − K/S(λ; c_d, x)`; assuming that
    /// error persists for recipes near `c_d` (the dye house's conditions, the batch of dye or
    /// fabric, what the map misses there), the recipe for target `r` is the match against the
    /// map shifted by `Δ`: `K/S(λ; c, x) + Δ_λ`. Its reflectance and residual include `Δ`.
    pub fn correction(
        &self,
        r: &[f64],
        others: &[f64],
        dyed: &[f64],
        measured: &[f64],
    ) -> Result<MatchProblem<'_>, EstimatorError> {
        check_len("dyed recipe", self.dyes, dyed.len())?;
        check_len("measured bands", self.bands(), measured.len())?;
        if !dyed
            .iter()
            .chain(measured)
            .chain(others)
            .all(|v| v.is_finite())
        {
            return Err(EstimatorError::NonFinite("correction inputs"));
        }
        let predicted = self.ks(dyed, others);
        // A dip band at or above full scale (a brightener) says nothing of the map's error
        // there: NaN marks it, and the problem gives it no weight.
        let offset: Vec<f64> = measured
            .iter()
            .zip(&predicted)
            .map(|(m, p)| {
                if *m >= 1.0 {
                    f64::NAN
                } else {
                    self.transform.apply(m.clamp(R_MIN, 1.0)) - p
                }
            })
            .collect();
        let mut problem = self.problem_with_offset(r, others, Some(&offset))?;
        problem.dyed = Some(dyed.to_vec());
        Ok(problem)
    }

    /// [`Self::problem`] against the map shifted by `offset` (K/S per band).
    fn problem_with_offset(
        &self,
        r: &[f64],
        others: &[f64],
        offset: Option<&[f64]>,
    ) -> Result<MatchProblem<'_>, EstimatorError> {
        let (bands, m) = (self.bands(), self.dyes);
        check_len("reflectance bands", bands, r.len())?;
        check_len("other features", self.others, others.len())?;
        if !r.iter().chain(others).all(|v| v.is_finite()) {
            return Err(EstimatorError::NonFinite("match inputs"));
        }
        let mut substrate = self.ks(&vec![0.0; m], others);
        let mut unknown = vec![false; bands];
        if let Some(offset) = offset {
            for ((s, o), u) in substrate.iter_mut().zip(offset).zip(&mut unknown) {
                if o.is_finite() {
                    *s += o;
                } else {
                    *u = true;
                }
            }
        }
        let mut t = vec![0.0; bands];
        let mut target = vec![0.0; bands];
        let mut weight = vec![0.0; bands];
        for l in 0..bands {
            let rl = r[l].clamp(R_MIN, 1.0);
            target[l] = rl;
            t[l] = self.transform.apply(rl) - substrate[l];
            // A band at or above full scale (an optical brightener fluoresces) says nothing
            // about absorption: it does not count.
            weight[l] = if r[l] >= 1.0 || unknown[l] {
                0.0
            } else {
                self.transform.sensitivity(rl, R_WEIGHT_MAX).powi(2)
            };
        }
        // Normal equations H = JᵀWJ, g = JᵀWt.
        let w = &self.coefficients;
        let h = Mat::from_fn(m, m, |i, j| {
            (0..bands).map(|l| weight[l] * w[(i, l)] * w[(j, l)]).sum()
        });
        let g: Vec<f64> = (0..m)
            .map(|i| (0..bands).map(|l| weight[l] * w[(i, l)] * t[l]).sum())
            .collect();
        Ok(MatchProblem {
            map: self,
            substrate,
            t,
            target,
            weight,
            h,
            g,
            dyed: None,
        })
    }
}

/// The match of one target as a quadratic in the recipe `c` (module documentation; with
/// build-up curves, in `u = h(c)`, which every method takes and answers as concentrations):
/// `Σ_λ w_λ (t_λ − Σ_i k_λi c_i)² = tᵀWt − 2gᵀc + cᵀHc` with `H = JᵀWJ`, `g = JᵀWt`. Formed
/// once per target, it answers the match over every dye ([`ForwardMap::match_recipe`]) and over
/// any subset of the dyes within bounds ([`Self::within`]); only a recipe's residual reads the
/// bands again (summed band by band, not from the quadratic, whose terms cancel for a close
/// match).
#[derive(Clone, Debug)]
pub struct MatchProblem<'m> {
    map: &'m ForwardMap,
    /// The fabric's own K/S per band (the map at `c = 0`, plus a correction's offset).
    substrate: Vec<f64>,
    /// `t_λ`: the target's K/S less the fabric's.
    t: Vec<f64>,
    /// `R_λ`: the target's reflectance (fraction) as the transform reads it, within
    /// `[R_MIN, 1]`.
    target: Vec<f64>,
    /// `w_λ`.
    weight: Vec<f64>,
    h: Mat<f64>,
    g: Vec<f64>,
    /// A correction's recipe as dyed, at which the shifted map reproduces the dip.
    dyed: Option<Vec<f64>>,
}

/// The most of a dye with a build-up curve a match uses, % owf: its colour only approaches the
/// curve's limit, so a target deeper than the dye can give would otherwise ask for an unbounded
/// amount.
pub const MAX_CONCENTRATION: f64 = 100.0;

/// The largest number of dyes [`MatchProblem::within`] solves a bounded match for: it
/// enumerates the `3^k` ways each dye can sit at a bound or between them.
pub const MAX_BOUNDED_DYES: usize = 4;

/// The bounds of one dye's concentration in a bounded match.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DyeBounds {
    /// At least this much when the dye is used (≥ 0).
    pub min: f64,
    /// At most this much (`∞` for no limit).
    pub max: f64,
}

impl Default for DyeBounds {
    fn default() -> Self {
        Self {
            min: 0.0,
            max: f64::INFINITY,
        }
    }
}

impl MatchProblem<'_> {
    /// The map this problem was formed from.
    pub fn map(&self) -> &ForwardMap {
        self.map
    }

    /// For a correction ([`ForwardMap::correction`]), the recipe that was dyed: the shifted map
    /// reproduces the dip there (but for bands at full scale, which carry no offset, and
    /// readings beyond what the transform inverts).
    pub fn dyed(&self) -> Option<&[f64]> {
        self.dyed.as_deref()
    }

    /// The non-negative match using any of `dyes` (distinct indices), by [`nnls`] on their
    /// rows and columns of `H` and `g`; the other dyes at 0.
    pub fn nonnegative(&self, dyes: &[usize]) -> Result<RecipeMatch, EstimatorError> {
        if let Some(&bad) = dyes.iter().find(|&&i| i >= self.map.dyes) {
            return Err(EstimatorError::Dimension {
                what: "dye index",
                expected: self.map.dyes,
                found: bad,
            });
        }
        let h = Mat::from_fn(dyes.len(), dyes.len(), |a, b| self.h[(dyes[a], dyes[b])]);
        let g: Vec<f64> = dyes.iter().map(|&i| self.g[i]).collect();
        let sub = nnls(h.as_ref(), &g)?;
        if !sub.iter().chain(&g).all(|v| v.is_finite()) {
            return Err(EstimatorError::NonFinite("matched recipe"));
        }
        let mut c = vec![0.0; self.map.dyes];
        for (&i, v) in dyes.iter().zip(sub) {
            c[i] = v;
        }
        let free: Vec<usize> = (0..self.map.dyes).filter(|&i| c[i] > 0.0).collect();
        self.recipe(c, &free)
    }

    /// The match using only `dyes` (distinct indices, at most [`MAX_BOUNDED_DYES`]), each within
    /// its bounds (`bounds[i]` for dye `dyes[i]`, `min ≤ max`):
    ///
    /// ```text
    /// ĉ = argmin { ½cᵀHc − gᵀc : c_j = 0 for j ∉ dyes, min_i ≤ c_i ≤ max_i }
    /// ```
    ///
    /// a strictly convex quadratic over a box when `H` restricted to `dyes` is positive definite,
    /// so its minimum is the one point satisfying the KKT conditions: with `r = g − Hĉ`, every
    /// dye strictly inside its bounds has `r_i = 0`, a dye at its lower bound `r_i ≤ 0`, at its
    /// upper bound `r_i ≥ 0`. This enumerates which dyes sit at which bound (the free ones first,
    /// fewest bounds first), solves the free dyes' equations for each and returns the first
    /// point satisfying every condition (to `10⁻⁹` of the gradient's scale): the exact minimum,
    /// not an iteration's approximation. `None` when no assignment does (a dye the map never saw
    /// used, `H_ii = 0`); for dyes whose columns are collinear, an assignment that holds one of
    /// them at a bound can still satisfy every condition, and that minimum (one of many) is
    /// returned. Variances as in the module documentation, with the dyes strictly between their
    /// bounds as the free set.
    pub fn within(
        &self,
        dyes: &[usize],
        bounds: &[DyeBounds],
    ) -> Result<Option<RecipeMatch>, EstimatorError> {
        let k = dyes.len();
        check_len("bounds of the dyes", k, bounds.len())?;
        // The problem is linear in u = h_i(c), which is increasing: c's bounds are u's through
        // h, and a dye with a build-up curve is held below MAX_CONCENTRATION.
        let held: Vec<DyeBounds> = dyes
            .iter()
            .zip(bounds)
            .map(|(&i, b)| {
                let h = self.map.curves.get(i).copied().unwrap_or(Curve::LINEAR);
                let cap = |c: f64| {
                    if h.is_linear() {
                        c
                    } else {
                        c.min(MAX_CONCENTRATION)
                    }
                };
                DyeBounds {
                    min: cap(b.min),
                    max: cap(b.max),
                }
            })
            .collect();
        let bounds: Vec<DyeBounds> = dyes
            .iter()
            .zip(&held)
            .map(|(&i, b)| {
                let h = self.map.curves.get(i).copied().unwrap_or(Curve::LINEAR);
                DyeBounds {
                    min: h.value(b.min),
                    max: h.value(b.max),
                }
            })
            .collect();
        if k > MAX_BOUNDED_DYES {
            return Err(EstimatorError::Dimension {
                what: "dyes in a bounded match",
                expected: MAX_BOUNDED_DYES,
                found: k,
            });
        }
        if dyes
            .iter()
            .any(|&i| i >= self.map.dyes || self.h[(i, i)] <= 0.0)
        {
            return Ok(None);
        }
        let scale = dyes
            .iter()
            .fold(0.0_f64, |a, &i| a.max(self.g[i].abs()))
            .max(f64::MIN_POSITIVE);
        let tol = 1e-9 * scale;
        // State of dye a: 0 free, 1 at min, 2 at max; visited by the number of bounds held.
        let mut states: Vec<[u8; MAX_BOUNDED_DYES]> = (0..3usize.pow(k as u32))
            .map(|code| {
                let mut state = [0u8; MAX_BOUNDED_DYES];
                let mut rest = code;
                for s in state.iter_mut().take(k) {
                    *s = (rest % 3) as u8;
                    rest /= 3;
                }
                state
            })
            .filter(|state| (0..k).all(|a| state[a] != 2 || bounds[a].max.is_finite()))
            .collect();
        states.sort_by_key(|state| state.iter().filter(|&&s| s != 0).count());
        'states: for state in states {
            let mut c = vec![0.0; self.map.dyes];
            // Positions in `dyes` of the free dyes.
            let free: Vec<usize> = (0..k).filter(|&a| state[a] == 0).collect();
            for a in (0..k).filter(|&a| state[a] != 0) {
                c[dyes[a]] = if state[a] == 1 {
                    bounds[a].min
                } else {
                    bounds[a].max
                };
            }
            if !free.is_empty() {
                // H_FF c_F = g_F − H_F,B c_B for the free dyes F given the bound ones B.
                let rhs: Vec<f64> = free
                    .iter()
                    .map(|&a| {
                        let i = dyes[a];
                        self.g[i] - dyes.iter().map(|&j| self.h[(i, j)] * c[j]).sum::<f64>()
                    })
                    .collect();
                let free_dyes: Vec<usize> = free.iter().map(|&a| dyes[a]).collect();
                let Some(solution) = solve_small(&self.h, &free_dyes, &rhs) else {
                    continue;
                };
                for (&a, v) in free.iter().zip(solution) {
                    if !(v > bounds[a].min && v < bounds[a].max) {
                        continue 'states;
                    }
                    c[dyes[a]] = v;
                }
            }
            for a in (0..k).filter(|&a| state[a] != 0) {
                let i = dyes[a];
                let r = self.g[i]
                    - (0..self.map.dyes)
                        .map(|j| self.h[(i, j)] * c[j])
                        .sum::<f64>();
                let optimal = if state[a] == 1 { r <= tol } else { r >= -tol };
                if !optimal {
                    continue 'states;
                }
            }
            let free_dyes: Vec<usize> = free.iter().map(|&a| dyes[a]).collect();
            let mut found = self.recipe(c, &free_dyes)?;
            // `h⁻¹(h(c))` may round a hair past a bound: a dye at a bound gets the bound as
            // asked, and a free one stays within it.
            for (a, (&i, b)) in dyes.iter().zip(&held).enumerate() {
                let amount = &mut found.concentration[i];
                *amount = match state[a] {
                    1 => b.min,
                    2 => b.max,
                    // Not `clamp`, which panics on a caller's inverted bounds.
                    _ => amount.max(b.min).min(b.max),
                };
            }
            return Ok(Some(found));
        }
        Ok(None)
    }

    /// Recipe `c` (concentrations, one per dye, ≥ 0; a dye with a build-up curve counts at most
    /// [`MAX_CONCENTRATION`]) as an answer to this problem: its residual, and variances as in the
    /// module documentation with `free` (distinct dye indices) as the free set. For a recipe set
    /// by another criterion than this problem's least squares (a correction polished on its
    /// colour) they are approximate: the residual there includes what that criterion traded
    /// away, carried through the least-squares fit's curvature.
    pub fn answer(&self, c: &[f64], free: &[usize]) -> Result<RecipeMatch, EstimatorError> {
        check_len("recipe", self.map.dyes, c.len())?;
        if let Some(&bad) = free.iter().find(|&&i| i >= self.map.dyes) {
            return Err(EstimatorError::Dimension {
                what: "dye index",
                expected: self.map.dyes,
                found: bad,
            });
        }
        // Never reached from the service (its recipes are projected onto their bounds first).
        if !c.iter().all(|v| v.is_finite() && *v >= 0.0) {
            return Err(EstimatorError::NonFinite(
                "recipe amounts (finite, at least 0)",
            ));
        }
        let mut answer = self.recipe(self.map.built_up(c), free)?;
        // The amounts as given, not `h⁻¹(h(c))`, which may round a hair past a caller's bound;
        // a dye with a build-up curve at most at its cap, as `recipe` answers it.
        for ((amount, &given), h) in answer.concentration.iter_mut().zip(c).zip(&self.map.curves) {
            *amount = if h.is_linear() {
                given
            } else {
                given.min(MAX_CONCENTRATION)
            };
        }
        Ok(answer)
    }

    /// The solution `u = h_i(c)` as an answer: the recipe `c`, its variances with `free` the
    /// dyes the fit set (module documentation; a dye with a build-up curve carries its `u`'s
    /// variance to `c` by the delta method, `var c = var u / h'(c)²`) and its residual.
    fn recipe(&self, mut u: Vec<f64>, free: &[usize]) -> Result<RecipeMatch, EstimatorError> {
        let (bands, m, h) = (self.map.bands(), self.map.dyes, &self.h);
        // A dye with a build-up curve gives at most h(MAX_CONCENTRATION): an unbounded solve
        // that asks for more is answered at that amount, with that amount's residual.
        for (u, h) in u.iter_mut().zip(&self.map.curves) {
            if !h.is_linear() {
                *u = u.min(h.value(MAX_CONCENTRATION));
            }
        }
        let fitted = self.ks_built_up(&u);
        let wrss: f64 = (0..bands)
            .map(|l| self.weight[l] * (self.t[l] + self.substrate[l] - fitted[l]).powi(2))
            .sum();
        let counted = self.weight.iter().filter(|&&w| w > 0.0).count();
        let s2 = match counted.checked_sub(free.len()) {
            Some(dof @ 1..) => wrss / dof as f64,
            _ => f64::INFINITY,
        };
        let mut variance: Vec<f64> = (0..m)
            .map(|i| {
                if h[(i, i)] > 0.0 {
                    s2 / h[(i, i)]
                } else {
                    f64::INFINITY
                }
            })
            .collect();
        // With s² unknown every variance already is; the free dyes' block may then be singular.
        if !free.is_empty() && s2.is_finite() {
            let inverse = inverse_spd(Mat::from_fn(free.len(), free.len(), |a, b| {
                h[(free[a], free[b])]
            }))?;
            for (a, &i) in free.iter().enumerate() {
                variance[i] = s2 * inverse[(a, a)];
            }
        }
        let rss: f64 = (0..bands)
            .filter(|&l| self.weight[l] > 0.0)
            .map(|l| (self.target[l] - self.map.transform.reflectance(fitted[l])).powi(2))
            .sum();
        let residual_rms = (rss / counted.max(1) as f64).sqrt();
        // A blend's inverse is found by Newton's steps, which may round `h(MAX_CONCENTRATION)`
        // back to a hair above it: the answer keeps to the cap it was held at.
        let c: Vec<f64> = u
            .iter()
            .zip(&self.map.curves)
            .map(|(&u, h)| {
                let c = h.inverse(u);
                if h.is_linear() {
                    c
                } else {
                    c.min(MAX_CONCENTRATION)
                }
            })
            .collect();
        for ((v, c), h) in variance.iter_mut().zip(&c).zip(&self.map.curves) {
            *v /= h.slope(*c).powi(2);
        }
        // A reflectance residual is finite whatever K/S it reads; the K/S residual says whether
        // the fit overflowed.
        if !wrss.is_finite()
            || !residual_rms.is_finite()
            || variance.iter().any(|v| v.is_nan())
            || !c.iter().all(|v| v.is_finite())
        {
            return Err(EstimatorError::NonFinite("matched recipe"));
        }
        Ok(RecipeMatch {
            concentration: c,
            variance,
            residual_rms,
        })
    }

    /// The K/S the map predicts for recipe `c` (one per dye) on this target's fabric, per band.
    pub fn ks(&self, c: &[f64]) -> Vec<f64> {
        self.ks_built_up(&self.map.built_up(c))
    }

    /// [`Self::ks`] of `u = h_i(c)`, what the map is linear in:
    /// `K/S(λ) = s(λ) + Σ_{i: u_i ≠ 0} u_i w_i(λ)`, the dyes in ascending order.
    fn ks_built_up(&self, c: &[f64]) -> Vec<f64> {
        let w = &self.map.coefficients;
        // A candidate uses a few of the dyes: the others are skipped once, not at every band.
        let used: Vec<(usize, f64)> = c
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, ci)| ci != 0.0)
            .collect();
        self.substrate
            .iter()
            .enumerate()
            .map(|(l, s)| s + used.iter().map(|&(i, ci)| ci * w[(i, l)]).sum::<f64>())
            .collect()
    }

    /// The reflectance (fraction) the map predicts for recipe `c` on this target's fabric.
    pub fn reflectance(&self, c: &[f64]) -> Vec<f64> {
        self.ks(c)
            .into_iter()
            .map(|ks| self.map.transform.reflectance(ks))
            .collect()
    }
}

/// `H_FF⁻¹ rhs` for the few dyes `F` of a bounded match, by Cholesky on the stack; `None` when
/// `H_FF` is not positive definite to working precision.
fn solve_small(h: &Mat<f64>, free: &[usize], rhs: &[f64]) -> Option<[f64; MAX_BOUNDED_DYES]> {
    let n = free.len();
    let mut l = [[0.0_f64; MAX_BOUNDED_DYES]; MAX_BOUNDED_DYES];
    for a in 0..n {
        for b in 0..=a {
            let dot: f64 = (0..b).map(|k| l[a][k] * l[b][k]).sum();
            let v = h[(free[a], free[b])] - dot;
            if a == b {
                // Relative to the diagonal: a pivot lost to cancellation is a singular H_FF.
                if v <= 1e-12 * h[(free[a], free[a])] {
                    return None;
                }
                l[a][a] = v.sqrt();
            } else {
                l[a][b] = v / l[b][b];
            }
        }
    }
    let mut x = [0.0_f64; MAX_BOUNDED_DYES];
    for a in 0..n {
        x[a] = (rhs[a] - (0..a).map(|k| l[a][k] * x[k]).sum::<f64>()) / l[a][a];
    }
    for a in (0..n).rev() {
        x[a] = (x[a] - (a + 1..n).map(|k| l[k][a] * x[k]).sum::<f64>()) / l[a][a];
    }
    Some(x)
}

fn check_len(what: &'static str, expected: usize, found: usize) -> Result<(), EstimatorError> {
    if expected == found {
        Ok(())
    } else {
        Err(EstimatorError::Dimension {
            what,
            expected,
            found,
        })
    }
}

/// `H⁻¹` of a symmetric positive definite `H` by its Cholesky factor.
fn inverse_spd(h: Mat<f64>) -> Result<Mat<f64>, EstimatorError> {
    let n = h.nrows();
    let l = cholesky_lower(h)?;
    let mut inverse = Mat::<f64>::identity(n, n);
    solve_lower_triangular_in_place(l.as_ref(), inverse.as_mut(), Par::Seq);
    solve_upper_triangular_in_place(l.transpose(), inverse.as_mut(), Par::Seq);
    Ok(inverse)
}

/// `x = H_FF⁻¹ g_F` on the free set `F`, zero elsewhere.
fn solve_free(h: MatRef<'_, f64>, g: &[f64], free: &[bool]) -> Result<Vec<f64>, EstimatorError> {
    let idx: Vec<usize> = (0..g.len()).filter(|&i| free[i]).collect();
    let sub = Mat::from_fn(idx.len(), idx.len(), |a, b| h[(idx[a], idx[b])]);
    let l = cholesky_lower(sub)?;
    let mut rhs = Mat::from_fn(idx.len(), 1, |a, _| g[idx[a]]);
    solve_lower_triangular_in_place(l.as_ref(), rhs.as_mut(), Par::Seq);
    solve_upper_triangular_in_place(l.transpose(), rhs.as_mut(), Par::Seq);
    let mut x = vec![0.0; g.len()];
    for (a, &i) in idx.iter().enumerate() {
        x[i] = rhs[(a, 0)];
    }
    Ok(x)
}

/// Non-negative least squares on the normal equations: `argmin_{x ≥ 0} ½xᵀHx − gᵀx` for a
/// symmetric positive semi-definite `H` (Lawson & Hanson's active-set method, in the
/// normal-equation form of Bro & De Jong, 1997).
///
/// The free set `F` grows by the variable of largest gradient `(g − Hx)_j` outside it; whenever
/// the unconstrained solution on `F` leaves the feasible region, the step is cut at the first
/// variable to reach 0, which leaves `F` (each such cut removes at least one variable, so at most
/// `n` cuts follow an entry). At the end the KKT conditions hold to `tol = 10⁻¹² n max|g|`:
/// `x ≥ 0`, `(g − Hx)_F = 0`, `(g − Hx)_j ≤ tol` for `j ∉ F`. Exact arithmetic needs fewer
/// than `n` entries; rounding could make a variable re-enter, so entries are capped at
/// `3n + 10`, where the feasible `x` reached is returned. A variable with `H_jj = 0` (a dye the
/// map has never seen) never enters. `NotPositiveDefinite` when `H_FF` is singular.
pub fn nnls(h: MatRef<'_, f64>, g: &[f64]) -> Result<Vec<f64>, EstimatorError> {
    let n = g.len();
    check_len("nnls rows", n, h.nrows())?;
    check_len("nnls columns", n, h.ncols())?;
    let tol = 1e-12 * n as f64 * g.iter().fold(0.0_f64, |a, v| a.max(v.abs()));
    let mut x = vec![0.0; n];
    let mut free = vec![false; n];
    'entries: for _ in 0..3 * n + 10 {
        let gradient: Vec<f64> = (0..n)
            .map(|i| g[i] - (0..n).map(|j| h[(i, j)] * x[j]).sum::<f64>())
            .collect();
        let Some(enter) = (0..n)
            .filter(|&j| !free[j] && h[(j, j)] > 0.0)
            .max_by(|&a, &b| gradient[a].total_cmp(&gradient[b]))
            .filter(|&j| gradient[j] > tol)
        else {
            return Ok(x);
        };
        free[enter] = true;
        for _ in 0..=n {
            let s = solve_free(h, g, &free)?;
            if (0..n).all(|i| !free[i] || s[i] > 0.0) {
                x = s;
                continue 'entries;
            }
            // Step from x towards s as far as feasibility allows (not at all when a variable
            // at 0 would turn negative); the variable that blocks the step, and any other that
            // reaches 0, leaves the free set.
            let (blocking, alpha) = (0..n)
                .filter(|&i| free[i] && s[i] <= 0.0)
                .map(|i| {
                    let alpha = if x[i] <= 0.0 {
                        0.0
                    } else {
                        x[i] / (x[i] - s[i])
                    };
                    (i, alpha)
                })
                .fold((usize::MAX, f64::INFINITY), |best, cand| {
                    if cand.1 < best.1 { cand } else { best }
                });
            for i in 0..n {
                x[i] += alpha * (s[i] - x[i]);
                if free[i] && (i == blocking || x[i] <= 0.0) {
                    x[i] = 0.0;
                    free[i] = false;
                }
            }
            if !free.iter().any(|&f| f) {
                continue 'entries;
            }
        }
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use faer::Mat;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::BatchStatistics;
    use crate::ReflectanceScale;
    use crate::build_up::Curve;
    use crate::forward::{choose, forward_statistics};
    use crate::statistics::build_up;

    const BANDS: usize = 31;

    /// Unit K/S of three dyes with Gaussian bands (centres 430, 520, 610 nm, width 35 nm) on
    /// 400–700 nm every 10 nm.
    fn unit_ks(dye: usize, band: usize) -> f64 {
        let nm = 400.0 + 10.0 * band as f64;
        let centre = 430.0 + 90.0 * dye as f64;
        8.0 * (-0.5 * ((nm - centre) / 35.0).powi(2)).exp()
    }

    /// K/S of the fabric: a flat floor, higher on the second fabric.
    fn fabric_ks(second: bool, band: usize) -> f64 {
        0.02 + if second { 0.03 } else { 0.0 } + 0.0005 * band as f64
    }

    fn reflectance(c: &[f64], second: bool) -> Vec<f64> {
        reading(c, second, Transform::KubelkaMunk)
    }

    /// What an instrument reads of recipe `c` in a world whose readings `transform` inverts.
    fn reading(c: &[f64], second: bool, transform: Transform) -> Vec<f64> {
        (0..BANDS)
            .map(|l| {
                let ks = fabric_ks(second, l) + (0..3).map(|i| c[i] * unit_ks(i, l)).sum::<f64>();
                transform.reflectance(ks)
            })
            .collect()
    }

    fn spectral_basis() -> Basis {
        spectral_basis_with(Transform::KubelkaMunk)
    }

    fn spectral_basis_with(transform: Transform) -> Basis {
        Basis::spectral(
            BANDS,
            ReflectanceScale::Fraction,
            BANDS + 1,
            true,
            transform,
        )
    }

    /// A model state of `rows` exact lab dips: inputs `[R (fraction) …, second fabric]`,
    /// outputs the three concentrations.
    fn exact_state(rows: usize, seed: u64) -> ModelState {
        ModelState::fit(
            &ModelConfig::new(spectral_basis(), 3),
            exact_statistics(rows, seed),
        )
        .unwrap()
    }

    /// The statistics of `rows` exact lab dips.
    fn exact_statistics(rows: usize, seed: u64) -> BatchStatistics {
        statistics_of(rows, seed, Transform::KubelkaMunk, Transform::KubelkaMunk)
    }

    /// The statistics of `rows` exact lab dips of the world `world`, under the basis transform
    /// `model`.
    fn statistics_of(
        rows: usize,
        seed: u64,
        world: Transform,
        model: Transform,
    ) -> BatchStatistics {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let recipes: Vec<(Vec<f64>, bool)> = (0..rows)
            .map(|_| {
                let c = (0..3)
                    .map(|_| {
                        if rng.random_bool(0.3) {
                            0.0
                        } else {
                            rng.random_range(0.01..3.0)
                        }
                    })
                    .collect();
                (c, rng.random_bool(0.5))
            })
            .collect();
        let x = Mat::from_fn(rows, BANDS + 1, |i, j| {
            let (c, second) = &recipes[i];
            if j < BANDS {
                reading(c, *second, world)[j]
            } else {
                f64::from(u8::from(*second))
            }
        });
        let y = Mat::from_fn(rows, 3, |i, k| recipes[i].0[k]);
        let stats = BatchStatistics::from_rows(&spectral_basis_with(model), x.as_ref(), y.as_ref())
            .unwrap();
        assert!(stats.output_products().is_some());
        stats
    }

    /// The same statistics without `YᵀY`, as batches folded before recipe matching were.
    fn bare(t: &BatchStatistics) -> BatchStatistics {
        BatchStatistics::from_parts(
            t.g().to_owned(),
            t.b().to_owned(),
            t.q().to_vec(),
            t.nonzero().to_vec(),
            t.rows(),
        )
    }

    #[test]
    fn a_surface_that_reflects_is_matched_exactly_behind_saunderson_and_not_without() {
        let world = Transform::Saunderson(crate::Saunderson::TEXTILE);
        let fit = |model| {
            ModelState::fit(
                &ModelConfig::new(spectral_basis_with(model), 3),
                statistics_of(300, 4, world, model),
            )
            .unwrap()
            .forward_map()
            .unwrap()
        };
        let (saunderson, plain) = (fit(world), fit(Transform::KubelkaMunk));
        assert_eq!(saunderson.transform(), world);
        let truth = [1.6, 0.0, 2.2];
        let target = reading(&truth, false, world);
        let matched = saunderson.match_recipe(&target, &[0.0]).unwrap();
        for (c, t) in matched.concentration.iter().zip(&truth) {
            assert!((c - t).abs() < 1e-3 * (1.0 + t), "{matched:?}");
        }
        // The map reads back what the instrument read, surface included.
        for (p, r) in saunderson.reflectance(&truth, &[0.0]).iter().zip(&target) {
            assert!((p - r).abs() < 1e-4, "{p} vs {r}");
        }
        // Kubelka–Munk on the readings bends at depth: its recipe is off.
        let off = plain.match_recipe(&target, &[0.0]).unwrap();
        let error: f64 = off
            .concentration
            .iter()
            .zip(&truth)
            .map(|(c, t)| (c - t).abs())
            .sum();
        assert!(error > 0.05, "{off:?}");
    }

    #[test]
    fn an_exact_forward_model_matches_a_recipe_with_unused_dyes_near_zero() {
        let state = exact_state(200, 1);
        let map = state.forward_map().unwrap();
        assert_eq!((map.bands(), map.dyes()), (BANDS, 3));
        for (truth, second) in [(vec![0.4, 0.0, 1.3], true), (vec![0.02, 0.05, 0.0], false)] {
            let matched = map
                .match_recipe(&reflectance(&truth, second), &[f64::from(u8::from(second))])
                .unwrap();
            // The forward map is exact up to its noise floor (σ ≥ 0.1 % of a band's RMS).
            for (c, t) in matched.concentration.iter().zip(&truth) {
                assert!(*c >= 0.0);
                assert!((c - t).abs() < 1e-4 * (1.0 + t), "{matched:?} vs {truth:?}");
            }
            assert!(matched.residual_rms < 5e-4, "{matched:?}");
            assert!(matched.variance.iter().all(|v| v.is_finite() && *v >= 0.0));
            // The reflectance the map predicts for the true recipe is the dip's.
            let others = [f64::from(u8::from(second))];
            let predicted = map.reflectance(&truth, &others);
            for (p, r) in predicted.iter().zip(reflectance(&truth, second)) {
                assert!((p - r).abs() < 1e-3, "{p} vs {r}");
            }
        }
        // Negative K/S (an extrapolated map) is no surface: read as white, never above it.
        let white = map.reflectance(&[-100.0, -100.0, -100.0], &[0.0]);
        assert!(white.iter().all(|r| *r == 1.0), "{white:?}");
    }

    #[test]
    fn a_noisy_target_gets_an_uncertainty_that_covers_its_error() {
        let map = exact_state(200, 2).forward_map().unwrap();
        let truth = [0.8, 0.3, 0.5];
        let mean = mean_standardised_error(&map, truth, 9, 200, |_| true);
        // Standardised squared errors average about 1 per dye when the variance is right.
        assert!((0.6..1.6).contains(&mean), "mean z² {mean}");
    }

    /// The mean over `trials` matches and the three dyes of `(ĉ_i − c_i)² / var ĉ_i`, each
    /// target the reflectance of `truth` with uniform noise of standard deviation 0.001 on the
    /// bands `counted` keeps, and above full scale (not counted) on the others.
    fn mean_standardised_error(
        map: &ForwardMap,
        truth: [f64; 3],
        seed: u64,
        trials: usize,
        counted: impl Fn(usize) -> bool,
    ) -> f64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut z2 = 0.0;
        for _ in 0..trials {
            let r: Vec<f64> = reflectance(&truth, false)
                .iter()
                .enumerate()
                .map(|(l, r)| {
                    let noisy = r + 0.001 * (rng.random::<f64>() - 0.5) * 12f64.sqrt();
                    if counted(l) { noisy } else { 1.05 }
                })
                .collect();
            let m = map.match_recipe(&r, &[0.0]).unwrap();
            z2 += (0..3)
                .map(|i| (m.concentration[i] - truth[i]).powi(2) / m.variance[i])
                .sum::<f64>();
        }
        z2 / (3 * trials) as f64
    }

    /// `s²` is estimated from the bands that count only: with most of the target at full scale,
    /// dividing by every band would shrink it by the share of bands that say nothing.
    #[test]
    fn the_residual_variance_counts_only_the_bands_that_count() {
        let map = exact_state(200, 2).forward_map().unwrap();
        let truth = [0.8, 0.3, 0.5];
        let kept = [2, 5, 8, 11, 14, 17, 20, 23];
        let mean = mean_standardised_error(&map, truth, 11, 400, |l| kept.contains(&l));
        // With s² on ν = 8 − 3 residual degrees of freedom, a standardised squared error is
        // F(1, ν), of mean ν / (ν − 2) = 5/3; over all 31 bands it would be about 9.
        assert!((1.0..2.6).contains(&mean), "mean z² {mean}");
    }

    /// A fit that can reproduce every band that counts has a residual that says nothing of the
    /// noise: its variances are unknown, not the 0 of an exact fit.
    #[test]
    fn a_fit_with_no_band_to_spare_has_unknown_variances() {
        let map = exact_state(200, 2).forward_map().unwrap();
        let truth = [0.8, 0.3, 0.5];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        for kept in [&[3, 12, 21][..], &[6, 15]] {
            let r: Vec<f64> = reflectance(&truth, false)
                .iter()
                .enumerate()
                .map(|(l, r)| {
                    if kept.contains(&l) {
                        r + 0.002 * (rng.random::<f64>() - 0.5)
                    } else {
                        1.0
                    }
                })
                .collect();
            let problem = map.problem(&r, &[0.0]).unwrap();
            let matched = problem.nonnegative(&[0, 1, 2]).unwrap();
            let used = matched.concentration.iter().filter(|c| **c > 0.0).count();
            assert_eq!(used, kept.len(), "{matched:?}");
            assert!(
                matched.variance.iter().all(|v| *v == f64::INFINITY),
                "{kept:?}: {matched:?}"
            );
            assert!(matched.residual_rms < 1e-6, "{matched:?}");
            // One dye fewer than the bands leaves a residual degree of freedom and finite
            // variances.
            let dyes: Vec<usize> = (1..kept.len()).collect();
            let fewer = problem.nonnegative(&dyes).unwrap();
            assert!(fewer.variance.iter().all(|v| v.is_finite()), "{fewer:?}");
        }
    }

    #[test]
    fn matching_needs_a_spectrum_and_the_outputs_cross_products() {
        let state = exact_state(50, 3);
        let t = state.totals();
        // A state folded before recipe matching (no YᵀY), as stored and read back.
        let old = ModelState::fit(&ModelConfig::new(spectral_basis(), 3), bare(t)).unwrap();
        let blob = crate::codec::encode(&old);
        let old = crate::codec::decode(&blob).unwrap();
        assert!(matches!(
            old.forward_map(),
            Err(EstimatorError::NoForwardMap(_))
        ));
        // Bases that cannot match: no declared spectrum, the identity transform, no intercept.
        let identity = Basis::spectral(
            BANDS,
            ReflectanceScale::Fraction,
            BANDS + 1,
            true,
            Transform::Identity,
        );
        let no_intercept = Basis {
            intercept: false,
            ..spectral_basis()
        };
        for basis in [
            Basis::new(BANDS + 1, true, Transform::KubelkaMunk),
            identity,
            no_intercept,
        ] {
            assert!(!basis.can_match());
            assert!(matches!(
                forward_statistics(t, &basis),
                Err(EstimatorError::NoForwardMap(_))
            ));
        }
        assert!(spectral_basis().can_match());
        let map = state.forward_map().unwrap();
        assert!(matches!(
            map.match_recipe(&[0.5; 3], &[0.0]),
            Err(EstimatorError::Dimension { .. })
        ));
        assert!(matches!(
            map.match_recipe(&vec![f64::NAN; BANDS], &[0.0]),
            Err(EstimatorError::NonFinite(_))
        ));
        // Absurd but finite inputs give a finite recipe or an error, never NaN or ∞.
        for (r, other) in [(0.5, 1e308), (0.5, -1e308), (1e300, 0.0), (-5.0, 1e200)] {
            match map.match_recipe(&vec![r; BANDS], &[other]) {
                Ok(m) => assert!(
                    m.concentration.iter().all(|c| c.is_finite() && *c >= 0.0)
                        && m.residual_rms.is_finite(),
                    "{m:?}"
                ),
                Err(e) => assert!(matches!(e, EstimatorError::NonFinite(_)), "{e}"),
            }
        }
    }

    #[test]
    fn output_products_add_and_scale_with_the_statistics() {
        let (a, b) = (exact_statistics(20, 4), exact_statistics(30, 5));
        let mut sum = a.clone();
        sum.add(&b).unwrap();
        let (ya, yb, ys) = (
            a.output_products().unwrap(),
            b.output_products().unwrap(),
            sum.output_products().unwrap(),
        );
        for i in 0..3 {
            for j in 0..3 {
                assert!(
                    (ys[(i, j)] - ya[(i, j)] - yb[(i, j)]).abs()
                        < 1e-12 * ys[(i, j)].abs().max(1.0)
                );
            }
        }
        let mut half = a.clone();
        half.scale(0.5);
        assert_eq!(half.output_products().unwrap()[(1, 2)], 0.5 * ya[(1, 2)]);
        // Statistics of no rows take the other side's, either way round.
        let mut empty = BatchStatistics::zeros(a.dim(), 3);
        empty.add(&a).unwrap();
        assert_eq!(empty, a);
        let mut kept = a.clone();
        kept.add(&BatchStatistics::zeros(a.dim(), 3)).unwrap();
        assert_eq!(kept.output_products(), a.output_products());
        // Rows without YᵀY make a sum without it, whichever side they are on.
        for (mut left, right) in [(a.clone(), bare(&b)), (bare(&b), a.clone())] {
            left.add(&right).unwrap();
            assert!(left.output_products().is_none());
            assert!(left.build_up().is_none());
        }
        // The build-up statistics add and scale alike.
        let (ba, bb, bs) = (
            a.build_up().unwrap(),
            b.build_up().unwrap(),
            sum.build_up().unwrap(),
        );
        assert_eq!(bs.saturations(), ba.saturations());
        let width = bs.saturations().len() * 3;
        assert_eq!(bs.gram().nrows(), width);
        for i in 0..width {
            for j in 0..width {
                let expected = ba.gram()[(i, j)] + bb.gram()[(i, j)];
                assert!((bs.gram()[(i, j)] - expected).abs() < 1e-12 * expected.abs().max(1.0));
            }
            for l in 0..a.dim() {
                let expected = ba.design()[(l, i)] + bb.design()[(l, i)];
                assert!((bs.design()[(l, i)] - expected).abs() < 1e-12 * expected.abs().max(1.0));
            }
        }
        assert_eq!(
            half.build_up().unwrap().design()[(3, 7)],
            0.5 * ba.design()[(3, 7)]
        );
        // So do their weighted copies, and a sum with statistics that lack them has none.
        let (ra, rb, rs) = (
            ba.relative().unwrap(),
            bb.relative().unwrap(),
            bs.relative().unwrap(),
        );
        let close = |x: f64, y: f64| (x - y).abs() < 1e-12 * y.abs().max(1.0);
        assert!(close(rs.weight(), ra.weight() + rb.weight()));
        for i in 0..width {
            for j in 0..width {
                assert!(close(
                    rs.gram()[(i, j)],
                    ra.gram()[(i, j)] + rb.gram()[(i, j)]
                ));
            }
            for l in 0..a.dim() {
                assert!(close(
                    rs.design()[(l, i)],
                    ra.design()[(l, i)] + rb.design()[(l, i)]
                ));
            }
        }
        for r in 0..rs.fabric().nrows() {
            for l in 0..a.dim() {
                assert!(close(
                    rs.fabric()[(r, l)],
                    ra.fabric()[(r, l)] + rb.fabric()[(r, l)]
                ));
            }
        }
        for (l, v) in rs.squares().iter().enumerate() {
            assert!(close(*v, ra.squares()[l] + rb.squares()[l]));
        }
        let rh = half.build_up().unwrap().relative().unwrap();
        assert_eq!(rh.weight(), 0.5 * ra.weight());
        assert_eq!(rh.fabric()[(0, 2)], 0.5 * ra.fabric()[(0, 2)]);
        let mut older = a.clone();
        let b0 = older.build_up().unwrap().clone();
        older.set_build_up(crate::statistics::BuildUp::from_parts(
            b0.saturations().to_vec(),
            b0.gram().to_owned(),
            b0.design().to_owned(),
            None,
        ));
        older.add(&b).unwrap();
        assert!(older.build_up().unwrap().relative().is_none());
        // A row weighs 1 / (its mean K/S)²: the weighted gram's intercept entry is Σ w.
        let last = a.dim() - 1;
        assert!(close(
            ra.fabric()[(ra.fabric().nrows() - 1, last)],
            ra.weight()
        ));
        let row: Vec<f64> = reflectance(&[0.2, 0.0, 1.5], true)
            .into_iter()
            .chain([1.0])
            .collect();
        let one = BatchStatistics::from_rows(
            &spectral_basis(),
            MatRef::from_row_major_slice(&row, 1, BANDS + 1),
            MatRef::from_row_major_slice(&[0.2, 0.0, 1.5], 1, 3),
        )
        .unwrap();
        let level = (0..BANDS)
            .map(|l| Transform::KubelkaMunk.apply(row[l]))
            .sum::<f64>()
            / BANDS as f64;
        let weight = one.build_up().unwrap().relative().unwrap().weight();
        assert!(
            close(weight, level.powi(-2)),
            "{weight} vs {}",
            level.powi(-2)
        );
        // The linear curve's blocks are YᵀY and B.
        for i in 0..3 {
            for j in 0..3 {
                assert_eq!(ba.gram()[(i, j)], ya[(i, j)]);
            }
            for l in 0..a.dim() {
                assert_eq!(ba.design()[(l, i)], a.b()[(l, i)]);
            }
        }
    }

    /// The statistics of `rows` exact dips whose dyes build up along `h_s` with `s = saturation`.
    fn saturating_statistics(rows: usize, seed: u64, saturation: f64) -> BatchStatistics {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let recipes: Vec<Vec<f64>> = (0..rows)
            .map(|_| (0..3).map(|_| rng.random_range(0.0..4.0)).collect())
            .collect();
        let x = Mat::from_fn(rows, BANDS + 1, |i, j| {
            let shown: Vec<f64> = recipes[i]
                .iter()
                .map(|c| build_up(*c, saturation))
                .collect();
            if j < BANDS {
                reflectance(&shown, false)[j]
            } else {
                0.0
            }
        });
        let y = Mat::from_fn(rows, 3, |i, k| recipes[i][k]);
        BatchStatistics::from_rows(&spectral_basis(), x.as_ref(), y.as_ref()).unwrap()
    }

    #[test]
    fn each_dye_takes_the_build_up_curve_of_its_dips_and_is_matched_through_it() {
        // A world whose dyes saturate at 5 % owf (a rung of the ladder) and a linear one.
        let saturating = saturating_statistics(200, 8, 5.0);
        let basis = spectral_basis();
        let positions = choose(&saturating, &basis).unwrap().unwrap();
        assert_eq!(positions, [3.0; 3]);
        let linear = exact_statistics(200, 8);
        assert_eq!(choose(&linear, &basis).unwrap(), Some(vec![0.0; 3]));
        assert_eq!(choose(&bare(&linear), &basis).unwrap(), None);

        let state = ModelState::fit(&ModelConfig::new(basis, 3), saturating).unwrap();
        let map = state.forward_map().unwrap();
        let saturations: Vec<f64> = map.curves().iter().map(Curve::saturation).collect();
        assert_eq!(saturations, [5.0; 3]);
        let truth = [0.4, 3.5, 1.2];
        let shown: Vec<f64> = truth.iter().map(|c| build_up(*c, 5.0)).collect();
        let target = reflectance(&shown, false);
        let matched = map.match_recipe(&target, &[0.0]).unwrap();
        for (c, t) in matched.concentration.iter().zip(&truth) {
            assert!((c - t).abs() < 1e-3 * (1.0 + t), "{matched:?}");
        }
        // The variance is the delta method's: larger in c than in u where the curve flattens.
        assert!(matched.variance.iter().all(|v| v.is_finite() && *v >= 0.0));
        // Bounds are in concentrations: a cap below the truth holds the dye at the cap.
        let problem = map.problem(&target, &[0.0]).unwrap();
        let capped = problem
            .within(
                &[0, 1, 2],
                &[
                    DyeBounds::default(),
                    DyeBounds { min: 0.0, max: 2.0 },
                    DyeBounds::default(),
                ],
            )
            .unwrap()
            .unwrap();
        assert!((capped.concentration[1] - 2.0).abs() < 1e-12, "{capped:?}");
        // A recipe given back as an answer is the solve's own: residual and variances (through
        // the curves) alike; any other recipe has a larger residual.
        let again = problem.answer(&capped.concentration, &[0, 2]).unwrap();
        assert!(
            (again.residual_rms - capped.residual_rms).abs() < 1e-12 * (1.0 + capped.residual_rms)
        );
        for (a, b) in again.variance.iter().zip(&capped.variance) {
            assert!(
                (a - b).abs() <= 1e-9 * b.abs(),
                "{again:?} against {capped:?}"
            );
        }
        let mut off = capped.concentration.clone();
        off[0] *= 1.2;
        assert!(problem.answer(&off, &[0, 2]).unwrap().residual_rms > capped.residual_rms);
        assert!(problem.answer(&[0.1, -1.0, 0.0], &[]).is_err());
        assert!(problem.answer(&[0.1, 1.0], &[]).is_err());
        // A target deeper than any amount of a dye gives is held at MAX_CONCENTRATION.
        let beyond = problem.ks(&[0.0, MAX_CONCENTRATION, 0.0]);
        assert!(beyond.iter().all(|k| k.is_finite()));
    }

    #[test]
    fn a_dye_that_saturates_between_rungs_is_placed_between_them_and_matched_closely() {
        // s = 7 lies between the rungs 10 and 5: no single rung fits these dips, a blend does.
        let saturating = saturating_statistics(300, 9, 7.0);
        let state = ModelState::fit(&ModelConfig::new(spectral_basis(), 3), saturating).unwrap();
        let map = state.forward_map().unwrap();
        for h in map.curves() {
            assert!((h.saturation() - 7.0).abs() < 0.7, "{:?}", map.curves());
        }
        let truth = [0.4, 3.5, 1.2];
        let shown: Vec<f64> = truth.iter().map(|c| build_up(*c, 7.0)).collect();
        let matched = map
            .match_recipe(&reflectance(&shown, false), &[0.0])
            .unwrap();
        for (c, t) in matched.concentration.iter().zip(&truth) {
            assert!((c - t).abs() < 0.01 * t, "{matched:?}");
        }
        // A target deeper than the dye gives at MAX_CONCENTRATION is answered at that amount,
        // not at a rounding of the blended curve's inverse above it.
        for deep in [1e3, 1e6, 1e12] {
            let shown = [build_up(0.4, 7.0), build_up(deep, 7.0), build_up(1.2, 7.0)];
            let matched = map
                .match_recipe(&reflectance(&shown, false), &[0.0])
                .unwrap();
            let c = matched.concentration[1];
            assert!(c <= MAX_CONCENTRATION && c > 50.0, "{deep}: {matched:?}");
        }
        // So is a recipe given at that amount, whatever the blend's inverse rounds it to.
        let problem = map.problem(&reflectance(&[0.1; 3], false), &[0.0]).unwrap();
        for dye in 0..3 {
            let mut at_most = [0.4, 0.4, 0.4];
            at_most[dye] = MAX_CONCENTRATION;
            let answered = problem.answer(&at_most, &[0, 1, 2]).unwrap().concentration;
            assert!(
                answered[dye] <= MAX_CONCENTRATION && answered[dye] > 0.999 * MAX_CONCENTRATION,
                "{:?}: {answered:?}",
                map.curves()
            );
        }
        // Any other recipe given as an answer is answered as given, to the bit: its amounts are
        // the caller's (a correction's bounds, a dose kept as dyed), which `h⁻¹(h(c))` rounded a
        // hair past.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for _ in 0..200 {
            let given: Vec<f64> = (0..3).map(|_| rng.random_range(0.0..4.0)).collect();
            let answered = problem.answer(&given, &[0, 1, 2]).unwrap().concentration;
            assert_eq!(answered, given, "{:?}", map.curves());
        }
    }

    /// A standard normal draw (Box–Muller).
    fn standard_normal(rng: &mut rand_chacha::ChaCha8Rng) -> f64 {
        let (u, v): (f64, f64) = (rng.random_range(1e-12..1.0), rng.random_range(0.0..1.0));
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// `rows` dips of the first fabric whose dyes build up along `h_7` (between the rungs) and
    /// whose uptake scatters by 3 % (log-normal) about recipes log-uniform on 0.005–4: their
    /// statistics, with or without the weighted copy.
    fn scattered_statistics(rows: usize, seed: u64, weighted: bool) -> BatchStatistics {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (mut recipes, mut shown) = (Vec::new(), Vec::new());
        for _ in 0..rows {
            let c: Vec<f64> = (0..3)
                .map(|_| rng.random_range(0.005f64.ln()..4f64.ln()).exp())
                .collect();
            let taken: Vec<f64> = c
                .iter()
                .map(|c| build_up(c * (0.03 * standard_normal(&mut rng)).exp(), 7.0))
                .collect();
            recipes.push(c);
            shown.push(taken);
        }
        let x = Mat::from_fn(rows, BANDS + 1, |i, j| {
            if j < BANDS {
                reflectance(&shown[i], false)[j]
            } else {
                0.0
            }
        });
        let y = Mat::from_fn(rows, 3, |i, k| recipes[i][k]);
        let mut stats =
            BatchStatistics::from_rows(&spectral_basis(), x.as_ref(), y.as_ref()).unwrap();
        if !weighted {
            let b = stats.build_up().unwrap();
            let unweighted = crate::statistics::BuildUp::from_parts(
                b.saturations().to_vec(),
                b.gram().to_owned(),
                b.design().to_owned(),
                None,
            );
            stats.set_build_up(unweighted);
        }
        stats
    }

    #[test]
    fn the_forward_map_keeps_the_fabric_s_own_k_s_under_scatter_that_grows_with_depth() {
        let fit = |weighted| {
            ModelState::fit(
                &ModelConfig::new(spectral_basis(), 3),
                scattered_statistics(1500, 21, weighted),
            )
            .unwrap()
            .forward_map()
            .unwrap()
        };
        let (weighted, unweighted) = (fit(true), fit(false));
        // The intercept is the fabric's K/S, what a pale shade is mostly made of.
        let worst = |map: &ForwardMap| {
            let ks = map.ks(&[0.0; 3], &[0.0]);
            (0..BANDS)
                .map(|l| (ks[l] / fabric_ks(false, l) - 1.0).abs())
                .fold(0.0, f64::max)
        };
        let (w, u) = (worst(&weighted), worst(&unweighted));
        // And a pale target is matched to its recipe.
        let truth = [0.01, 0.03, 0.005];
        let shown: Vec<f64> = truth.iter().map(|c| build_up(*c, 7.0)).collect();
        let target = reflectance(&shown, false);
        let error = |map: &ForwardMap| {
            let matched = map.match_recipe(&target, &[0.0]).unwrap();
            matched
                .concentration
                .iter()
                .zip(&truth)
                .map(|(c, t)| (c / t - 1.0).abs())
                .fold(0.0, f64::max)
        };
        let (we, ue) = (error(&weighted), error(&unweighted));
        assert!(w < 0.05 && u > 3.0 * w, "weighted {w}, unweighted {u}");
        assert!(we < 0.02 && ue > 3.0 * we, "weighted {we}, unweighted {ue}");
    }

    /// The residual is the reflectance residual itself, over the bands that count: at most 1
    /// for a pale target the dyes cannot reach (the undyed fabric is darker), and equal to the
    /// RMS of the difference the map predicts for any target.
    #[test]
    fn the_residual_is_the_rms_of_the_reflectance_difference() {
        let map = exact_state(200, 7).forward_map().unwrap();
        let mut brightened = reflectance(&[0.3, 0.0, 0.8], false);
        brightened[4] = 1.02;
        for target in [
            vec![0.99; BANDS],
            reflectance(&[0.3, 0.0, 0.8], false),
            brightened,
        ] {
            let matched = map.match_recipe(&target, &[0.0]).unwrap();
            let predicted = map.reflectance(&matched.concentration, &[0.0]);
            let counted: Vec<f64> = target
                .iter()
                .zip(&predicted)
                .filter(|(r, _)| **r < 1.0)
                .map(|(r, p)| (r - p).powi(2))
                .collect();
            let rms = (counted.iter().sum::<f64>() / counted.len() as f64).sqrt();
            assert!((0.0..=1.0).contains(&matched.residual_rms), "{matched:?}");
            assert!(
                (matched.residual_rms - rms).abs() <= 1e-12 + 1e-9 * rms,
                "{} vs {rms}",
                matched.residual_rms
            );
        }
        // A correction's: against the map shifted by the dip, over the bands where neither the
        // target nor the dip reads full scale.
        let target = reflectance(&[0.3, 0.0, 0.8], false);
        let mut dip = reflectance(&[0.3, 0.0, 0.95], false);
        dip[9] = 1.03;
        let problem = map
            .correction(&target, &[0.0], &[0.3, 0.0, 0.8], &dip)
            .unwrap();
        let corrected = problem.nonnegative(&[0, 1, 2]).unwrap();
        let predicted = problem.reflectance(&corrected.concentration);
        let counted: Vec<f64> = (0..BANDS)
            .filter(|&l| l != 9)
            .map(|l| (target[l] - predicted[l]).powi(2))
            .collect();
        let rms = (counted.iter().sum::<f64>() / counted.len() as f64).sqrt();
        assert!(
            (corrected.residual_rms - rms).abs() <= 1e-12 + 1e-9 * rms,
            "{} vs {rms}",
            corrected.residual_rms
        );
    }

    #[test]
    fn a_band_above_full_scale_does_not_count() {
        let map = exact_state(200, 6).forward_map().unwrap();
        let truth = [0.3, 0.6, 0.1];
        let clean = reflectance(&truth, true);
        let mut brightened = clean.clone();
        brightened[2] = 1.04;
        let (a, b) = (
            map.match_recipe(&clean, &[1.0]).unwrap(),
            map.match_recipe(&brightened, &[1.0]).unwrap(),
        );
        for (x, y) in a.concentration.iter().zip(&b.concentration) {
            assert!((x - y).abs() < 1e-3, "{a:?} vs {b:?}");
        }
        assert!(b.residual_rms < 1e-3, "{b:?}");
    }

    /// `½cᵀHc − gᵀc` of the problem, the objective a bounded match minimises.
    fn objective(problem: &MatchProblem<'_>, c: &[f64]) -> f64 {
        let n = c.len();
        (0..n)
            .map(|i| {
                c[i] * (0.5 * (0..n).map(|j| problem.h[(i, j)] * c[j]).sum::<f64>() - problem.g[i])
            })
            .sum()
    }

    #[test]
    fn a_bounded_match_over_every_dye_is_the_nonnegative_match() {
        let map = exact_state(200, 7).forward_map().unwrap();
        for (truth, second) in [([0.4, 0.0, 1.3], true), ([0.02, 0.05, 0.0], false)] {
            let (r, others) = (reflectance(&truth, second), [f64::from(u8::from(second))]);
            let problem = map.problem(&r, &others).unwrap();
            let all = problem
                .within(&[0, 1, 2], &[DyeBounds::default(); 3])
                .unwrap()
                .unwrap();
            let nnls = map.match_recipe(&r, &others).unwrap();
            for (a, b) in all.concentration.iter().zip(&nnls.concentration) {
                assert!((a - b).abs() < 1e-9 * (1.0 + b), "{all:?} vs {nnls:?}");
            }
            for (a, b) in all.variance.iter().zip(&nnls.variance) {
                assert!((a - b).abs() <= 1e-6 * b, "{all:?} vs {nnls:?}");
            }
            assert!((all.residual_rms - nnls.residual_rms).abs() < 1e-9);
        }
    }

    proptest::proptest! {
        /// The bounded match is the minimum over its box: no feasible point of a grid over the
        /// box (nor a step from it along any axis) does better, and it satisfies its bounds.
        #[test]
        fn a_bounded_match_is_the_minimum_over_its_box(
            truth in proptest::collection::vec(0.0..2.0f64, 3),
            dyes in proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3),
            lower in proptest::collection::vec(0.0..0.6f64, 3),
            width in proptest::collection::vec(0.05..1.5f64, 3),
            bounded in proptest::collection::vec(proptest::bool::ANY, 3),
        ) {
            let map = exact_state(120, 8).forward_map().unwrap();
            let r = reflectance(&truth, false);
            let problem = map.problem(&r, &[0.0]).unwrap();
            let bounds: Vec<DyeBounds> = dyes
                .iter()
                .map(|&i| DyeBounds {
                    min: lower[i],
                    max: if bounded[i] { lower[i] + width[i] } else { f64::INFINITY },
                })
                .collect();
            let found = problem.within(&dyes, &bounds).unwrap().unwrap();
            let c = &found.concentration;
            for i in 0..3 {
                match dyes.iter().position(|&d| d == i) {
                    Some(a) => proptest::prop_assert!(
                        c[i] >= bounds[a].min && c[i] <= bounds[a].max,
                        "{c:?} {bounds:?}"
                    ),
                    None => proptest::prop_assert_eq!(c[i], 0.0),
                }
            }
            let best = objective(&problem, c);
            let steps = 6;
            let mut point = vec![0.0; 3];
            for code in 0..(steps + 1usize).pow(dyes.len() as u32) {
                let mut rest = code;
                for (a, &i) in dyes.iter().enumerate() {
                    let hi = if bounds[a].max.is_finite() { bounds[a].max } else { bounds[a].min + 3.0 };
                    point[i] = bounds[a].min + (hi - bounds[a].min) * (rest % (steps + 1)) as f64 / steps as f64;
                    rest /= steps + 1;
                }
                let value = objective(&problem, &point);
                proptest::prop_assert!(best <= value + 1e-9 * value.abs().max(1.0), "{c:?}: {best} > {value} at {point:?}");
            }
            for (a, &i) in dyes.iter().enumerate() {
                for step in [-1e-3, 1e-3] {
                    let mut moved = c.clone();
                    moved[i] = (c[i] + step).clamp(bounds[a].min, bounds[a].max);
                    let value = objective(&problem, &moved);
                    proptest::prop_assert!(best <= value + 1e-12 * value.abs().max(1.0));
                }
            }
        }
    }

    #[test]
    fn a_bounded_match_respects_its_limits_and_refuses_what_it_cannot_solve() {
        let map = exact_state(200, 9).forward_map().unwrap();
        let truth = [0.9, 0.0, 0.7];
        let problem = map.problem(&reflectance(&truth, false), &[0.0]).unwrap();
        // Capped below what the target needs, the dye sits at its cap and the other makes up
        // what it can; a floor above the need holds too.
        let capped = problem
            .within(
                &[0, 2],
                &[DyeBounds { min: 0.0, max: 0.5 }, DyeBounds::default()],
            )
            .unwrap()
            .unwrap();
        assert_eq!(capped.concentration[0], 0.5, "{capped:?}");
        assert!(capped.concentration[2] > 0.0 && capped.concentration[1] == 0.0);
        let floored = problem
            .within(&[1], &[DyeBounds { min: 0.3, max: 0.3 }])
            .unwrap()
            .unwrap();
        assert_eq!(floored.concentration, vec![0.0, 0.3, 0.0]);
        assert!(floored.residual_rms > capped.residual_rms);
        // A dye a map never saw used has no column to solve for.
        let mut blind = map.clone();
        for l in 0..blind.bands() {
            blind.coefficients[(1, l)] = 0.0;
        }
        let problem = blind.problem(&reflectance(&truth, false), &[0.0]).unwrap();
        assert!(
            problem
                .within(&[0, 1], &[DyeBounds::default(); 2])
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            problem.within(&[0, 1, 2, 0, 1], &[DyeBounds::default(); 5]),
            Err(EstimatorError::Dimension { .. })
        ));
    }

    /// Through a build-up curve, `h⁻¹(h(c))` rounds: a bounded match still answers every amount
    /// within its bounds, and a dye held at a bound at exactly that bound.
    #[test]
    fn amounts_through_a_build_up_curve_keep_exactly_to_their_bounds() {
        let state = ModelState::fit(
            &ModelConfig::new(spectral_basis(), 3),
            saturating_statistics(200, 8, 5.0),
        )
        .unwrap();
        let map = state.forward_map().unwrap();
        assert!(map.curves().iter().all(|h| !h.is_linear()));
        let shown: Vec<f64> = [0.4, 3.5, 1.2].iter().map(|c| build_up(*c, 5.0)).collect();
        let problem = map.problem(&reflectance(&shown, false), &[0.0]).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        let mut held = 0;
        for _ in 0..200 {
            let bounds: Vec<DyeBounds> = (0..3)
                .map(|_| {
                    let min = if rng.random_bool(0.5) {
                        rng.random_range(0.0..2.0)
                    } else {
                        0.0
                    };
                    let width = if rng.random_bool(0.2) {
                        0.0
                    } else {
                        rng.random_range(0.0..3.0)
                    };
                    DyeBounds {
                        min,
                        max: min + width,
                    }
                })
                .collect();
            let Some(found) = problem.within(&[0, 1, 2], &bounds).unwrap() else {
                continue;
            };
            for (c, b) in found.concentration.iter().zip(&bounds) {
                assert!((b.min..=b.max).contains(c), "{c} outside {b:?}");
                held += usize::from(*c == b.min || *c == b.max);
            }
        }
        assert!(held > 100, "{held} amounts at a bound");
    }

    #[test]
    fn nnls_solves_a_small_problem_with_an_active_bound() {
        // min ½xᵀHx − gᵀx, H = I: x = max(g, 0).
        let h = Mat::<f64>::identity(3, 3);
        assert_eq!(
            nnls(h.as_ref(), &[1.0, -2.0, 0.5]).unwrap(),
            vec![1.0, 0.0, 0.5]
        );
        // Coupled: H = [[2, 1], [1, 2]], g = [1, -1]: unconstrained x = [1, -1]; with x₂ = 0,
        // x₁ = g₁ / 2 = 0.5 and the gradient of x₂ is −1 − 0.5 < 0.
        let h = Mat::from_fn(2, 2, |i, j| if i == j { 2.0 } else { 1.0 });
        let x = nnls(h.as_ref(), &[1.0, -1.0]).unwrap();
        assert!((x[0] - 0.5).abs() < 1e-15 && x[1] == 0.0, "{x:?}");
        assert_eq!(nnls(h.as_ref(), &[-1.0, -1.0]).unwrap(), vec![0.0, 0.0]);
    }
}
