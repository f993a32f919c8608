//! Shared helpers of the estimator tests: random problems and the dyeing data.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use faer::Mat;
use mordant::estimator::{Basis, BatchStatistics, ReflectanceScale, Transform};
use mordant_lab::evaluate::Dataset;
use mordant_lab::evaluate::dataset::{DYEING_FEATURE_PREFIXES, DYEING_OUTPUT_PREFIXES};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The dyeing data of `tests/data/dyeing`, read once per test binary.
pub fn dyeing() -> &'static Dataset {
    static DATA: OnceLock<Dataset> = OnceLock::new();
    DATA.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/dyeing/data.csv");
        let prefixes = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Dataset::from_csv(
            &path,
            &prefixes(&DYEING_FEATURE_PREFIXES),
            &prefixes(&DYEING_OUTPUT_PREFIXES),
        )
        .expect("tests/data/dyeing/data.csv is readable")
    })
}

/// A random regression problem: `d` features, `m` outputs, `rows` rows, `y = xW + noise`, with
/// only the first half of the features relevant.
pub fn random_problem(seed: u64, rows: usize, d: usize, m: usize) -> (Mat<f64>, Mat<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = Mat::from_fn(rows, d, |_, _| rng.random_range(-2.0..2.0));
    let w = Mat::from_fn(d, m, |j, _| {
        if j < d.div_ceil(2) {
            rng.random_range(-3.0..3.0)
        } else {
            0.0
        }
    });
    let noise = Mat::from_fn(rows, m, |_, _| rng.random_range(-0.3..0.3));
    let y = &x * &w + &noise;
    (x, y)
}

/// Rows `range` of a matrix.
pub fn rows(a: &Mat<f64>, range: std::ops::Range<usize>) -> Mat<f64> {
    Mat::from_fn(range.len(), a.ncols(), |i, j| a[(range.start + i, j)])
}

/// Rows of a matrix in the given order.
pub fn pick(a: &Mat<f64>, order: &[usize]) -> Mat<f64> {
    Mat::from_fn(order.len(), a.ncols(), |i, j| a[(order[i], j)])
}

pub fn identity_basis(d: usize) -> Basis {
    Basis::new(d, true, Transform::Identity)
}

/// `bands` reflectance values (fractions) as a declared spectrum, identity transform, intercept.
pub fn spectrum_basis(bands: usize) -> Basis {
    Basis::spectral(
        bands,
        ReflectanceScale::Fraction,
        bands,
        true,
        Transform::Identity,
    )
}

pub fn stats(basis: &Basis, x: &Mat<f64>, y: &Mat<f64>) -> BatchStatistics {
    let phi = basis.design(x.as_ref()).expect("design matrix");
    BatchStatistics::from_design(phi.as_ref(), y.as_ref()).expect("statistics")
}

/// Largest absolute entry-wise difference, relative to the largest absolute entry of `a`
/// (or absolute when `a` is all zero).
pub fn rel_diff(a: &Mat<f64>, b: &Mat<f64>) -> f64 {
    assert_eq!((a.nrows(), a.ncols()), (b.nrows(), b.ncols()));
    let mut scale: f64 = 0.0;
    let mut diff: f64 = 0.0;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            scale = scale.max(a[(i, j)].abs());
            diff = diff.max((a[(i, j)] - b[(i, j)]).abs());
        }
    }
    if scale == 0.0 { diff } else { diff / scale }
}

pub fn rel_diff_slice(a: &[f64], b: &[f64]) -> f64 {
    rel_diff(
        &Mat::from_fn(a.len(), 1, |i, _| a[i]),
        &Mat::from_fn(b.len(), 1, |i, _| b[i]),
    )
}
