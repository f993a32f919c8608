//! An instrument replaced with an overlap, as one state beside the model it succeeds: what the
//! service keeps for a successor instrument and how a batch of its rows is learnt.
//!
//! A [`Succession`] holds, for a successor instrument reading on its own grid (`q` bands):
//!
//! * the statistics of the pairs read by both instruments ([`TransferStatistics`]), from which
//!   the map to the old instrument's bands is learnt ([`TransferMap`]);
//! * the successor's own model: a [`ModelState`] on its bands and the model's named features
//!   ([`own_config`]), learnt from every successor row with its outputs, as any model learns;
//! * the record of how the two paths predicted successor rows before either learnt them
//!   ([`PathRecord`]), and whether the old path has retired.
//!
//! A batch ([`Succession::learn`]) is first scored by both paths (the record), then its pairs
//! join the map's statistics and its rows the own model: the record only ever holds
//! predictions of rows neither path had seen. Once the record says the own model stands on its
//! own ([`PathRecord::own_stands`]), the old path retires for good: from then on the own model
//! answers alone, and neither the old instrument's rows nor the map are needed.
//!
//! Until then the answer for a successor reading ([`Succession::predict`]) is the two paths
//! mixed by the record ([`mix`], weight [`PathRecord::own_weight`]): measured against combining
//! them by precision in `bench/instrument_swap.py` (ACCURACY.md), a model of a few overlap rows
//! can be sure of itself and wrong, which precision cannot see and the record can. Before the
//! map has its first [`MIN_TRANSFER_ROWS`] pairs, the own model answers alone.

use faer::{Mat, MatRef};

use crate::grid::Grid;
use crate::model::{ModelConfig, ModelState};
use crate::predictor::Predictor;
use crate::statistics::BatchStatistics;
use crate::transfer::{
    MIN_TRANSFER_ROWS, PathPrediction, PathRecord, TransferMap, TransferStatistics, mix,
    through_map,
};
use crate::{Basis, EstimatorError};

/// The own model's configuration: the model's, with the successor's `bands` in place of the
/// old instrument's spectral inputs (the named features after them, as before).
pub fn own_config(old: &ModelConfig, bands: usize) -> ModelConfig {
    let named = old.basis.features - old.basis.spectral;
    ModelConfig {
        basis: Basis {
            features: bands + named,
            spectral: bands,
            ..old.basis
        },
        ..old.clone()
    }
}

/// Rows read by the successor instrument, each with its outputs.
#[derive(Clone, Copy, Debug)]
pub struct SuccessorRows<'a> {
    /// Its readings, rows × q (the successor's grid).
    pub new: MatRef<'a, f64>,
    /// The old instrument's readings of the same samples, rows × p, during the overlap.
    pub old: Option<MatRef<'a, f64>>,
    /// The model's named features, rows × f.
    pub features: MatRef<'a, f64>,
    /// The outputs, rows × m.
    pub outputs: MatRef<'a, f64>,
}

/// How far a succession has come, for a model's status.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SuccessionStatus {
    /// Samples read by both instruments.
    pub pairs: f64,
    /// Successor rows the own model has learnt.
    pub own_rows: f64,
    /// Weighted successor rows both paths were scored on, and their mean log scores (map path,
    /// own path).
    pub scored_rows: f64,
    pub mean_scores: Option<(f64, f64)>,
    /// The own model's weight in the answer.
    pub own_weight: f64,
    /// Whether the old path has retired.
    pub retired: bool,
}

/// A successor instrument's state (the module's description).
#[derive(Clone, Debug)]
pub struct Succession {
    grid: Grid,
    pairs: TransferStatistics,
    own: Option<ModelState>,
    record: PathRecord,
    retired: bool,
}

impl Succession {
    /// A successor reading on `grid`, for a model whose old instrument reads `old_bands` bands:
    /// nothing learnt yet.
    pub fn new(grid: Grid, old_bands: usize) -> Self {
        Self {
            grid,
            pairs: TransferStatistics::empty(grid.count(), old_bands),
            own: None,
            record: PathRecord::default(),
            retired: false,
        }
    }

    /// The state from its parts (the codec's), checked against each other.
    pub fn from_parts(
        grid: Grid,
        pairs: TransferStatistics,
        own: Option<ModelState>,
        record: PathRecord,
        retired: bool,
    ) -> Result<Self, EstimatorError> {
        if pairs.new_bands() != grid.count() {
            return Err(EstimatorError::Dimension {
                what: "successor bands of the pairs",
                expected: grid.count(),
                found: pairs.new_bands(),
            });
        }
        if let Some(own) = &own
            && own.basis().spectral != grid.count()
        {
            return Err(EstimatorError::Dimension {
                what: "successor bands of the own model",
                expected: grid.count(),
                found: own.basis().spectral,
            });
        }
        if !(record.rows.is_finite() && record.map.is_finite() && record.own.is_finite())
            || record.rows < 0.0
        {
            return Err(EstimatorError::NonFinite("a path record"));
        }
        if retired && own.is_none() {
            return Err(
                crate::DecodeError::Invalid("a retired old path without an own model").into(),
            );
        }
        Ok(Self {
            grid,
            pairs,
            own,
            record,
            retired,
        })
    }

    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    pub fn pairs(&self) -> &TransferStatistics {
        &self.pairs
    }

    /// The own model, once it has learnt a row.
    pub fn own(&self) -> Option<&ModelState> {
        self.own.as_ref()
    }

    pub fn record(&self) -> &PathRecord {
        &self.record
    }

    pub fn retired(&self) -> bool {
        self.retired
    }

    pub fn status(&self) -> SuccessionStatus {
        SuccessionStatus {
            pairs: self.pairs.rows(),
            own_rows: self.own.as_ref().map_or(0.0, |own| own.totals().rows()),
            scored_rows: self.record.rows,
            mean_scores: self.record.mean_scores(),
            own_weight: self.own_weight(),
            retired: self.retired,
        }
    }

    /// The own model's weight in an answer: 1 once the old path retired, else the record's.
    pub fn own_weight(&self) -> f64 {
        if self.retired {
            1.0
        } else {
            self.record.own_weight()
        }
    }

    /// The map to the old instrument's grid `old_grid`, once [`MIN_TRANSFER_ROWS`] pairs are
    /// in and while the old path has not retired.
    pub fn map(&self, old_grid: &Grid) -> Result<Option<TransferMap>, EstimatorError> {
        if self.retired || self.pairs.rows() < MIN_TRANSFER_ROWS as f64 {
            return Ok(None);
        }
        TransferMap::fit(&self.pairs, &self.grid, old_grid).map(Some)
    }

    /// The state after learning `rows`, for the model `old` (configuration `config`, its
    /// instrument reading on `old_grid`): the rows are scored by both paths as they stand, then
    /// their pairs join the map's statistics and the rows the own model (module docs).
    pub fn learn(
        &self,
        old: &ModelState,
        config: &ModelConfig,
        old_grid: &Grid,
        rows: SuccessorRows<'_>,
    ) -> Result<Self, EstimatorError> {
        let n = rows.new.nrows();
        self.check_columns(&config.basis, rows.new, rows.features)?;
        let old_width = rows.old.map_or(self.pairs.old_bands(), |x| x.ncols());
        for (what, expected, found) in [
            ("rows of named features", n, rows.features.nrows()),
            ("rows of outputs", n, rows.outputs.nrows()),
            (
                "rows read by the old instrument",
                n,
                rows.old.map_or(n, |x| x.nrows()),
            ),
            ("old instrument bands", self.pairs.old_bands(), old_width),
            ("outputs", config.outputs, rows.outputs.ncols()),
        ] {
            if found != expected {
                return Err(EstimatorError::Dimension {
                    what,
                    expected,
                    found,
                });
            }
        }
        if n == 0 {
            return Ok(self.clone());
        }
        let own_config = own_config(config, self.grid.count());
        let mut next = self.clone();
        if !self.retired
            && let (Some(map), Some(own)) = (self.map(old_grid)?, &self.own)
        {
            let (old_predictor, own_predictor) = (Predictor::new(old), Predictor::new(own));
            for i in 0..n {
                let (through, own_row) = paths(
                    &old_predictor,
                    &map,
                    &own_predictor,
                    rows.new,
                    rows.features,
                    i,
                )?;
                let truth: Vec<f64> = rows.outputs.row(i).iter().copied().collect();
                next.record.record(&truth, &through, &own_row);
            }
            next.retired = next.record.own_stands();
        }
        if let Some(old_rows) = rows.old.filter(|_| !next.retired) {
            next.pairs
                .merge(&TransferStatistics::from_rows(rows.new, old_rows)?)?;
        }
        let stats = BatchStatistics::from_rows(
            &own_config.basis,
            joined(rows.new, rows.features).as_ref(),
            rows.outputs,
        )?;
        next.own = Some(match &self.own {
            Some(own) => own.update(&own_config, &stats)?,
            None => ModelState::fit(&own_config, stats)?,
        });
        Ok(next)
    }

    /// Checks that `new` has the successor's bands and `features` the model's named features.
    fn check_columns(
        &self,
        basis: &Basis,
        new: MatRef<'_, f64>,
        features: MatRef<'_, f64>,
    ) -> Result<(), EstimatorError> {
        let named = basis.features - basis.spectral;
        for (what, expected, found) in [
            ("successor bands", self.grid.count(), new.ncols()),
            ("named features", named, features.ncols()),
            ("rows of named features", new.nrows(), features.nrows()),
        ] {
            if found != expected {
                return Err(EstimatorError::Dimension {
                    what,
                    expected,
                    found,
                });
            }
        }
        Ok(())
    }

    /// The answer for successor readings `new` (rows × q) with their named `features`, per row
    /// and output: the old model through `map` and the own model mixed by the record; the own
    /// model alone where there is no map (too few pairs, or the old path retired). `None`
    /// before the own model has learnt a row and without a map.
    pub fn predict(
        &self,
        old: &Predictor,
        map: Option<&TransferMap>,
        new: MatRef<'_, f64>,
        features: MatRef<'_, f64>,
    ) -> Result<Option<Vec<Vec<PathPrediction>>>, EstimatorError> {
        let own = self.own_predictor();
        self.predict_with(old, own.as_ref(), map, new, features)
    }

    /// What predictions need of the own model (a server forms it once per state).
    pub fn own_predictor(&self) -> Option<Predictor> {
        self.own.as_ref().map(Predictor::new)
    }

    /// [`Self::predict`] with the own model's predictor formed before ([`Self::own_predictor`]).
    pub fn predict_with(
        &self,
        old: &Predictor,
        own: Option<&Predictor>,
        map: Option<&TransferMap>,
        new: MatRef<'_, f64>,
        features: MatRef<'_, f64>,
    ) -> Result<Option<Vec<Vec<PathPrediction>>>, EstimatorError> {
        self.check_columns(old.basis(), new, features)?;
        if own.is_some() != self.own.is_some() {
            return Err(EstimatorError::Dimension {
                what: "own model predictors",
                expected: usize::from(self.own.is_some()),
                found: usize::from(own.is_some()),
            });
        }
        let map = map.filter(|_| !self.retired);
        let weight = self.own_weight();
        let mut answers = Vec::with_capacity(new.nrows());
        for i in 0..new.nrows() {
            let row = match (map, own) {
                (Some(map), Some(own)) => {
                    let (through, own_row) = paths(old, map, own, new, features, i)?;
                    through
                        .iter()
                        .zip(&own_row)
                        .map(|(a, b)| mix(*a, *b, weight))
                        .collect()
                }
                (Some(map), None) => through_map(old, map, &row_of(new, i), &row_of(features, i))?,
                (None, Some(own)) => own_answers(own, new, features, i)?,
                (None, None) => return Ok(None),
            };
            answers.push(row);
        }
        Ok(Some(answers))
    }
}

/// Row `i` of `a`.
fn row_of(a: MatRef<'_, f64>, i: usize) -> Vec<f64> {
    a.row(i).iter().copied().collect()
}

/// `[new, features]` side by side: the own model's raw inputs.
fn joined(new: MatRef<'_, f64>, features: MatRef<'_, f64>) -> Mat<f64> {
    let q = new.ncols();
    Mat::from_fn(new.nrows(), q + features.ncols(), |i, j| {
        if j < q {
            new[(i, j)]
        } else {
            features[(i, j - q)]
        }
    })
}

/// Row `i`'s answers by the own model alone.
fn own_answers(
    own: &Predictor,
    new: MatRef<'_, f64>,
    features: MatRef<'_, f64>,
    i: usize,
) -> Result<Vec<PathPrediction>, EstimatorError> {
    let x = joined(new.subrows(i, 1), features.subrows(i, 1));
    let p = own.predict(x.as_ref())?;
    Ok((0..p.mean.ncols())
        .map(|k| PathPrediction {
            mean: p.mean[(0, k)],
            variance: p.variance[(0, k)],
            noise: own.noise_variance_at(k, p.mean[(0, k)]).unwrap_or(0.0),
        })
        .collect())
}

/// Row `i`'s answers through the map and by the own model.
fn paths(
    old: &Predictor,
    map: &TransferMap,
    own: &Predictor,
    new: MatRef<'_, f64>,
    features: MatRef<'_, f64>,
    i: usize,
) -> Result<(Vec<PathPrediction>, Vec<PathPrediction>), EstimatorError> {
    let through = through_map(old, map, &row_of(new, i), &row_of(features, i))?;
    Ok((through, own_answers(own, new, features, i)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_succession, encode_succession};
    use crate::{ReflectanceScale, Transform};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const BANDS: usize = 16;

    fn old_grid() -> Grid {
        Grid::new(400.0, 20.0, BANDS).unwrap()
    }

    /// The successor reads another grid, 5 nm on.
    fn new_grid() -> Grid {
        Grid::new(405.0, 20.0, BANDS).unwrap()
    }

    /// Samples: three concentrations (the outputs) and a named feature.
    fn samples(rows: usize, seed: u64) -> (Mat<f64>, Mat<f64>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let c = Mat::from_fn(rows, 3, |_, _| rng.random_range(0.0..1.0));
        let f = Mat::from_fn(rows, 1, |_, _| rng.random_range(0.0..1.0));
        (c, f)
    }

    /// Readings of the samples on `grid` by an instrument that shifts wavelengths by `shift`
    /// nm and has gain `gain`, with noise.
    fn read(c: &Mat<f64>, grid: &Grid, shift: f64, gain: f64, seed: u64) -> Mat<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let peak =
            |nm: f64, centre: f64, width: f64| (-0.5 * ((nm - centre) / width).powi(2)).exp();
        Mat::from_fn(c.nrows(), grid.count(), |i, j| {
            let nm = grid.wavelength(j) + shift;
            let clean = 0.1
                + 0.7 * c[(i, 0)] * peak(nm, 470.0, 40.0)
                + 0.5 * c[(i, 1)] * peak(nm, 560.0, 40.0)
                + 0.6 * c[(i, 2)] * peak(nm, 640.0, 35.0);
            gain * clean + 0.002 * rng.random_range(-1.0..1.0)
        })
    }

    fn config() -> ModelConfig {
        let basis = Basis::spectral(
            BANDS,
            ReflectanceScale::Fraction,
            BANDS + 1,
            true,
            Transform::Identity,
        );
        ModelConfig::new(basis, 3)
    }

    /// The old model, learnt from 200 samples read by the old instrument.
    fn old_model() -> ModelState {
        let (c, f) = samples(200, 1);
        let x = joined(read(&c, &old_grid(), 0.0, 1.0, 2).as_ref(), f.as_ref());
        ModelState::fit(
            &config(),
            BatchStatistics::from_rows(&config().basis, x.as_ref(), c.as_ref()).unwrap(),
        )
        .unwrap()
    }

    /// A batch of `rows` samples read by the successor (3 nm shift, gain 0.95), and by the
    /// old instrument too when `overlap`.
    struct Batch {
        new: Mat<f64>,
        old: Option<Mat<f64>>,
        features: Mat<f64>,
        outputs: Mat<f64>,
    }

    fn batch(rows: usize, seed: u64, overlap: bool) -> Batch {
        let (c, f) = samples(rows, seed);
        Batch {
            new: read(&c, &new_grid(), 3.0, 0.95, seed + 1),
            old: overlap.then(|| read(&c, &old_grid(), 0.0, 1.0, seed + 2)),
            features: f,
            outputs: c,
        }
    }

    impl Batch {
        /// `state`'s answers for these rows, beside the old model `old`.
        fn answered(
            &self,
            state: &Succession,
            old: &ModelState,
            map: Option<&TransferMap>,
        ) -> Option<Vec<Vec<PathPrediction>>> {
            state
                .predict(
                    &Predictor::new(old),
                    map,
                    self.new.as_ref(),
                    self.features.as_ref(),
                )
                .unwrap()
        }

        /// Row `i`'s answers through the map alone.
        fn through(&self, old: &ModelState, map: &TransferMap, i: usize) -> Vec<PathPrediction> {
            through_map(
                &Predictor::new(old),
                map,
                &row_of(self.new.as_ref(), i),
                &row_of(self.features.as_ref(), i),
            )
            .unwrap()
        }

        /// Row `i`'s answers by `state`'s own model alone.
        fn own(&self, state: &Succession, i: usize) -> Vec<PathPrediction> {
            let own = Predictor::new(state.own().unwrap());
            own_answers(&own, self.new.as_ref(), self.features.as_ref(), i).unwrap()
        }

        fn rows(&self) -> SuccessorRows<'_> {
            SuccessorRows {
                new: self.new.as_ref(),
                old: self.old.as_ref().map(Mat::as_ref),
                features: self.features.as_ref(),
                outputs: self.outputs.as_ref(),
            }
        }
    }

    fn learnt(batches: &[Batch], old: &ModelState) -> Succession {
        batches
            .iter()
            .fold(Succession::new(new_grid(), BANDS), |s, b| {
                s.learn(old, &config(), &old_grid(), b.rows()).unwrap()
            })
    }

    #[test]
    fn pairs_and_the_own_model_add_up_over_batches() {
        let old = old_model();
        let batches = [batch(12, 10, true), batch(7, 20, true), batch(9, 30, false)];
        let succession = learnt(&batches, &old);
        // The pairs are every overlap row's, whichever batch brought them.
        let stack = |m: &dyn Fn(&Batch) -> Option<&Mat<f64>>| {
            let parts: Vec<&Mat<f64>> = batches.iter().filter_map(m).collect();
            let rows: usize = parts.iter().map(|a| a.nrows()).sum();
            let cols = parts[0].ncols();
            let mut out = Mat::zeros(rows, cols);
            let mut at = 0;
            for a in parts {
                out.subrows_mut(at, a.nrows()).copy_from(a);
                at += a.nrows();
            }
            out
        };
        let overlap: Vec<&Batch> = batches.iter().filter(|b| b.old.is_some()).collect();
        assert_eq!(overlap.len(), 2);
        let at_once = TransferStatistics::from_rows(
            stack(&|b| b.old.as_ref().map(|_| &b.new)).as_ref(),
            stack(&|b| b.old.as_ref()).as_ref(),
        )
        .unwrap();
        assert_eq!(succession.pairs().rows(), 19.0);
        let (ours, theirs) = (succession.pairs().parts(), at_once.parts());
        for (a, b) in ours.2.iter().zip(theirs.2.iter()) {
            let scale = b.norm_max();
            assert!((a - b).norm_max() <= 1e-12 * scale.max(1.0));
        }
        // The own model has learnt every successor row, on its own grid and the named feature.
        let own = succession.own().unwrap();
        let all = BatchStatistics::from_rows(
            &own_config(&config(), BANDS).basis,
            joined(
                stack(&|b| Some(&b.new)).as_ref(),
                stack(&|b| Some(&b.features)).as_ref(),
            )
            .as_ref(),
            stack(&|b| Some(&b.outputs)).as_ref(),
        )
        .unwrap();
        assert_eq!(own.totals().rows(), 28.0);
        assert!((own.totals().g() - all.g()).norm_max() <= 1e-12 * all.g().norm_max());
        assert_eq!(own.basis().spectral, BANDS);
    }

    #[test]
    fn a_batch_is_scored_before_it_is_learnt_and_weighs_the_paths() {
        let old = old_model();
        let first = learnt(&[batch(20, 10, true)], &old);
        // Nothing was there to score the first batch.
        assert_eq!(first.record().rows, 0.0);
        let probe = batch(5, 99, false);
        let map = first.map(&old_grid()).unwrap().unwrap();
        let answers = probe.answered(&first, &old, Some(&map)).unwrap();
        // With no record the own model has no weight: the answer is the map path's.
        for (i, row) in answers.iter().enumerate() {
            let through = probe.through(&old, &map, i);
            assert_eq!(row, &through);
        }
        // The second batch is scored by both paths as they stood, then learnt.
        let second = first
            .learn(&old, &config(), &old_grid(), batch(10, 40, false).rows())
            .unwrap();
        assert!(
            (second.record().rows - 10.0).abs() < 0.2,
            "{:?}",
            second.record()
        );
        assert_eq!(second.pairs().rows(), 20.0);
        let w = second.own_weight();
        assert!(w > 0.0 && w < 1.0, "{w}");
        let mixed = probe.answered(&second, &old, Some(&map)).unwrap();
        for (i, row) in mixed.iter().enumerate() {
            let through = probe.through(&old, &map, i);
            let own_row = probe.own(&second, i);
            for k in 0..3 {
                let expected = mix(through[k], own_row[k], w);
                assert_eq!(row[k], expected);
            }
        }
    }

    #[test]
    fn once_the_own_model_stands_the_old_path_retires_for_good() {
        let old = old_model();
        let learnt = learnt(&[batch(30, 10, true)], &old);
        // A record in which the own model has done far better over enough rows.
        let record = PathRecord {
            rows: 40.0,
            map: -400.0,
            own: 40.0,
        };
        let state = Succession::from_parts(
            *learnt.grid(),
            learnt.pairs().clone(),
            learnt.own().cloned(),
            record,
            false,
        )
        .unwrap();
        assert!(!state.retired());
        let next = state
            .learn(&old, &config(), &old_grid(), batch(10, 50, true).rows())
            .unwrap();
        assert!(next.retired());
        // A retired succession no longer needs pairs: they stop growing.
        assert_eq!(next.pairs().rows(), 30.0);
        assert!(next.map(&old_grid()).unwrap().is_none());
        let probe = batch(4, 77, false);
        let answers = probe.answered(&next, &old, None).unwrap();
        for (i, row) in answers.iter().enumerate() {
            assert_eq!(row, &probe.own(&next, i));
        }
        // Retired for good: later batches neither score the paths nor bring the map back.
        let later = next
            .learn(&old, &config(), &old_grid(), batch(10, 60, true).rows())
            .unwrap();
        assert!(later.retired());
        assert_eq!(later.own_weight(), 1.0);
    }

    #[test]
    fn nothing_to_answer_with_before_any_row() {
        let old = old_model();
        let probe = batch(2, 5, false);
        let empty = Succession::new(new_grid(), BANDS);
        assert!(empty.map(&old_grid()).unwrap().is_none());
        assert!(probe.answered(&empty, &old, None).is_none());
        // Three pairs are too few for a map: the own model answers alone.
        let three = learnt(&[batch(3, 10, true)], &old);
        assert!(three.map(&old_grid()).unwrap().is_none());
        assert!(probe.answered(&three, &old, None).is_some());
    }

    #[test]
    fn a_batch_whose_parts_disagree_is_refused() {
        let old = old_model();
        let empty = Succession::new(new_grid(), BANDS);
        let refused = |change: &dyn Fn(&mut Batch)| {
            let mut bad = batch(5, 10, true);
            change(&mut bad);
            matches!(
                empty.learn(&old, &config(), &old_grid(), bad.rows()),
                Err(EstimatorError::Dimension { .. })
            )
        };
        assert!(refused(&|b| b.outputs = Mat::zeros(4, 3)));
        assert!(refused(&|b| b.outputs = Mat::zeros(5, 2)));
        // Columns moved between the readings and the named features.
        assert!(refused(&|b| {
            b.new = Mat::zeros(5, BANDS + 1);
            b.features = Mat::zeros(5, 0);
        }));
        assert!(refused(&|b| b.old = Some(Mat::zeros(5, BANDS - 1))));
        assert!(refused(&|b| b.old = Some(Mat::zeros(4, BANDS))));
        let probe = batch(2, 3, false);
        let narrow = Mat::<f64>::zeros(2, BANDS - 1);
        assert!(
            empty
                .predict(
                    &Predictor::new(&old),
                    None,
                    narrow.as_ref(),
                    probe.features.as_ref()
                )
                .is_err()
        );
        // No rows, nothing learnt.
        let none = empty
            .learn(&old, &config(), &old_grid(), batch(0, 10, true).rows())
            .unwrap();
        assert!(none.own().is_none());
        assert_eq!(none.pairs().rows(), 0.0);
    }

    #[test]
    fn the_codec_round_trips_a_succession_exactly() {
        let old = old_model();
        let empty = Succession::new(new_grid(), BANDS);
        let grown = learnt(&[batch(20, 10, true), batch(10, 40, false)], &old);
        for state in [&empty, &grown] {
            let bytes = encode_succession(state);
            let back = decode_succession(&bytes).unwrap();
            assert_eq!(encode_succession(&back), bytes);
            assert_eq!(back.status(), state.status());
            assert_eq!(back.grid(), state.grid());
        }
        let bytes = encode_succession(&grown);
        let mut flipped = bytes.clone();
        flipped[40] ^= 1;
        assert!(decode_succession(&flipped).is_err());
        assert!(decode_succession(&bytes[..bytes.len() - 9]).is_err());
        assert!(crate::codec::decode(&bytes).is_err());
        // A retired old path needs an own model.
        assert!(
            Succession::from_parts(
                *empty.grid(),
                empty.pairs().clone(),
                None,
                *empty.record(),
                true
            )
            .is_err()
        );
    }
}
