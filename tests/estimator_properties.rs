//! The invariants of DESIGN.md §1, on random data and on the dyeing data.

mod common;

use common::*;
use faer::Mat;
use mordant::estimator::drift::{gram_root, trace_by_covariance};
use mordant::estimator::evidence::{evidence, revivals};
use mordant::estimator::forward::forward_statistics;
use mordant::estimator::incremental::{condition, one_step};
use mordant::estimator::mixture;
use mordant::estimator::model::Predictive;
use mordant::estimator::noise_shape::{NoiseShape, POWERS};
use mordant::estimator::recipe::nnls;
use mordant::estimator::statistics::MIN_LEVEL;
use mordant::estimator::{
    Basis, BatchStatistics, FitOptions, FittedFamily, ModelConfig, ModelState, NoisePrior,
    OutputPosterior, OutputState, Prior, PriorFamily, ReflectanceScale, Transform, UpdateMethod,
    codec,
};
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The prior as a posterior of no data: `A = 0`, `c = 0`.
fn prior(v: Vec<f64>, s: f64) -> OutputPosterior {
    let n = v.iter().filter(|x| **x > 0.0).count();
    OutputPosterior::from_natural(v, s, Mat::zeros(n, n), vec![0.0; n]).expect("prior")
}

/// Prior variances with some basis functions pruned (never all of them).
fn random_prior_variances(rng: &mut ChaCha8Rng, p: usize) -> Vec<f64> {
    let mut v: Vec<f64> = (0..p)
        .map(|_| {
            if rng.random_bool(0.3) {
                0.0
            } else {
                rng.random_range(0.05..5.0)
            }
        })
        .collect();
    v[0] = 1.0;
    v
}

fn assert_symmetric_psd(cov: &Mat<f64>) {
    for i in 0..cov.nrows() {
        for j in 0..i {
            assert_eq!(
                cov[(i, j)],
                cov[(j, i)],
                "Σ not exactly symmetric at ({i},{j})"
            );
        }
    }
    let eig = cov
        .as_ref()
        .self_adjoint_eigenvalues(faer::Side::Lower)
        .expect("eigenvalues");
    let top = eig.iter().fold(0.0f64, |a, e| a.max(e.abs()));
    for e in eig {
        assert!(
            e >= -1e-12 * top.max(1e-300),
            "Σ has eigenvalue {e} (largest {top})"
        );
    }
}

/// Σ of every trained output is symmetric PSD and every predictive variance is at least `s`,
/// except at a structural zero, which predicts exactly 0 with a positive variance no larger than
/// the one answered elsewhere (`κ s`).
fn assert_uncertainty_consistent(state: &ModelState, probe: &Mat<f64>) {
    let pred = state.predict(probe.as_ref()).expect("predict");
    let phi = state.basis().design(probe.as_ref()).expect("design");
    for (k, output) in state.outputs().iter().enumerate() {
        let Some(post) = output.posterior() else {
            continue;
        };
        assert_symmetric_psd(&post.covariance_active());
        for i in 0..probe.nrows() {
            let row: Vec<f64> = phi.row(i).iter().copied().collect();
            let variance = pred.variance[(i, k)];
            if structural_zero(post, &row) {
                assert_eq!(pred.mean[(i, k)], 0.0, "structural zero at ({i},{k})");
                let otherwise = inflation(state, k) * post.noise_variance();
                assert!(
                    variance > 0.0 && variance <= otherwise,
                    "structural zero's variance {variance} at ({i},{k}), κs {otherwise}"
                );
            } else {
                assert!(
                    variance >= post.noise_variance(),
                    "variance < s at ({i},{k})"
                );
            }
        }
    }
}

/// Whether `post` predicts a structural zero for the design row `phi`: no flat intercept, and
/// every weighted basis function 0.
fn structural_zero(post: &OutputPosterior, phi: &[f64]) -> bool {
    post.flat().is_none() && post.weighted().iter().all(|&j| phi[j] == 0.0)
}

/// Output `k`'s sum of squares and the count over the rows of `phi` where every basis function
/// in `used` is 0, by brute force.
fn zero_rows_brute_force(phi: &Mat<f64>, y: &Mat<f64>, k: usize, used: &[usize]) -> (f64, f64) {
    (0..phi.nrows())
        .filter(|&r| used.iter().all(|&j| phi[(r, j)] == 0.0))
        .fold((0.0, 0.0), |(sum, count), r| {
            (sum + y[(r, k)] * y[(r, k)], count + 1.0)
        })
}

/// Equal zero rows (counts exactly: they count rows).
fn assert_same_zero_rows(a: &BatchStatistics, b: &BatchStatistics) {
    let (a, b) = (
        a.zero_rows().expect("zero rows"),
        b.zero_rows().expect("zero rows"),
    );
    assert_eq!(a.count(), b.count());
    assert!(rel_diff(&a.square().to_owned(), &b.square().to_owned()) < 1e-12);
}

/// `κ_k`, what the predictive multiplies `s + φᵀΣφ` by (1 under the plug-in predictive).
fn inflation(state: &ModelState, k: usize) -> f64 {
    let post = state.outputs()[k].posterior().expect("trained");
    state.predictive().inflation(
        state.totals().output(k).informative,
        usize::from(post.flat().is_some()),
        post.effective_parameters(),
    )
}

/// Output `k`'s predictive variance at `phi` by the textbook (`member_textbook_variance` of its
/// posterior).
fn textbook_variance(state: &ModelState, k: usize, phi: &[f64]) -> f64 {
    let post = state.outputs()[k].posterior().expect("trained");
    member_textbook_variance(state, k, post, phi)
}

/// The predictive variance at `phi` of `post` as output `k` of `state`, by the textbook: with
/// `Σ` and the data's precision `A` on the support, `φᵀΣφ` splits into the part the noise
/// drives, `φᵀΣAΣφ`, and the prior's, the rest; `κ` inflates the first and `s` only
/// ([`Predictive::StudentNoise`]), or everything.
fn member_textbook_variance(
    state: &ModelState,
    k: usize,
    post: &OutputPosterior,
    phi: &[f64],
) -> f64 {
    let (support, sigma, a) = (
        post.active(),
        post.covariance_active(),
        post.precision_data(),
    );
    let n = support.len();
    let f: Vec<f64> = support.iter().map(|&j| phi[j]).collect();
    let sf: Vec<f64> = (0..n)
        .map(|i| (0..n).map(|j| sigma[(i, j)] * f[j]).sum())
        .collect();
    let total: f64 = f.iter().zip(&sf).map(|(a, b)| a * b).sum();
    let driven: f64 = (0..n)
        .map(|i| (0..n).map(|j| sf[i] * a[(i, j)] * sf[j]).sum::<f64>())
        .sum();
    let kappa = state.predictive().inflation(
        state.totals().output(k).informative,
        usize::from(post.flat().is_some()),
        post.effective_parameters(),
    );
    let s = post.noise_variance();
    match state.predictive() {
        Predictive::StudentNoise => kappa * (s + driven) + (total - driven),
        _ => kappa * (s + total),
    }
}

fn assert_state_finite(state: &ModelState, x: &Mat<f64>) {
    let pred = state.predict(x.as_ref()).expect("predict");
    for k in 0..pred.mean.ncols() {
        for i in 0..pred.mean.nrows() {
            assert!(pred.mean[(i, k)].is_finite(), "mean ({i},{k}) not finite");
            assert!(
                pred.variance[(i, k)].is_finite(),
                "variance ({i},{k}) not finite"
            );
            assert!(
                pred.variance[(i, k)] > 0.0,
                "variance ({i},{k}) not positive"
            );
        }
    }
    for output in state.outputs() {
        if let Some(post) = output.posterior() {
            assert!(post.noise_variance().is_finite() && post.noise_variance() > 0.0);
            assert!(post.mean().iter().all(|m| m.is_finite()));
        }
    }
}

/// A random problem of three outputs with a duplicated feature (1 = 0), a constant one (2) and an
/// output that is always 0 (2).
fn degenerate_problem(seed: u64, n: usize, d: usize) -> (Mat<f64>, Mat<f64>) {
    let (mut x, mut y) = random_problem(seed, n, d, 3);
    for i in 0..n {
        x[(i, 1)] = x[(i, 0)];
        x[(i, 2)] = 5.0;
        y[(i, 2)] = 0.0;
    }
    (x, y)
}

/// The published Algorithm 2 (no noise prior) refits an output that two rows fit to
/// round-off: its noise floor, a fraction of the output's variance, is then 10⁻¹⁷, and
/// `I + D^½ G D^½ / s` has no Cholesky factor in double precision. The noise variance rises to
/// the round-off floor instead of the refit failing (`degenerate_inputs_stay_finite` found it).
#[test]
fn plain_ard_refits_an_output_the_rows_fit_to_round_off() {
    let (n, d) = (2, 5);
    let (x, y) = degenerate_problem(18013142584490541015, n, d);
    let basis = identity_basis(d);
    let config = ModelConfig {
        options: FitOptions::plain(),
        ..ModelConfig::new(basis, 3)
    };
    let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
    let one_row = stats(&basis, &rows(&x, 0..1), &rows(&y, 0..1));
    let stepped = state.update(&config, &one_row).unwrap();
    let refit = stepped.refit(&config).expect("refit");
    assert_state_finite(&refit, &x);
    let pred = refit.predict(x.as_ref()).unwrap();
    for i in 0..n {
        assert_eq!(
            pred.mean[(i, 2)],
            0.0,
            "the output that is always 0, row {i}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(48) })]

    /// Statistics add up and do not depend on row order or on how rows are split in batches.
    #[test]
    fn statistics_are_additive_and_order_free(
        seed in any::<u64>(), n in 2usize..60, d in 1usize..8, m in 1usize..4, cut in 0.0f64..1.0,
    ) {
        let (x, y) = random_problem(seed, n, d, m);
        let basis = identity_basis(d);
        let whole = stats(&basis, &x, &y);
        let split = ((n as f64) * cut) as usize;
        let mut parts = stats(&basis, &rows(&x, 0..split), &rows(&y, 0..split));
        parts.add(&stats(&basis, &rows(&x, split..n), &rows(&y, split..n))).unwrap();
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 1));
        let shuffled = stats(&basis, &pick(&x, &order), &pick(&y, &order));
        for other in [&parts, &shuffled] {
            prop_assert!(rel_diff(&whole.g().to_owned(), &other.g().to_owned()) < 1e-12);
            prop_assert!(rel_diff(&whole.b().to_owned(), &other.b().to_owned()) < 1e-12);
            prop_assert!(rel_diff_slice(whole.q(), other.q()) < 1e-12);
            prop_assert_eq!(whole.nonzero(), other.nonzero());
            prop_assert_eq!(whole.rows(), other.rows());
            assert_same_zero_rows(&whole, other);
        }
    }

    /// Mostly-zero columns (one-hot features, unused dyes) take a sparse path through the
    /// products; the statistics equal the plain dense products `ΦᵀΦ`, `ΦᵀY` all the same.
    #[test]
    fn sparse_columns_give_the_dense_products(
        seed in any::<u64>(), n in 1usize..80, p in 1usize..12, m in 1usize..6,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut sparse_matrix = |cols: usize| {
            let density: Vec<f64> = (0..cols).map(|_| [0.0, 0.03, 0.1, 0.5, 1.0][rng.random_range(0..5)]).collect();
            Mat::from_fn(n, cols, |_, j| if rng.random::<f64>() < density[j] { rng.random_range(-3.0..3.0) } else { 0.0 })
        };
        let (phi, y) = (sparse_matrix(p), sparse_matrix(m));
        let stats = BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap();
        let g = phi.transpose() * &phi;
        let b = phi.transpose() * &y;
        prop_assert!(rel_diff(&stats.g().to_owned(), &g) < 1e-13);
        prop_assert!(rel_diff(&stats.b().to_owned(), &b) < 1e-13);
        prop_assert!(stats.g() == stats.g().transpose());
        let zeros = stats.zero_rows().expect("zero rows");
        for j in 0..p {
            for k in 0..m {
                let (sum, count) = zero_rows_brute_force(&phi, &y, k, &[j]);
                prop_assert_eq!(zeros.count()[j], count);
                prop_assert!((zeros.square()[(j, k)] - sum).abs() <= 1e-13 * sum.max(1.0));
            }
        }
    }

    /// The zero regime of a set of basis functions bounds the output's sum of squares over the
    /// rows where they are all 0 from above and the rows' count from below (so the variance it
    /// gives errs wide), and is exact for one function or none, whatever the batch split.
    #[test]
    fn the_zero_regime_bounds_the_rows_where_the_used_functions_are_zero(
        seed in any::<u64>(), n in 1usize..80, p in 1usize..10, m in 1usize..4, cut in 0.0f64..1.0,
        picks in proptest::collection::vec(0usize..10, 0..4),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let density: Vec<f64> = (0..p).map(|_| [0.05, 0.3, 0.8, 1.0][rng.random_range(0..4)]).collect();
        let phi = Mat::from_fn(n, p, |_, j| if rng.random::<f64>() < density[j] { rng.random_range(-3.0..3.0) } else { 0.0 });
        let y = Mat::from_fn(n, m, |_, _| if rng.random::<f64>() < 0.5 { rng.random_range(-2.0..2.0) } else { 0.0 });
        let split = ((n as f64) * cut) as usize;
        let mut stats = BatchStatistics::from_design(rows(&phi, 0..split).as_ref(), rows(&y, 0..split).as_ref()).unwrap();
        stats.add(&BatchStatistics::from_design(rows(&phi, split..n).as_ref(), rows(&y, split..n).as_ref()).unwrap()).unwrap();
        let mut used: Vec<usize> = picks.into_iter().filter(|j| *j < p).collect();
        used.sort_unstable();
        used.dedup();
        for k in 0..m {
            let (sum, count) = zero_rows_brute_force(&phi, &y, k, &used);
            let (bound, least) = stats.zero_regime(k, &used).expect("zero rows");
            prop_assert!(bound >= sum * (1.0 - 1e-12) && least <= count, "{bound} {sum} {least} {count}");
            if used.len() <= 1 {
                prop_assert!((bound - sum).abs() <= 1e-12 * sum.max(1.0));
                prop_assert_eq!(least, count);
            }
        }
    }

    /// The posterior computed through `M = I + D^½ G D^½ / s` and its Cholesky factor agrees
    /// with the textbook form `Σ = (D⁻¹ + G/s)⁻¹`, `μ = Σ b / s` solved by LU.
    #[test]
    fn posterior_matches_the_textbook_formula(
        seed in any::<u64>(), n in 1usize..40, d in 1usize..8,
    ) {
        let (x, y) = random_problem(seed, n, d, 1);
        let basis = identity_basis(d);
        let p = basis.dim();
        let st = stats(&basis, &x, &y);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 5);
        let v: Vec<f64> = (0..p).map(|_| rng.random_range(0.1..4.0)).collect();
        let s = rng.random_range(0.05..2.0);
        let post = OutputPosterior::from_statistics(v.clone(), s, st.g(), st.b_col(0)).unwrap();
        let precision = Mat::from_fn(p, p, |i, j| {
            st.g()[(i, j)] / s + if i == j { 1.0 / v[i] } else { 0.0 }
        });
        let lu = precision.partial_piv_lu();
        let rhs = Mat::from_fn(p, 1, |j, _| st.b_col(0)[j] / s);
        use faer::linalg::solvers::{DenseSolveCore, Solve};
        let mu = lu.solve(&rhs);
        let sigma = lu.inverse();
        let mu_vec: Vec<f64> = (0..p).map(|j| mu[(j, 0)]).collect();
        prop_assert!(rel_diff_slice(&mu_vec, post.mean()) < 1e-8);
        prop_assert!(rel_diff(&sigma, &post.covariance()) < 1e-8);
    }

    /// Predictions (row by row for a few rows, sixteen at a time for more, and through faer's
    /// blocked products for a design matrix) are the textbook `φᵀμ` and
    /// `κ (s + φᵀΣAΣφ) + φᵀΣA₀Σφ` with the full covariance `Σ` (see `textbook_variance`), and a
    /// row predicts the same alone as among many others.
    #[test]
    fn predictions_match_the_textbook_formula(
        seed in any::<u64>(), n in 10usize..60, d in 1usize..8, m in 1usize..4, probe_rows in 1usize..20,
    ) {
        let (x, y) = random_problem(seed, n, d, m);
        let basis = identity_basis(d);
        let config = ModelConfig::new(basis, m);
        let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
        let (probe, _) = random_problem(seed ^ 9, probe_rows, d, 1);
        let pred = state.predict(probe.as_ref()).unwrap();
        let phi = basis.design(probe.as_ref()).unwrap();
        let design = state.predict_design(phi.as_ref());
        for (k, output) in state.outputs().iter().enumerate() {
            let Some(post) = output.posterior() else { continue };
            prop_assert_eq!(state.predictive(), Predictive::StudentNoise);
            for r in 0..probe_rows {
                prop_assert!((design.mean[(r, k)] - pred.mean[(r, k)]).abs() <= 1e-12 * (1.0 + pred.mean[(r, k)].abs()));
                prop_assert!((design.variance[(r, k)] - pred.variance[(r, k)]).abs() <= 1e-12 * pred.variance[(r, k)]);
                let f: Vec<f64> = (0..basis.dim()).map(|j| phi[(r, j)]).collect();
                let mean: f64 = f.iter().zip(post.mean()).map(|(a, b)| a * b).sum();
                let scale = f.iter().map(|v| v.abs()).sum::<f64>().max(1.0);
                prop_assert!((pred.mean[(r, k)] - mean).abs() <= 1e-10 * scale * scale * (1.0 + mean.abs()));
                let variance = textbook_variance(&state, k, &f);
                prop_assert!((pred.variance[(r, k)] - variance).abs() <= 1e-9 * variance,
                    "{} against {}", pred.variance[(r, k)], variance);
                prop_assert!(pred.variance[(r, k)] >= inflation(&state, k) * post.noise_variance());
            }
        }
        let alone = state.predict(rows(&probe, 0..1).as_ref()).unwrap();
        for k in 0..m {
            prop_assert!((alone.mean[(0, k)] - pred.mean[(0, k)]).abs() <= 1e-12 * (1.0 + pred.mean[(0, k)].abs()));
            prop_assert!((alone.variance[(0, k)] - pred.variance[(0, k)]).abs() <= 1e-12 * pred.variance[(0, k)]);
        }
    }

    /// A converged Algorithm 2 is at its fixed point: `v_j = μ_j²/γ_j` with
    /// `γ_j = 1 − Σ_jj/v_j`, and `s = RSS/(N − Σγ)`.
    #[test]
    fn evidence_converges_to_its_fixed_point(seed in any::<u64>(), n in 20usize..80, d in 1usize..6) {
        let (x, y) = random_problem(seed, n, d, 1);
        let basis = identity_basis(d);
        let st = stats(&basis, &x, &y);
        let options = FitOptions::plain();
        let noise = NoisePrior::for_output(&st, 0, None, &options);
        let start_s = st.q()[0] / st.rows();
        let fit = evidence(st.output(0), vec![1.0; basis.dim()], start_s, noise, &options).unwrap();
        prop_assume!(fit.converged);
        let post = &fit.posterior;
        let sigma = post.covariance();
        let mut gamma_sum = 0.0;
        for &j in post.active() {
            let v = post.prior_variance()[j];
            let gamma = 1.0 - sigma[(j, j)] / v;
            gamma_sum += gamma;
            let next = post.mean()[j].powi(2) / gamma;
            prop_assert!((next - v).abs() <= 1e-4 * v, "v_{j} = {v}, next {next}");
        }
        let rss = mordant::estimator::incremental::residual_sum_of_squares(post.mean(), st.output(0));
        let s = rss / (st.rows() - gamma_sum);
        prop_assert!((s - post.noise_variance()).abs() <= 1e-4 * s.max(options.noise_floor));
    }

    /// With `v` and `s` held fixed, conditioning on batches one after another gives the
    /// posterior of all their rows at once.
    #[test]
    fn fixed_hyperparameter_steps_equal_the_one_shot_posterior(
        seed in any::<u64>(), batches in 1usize..6, per_batch in 1usize..12, d in 1usize..8,
    ) {
        let n = batches * per_batch;
        let (x, y) = random_problem(seed, n, d, 2);
        let basis = identity_basis(d);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 2);
        let v = random_prior_variances(&mut rng, basis.dim());
        let s = rng.random_range(0.01..2.0);
        let total = stats(&basis, &x, &y);
        for k in 0..2 {
            let mut post = prior(v.clone(), s);
            for b in 0..batches {
                let r = b * per_batch..(b + 1) * per_batch;
                let batch = stats(&basis, &rows(&x, r.clone()), &rows(&y, r));
                post = condition(&post, batch.output(k), 1.0).unwrap();
            }
            let one_shot = OutputPosterior::from_statistics(
                v.clone(), s, total.g(), total.b_col(k)).unwrap();
            prop_assert!(rel_diff_slice(one_shot.mean(), post.mean()) < 1e-9,
                "means differ: {:?} vs {:?}", one_shot.mean(), post.mean());
            prop_assert!(rel_diff(&one_shot.covariance(), &post.covariance()) < 1e-9);
        }
    }

    /// Update method `refit` is Algorithm 2 on the concatenated rows from the current `(v, s)`,
    /// or, where that optimum pruned a basis function whose revival would raise the evidence by
    /// more than one variance's Occam factor, from the configured start if that optimum's
    /// evidence times Occam factor is the larger. (The rule is restated here; what the second
    /// start buys is `a_refit_revives_a_feature_the_first_fit_pruned`'s.)
    #[test]
    fn refit_equals_evidence_on_all_rows_from_the_same_start(
        seed in any::<u64>(), n1 in 8usize..40, n2 in 1usize..30, d in 1usize..6,
    ) {
        let (x, y) = random_problem(seed, n1 + n2, d, 2);
        let basis = identity_basis(d);
        let config = ModelConfig {
            update: UpdateMethod::Refit,
            prior: PriorFamily::Ard,
            ..ModelConfig::new(basis, 2)
        };
        let first = ModelState::fit(&config, stats(&basis, &rows(&x, 0..n1), &rows(&y, 0..n1))).unwrap();
        let refit = first
            .update(&config, &stats(&basis, &rows(&x, n1..n1 + n2), &rows(&y, n1..n1 + n2)))
            .unwrap();
        let all = stats(&basis, &x, &y);
        for k in 0..2 {
            let start = first.outputs()[k].posterior().expect("trained after the first fit");
            let noise = NoisePrior::for_output(&all, k, Some(d), &config.options);
            let warm = evidence(
                all.output(k), start.prior_variance().to_vec(), start.noise_variance(),
                noise, &config.options,
            ).unwrap();
            // The configured start: the flat intercept stays flat, every other v_j restarts.
            let start_v = start.prior_variance().iter()
                .map(|v| if v.is_infinite() { *v } else { config.prior_variance })
                .collect();
            let variance = all.output_variance(k, Some(d));
            let fresh = evidence(
                all.output(k), start_v,
                if variance > 0.0 { variance } else { 1.0 }, noise, &config.options,
            ).unwrap();
            // The second start runs where the warm optimum pruned a basis function whose
            // revival would pay its Occam factor.
            let trapped = revivals(
                all.output(k), warm.posterior.prior_variance(), warm.posterior.noise_variance(),
            ).map_or(true, |r| r.iter().any(|r| r.pays_its_occam_factor()));
            let margin = 1e-9 * warm.family_score().abs().max(1.0);
            let direct = if trapped && fresh.family_score() < warm.family_score() - margin {
                fresh.posterior
            } else {
                warm.posterior
            };
            let got = refit.outputs()[k].posterior().unwrap();
            prop_assert!(rel_diff_slice(direct.mean(), got.mean()) < 1e-6);
            prop_assert!((direct.noise_variance() - got.noise_variance()).abs()
                <= 1e-6 * direct.noise_variance());
        }
    }

    /// Σ is exactly symmetric and positive semi-definite, and the predictive variance is at
    /// least the noise variance, after a first fit and after one-step updates.
    #[test]
    fn covariance_is_psd_and_predictive_variance_at_least_noise(
        seed in any::<u64>(), n1 in 6usize..40, n2 in 1usize..20, d in 1usize..8,
    ) {
        let (x, y) = random_problem(seed, n1 + n2, d, 2);
        let basis = identity_basis(d);
        let config = ModelConfig::new(basis, 2);
        let first = ModelState::fit(&config, stats(&basis, &rows(&x, 0..n1), &rows(&y, 0..n1))).unwrap();
        let second = first
            .update(&config, &stats(&basis, &rows(&x, n1..n1 + n2), &rows(&y, n1..n1 + n2)))
            .unwrap();
        let (probe, _) = random_problem(seed ^ 3, 7, d, 1);
        for state in [&first, &second] {
            assert_uncertainty_consistent(state, &probe);
            let pred = state.predict(probe.as_ref()).unwrap();
            let phi = basis.design(probe.as_ref()).unwrap();
            for (k, output) in state.outputs().iter().enumerate() {
                let Some(post) = output.posterior() else { continue };
                let floor = inflation(state, k) * post.noise_variance();
                for i in 0..probe.nrows() {
                    let row: Vec<f64> = (0..basis.dim()).map(|j| phi[(i, j)]).collect();
                    let single = textbook_variance(state, k, &row);
                    prop_assert!((single - pred.variance[(i, k)]).abs() <= 1e-9 * single);
                    prop_assert!(pred.variance[(i, k)] >= floor * (1.0 - 1e-12));
                }
            }
        }
    }

    /// A pruned basis function (`v_j = 0`) keeps a coefficient of exactly 0 through one-step
    /// updates and refits.
    #[test]
    fn pruned_coefficients_stay_exactly_zero(
        seed in any::<u64>(), n in 4usize..40, d in 2usize..8,
    ) {
        let (x, y) = random_problem(seed, 2 * n, d, 1);
        let basis = identity_basis(d);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 4);
        let v = random_prior_variances(&mut rng, basis.dim());
        let first = stats(&basis, &rows(&x, 0..n), &rows(&y, 0..n));
        let second = stats(&basis, &rows(&x, n..2 * n), &rows(&y, n..2 * n));
        let post = OutputPosterior::from_statistics(v.clone(), 0.5, first.g(), first.b_col(0)).unwrap();
        let options = FitOptions::default();
        let noise = NoisePrior::for_output(&first, 0, Some(d), &options);
        let stepped = one_step(&post, first.rows(), second.output(0), 1.0, noise).unwrap();
        let mut total = first.clone();
        total.add(&second).unwrap();
        let refit = evidence(total.output(0), v.clone(), 0.5, noise, &options).unwrap().posterior;
        for (j, vj) in v.iter().enumerate() {
            if *vj == 0.0 {
                for got in [&post, &stepped, &refit] {
                    prop_assert_eq!(got.mean()[j], 0.0);
                    prop_assert_eq!(got.prior_variance()[j], 0.0);
                }
            }
        }
    }

    /// All-zero outputs, constant and duplicate features and single-row batches give finite
    /// states and predictions.
    #[test]
    fn degenerate_inputs_stay_finite(seed in any::<u64>(), n in 1usize..30, d in 3usize..7) {
        let (x, y) = degenerate_problem(seed, n, d);
        let basis = identity_basis(d);
        for options in [FitOptions::default(), FitOptions::plain()] {
            let config = ModelConfig { options, ..ModelConfig::new(basis, 3) };
            let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
            assert_state_finite(&state, &x);
            let one_row = stats(&basis, &rows(&x, 0..1), &rows(&y, 0..1));
            let stepped = state.update(&config, &one_row).unwrap();
            assert_state_finite(&stepped, &x);
            let refit = stepped.refit(&config).unwrap();
            assert_state_finite(&refit, &x);
            let from_one_row = ModelState::fit(&config, one_row).unwrap();
            assert_state_finite(&from_one_row, &x);
            let pred = refit.predict(x.as_ref()).unwrap();
            for i in 0..n {
                prop_assert_eq!(pred.mean[(i, 2)], 0.0);
            }
        }
    }

    /// The binary encoding reproduces a state exactly, with and without forgetting.
    #[test]
    fn encoding_round_trips(seed in any::<u64>(), n in 1usize..30, d in 1usize..6, half_life in 5.0f64..100.0) {
        let (x, y) = random_problem(seed, 2 * n, d, 2);
        let basis = identity_basis(d);
        let config = ModelConfig {
            forgetting: Some(mordant::estimator::Forgetting { half_life_rows: half_life }),
            ..ModelConfig::new(basis, 2)
        };
        let state = ModelState::fit(&config, stats(&basis, &rows(&x, 0..n), &rows(&y, 0..n)))
            .unwrap()
            .update(&config, &stats(&basis, &rows(&x, n..2 * n), &rows(&y, n..2 * n)))
            .unwrap();
        let decoded = codec::decode(&codec::encode(&state)).unwrap();
        prop_assert_eq!(decoded, state);
    }

    /// A batch's statistics survive storage exactly; any flipped byte is caught, and a model
    /// state is not mistaken for statistics.
    #[test]
    fn statistics_encoding_round_trips_and_detects_corruption(
        seed in any::<u64>(), n in 1usize..30, d in 1usize..6, m in 1usize..4, flip in any::<usize>(),
    ) {
        let (x, y) = random_problem(seed, n, d, m);
        let basis = identity_basis(d);
        let batch = stats(&basis, &x, &y);
        let blob = codec::encode_statistics(&batch);
        prop_assert_eq!(&codec::decode_statistics(&blob).unwrap(), &batch);
        let mut corrupt = blob.clone();
        let at = flip % corrupt.len();
        corrupt[at] ^= 0x20;
        prop_assert!(codec::decode_statistics(&corrupt).is_err());
        prop_assert!(codec::decode_statistics(&blob[..blob.len() - 1]).is_err());
        let state = ModelState::fit(&ModelConfig::new(basis, m), batch).unwrap();
        prop_assert!(codec::decode_statistics(&codec::encode(&state)).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(32) })]

    /// With forgetting weight `λ` and `v`, `s` fixed, a step equals the one-shot posterior on
    /// the old statistics weighted by `λ` plus the batch.
    #[test]
    fn forgetting_weighs_the_posterior_like_the_statistics(
        seed in any::<u64>(), n in 3usize..30, d in 1usize..6, weight in 0.05f64..1.0,
    ) {
        let (x, y) = random_problem(seed, 2 * n, d, 1);
        let basis = identity_basis(d);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 6);
        let v = random_prior_variances(&mut rng, basis.dim());
        let s = rng.random_range(0.05..2.0);
        let old = stats(&basis, &rows(&x, 0..n), &rows(&y, 0..n));
        let new = stats(&basis, &rows(&x, n..2 * n), &rows(&y, n..2 * n));
        let post = OutputPosterior::from_statistics(v.clone(), s, old.g(), old.b_col(0)).unwrap();
        let stepped = condition(&post, new.output(0), weight).unwrap();
        let mut weighted = old.clone();
        weighted.scale(weight);
        weighted.add(&new).unwrap();
        let direct = OutputPosterior::from_statistics(v, s, weighted.g(), weighted.b_col(0)).unwrap();
        prop_assert!(rel_diff_slice(direct.mean(), stepped.mean()) < 1e-9);
        prop_assert!(rel_diff(&direct.covariance(), &stepped.covariance()) < 1e-9);
    }
}

/// Forgetting multiplies the old statistics by `2^(−N′/h)` before adding a batch.
#[test]
fn forgetting_weighs_old_rows_down_by_the_half_life() {
    let (x, y) = random_problem(7, 30, 3, 1);
    let basis = identity_basis(3);
    let config = ModelConfig {
        forgetting: Some(mordant::estimator::Forgetting {
            half_life_rows: 10.0,
        }),
        ..ModelConfig::new(basis, 1)
    };
    let old = stats(&basis, &rows(&x, 0..20), &rows(&y, 0..20));
    let new = stats(&basis, &rows(&x, 20..30), &rows(&y, 20..30));
    let state = ModelState::fit(&config, old.clone())
        .unwrap()
        .update(&config, &new)
        .unwrap();
    let mut expected = old;
    expected.scale(0.5);
    expected.add(&new).unwrap();
    assert!(rel_diff(&expected.g().to_owned(), &state.totals().g().to_owned()) < 1e-14);
    assert_eq!(state.totals().rows(), 20.0 * 0.5 + 10.0);
}

// ---- the same invariants on the dyeing data ----

fn dyeing_rows(order: &[usize]) -> (Mat<f64>, Mat<f64>) {
    dyeing().select(order)
}

fn shuffled_dyeing(seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..dyeing().rows()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    order
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(6) })]

    #[test]
    fn dyeing_statistics_are_additive_and_order_free(seed in any::<u64>(), cut in 1usize..600) {
        let order = shuffled_dyeing(seed);
        let data = dyeing();
        let basis = identity_basis(data.x.ncols());
        let (x, y) = dyeing_rows(&order[..600]);
        let whole = stats(&basis, &x, &y);
        let mut parts = stats(&basis, &rows(&x, 0..cut), &rows(&y, 0..cut));
        parts.add(&stats(&basis, &rows(&x, cut..600), &rows(&y, cut..600))).unwrap();
        let mut sorted = order[..600].to_vec();
        sorted.sort_unstable();
        let (xs, ys) = dyeing_rows(&sorted);
        let reordered = stats(&basis, &xs, &ys);
        for other in [&parts, &reordered] {
            prop_assert!(rel_diff(&whole.g().to_owned(), &other.g().to_owned()) < 1e-12);
            prop_assert!(rel_diff(&whole.b().to_owned(), &other.b().to_owned()) < 1e-12);
            prop_assert!(rel_diff_slice(whole.q(), other.q()) < 1e-12);
            prop_assert_eq!(whole.nonzero(), other.nonzero());
            assert_same_zero_rows(&whole, other);
        }
    }

    /// On real spectra and recipes, with the `(v, s)` a first fit found, batch-by-batch
    /// conditioning equals the one-shot posterior; Σ is PSD; predictive variance ≥ s; the
    /// state survives encoding.
    #[test]
    fn dyeing_one_step_invariants(seed in any::<u64>(), batches in 1usize..4) {
        let order = shuffled_dyeing(seed);
        let data = dyeing();
        let basis = identity_basis(data.x.ncols());
        let config = ModelConfig::new(basis, data.y.ncols());
        let (x0, y0) = dyeing_rows(&order[..800]);
        let first = ModelState::fit(&config, stats(&basis, &x0, &y0)).unwrap();
        let per_batch = 150;
        let batch_stats: Vec<BatchStatistics> = (0..batches)
            .map(|b| {
                let (x, y) = dyeing_rows(&order[800 + b * per_batch..800 + (b + 1) * per_batch]);
                stats(&basis, &x, &y)
            })
            .collect();
        let mut total = BatchStatistics::zeros(basis.dim(), data.y.ncols());
        batch_stats.iter().for_each(|b| total.add(b).unwrap());
        let mut checked = 0;
        for (k, output) in first.outputs().iter().enumerate() {
            let Some(post) = output.posterior() else { continue };
            let mut stepped = post.clone();
            for b in &batch_stats {
                stepped = condition(&stepped, b.output(k), 1.0).unwrap();
            }
            // one shot: the first fit's data precision plus all new rows at once
            let direct = condition(post, total.output(k), 1.0).unwrap();
            let scale = direct.mean().iter().fold(0.0f64, |a, m| a.max(m.abs())).max(1e-12);
            let diff = direct.mean().iter().zip(stepped.mean())
                .fold(0.0f64, |a, (p, q)| a.max((p - q).abs()));
            prop_assert!(diff <= 1e-7 * scale, "output {k}: means differ by {diff} (scale {scale})");
            checked += 1;
        }
        prop_assert!(checked > 10, "only {checked} outputs trained");
        let mut state = first.clone();
        for b in &batch_stats {
            state = state.update(&config, b).unwrap();
        }
        let (probe, _) = dyeing_rows(&order[3000..3100]);
        assert_uncertainty_consistent(&state, &probe);
        prop_assert_eq!(codec::decode(&codec::encode(&state)).unwrap(), state);
    }
}

/// A spectral problem: `n` rows of `s` reflectances in (0.02, 0.98), `o` other features and `m`
/// outputs (a third of them 0), under a declared spectrum.
fn spectral_problem(
    seed: u64,
    n: usize,
    s: usize,
    o: usize,
    m: usize,
) -> (Basis, Mat<f64>, Mat<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = Mat::from_fn(n, s + o, |_, j| {
        if j < s {
            rng.random_range(0.02..0.98)
        } else {
            rng.random_range(-1.0..1.0)
        }
    });
    let y = Mat::from_fn(n, m, |_, _| {
        if rng.random_bool(0.3) {
            0.0
        } else {
            rng.random_range(0.0..3.0)
        }
    });
    let basis = Basis::spectral(
        s,
        ReflectanceScale::Fraction,
        s + o,
        true,
        Transform::KubelkaMunk,
    );
    (basis, x, y)
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(48) })]

    /// Lawson–Hanson ends at the KKT point of `min ½xᵀHx − gᵀx, x ≥ 0`: `x ≥ 0`, the gradient
    /// `g − Hx` is 0 where `x > 0` and at most 0 where `x = 0`.
    #[test]
    fn nnls_ends_at_the_kkt_point(seed in any::<u64>(), n in 1usize..9, extra in 0usize..20) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let k = n + extra;
        let a = Mat::from_fn(k, n, |_, _| rng.random_range(-1.0..1.0));
        let t: Vec<f64> = (0..k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let h = a.transpose() * &a;
        let g: Vec<f64> = (0..n).map(|i| (0..k).map(|r| a[(r, i)] * t[r]).sum()).collect();
        let x = nnls(h.as_ref(), &g).unwrap();
        let scale = g.iter().fold(1e-300f64, |m, v| m.max(v.abs()))
            + x.iter().fold(0.0f64, |m, v| m.max(v.abs())) * (0..n).fold(0.0f64, |m, i| m.max(h[(i, i)]));
        for i in 0..n {
            let gradient = g[i] - (0..n).map(|j| h[(i, j)] * x[j]).sum::<f64>();
            prop_assert!(x[i] >= 0.0);
            if x[i] > 0.0 {
                prop_assert!(gradient.abs() <= 1e-9 * scale, "free {i}: gradient {gradient}");
            } else {
                prop_assert!(gradient <= 1e-9 * scale, "bound {i}: gradient {gradient}");
            }
        }
    }

    /// A rank-deficient problem (fewer rows than unknowns, so `H` is singular) ends at a
    /// feasible point with a finite objective, or says that `H_FF` is singular; it never
    /// loops or answers NaN.
    #[test]
    fn nnls_on_a_singular_problem_ends(seed in any::<u64>(), n in 2usize..9, k in 1usize..9) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let k = k.min(n - 1);
        let a = Mat::from_fn(k, n, |_, _| rng.random_range(-1.0..1.0));
        let t: Vec<f64> = (0..k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let h = a.transpose() * &a;
        let g: Vec<f64> = (0..n).map(|i| (0..k).map(|r| a[(r, i)] * t[r]).sum()).collect();
        match nnls(h.as_ref(), &g) {
            Ok(x) => {
                prop_assert!(x.iter().all(|v| v.is_finite() && *v >= 0.0), "{x:?}");
                // Never worse than x = 0.
                let objective: f64 = 0.5 * (0..n).map(|i| x[i] * (0..n).map(|j| h[(i, j)] * x[j]).sum::<f64>()).sum::<f64>()
                    - (0..n).map(|i| g[i] * x[i]).sum::<f64>();
                prop_assert!(objective <= 1e-12, "objective {objective}");
            }
            Err(e) => prop_assert!(matches!(e, mordant::estimator::EstimatorError::NotPositiveDefinite), "{e}"),
        }
    }

    /// When the least-squares solution is positive, it is what NNLS returns.
    #[test]
    fn nnls_returns_a_positive_least_squares_solution(seed in any::<u64>(), n in 1usize..9, extra in 0usize..20) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let k = n + extra;
        let a = Mat::from_fn(k, n, |r, c| rng.random_range(-1.0..1.0) + if r == c { 3.0 } else { 0.0 });
        let truth: Vec<f64> = (0..n).map(|_| rng.random_range(0.1..2.0)).collect();
        let t: Vec<f64> = (0..k).map(|r| (0..n).map(|i| a[(r, i)] * truth[i]).sum()).collect();
        let h = a.transpose() * &a;
        let g: Vec<f64> = (0..n).map(|i| (0..k).map(|r| a[(r, i)] * t[r]).sum()).collect();
        let x = nnls(h.as_ref(), &g).unwrap();
        prop_assert!(rel_diff_slice(&x, &truth) < 1e-9, "{x:?} vs {truth:?}");
    }

    /// The forward map's statistics, assembled from the model's (with `YᵀY`), equal the
    /// statistics of the forward regression computed from the rows: `z = [y, x_o, 1]` against
    /// `K/S` of every band, each row weighted by `1 / L²` (`L` its mean K/S, at least
    /// `MIN_LEVEL`) and the weights scaled to sum to N; and they stay so when batches are added.
    #[test]
    fn forward_statistics_are_those_of_the_forward_regression(
        seed in any::<u64>(), n in 2usize..40, s in 1usize..8, o in 0usize..3, m in 1usize..4, cut in 0.0f64..1.0,
    ) {
        let (basis, x, y) = spectral_problem(seed, n, s, o, m);
        let split = ((n as f64) * cut) as usize;
        let mut model = BatchStatistics::from_rows(&basis, rows(&x, 0..split).as_ref(), rows(&y, 0..split).as_ref()).unwrap();
        model.add(&BatchStatistics::from_rows(&basis, rows(&x, split..n).as_ref(), rows(&y, split..n).as_ref()).unwrap()).unwrap();
        let forward = forward_statistics(&model, &basis).unwrap();
        let ks = Mat::from_fn(n, s, |i, l| Transform::KubelkaMunk.apply(x[(i, l)]));
        let weight: Vec<f64> = (0..n)
            .map(|i| (0..s).map(|l| ks[(i, l)]).sum::<f64>() / s as f64)
            .map(|level| level.max(MIN_LEVEL).powi(-2))
            .collect();
        let scale = n as f64 / weight.iter().sum::<f64>();
        let root: Vec<f64> = weight.iter().map(|w| (w * scale).sqrt()).collect();
        let z = Mat::from_fn(n, m + o + 1, |i, j| {
            root[i] * match j {
                j if j < m => y[(i, j)],
                j if j < m + o => x[(i, s + j - m)],
                _ => 1.0,
            }
        });
        let ks = Mat::from_fn(n, s, |i, l| root[i] * ks[(i, l)]);
        let direct = stats(&Basis::new(m + o + 1, false, Transform::Identity), &z, &ks);
        prop_assert!(rel_diff(&forward.g().to_owned(), &direct.g().to_owned()) < 1e-12);
        prop_assert!(rel_diff(&forward.b().to_owned(), &direct.b().to_owned()) < 1e-12);
        prop_assert!(rel_diff_slice(forward.q(), direct.q()) < 1e-12);
        prop_assert_eq!(forward.rows(), n as f64);
    }

    /// An output added to a live model is the output declared from the start: the rows learnt
    /// before it carried 0 for it, so the appended statistics are those rows' statistics with the
    /// output declared (YᵀY, the zero rows, the build-up statistics and their weighted copy
    /// included), it is untrained until its informative rows arrive, and after the next batch
    /// (which carries it) every prediction is the declared model's.
    #[test]
    fn an_output_added_later_is_the_output_declared_from_the_start(
        seed in any::<u64>(), n in 12usize..40, s in 2usize..7, o in 0usize..3, m in 1usize..3, cut in 0.3f64..0.8,
    ) {
        let (basis, x, mut y) = spectral_problem(seed, n, s, o, m + 1);
        let split = ((n as f64) * cut) as usize;
        for i in 0..split {
            y[(i, m)] = 0.0;
        }
        let old_y = Mat::from_fn(n, m, |i, k| y[(i, k)]);
        let first = |y: &Mat<f64>| BatchStatistics::from_rows(&basis, rows(&x, 0..split).as_ref(), rows(y, 0..split).as_ref()).unwrap();
        let declared_config = ModelConfig::new(basis, m + 1);
        let declared = ModelState::fit(&declared_config, first(&y)).unwrap();
        let added = ModelState::fit(&ModelConfig::new(basis, m), first(&old_y)).unwrap().with_output_appended();
        let (a, b) = (declared.totals(), added.totals());
        prop_assert_eq!((b.dim(), b.outputs(), b.rows()), (a.dim(), a.outputs(), a.rows()));
        prop_assert!(rel_diff(&a.g().to_owned(), &b.g().to_owned()) < 1e-12);
        prop_assert!(rel_diff(&a.b().to_owned(), &b.b().to_owned()) < 1e-12);
        prop_assert!(rel_diff_slice(a.q(), b.q()) < 1e-12);
        prop_assert_eq!(a.nonzero(), b.nonzero());
        prop_assert!(rel_diff(&a.output_products().unwrap().to_owned(), &b.output_products().unwrap().to_owned()) < 1e-12);
        let (za, zb) = (a.zero_rows().unwrap(), b.zero_rows().unwrap());
        prop_assert_eq!(za.count(), zb.count());
        prop_assert!(rel_diff(&za.square().to_owned(), &zb.square().to_owned()) < 1e-12);
        let (ua, ub) = (a.build_up().unwrap(), b.build_up().unwrap());
        prop_assert!(rel_diff(&ua.gram().to_owned(), &ub.gram().to_owned()) < 1e-12);
        prop_assert!(rel_diff(&ua.design().to_owned(), &ub.design().to_owned()) < 1e-12);
        let (ra, rb) = (ua.relative().unwrap(), ub.relative().unwrap());
        prop_assert!(rel_diff(&ra.gram().to_owned(), &rb.gram().to_owned()) < 1e-12);
        prop_assert!(rel_diff(&ra.design().to_owned(), &rb.design().to_owned()) < 1e-12);
        prop_assert!(rel_diff(&ra.fabric().to_owned(), &rb.fabric().to_owned()) < 1e-12);
        prop_assert!((ra.weight() - rb.weight()).abs() <= 1e-12 * ra.weight());
        prop_assert!(matches!(added.outputs()[m], OutputState::Untrained));
        prop_assert_eq!(added.outputs()[m].posterior().is_some(), declared.outputs()[m].posterior().is_some());
        prop_assert_eq!(added.fitted_rows(), declared.fitted_rows());
        // The statistics agree to round-off (ΦᵀY's product rounds differently with one column
        // more); the evidence approximation's iterations carry that to its own tolerance, as a
        // refit does (above).
        let (pa, pb) = (declared.predict(x.as_ref()).unwrap(), added.predict(x.as_ref()).unwrap());
        prop_assert!(rel_diff(&pa.mean, &pb.mean) < 1e-6, "{}", rel_diff(&pa.mean, &pb.mean));
        prop_assert!(rel_diff(&pa.variance, &pb.variance) < 1e-6);
        // The next batch carries the new output: both learn it alike.
        let batch = BatchStatistics::from_rows(&basis, rows(&x, split..n).as_ref(), rows(&y, split..n).as_ref()).unwrap();
        let (declared, added) = (declared.update(&declared_config, &batch).unwrap(), added.update(&declared_config, &batch).unwrap());
        for k in 0..=m {
            prop_assert_eq!(added.outputs()[k].posterior().is_some(), declared.outputs()[k].posterior().is_some());
        }
        let (pa, pb) = (declared.predict(x.as_ref()).unwrap(), added.predict(x.as_ref()).unwrap());
        prop_assert!(rel_diff(&pa.mean, &pb.mean) < 1e-6, "{}", rel_diff(&pa.mean, &pb.mean));
        prop_assert!(rel_diff(&pa.variance, &pb.variance) < 1e-6);
    }

    /// A named feature added to a live model, 0 in every row learnt before (a new fabric
    /// indicator), is the feature declared from the start: the statistics are those rows' with
    /// it declared, each trained output's posterior is the one-shot posterior of them with the
    /// same hyperparameters (and the new weight's prior variance), and rows without the feature
    /// are predicted as before.
    #[test]
    fn a_feature_added_later_is_the_feature_declared_from_the_start(
        seed in any::<u64>(), n in 12usize..40, s in 2usize..7, o in 0usize..3, m in 1usize..3,
    ) {
        let (basis, mut x, y) = spectral_problem(seed, n, s, o + 1, m);
        let new = s + o;
        for i in 0..n {
            x[(i, new)] = 0.0;
        }
        let old_basis = Basis::spectral(s, ReflectanceScale::Fraction, s + o, true, Transform::KubelkaMunk);
        let old_x = Mat::from_fn(n, s + o, |i, j| x[(i, j)]);
        let old = ModelState::fit(
            &ModelConfig::new(old_basis, m),
            BatchStatistics::from_rows(&old_basis, old_x.as_ref(), y.as_ref()).unwrap(),
        ).unwrap();
        let added = old.with_feature_appended(1.0).unwrap();
        prop_assert_eq!(*added.basis(), basis);
        let declared = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let got = added.totals();
        prop_assert!(rel_diff(&declared.g().to_owned(), &got.g().to_owned()) < 1e-12);
        prop_assert!(rel_diff(&declared.b().to_owned(), &got.b().to_owned()) < 1e-12);
        prop_assert!(rel_diff_slice(declared.q(), got.q()) < 1e-12);
        let (za, zb) = (declared.zero_rows().unwrap(), got.zero_rows().unwrap());
        prop_assert_eq!(za.count(), zb.count());
        prop_assert!(rel_diff(&za.square().to_owned(), &zb.square().to_owned()) < 1e-12);
        let (ua, ub) = (declared.build_up().unwrap(), got.build_up().unwrap());
        prop_assert!(rel_diff(&ua.design().to_owned(), &ub.design().to_owned()) < 1e-12);
        let (ra, rb) = (ua.relative().unwrap(), ub.relative().unwrap());
        prop_assert!(rel_diff(&ra.design().to_owned(), &rb.design().to_owned()) < 1e-12);
        prop_assert!(rel_diff(&ra.fabric().to_owned(), &rb.fabric().to_owned()) < 1e-12);
        for k in 0..m {
            prop_assert_eq!(added.outputs()[k].posterior().is_some(), old.outputs()[k].posterior().is_some());
            let Some(post) = added.outputs()[k].posterior() else { continue };
            let b: Vec<f64> = (0..declared.dim()).map(|j| declared.b()[(j, k)]).collect();
            let one_shot = OutputPosterior::from_statistics(post.prior().clone(), post.noise_variance(), declared.g(), &b).unwrap();
            prop_assert!(rel_diff_slice(one_shot.mean(), post.mean()) < 1e-9);
            prop_assert!(rel_diff(&one_shot.covariance(), &post.covariance()) < 1e-9);
            prop_assert_eq!(post.mean()[new], 0.0);
        }
        let (before, after) = (old.predict(old_x.as_ref()).unwrap(), added.predict(x.as_ref()).unwrap());
        prop_assert!(rel_diff(&before.mean, &after.mean) < 1e-9);
        prop_assert!(rel_diff(&before.variance, &after.variance) < 1e-9);
    }

    /// `YᵀY` survives storage, in a batch's statistics and in a model state.
    #[test]
    fn output_products_survive_encoding(seed in any::<u64>(), n in 5usize..40, s in 1usize..6, m in 1usize..4) {
        let (basis, x, y) = spectral_problem(seed, n, s, 1, m);
        let batch = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        prop_assert!(batch.output_products().is_some());
        let decoded = codec::decode_statistics(&codec::encode_statistics(&batch)).unwrap();
        prop_assert_eq!(&decoded, &batch);
        let state = ModelState::fit(&ModelConfig::new(basis, m), batch).unwrap();
        let decoded = codec::decode(&codec::encode(&state)).unwrap();
        prop_assert!(decoded.totals().output_products().is_some());
        prop_assert_eq!(decoded, state);
    }
}

/// A random prior of any family over the basis of `identity_basis(d)` read as `d` bands and an
/// intercept: diagonal (some pruned) or smooth over the bands, with a flat or finite intercept.
fn random_prior(rng: &mut ChaCha8Rng, d: usize) -> Prior {
    let p = d + 1;
    let flat = rng.random_bool(0.7);
    let mut prior = if d >= 2 && rng.random_bool(0.5) {
        let amplitude = rng.random_range(0.1..4.0);
        let mut variance = vec![amplitude; p];
        variance[d] = rng.random_range(0.1..4.0);
        Prior {
            family: FittedFamily::Smooth,
            variance,
            smooth: Some(mordant::estimator::prior::Smooth {
                bands: d,
                length: rng.random_range(0.3..1.5),
            }),
        }
    } else {
        Prior::diagonal(FittedFamily::Ard, random_prior_variances(rng, p))
    };
    if flat {
        prior.variance[d] = f64::INFINITY;
    }
    prior
}

/// The prior covariance `S` of the weighted basis functions as a dense p × p matrix, and the
/// textbook precision `S⁻¹ + G/s` (0 prior precision for a flat entry, none for pruned ones,
/// which the caller drops).
fn textbook_precision(prior: &Prior, g: faer::MatRef<'_, f64>, s: f64) -> (Vec<usize>, Mat<f64>) {
    use faer::linalg::solvers::DenseSolveCore;
    let support: Vec<usize> = (0..prior.dim())
        .filter(|&j| prior.variance[j] > 0.0)
        .collect();
    let weighted = prior.weighted();
    let dense = prior.factor().unwrap().to_dense();
    let cov = &dense * dense.transpose();
    let cov_inv = cov.partial_piv_lu().inverse();
    let n = support.len();
    let precision = Mat::from_fn(n, n, |a, b| {
        let (i, j) = (support[a], support[b]);
        let prior_part = match (weighted.binary_search(&i), weighted.binary_search(&j)) {
            (Ok(wi), Ok(wj)) => cov_inv[(wi, wj)],
            _ => 0.0,
        };
        g[(i, j)] / s + prior_part
    });
    (support, precision)
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(48) })]

    /// For every prior family, with a flat or a finite intercept, the posterior computed through
    /// the eliminated intercept and `M = I + RᵀA_cR` equals the textbook
    /// `Σ = (S⁻¹ + G/s)⁻¹`, `μ = Σ b / s` solved by LU on the support.
    #[test]
    fn every_prior_matches_the_textbook_posterior(
        seed in any::<u64>(), n in 3usize..40, d in 1usize..7,
    ) {
        use faer::linalg::solvers::{DenseSolveCore, Solve};
        let (x, y) = random_problem(seed, n, d, 1);
        let basis = identity_basis(d);
        let st = stats(&basis, &x, &y);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 11);
        let prior = random_prior(&mut rng, d);
        let s = rng.random_range(0.05..2.0);
        let post = OutputPosterior::from_statistics(prior.clone(), s, st.g(), st.b_col(0)).unwrap();
        let (support, precision) = textbook_precision(&prior, st.g(), s);
        let lu = precision.partial_piv_lu();
        let rhs = Mat::from_fn(support.len(), 1, |a, _| st.b_col(0)[support[a]] / s);
        let mu = lu.solve(&rhs);
        let sigma = lu.inverse();
        let mut mu_full = vec![0.0; basis.dim()];
        for (a, &j) in support.iter().enumerate() {
            mu_full[j] = mu[(a, 0)];
        }
        prop_assert!(rel_diff_slice(&mu_full, post.mean()) < 1e-7, "{:?} vs {:?}", mu_full, post.mean());
        prop_assert!(rel_diff(&sigma, &post.covariance_active()) < 1e-7);
        assert_symmetric_psd(&post.covariance_active());
    }

    /// The lower trapezoidal factor predictions use is a factor of the posterior covariance
    /// (`TᵀT = FᵀF = Σ_WW`), with nothing past each row's leading part, for every prior family,
    /// with a smooth kernel of full rank and one truncated to a few eigenvalues (a length scale
    /// far longer than the bands), pruned functions and a flat or finite intercept.
    #[test]
    fn the_trapezoidal_factor_is_a_factor_of_the_covariance(
        seed in any::<u64>(), n in 3usize..40, d in 1usize..9, long in any::<bool>(),
    ) {
        let (x, y) = random_problem(seed, n, d, 1);
        let basis = identity_basis(d);
        let st = stats(&basis, &x, &y);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 31);
        let mut prior = random_prior(&mut rng, d);
        if long && let Some(smooth) = prior.smooth.as_mut() {
            smooth.length = rng.random_range(1e3..1e5);
        }
        let s = rng.random_range(0.05..2.0);
        let post = OutputPosterior::from_statistics(prior, s, st.g(), st.b_col(0)).unwrap();
        let f = post.covariance_factor();
        let t = post.covariance_factor_trapezoidal();
        let (k, w) = (t.nrows(), t.ncols());
        prop_assert_eq!(w, f.ncols());
        prop_assert_eq!(k, f.nrows().min(w));
        for i in 0..k {
            for j in w - k + i + 1..w {
                prop_assert_eq!(t[(i, j)], 0.0, "T[{}, {}] past row {}'s leading part", i, j, i);
            }
        }
        let sigma = f.transpose() * &f;
        let from_t = t.transpose() * &t;
        let scale = sigma.norm_max().max(f64::MIN_POSITIVE);
        prop_assert!((&from_t - &sigma).norm_max() <= 1e-12 * scale * w.max(1) as f64,
            "TᵀT and FᵀF differ by {} (scale {})", (&from_t - &sigma).norm_max(), scale);
        // The noise-inflated factor: Σ_WW + (κ − 1) Σ_WW A_c Σ_WW, with A_c the data's precision
        // on W with the flat intercept eliminated (its Schur complement), leading parts alike.
        let kappa = rng.random_range(1.0..4.0);
        let inflated = post.noise_inflated_factor_trapezoidal(kappa);
        prop_assert_eq!((inflated.nrows(), inflated.ncols()), (k, w));
        for i in 0..k {
            for j in w - k + i + 1..w {
                prop_assert_eq!(inflated[(i, j)], 0.0, "inflated[{}, {}]", i, j);
            }
        }
        let at = |j: usize| post.active().binary_search(&j).unwrap();
        let a = post.precision_data();
        let weighted = post.weighted();
        let a_c = Mat::from_fn(w, w, |i, l| {
            let (ji, jl) = (at(weighted[i]), at(weighted[l]));
            match post.flat() {
                None => a[(ji, jl)],
                Some(flat) => {
                    let fp = at(flat.index);
                    a[(ji, jl)] - a[(ji, fp)] * a[(jl, fp)] / a[(fp, fp)]
                }
            }
        });
        let expected = &sigma + (&sigma * &a_c * &sigma) * (kappa - 1.0);
        let from_inflated = inflated.transpose() * &inflated;
        let scale = expected.norm_max().max(f64::MIN_POSITIVE);
        prop_assert!((&from_inflated - &expected).norm_max() <= 1e-9 * scale * w.max(1) as f64,
            "the inflated factor is off by {} (scale {})", (&from_inflated - &expected).norm_max(), scale);
    }

    /// With the prior and `s` held fixed, one-step conditioning on batches one after another
    /// equals the one-shot posterior of all rows, for every prior family and a flat intercept.
    #[test]
    fn steps_equal_the_one_shot_posterior_for_every_prior(
        seed in any::<u64>(), batches in 1usize..5, per_batch in 1usize..10, d in 1usize..7,
    ) {
        let n = batches * per_batch;
        let (x, y) = random_problem(seed, n, d, 1);
        let basis = identity_basis(d);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 12);
        let prior = random_prior(&mut rng, d);
        let s = rng.random_range(0.05..2.0);
        let first = stats(&basis, &rows(&x, 0..per_batch), &rows(&y, 0..per_batch));
        let mut post = OutputPosterior::from_statistics(prior.clone(), s, first.g(), first.b_col(0)).unwrap();
        for b in 1..batches {
            let r = b * per_batch..(b + 1) * per_batch;
            let batch = stats(&basis, &rows(&x, r.clone()), &rows(&y, r));
            post = condition(&post, batch.output(0), 1.0).unwrap();
        }
        let total = stats(&basis, &x, &y);
        let one_shot = OutputPosterior::from_statistics(prior, s, total.g(), total.b_col(0)).unwrap();
        prop_assert!(rel_diff_slice(one_shot.mean(), post.mean()) < 1e-8);
        prop_assert!(rel_diff(&one_shot.covariance(), &post.covariance()) < 1e-8);
    }

    /// The expected residual of a batch, `tr(Σ G′)`, from the root of `G′` (pivoted Cholesky,
    /// every rank from one row to more rows than basis functions) equals the trace of the
    /// posterior covariance against the batch's Gram, for every prior family with or without a
    /// flat intercept and pruned functions.
    #[test]
    fn the_surprise_trace_from_the_gram_root_is_the_covariance_trace(
        seed in any::<u64>(), first in 1usize..30, batch_rows in 1usize..30, d in 1usize..12,
    ) {
        let (x, y) = random_problem(seed, first + batch_rows, d, 1);
        let basis = identity_basis(d);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 29);
        let prior = random_prior(&mut rng, d);
        let s = rng.random_range(0.05..2.0);
        let old = stats(&basis, &rows(&x, 0..first), &rows(&y, 0..first));
        let post = OutputPosterior::from_statistics(prior, s, old.g(), old.b_col(0)).unwrap();
        let batch = stats(&basis, &rows(&x, first..first + batch_rows), &rows(&y, first..first + batch_rows));
        let g = batch.g();
        let trace = trace_by_covariance(&post, g);
        let root = gram_root(g).unwrap();
        let from_root = post.weight_variance_sum(root.as_ref());
        prop_assert!(trace > 0.0);
        prop_assert!((from_root - trace).abs() <= 1e-9 * trace, "{from_root} vs {trace}");
    }

    /// The intercept is free: adding a constant to every target moves the intercept by it and
    /// leaves every other coefficient, σ² and every predictive variance unchanged, whatever the
    /// prior family; it is never pruned.
    #[test]
    fn a_flat_intercept_is_never_shrunk(
        seed in any::<u64>(), n in 12usize..50, d in 1usize..6, shift in -50.0f64..50.0,
        family in 0usize..4,
    ) {
        let (x, y) = random_problem(seed, n, d, 1);
        let shifted = Mat::from_fn(n, 1, |i, _| y[(i, 0)] + shift);
        let basis = Basis::spectral(d, ReflectanceScale::Fraction, d, true, Transform::Identity);
        let prior = [PriorFamily::Ard, PriorFamily::Ridge, PriorFamily::Smooth, PriorFamily::Auto][family];
        let config = ModelConfig { prior, ..ModelConfig::new(basis, 1) };
        let a = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
        let b = ModelState::fit(&config, stats(&basis, &x, &shifted)).unwrap();
        let (pa, pb) = (a.outputs()[0].posterior().unwrap(), b.outputs()[0].posterior().unwrap());
        prop_assert_eq!(pa.prior_variance()[d], f64::INFINITY);
        let scale = 1.0 + y.col(0).iter().fold(0.0f64, |m, v| m.max(v.abs())) + shift.abs();
        for j in 0..d {
            prop_assert!((pa.mean()[j] - pb.mean()[j]).abs() <= 1e-7 * scale, "w_{} moved", j);
        }
        prop_assert!((pb.mean()[d] - pa.mean()[d] - shift).abs() <= 1e-7 * scale);
        prop_assert!((pa.noise_variance() - pb.noise_variance()).abs() <= 1e-6 * pa.noise_variance());
        let (pred_a, pred_b) = (a.predict(x.as_ref()).unwrap(), b.predict(x.as_ref()).unwrap());
        for i in 0..n {
            prop_assert!((pred_b.mean[(i, 0)] - pred_a.mean[(i, 0)] - shift).abs() <= 1e-7 * scale);
            prop_assert!((pred_b.variance[(i, 0)] - pred_a.variance[(i, 0)]).abs() <= 1e-6 * pred_a.variance[(i, 0)]);
        }
    }

    /// Every family's state, smooth priors included, survives the encoding exactly.
    #[test]
    fn every_family_round_trips(seed in any::<u64>(), n in 4usize..30, d in 2usize..8, family in 0usize..4) {
        let (x, y) = random_problem(seed, n, d, 2);
        let basis = Basis::spectral(d, ReflectanceScale::Percent, d, true, Transform::Identity);
        let prior = [PriorFamily::Ard, PriorFamily::Ridge, PriorFamily::Smooth, PriorFamily::Auto][family];
        let config = ModelConfig { prior, ..ModelConfig::new(basis, 2) };
        let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
        let decoded = codec::decode(&codec::encode(&state)).unwrap();
        prop_assert_eq!(decoded, state);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// An output fitted under a shared-scale prior over a declared spectrum predicts by its
    /// model average over the prior shapes the evidence leaves close: after the first fit and
    /// after one-step updates (which keep the alternates' hyperparameters and fold their rows
    /// through the statistics), the answer is the mixture's mean `Σ w_j φᵀμ_j` and variance
    /// `Σ w_j (V_j + (φᵀμ_j)²) − mean²` of its members by the textbook, with weights that sum to
    /// 1, and never below the members' averaged noise.
    #[test]
    fn an_averaged_output_predicts_the_mixture_of_its_members(
        seed in any::<u64>(), n1 in 8usize..40, n2 in 1usize..20, d in 4usize..16, family in 0usize..2,
    ) {
        let (x, y) = random_problem(seed, n1 + n2, d, 2);
        let basis = Basis::spectral(d, ReflectanceScale::Fraction, d, true, Transform::Identity);
        let prior = [PriorFamily::Smooth, PriorFamily::Auto][family];
        let config = ModelConfig { prior, ..ModelConfig::new(basis, 2) };
        let first = ModelState::fit(&config, stats(&basis, &rows(&x, 0..n1), &rows(&y, 0..n1))).unwrap();
        let second = first
            .update(&config, &stats(&basis, &rows(&x, n1..n1 + n2), &rows(&y, n1..n1 + n2)))
            .unwrap();
        let (probe, _) = random_problem(seed ^ 5, 6, d, 1);
        let phi = basis.design(probe.as_ref()).unwrap();
        for state in [&first, &second] {
            let pred = state.predict(probe.as_ref()).unwrap();
            let predictor = mordant::estimator::Predictor::new(state);
            for k in 0..2 {
                let Some(members) = mixture::members(state, k) else {
                    prop_assert!(state.alternates(k).is_empty());
                    continue;
                };
                let members = members.unwrap();
                prop_assert_eq!(members.len(), 1 + state.alternates(k).len());
                let total: f64 = members.iter().map(|m| m.0).sum();
                prop_assert!((total - 1.0).abs() < 1e-12 && members.iter().all(|m| m.0 >= 0.0));
                let noise = predictor.noise_variance(k).unwrap();
                for i in 0..probe.nrows() {
                    let f: Vec<f64> = (0..basis.dim()).map(|j| phi[(i, j)]).collect();
                    let (mut mean, mut second_moment) = (0.0, 0.0);
                    for (w, member) in &members {
                        let m: f64 = f.iter().zip(member.mean()).map(|(a, b)| a * b).sum();
                        let v = member_textbook_variance(state, k, member, &f);
                        mean += w * m;
                        second_moment += w * (v + m * m);
                    }
                    let variance = second_moment - mean * mean;
                    let scale = f.iter().map(|v| v.abs()).sum::<f64>().max(1.0);
                    prop_assert!((pred.mean[(i, k)] - mean).abs() <= 1e-9 * scale * (1.0 + mean.abs()),
                        "mean {} against {}", pred.mean[(i, k)], mean);
                    prop_assert!((pred.variance[(i, k)] - variance).abs() <= 1e-7 * variance,
                        "variance {} against {}", pred.variance[(i, k)], variance);
                    prop_assert!(pred.variance[(i, k)] >= noise * (1.0 - 1e-12));
                }
            }
            prop_assert_eq!(&codec::decode(&codec::encode(state)).unwrap(), state);
        }
        // An output not fitted again (its fitted rows unchanged) keeps its alternates.
        for k in 0..2 {
            if second.fitted_rows()[k] == first.fitted_rows()[k] {
                prop_assert_eq!(first.alternates(k), second.alternates(k));
            }
        }
    }
}

/// Smooth coefficient curves over 60 bands with 25 training rows: the smooth prior finds a
/// length scale, and predicts held-out rows better than ridge, which ignores the order.
#[test]
fn a_smooth_curve_is_learnt_better_with_the_smooth_prior() {
    let bands = 60;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    // Spectra: smooth bumps plus independent noise per band; a smooth coefficient curve.
    let spectrum = |rng: &mut ChaCha8Rng| -> Vec<f64> {
        let (c, w, h) = (
            rng.random_range(0.0..60.0),
            rng.random_range(5.0..20.0),
            rng.random_range(0.2..1.0),
        );
        let (c2, h2) = (rng.random_range(0.0..60.0), rng.random_range(0.2..1.0));
        (0..bands)
            .map(|j| {
                let t = j as f64;
                h * (-(t - c).powi(2) / (2.0 * w * w)).exp()
                    + h2 * (-(t - c2).powi(2) / 200.0).exp()
                    + 0.3 * rng.random::<f64>()
            })
            .collect()
    };
    let coefficient: Vec<f64> = (0..bands).map(|j| (j as f64 / 9.0).sin()).collect();
    let make = |rng: &mut ChaCha8Rng, n: usize| {
        let xs: Vec<Vec<f64>> = (0..n).map(|_| spectrum(rng)).collect();
        let x = Mat::from_fn(n, bands, |i, j| xs[i][j]);
        let y = Mat::from_fn(n, 1, |i, _| {
            2.0 + xs[i]
                .iter()
                .zip(&coefficient)
                .map(|(a, b)| a * b)
                .sum::<f64>()
                + 0.5 * (rng.random::<f64>() - 0.5)
        });
        (x, y)
    };
    let (x, y) = make(&mut rng, 25);
    let (xt, yt) = make(&mut rng, 200);
    let basis = spectrum_basis(bands);
    let rmse = |prior| {
        let config = ModelConfig {
            prior,
            ..ModelConfig::new(basis, 1)
        };
        let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
        let pred = state.predict(xt.as_ref()).unwrap();
        let family = state.outputs()[0].posterior().unwrap().prior().family;
        let mse = (0..200)
            .map(|i| (pred.mean[(i, 0)] - yt[(i, 0)]).powi(2))
            .sum::<f64>()
            / 200.0;
        (mse.sqrt(), family)
    };
    let (smooth, family) = rmse(PriorFamily::Smooth);
    let (ridge, _) = rmse(PriorFamily::Ridge);
    let (auto, auto_family) = rmse(PriorFamily::Auto);
    assert_eq!(family, FittedFamily::Smooth);
    assert!(smooth < 0.9 * ridge, "smooth {smooth} vs ridge {ridge}");
    assert_eq!(
        auto_family,
        FittedFamily::Smooth,
        "auto chose {auto_family:?}"
    );
    assert_eq!(auto, smooth);
}

/// Models of one grid share a length scale's `K_ℓ^½` (each decoding of a state finds the one
/// its fit formed), and the process does not keep a kernel that no model holds.
#[test]
fn models_share_a_kernel_while_one_holds_it() {
    use mordant::estimator::prior::{Factor, KernelRoot};
    use std::sync::{Arc, Weak};
    // A band count no other test uses, so no other model holds these kernels.
    let (bands, n) = (37, 30);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let x = Mat::from_fn(n, bands, |i, j| {
        0.5 + 0.3 * ((i + 1) as f64 * j as f64 / 50.0).cos() + 0.05 * rng.random::<f64>()
    });
    let y = Mat::from_fn(n, 1, |i, _| {
        (0..bands)
            .map(|j| x[(i, j)] * (j as f64 / 6.0).sin())
            .sum::<f64>()
            + 0.1 * (rng.random::<f64>() - 0.5)
    });
    let basis = spectrum_basis(bands);
    let config = ModelConfig {
        prior: PriorFamily::Smooth,
        ..ModelConfig::new(basis, 1)
    };
    let kernel = |state: &ModelState| match state.outputs()[0].posterior().unwrap().factor() {
        Factor::Smooth { kernel, .. } => Arc::clone(kernel),
        other => panic!("not smooth: {other:?}"),
    };
    let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
    let blob = codec::encode(&state);
    let (first, second) = (codec::decode(&blob).unwrap(), codec::decode(&blob).unwrap());
    assert!(Arc::ptr_eq(&kernel(&state), &kernel(&first)));
    assert!(Arc::ptr_eq(&kernel(&first), &kernel(&second)));
    assert_eq!(first, state);
    let held: Weak<KernelRoot> = Arc::downgrade(&kernel(&state));
    let before: Mat<f64> = (**kernel(&state)).clone();
    drop((state, first, second));
    assert!(
        held.upgrade().is_none(),
        "the process kept a kernel no model holds"
    );
    // Formed again when a model needs it, equal to the one before.
    let again = codec::decode(&blob).unwrap();
    assert_eq!(**kernel(&again), before);
    assert_eq!(codec::encode(&again), blob);
}

/// The outputs of a smooth model that settle on one length scale share one `K_ℓ^½` (a
/// 700-band spectrum's is 3.75 MiB) after the first fit, after a one-step update and after
/// decoding, and each posterior formed afresh from its prior and natural parameters is the
/// same, to the bit.
#[test]
fn outputs_at_one_length_scale_share_their_kernel() {
    use mordant::estimator::prior::{Factor, KernelRoot};
    use std::sync::Arc;
    let (bands, n) = (40, 30);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let curve: Vec<f64> = (0..bands).map(|j| (j as f64 / 7.0).sin()).collect();
    let rows = |rng: &mut ChaCha8Rng, n: usize| {
        let x = Mat::from_fn(n, bands, |i, j| {
            0.5 + 0.3 * ((i + 1) as f64 * j as f64 / 50.0).cos() + 0.05 * rng.random::<f64>()
        });
        let signal: Vec<f64> = (0..n)
            .map(|i| {
                (0..bands).map(|j| x[(i, j)] * curve[j]).sum::<f64>()
                    + 0.1 * (rng.random::<f64>() - 0.5)
            })
            .collect();
        // Three outputs, one signal at three levels: the same evidence up to scale.
        let y = Mat::from_fn(n, 3, |i, k| [1.0, 4.0, 0.25][k] * signal[i]);
        (x, y)
    };
    let basis = spectrum_basis(bands);
    let config = ModelConfig {
        prior: PriorFamily::Smooth,
        ..ModelConfig::new(basis, 3)
    };
    let shared = |state: &ModelState| {
        let factors: Vec<(f64, &Arc<KernelRoot>)> = state
            .outputs()
            .iter()
            .map(|o| {
                let post = o.posterior().expect("trained");
                match post.factor() {
                    Factor::Smooth { kernel, .. } => {
                        (post.prior().smooth.expect("smooth").length, kernel)
                    }
                    other => panic!("not smooth: {other:?}"),
                }
            })
            .collect();
        assert!(
            factors.iter().all(|(l, _)| *l == factors[0].0),
            "{factors:?}"
        );
        assert!(factors.iter().all(|(_, k)| Arc::ptr_eq(k, factors[0].1)));
    };
    let (x, y) = rows(&mut rng, n);
    let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
    shared(&state);
    let (x2, y2) = rows(&mut rng, 10);
    let state = state.update(&config, &stats(&basis, &x2, &y2)).unwrap();
    shared(&state);
    let decoded = codec::decode(&codec::encode(&state)).unwrap();
    shared(&decoded);
    assert_eq!(decoded, state);
    for output in state.outputs() {
        let post = output.posterior().unwrap();
        let owned = OutputPosterior::from_natural(
            post.prior().clone(),
            post.noise_variance(),
            post.precision_data().to_owned(),
            post.natural_mean().to_vec(),
        )
        .unwrap();
        assert_eq!(&owned, post);
        assert_eq!(owned.cholesky(), post.cholesky());
    }
}

/// Sparse truth (2 of 30 features matter): ARD prunes the rest and auto, weighing ARD's
/// evidence with its Occam factor against ridge's, picks ARD.
#[test]
fn auto_picks_ard_for_a_sparse_truth() {
    let (d, n) = (30, 80);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let x = Mat::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
    let y = Mat::from_fn(n, 1, |i, _| {
        3.0 * x[(i, 0)] - 2.0 * x[(i, 7)] + 0.1 * (rng.random::<f64>() - 0.5)
    });
    let basis = identity_basis(d);
    let config = ModelConfig::new(basis, 1);
    let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
    let post = state.outputs()[0].posterior().unwrap();
    assert_eq!(post.prior().family, FittedFamily::Ard);
    assert!(post.weighted().len() < 10, "kept {:?}", post.weighted());
}

/// ARD's Occam factor is that of its variances (`occam_penalty` of each kept function's `γ_j`)
/// plus the prior probability of the subset it keeps among the inputs it chose from
/// (`subset_penalty`): inputs that are exactly 0 are no choice, inputs that vary are, whether
/// or not ARD keeps them.
#[test]
fn ard_pays_for_the_subset_it_keeps_among_its_candidates() {
    use mordant::estimator::evidence::{EvidenceFit, occam_penalty, subset_penalty};
    let (d, extra, n) = (30, 200, 400);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let x = Mat::from_fn(n, d + extra, |_, _| rng.random_range(-1.0..1.0));
    let y = Mat::from_fn(n, 1, |i, _| {
        3.0 * x[(i, 0)] - 2.0 * x[(i, 7)] + 0.1 * (rng.random::<f64>() - 0.5)
    });
    let options = FitOptions::default();
    let fit = |x: &Mat<f64>| {
        let basis = identity_basis(x.ncols());
        let st = stats(&basis, x, &y);
        let noise = NoisePrior::for_output(&st, 0, Some(basis.dim() - 1), &options);
        let mut v = vec![1.0; basis.dim()];
        v[basis.dim() - 1] = f64::INFINITY;
        evidence(st.output(0), v, st.q()[0] / st.rows(), noise, &options).unwrap()
    };
    // Its variances' Occam factor, from the posterior: γ_j = 1 − Σ_jj / v_j.
    let variances = |f: &EvidenceFit| {
        let (post, sigma) = (&f.posterior, f.posterior.covariance());
        let v = post.prior_variance();
        occam_penalty(
            post.weighted().iter().map(|&j| 1.0 - sigma[(j, j)] / v[j]),
            1,
        )
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    let narrow = fit(&x.subcols(0, d).to_owned());
    let kept = narrow.posterior.weighted().len();
    assert!((2..d).contains(&kept), "{:?}", narrow.posterior.weighted());
    assert!(close(
        narrow.occam,
        variances(&narrow) + subset_penalty(d, kept)
    ));
    let zeros = fit(&Mat::from_fn(n, d + extra, |i, j| {
        if j < d { x[(i, j)] } else { 0.0 }
    }));
    assert!(
        close(zeros.occam, narrow.occam),
        "{} {}",
        zeros.occam,
        narrow.occam
    );
    let wide = fit(&x);
    let kept = wide.posterior.weighted().len();
    assert!(close(
        wide.occam,
        variances(&wide) + subset_penalty(d + extra, kept)
    ));
    assert!(subset_penalty(d + extra, kept) > subset_penalty(d, kept) + 20.0);
}

/// Inputs that carry nothing, on independent columns: some of them sit near the boundary
/// `Q_j² ≈ S_j` of the evidence, where MacKay's update crawls (about `γ_j` of the way a step)
/// and runs out of iterations. The default fit settles those that crawl towards a smaller
/// optimum: fewer fits stop at the cap, none at a worse score (evidence times Occam factor,
/// what `auto` compares), and a converged one at a point where every kept weight is MacKay's
/// fixed point and no pruned one would pay its Occam factor by coming back (the test a refit's
/// second start is run on).
#[test]
fn ard_settles_the_weights_that_crawl_at_the_evidence_boundary() {
    let (d, n) = (31, 2000);
    let (mut capped, mut still_capped) = (0, 0);
    for seed in 0..8 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let x = Mat::from_fn(n, d, |_, _| rng.random_range(0.05..0.95));
        let y = Mat::from_fn(n, 1, |i, _| {
            (0..d).step_by(4).map(|j| 0.3 * x[(i, j)]).sum::<f64>() + rng.random_range(-0.01..0.01)
        });
        let basis = identity_basis(d);
        let st = stats(&basis, &x, &y);
        let fit = |options: FitOptions| {
            let noise = NoisePrior::for_output(&st, 0, Some(d), &options);
            let mut v = vec![1.0; d + 1];
            v[d] = f64::INFINITY;
            evidence(st.output(0), v, st.q()[0] / st.rows(), noise, &options).unwrap()
        };
        let mackay = fit(FitOptions {
            settle_slow_weights: false,
            ..FitOptions::default()
        });
        let settled = fit(FitOptions::default());
        capped += usize::from(!mackay.converged);
        assert!(
            settled.family_score()
                <= mackay.family_score() + 1e-8 * mackay.family_score().abs().max(1.0),
            "seed {seed}: {} against MacKay's {}",
            settled.family_score(),
            mackay.family_score()
        );
        if !settled.converged {
            still_capped += 1;
            continue;
        }
        let post = &settled.posterior;
        let (v, sigma, mu) = (post.prior_variance(), post.covariance(), post.mean());
        for &j in post.weighted() {
            if v[j].is_finite() {
                let gamma = 1.0 - sigma[(j, j)] / v[j];
                let update = mu[j] * mu[j] / gamma;
                assert!(
                    (update - v[j]).abs() <= 1e-4 * v[j],
                    "seed {seed}, input {j}: v {} MacKay {update}",
                    v[j]
                );
            }
        }
        let back = revivals(st.output(0), v, post.noise_variance()).unwrap();
        assert!(
            !back.iter().any(|r| r.pays_its_occam_factor()),
            "seed {seed}: {back:?}"
        );
    }
    // Without settling, MacKay's update alone runs out of iterations on some of these.
    assert!(capped >= 2, "{capped} of 8 capped");
    assert!(
        still_capped < capped,
        "{still_capped} of 8 still capped, {capped} without settling"
    );
}

/// The Student-t's factor `κ = ν/(ν − 2)`: large with few informative rows left after the
/// fitted parameters (what it multiplies: `Predictive`), 1 in the limit of many, the same under
/// both Student-t rules.
#[test]
fn the_student_predictive_widens_only_with_few_rows() {
    assert_eq!(Predictive::Plugin.inflation(10.0, 1, 5.0), 1.0);
    assert!((Predictive::Student.inflation(20.0, 1, 9.0) - 10.0 / 8.0).abs() < 1e-15);
    // ν is at least 3.
    assert_eq!(Predictive::Student.inflation(5.0, 1, 9.0), 3.0);
    assert!(Predictive::Student.inflation(1e6, 1, 30.0) < 1.0 + 3e-6);
    for (rows, gamma) in [(20.0, 9.0), (5.0, 9.0), (1e6, 30.0)] {
        assert_eq!(
            Predictive::StudentNoise.inflation(rows, 1, gamma),
            Predictive::Student.inflation(rows, 1, gamma)
        );
    }
}

/// Only a zero-inflated output (0 in most rows) counts its non-zero rows as its informative
/// ones; a 0 among mostly non-zero values is a measurement like any other.
#[test]
fn informative_rows_are_the_non_zero_ones_of_a_mostly_zero_output() {
    let (x, _) = random_problem(3, 10, 2, 1);
    let y = Mat::from_fn(10, 2, |i, k| match k {
        0 => f64::from(u8::from(i < 3)),  // 3 of 10 non-zero: zero-inflated
        _ => f64::from(u8::from(i >= 2)), // 8 of 10 non-zero: dense
    });
    let basis = identity_basis(2);
    let st = stats(&basis, &x, &y);
    assert_eq!(st.informative_rows(0), 3.0);
    assert_eq!(st.informative_rows(1), 10.0);
    assert_eq!(st.output(0).informative, 3.0);
}

/// A zero-inflated output (a dye in a few recipes, dosed by a lab-dip feature) keeps the
/// paper's shrinkable intercept and predicts exactly 0 where its dose is 0, with the spread of
/// the rows without a dose rather than a dose's noise; a dense output on the same rows keeps the
/// flat one, whatever the family that is not an explicit shared prior.
#[test]
fn a_zero_inflated_output_predicts_exact_zeros_where_its_dose_is_zero() {
    let (n, d) = (120, 6);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let x = Mat::from_fn(n, d, |i, j| match j {
        0 if i % 10 == 0 => rng.random_range(0.5..3.0), // the dye's lab-dip dose, 12 rows
        0 => 0.0,
        _ => rng.random_range(-1.0..1.0),
    });
    let y = Mat::from_fn(n, 2, |i, k| match k {
        0 => 1.05 * x[(i, 0)] * (1.0 + 0.05 * (rng.random::<f64>() - 0.5)),
        _ => 4.0 + x[(i, 1)] + 0.1 * (rng.random::<f64>() - 0.5),
    });
    let basis = identity_basis(d);
    for family in [PriorFamily::Auto, PriorFamily::Ard] {
        let config = ModelConfig {
            prior: family,
            ..ModelConfig::new(basis, 2)
        };
        let st = stats(&basis, &x, &y);
        assert!(st.zero_inflated(0) && !st.zero_inflated(1));
        let state = ModelState::fit(&config, st).unwrap();
        let sparse = state.outputs()[0].posterior().unwrap();
        let dense = state.outputs()[1].posterior().unwrap();
        assert!(
            sparse.prior().flat().is_none(),
            "{family:?}: the dye's intercept is flat"
        );
        assert!(
            dense.prior().flat().is_some(),
            "{family:?}: the dense intercept is shrinkable"
        );
        let probe = Mat::from_fn(5, d, |i, j| if j == 0 { 0.0 } else { 0.2 * i as f64 - 0.4 });
        let pred = state.predict(probe.as_ref()).unwrap();
        for i in 0..5 {
            assert_eq!(
                pred.mean[(i, 0)],
                0.0,
                "{family:?}: row {i} without the dye"
            );
        }
        // Without the dye the rows were exactly 0: the variance is the mean square there, with
        // one pseudo-row at s (exact for one used basis function, an upper bound for several),
        // row by row, sixteen rows at a time and through the blocked products alike.
        let phi = basis.design(x.as_ref()).unwrap();
        let used = sparse.weighted();
        let (sum, count) = zero_rows_brute_force(&phi, &y, 0, used);
        let s = sparse.noise_variance();
        let kappa = inflation(&state, 0);
        let least = ((sum + s) / (count + 1.0)).min(kappa * s);
        let many = Mat::from_fn(
            20,
            d,
            |i, j| if j == 0 { 0.0 } else { 0.1 * i as f64 - 1.0 },
        );
        let together = state.predict(many.as_ref()).unwrap();
        let blocked = state.predict_design(basis.design(many.as_ref()).unwrap().as_ref());
        for v in (0..5)
            .map(|i| pred.variance[(i, 0)])
            .chain((0..20).map(|i| together.variance[(i, 0)]))
            .chain((0..20).map(|i| blocked.variance[(i, 0)]))
        {
            assert!(
                v >= least * (1.0 - 1e-12) && v < s,
                "{family:?}: {v}, s {s}, least {least}"
            );
            if used.len() == 1 {
                assert!(
                    (v - least).abs() <= 1e-12 * least,
                    "{family:?}: {v} against {least}"
                );
            }
        }
        let dosed = Mat::from_fn(1, d, |_, j| if j == 0 { 2.0 } else { 0.0 });
        let pred = state.predict(dosed.as_ref()).unwrap();
        assert!(
            (pred.mean[(0, 0)] - 2.1).abs() < 0.1,
            "{}",
            pred.mean[(0, 0)]
        );
        assert!(pred.variance[(0, 0)] >= s);
    }
}

/// A zero-inflated output's noise prior speaks in the dose of the dye when it is used, not in
/// its variance over all rows (which measures how often it is used); a dense output has none by
/// default (it would bind on a precise one), and one in units of its variance when asked.
#[test]
fn a_zero_inflated_outputs_noise_prior_is_relative_to_its_dose() {
    let (x, _) = random_problem(3, 100, 2, 1);
    let y = Mat::from_fn(100, 2, |i, k| match k {
        0 if i < 4 => 2.0,
        0 => 0.0,
        _ => 2.0 + f64::from(u8::from(i % 2 == 0)),
    });
    let basis = identity_basis(2);
    let st = stats(&basis, &x, &y);
    let options = FitOptions::default();
    let sparse = NoisePrior::for_output(&st, 0, Some(2), &options);
    assert!((sparse.scale - options.zero_inflated_noise_fraction * 4.0).abs() < 1e-12);
    assert_eq!(sparse.rows, options.noise_prior_rows);
    let dense = NoisePrior::for_output(&st, 1, Some(2), &options);
    assert_eq!((dense.rows, dense.scale), (0.0, 0.0));
    let asked = FitOptions {
        noise_prior_fraction: 1e-2,
        ..options
    };
    let dense = NoisePrior::for_output(&st, 1, Some(2), &asked);
    assert!((dense.scale - 1e-2 * 0.25).abs() < 1e-12);
    assert_eq!(dense.rows, options.noise_prior_rows);
    let plain = NoisePrior::for_output(&st, 0, Some(2), &FitOptions::plain());
    assert_eq!(plain.scale, 0.0);
}

/// A dense output measured far more precisely than it varies (a calibration's usual case) gets
/// σ² from its residuals: no prior in units of its variance holds it up. 20 rows, 8 inputs,
/// noise 10⁻³ of the output's spread (σ² = 10⁻⁶ of its variance).
#[test]
fn a_precise_dense_outputs_noise_variance_comes_from_its_residuals() {
    let (n, d, sigma) = (20, 8, 1e-3);
    for seed in 0..5 {
        let mut rng = ChaCha8Rng::seed_from_u64(40 + seed);
        let x = Mat::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
        let w: Vec<f64> = (0..d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let y = Mat::from_fn(n, 1, |i, _| {
            let noise = sigma * (rng.random_range(-1.0f64..1.0) * 3f64.sqrt());
            5.0 + (0..d).map(|j| w[j] * x[(i, j)]).sum::<f64>() + noise
        });
        let basis = identity_basis(d);
        for prior in [PriorFamily::Ridge, PriorFamily::Ard, PriorFamily::Auto] {
            let config = ModelConfig {
                prior,
                ..ModelConfig::new(basis, 1)
            };
            let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
            let s = state.outputs()[0].posterior().unwrap().noise_variance();
            assert!(
                s < 4.0 * sigma * sigma && s > 0.1 * sigma * sigma,
                "seed {seed}, {prior:?}: σ² = {s:e}, true {:e}",
                sigma * sigma
            );
        }
    }
}

/// One-step updates refit an output's hyperparameters once its informative rows have grown by a
/// quarter since they were last fitted (the result is an explicit refit on all rows,
/// warm-started from the current hyperparameters; under ridge, the first fit on all rows), and
/// keep them below that, or always with `refit_growth = 0`.
#[test]
fn one_step_refits_hyperparameters_once_the_rows_have_grown_by_a_quarter() {
    let (n, d) = (12, 6);
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let x = Mat::from_fn(4 * n, d, |_, _| rng.random_range(-1.0..1.0));
    let y = Mat::from_fn(4 * n, 1, |i, _| {
        1.0 + x[(i, 0)] - 0.5 * x[(i, 3)] + 0.1 * rng.random_range(-1.0..1.0)
    });
    let basis = identity_basis(d);
    let part = |from: usize, to: usize| stats(&basis, &rows(&x, from..to), &rows(&y, from..to));
    let probe = Mat::from_fn(5, d, |i, j| 0.2 * (i + j) as f64 - 0.5);
    for prior in [PriorFamily::Auto, PriorFamily::Ridge, PriorFamily::Ard] {
        let config = ModelConfig {
            prior,
            ..ModelConfig::new(basis, 1)
        };
        let first = ModelState::fit(&config, part(0, n)).unwrap();
        let hyper = |s: &ModelState| {
            let post = s.outputs()[0].posterior().unwrap();
            post.prior_variance().to_vec()
        };
        assert_eq!(first.fitted_rows(), &[n as f64]);

        assert_eq!(config.options.refit_growth, 1.25);
        // A sixth as many rows again: one Bayesian step, the prior kept.
        let stepped = first.update(&config, &part(n, n + n / 6)).unwrap();
        assert_eq!(hyper(&stepped), hyper(&first), "{prior:?}");
        assert_eq!(stepped.fitted_rows(), &[n as f64]);

        // The same model with refits at row growth turned off.
        let never = ModelConfig {
            options: FitOptions {
                refit_growth: 0.0,
                ..FitOptions::default()
            },
            ..config
        };

        // A quarter more rows than the prior was fitted on: Algorithm 2 on all of them, from the
        // current hyperparameters. ARD keeps what it pruned from a warm start (a second start
        // runs only where a revival pays its Occam factor), so only ridge, which fits afresh, is
        // bound to the first fit on all rows too.
        let grown = stepped
            .update(&config, &part(n + n / 6, n + n / 4))
            .unwrap();
        assert_eq!(grown.fitted_rows(), &[(n + n / 4) as f64]);
        let refitted = stepped
            .update(&never, &part(n + n / 6, n + n / 4))
            .unwrap()
            .refit(&config)
            .unwrap();
        let fresh = ModelState::fit(&config, part(0, n + n / 4)).unwrap();
        let mut references = vec![("refit", refitted)];
        if prior == PriorFamily::Ridge {
            references.push(("first fit", fresh));
        }
        let a = grown.predict(probe.as_ref()).unwrap();
        for (what, reference) in &references {
            let b = reference.predict(probe.as_ref()).unwrap();
            for i in 0..probe.nrows() {
                let (p, q) = (a.mean[(i, 0)], b.mean[(i, 0)]);
                assert!(
                    (p - q).abs() < 1e-6 * (1.0 + q.abs()),
                    "{prior:?} row {i}: {p} against the {what}'s {q}"
                );
                let (u, v) = (a.variance[(i, 0)], b.variance[(i, 0)]);
                assert!(
                    (u - v).abs() < 1e-5 * v,
                    "{prior:?} row {i}: variance {u} against the {what}'s {v}"
                );
            }
        }

        // An explicit refit records the rows it was fitted on.
        let refit = stepped.refit(&config).unwrap();
        assert_eq!(refit.fitted_rows(), &[(n + n / 6) as f64]);

        // Never, when asked so.
        let kept = first.update(&never, &part(n, 4 * n)).unwrap();
        assert_eq!(hyper(&kept), hyper(&first), "{prior:?}");
        assert_eq!(kept.fitted_rows(), &[n as f64]);
    }
}

/// A feature constant in the first batch (a fabric that has not changed yet) is pruned by the
/// first fit, and ARD never revives a pruned coefficient from a warm start. Once the feature
/// varies and the rows have grown, the refit finds it from the configured start: the state
/// then predicts as Algorithm 2 from scratch on all rows does, and far better than the warm
/// start's optimum.
#[test]
fn a_refit_revives_a_feature_the_first_fit_pruned() {
    let (n, d) = (10, 3);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let x = Mat::from_fn(6 * n, d, |i, j| {
        if j == 2 && i < n {
            0.0
        } else {
            rng.random_range(-1.0..1.0)
        }
    });
    let y = Mat::from_fn(6 * n, 1, |i, _| {
        x[(i, 0)] + 2.0 * x[(i, 2)] + 0.05 * rng.random_range(-1.0..1.0)
    });
    let basis = identity_basis(d);
    let part = |from: usize, to: usize| stats(&basis, &rows(&x, from..to), &rows(&y, from..to));
    for update in [UpdateMethod::OneStep, UpdateMethod::Refit] {
        let config = ModelConfig {
            prior: PriorFamily::Ard,
            update,
            ..ModelConfig::new(basis, 1)
        };
        let first = ModelState::fit(&config, part(0, n)).unwrap();
        let pruned = first.outputs()[0].posterior().unwrap();
        assert_eq!(
            pruned.prior_variance()[2],
            0.0,
            "{update:?}: constant, so pruned"
        );

        let grown = first.update(&config, &part(n, 6 * n)).unwrap();
        let post = grown.outputs()[0].posterior().unwrap();
        assert!(
            (post.mean()[2] - 2.0).abs() < 0.1,
            "{update:?}: coefficient {}",
            post.mean()[2]
        );
        let scratch = ModelState::fit(&config, part(0, 6 * n)).unwrap();
        let best = scratch.outputs()[0].posterior().unwrap();
        assert!(
            rel_diff_slice(best.mean(), post.mean()) < 1e-6,
            "{update:?}"
        );

        // The warm start alone stays at the pruned optimum, with the feature's effect as noise.
        let noise = NoisePrior::for_output(grown.totals(), 0, Some(d), &config.options);
        let warm = evidence(
            grown.totals().output(0),
            pruned.prior_variance().to_vec(),
            pruned.noise_variance(),
            noise,
            &config.options,
        )
        .unwrap();
        assert_eq!(warm.posterior.mean()[2], 0.0);
        assert!(post.noise_variance() < 0.1 * warm.posterior.noise_variance());
    }
}

/// With forgetting, the rows behind the last fit fade with the statistics: an output is refitted
/// once its forgetting-weighted informative rows reach `refit_growth` times the faded count, and
/// an output that has never been non-zero is never refitted for it.
#[test]
fn with_forgetting_the_rows_behind_a_fit_fade_with_the_statistics() {
    let (n, d, half_life) = (40, 4, 40.0);
    let mut rng = ChaCha8Rng::seed_from_u64(33);
    let x = Mat::from_fn(8 * n, d, |_, _| rng.random_range(-1.0..1.0));
    let y = Mat::from_fn(8 * n, 2, |i, k| match k {
        0 => 1.0 + x[(i, 1)] + 0.1 * rng.random_range(-1.0..1.0),
        _ => 0.0,
    });
    let basis = identity_basis(d);
    let config = ModelConfig {
        forgetting: Some(mordant::estimator::Forgetting {
            half_life_rows: half_life,
        }),
        options: FitOptions {
            min_informative_rows: 0.0,
            min_zero_inflated_rows: 0.0,
            ..FitOptions::default()
        },
        ..ModelConfig::new(basis, 2)
    };
    let part = |i: usize| {
        stats(
            &basis,
            &x.subrows(i * 10, 10).to_owned(),
            &y.subrows(i * 10, 10).to_owned(),
        )
    };
    let mut state = ModelState::fit(&config, part(0)).unwrap();
    assert_eq!(state.fitted_rows()[1], 0.0);
    let mut refits = 0;
    for i in 1..32 {
        let before = state.fitted_rows()[0];
        let weight = (-10.0 / half_life).exp2();
        let next = state.update(&config, &part(i)).unwrap();
        let rows = next.totals().informative_rows(0);
        if rows >= config.options.refit_growth * weight * before {
            refits += 1;
            assert_eq!(next.fitted_rows()[0], rows, "batch {i}");
        } else {
            assert!(
                (next.fitted_rows()[0] - weight * before).abs() < 1e-9 * before,
                "batch {i}"
            );
            let (a, b) = (
                next.outputs()[0].posterior(),
                state.outputs()[0].posterior(),
            );
            assert_eq!(a.unwrap().prior_variance(), b.unwrap().prior_variance());
        }
        assert_eq!(next.fitted_rows()[1], 0.0);
        state = next;
    }
    // The weighted rows level off near 10 / (1 − 2^(−10/40)) ≈ 63, and the rows behind a fit
    // fade by a fifth (to 1/1.25) in log₂ 1.25 / (10/40) ≈ 1.3 batches: a refit about every
    // other batch once the rows have levelled off, not on every one.
    assert!((10..=22).contains(&refits), "{refits} refits of 31 batches");
}

/// An explicit shared prior keeps the free intercept for every output, zero-inflated or not.
#[test]
fn explicit_shared_priors_keep_the_flat_intercept_for_a_zero_inflated_output() {
    let (n, d) = (60, 4);
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let x = Mat::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
    let y = Mat::from_fn(n, 1, |i, _| if i % 6 == 0 { 2.0 + x[(i, 1)] } else { 0.0 });
    let basis = identity_basis(d);
    let config = ModelConfig {
        prior: PriorFamily::Ridge,
        ..ModelConfig::new(basis, 1)
    };
    let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
    let post = state.outputs()[0].posterior().unwrap();
    assert_eq!(post.prior().family, FittedFamily::Ridge);
    assert_eq!(post.prior().flat(), Some(d));
}

/// A dense output needs 5 informative rows before its first fit; a zero-inflated one 2.
#[test]
fn a_dense_output_waits_for_five_rows_and_a_zero_inflated_one_for_two() {
    let (x, _) = random_problem(13, 40, 3, 1);
    let basis = identity_basis(3);
    let config = ModelConfig::new(basis, 2);
    let y = |rows: usize| {
        Mat::from_fn(rows, 2, |i, k| match k {
            0 => 1.0 + x[(i, 0)],                  // dense
            _ => f64::from(u8::from(i < 2)) * 2.5, // 2 non-zero rows: zero-inflated
        })
    };
    let rows = |r: usize| x.subrows(0, r).to_owned();
    let state = ModelState::fit(
        &config,
        stats(&basis, &rows(4), &y(4).subrows(0, 4).to_owned()),
    )
    .unwrap();
    assert!(
        state.outputs()[0].posterior().is_none(),
        "dense output fitted on 4 rows"
    );
    // Two non-zero rows of four are not "most rows 0": the second output is dense too here.
    assert!(state.outputs()[1].posterior().is_none());
    let state = ModelState::fit(&config, stats(&basis, &rows(5), &y(5))).unwrap();
    assert!(state.outputs()[0].posterior().is_some());
    assert!(
        state.outputs()[1].posterior().is_some(),
        "2 of 5 rows: zero-inflated, fitted"
    );
}

/// Under one-step updates an output whose zeros stop being structural (a dye that became
/// common) is fitted again with a flat intercept, and the reverse: a pruned intercept could
/// never come back by one-step updates. Without such a change the one-step update runs.
#[test]
fn one_step_refits_an_output_whose_intercept_kind_changed() {
    let (n, d) = (40, 2);
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let x = Mat::from_fn(n + 200, d, |_, _| rng.random_range(-1.0..1.0));
    // First rows: used in 1 row of 5, proportional to x0; later rows: a level of 2.
    let y = Mat::from_fn(n + 200, 1, |i, _| {
        if i < n {
            if i % 5 == 0 {
                1.5 * f64::abs(x[(i, 0)]) + 0.5
            } else {
                0.0
            }
        } else {
            2.0 + x[(i, 0)] + 0.05 * (rng.random::<f64>() - 0.5)
        }
    });
    let basis = identity_basis(d);
    let config = ModelConfig::new(basis, 1);
    let first = stats(
        &basis,
        &x.subrows(0, n).to_owned(),
        &y.subrows(0, n).to_owned(),
    );
    let state = ModelState::fit(&config, first).unwrap();
    assert!(
        state.outputs()[0]
            .posterior()
            .unwrap()
            .prior()
            .flat()
            .is_none()
    );
    let later = stats(
        &basis,
        &x.subrows(n, 200).to_owned(),
        &y.subrows(n, 200).to_owned(),
    );
    let state = state.update(&config, &later).unwrap();
    let post = state.outputs()[0].posterior().unwrap();
    assert_eq!(
        post.prior().flat(),
        Some(d),
        "the intercept stayed shrinkable"
    );
    // Fitted afresh: the first fit on all rows seen (to Algorithm 2's stopping rule: the two
    // sums of the statistics round differently).
    let fresh = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
    let probe = Mat::from_fn(5, d, |i, j| 0.3 * (i + j) as f64 - 0.6);
    let (p, q) = (
        state.predict(probe.as_ref()).unwrap(),
        fresh.predict(probe.as_ref()).unwrap(),
    );
    for i in 0..5 {
        let (a, b) = (p.mean[(i, 0)], q.mean[(i, 0)]);
        assert!((a - b).abs() < 1e-7, "row {i}: {a} against {b}");
    }

    // Forty of the same dense rows again change nothing about the kind, and grow the rows by
    // less than a quarter: a plain one-step update, the prior kept.
    let again = state
        .update(
            &config,
            &stats(
                &basis,
                &x.subrows(n, 40).to_owned(),
                &y.subrows(n, 40).to_owned(),
            ),
        )
        .unwrap();
    let (a, b) = (
        again.outputs()[0].posterior().unwrap(),
        state.outputs()[0].posterior().unwrap(),
    );
    assert_eq!(a.prior(), b.prior());
}

/// Spectra on a large common baseline that vary little, a noise-free target, a tiny noise
/// variance and a wide smooth prior: the Schur complement that frees the intercept loses the
/// small variations to round-off and `I + RᵀA_cR` is indefinite as computed (no Cholesky
/// factor). The posterior still forms, its round-off eigenvalues taken as 0: finite, with a
/// symmetric PSD covariance and predictive variances of at least σ².
#[test]
fn a_posterior_forms_on_spectra_that_barely_leave_their_baseline() {
    let (n, d, noise) = (25, 300, 1.0e-8);
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let amounts: Vec<f64> = (0..n).map(|_| rng.random_range(0.0..1.0)).collect();
    let x = Mat::from_fn(n, d, |i, j| {
        let t = j as f64 / d as f64;
        100.0
            + 1.0e-2 * amounts[i] * (-(t - 0.4).powi(2) / 0.01).exp()
            + 1.0e-5 * rng.random::<f64>()
    });
    let y = Mat::from_fn(n, 1, |i, _| 5.0 + 3.0 * amounts[i]);
    let basis = identity_basis(d);
    let st = stats(&basis, &x, &y);
    let mut variance = vec![1.0e4; d + 1];
    variance[d] = f64::INFINITY;
    let prior = Prior {
        family: FittedFamily::Smooth,
        variance,
        smooth: Some(mordant::estimator::prior::Smooth {
            bands: d,
            length: 24.0,
        }),
    };
    let post = OutputPosterior::from_statistics(prior, noise, st.g(), st.b_col(0))
        .expect("the posterior forms");
    assert!(post.mean().iter().all(|v| v.is_finite()));
    assert_symmetric_psd(&post.covariance_active());
    let phi = basis.design(x.as_ref()).unwrap();
    for i in 0..n {
        let row: Vec<f64> = (0..=d).map(|j| phi[(i, j)]).collect();
        let v = noise + post.weight_variance(&row);
        assert!(v.is_finite() && v >= noise, "predictive variance {v}");
    }
}

/// Untrained dyes answer the mean square `v` of their non-zero values, except where every
/// input that marks their uses is 0. Dye 0 was used in rows 15 and 45; its lab-dip dose (input
/// 0) is non-zero in row 15 alone, so it marks a use, and a row without it answers the spread
/// of the rows without it, `(S + v)/(C + 1)`, with row 45's square in `S`. A second dose
/// column (input 3) marks the same use: the rows where both are 0 are bounded, `C = N − 2`.
/// Its mean is 0: equal in the one row they marked, with no trained dye to say which dose a
/// dye follows, the two markers cannot be told apart. Dye 1 was used once, in row 30, whose
/// only mostly-zero input is a fabric class shared with 19 other rows: no marker, 0 with `v`
/// everywhere. Row by row, sixteen rows at a time and through the blocked products alike; a
/// state without zero rows
/// answers `v` everywhere, as before.
#[test]
fn an_untrained_output_is_sure_of_its_zeros_only_where_its_markers_are_zero() {
    let (n, d) = (60, 5);
    let x = Mat::from_fn(n, d, |i, j| match j {
        0 | 3 if i == 15 => 1.5, // the doses marking dye 0's use
        0 | 3 => 0.0,
        1 => f64::from(u8::from(i % 3 == 0)), // a fabric class, 20 rows
        _ => 1.0 + 0.01 * ((i * (j + 3)) as f64).sin(), // never 0 (reflectances)
    });
    let y = Mat::from_fn(n, 2, |i, k| match (i, k) {
        (15, 0) => 1.5,
        (45, 0) => 0.5,
        (30, 1) => 2.0,
        _ => 0.0,
    });
    let basis = identity_basis(d);
    let config = ModelConfig {
        options: FitOptions {
            min_zero_inflated_rows: 3.0,
            ..FitOptions::default()
        },
        ..ModelConfig::new(basis, 2)
    };
    let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
    assert!(
        state.outputs().iter().all(|o| o.posterior().is_none()),
        "untrained"
    );
    let v0 = (1.5f64 * 1.5 + 0.5 * 0.5) / 2.0;
    let v1 = 2.0f64 * 2.0;
    // S = row 45's 0.25 (inputs 0 and 3 are 0 there); C = 60 − 1 − 1.
    let unlike = (0.25 + v0) / ((n - 2) as f64 + 1.0);
    let probe = |rows: usize, dose: f64| {
        Mat::from_fn(rows, d, |r, j| match j {
            0 | 3 => dose,
            1 => f64::from(u8::from(r % 2 == 0)),
            _ => 1.0,
        })
    };
    let legacy = codec::decode(&codec::encode_previous(&state)).unwrap();
    for rows in [3, 20] {
        let without = state.predict(probe(rows, 0.0).as_ref()).unwrap();
        let with = state.predict(probe(rows, 2.0).as_ref()).unwrap();
        let before = legacy.predict(probe(rows, 0.0).as_ref()).unwrap();
        let blocked =
            state.predict_design(basis.design(probe(rows, 0.0).as_ref()).unwrap().as_ref());
        for r in 0..rows {
            for pred in [&without, &with, &before, &blocked] {
                assert_eq!(
                    pred.mean[(r, 0)],
                    0.0,
                    "dye 0's markers cannot be told apart"
                );
                assert_eq!(pred.mean[(r, 1)], 0.0, "dye 1 has no marker");
            }
            for pred in [&without, &blocked] {
                assert!(
                    (pred.variance[(r, 0)] - unlike).abs() <= 1e-12 * unlike,
                    "{rows} rows: {} against {unlike}",
                    pred.variance[(r, 0)]
                );
            }
            assert_eq!(with.variance[(r, 0)], v0, "a row with the dose");
            assert_eq!(before.variance[(r, 0)], v0, "no zero rows");
            for pred in [&without, &with, &before] {
                assert_eq!(pred.variance[(r, 1)], v1, "dye 1 has no marker");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A dye used in one row of many, with one to three dose columns non-zero in that row alone
    /// (its markers) beside inputs that are never 0, is untrained and follows one marker in
    /// proportion: the one whose dose is in the proportion to the dye that a trained dye's bulk
    /// dose is to its own lab dose (the others are ten times larger or smaller). Markers scaled
    /// by `t` give `t` times its value whatever the other inputs are; a row where the followed
    /// marker is 0 gives exactly 0. Its variance is the square of its one value, or of its
    /// answer where that is larger (`t > 1`). With no trained dye to say what a followed
    /// dose's proportion is, one marker is still followed and several are not (0 everywhere).
    /// Row by row, through the blocked products and with rows predicted together alike.
    #[test]
    fn an_untrained_dye_follows_what_marked_its_one_use(
        seed in any::<u64>(),
        marked in 1usize..4,
        t in 0.05f64..20.0,
        rows in prop::sample::select(vec![1usize, 3, 12, 40]),
        trained in any::<bool>(),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (n, dense) = (60, 4);
        // Columns: dense inputs, the trained dye's own dose, then the once-used dye's markers.
        let (own, first) = (dense, dense + 1);
        let d = first + marked;
        let used = 4 * rng.random_range(0..n / 4) + 1;
        let proportion = rng.random_range(0.5..2.0);
        let followed = first + rng.random_range(0..marked);
        let dose = rng.random_range(0.05..2.0);
        let value = proportion * dose;
        let scales: Vec<f64> = (first..d)
            .map(|j| match j {
                j if j == followed => 1.0,
                _ if rng.random::<bool>() => 10.0,
                _ => 0.1,
            })
            .collect();
        let x = Mat::from_fn(n, d, |i, j| match j {
            j if j < dense => rng.random_range(0.5..1.5),
            j if j == own && trained && i % 4 == 0 => rng.random_range(0.1..3.0),
            j if j == own => 0.0,
            j if i == used => dose * scales[j - first],
            _ => 0.0,
        });
        let y = Mat::from_fn(n, 2, |i, k| match k {
            0 => proportion * x[(i, own)] * (1.0 + 0.02 * rng.random::<f64>()),
            _ if i == used => value,
            _ => 0.0,
        });
        let basis = identity_basis(d);
        let state = ModelState::fit(&ModelConfig::new(basis, 2), stats(&basis, &x, &y)).unwrap();
        prop_assert_eq!(state.outputs()[0].posterior().is_some(), trained);
        prop_assert!(state.outputs()[1].posterior().is_none());
        let follows = trained || marked == 1;
        let probe = Mat::from_fn(rows, d, |r, j| match (r % 3, j) {
            (0, j) => x[(used, j)],
            (_, j) if j < dense => rng.random_range(0.0..2.0),
            (1, j) if j >= first => t * x[(used, j)],
            (2, j) if j >= first && j != followed => rng.random_range(0.0..2.0),
            _ => 0.0,
        });
        let answered = state.predict(probe.as_ref()).unwrap();
        let predictor = mordant::estimator::Predictor::new(&state);
        let together = predictor.predict_each_row(probe.as_ref()).unwrap();
        for r in 0..rows {
            let alone = predictor.predict(probe.subrows(r, 1)).unwrap();
            prop_assert_eq!(together.mean[(r, 1)].to_bits(), alone.mean[(0, 1)].to_bits());
            prop_assert_eq!(together.variance[(r, 1)].to_bits(), alone.variance[(0, 1)].to_bits());
            let mean = answered.mean[(r, 1)];
            let expected = match r % 3 {
                0 if follows => value,
                1 if follows => t * value,
                _ => 0.0,
            };
            if expected == 0.0 {
                prop_assert_eq!(mean, 0.0, "row {}", r);
            } else {
                prop_assert!(
                    (mean - expected).abs() <= 1e-9 * expected,
                    "row {}: {} against {}", r, mean, expected
                );
            }
            if r % 3 != 2 || marked > 1 {
                // The scale of a dose: the one seen, or the answer where that is larger.
                prop_assert_eq!(answered.variance[(r, 1)], (value * value).max(mean * mean));
            }
        }
    }
}

/// An untrained output that is not zero-inflated (non-zero in 4 of 6 rows, waiting for a
/// fifth) predicts 0, even where an input non-zero in one of its rows alone would mark a use:
/// following markers is for outputs whose zeros are structural.
#[test]
fn an_untrained_dense_output_does_not_follow_markers() {
    let x = Mat::from_fn(6, 3, |i, j| match j {
        0 if i == 2 => 1.5,
        0 => 0.0,
        _ => 1.0 + 0.1 * (i * j) as f64,
    });
    let y = Mat::from_fn(6, 1, |i, _| if i < 4 { 1.0 + i as f64 } else { 0.0 });
    let basis = identity_basis(3);
    let state = ModelState::fit(&ModelConfig::new(basis, 1), stats(&basis, &x, &y)).unwrap();
    assert!(state.outputs()[0].posterior().is_none(), "untrained");
    let answered = state.predict(x.as_ref()).unwrap();
    for r in 0..6 {
        assert_eq!(answered.mean[(r, 0)], 0.0, "row {r}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Rows predicted together, by `predict_each_row` (as a server answers concurrent requests
    /// of a few rows at once) or as one request of any size by `predict`, get, bit for bit,
    /// what `predict` answers for each row alone: under every prior family, with a spectrum,
    /// an output whose zeros are structural (some probe rows hit its zero regime) and an
    /// untrained one.
    #[test]
    fn rows_predicted_together_are_each_the_row_alone(
        seed in any::<u64>(),
        family in 0usize..4,
        rows in 1usize..40,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (bands, d, n) = (13, 15, 60);
        let x = Mat::from_fn(n, d, |i, j| match j {
            // a dye's lab-dip dose, non-zero in every fifth row
            13 if i % 5 == 0 => rng.random_range(0.5..3.0),
            13 => 0.0,
            _ => rng.random_range(0.0..1.0),
        });
        let y = Mat::from_fn(n, 3, |i, k| match k {
            0 => 1.0 + x[(i, 2)] - 0.5 * x[(i, 7)] + 0.05 * rng.random::<f64>(),
            1 => 1.05 * x[(i, 13)],
            // used once: stays untrained
            _ if i == 3 => 2.0,
            _ => 0.0,
        });
        let basis = Basis::spectral(bands, ReflectanceScale::Fraction, d, true, Transform::Identity);
        let prior = [PriorFamily::Auto, PriorFamily::Ard, PriorFamily::Ridge, PriorFamily::Smooth][family];
        let config = ModelConfig { prior, ..ModelConfig::new(basis, 3) };
        let state = ModelState::fit(&config, stats(&basis, &x, &y)).unwrap();
        prop_assert!(matches!(state.outputs()[2], OutputState::Untrained));
        let predictor = mordant::estimator::Predictor::new(&state);
        let probe = Mat::from_fn(rows, d, |i, j| match j {
            13 if i % 3 == 0 => 0.0,
            13 => rng.random_range(0.5..3.0),
            _ => rng.random_range(0.0..1.0),
        });
        let together = predictor.predict_each_row(probe.as_ref()).unwrap();
        let at_once = predictor.predict(probe.as_ref()).unwrap();
        for i in 0..rows {
            let alone = predictor.predict(probe.subrows(i, 1)).unwrap();
            for k in 0..3 {
                for answer in [&together, &at_once] {
                    prop_assert_eq!(answer.mean[(i, k)].to_bits(), alone.mean[(0, k)].to_bits());
                    prop_assert_eq!(
                        answer.variance[(i, k)].to_bits(),
                        alone.variance[(0, k)].to_bits(),
                        "row {} output {}", i, k
                    );
                }
            }
        }
        prop_assert!(predictor.work_per_row() >= basis.dim() * 3);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(48) })]

    /// A noise shape ([`NoiseShape::choose`]) leaves the residuals that set it their mean square
    /// in units of the reshaped noise, is the power whose charged likelihood is largest, and its
    /// factor `w(μ)` grows with `|μ|`; on any residuals, of any scale.
    #[test]
    fn a_noise_shape_keeps_its_residuals_mean_square_and_is_the_likeliest_power(
        seed in any::<u64>(), n in 10usize..200, grow in 0.0f64..1.5, scale in -6.0f64..6.0,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let unit = 10f64.powf(scale);
        let rows: Vec<(f64, f64)> = (0..n)
            .map(|_| {
                let mean = unit * rng.random_range(-1.0..8.0);
                let sd = unit * (0.05 + mean.abs() / unit).powf(grow) * 0.1;
                (mean, sd * rng.random_range(-1.7..1.7))
            })
            .collect();
        let offset = 0.05 * unit;
        let chosen = NoiseShape::choose(rows.iter().copied(), offset);
        // Residuals whose spread grows 45-fold over the answers cannot keep one variance.
        prop_assert!(chosen.is_some() || grow < 0.75 || n < 100);
        let Some(shape) = chosen else {
            return Ok(());
        };
        let mean_square = |f: &dyn Fn(f64) -> f64| {
            rows.iter().map(|&(m, r)| r * r / f(m)).sum::<f64>() / n as f64
        };
        let (before, after) = (mean_square(&|_| 1.0), mean_square(&|m| shape.weight(m)));
        prop_assert!((after / before - 1.0).abs() < 1e-9, "{} against {}", after, before);
        let likelihood = |power: f64| {
            let size = |m: f64| (offset + m.abs()).powf(2.0 * power);
            let charge = if power == 0.0 { 0.0 } else { 0.5 * (n as f64).ln() };
            -0.5 * (rows.iter().map(|&(m, _)| size(m).ln()).sum::<f64>()
                + n as f64 * mean_square(&size).ln())
                - charge
        };
        for power in POWERS {
            prop_assert!(likelihood(shape.power()) >= likelihood(power) - 1e-9 * likelihood(power).abs());
        }
        prop_assert!(shape.weight(2.0 * unit) > shape.weight(unit));
        prop_assert!(shape.weight(-unit) == shape.weight(unit));
    }
}
