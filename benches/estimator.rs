//! Estimator benchmarks at the dyeing data's size (p = 126, m = 82, real rows), at a 31-band
//! spectrum's size (p = 32, m = 3, synthetic rows), at a 700-channel NIR spectrum's (p = 701,
//! m = 3, synthetic rows, the smooth prior), and recipe matching on simulated lab dips
//! (31 bands, 2 fabric indicators, 10 dyes).
//!
//! `cargo bench --bench estimator`

mod common;

use std::time::Duration;

use common::{dyeing_data, rows};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use faer::Mat;
use mordant::domain::colour;
use mordant::estimator::incremental::residual_sum_of_squares;
use mordant::estimator::{
    Basis, BatchStatistics, ModelConfig, ModelState, Predictor, Transform, UpdateMethod, codec,
    drift,
};
use rand::{Rng, SeedableRng};

/// First-fit rows, update rows and prediction rows of one problem.
struct Problem {
    name: &'static str,
    config: ModelConfig,
    first: (Mat<f64>, Mat<f64>),
    batch: (Mat<f64>, Mat<f64>),
    probe: Mat<f64>,
}

fn dyeing() -> Problem {
    let data = dyeing_data();
    let basis = Basis::new(data.x.ncols(), true, Transform::Identity);
    Problem {
        name: "dyeing_p126_m82",
        config: ModelConfig::new(basis, data.y.ncols()),
        first: (rows(&data.x, 0, 1543), rows(&data.y, 0, 1543)),
        batch: (rows(&data.x, 1543, 2571), rows(&data.y, 1543, 2571)),
        probe: rows(&data.x, 2214, 3214),
    }
}

/// Reflectance at 31 bands; three outputs linear in their Kubelka–Munk values plus noise.
fn spectrum() -> Problem {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
    let n = 3000;
    let x = Mat::from_fn(n, 31, |_, _| rng.random_range(0.05..0.95));
    let w = Mat::from_fn(31, 3, |j, k| if (j + k) % 4 == 0 { 0.3 } else { 0.0 });
    let km = Mat::from_fn(n, 31, |i, j| Transform::KubelkaMunk.apply(x[(i, j)]));
    let noise = Mat::from_fn(n, 3, |_, _| rng.random_range(-0.01..0.01));
    let y = &km * &w + &noise;
    let basis = Basis::new(31, true, Transform::KubelkaMunk);
    Problem {
        name: "spectrum_p32_m3",
        config: ModelConfig::new(basis, 3),
        first: (rows(&x, 0, 2000), rows(&y, 0, 2000)),
        batch: (rows(&x, 2000, 3000), rows(&y, 2000, 3000)),
        probe: rows(&x, 0, 1000),
    }
}

/// A 700-channel NIR-like spectrum (smooth absorption bands, a declared spectrum so the default
/// prior is smooth), `outputs` outputs (each a mix of the four absorbers), 200 first-fit rows
/// and a 100-row update.
fn wide_spectrum(outputs: usize, name: &'static str) -> Problem {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(700);
    let (n, bands) = (400, 700);
    let amounts = Mat::from_fn(n, 4, |_, _| rng.random_range(0.0..1.0));
    let centres = [0.2, 0.45, 0.6, 0.85];
    let x = Mat::from_fn(n, bands, |i, j| {
        let t = j as f64 / bands as f64;
        0.3 + (0..4)
            .map(|c| amounts[(i, c)] * (-(t - centres[c]).powi(2) / 0.004).exp())
            .sum::<f64>()
    });
    let x = Mat::from_fn(n, bands, |i, j| x[(i, j)] + rng.random_range(-0.002..0.002));
    let y = Mat::from_fn(n, outputs, |i, k| {
        1.0 + amounts[(i, k % 3)] - 0.5 * amounts[(i, 3)] * (1 + k / 3) as f64
            + rng.random_range(-0.01..0.01)
    });
    let basis = Basis::spectral(
        bands,
        mordant::estimator::ReflectanceScale::Fraction,
        bands,
        true,
        Transform::Identity,
    );
    Problem {
        name,
        config: ModelConfig::new(basis, outputs),
        first: (rows(&x, 0, 200), rows(&y, 0, 200)),
        batch: (rows(&x, 200, 300), rows(&y, 200, 300)),
        probe: rows(&x, 300, 400),
    }
}

fn statistics(config: &ModelConfig, (x, y): &(Mat<f64>, Mat<f64>)) -> BatchStatistics {
    let phi = config.basis.design(x.as_ref()).expect("design");
    BatchStatistics::from_design(phi.as_ref(), y.as_ref()).expect("statistics")
}

/// Each output's `RSS / (N′s + tr(Σ G′))` with `Σ_JJ` formed, one output after another.
fn surprise_by_covariance(state: &ModelState, batch: &BatchStatistics) -> Vec<Option<f64>> {
    let g = batch.g();
    state
        .outputs()
        .iter()
        .enumerate()
        .map(|(k, output)| {
            let post = output.posterior()?;
            let rss = residual_sum_of_squares(post.mean(), batch.output(k));
            let trace = drift::trace_by_covariance(post, g);
            let expected = batch.output(k).informative * post.noise_variance() + trace;
            Some(rss / expected)
        })
        .collect()
}

fn bench_problem(c: &mut Criterion, problem: Problem) {
    let config = &problem.config;
    let first = statistics(config, &problem.first);
    let batch = statistics(config, &problem.batch);
    let refit_config = ModelConfig {
        update: UpdateMethod::Refit,
        ..config.clone()
    };
    let mut group = c.benchmark_group(problem.name);
    group.bench_function("first_fit", |b| {
        b.iter_batched(
            || first.clone(),
            |stats| ModelState::fit(config, stats).expect("fit"),
            BatchSize::PerIteration,
        )
    });
    let state = ModelState::fit(config, first.clone()).expect("fit");
    group.bench_function(
        format!("statistics_{}_rows", problem.batch.0.nrows()),
        |b| b.iter(|| statistics(config, &problem.batch)),
    );
    // Beside a model of the same grid: a smooth output takes the kernel's square root that model
    // holds ("first_fit" runs with no other model alive, and each fit is dropped before the next).
    group.bench_function("first_fit_beside_a_model", |b| {
        b.iter_batched(
            || first.clone(),
            |stats| ModelState::fit(config, stats).expect("fit"),
            BatchSize::LargeInput,
        )
    });
    // The step given the batch's surprise, which the folder computes first (below).
    let surprise = state.surprise(&batch);
    group.bench_function("one_step", |b| {
        b.iter(|| {
            state
                .update_with_shapes(config, &batch, &surprise)
                .expect("one_step")
        })
    });
    // What the folder computes of every batch before it is learnt (drift detection).
    group.bench_function("surprise", |b| b.iter(|| state.surprise(&batch)));
    // The same with tr(ΣG′) read off each output's Σ in turn, as before the Gram's root.
    group.bench_function("surprise_by_covariance", |b| {
        b.iter(|| surprise_by_covariance(&state, &batch))
    });
    group.bench_function("refit_update", |b| {
        b.iter(|| state.update(&refit_config, &batch).expect("refit"))
    });
    let one_row = rows(&problem.probe, 0, 1);
    group.bench_function("predict_1_row", |b| {
        b.iter(|| state.predict(one_row.as_ref()).expect("predict"))
    });
    // What a new version costs the cache beyond the fold: its predictor, and, where it does not
    // come from this process's folder, decoding its stored state.
    group.bench_function("predictor", |b| b.iter(|| Predictor::new(&state)));
    // A first fit's version in the folder: its predictor takes the prior shapes the fit's
    // evidence formed (shapes of the same statistics, from another fit, in the setup).
    group.bench_function("predictor_with_the_fits_shapes", |b| {
        b.iter_batched(
            || {
                ModelState::fit_with_shapes(config, first.clone())
                    .expect("fit")
                    .1
            },
            |shapes| Predictor::with_fitted_shapes(&state, shapes),
            BatchSize::PerIteration,
        )
    });
    // A fold's version: the predictor at the rank of every row so far, after the one-step update.
    let updated = state.update(config, &batch).expect("one_step");
    group.bench_function("predictor_after_one_step", |b| {
        b.iter(|| Predictor::new(&updated))
    });
    // What the folder encodes of every version it writes.
    group.bench_function("encode", |b| b.iter(|| codec::encode(&state)));
    let blob = codec::encode(&state);
    group.bench_function("decode", |b| {
        b.iter(|| codec::decode(&blob).expect("decode"))
    });
    // What the service does: the Predictor is formed once per model version.
    let predictor = Predictor::new(&state);
    group.bench_function("prepared_predict_1_row", |b| {
        b.iter(|| predictor.predict(one_row.as_ref()).expect("predict"))
    });
    // Single-row requests answered together (as the service answers a wide model's concurrent
    // requests), each row's answer its own: compare with n × prepared_predict_1_row.
    for n in [16, 64] {
        let together = rows(&problem.probe, 0, n);
        group.bench_function(format!("prepared_predict_{n}_rows_each"), |b| {
            b.iter(|| {
                predictor
                    .predict_each_row(together.as_ref())
                    .expect("predict")
            })
        });
    }
    let many = rows(&problem.probe, 0, problem.probe.nrows().min(1000));
    group.bench_function(format!("predict_{}_rows", many.nrows()), |b| {
        b.iter(|| state.predict(many.as_ref()).expect("predict"))
    });
    group.bench_function(format!("prepared_predict_{}_rows", many.nrows()), |b| {
        b.iter(|| predictor.predict(many.as_ref()).expect("predict"))
    });
    // The same rows through faer's blocked products (another order of additions): what
    // answering each row in its own order costs a large request.
    group.bench_function(
        format!("prepared_predict_design_{}_rows", many.nrows()),
        |b| {
            b.iter(|| {
                let design = predictor.basis().design(many.as_ref()).expect("design");
                predictor.predict_design(design.as_ref())
            })
        },
    );
    group.finish();
}

/// Recipe matching on 2,000 simulated lab dips (benchtop noise): what keeping `YᵀY` costs a
/// batch's statistics, what the forward map costs at a version's first match, and one match.
fn bench_recipe(c: &mut Criterion) {
    use mordant_lab::simulate::evaluate::{Design, recipes};
    use mordant_lab::simulate::{NoiseModel, SimulationConfig, Simulator};
    let sim = Simulator::new(SimulationConfig {
        noise: NoiseModel::BENCHTOP,
        grid: mordant_lab::simulate::MODEL_GRID,
        ..SimulationConfig::new(0)
    });
    let design = Design::standard(&sim);
    let basis = design.basis();
    let dips = sim.lab_dips(0..2000);
    let (x, y) = (design.inputs(&dips), recipes(&dips));
    let batch = (rows(&x, 1000, 2000), rows(&y, 1000, 2000));
    let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).expect("statistics");
    let state = ModelState::fit(&ModelConfig::new(basis, y.ncols()), stats).expect("fit");
    let map = state.forward_map().expect("forward map");
    let target = sim.held_out(0, false);
    let r: Vec<f64> = target.reflectance.iter().map(|v| v / 100.0).collect();
    let others = sim.fabric_indicators(target.sample.substrate);
    let mut group = c.benchmark_group("recipe_p34_m10");
    group.bench_function("statistics_1000_rows", |b| {
        b.iter(|| {
            let phi = basis.design(batch.0.as_ref()).expect("design");
            BatchStatistics::from_design(phi.as_ref(), batch.1.as_ref()).expect("statistics")
        })
    });
    group.bench_function("statistics_with_products_1000_rows", |b| {
        b.iter(|| {
            BatchStatistics::from_rows(&basis, batch.0.as_ref(), batch.1.as_ref())
                .expect("statistics")
        })
    });
    group.bench_function("forward_map", |b| {
        b.iter(|| state.forward_map().expect("forward map"))
    });
    group.bench_function("match_1_target", |b| {
        b.iter(|| map.match_recipe(&r, &others).expect("match"))
    });
    // What match adds per target to judge a recipe: its predicted reflectance, and both colours
    // under D65, A and F11 with their differences.
    let grid = mordant_lab::simulate::MODEL_GRID;
    let colorimeter = mordant_kitchen::Colorimeter::new(&grid).expect("colorimeter");
    let matched = map.match_recipe(&r, &others).expect("match");
    let cmc = mordant_colour::CmcWeights::default();
    group.bench_function("judge_1_recipe", |b| {
        b.iter(|| {
            let dyed = map.reflectance(&matched.concentration, &others);
            mordant_kitchen::judge(
                &colorimeter.labs(&r).expect("colour"),
                &colorimeter.labs(&dyed).expect("colour"),
                colour::DEFAULT_TOLERANCE,
                cmc,
            )
            .expect("colour")
        })
    });
    // The candidates of one target with the service's defaults: every combination of up to
    // three of the ten dyes (175), each solved within its bounds and judged, best ten answered.
    let search = mordant_kitchen::Search {
        allowed: (0..map.dyes()).collect(),
        max_dyes: 3,
        bounds: vec![Default::default(); map.dyes()],
        prices: Some(vec![1.0; map.dyes()]),
        ranking: mordant_kitchen::Ranking::ColourDifference,
        max_candidates: 10,
        tolerance: colour::DEFAULT_TOLERANCE,
        cmc,
    };
    let tried = mordant_kitchen::combinations(&search.allowed, search.max_dyes);
    group.bench_function(format!("candidates_{}_1_target", tried.len()), |b| {
        b.iter(|| {
            let problem = map.problem(&r, &others).expect("problem");
            let labs = colorimeter.labs(&r).expect("colour");
            mordant_kitchen::candidates(&problem, Some((&colorimeter, &labs)), &tried, &search)
                .expect("candidates")
        })
    });
    // A correction: the dip of the best candidate read back off the map with a 10 % error in
    // its first dye's amount, corrected with its dyes and judged.
    let best = {
        let problem = map.problem(&r, &others).expect("problem");
        let labs = colorimeter.labs(&r).expect("colour");
        mordant_kitchen::candidates(&problem, Some((&colorimeter, &labs)), &tried, &search)
            .expect("candidates")
            .remove(0)
    };
    let mut off = best.recipe.concentration.clone();
    off[best.dyes[0]] *= 1.1;
    let dip = map.reflectance(&off, &others);
    // The same dip with a deviation at the blue end, where the eye sees little: the spectral
    // correction misses the colour there, and the polish on ΔE00 runs its steps.
    let tilted: Vec<f64> = dip
        .iter()
        .enumerate()
        .map(|(l, r)| (r + 0.03 * (-(l as f64) / 3.0).exp()).min(0.99))
        .collect();
    for (name, dip) in [("correct_1_dip", &dip), ("correct_1_dip_polished", &tilted)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let problem = map
                    .correction(&r, &others, &best.recipe.concentration, dip)
                    .expect("problem");
                let labs = colorimeter.labs(&r).expect("colour");
                mordant_kitchen::correct(
                    &problem,
                    Some((&colorimeter, &labs)),
                    &best.dyes,
                    dip,
                    &search,
                )
                .expect("correction")
            })
        });
    }
    group.bench_function("colorimeter_of_the_grid", |b| {
        b.iter(|| mordant_kitchen::Colorimeter::new(&grid).expect("colorimeter"))
    });
    group.finish();
}

/// Calibration transfer at gasoline's size: 401 bands on each instrument, 30 pairs (smooth
/// random spectra; the new instrument shifted by half a band, with another gain and offset).
fn bench_transfer(c: &mut Criterion) {
    use mordant::estimator::grid::Grid;
    use mordant::estimator::transfer::{TransferMap, TransferStatistics};
    let grid = Grid::new(900.0, 2.0, 401).expect("grid");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(41);
    let depths: Vec<[f64; 3]> = (0..30)
        .map(|_| std::array::from_fn(|_| rng.random_range(0.0..1.0)))
        .collect();
    let read = |d: &[f64; 3], nm: f64| {
        let peak = |c: f64, w: f64| (-0.5 * ((nm - c) / w).powi(2)).exp();
        0.3 + d[0] * peak(1100.0, 60.0) + d[1] * peak(1350.0, 80.0) + d[2] * peak(1550.0, 50.0)
    };
    let old = Mat::from_fn(30, 401, |i, j| read(&depths[i], grid.wavelength(j)));
    let new = Mat::from_fn(30, 401, |i, j| {
        0.95 * read(&depths[i], grid.wavelength(j) + 1.0)
            + 0.01
            + 1e-4 * rng.random_range(-1.0..1.0)
    });
    let stats = TransferStatistics::from_rows(new.as_ref(), old.as_ref()).expect("statistics");
    let map = TransferMap::fit(&stats, &grid, &grid).expect("map");
    let probe: Vec<f64> = (0..401).map(|j| new[(0, j)]).collect();
    let mut group = c.benchmark_group("transfer_q401_p401_n30");
    group.bench_function("statistics_30_pairs", |b| {
        b.iter(|| TransferStatistics::from_rows(new.as_ref(), old.as_ref()).expect("statistics"))
    });
    group.bench_function("fit_map", |b| {
        b.iter(|| TransferMap::fit(&stats, &grid, &grid).expect("map"))
    });
    group.bench_function("reconstruct_1_row", |b| {
        b.iter(|| map.reconstruct(&probe).expect("reconstruct"))
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    bench_problem(c, dyeing());
    bench_problem(c, spectrum());
    bench_problem(c, wide_spectrum(3, "wide_spectrum_p701_m3"));
    bench_problem(c, wide_spectrum(10, "wide_spectrum_p701_m10"));
    bench_recipe(c);
    bench_transfer(c);
}

criterion_group! {
    name = estimator;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(estimator);
