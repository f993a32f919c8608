//! mordant's side of the comparison with scikit-learn and River (`bench/peers` runs both).
//!
//! ```text
//! cargo bench --bench peers -- DIR [OUT.json]
//! ```
//!
//! (or `PEERS_DIR`, `PEERS_OUT`; `PEERS_REPEATS` runs, default 15). `DIR` holds the rows that
//! `bench/peers.py data DIR` wrote, `{name}_{first,update,probe}.csv` for the problems `dyeing`,
//! `spectrum` and `wide`, each with columns `x0, …` and `y0, …`: both sides read the same
//! doubles. For each problem this times, `REPEATS` times after a warm-up run:
//!
//! * the first fit: the statistics of the first-fit rows and Algorithm 2 (`ModelState::fit`);
//! * the update: the statistics of the new rows (1,000; 100 on the wide problem) and one
//!   Bayesian step (`ModelState::update` with the default `UpdateMethod::OneStep`);
//!
//! and writes `OUT.json` (default `DIR/mordant.json`): min / median / max seconds of each, every
//! run, the coefficients and the predicted means on the probe rows after the first fit and
//! after the update, and, on the dyeing and spectrum problems, the predicted means of the exact
//! posterior under one fixed prior (variance 1 for every weight, noise variance 1; River's
//! `BayesianLinearRegression` with its defaults) of the first-fit rows and of all rows. The wide
//! problem's 700 channels are a declared reflectance spectrum, as a spectrometer's model would
//! declare them.

#[allow(dead_code)] // `rows` is for the criterion benches
mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::dyeing_data;
use faer::Mat;
use mordant::estimator::{
    Basis, BatchStatistics, ModelConfig, ModelState, OutputPosterior, ReflectanceScale, Transform,
};
use mordant_lab::evaluate::Dataset;
use serde_json::{Value, json};

const DEFAULT_REPEATS: usize = 15;

/// Inputs and targets of some rows.
struct Rows {
    x: Mat<f64>,
    y: Mat<f64>,
}

struct Problem {
    name: &'static str,
    first: Rows,
    update: Rows,
    probe: Rows,
}

fn read_rows(dir: &Path, name: &str, part: &str) -> Rows {
    let path = dir.join(format!("{name}_{part}.csv"));
    let data = Dataset::from_csv(&path, &["x".to_owned()], &["y".to_owned()])
        .unwrap_or_else(|e| panic!("{e:#} (run `python3 bench/peers.py data DIR` first)"));
    Rows {
        x: data.x,
        y: data.y,
    }
}

fn read_problem(dir: &Path, name: &'static str, update_rows: usize) -> Problem {
    let problem = Problem {
        name,
        first: read_rows(dir, name, "first"),
        update: read_rows(dir, name, "update"),
        probe: read_rows(dir, name, "probe"),
    };
    assert_eq!(
        problem.update.x.nrows(),
        update_rows,
        "{name}: the update has {} rows, not {update_rows}",
        problem.update.x.nrows()
    );
    problem
}

/// The dyeing rows in `dir` must be those of `tests/data/dyeing/data.csv` as the service reads
/// them (same columns, same order, same doubles), first fit, update and probe in file order.
fn check_dyeing(problem: &Problem) {
    let data = dyeing_data();
    let mut row = 0;
    for part in [&problem.first, &problem.update, &problem.probe] {
        for (ours, theirs) in [(&data.x, &part.x), (&data.y, &part.y)] {
            assert_eq!(ours.ncols(), theirs.ncols(), "dyeing: columns differ");
            for i in 0..theirs.nrows() {
                for j in 0..theirs.ncols() {
                    assert!(
                        ours[(row + i, j)].to_bits() == theirs[(i, j)].to_bits(),
                        "dyeing: row {}, column {j} differs from tests/data/dyeing/data.csv",
                        row + i
                    );
                }
            }
        }
        row += part.x.nrows();
    }
    assert_eq!(row, data.rows(), "dyeing: rows missing");
}

fn statistics(config: &ModelConfig, rows: &Rows) -> BatchStatistics {
    let phi = config.basis.design(rows.x.as_ref()).expect("design");
    BatchStatistics::from_design(phi.as_ref(), rows.y.as_ref()).expect("statistics")
}

/// Min, median and max seconds (and every run) of `repeats` runs of `f` after one warm-up run,
/// and the last result.
fn time<T>(repeats: usize, mut f: impl FnMut() -> T) -> (Value, T) {
    let mut last = f();
    let runs: Vec<f64> = (0..repeats)
        .map(|_| {
            let start = Instant::now();
            last = std::hint::black_box(f());
            start.elapsed().as_secs_f64()
        })
        .collect();
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = if repeats % 2 == 1 {
        sorted[repeats / 2]
    } else {
        (sorted[repeats / 2 - 1] + sorted[repeats / 2]) / 2.0
    };
    let summary = json!({
        "min": sorted[0],
        "median": median,
        "max": sorted[repeats - 1],
        "runs": runs,
    });
    (summary, last)
}

/// Rows × columns as nested lists.
fn nested(m: &Mat<f64>) -> Vec<Vec<f64>> {
    (0..m.nrows())
        .map(|i| (0..m.ncols()).map(|j| m[(i, j)]).collect())
        .collect()
}

/// Predicted means, probe rows × outputs.
fn means(state: &ModelState, x: &Mat<f64>) -> Vec<Vec<f64>> {
    nested(&state.predict(x.as_ref()).expect("predict").mean)
}

/// Coefficients, outputs × basis functions (the intercept last).
fn coefficients(state: &ModelState) -> Vec<Vec<f64>> {
    nested(&state.coefficients().transpose().to_owned())
}

/// Predicted means (probe rows × outputs) of the posterior with prior variance 1 for every
/// weight and noise variance 1, given the statistics `stats`.
fn fixed_prior_means(basis: &Basis, stats: &BatchStatistics, x: &Mat<f64>) -> Vec<Vec<f64>> {
    let p = basis.dim();
    let phi = basis.design(x.as_ref()).expect("design");
    let mut mean = Mat::<f64>::zeros(phi.nrows(), stats.outputs());
    for k in 0..stats.outputs() {
        let post = OutputPosterior::from_statistics(vec![1.0; p], 1.0, stats.g(), stats.b_col(k))
            .expect("fixed-prior posterior");
        for i in 0..phi.nrows() {
            mean[(i, k)] = (0..p).map(|j| phi[(i, j)] * post.mean()[j]).sum();
        }
    }
    nested(&mean)
}

/// The design of every problem: the raw features and an intercept; a spectrum's channels as a
/// declared spectrum.
fn basis_of(problem: &Problem, spectrum: bool) -> Basis {
    let d = problem.first.x.ncols();
    if spectrum {
        Basis::spectral(d, ReflectanceScale::Fraction, d, true, Transform::Identity)
    } else {
        Basis::new(d, true, Transform::Identity)
    }
}

fn run(problem: &Problem, repeats: usize, basis: Basis) -> Value {
    let config = ModelConfig::new(basis, problem.first.y.ncols());
    let (first_fit, state) = time(repeats, || {
        ModelState::fit(&config, statistics(&config, &problem.first)).expect("first fit")
    });
    let (update, updated) = time(repeats, || {
        state
            .update(&config, &statistics(&config, &problem.update))
            .expect("update")
    });
    let untrained = |s: &ModelState| {
        s.outputs()
            .iter()
            .filter(|o| o.posterior().is_none())
            .count()
    };
    eprintln!(
        "peers: {}: first fit median {:.3} ms, update median {:.3} ms",
        problem.name,
        first_fit["median"].as_f64().unwrap_or(f64::NAN) * 1e3,
        update["median"].as_f64().unwrap_or(f64::NAN) * 1e3,
    );
    json!({
        "p": basis.dim(),
        "m": config.outputs,
        "rows": {
            "first": problem.first.x.nrows(),
            "update": problem.update.x.nrows(),
            "probe": problem.probe.x.nrows(),
        },
        "untrained_after_first_fit": untrained(&state),
        "untrained_after_update": untrained(&updated),
        "first_fit": first_fit,
        "update": update,
        "predict_after_first_fit": means(&state, &problem.probe.x),
        "predict_after_update": means(&updated, &problem.probe.x),
        "coefficients_after_first_fit": coefficients(&state),
        "coefficients_after_update": coefficients(&updated),
    })
}

/// [`run`], with the predicted means of the fixed prior's posterior (what River computes).
fn run_with_fixed_prior(problem: &Problem, repeats: usize) -> Value {
    let basis = basis_of(problem, false);
    let mut report = run(problem, repeats, basis);
    let config = ModelConfig::new(basis, problem.first.y.ncols());
    let first_stats = statistics(&config, &problem.first);
    let mut all = first_stats.clone();
    all.add(&statistics(&config, &problem.update))
        .expect("statistics");
    report["predict_fixed_prior_first"] =
        json!(fixed_prior_means(&basis, &first_stats, &problem.probe.x));
    report["predict_fixed_prior_all"] = json!(fixed_prior_means(&basis, &all, &problem.probe.x));
    report
}

fn main() {
    // `cargo bench` passes `--bench`; the other arguments are DIR and OUT.
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let dir: PathBuf = args
        .next()
        .or_else(|| std::env::var("PEERS_DIR").ok())
        .expect("usage: cargo bench --bench peers -- DIR [OUT.json] (or PEERS_DIR)")
        .into();
    let out: PathBuf = args
        .next()
        .or_else(|| std::env::var("PEERS_OUT").ok())
        .map_or_else(|| dir.join("mordant.json"), PathBuf::from);
    let repeats = std::env::var("PEERS_REPEATS").map_or(DEFAULT_REPEATS, |v| {
        v.parse()
            .ok()
            .filter(|&r| r > 0)
            .expect("PEERS_REPEATS: a positive number of runs")
    });
    let dyeing = read_problem(&dir, "dyeing", 1000);
    check_dyeing(&dyeing);
    let spectrum = read_problem(&dir, "spectrum", 1000);
    let wide = read_problem(&dir, "wide", 100);
    let report = json!({
        "repeats": repeats,
        "threads": rayon::current_num_threads(),
        "problems": {
            "dyeing": run_with_fixed_prior(&dyeing, repeats),
            "spectrum": run_with_fixed_prior(&spectrum, repeats),
            "wide": run(&wide, repeats, basis_of(&wide, true)),
        },
    });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).expect("output directory");
    }
    std::fs::write(&out, report.to_string())
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
    eprintln!("peers: wrote {}", out.display());
}
