//! The settings of a fit: the evidence approximation's numerics and the noise model.

use crate::statistics::BatchStatistics;

/// The default absolute floor `s_min` of a noise variance.
pub const DEFAULT_NOISE_FLOOR: f64 = 1e-10;

/// Numerical settings of the evidence approximation and of the noise model.
///
/// # Why an output needs informative rows
///
/// On the dyeing data a dye used in one or two rows of the first batch is an output that is
/// exactly 0 in all other rows. Plain Algorithm 2 then fits those rows exactly with a few large
/// coefficients, drives σ² to its floor and believes itself: we saw a prediction of −836,336
/// with a predicted standard deviation of 0.28 where the truth was 2.5. Two rows cannot
/// determine a regression on 126 basis functions, and no evidence maximisation can know that
/// from the data alone. So an output counts as **untrained** until at least
/// [`Self::min_informative_rows`] rows in which it is non-zero have been seen
/// ([`Self::min_zero_inflated_rows`] for a zero-inflated output, whose noise prior below
/// keeps its few rows from fitting themselves exactly). An untrained
/// output predicts 0 (the concentration of a dye that is not in the recipe) with the variance
/// of its non-zero values, or, if it is zero-inflated, in proportion to the input that marked
/// its use (the predictor's module doc), and is fitted by Algorithm 2 on its accumulated
/// statistics as soon as it has enough rows.
///
/// # Informative rows and the noise variance
///
/// A dye that is used in 3 of 1,500 rows is exactly 0 in the other 1,497, which any model fits
/// at no cost. Counted as evidence about the noise, those rows drive σ² towards 0 (the noise of
/// the rows where the dye is used is divided by 500) and with it all shrinkage, so a fit on 3
/// informative rows extrapolates wildly. For a zero-inflated output, one that is 0 in most rows,
/// mordant counts as evidence about the noise only its **informative rows** `N_inf`, those in
/// which it is not 0; in any other output a 0 is a measured value like any other (yarn densities
/// include several) and every row counts. The likelihood is tempered by `N_inf / N`, which gives
/// MacKay's noise update `s = RSS / (N_inf − γ)` and the same count in the evidence of ridge and
/// smooth priors and in Algorithm 3's noise step: σ² is the noise of a concentration where the
/// dye is used.
///
/// # Structural zeros
///
/// A zero-inflated output's 0 says "this dye is not in the recipe"; it is not a level to
/// centre on. Such an output keeps the paper's intercept, an ARD coefficient the evidence keeps
/// or prunes, rather than the flat one of a dense output (under the `ard` and `auto` priors).
/// On the dyeing data the evidence prunes it together with everything but the lab-dip dose of
/// the same dye, so the model predicts exactly 0 wherever that dose is 0, as the plant's
/// recipes do; a flat intercept would predict the dye's mean in every recipe.
///
/// # The noise prior
///
/// A dense output's σ² comes from its residuals alone (MacKay's `s = RSS / (N − γ)`), never
/// from its level: oil measured to ±0.2 around 3.5 gets σ from its residuals, not from 3.5. A
/// prior in units of its variance ([`Self::noise_prior_fraction`], off by default) would bind
/// on exactly the precise outputs a calibration is for: at 10⁻⁴ of the variance it held the
/// yarn density's σ² several times above its residuals and made the fit itself smoother. The
/// floor `s_min` is a tiny fraction of that variance (an output that has only ever been
/// constant gets the absolute floor), so it keeps σ² positive and never binds otherwise.
///
/// A zero-inflated output's σ² has a weak inverse-gamma prior ([`NoisePrior`]) whose `ν₀`
/// pseudo-rows weigh less with every informative row seen. Its variance over all rows measures
/// how often the dye is used, not how precisely: the prior speaks in the mean square of its
/// non-zero values instead, the dose of the dye when it is used, with a relative error of about
/// 10 % ([`Self::zero_inflated_noise_fraction`]). Two informative rows fitted by two coefficients
/// leave no residual, and without this prior σ² collapses with them: a dye dosed at 2.5 in three
/// rows took a coefficient of 156 on another dye dosed at 0.002 in one of them, and predicted
/// 56 where the truth was 0.04. With it, two informative rows are enough for a first fit
/// ([`Self::min_zero_inflated_rows`]); as informative rows arrive its two pseudo-rows fade.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitOptions {
    /// Stop Algorithm 2 when the largest relative change of `v` and `s` is below this.
    pub tol: f64,
    /// Iteration cap of Algorithm 2.
    pub max_iter: usize,
    /// Prune basis function `j` (`v_j ← 0` for good) when `γ_j` falls below this.
    pub prune_gamma: f64,
    /// Whether a basis function whose MacKay update would not settle within the iterations
    /// left takes its exact coordinate optimum instead (Tipping & Faul; one per iteration, see
    /// `evidence::slowest_to_settle`). The published algorithm does not.
    pub settle_slow_weights: bool,
    /// Floor `s_min` of the noise variance, as a fraction of the output's variance (and the
    /// absolute floor of an output without variance).
    pub noise_floor: f64,
    /// Pseudo-rows `ν₀` of the inverse-gamma prior on the noise variance (0 turns it off).
    pub noise_prior_rows: f64,
    /// Prior noise variance of a dense output as a fraction of its variance (0, the default:
    /// no prior, σ² from the residuals alone).
    pub noise_prior_fraction: f64,
    /// Prior noise variance of a zero-inflated output as a fraction of the mean square of its
    /// non-zero values (0: as any other output).
    pub zero_inflated_noise_fraction: f64,
    /// Non-zero rows an output needs before it is fitted (0 fits every output at once).
    pub min_informative_rows: f64,
    /// Non-zero rows a zero-inflated output needs before it is fitted.
    pub min_zero_inflated_rows: f64,
    /// Whether the intercept has a flat prior (never shrunk, never pruned), except for outputs
    /// whose zeros are structural (see above). The paper shrinks it like any coefficient.
    pub flat_intercept: bool,
    /// Whether predictions integrate σ² over its posterior (Student-t predictive, see
    /// [`crate::model::Predictive`]) instead of plugging in its estimate.
    pub student: bool,
    /// Under one-step updates, an output's hyperparameters are fitted again (Algorithm 2 on the
    /// statistics, no row read again) once its informative rows have grown by this factor since
    /// they were last fitted; 0 never. States with a plug-in predictive (those stored before the
    /// prior families, or made with `student: false`) are never refitted so. See
    /// [`crate::model::ModelState::update`].
    ///
    /// Why 1.25: the evidence's optimum on `N` rows scatters about the optimum on `gN` with
    /// variance `(1/N − 1/(gN))·c`, which is `g − 1` times the `c/(gN)` of the latter, so
    /// hyperparameters kept from `N` rows sit, typically, `√(g − 1)` standard deviations of the
    /// posterior on all `gN` rows from where those rows put them: one at a doubling, half at
    /// `g = 1.25`.
    pub refit_growth: f64,
    /// Under one-step updates, an output's hyperparameters are fitted again as well when a
    /// batch's surprise lies this many standard deviations or more above what the output's
    /// posterior predictive expects ([`crate::drift::surprise_deviate`]); 0 never. Such a batch
    /// (a new instrument, a new dye lot) says the rows have moved from those the
    /// hyperparameters were chosen for; one batch in about 740 that agrees with the model
    /// passes three. States with a plug-in predictive are never refitted so.
    pub refit_surprise: f64,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            tol: 1e-6,
            max_iter: 100,
            prune_gamma: 1e-6,
            settle_slow_weights: true,
            noise_floor: DEFAULT_NOISE_FLOOR,
            noise_prior_rows: 2.0,
            noise_prior_fraction: 0.0,
            zero_inflated_noise_fraction: 1e-2,
            min_informative_rows: 5.0,
            min_zero_inflated_rows: 2.0,
            flat_intercept: true,
            student: true,
            refit_growth: 1.25,
            refit_surprise: 3.0,
        }
    }
}

impl FitOptions {
    /// Algorithm 2 and 3 exactly as published: no noise prior, the intercept shrunk like any
    /// coefficient, every output fitted at once, σ² plugged in (so no residual cap on ARD),
    /// hyperparameters never fitted again by one-step updates, and MacKay's update alone in
    /// Algorithm 2.
    pub fn plain() -> Self {
        Self {
            noise_prior_rows: 0.0,
            noise_prior_fraction: 0.0,
            zero_inflated_noise_fraction: 0.0,
            min_informative_rows: 0.0,
            min_zero_inflated_rows: 0.0,
            flat_intercept: false,
            student: false,
            refit_growth: 0.0,
            refit_surprise: 0.0,
            settle_slow_weights: false,
            ..Self::default()
        }
    }
}

/// An inverse-gamma prior on one output's noise variance, `s ~ IG(ν₀/2, ν₀ s_p/2)`, whose mode
/// given `RSS` on `dof` residual degrees of freedom is `(RSS + ν₀ s_p)/(dof + ν₀)`: `ν₀`
/// pseudo-rows with mean squared error `s_p`. For a zero-inflated output `s_p` is a fraction of
/// the mean square of its non-zero values; for a dense one a fraction of its variance about its
/// mean (`q_c / N`, its mean square without an intercept), 0 by default: no prior, `ν₀ = 0` (see
/// [`FitOptions`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoisePrior {
    /// `ν₀`.
    pub rows: f64,
    /// `s_p`.
    pub scale: f64,
    /// The lowest noise variance allowed.
    pub floor: f64,
}

impl NoisePrior {
    /// The prior for output `k` of the statistics `stats`, centred by `intercept` (the index of
    /// the constant basis function) when the model has one.
    pub fn for_output(
        stats: &BatchStatistics,
        k: usize,
        intercept: Option<usize>,
        options: &FitOptions,
    ) -> Self {
        let variance = stats.output_variance(k, intercept);
        let scale = if stats.zero_inflated(k) && options.zero_inflated_noise_fraction > 0.0 {
            options.zero_inflated_noise_fraction * stats.nonzero_mean_square(k)
        } else {
            options.noise_prior_fraction * variance
        };
        // Without a scale there is no prior: pseudo-rows of zero error would only pull σ² down.
        Self {
            rows: if scale > 0.0 {
                options.noise_prior_rows
            } else {
                0.0
            },
            scale,
            floor: if variance > 0.0 {
                options.noise_floor * variance
            } else {
                options.noise_floor
            },
        }
    }
}
