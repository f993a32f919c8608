//! How surprising a batch is to a posterior, from sufficient statistics only.
//!
//! Under the posterior predictive, a row's residual `y − φᵀμ` has mean 0 and variance
//! `s + φᵀΣφ`. Summed over a batch of `N′` rows with statistics `(G′, b′, q′)`:
//!
//! ```text
//! E[RSS] = Σ_rows (s + φᵀΣφ) = N′·s + tr(Σ G′)   (N′ the batch's informative rows)
//! RSS    = Σ_rows (y − φᵀμ)² = μᵀG′μ − 2μᵀb′ + q′
//! z      = RSS / (N′·s + tr(Σ G′))
//! ```
//!
//! `z ≈ 1` when the batch agrees with the model; a batch from a drifted instrument, a new
//! dye lot or a mislabelled recipe gives `z ≫ 1`. The cost is O(|J|³) per output (forming
//! `Σ_JJ`), independent of the batch's row count.

use super::incremental::residual_sum_of_squares;
use super::model::{ModelState, OutputState};
use super::statistics::BatchStatistics;

/// Per output, the surprise `z` of `batch` to `state`'s posterior; `None` for an output that
/// is not trained yet, or when the expected residual is 0 (an empty batch).
pub fn surprise(state: &ModelState, batch: &BatchStatistics) -> Vec<Option<f64>> {
    state
        .outputs()
        .iter()
        .enumerate()
        .map(|(k, output)| {
            let OutputState::Trained(post) = output else {
                return None;
            };
            let rss = residual_sum_of_squares(post.mean(), batch.output(k));
            // tr(Σ G′) = Σ_{a,b ∈ J} Σ_ab G′_ba.
            let sigma = post.covariance_active();
            let g = batch.g();
            let active = post.active();
            let mut trace = 0.0;
            for (a, &i) in active.iter().enumerate() {
                for (b, &j) in active.iter().enumerate() {
                    trace += sigma[(a, b)] * g[(j, i)];
                }
            }
            // σ² is the noise of the rows where the output is not 0 (see `FitOptions`).
            let expected = batch.output(k).informative * post.noise_variance() + trace;
            let z = rss / expected;
            (expected > 0.0 && z.is_finite()).then_some(z)
        })
        .collect()
}

/// The largest surprise over the outputs, if any output has one.
pub fn largest(surprise: &[Option<f64>]) -> Option<f64> {
    surprise.iter().flatten().copied().reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use faer::Mat;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::{Basis, ModelConfig, Transform};

    /// `y = 1 + 2x₁ − x₂ + ε`, ε ~ N(0, 0.3²) (above the estimator's noise floor, 1 % of the
    /// mean square of y), plus `shift` on every y.
    fn batch(rng: &mut impl Rng, rows: usize, shift: f64) -> BatchStatistics {
        let x = Mat::from_fn(rows, 2, |_, _| rng.random_range(-1.0..1.0));
        let y = Mat::from_fn(rows, 1, |i, _| {
            1.0 + 2.0 * x[(i, 0)] - x[(i, 1)] + 0.3 * normal(rng) + shift
        });
        let phi = Basis::new(2, true, Transform::Identity)
            .design(x.as_ref())
            .unwrap();
        BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
    }

    /// A standard normal draw (Box–Muller).
    fn normal(rng: &mut impl Rng) -> f64 {
        let (u, v): (f64, f64) = (rng.random_range(f64::EPSILON..1.0), rng.random());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    #[test]
    fn a_batch_that_agrees_is_about_1_and_a_shifted_one_far_above() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let config = ModelConfig::new(Basis::new(2, true, Transform::Identity), 1);
        let state = ModelState::fit(&config, batch(&mut rng, 200, 0.0)).unwrap();
        let agreeing: Vec<f64> = (0..200)
            .map(|_| surprise(&state, &batch(&mut rng, 20, 0.0))[0].unwrap())
            .collect();
        let mean = agreeing.iter().sum::<f64>() / agreeing.len() as f64;
        assert!((0.85..1.15).contains(&mean), "mean surprise {mean}");
        // A 1.5 offset is 5 noise standard deviations: z ≈ 1 + 1.5² / 0.3² = 26.
        let shifted = surprise(&state, &batch(&mut rng, 20, 1.5))[0].unwrap();
        assert!(shifted > 10.0, "shifted surprise {shifted}");
    }

    /// A dye used in one row in ten: σ² is the noise where it is used, and a batch from the
    /// same plant is about as surprising as a dense output's, not ten times less.
    #[test]
    fn a_zero_inflated_output_that_agrees_is_about_1() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut sparse_batch = |rows: usize| {
            let x = Mat::from_fn(rows, 2, |_, _| rng.random_range(-1.0..1.0));
            let used: Vec<bool> = (0..rows).map(|_| rng.random_bool(0.1)).collect();
            // Feature 1 is the dye's lab-dip amount: 0 where the recipe does not use it.
            let x = Mat::from_fn(rows, 2, |i, j| match j {
                1 if !used[i] => 0.0,
                1 => x[(i, 1)] + 2.0,
                _ => x[(i, j)],
            });
            let y = Mat::from_fn(rows, 1, |i, _| {
                if used[i] {
                    0.9 * x[(i, 1)] + 0.1 * normal(&mut rng)
                } else {
                    0.0
                }
            });
            let phi = Basis::new(2, true, Transform::Identity)
                .design(x.as_ref())
                .unwrap();
            BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
        };
        let config = ModelConfig::new(Basis::new(2, true, Transform::Identity), 1);
        let state = ModelState::fit(&config, sparse_batch(2000)).unwrap();
        let z: Vec<f64> = (0..100)
            .filter_map(|_| surprise(&state, &sparse_batch(200))[0])
            .collect();
        let mean = z.iter().sum::<f64>() / z.len() as f64;
        assert!((0.5..2.0).contains(&mean), "mean surprise {mean}");
    }

    #[test]
    fn largest_skips_outputs_without_surprise() {
        assert_eq!(largest(&[None, Some(2.0), Some(0.5)]), Some(2.0));
        assert_eq!(largest(&[None, None]), None);
    }
}
