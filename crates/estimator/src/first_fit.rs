//! What a first fit takes from its rows beyond their statistics.
//!
//! The statistics are all a fit needs, and all a refit ever reads. A first fit has its batch's
//! rows at hand as well, and reads three things off them that the statistics cannot say, each
//! kept through the updates and refits after it:
//!
//! 1. whether leave-one-out asks for more shrinkage than the evidence took
//!    ([`ModelState::fit_on_rows`], the crate's `leave_one_out`), which the fit itself reads, so
//!    that each posterior is formed once, at the shrinkage it keeps;
//! 2. how each output's noise grows with its answer ([`ModelState::with_noise_shapes_from_rows`]);
//! 3. whether the residuals are heavy-tailed ([`Predictor::tail_of_rows`]).
//!
//! In that order: the noise shapes read the residuals of the means the first step settled, and
//! the tail reads them standardised by the predictive those two settled.
//!
//! A refit given every row behind its statistics (a batch's update that fits some output again,
//! [`update_on_rows`], or an explicit refit, [`refit_on_rows`]) is a first fit on those rows,
//! and reads the same three things off them: a model fed its rows in batches then answers as one
//! fed them at once, its intervals as well as its means (under ridge and smooth: an ARD refit
//! starts from its posterior, and may settle where a first fit would not). An output the update only stepped keeps
//! its shape; without the rows every output keeps the first fit's shape and tail.

use faer::MatRef;

use super::model::RefitOnRows;
use super::{BatchStatistics, EstimatorError, FittedShapes, ModelConfig, ModelState, Predictor};

/// A first fit completed on its rows: the state, its predictor (formed with the shapes the fit's
/// evidence formed, to read the tail) and what the rows could not set, with why.
#[derive(Debug)]
pub struct OnRows {
    pub state: ModelState,
    pub predictor: Predictor,
    /// How many members of the outputs' model averages (a posterior's prior, an alternate) took
    /// a larger `α` than the evidence's.
    pub shrunk: usize,
    /// Steps the rows could not take (`"shrinkage"`, `"noise shapes"`, `"tail"`), and why; each
    /// leaves the state as the step before it left it.
    pub skipped: Vec<(&'static str, EstimatorError)>,
}

/// The first fit (Algorithm 2) on `stats`, the statistics of the rows `x`, `y` (raw inputs and
/// outputs, as a batch holds them), completed on those rows; an error only where the fit on the
/// statistics fails (the rows can only move it: [`ModelState::fit_on_rows`]).
pub fn on_rows(
    config: &ModelConfig,
    stats: BatchStatistics,
    x: MatRef<'_, f64>,
    y: MatRef<'_, f64>,
) -> Result<OnRows, EstimatorError> {
    let mut skipped = Vec::new();
    let (checked, shapes, outcome) = ModelState::fit_on_rows(config, stats, x, y)?;
    let shrunk = outcome.unwrap_or_else(|e| {
        skipped.push(("shrinkage", e));
        0
    });
    let (shaped, outcome) = checked.with_noise_shapes_from_rows(x, y);
    if let Err(e) = outcome {
        skipped.push(("noise shapes", e));
    }
    let predictor = Predictor::with_fitted_shapes(&shaped, shapes);
    let tail = predictor.tail_of_rows(x, y).unwrap_or_else(|e| {
        skipped.push(("tail", e));
        None
    });
    Ok(OnRows {
        state: shaped.with_tail(tail),
        predictor: predictor.with_tail(tail),
        shrunk,
        skipped,
    })
}

/// What a refit hands its version's predictor: the predictor itself, where reading the rows
/// formed it, else the prior shapes to form it with.
#[derive(Debug)]
pub enum ForPredictor {
    Formed(Predictor),
    Shapes(FittedShapes),
}

/// A batch learnt, or a refit, completed on the rows behind its statistics: the state, what its
/// predictor takes, how many members took a larger `α` on the rows, whether the rows set a noise
/// shape or the tail anew (a replay of the statistics alone would not give them back), and the
/// steps the rows could not take, with why.
#[derive(Debug)]
pub struct Refitted {
    pub state: ModelState,
    pub predictor: ForPredictor,
    pub shrunk: usize,
    pub reshaped: bool,
    pub skipped: Vec<(&'static str, EstimatorError)>,
}

/// `base` learning `batch` ([`ModelState::update_on_rows`], whose `surprise` it takes), given
/// `rows`, every row behind the statistics after the batch: an output the batch fits again
/// checks its shrinkage on them and takes the noise shape they choose, and the tail is read on
/// them again, as a first fit on them would.
pub fn update_on_rows(
    base: &ModelState,
    config: &ModelConfig,
    batch: &BatchStatistics,
    surprise: &[Option<f64>],
    rows: Option<(MatRef<'_, f64>, MatRef<'_, f64>)>,
) -> Result<Refitted, EstimatorError> {
    let done = base.update_on_rows(config, batch, surprise, rows)?;
    Ok(completed(done, rows))
}

/// `base` fitted again on its statistics ([`ModelState::refit_on_rows`]), given `rows`, every
/// row behind them: completed on them as [`update_on_rows`] completes a batch's refits.
pub fn refit_on_rows(
    base: &ModelState,
    config: &ModelConfig,
    rows: Option<(MatRef<'_, f64>, MatRef<'_, f64>)>,
) -> Result<Refitted, EstimatorError> {
    let done = base.refit_on_rows(config, rows)?;
    Ok(completed(done, rows))
}

/// The noise shapes of the outputs `done` fitted, and the tail, read on `rows` where some output
/// was fitted and they are the rows behind its statistics.
fn completed(done: RefitOnRows, rows: Option<(MatRef<'_, f64>, MatRef<'_, f64>)>) -> Refitted {
    let RefitOnRows {
        state,
        shapes,
        fitted,
        shrunk,
    } = done;
    let mut skipped = Vec::new();
    let shrunk = shrunk.unwrap_or_else(|e| {
        skipped.push(("shrinkage", e));
        0
    });
    let unread = |state, shapes, skipped| Refitted {
        state,
        predictor: ForPredictor::Shapes(shapes),
        shrunk,
        reshaped: false,
        skipped,
    };
    let Some((x, y)) = rows.filter(|_| fitted.iter().any(|&f| f)) else {
        return unread(state, shapes, skipped);
    };
    if let Err(e) = state.rows_behind(x, y) {
        skipped.push(("noise shapes and tail", e));
        return unread(state, shapes, skipped);
    }
    let kept: Vec<_> = (0..fitted.len()).map(|k| state.noise_shape(k)).collect();
    let kept_tail = state.tail();
    let (shaped, outcome) = state.with_noise_shapes_of_outputs(x, y, |k| fitted[k]);
    if let Err(e) = outcome {
        skipped.push(("noise shapes", e));
    }
    let predictor = Predictor::with_fitted_shapes(&shaped, shapes);
    // A tail the rows cannot read is the one kept, with the state's predictor.
    let (shaped, predictor) = match predictor.tail_of_rows(x, y) {
        Ok(tail) => (shaped.with_tail(tail), predictor.with_tail(tail)),
        Err(e) => {
            skipped.push(("tail", e));
            (shaped, predictor)
        }
    };
    let reshaped = shaped.tail() != kept_tail
        || kept
            .iter()
            .enumerate()
            .any(|(k, &shape)| shaped.noise_shape(k) != shape);
    Refitted {
        state: shaped,
        predictor: ForPredictor::Formed(predictor),
        shrunk,
        reshaped,
        skipped,
    }
}

#[cfg(test)]
mod tests {
    use faer::Mat;

    use super::*;
    use crate::leave_one_out::tests::ridge;
    use crate::{Basis, FittedShapes, PriorFamily, Transform};

    fn uniform(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (*state >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` rows of `p` inputs in [0, 1) and one output: a linear law, plus `curve` times a
    /// smooth bump the linear model cannot follow, plus a little noise.
    fn rows(n: usize, p: usize, curve: f64, seed: u64) -> (Mat<f64>, Mat<f64>) {
        let mut state = seed;
        let x = Mat::from_fn(n, p, |_, _| uniform(&mut state));
        let y = Mat::from_fn(n, 1, |i, _| {
            let linear: f64 = (0..p).map(|j| x[(i, j)] * (0.3 * j as f64 - 1.0)).sum();
            let bump = (3.0 * x[(i, 0)]).sin() * (2.0 * x[(i, 1)]).cos();
            linear + curve * bump + 0.05 * (uniform(&mut state) - 0.5)
        });
        (x, y)
    }

    fn statistics(config: &ModelConfig, x: &Mat<f64>, y: &Mat<f64>) -> BatchStatistics {
        BatchStatistics::from_rows(&config.basis, x.as_ref(), y.as_ref()).unwrap()
    }

    /// Rows `from..to` of `x`, `y`.
    fn part(x: &Mat<f64>, y: &Mat<f64>, from: usize, to: usize) -> (Mat<f64>, Mat<f64>) {
        (
            Mat::from_fn(to - from, x.ncols(), |i, j| x[(from + i, j)]),
            Mat::from_fn(to - from, y.ncols(), |i, k| y[(from + i, k)]),
        )
    }

    /// The state of a first fit completed on the rows `x`, `y`.
    fn first_fit_on(config: &ModelConfig, x: &Mat<f64>, y: &Mat<f64>) -> ModelState {
        on_rows(config, statistics(config, x, y), x.as_ref(), y.as_ref())
            .unwrap()
            .state
    }

    fn fitted(config: &ModelConfig, x: &Mat<f64>, y: &Mat<f64>) -> (ModelState, FittedShapes) {
        ModelState::fit_with_shapes(config, statistics(config, x, y)).unwrap()
    }

    /// `α = s/v` of output 0's posterior (a ridge prior: every input's variance is `v`).
    fn alpha(state: &ModelState) -> f64 {
        let post = state.outputs()[0].posterior().unwrap();
        post.noise_variance() / post.prior().variance[0]
    }

    /// The squared error of each row predicted by ridge at `α` fitted on the others.
    fn leave_one_out_error(x: &Mat<f64>, y: &[f64], alpha: f64) -> f64 {
        let (n, p) = (x.nrows(), x.ncols());
        (0..n)
            .map(|out| {
                let keep: Vec<usize> = (0..n).filter(|&i| i != out).collect();
                let xs = Mat::from_fn(n - 1, p, |i, j| x[(keep[i], j)]);
                let ys: Vec<f64> = keep.iter().map(|&i| y[i]).collect();
                let c = ridge(&xs, &ys, alpha);
                let e = y[out] - c[p] - (0..p).map(|j| x[(out, j)] * c[j]).sum::<f64>();
                e * e
            })
            .sum()
    }

    #[test]
    fn a_first_fit_takes_the_larger_shrinkage_that_predicts_its_rows_left_out_better() {
        let (x, y) = rows(40, 10, 3.0, 1);
        let mut config = ModelConfig::new(Basis::new(10, true, Transform::Identity), 1);
        config.prior = PriorFamily::Ridge;
        let (state, _) = fitted(&config, &x, &y);
        let done = on_rows(&config, statistics(&config, &x, &y), x.as_ref(), y.as_ref()).unwrap();
        assert!(done.skipped.is_empty(), "{:?}", done.skipped);
        assert_eq!(done.shrunk, 1);
        let (before, after) = (alpha(&state), alpha(&done.state));
        assert!(after > 1.2 * before, "α {before} → {after}");
        // Better on the rows left out one at a time, by refitting without each.
        let ys: Vec<f64> = y.col(0).iter().copied().collect();
        assert!(leave_one_out_error(&x, &ys, after) < leave_one_out_error(&x, &ys, before));
        // The posterior is the one of the same statistics at the new α: its mean is ridge's.
        let coefficients = done.state.coefficients();
        for (j, c) in ridge(&x, &ys, after).into_iter().enumerate() {
            assert!(
                (coefficients[(j, 0)] - c).abs() <= 1e-9 * c.abs().max(1.0),
                "{j}"
            );
        }
        assert_eq!(done.state.totals(), state.totals());
        // A refit from the statistics alone chooses by the evidence again.
        assert_eq!(alpha(&done.state.refit(&config).unwrap()), before);
    }

    /// A model fed its rows in two batches, the second fitting it again (it brings more than a
    /// quarter more rows), checks that refit's shrinkage on every row when it is given them,
    /// and answers as a model fed them at once; without them, or given rows other than the
    /// statistics', the refit is the evidence's.
    #[test]
    fn a_refit_given_every_row_checks_them_as_a_first_fit_on_them_does() {
        let (x, y) = rows(40, 10, 3.0, 1);
        let mut config = ModelConfig::new(Basis::new(10, true, Transform::Identity), 1);
        config.prior = PriorFamily::Ridge;
        let once = first_fit_on(&config, &x, &y);
        let ((x1, y1), (x2, y2)) = (part(&x, &y, 0, 24), part(&x, &y, 24, 40));
        let first = first_fit_on(&config, &x1, &y1);
        let batch = statistics(&config, &x2, &y2);
        let surprise = first.surprise(&batch);
        let (evidence, _) = first
            .update_with_shapes(&config, &batch, &surprise)
            .unwrap();
        let every = Some((x.as_ref(), y.as_ref()));
        let done = first
            .update_on_rows(&config, &batch, &surprise, every)
            .unwrap();
        assert_eq!((done.shrunk, done.fitted), (Ok(1), vec![true]));
        let checked = done.state;
        assert_eq!(checked.fitted_rows(), &[40.0]);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs();
        assert!(
            close(alpha(&checked), alpha(&once)),
            "two batches α {}, one batch α {}",
            alpha(&checked),
            alpha(&once)
        );
        assert!(alpha(&checked) > 1.2 * alpha(&evidence));
        let (a, b) = (checked.coefficients(), once.coefficients());
        for j in 0..a.nrows() {
            assert!((a[(j, 0)] - b[(j, 0)]).abs() <= 1e-6 * b[(j, 0)].abs().max(1.0));
        }
        // The batch's rows alone are not the statistics' rows: the refit is the evidence's.
        let unread = first
            .update_on_rows(&config, &batch, &surprise, Some((x2.as_ref(), y2.as_ref())))
            .unwrap();
        assert_eq!(
            (&unread.state, unread.shrunk),
            (&evidence, Err(EstimatorError::NotTheRows))
        );
        // An explicit refit: the evidence's from the statistics, the check's given the rows.
        assert_eq!(alpha(&checked.refit(&config).unwrap()), alpha(&evidence));
        let refit = checked.refit_on_rows(&config, every).unwrap();
        assert!(close(alpha(&refit.state), alpha(&once)));
    }

    /// 80 rows (of a seed) of 6 inputs and one output on one linear law: the first 40 small, their noise
    /// small and even; the last 40 ten times larger, their noise growing with the answer and
    /// heavy-tailed (one row in eight ten times off).
    fn two_kinds_of_rows(mut seed: u64) -> (Mat<f64>, Mat<f64>) {
        let (n, p) = (80, 6);
        let x = Mat::from_fn(n, p, |i, _| {
            let size = if i < 40 { 1.0 } else { 10.0 };
            size * uniform(&mut seed)
        });
        let y = Mat::from_fn(n, 1, |i, _| {
            let mean: f64 = 2.0 + (0..p).map(|j| x[(i, j)] * (j as f64 - 2.0)).sum::<f64>();
            let e = uniform(&mut seed) + uniform(&mut seed) + uniform(&mut seed) - 1.5;
            let noise = if i < 40 {
                0.05 * e
            } else {
                let off = if i % 8 == 0 { 10.0 } else { 1.0 };
                0.05 * mean.abs() * off * e
            };
            mean + noise
        });
        (x, y)
    }

    /// A model fed those rows in two batches, the second fitting it again, takes the noise shape
    /// and the tail that every row chooses when it is given them, as a first fit on them all
    /// does; without them, or given other rows, it keeps the first batch's.
    #[test]
    fn a_refit_given_every_row_reads_the_noise_shape_and_tail_a_first_fit_on_them_reads() {
        let (x, y) = two_kinds_of_rows(2);
        let mut config = ModelConfig::new(Basis::new(6, true, Transform::Identity), 1);
        config.prior = PriorFamily::Ridge;
        let once = on_rows(&config, statistics(&config, &x, &y), x.as_ref(), y.as_ref()).unwrap();
        let ((x1, y1), (x2, y2)) = (part(&x, &y, 0, 40), part(&x, &y, 40, 80));
        let first = first_fit_on(&config, &x1, &y1);
        // The two kinds of rows choose differently, or this test could not fail.
        assert_eq!((first.noise_shape(0), first.tail()), (None, None));
        let shape = once
            .state
            .noise_shape(0)
            .expect("every row chooses a shape");
        let tail = once.state.tail().expect("every row chooses a tail");
        let batch = statistics(&config, &x2, &y2);
        let surprise = first.surprise(&batch);
        let every = Some((x.as_ref(), y.as_ref()));
        let done = update_on_rows(&first, &config, &batch, &surprise, every).unwrap();
        assert!(done.skipped.is_empty(), "{:?}", done.skipped);
        assert!(done.reshaped);
        // Leave-one-out keeps the evidence's α on these rows: what differs is the shape alone.
        assert_eq!(done.shrunk, 0);
        // The means agree to the α's round-off, the residuals' level to a little more.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs();
        let same = |state: &ModelState| {
            let read = state.noise_shape(0).expect("a shape");
            read.power() == shape.power()
                && close(read.offset(), shape.offset())
                && close(read.level(), shape.level())
                && state.tail() == Some(tail)
        };
        assert!(
            same(&done.state),
            "{:?}, {:?} against {shape:?}, {tail}",
            done.state.noise_shape(0),
            done.state.tail()
        );
        let ForPredictor::Formed(predictor) = &done.predictor else {
            panic!("the rows formed no predictor");
        };
        let answers = predictor.predict(x.as_ref()).unwrap();
        let expected = once.predictor.predict(x.as_ref()).unwrap();
        for i in 0..x.nrows() {
            let (a, b) = (answers.variance[(i, 0)], expected.variance[(i, 0)]);
            assert!(
                (a - b).abs() <= 1e-6 * b,
                "row {i}: variance {a} against {b}"
            );
            assert_eq!(
                predictor.degrees_of_freedom(0, answers.mean[(i, 0)]),
                Some(tail)
            );
        }
        // Without the rows, or given rows that are not the statistics', the first batch's.
        for rows in [None, Some((x2.as_ref(), y2.as_ref()))] {
            let unread = update_on_rows(&first, &config, &batch, &surprise, rows).unwrap();
            assert!(!unread.reshaped);
            assert!(matches!(unread.predictor, ForPredictor::Shapes(_)));
            assert_eq!(
                (unread.state.noise_shape(0), unread.state.tail()),
                (None, None)
            );
        }
        // An explicit refit of the two batches' state given every row reads them alike.
        let stepped = first.update(&config, &batch).unwrap();
        let refit = refit_on_rows(&stepped, &config, every).unwrap();
        assert!(refit.reshaped && same(&refit.state));
    }

    /// Two outputs whose noise grows with the answer, both shaped by a first fit of 70 rows; a
    /// batch of 6 more (too few to refit by growth) contradicts output 0 alone, which is fitted
    /// again and reads its shape off every row; output 1 takes one step and keeps its shape to
    /// the bit, though the rows would choose it another offset. (The estimator's rule: the
    /// folder hands no rows to a batch that may refit by contradiction alone.)
    #[test]
    fn an_output_the_batch_only_steps_keeps_its_shape_beside_one_it_refits() {
        let (n, p) = (76, 6);
        let mut seed = 9;
        let x = Mat::from_fn(n, p, |_, _| 10.0 * uniform(&mut seed));
        let y = Mat::from_fn(n, 2, |i, k| {
            let mean: f64 = 2.0
                + (0..p)
                    .map(|j| x[(i, j)] * (j as f64 - 2.0 + k as f64))
                    .sum::<f64>();
            let e = uniform(&mut seed) + uniform(&mut seed) + uniform(&mut seed) - 1.5;
            // The batch's rows read output 0 far off.
            let shift = if i >= 70 && k == 0 { 50.0 } else { 0.0 };
            mean + 0.05 * mean.abs() * e + shift
        });
        let config = ModelConfig::new(Basis::new(p, true, Transform::Identity), 2);
        let ((x1, y1), (x2, y2)) = (part(&x, &y, 0, 70), part(&x, &y, 70, n));
        let first = first_fit_on(&config, &x1, &y1);
        let kept = first.noise_shape(1);
        assert!(first.noise_shape(0).is_some() && kept.is_some());
        let batch = statistics(&config, &x2, &y2);
        let surprise = first.surprise(&batch);
        let every = Some((x.as_ref(), y.as_ref()));
        let done = update_on_rows(&first, &config, &batch, &surprise, every).unwrap();
        assert!(done.skipped.is_empty(), "{:?}", done.skipped);
        assert_eq!(done.state.fitted_rows(), &[76.0, 70.0]);
        assert!(done.reshaped);
        let read = done
            .state
            .noise_shapes_from_rows(x.as_ref(), y.as_ref())
            .unwrap();
        assert_eq!(done.state.noise_shape(0), read[0]);
        assert_ne!(
            read[1], kept,
            "the rows would choose output 1 the same shape"
        );
        assert_eq!(done.state.noise_shape(1), kept);
    }

    /// A state with a noise shape and a tail, stepped by a batch too small to refit it, keeps
    /// both whatever rows it is handed.
    #[test]
    fn a_batch_that_only_steps_keeps_the_shape_and_tail_it_met() {
        let (x, y) = two_kinds_of_rows(2);
        let mut config = ModelConfig::new(Basis::new(6, true, Transform::Identity), 1);
        config.prior = PriorFamily::Ridge;
        let state = first_fit_on(&config, &x, &y);
        assert!(state.noise_shape(0).is_some() && state.tail().is_some());
        // 4 of the rows again: 84 rows on 80.
        let again = |i: usize| if i < 80 { i } else { i - 80 };
        let x2 = Mat::from_fn(84, 6, |i, j| x[(again(i), j)]);
        let y2 = Mat::from_fn(84, 1, |i, _| y[(again(i), 0)]);
        let (x3, y3) = part(&x, &y, 0, 4);
        let small = statistics(&config, &x3, &y3);
        let stepped = update_on_rows(
            &state,
            &config,
            &small,
            &state.surprise(&small),
            Some((x2.as_ref(), y2.as_ref())),
        )
        .unwrap();
        assert_eq!(stepped.state.fitted_rows(), state.fitted_rows());
        assert!(!stepped.reshaped);
        assert!(matches!(stepped.predictor, ForPredictor::Shapes(_)));
        assert_eq!(
            (stepped.state.noise_shape(0), stepped.state.tail()),
            (state.noise_shape(0), state.tail())
        );
    }

    /// At the evidence's own `α` the noise update gives the evidence's `ŝ`: Algorithm 2's fixed
    /// point, which the larger `α` moves off.
    #[test]
    fn the_noise_at_the_evidences_alpha_is_its_fixed_point() {
        let (x, y) = rows(40, 10, 3.0, 1);
        let mut config = ModelConfig::new(Basis::new(10, true, Transform::Identity), 1);
        config.prior = PriorFamily::Ridge;
        let (state, shapes) = fitted(&config, &x, &y);
        let post = state.outputs()[0].posterior().unwrap();
        let flat = post.prior().flat();
        assert!(shapes.rank_of(state.totals(), flat).is_some());
        let (_, shape) = shapes.find(post.prior().family, None).unwrap();
        let data = crate::evidence::Centred::new(state.totals().output(0), flat).unwrap();
        let noise = crate::NoisePrior {
            rows: 0.0,
            scale: 0.0,
            floor: 0.0,
        };
        let (scale, s) = shape.at_alpha(&data, noise, alpha(&state));
        let relative = |a: f64, b: f64| (a - b).abs() / b;
        assert!(relative(s, post.noise_variance()) < 1e-6, "{s}");
        assert!(relative(scale, post.prior().variance[0]) < 1e-6, "{scale}");
        let (_, above) = shape.at_alpha(&data, noise, 4.0 * alpha(&state));
        assert!(relative(above, post.noise_variance()) > 1e-3);
    }

    #[test]
    fn rows_other_than_the_fits_leave_it_as_it_was() {
        let (x, y) = rows(40, 10, 3.0, 1);
        let config = ModelConfig::new(Basis::new(10, true, Transform::Identity), 1);
        let (state, _) = fitted(&config, &x, &y);
        // Other rows of the same size, and fewer of the fit's own.
        let other = rows(40, 10, 3.0, 2);
        let fewer = (
            Mat::from_fn(30, 10, |i, j| x[(i, j)]),
            Mat::from_fn(30, 1, |i, _| y[(i, 0)]),
        );
        for (rows_x, rows_y) in [other, fewer] {
            let (checked, _, outcome) = ModelState::fit_on_rows(
                &config,
                statistics(&config, &x, &y),
                rows_x.as_ref(),
                rows_y.as_ref(),
            )
            .unwrap();
            assert_eq!(outcome, Err(EstimatorError::NotTheRows));
            assert_eq!(checked, state);
        }
    }

    #[test]
    fn an_ard_fit_keeps_its_prior() {
        let (x, y) = rows(40, 10, 3.0, 1);
        let mut config = ModelConfig::new(Basis::new(10, true, Transform::Identity), 1);
        config.prior = PriorFamily::Ard;
        let (state, _) = fitted(&config, &x, &y);
        let (checked, _, outcome) =
            ModelState::fit_on_rows(&config, statistics(&config, &x, &y), x.as_ref(), y.as_ref())
                .unwrap();
        assert_eq!(outcome, Ok(0));
        assert_eq!(checked, state);
    }

    /// `auto` on named features weighs ARD against ridge by the evidence alone: where ARD wins,
    /// the state is the evidence's fit and no member counts as moved, though ridge's fit on the
    /// same rows takes a larger `α`.
    #[test]
    fn where_ard_wins_the_check_leaves_the_fit_and_counts_nothing() {
        let (n, p) = (100, 30);
        let mut seed = 1;
        let x = Mat::from_fn(n, p, |_, _| uniform(&mut seed));
        let y = Mat::from_fn(n, 1, |i, _| {
            30.0 * x[(i, 0)] - 20.0 * x[(i, 1)]
                + 0.5 * (6.0 * x[(i, 0)]).sin()
                + 0.05 * (uniform(&mut seed) - 0.5)
        });
        let mut config = ModelConfig::new(Basis::new(p, true, Transform::Identity), 1);
        config.prior = PriorFamily::Ridge;
        let (_, _, ridge) =
            ModelState::fit_on_rows(&config, statistics(&config, &x, &y), x.as_ref(), y.as_ref())
                .unwrap();
        assert_eq!(ridge, Ok(1));
        config.prior = PriorFamily::Auto;
        let (state, _) = fitted(&config, &x, &y);
        let post = state.outputs()[0].posterior().unwrap();
        assert_eq!(post.prior().family, crate::FittedFamily::Ard);
        let (checked, _, moved) =
            ModelState::fit_on_rows(&config, statistics(&config, &x, &y), x.as_ref(), y.as_ref())
                .unwrap();
        assert_eq!(moved, Ok(0));
        assert_eq!(checked, state);
    }

    /// Under the smooth prior on a few rows the model average keeps several shapes: each
    /// member keeps its shape and place, none takes less shrinkage than the evidence's, those
    /// that take more are counted, and an alternate is among them.
    #[test]
    fn the_alternates_of_a_model_average_are_checked_each_in_its_place() {
        let (n, bands) = (24, 40);
        let mut seed = 3;
        let amounts: Vec<[f64; 2]> = (0..n)
            .map(|_| [uniform(&mut seed), uniform(&mut seed)])
            .collect();
        let x = Mat::from_fn(n, bands, |i, j| {
            let t = j as f64 / bands as f64;
            0.2 + amounts[i][0] * (-(t - 0.3).powi(2) / 0.01).exp()
                + amounts[i][1] * (-(t - 0.7).powi(2) / 0.02).exp()
                + 0.002 * (uniform(&mut seed) - 0.5)
        });
        // A content the bands follow non-linearly: the evidence reads the bend as signal.
        let y = Mat::from_fn(n, 1, |i, _| {
            amounts[i][0] + 3.0 * (4.0 * amounts[i][0]).sin() * amounts[i][1] - 0.5 * amounts[i][1]
                + 0.1 * (uniform(&mut seed) - 0.5)
        });
        let basis = Basis::spectral(
            bands,
            crate::ReflectanceScale::Fraction,
            bands,
            true,
            Transform::Identity,
        );
        let mut config = ModelConfig::new(basis, 1);
        config.prior = PriorFamily::Smooth;
        let (plain, _) = fitted(&config, &x, &y);
        let (checked, _, moved) =
            ModelState::fit_on_rows(&config, statistics(&config, &x, &y), x.as_ref(), y.as_ref())
                .unwrap();
        let members = |state: &ModelState| -> Vec<(Option<crate::prior::Smooth>, f64)> {
            let post = state.outputs()[0].posterior().unwrap();
            std::iter::once((
                post.prior().smooth,
                post.noise_variance() / post.prior().variance[0],
            ))
            .chain(
                state
                    .alternates(0)
                    .iter()
                    .map(|a| (a.prior.smooth, a.noise_variance / a.prior.variance[0])),
            )
            .collect()
        };
        let (before, after) = (members(&plain), members(&checked));
        assert!(before.len() > 1, "a single shape: {before:?}");
        assert_eq!(before.len(), after.len());
        let mut larger = 0;
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(b.0, a.0, "a member changed its shape");
            assert!(a.1 >= b.1 * (1.0 - 1e-12), "α {} → {}", b.1, a.1);
            larger += usize::from(a.1 > b.1);
        }
        assert_eq!(moved, Ok(larger));
        assert!(
            before.iter().zip(&after).skip(1).any(|(b, a)| a.1 > b.1),
            "no alternate moved: {before:?} → {after:?}"
        );
    }
}
