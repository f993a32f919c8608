//! Scores of predictions against held-out values.

use faer::MatRef;

/// R² averaged uniformly over outputs, with scikit-learn's `r2_score` convention: an output
/// whose true values are constant scores 1 if predicted exactly and 0 otherwise.
pub fn r2_uniform(truth: MatRef<'_, f64>, pred: MatRef<'_, f64>) -> f64 {
    let (n, m) = (truth.nrows(), truth.ncols());
    let total: f64 = (0..m)
        .map(|k| {
            let mean = truth.col(k).sum() / n as f64;
            let mut ss_res = 0.0;
            let mut ss_tot = 0.0;
            for i in 0..n {
                ss_res += (truth[(i, k)] - pred[(i, k)]).powi(2);
                ss_tot += (truth[(i, k)] - mean).powi(2);
            }
            match (ss_res != 0.0, ss_tot != 0.0) {
                (false, _) => 1.0,
                (true, false) => 0.0,
                (true, true) => 1.0 - ss_res / ss_tot,
            }
        })
        .sum();
    total / m as f64
}

/// R² averaged over the outputs whose true values vary (for the dyeing data: the dyes present
/// in the rows scored), `None` when none does.
pub fn r2_present(truth: MatRef<'_, f64>, pred: MatRef<'_, f64>) -> Option<f64> {
    let n = truth.nrows();
    let scores: Vec<f64> = (0..truth.ncols())
        .filter_map(|k| {
            let mean = truth.col(k).sum() / n as f64;
            let ss_tot: f64 = truth.col(k).iter().map(|y| (y - mean).powi(2)).sum();
            let ss_res: f64 = (0..n).map(|i| (truth[(i, k)] - pred[(i, k)]).powi(2)).sum();
            (ss_tot > 0.0).then(|| 1.0 - ss_res / ss_tot)
        })
        .collect();
    (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64)
}

/// Half the width of the central 95 % normal interval, in standard deviations.
pub const Z95: f64 = 1.959_963_984_540_054;

/// Fraction of entries inside their central 95 % predictive interval, over all entries and over
/// the entries whose true value is not zero (`None` if there are none). Entry `(i, k)`'s
/// interval is its mean ± `half_width(k, mean)` standard deviations: [`Z95`] for a Gaussian.
pub fn coverage95(
    truth: MatRef<'_, f64>,
    mean: MatRef<'_, f64>,
    variance: MatRef<'_, f64>,
    half_width: impl Fn(usize, f64) -> f64,
) -> (f64, Option<f64>) {
    let (mut inside, mut total, mut nz_inside, mut nz_total) = (0usize, 0usize, 0usize, 0usize);
    for k in 0..truth.ncols() {
        for i in 0..truth.nrows() {
            let y = truth[(i, k)];
            let half = half_width(k, mean[(i, k)]);
            let hit = (y - mean[(i, k)]).abs() <= half * variance[(i, k)].sqrt();
            total += 1;
            inside += usize::from(hit);
            if y != 0.0 {
                nz_total += 1;
                nz_inside += usize::from(hit);
            }
        }
    }
    let nz = (nz_total > 0).then(|| nz_inside as f64 / nz_total as f64);
    (inside as f64 / total.max(1) as f64, nz)
}

/// `max |y_train|` of output `k`.
fn training_range(train: MatRef<'_, f64>, k: usize) -> f64 {
    train.col(k).iter().fold(0.0f64, |a, v| a.max(v.abs()))
}

/// Largest `|ŷ| / max|y_train|` over all predictions, per output's own training range
/// (infinite when an output that was always 0 in training is predicted non-zero).
pub fn max_abs_ratio(train: MatRef<'_, f64>, pred: MatRef<'_, f64>) -> f64 {
    let mut worst: f64 = 0.0;
    for k in 0..train.ncols() {
        let range = training_range(train, k);
        for i in 0..pred.nrows() {
            let p = pred[(i, k)].abs();
            let ratio = if p == 0.0 {
                0.0
            } else if p.is_nan() {
                f64::INFINITY
            } else {
                p / range
            };
            worst = worst.max(ratio);
        }
    }
    worst
}

/// Largest `|ŷ − y| / max(max|y_train|, |y|)` over all predictions: an error measured against
/// the larger of the output's training range and the true value. Unlike [`max_abs_ratio`] it
/// does not count a right answer beyond the training range (a dye dosed at 0.002 in the rows
/// seen and at 0.4 in a test row) as wild, and still counts a wrong one.
pub fn max_relative_error(
    train: MatRef<'_, f64>,
    truth: MatRef<'_, f64>,
    pred: MatRef<'_, f64>,
) -> f64 {
    let mut worst: f64 = 0.0;
    for k in 0..train.ncols() {
        let range = training_range(train, k);
        for i in 0..pred.nrows() {
            let err = (pred[(i, k)] - truth[(i, k)]).abs();
            if err.is_nan() {
                return f64::INFINITY;
            }
            if err > 0.0 {
                worst = worst.max(err / range.max(truth[(i, k)].abs()));
            }
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r2_present_skips_constant_columns() {
        let truth = faer::mat![[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]];
        let pred = faer::mat![[5.0, 1.0], [5.0, 2.0], [5.0, 2.0]];
        // Only the second column counts: 1 − 1/2.
        assert_eq!(r2_present(truth.as_ref(), pred.as_ref()), Some(0.5));
        let constant = faer::mat![[1.0], [1.0]];
        assert_eq!(r2_present(constant.as_ref(), constant.as_ref()), None);
    }

    #[test]
    fn r2_follows_scikit_learn_for_constant_columns() {
        let truth = faer::mat![[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]];
        let exact = faer::mat![[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]];
        assert_eq!(r2_uniform(truth.as_ref(), exact.as_ref()), 1.0);
        let off = faer::mat![[0.1, 1.0], [0.0, 2.0], [0.0, 3.0]];
        assert_eq!(r2_uniform(truth.as_ref(), off.as_ref()), 0.5);
        let mean_only = faer::mat![[0.0, 2.0], [0.0, 2.0], [0.0, 2.0]];
        assert_eq!(r2_uniform(truth.as_ref(), mean_only.as_ref()), 0.5);
    }

    #[test]
    fn coverage_counts_intervals_and_non_zero_entries() {
        let truth = faer::mat![[0.0], [1.0], [5.0]];
        let mean = faer::mat![[0.0], [1.5], [0.0]];
        let var = faer::mat![[1.0], [1.0], [1.0]];
        let (all, nz) = coverage95(truth.as_ref(), mean.as_ref(), var.as_ref(), |_, _| Z95);
        assert!((all - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(nz, Some(0.5));
        // A narrower interval where the mean is not 0 loses the entry 0.5 off.
        let (all, nz) = coverage95(truth.as_ref(), mean.as_ref(), var.as_ref(), |_, m| {
            if m == 0.0 { Z95 } else { 0.4 }
        });
        assert!((all - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(nz, Some(0.0));
    }

    #[test]
    fn ratio_is_relative_to_each_outputs_training_range() {
        let train = faer::mat![[2.0, 0.0], [-4.0, 0.0]];
        let pred = faer::mat![[8.0, 0.0], [1.0, 0.0]];
        assert_eq!(max_abs_ratio(train.as_ref(), pred.as_ref()), 2.0);
        let pred = faer::mat![[1.0, 0.1]];
        assert!(max_abs_ratio(train.as_ref(), pred.as_ref()).is_infinite());
    }

    #[test]
    fn relative_error_forgives_a_right_answer_beyond_the_training_range() {
        let train = faer::mat![[0.002, 0.0], [0.0, 0.0]];
        let truth = faer::mat![[0.4, 0.0]];
        let right = faer::mat![[0.36, 0.0]];
        assert!(
            (max_relative_error(train.as_ref(), truth.as_ref(), right.as_ref()) - 0.1).abs()
                < 1e-12
        );
        assert!(max_abs_ratio(train.as_ref(), right.as_ref()) > 100.0);
        let wrong = faer::mat![[0.4, 0.5]];
        assert!(max_relative_error(train.as_ref(), truth.as_ref(), wrong.as_ref()).is_infinite());
        let nan = faer::mat![[f64::NAN, 0.0]];
        assert!(max_relative_error(train.as_ref(), truth.as_ref(), nan.as_ref()).is_infinite());
        assert!(max_abs_ratio(train.as_ref(), nan.as_ref()).is_infinite());
        let far = faer::mat![[40.4, 0.0]];
        assert!(
            (max_relative_error(train.as_ref(), truth.as_ref(), far.as_ref()) - 100.0).abs() < 1e-9
        );
    }
}
