//! An instrument replaced with an overlap, measured on simulated lab dips: how well the model of
//! the old instrument answers for the new one's readings through the estimator's transfer map
//! (`mordant_estimator::transfer`), beside the new instrument's own model, their combination,
//! and what a model does today (one Bayesian step on the new instrument's rows).
//!
//! Rows (one seed, the same samples whichever instrument reads them): the first
//! `calibration_rows` lab dips read by the reference instrument train the old model (the first
//! fit, then one-step batches, as `--evaluate` trains); the next `transfer_rows` are read by both
//! instruments (the overlap: the map learns from the pairs, the new instrument's own model from
//! the new readings and their recipes); the `test_rows` after them are read by the new
//! instrument ([`Instrument::SWAPPED`]: a 3 nm shift and a gain of 0.98) and scored against
//! their recipes. The recipes are the simulator's defaults (any three dyes of the range), as
//! `mordant simulate` writes them, so that `bench/instrument_swap.py` runs the chemometric peers
//! on the same rows.

use faer::Mat;
use serde::Serialize;

use super::SimulateError;
use super::evaluate::{Design, recipes, statistics};
use super::generate::{
    Grid, Instrument, LabDip, NoiseModel, Scenario, SimulationConfig, Simulator, World,
};
use mordant_estimator::succession::{Succession, SuccessorRows};
use mordant_estimator::transfer::{
    MIN_TRANSFER_ROWS, PathPrediction, TransferMap, combine, mix, through_map,
};
use mordant_estimator::{FitOptions, ModelConfig, ModelState, Predictions, Predictor};

/// Settings of [`transfer_study`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TransferOptions {
    pub seed: u64,
    /// Lab dips the old model learns, read by the reference instrument.
    pub calibration_rows: usize,
    /// Rows of the old model's first fit; the rest arrive in batches of `batch_rows`.
    pub first_fit_rows: usize,
    pub batch_rows: usize,
    /// Samples read by both instruments.
    pub transfer_rows: usize,
    /// Samples read by the new instrument and scored.
    pub test_rows: usize,
    /// Rows the new instrument reads after the overlap, in batches of `stream_batch_rows`: each
    /// batch is scored by both paths (the record that weighs them) and then learnt by the new
    /// instrument's own model.
    pub stream_rows: usize,
    pub stream_batch_rows: usize,
    #[serde(skip)]
    pub noise: NoiseModel,
    pub world: World,
    #[serde(skip)]
    pub fit: FitOptions,
}

impl Default for TransferOptions {
    fn default() -> Self {
        Self {
            seed: 0,
            calibration_rows: 1000,
            first_fit_rows: 300,
            batch_rows: 100,
            transfer_rows: 30,
            test_rows: 500,
            stream_rows: 300,
            stream_batch_rows: 10,
            noise: NoiseModel::BENCHTOP,
            world: World::default(),
            fit: FitOptions::default(),
        }
    }
}

/// One way of answering for the new instrument: its error over every test row and dye
/// (% owf), and the share of those within their 95 % interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MethodScore {
    pub method: &'static str,
    pub concentration_rmse: f64,
    pub coverage_95: f64,
}

/// What [`transfer_study`] measured.
#[derive(Clone, Debug, Serialize)]
pub struct TransferReport {
    pub options: TransferOptions,
    pub swap: String,
    pub model_grid: String,
    /// The map's window (new bands each side) and relative amplitude, chosen by the evidence.
    pub map_window: usize,
    pub map_amplitude: f64,
    /// The sums of every reading of the calibration, overlap and test rows, by the reference
    /// and by the new instrument: a script that reads the same rows from `mordant simulate`'s
    /// CSV checks with them that they are the same.
    pub reading_sums: [f64; 2],
    /// Scores at the end of the overlap.
    pub methods: Vec<MethodScore>,
    /// Scores after the stream of new-instrument rows.
    pub after_stream: Vec<MethodScore>,
    /// The own model's weight after the stream, and the stream row after which the old path
    /// retired (`succession::Succession::retired`: the own model stood on its own by
    /// `transfer::PathRecord::own_stands`), if it did.
    pub own_weight: f64,
    pub own_stood_after: Option<usize>,
}

impl TransferReport {
    /// The report as a Markdown table.
    pub fn to_table(&self) -> String {
        let o = &self.options;
        let mut out = format!(
            "Instrument swap with an overlap ({}), model grid {}\n\
             seed {}; {} calibration rows on the reference instrument, {} rows read by both, \
             {} test rows read by the new instrument; the map's window {} bands, amplitude {:.3e}\n\n\
             | method | concentration RMSE (% owf) | 95 % coverage |\n| --- | --- | --- |\n",
            self.swap,
            self.model_grid,
            o.seed,
            o.calibration_rows,
            o.transfer_rows,
            o.test_rows,
            self.map_window,
            self.map_amplitude,
        );
        let rows = |out: &mut String, methods: &[MethodScore]| {
            for m in methods {
                out.push_str(&format!(
                    "| {} | {:.5} | {:.3} |\n",
                    m.method, m.concentration_rmse, m.coverage_95
                ));
            }
        };
        rows(&mut out, &self.methods);
        out.push_str(&format!(
            "\nAfter {} more rows from the new instrument (batches of {}): the own model's weight \
             {:.3}; it stood on its own {}\n\n\
             | method | concentration RMSE (% owf) | 95 % coverage |\n| --- | --- | --- |\n",
            o.stream_rows,
            o.stream_batch_rows,
            self.own_weight,
            self.own_stood_after
                .map_or("at no point".to_owned(), |r| format!("after {r} rows")),
        ));
        rows(&mut out, &self.after_stream);
        out
    }
}

/// Measures the instrument swap with an overlap (the module's protocol) on `grid`.
pub fn transfer_study(
    options: &TransferOptions,
    grid: Grid,
) -> Result<TransferReport, SimulateError> {
    if options.first_fit_rows == 0
        || options.batch_rows == 0
        || options.test_rows == 0
        || options.first_fit_rows > options.calibration_rows
    {
        return Err(SimulateError::Options(
            "the first fit needs rows and at most the calibration rows; batches and the test \
             rows need at least one row each"
                .into(),
        ));
    }
    let simulator = |scenario| {
        Simulator::new(SimulationConfig {
            grid,
            noise: options.noise,
            scenario,
            drift_at: 0,
            world: options.world,
            ..SimulationConfig::new(options.seed)
        })
    };
    let (reference, swapped) = (
        simulator(Scenario::None),
        simulator(Scenario::InstrumentSwap),
    );
    let design = Design {
        transform: options.world.transform(),
        ..Design::standard(&reference)
    };
    let config = ModelConfig {
        options: options.fit,
        ..ModelConfig::new(design.basis(), reference.dyes().len())
    };
    let c = options.calibration_rows;
    let pairs = c..c + options.transfer_rows;
    let tests = pairs.end..pairs.end + options.test_rows;

    let mut old = ModelState::fit(
        &config,
        statistics(&design, &reference.lab_dips(0..options.first_fit_rows))?,
    )?;
    let mut row = options.first_fit_rows;
    while row < c {
        let end = (row + options.batch_rows).min(c);
        old = old.update(
            &config,
            &statistics(&design, &reference.lab_dips(row..end))?,
        )?;
        row = end;
    }
    let (pairs_old, pairs_new) = (
        reference.lab_dips(pairs.clone()),
        swapped.lab_dips(pairs.clone()),
    );
    let test_new = swapped.lab_dips(tests.clone());
    let test_old = reference.lab_dips(tests);
    let truth = recipes(&test_new);
    let (x_new, x_old) = (design.inputs(&test_new), design.inputs(&test_old));
    let predictor = Predictor::new(&old);

    let mut methods = vec![
        scored(
            "old model, the old instrument's readings (no swap)",
            &predictor.predict(x_old.as_ref())?,
            &truth,
        ),
        scored(
            "old model, the new instrument's readings as they are",
            &predictor.predict(x_new.as_ref())?,
            &truth,
        ),
    ];
    let stepped = old.update(&config, &statistics(&design, &pairs_new)?)?;
    methods.push(scored(
        "old model after one step on the new instrument's rows (no map)",
        &Predictor::new(&stepped).predict(x_new.as_ref())?,
        &truth,
    ));

    let bands = grid.count;
    // A reading's spectrum and its named features apart, as a successor's rows carry them.
    let split = |dips: &[LabDip]| {
        let x = design.inputs(dips);
        (
            x.subcols(0, bands).to_owned(),
            x.subcols(bands, x.ncols() - bands).to_owned(),
        )
    };
    let (z_pairs, f_pairs) = split(&pairs_new);
    let (x_pairs, _) = split(&pairs_old);
    let y_pairs = recipes(&pairs_new);
    // The overlap, learnt as the service learns it (`mordant_estimator::succession`).
    let mut succession = Succession::new(grid, bands).learn(
        &old,
        &config,
        &grid,
        SuccessorRows {
            new: z_pairs.as_ref(),
            old: Some(x_pairs.as_ref()),
            features: f_pairs.as_ref(),
            outputs: y_pairs.as_ref(),
        },
    )?;
    let map = succession.map(&grid)?.ok_or_else(|| {
        SimulateError::Options(format!(
            "a map needs at least {MIN_TRANSFER_ROWS} samples read by both instruments"
        ))
    })?;
    let own_of = |succession: &Succession| {
        succession
            .own()
            .cloned()
            .ok_or_else(|| SimulateError::Options("the overlap taught the own model no row".into()))
    };
    let at_overlap = answer_paths(&predictor, &map, &own_of(&succession)?, &x_new, bands, None)?;
    for (method, answers) in [
        ("old model through the map", &at_overlap.through),
        (
            "the new instrument's own model (the overlap's rows)",
            &at_overlap.own,
        ),
        (
            "both, combined by precision (transfer::combine)",
            &at_overlap.both,
        ),
    ] {
        methods.push(scored(method, &as_predictions(answers), &truth));
    }

    // Each batch of the stream is scored by both paths before either learns it (the record),
    // then learnt by the own model; the old path retires once the record says so.
    let mut own_stood_after = None;
    let stream_start = c + options.transfer_rows + options.test_rows;
    let mut row = stream_start;
    while row < stream_start + options.stream_rows {
        let end = (row + options.stream_batch_rows.max(1)).min(stream_start + options.stream_rows);
        let batch = swapped.lab_dips(row..end);
        let (z, f) = split(&batch);
        let y = recipes(&batch);
        succession = succession.learn(
            &old,
            &config,
            &grid,
            SuccessorRows {
                new: z.as_ref(),
                old: None,
                features: f.as_ref(),
                outputs: y.as_ref(),
            },
        )?;
        row = end;
        if own_stood_after.is_none() && succession.retired() {
            own_stood_after = Some(row - stream_start);
        }
    }
    let own_state = own_of(&succession)?;
    let at_end = answer_paths(
        &predictor,
        &map,
        &own_state,
        &x_new,
        bands,
        Some(succession.own_weight()),
    )?;
    let mut after_stream: Vec<MethodScore> = [
        ("old model through the map", &at_end.through),
        ("the new instrument's own model", &at_end.own),
        (
            "both, combined by precision (transfer::combine)",
            &at_end.both,
        ),
    ]
    .into_iter()
    .map(|(method, answers)| scored(method, &as_predictions(answers), &truth))
    .collect();
    // The same rows fitted afresh (Algorithm 2 from nothing), not grown from the overlap's fit.
    let afresh = ModelState::fit(&config, own_state.totals().clone())?;
    after_stream.push(scored(
        "the new instrument's own model, fitted afresh on all its rows",
        &Predictor::new(&afresh).predict(x_new.as_ref())?,
        &truth,
    ));
    if let Some(mixed) = &at_end.mixed {
        after_stream.push(scored(
            "both, mixed by their record (transfer::mix; the own model alone once the old path \
             retired)",
            &as_predictions(mixed),
            &truth,
        ));
    }

    let swap = Instrument::SWAPPED;
    Ok(TransferReport {
        options: *options,
        swap: format!(
            "gain {}, offset {:+} % R, wavelength shift {:+} nm",
            swap.gain, swap.offset_percent, swap.shift_nm
        ),
        model_grid: format!(
            "{}–{} nm every {} nm",
            grid.start_nm,
            grid.end_nm(),
            grid.interval_nm
        ),
        map_window: map.window(),
        map_amplitude: map.amplitude(),
        reading_sums: [&reference, &swapped].map(|sim| {
            sim.lab_dips(0..stream_start)
                .iter()
                .map(|d| d.reflectance.iter().sum::<f64>())
                .sum()
        }),
        methods,
        after_stream,
        own_weight: succession.own_weight(),
        own_stood_after,
    })
}

/// The answers of each path for some rows of the new instrument, per row and output.
struct Answers {
    through: Vec<Vec<PathPrediction>>,
    own: Vec<Vec<PathPrediction>>,
    both: Vec<Vec<PathPrediction>>,
    mixed: Option<Vec<Vec<PathPrediction>>>,
}

/// The answers for the rows `x` of the new instrument: through the map, by the own model, both
/// combined by precision, and (given the own model's weight) mixed by it.
fn answer_paths(
    predictor: &Predictor,
    map: &TransferMap,
    own_state: &ModelState,
    x: &Mat<f64>,
    bands: usize,
    own_weight: Option<f64>,
) -> Result<Answers, SimulateError> {
    let own = Predictor::new(own_state);
    let own_answers = own.predict(x.as_ref())?;
    let m = own_answers.mean.ncols();
    let rows = x.nrows();
    let mut answers = Answers {
        through: Vec::with_capacity(rows),
        own: Vec::with_capacity(rows),
        both: Vec::with_capacity(rows),
        mixed: own_weight.map(|_| Vec::with_capacity(rows)),
    };
    for i in 0..rows {
        let row: Vec<f64> = (0..x.ncols()).map(|j| x[(i, j)]).collect();
        let through = through_map(predictor, map, &row[..bands], &row[bands..])?;
        let own_row: Vec<PathPrediction> = (0..m)
            .map(|k| PathPrediction {
                mean: own_answers.mean[(i, k)],
                variance: own_answers.variance[(i, k)],
                noise: own.noise_variance(k).unwrap_or(0.0),
            })
            .collect();
        let pair = || through.iter().zip(&own_row);
        answers
            .both
            .push(pair().map(|(a, b)| combine(*a, *b)).collect());
        if let (Some(mixed), Some(weight)) = (answers.mixed.as_mut(), own_weight) {
            mixed.push(pair().map(|(a, b)| mix(*a, *b, weight)).collect());
        }
        answers.through.push(through);
        answers.own.push(own_row);
    }
    Ok(answers)
}

/// Path predictions, per row and output, as [`Predictions`].
fn as_predictions(paths: &[Vec<PathPrediction>]) -> Predictions {
    let m = paths.first().map_or(0, Vec::len);
    Predictions {
        mean: Mat::from_fn(paths.len(), m, |i, k| paths[i][k].mean),
        variance: Mat::from_fn(paths.len(), m, |i, k| paths[i][k].variance),
    }
}

/// RMSE of `p`'s means against `truth` over every cell, and the share within 1.96 sd.
fn scored(method: &'static str, p: &Predictions, truth: &Mat<f64>) -> MethodScore {
    let (mut sq, mut inside, mut cells) = (0.0, 0.0, 0.0);
    for i in 0..truth.nrows() {
        for k in 0..truth.ncols() {
            let e = p.mean[(i, k)] - truth[(i, k)];
            sq += e * e;
            inside += f64::from(u8::from(e.abs() <= 1.959964 * p.variance[(i, k)].sqrt()));
            cells += 1.0;
        }
    }
    MethodScore {
        method,
        concentration_rmse: (sq / cells).sqrt(),
        coverage_95: inside / cells,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::MODEL_GRID;

    #[test]
    fn through_the_map_the_old_model_reads_the_new_instrument_about_as_well_as_the_old() {
        let options = TransferOptions {
            calibration_rows: 400,
            test_rows: 200,
            ..TransferOptions::default()
        };
        let report = transfer_study(&options, MODEL_GRID).unwrap();
        let rmse = |prefix: &str| {
            report
                .methods
                .iter()
                .find(|m| m.method.starts_with(prefix))
                .unwrap()
                .concentration_rmse
        };
        let (floor, raw, mapped) = (
            rmse("old model, the old"),
            rmse("old model, the new"),
            rmse("old model through"),
        );
        assert!(raw > 1.2 * floor, "the swap costs {raw} against {floor}");
        assert!(
            mapped < floor + 0.25 * (raw - floor),
            "through the map {mapped}; old readings {floor}, new ones as they are {raw}"
        );
        assert!(
            report
                .methods
                .iter()
                .all(|m| m.concentration_rmse.is_finite())
        );
    }
}
