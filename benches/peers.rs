//! mordant's side of the comparison with scikit-learn and River (`bench/peers` runs both).
//!
//! For each problem it writes the rows it uses as CSV (`{name}_{first,update,probe}_{x,y}.csv`)
//! so that the Python peers fit byte-identical data, then times, `REPEATS` times after a
//! warm-up:
//!
//! * the first fit: the statistics of the first-fit rows and Algorithm 2 (`ModelState::fit`);
//! * a 1,000-row update: the statistics of the new rows and one Bayesian step
//!   (`ModelState::update`).
//!
//! and writes `mordant.json`: min / median / max seconds of each, the predicted means on the
//! probe rows after the first fit and after the update, and those of the exact posterior of all
//! rows under one fixed prior (variance 1 for every weight, noise variance 1), which is River's
//! `BayesianLinearRegression` with its defaults.
//!
//! `cargo bench --bench peers -- DIR`

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{dyeing_data, rows};
use faer::Mat;
use mordant::estimator::{
    Basis, BatchStatistics, ModelConfig, ModelState, OutputPosterior, Transform,
};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const REPEATS: usize = 15;
const UPDATE_ROWS: usize = 1000;

struct Problem {
    name: &'static str,
    first: (Mat<f64>, Mat<f64>),
    update: (Mat<f64>, Mat<f64>),
    probe: (Mat<f64>, Mat<f64>),
}

/// The dyeing data: first fit on 1,543 rows, update with the next 1,000, probe the last 671.
fn dyeing() -> Problem {
    let data = dyeing_data();
    let (n, first) = (data.rows(), 1543);
    let update = first + UPDATE_ROWS;
    Problem {
        name: "dyeing",
        first: (rows(&data.x, 0, first), rows(&data.y, 0, first)),
        update: (rows(&data.x, first, update), rows(&data.y, first, update)),
        probe: (rows(&data.x, update, n), rows(&data.y, update, n)),
    }
}

/// 31 spectral features (Kubelka–Munk values of reflectances between 0.05 and 0.95) and an
/// intercept, p = 32; three outputs linear in them, each using a quarter of the bands, plus
/// noise. First fit on 2,000 rows, update with 1,000, probe 1,000.
fn spectrum() -> Problem {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(32);
    let n = 4000;
    let x = Mat::from_fn(n, 31, |_, _| {
        Transform::KubelkaMunk.apply(rng.random_range(0.05..0.95))
    });
    let w = Mat::from_fn(31, 3, |j, k| {
        if (j + k) % 4 == 0 {
            0.3 + 0.1 * k as f64
        } else {
            0.0
        }
    });
    let noise = Mat::from_fn(n, 3, |_, _| rng.random_range(-0.05..0.05));
    let y = &x * &w + &noise;
    Problem {
        name: "spectrum",
        first: (rows(&x, 0, 2000), rows(&y, 0, 2000)),
        update: (rows(&x, 2000, 3000), rows(&y, 2000, 3000)),
        probe: (rows(&x, 3000, 4000), rows(&y, 3000, 4000)),
    }
}

fn write_csv(path: &Path, m: &Mat<f64>) {
    let mut text = String::with_capacity(m.nrows() * m.ncols() * 20);
    for i in 0..m.nrows() {
        for j in 0..m.ncols() {
            if j > 0 {
                text.push(',');
            }
            // Shortest text that reads back to the same f64.
            write!(text, "{:?}", m[(i, j)]).expect("format");
        }
        text.push('\n');
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn statistics(config: &ModelConfig, (x, y): &(Mat<f64>, Mat<f64>)) -> BatchStatistics {
    let phi = config.basis.design(x.as_ref()).expect("design");
    BatchStatistics::from_design(phi.as_ref(), y.as_ref()).expect("statistics")
}

/// Min, median and max seconds of `REPEATS` runs of `f`, after one warm-up run.
fn time<T>(mut f: impl FnMut() -> T) -> (Value, T) {
    let mut last = f();
    let mut seconds: Vec<f64> = (0..REPEATS)
        .map(|_| {
            let start = Instant::now();
            last = std::hint::black_box(f());
            start.elapsed().as_secs_f64()
        })
        .collect();
    seconds.sort_by(f64::total_cmp);
    let summary = json!({
        "min": seconds[0],
        "median": seconds[REPEATS / 2],
        "max": seconds[REPEATS - 1],
    });
    (summary, last)
}

fn means(state: &ModelState, x: &Mat<f64>) -> Vec<Vec<f64>> {
    let pred = state.predict(x.as_ref()).expect("predict");
    (0..pred.mean.nrows())
        .map(|i| (0..pred.mean.ncols()).map(|k| pred.mean[(i, k)]).collect())
        .collect()
}

fn run(problem: &Problem, dir: &Path) -> Value {
    for (part, (x, y)) in [
        ("first", &problem.first),
        ("update", &problem.update),
        ("probe", &problem.probe),
    ] {
        write_csv(&dir.join(format!("{}_{part}_x.csv", problem.name)), x);
        write_csv(&dir.join(format!("{}_{part}_y.csv", problem.name)), y);
    }
    let basis = Basis::new(problem.first.0.ncols(), true, Transform::Identity);
    let config = ModelConfig::new(basis, problem.first.1.ncols());
    let (first_fit, state) =
        time(|| ModelState::fit(&config, statistics(&config, &problem.first)).expect("first fit"));
    let (update, updated) = time(|| {
        state
            .update(&config, &statistics(&config, &problem.update))
            .expect("update")
    });
    // Where the models coincide: one prior variance 1 for every weight and noise variance 1
    // (River's defaults, alpha = beta = 1), the exact posterior of all rows.
    let mut all = statistics(&config, &problem.first);
    all.add(&statistics(&config, &problem.update))
        .expect("statistics");
    let phi = basis.design(problem.probe.0.as_ref()).expect("design");
    let fixed: Vec<Vec<f64>> = (0..config.outputs)
        .map(|k| {
            let post = OutputPosterior::from_statistics(
                vec![1.0; basis.dim()],
                1.0,
                all.g(),
                all.b_col(k),
            )
            .expect("posterior");
            (0..phi.nrows())
                .map(|i| (0..basis.dim()).map(|j| phi[(i, j)] * post.mean()[j]).sum())
                .collect()
        })
        .collect();
    json!({
        "predict_fixed_prior_by_output": fixed,
        "rows": {"first": problem.first.0.nrows(), "update": problem.update.0.nrows(),
                 "probe": problem.probe.0.nrows()},
        "p": basis.dim(),
        "m": config.outputs,
        "first_fit": first_fit,
        "update": update,
        "predict_after_first_fit": means(&state, &problem.probe.0),
        "predict_after_update": means(&updated, &problem.probe.0),
    })
}

fn main() {
    // `cargo bench` adds `--bench`; the directory is the first other argument.
    let dir: PathBuf = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .expect("usage: cargo bench --bench peers -- DIR")
        .into();
    std::fs::create_dir_all(&dir).expect("output directory");
    let report = json!({
        "repeats": REPEATS,
        "dyeing": run(&dyeing(), &dir),
        "spectrum": run(&spectrum(), &dir),
    });
    let path = dir.join("mordant.json");
    std::fs::write(&path, report.to_string()).expect("write mordant.json");
    eprintln!("peers: wrote {}", path.display());
}
