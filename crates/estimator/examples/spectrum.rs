//! A smooth prior on a simulated absorbance spectrum: 150 bands, 40 calibration rows (fewer
//! rows than bands, which Bayesian regression does not mind), the concentration read off two
//! overlapping absorption peaks. Run with `cargo run -p mordant-estimator --example spectrum`.

use faer::Mat;
use mordant_estimator::{
    Basis, BatchStatistics, FittedFamily, ModelConfig, ModelState, PriorFamily, ReflectanceScale,
    Transform,
};

const BANDS: usize = 150;

/// A Gaussian peak centred on band `centre`, `width` bands wide.
fn peak(band: usize, centre: f64, width: f64) -> f64 {
    (-0.5 * ((band as f64 - centre) / width).powi(2)).exp()
}

/// `rows` spectra of two components and a baseline, and the first component's concentration.
fn samples(rows: usize, seed: u64) -> (Mat<f64>, Mat<f64>) {
    // A small deterministic generator keeps the example free of dependencies.
    let mut state = seed;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut x = Mat::zeros(rows, BANDS);
    let mut y = Mat::zeros(rows, 1);
    for i in 0..rows {
        let (c1, c2, baseline) = (uniform(), uniform(), 0.2 * uniform());
        for j in 0..BANDS {
            let noise = 0.002 * (uniform() - 0.5);
            x[(i, j)] = c1 * peak(j, 60.0, 12.0) + c2 * peak(j, 80.0, 15.0) + baseline + noise;
        }
        y[(i, 0)] = c1;
    }
    (x, y)
}

fn main() {
    let basis = Basis::spectral(
        BANDS,
        ReflectanceScale::Fraction,
        BANDS,
        true,
        Transform::Identity,
    );
    let mut config = ModelConfig::new(basis, 1);
    config.prior = PriorFamily::Auto;

    let (x, y) = samples(40, 1);
    let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).expect("statistics");
    let state = ModelState::fit(&config, stats).expect("first fit");
    let posterior = state.outputs()[0].posterior().expect("trained");
    let family = posterior.prior().family;
    println!("the evidence chose {family:?}");
    assert!(matches!(family, FittedFamily::Smooth | FittedFamily::Ridge));

    let (x_test, y_test) = samples(200, 2);
    let predicted = state.predict(x_test.as_ref()).expect("predict");
    let (mut squared, mut covered) = (0.0, 0);
    for i in 0..x_test.nrows() {
        let error = y_test[(i, 0)] - predicted.mean[(i, 0)];
        squared += error * error;
        covered += usize::from(error.abs() <= 1.96 * predicted.variance[(i, 0)].sqrt());
    }
    let rmsep = (squared / x_test.nrows() as f64).sqrt();
    println!("RMSEP {rmsep:.4} on 200 new spectra; 95 % intervals cover {covered} of them");
    assert!(rmsep < 0.05, "RMSEP {rmsep}");
}
