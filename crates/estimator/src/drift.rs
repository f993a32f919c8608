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
//! `N′` counts the batch's rows whose predictive variance holds the noise ([`noise_rows`]):
//! every row of a dense output. A zero-inflated output's σ² is the noise where it is used,
//! and its posterior predicts `s + φᵀΣφ` on every row but its structural zeros: where its
//! intercept is pruned, the rows in which every basis function it uses is 0, predicted exactly
//! 0 with no weight uncertainty. So `N′` is the batch's rows less those, or its non-zero rows
//! where those are more (`N_b` the batch's rows):
//!
//! ```text
//! N′ = max(N′_inf, N_b − C′)     (C′: the batch's rows where every φ_j, j ∈ W, is 0, from
//!                                  the batch's zero rows, BatchStatistics::zero_regime)
//! ```
//!
//! `C′` is exact for a support of one input and a lower bound where the inputs' non-zero rows
//! overlap (a lab recipe that doses several rare dyes at once), so `N′` may count too many rows
//! and read `z` low. Where a dye's use is marked by an input (its lab-dip dose), `N′` is about
//! the batch's rows that use it; where nothing marks it, the posterior predicts about its mean
//! level in every row, and a batch without the dye is weighed against those rows' predictive
//! variances, not against `tr(Σ G′)` alone.
//!
//! `z ≈ 1` when the batch agrees with the model; a batch from a drifted instrument, a new
//! dye lot or a mislabelled recipe gives `z ≫ 1`. The exception is such an unmarked dye: its σ²
//! is fitted on every row's residual over its non-zero rows alone (`s = RSS / (N_inf − γ)`), so
//! its predictive is wider than its rows scatter and an agreeing batch reads `z` about the share
//! of rows that use it; the 3σ refit below then needs a larger error to fire for it.
//!
//! `tr(Σ G′)` costs O(|J|³) per output read off `Σ_JJ`. A batch of fewer rows than an output's
//! support (a wide spectrum) has a Gram of low rank: it is factored once, `G′ = U Uᵀ` by pivoted
//! Cholesky (O(p² k); `U` is p × k, `k` its numerical rank, the batch's rows in exact
//! arithmetic), and `tr(Σ G′) = Σ_c u_cᵀ Σ u_c` is the output's predictive weight variance of the
//! k columns ([`OutputPosterior::weight_variance_sum`]): O(r |W| k + r² k) per output. What the
//! factorisation drops is below `p ε` of `G′`'s largest diagonal: round-off. The root is formed
//! only where the batch has fewer rows than some output's support, and then each output takes
//! the cheaper way (the root where `k < |J|`); [`crate::ModelState::surprise`] runs the outputs
//! in parallel where the basis is wide enough to pay for it (`map_outputs`).
//!
//! A batch whose `z` lies three standard deviations or more above what the model expects
//! ([`surprise_deviate`]) contradicts the hyperparameters as well as the weights: a one-step
//! update fits that output's hyperparameters again ([`crate::FitOptions::refit_surprise`]).

use faer::{Mat, MatRef, Par};

use super::incremental::residual_sum_of_squares;
use super::posterior::OutputPosterior;
use super::statistics::{BatchStatistics, OutputData};

/// Whether `batch`'s Gram root ([`gram_root`]) pays for some output whose support is
/// `widest_support` wide: the root's rank is at most the batch's rows and p, so it pays only for
/// a wider support (a wide spectrum and a batch of fewer rows); each output then takes whichever
/// of the two ways is narrower ([`output_surprise`]).
pub fn needs_root(batch: &BatchStatistics, widest_support: usize) -> bool {
    let rows = batch.rows();
    let bound = if rows.is_finite() && rows >= 0.0 {
        (rows.ceil() as usize).min(batch.dim())
    } else {
        batch.dim()
    };
    bound < widest_support
}

/// The surprise `z` of one output's batch statistics `data`, its `informative` rows the
/// batch's `N′` ([`noise_rows`]), (and, where formed, the root of the batch's Gram,
/// [`gram_root`]) to the posterior `post`; `None` when the expected residual is 0 (an empty
/// batch) or `z` is not a number, the largest double where `z` passes it.
pub fn output_surprise(
    post: &OutputPosterior,
    data: OutputData<'_>,
    root: Option<MatRef<'_, f64>>,
) -> Option<f64> {
    let rss = residual_sum_of_squares(post.mean(), data);
    let trace = match root {
        Some(u) if u.ncols() < post.active().len() => post.weight_variance_sum(u),
        _ => trace_by_covariance(post, data.g),
    };
    // σ² is the noise of the rows where the output is not 0 (see `FitOptions`).
    let expected = data.informative * post.noise_variance() + trace;
    let z = rss / expected;
    // A residual beyond double precision is as surprising as a number can say: the largest
    // double, which passes every threshold, not "no surprise" (an empty batch's).
    (expected > 0.0 && !z.is_nan()).then_some(z.min(f64::MAX))
}

/// `N′` of output `k` (the module's doc): the rows of `batch` whose predictive variance holds the
/// noise of the posterior fitted on `totals`. `structural` is the posterior's support where its
/// intercept is pruned (a row in which all of it is 0 is predicted exactly 0), `None` where
/// every row is predicted from a level. Statistics without zero rows (stored before them)
/// count a zero-inflated output's non-zero rows of the batch.
pub fn noise_rows(
    totals: &BatchStatistics,
    batch: &BatchStatistics,
    k: usize,
    structural: Option<&[usize]>,
) -> f64 {
    if !totals.zero_inflated(k) {
        return batch.rows();
    }
    let nonzero = batch.output_as(k, true).informative;
    let predicted = match structural {
        None => Some(batch.rows()),
        Some(support) => batch
            .zero_regime(k, support)
            .map(|(_, zeros)| batch.rows() - zeros),
    };
    predicted.map_or(nonzero, |rows| rows.max(nonzero))
}

/// How many standard deviations a batch's surprise `z` lies above what the model expects, for
/// a batch of `rows` informative rows and a posterior whose σ² rests on `dof` residual degrees
/// of freedom (∞ for σ² taken as known).
///
/// Where the batch's residuals are mostly noise (`tr(Σ G′)` small beside `N′s`), `N′ z` is
/// `s_true/s · χ²_{N′}` and `s` is itself `s_true · χ²_ν/ν`, so `z` is about `F(N′, ν)`. Paulson's
/// normal approximation of that F (Wilson and Hilferty's cube root on both χ²) reads it as
///
/// ```text
/// w = [(1 − 2/(9ν)) z^⅓ − (1 − 2/(9N′))] / √(2/(9N′) + z^⅔ · 2/(9ν))
/// ```
///
/// standard normal under the model; with `ν = ∞` it is Wilson–Hilferty's for `χ²_{N′}/N′`, and
/// for a `z` above 1 it then bounds the finite-ν value from above (σ² known makes such a `z`
/// more surprising).
/// `NaN` for no rows.
pub fn surprise_deviate(z: f64, rows: f64, dof: f64) -> f64 {
    let a = 2.0 / (9.0 * rows);
    let b = if dof.is_finite() {
        2.0 / (9.0 * dof)
    } else {
        0.0
    };
    let cube = z.max(0.0).cbrt();
    ((1.0 - b) * cube - (1.0 - a)) / (a + cube * cube * b).sqrt()
}

/// `U` (p × k) with `G = U Uᵀ` up to the pivoted Cholesky's tolerance (`p ε` of the largest
/// diagonal), or `None` where the factorisation fails (a NaN or a negative diagonal, or a `G`
/// of zeros); the caller then reads the trace off `Σ`.
pub fn gram_root(g: MatRef<'_, f64>) -> Option<Mat<f64>> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::cholesky::llt_pivoting::factor::{
        cholesky_in_place, cholesky_in_place_scratch,
    };
    let p = g.nrows();
    let mut l = g.to_owned();
    let mut perm = vec![0usize; p];
    let mut perm_inv = vec![0usize; p];
    let mut mem = MemBuffer::new(cholesky_in_place_scratch::<usize, f64>(
        p,
        Par::Seq,
        Default::default(),
    ));
    let (info, _) = cholesky_in_place(
        l.as_mut(),
        &mut perm,
        &mut perm_inv,
        Par::Seq,
        MemStack::new(&mut mem),
        Default::default(),
    )
    .ok()?;
    // P G Pᵀ = L Lᵀ: row `perm[i]` of U is row `i` of L's first `rank` columns.
    let mut u = Mat::zeros(p, info.rank);
    for i in 0..p {
        for c in 0..info.rank.min(i + 1) {
            u[(perm[i], c)] = l[(i, c)];
        }
    }
    Some(u)
}

/// `tr(Σ G′) = Σ_{a,b ∈ J} Σ_ab G′_ba` from `Σ_JJ` itself: O(|J|³), for a support no wider
/// than the batch's rank.
pub fn trace_by_covariance(post: &OutputPosterior, g: MatRef<'_, f64>) -> f64 {
    let sigma = post.covariance_active();
    let active = post.active();
    let mut trace = 0.0;
    for (a, &i) in active.iter().enumerate() {
        for (b, &j) in active.iter().enumerate() {
            trace += sigma[(a, b)] * g[(j, i)];
        }
    }
    trace
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
    use crate::{Basis, ModelConfig, ModelState, Transform};

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
            .map(|_| state.surprise(&batch(&mut rng, 20, 0.0))[0].unwrap())
            .collect();
        let mean = agreeing.iter().sum::<f64>() / agreeing.len() as f64;
        assert!((0.85..1.15).contains(&mean), "mean surprise {mean}");
        // A 1.5 offset is 5 noise standard deviations: z ≈ 1 + 1.5² / 0.3² = 26.
        let shifted = state.surprise(&batch(&mut rng, 20, 1.5))[0].unwrap();
        assert!(shifted > 10.0, "shifted surprise {shifted}");
    }

    /// A batch whose surprise passes the largest double (a dose of 1.3·10¹⁵⁴ against a model of doses
    /// near 1) is as surprising as a number can say, not "no opinion": `None` let it pass any
    /// drift threshold and the refit it should trigger, and the API answered it as an untrained
    /// output's null.
    #[test]
    fn a_surprise_beyond_double_precision_is_the_largest_double() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let config = ModelConfig::new(Basis::new(2, true, Transform::Identity), 1);
        let state = ModelState::fit(&config, batch(&mut rng, 200, 0.0)).unwrap();
        let phi = Basis::new(2, true, Transform::Identity)
            .design(Mat::from_fn(1, 2, |_, j| [0.2, -0.1][j]).as_ref())
            .unwrap();
        let wild =
            BatchStatistics::from_design(phi.as_ref(), Mat::from_fn(1, 1, |_, _| 1.3e154).as_ref())
                .unwrap();
        assert_eq!(state.surprise(&wild)[0], Some(f64::MAX));
        assert!(surprise_deviate(f64::MAX, 1.0, 10.0).is_finite());
        // An empty batch still has no surprise.
        let empty = BatchStatistics::from_design(
            Mat::<f64>::zeros(0, 3).as_ref(),
            Mat::<f64>::zeros(0, 1).as_ref(),
        )
        .unwrap();
        assert_eq!(state.surprise(&empty)[0], None);
    }

    /// An output that is never 0 in training, measured 0 in a batch of one row where the model
    /// expects 0.3 (one noise standard deviation): as surprising as the same row measured 10⁻¹²,
    /// about 1. Counted by the batch's own zeros, the 0 made the row say nothing of the noise
    /// and its residual was weighed against `tr(ΣG′)` alone, about 70.
    #[test]
    fn a_zero_of_a_dense_output_is_a_measurement_like_any_other() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let config = ModelConfig::new(Basis::new(2, true, Transform::Identity), 1);
        let state = ModelState::fit(&config, batch(&mut rng, 200, 0.0)).unwrap();
        assert!(!state.totals().zero_inflated(0));
        let one_row = |y: f64| {
            let phi = Basis::new(2, true, Transform::Identity)
                .design(Mat::from_fn(1, 2, |_, j| [-0.35, 0.0][j]).as_ref())
                .unwrap();
            BatchStatistics::from_design(phi.as_ref(), Mat::from_fn(1, 1, |_, _| y).as_ref())
                .unwrap()
        };
        let zero = state.surprise(&one_row(0.0))[0].unwrap();
        let tiny = state.surprise(&one_row(1e-12))[0].unwrap();
        assert!((zero - tiny).abs() <= 1e-9 * tiny, "{zero} against {tiny}");
        assert!((0.3..3.0).contains(&zero), "surprise {zero}");
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
            .filter_map(|_| state.surprise(&sparse_batch(200))[0])
            .collect();
        let mean = z.iter().sum::<f64>() / z.len() as f64;
        assert!((0.5..2.0).contains(&mean), "mean surprise {mean}");
    }

    /// A dye used in three rows in ten whatever the inputs say: no input marks its use, so its
    /// posterior predicts about its mean level, 0.15 to 0.75, in every row, with a predictive
    /// variance of `s` and more. A batch in which it is 0 in every row is weighed against those
    /// variances, not against `tr(Σ G′)` alone (about 27 counted by the batch's non-zero rows),
    /// and a batch of the same plant reads 1 or less: σ² is fitted on every row's residual over
    /// the non-zero rows alone (`s = RSS / (N_inf − γ)`), wider than the rows without it scatter.
    #[test]
    fn a_batch_without_a_dye_its_inputs_do_not_mark_is_not_surprising() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(47);
        let basis = Basis::new(3, true, Transform::Identity);
        let mut plant = |rows: usize, used: f64| {
            let x = Mat::from_fn(rows, 3, |_, _| rng.random_range(0.0..1.0));
            let y = Mat::from_fn(rows, 2, |i, k| match k {
                0 => 1.0 + x[(i, 0)] - x[(i, 1)] + 0.05 * normal(&mut rng),
                _ if rng.random_bool(used) => 0.5 + 2.0 * x[(i, 0)] + 0.05 * normal(&mut rng),
                _ => 0.0,
            });
            let phi = basis.design(x.as_ref()).unwrap();
            BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
        };
        let config = ModelConfig::new(basis, 2);
        let state = ModelState::fit(&config, plant(300, 0.3)).unwrap();
        assert!(state.totals().zero_inflated(1));
        let post = state.outputs()[1].posterior().unwrap();
        let (_, structural) = state.totals().zero_regime(1, post.weighted()).unwrap();
        assert_eq!(structural, 0.0, "no row's zero is structural");
        let mean = |z: Vec<f64>| z.iter().sum::<f64>() / z.len() as f64;
        let without = mean(
            (0..50)
                .map(|_| state.surprise(&plant(5, 0.0))[1].unwrap())
                .collect(),
        );
        assert!(
            without < 2.0,
            "mean surprise of batches without the dye {without}"
        );
        let mixed = mean(
            (0..50)
                .map(|_| state.surprise(&plant(50, 0.3))[1].unwrap())
                .collect(),
        );
        assert!(
            (0.1..1.4).contains(&mixed),
            "mean surprise of the plant's batches {mixed}"
        );
    }

    /// A dye whose zeros are structural (its lab-dip dose marks its use): recipes that do not
    /// use it say nothing of its noise, so a batch of 20 such recipes and 2 that use it is as
    /// surprising as its 2 rows, about 1 on average (counting all 22 rows would read about 0.1),
    /// and a recipe whose lab dip doses it at 2 but whose bulk leaves it out (0 where the model
    /// expects 1.8, eighteen noise standard deviations) reads about 18².
    #[test]
    fn a_structural_zero_says_nothing_and_a_missing_dose_is_surprising() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(48);
        let basis = Basis::new(2, true, Transform::Identity);
        let mut recipes = |used: &[bool]| {
            let x = Mat::from_fn(used.len(), 2, |i, j| match j {
                1 if used[i] => 2.0 + rng.random_range(-1.0..1.0),
                1 => 0.0,
                _ => rng.random_range(-1.0..1.0),
            });
            let y = Mat::from_fn(used.len(), 1, |i, _| {
                if used[i] {
                    0.9 * x[(i, 1)] + 0.1 * normal(&mut rng)
                } else {
                    0.0
                }
            });
            let phi = basis.design(x.as_ref()).unwrap();
            BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
        };
        let training: Vec<bool> = (0..2000).map(|i| i % 10 == 0).collect();
        let config = ModelConfig::new(basis, 1);
        let state = ModelState::fit(&config, recipes(&training)).unwrap();
        let post = state.outputs()[0].posterior().unwrap();
        assert_eq!(
            post.prior_variance()[basis.features],
            0.0,
            "the intercept is pruned"
        );
        let unused = state.surprise(&recipes(&[false; 20]))[0];
        assert!(
            unused.is_none_or(|z| z < 1e-6),
            "recipes without the dye: {unused:?}"
        );
        let mixed: Vec<bool> = (0..22).map(|i| i < 2).collect();
        let z: Vec<f64> = (0..100)
            .map(|_| state.surprise(&recipes(&mixed))[0].unwrap())
            .collect();
        let mean = z.iter().sum::<f64>() / z.len() as f64;
        assert!((0.6..1.6).contains(&mean), "2 used among 22: {mean}");
        let phi = basis
            .design(Mat::from_fn(1, 2, |_, j| [0.0, 2.0][j]).as_ref())
            .unwrap();
        let left_out =
            BatchStatistics::from_design(phi.as_ref(), Mat::zeros(1, 1).as_ref()).unwrap();
        let left_out = state.surprise(&left_out)[0].unwrap();
        assert!(left_out > 100.0, "a dosed dye left out: {left_out}");
    }

    /// A 40-band spectrum under the default prior: a batch of fewer rows than the support
    /// takes the Gram's root, one of more rows `Σ`; either way each output's surprise is the
    /// one read off its covariance.
    #[test]
    fn the_surprise_of_a_narrow_batch_to_a_wide_model_is_the_covariance_one() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(40);
        let bands = 40;
        let basis = Basis::spectral(
            bands,
            crate::ReflectanceScale::Fraction,
            bands,
            true,
            Transform::Identity,
        );
        let mut batch = |rows: usize| {
            let x = Mat::from_fn(rows, bands, |_, _| rng.random_range(0.1..0.9));
            let y = Mat::from_fn(rows, 2, |i, k| {
                x[(i, 3 + k)] + 0.5 * x[(i, 20)] + 0.05 * normal(&mut rng)
            });
            let phi = basis.design(x.as_ref()).unwrap();
            BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
        };
        let state = ModelState::fit(&ModelConfig::new(basis, 2), batch(60)).unwrap();
        for rows in [1, 5, 12, 200] {
            let new = batch(rows);
            let root = gram_root(new.g()).unwrap();
            let z = state.surprise(&new);
            for (k, output) in state.outputs().iter().enumerate() {
                let post = output.posterior().unwrap();
                assert_eq!(
                    root.ncols() < post.active().len(),
                    rows < bands,
                    "{rows} rows"
                );
                let data = new.output_as(k, state.totals().zero_inflated(k));
                let rss = residual_sum_of_squares(post.mean(), data);
                let expected =
                    data.informative * post.noise_variance() + trace_by_covariance(post, new.g());
                let reference = rss / expected;
                let z = z[k].unwrap();
                assert!(
                    (z - reference).abs() <= 1e-9 * reference,
                    "{rows} rows, output {k}: {z} against {reference}"
                );
            }
        }
    }

    /// `z` drawn as the model says it falls where the batch's residuals are noise, `F(N′, ν)`
    /// (a batch's χ²_{N′} over `N′`, over σ²'s estimate `χ²_ν/ν`): the deviate passes 2 about
    /// as often as a standard normal does (2.28 %), for σ² known and estimated.
    #[test]
    fn the_deviate_of_a_batch_that_agrees_is_standard_normal_in_its_tail() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(23);
        let mut chi2 = |dof: usize| (0..dof).map(|_| normal(&mut rng).powi(2)).sum::<f64>();
        for (rows, dof) in [(30, None), (30, Some(12)), (5, Some(40)), (200, Some(8))] {
            let trials = 20_000;
            let beyond = (0..trials)
                .filter(|_| {
                    let s = dof.map_or(1.0, |nu| chi2(nu) / nu as f64);
                    let z = chi2(rows) / rows as f64 / s;
                    let nu = dof.map_or(f64::INFINITY, |nu| nu as f64);
                    surprise_deviate(z, rows as f64, nu) >= 2.0
                })
                .count();
            let share = beyond as f64 / trials as f64;
            assert!(
                (0.0178..0.0278).contains(&share),
                "{rows} rows, ν {dof:?}: {share}"
            );
        }
        // χ²₃₀'s 0.999 quantile is 59.703: 3.09 standard deviations.
        let w = surprise_deviate(59.703 / 30.0, 30.0, f64::INFINITY);
        assert!((w - 3.090).abs() < 0.01, "{w}");
        // A σ² known makes the same z more surprising than one estimated on 10 residuals.
        assert!(surprise_deviate(2.0, 30.0, 10.0) < surprise_deviate(2.0, 30.0, f64::INFINITY));
    }

    /// A batch shifted by 1.5 (5 noise deviations) contradicts the posterior: the update fits
    /// the output's hyperparameters again, as a refit update would, where a batch that agrees
    /// takes one step; with `refit_surprise` 0 the shifted batch takes one step too.
    #[test]
    fn a_batch_that_contradicts_the_posterior_refits_its_output() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(29);
        let config = ModelConfig::new(Basis::new(2, true, Transform::Identity), 1);
        let state = ModelState::fit(&config, batch(&mut rng, 200, 0.0)).unwrap();
        assert_eq!(state.fitted_rows(), &[200.0]);

        let agreeing = batch(&mut rng, 30, 0.0);
        let z = state.surprise(&agreeing)[0].unwrap();
        assert!(surprise_deviate(z, 30.0, f64::INFINITY) < 3.0, "{z}");
        assert_eq!(
            state.update(&config, &agreeing).unwrap().fitted_rows(),
            &[200.0]
        );

        let shifted = batch(&mut rng, 30, 1.5);
        let refitted = state.update(&config, &shifted).unwrap();
        assert_eq!(refitted.fitted_rows(), &[230.0]);
        let refit_config = ModelConfig {
            update: crate::UpdateMethod::Refit,
            ..config.clone()
        };
        assert_eq!(
            refitted.outputs(),
            state.update(&refit_config, &shifted).unwrap().outputs()
        );

        let never = ModelConfig {
            options: crate::FitOptions {
                refit_surprise: 0.0,
                ..config.options
            },
            ..config.clone()
        };
        let stepped = state.update(&never, &shifted).unwrap();
        assert_eq!(stepped.fitted_rows(), &[200.0]);
        assert_ne!(stepped.outputs(), refitted.outputs());
    }

    #[test]
    fn largest_skips_outputs_without_surprise() {
        assert_eq!(largest(&[None, Some(2.0), Some(0.5)]), Some(2.0));
        assert_eq!(largest(&[None, None]), None);
    }
}
