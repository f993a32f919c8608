//! Algorithm 3: the one-step Bayesian update.

use faer::Mat;

use super::evidence::OutputData;
use super::posterior::OutputPosterior;
use super::{EstimatorError, NoisePrior};

/// Conditions the posterior on a new batch with the prior and `s` held fixed: the current
/// posterior is the prior for the batch, and with `λ` the forgetting weight of the old data (1
/// without forgetting)
///
/// ```text
/// Σ′⁻¹ = S⁻¹ + λA + G′_JJ / s,    Σ′⁻¹ μ′ = λc + b′_J / s
/// ```
///
/// (`S⁻¹` is 0 for a flat intercept).
///
/// With `λ = 1` this is exactly `Σ′ = (Σ⁻¹ + G′/s)⁻¹`, `μ′ = Σ′(Σ⁻¹μ + b′/s)`, and a sequence
/// of such steps equals one step on the batches' summed statistics.
pub fn condition(
    posterior: &OutputPosterior,
    batch: OutputData<'_>,
    forgetting_weight: f64,
) -> Result<OutputPosterior, EstimatorError> {
    let active = posterior.active();
    let n = active.len();
    let inv_s = 1.0 / posterior.noise_variance();
    let a_old = posterior.precision_data();
    let a = Mat::from_fn(n, n, |i, k| {
        forgetting_weight * a_old[(i, k)] + batch.g[(active[i], active[k])] * inv_s
    });
    let c = posterior
        .natural_mean()
        .iter()
        .zip(active)
        .map(|(c, &j)| forgetting_weight * c + batch.b[j] * inv_s)
        .collect();
    OutputPosterior::with_factor(
        posterior.prior().clone(),
        posterior.factor().clone(),
        posterior.noise_variance(),
        a,
        c,
    )
}

/// Algorithm 3 of Song & Zhang, the incremental step of update method `one_step`: condition on
/// the batch (see [`condition`]), then move the noise variance towards the batch's own mean
/// squared error under the new mean,
///
/// ```text
/// s′ = RSS′ / N′,  RSS′ = μ′ᵀG′μ′ − 2μ′ᵀb′ + q′,    s ← (1 − r) s + r s′,  r = N′ / (λN + N′),
/// ```
///
/// where `N` is the (weighted) number of informative rows behind the posterior and `N′` the
/// batch's, counted as the output's kind (every row of a dense output, the non-zero ones of a
/// zero-inflated one, whatever the batch's own share of zeros; see [`super::FitOptions`] and
/// [`super::statistics::BatchStatistics::output_as`]). `s′` is a mean, not the
/// residual sum the authors' code uses, which inflates σ² by orders of magnitude. The result is
/// kept above the prior's floor.
pub fn one_step(
    posterior: &OutputPosterior,
    rows_before: f64,
    batch: OutputData<'_>,
    forgetting_weight: f64,
    noise: NoisePrior,
) -> Result<OutputPosterior, EstimatorError> {
    let updated = condition(posterior, batch, forgetting_weight)?;
    if batch.n <= 0.0 {
        return Ok(updated);
    }
    if batch.informative <= 0.0 {
        // The batch never uses this output: it says nothing about its noise.
        return Ok(updated);
    }
    let rss = residual_sum_of_squares(updated.mean(), batch);
    let batch_mse = rss / batch.informative;
    let r = batch.informative / (forgetting_weight * rows_before + batch.informative);
    let s = ((1.0 - r) * posterior.noise_variance() + r * batch_mse).max(noise.floor);
    if !s.is_finite() {
        return Err(EstimatorError::NonFinite("noise variance"));
    }
    Ok(updated.with_noise_variance(s))
}

/// `RSS = μᵀGμ − 2μᵀb + q`, clamped at 0, over the non-zero entries of `μ`.
pub fn residual_sum_of_squares(mean: &[f64], data: OutputData<'_>) -> f64 {
    let nz: Vec<usize> = (0..mean.len()).filter(|&j| mean[j] != 0.0).collect();
    let mut quad = 0.0;
    for &a in &nz {
        let row: f64 = nz.iter().map(|&c| data.g[(a, c)] * mean[c]).sum();
        quad += mean[a] * (row - 2.0 * data.b[a]);
    }
    (quad + data.q).max(0.0)
}
