//! What the benchmarks share: the dyeing data and row slices.

use std::path::Path;

use faer::Mat;
use mordant_lab::evaluate::Dataset;
use mordant_lab::evaluate::dataset::{DYEING_FEATURE_PREFIXES, DYEING_OUTPUT_PREFIXES};

/// The dyeing data of `tests/data/dyeing` (p = 125 features, m = 82 outputs).
pub fn dyeing_data() -> Dataset {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dyeing/data.csv");
    let strings = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Dataset::from_csv(
        &path,
        &strings(&DYEING_FEATURE_PREFIXES),
        &strings(&DYEING_OUTPUT_PREFIXES),
    )
    .expect("dyeing data")
}

/// Rows `from..to` of `a`.
pub fn rows(a: &Mat<f64>, from: usize, to: usize) -> Mat<f64> {
    Mat::from_fn(to - from, a.ncols(), |i, j| a[(from + i, j)])
}
