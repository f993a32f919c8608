//! `mordant evaluate`: the experiment of Song & Zhang on a data set, and the comparison models.
//!
//! Protocol per trial: shuffle the rows; 20 % test; the other 80 % split 60/40 into "old" and
//! "new" training rows. Learn old, score; learn new, score again. Each cell of the table is the
//! median over trials of R² averaged uniformly over the outputs.

pub mod baselines;
pub mod dataset;
pub mod metrics;

use std::time::Instant;

use anyhow::Context;
use faer::{Mat, MatRef};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::Serialize;

pub use dataset::Dataset;
use metrics::{Z95, coverage95, max_abs_ratio, max_relative_error, r2_present, r2_uniform};
use mordant_estimator::{
    Basis, BatchStatistics, FitOptions, ModelConfig, ModelState, Predictor, PriorFamily, Transform,
    UpdateMethod, tail,
};

/// The rows of the table, in order.
pub const MODELS: [&str; 7] = [
    "incremental",
    "incremental_refit",
    "old_only",
    "new_only",
    "one_shot",
    "ols",
    "bayesian_ridge",
];

/// How to run the experiment.
#[derive(Clone, Debug)]
pub struct EvaluateOptions {
    pub trials: usize,
    pub seed: u64,
    pub fit: FitOptions,
    pub transform: Transform,
    pub prior: PriorFamily,
}

impl Default for EvaluateOptions {
    fn default() -> Self {
        Self {
            trials: 20,
            seed: 0,
            fit: FitOptions::default(),
            transform: Transform::Identity,
            prior: PriorFamily::default(),
        }
    }
}

/// The table: one row per model, each cell a median over trials (`None` where it does not
/// apply to that model).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub trials: usize,
    pub rows: Vec<ReportRow>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ReportRow {
    pub model: String,
    pub old_train: Option<f64>,
    pub old_test: Option<f64>,
    pub new_train: Option<f64>,
    pub new_test: Option<f64>,
    pub test1: Option<f64>,
    pub test2: Option<f64>,
    /// Test 2's R² averaged over the outputs that vary in the test rows (the dyes present).
    pub test2_present: Option<f64>,
    pub time1_s: Option<f64>,
    pub time2_s: Option<f64>,
    pub coverage95: Option<f64>,
    pub coverage95_nonzero: Option<f64>,
    /// Lowest test-2 score of any trial.
    pub worst_test2: Option<f64>,
    /// Largest `|prediction| / max |training value|` of any test prediction in any trial,
    /// per output's own training range.
    pub max_abs_ratio: Option<f64>,
    /// Largest `|ŷ − y| / max(max |training value|, |y|)` of any test prediction in any trial
    /// ([`metrics::max_relative_error`]).
    pub max_relative_error: Option<f64>,
}

/// One model's cells in one trial.
#[derive(Clone, Debug, Default)]
struct TrialScores {
    old_train: Option<f64>,
    old_test: Option<f64>,
    new_train: Option<f64>,
    new_test: Option<f64>,
    test1: Option<f64>,
    test2: Option<f64>,
    test2_present: Option<f64>,
    time1_s: Option<f64>,
    time2_s: Option<f64>,
    coverage95: Option<f64>,
    coverage95_nonzero: Option<f64>,
    max_abs_ratio: Option<f64>,
    max_relative_error: Option<f64>,
}

/// The rows of one trial: old (48 %), new (32 %), all training rows (old then new), test (20 %).
pub struct Split {
    pub old_x: Mat<f64>,
    pub old_y: Mat<f64>,
    pub new_x: Mat<f64>,
    pub new_y: Mat<f64>,
    pub all_x: Mat<f64>,
    pub all_y: Mat<f64>,
    pub test_x: Mat<f64>,
    pub test_y: Mat<f64>,
}

impl Split {
    /// The split of trial seed `seed`: the rows shuffled by ChaCha8 seeded with `seed`.
    pub fn new(data: &Dataset, seed: u64) -> Self {
        let mut order: Vec<usize> = (0..data.rows()).collect();
        order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        let n_test = (data.rows() as f64 * 0.2).round() as usize;
        let (test, train) = order.split_at(n_test);
        let n_old = (train.len() as f64 * 0.6).round() as usize;
        let (old, new) = train.split_at(n_old);
        let (old_x, old_y) = data.select(old);
        let (new_x, new_y) = data.select(new);
        let (all_x, all_y) = data.select(train);
        let (test_x, test_y) = data.select(test);
        Self {
            old_x,
            old_y,
            new_x,
            new_y,
            all_x,
            all_y,
            test_x,
            test_y,
        }
    }
}

/// Runs the experiment; `tick` is called once per model and trial (for a progress bar).
pub fn run(
    data: &Dataset,
    options: &EvaluateOptions,
    mut tick: impl FnMut(&str),
) -> anyhow::Result<Report> {
    anyhow::ensure!(options.trials > 0, "at least one trial is needed");
    anyhow::ensure!(
        data.rows() >= 10,
        "at least 10 rows are needed, found {}",
        data.rows()
    );
    let basis = Basis::new(data.x.ncols(), true, options.transform);
    let config = |update| ModelConfig {
        update,
        options: options.fit,
        prior: options.prior,
        ..ModelConfig::new(basis, data.y.ncols())
    };
    let mut per_model: Vec<Vec<TrialScores>> = vec![Vec::new(); MODELS.len()];
    for trial in 0..options.trials {
        let split = Split::new(data, options.seed.wrapping_add(trial as u64));
        let results = [
            bayesian_two_stage(&split, &config(UpdateMethod::OneStep), Stage2::Update)?,
            bayesian_two_stage(&split, &config(UpdateMethod::Refit), Stage2::Update)?,
            bayesian_two_stage(&split, &config(UpdateMethod::OneStep), Stage2::None)?,
            bayesian_new_only(&split, &config(UpdateMethod::OneStep))?,
            bayesian_two_stage(&split, &config(UpdateMethod::OneStep), Stage2::FromScratch)?,
            baseline(&split, baselines::ols)?,
            baseline(&split, baselines::bayesian_ridge)?,
        ];
        for (k, scores) in results.into_iter().enumerate() {
            per_model[k].push(scores);
            tick(MODELS[k]);
        }
    }
    let rows = MODELS
        .iter()
        .zip(&per_model)
        .map(|(name, trials)| summarise(name, trials))
        .collect();
    Ok(Report {
        trials: options.trials,
        rows,
    })
}

fn score(state: &ModelState, x: MatRef<'_, f64>, y: MatRef<'_, f64>) -> anyhow::Result<f64> {
    let pred = state.predict(x)?;
    Ok(r2_uniform(y, pred.mean.as_ref()))
}

/// Coverage and range ratio of a Bayesian model's test predictions; an answer with a tail is
/// read as the Student-t it is ([`mordant_estimator::tail`]).
fn test_uncertainty(
    state: &ModelState,
    split: &Split,
    train_y: MatRef<'_, f64>,
    scores: &mut TrialScores,
) -> anyhow::Result<()> {
    let predictor = Predictor::new(state);
    let pred = predictor.predict(split.test_x.as_ref())?;
    let (all, nz) = coverage95(
        split.test_y.as_ref(),
        pred.mean.as_ref(),
        pred.variance.as_ref(),
        |k, mean| {
            predictor
                .degrees_of_freedom(k, mean)
                .and_then(tail::half_width_95)
                .unwrap_or(Z95)
        },
    );
    scores.coverage95 = Some(all);
    scores.coverage95_nonzero = nz;
    let ratio = max_abs_ratio(train_y, pred.mean.as_ref());
    scores.max_abs_ratio = Some(scores.max_abs_ratio.map_or(ratio, |r| r.max(ratio)));
    let error = max_relative_error(train_y, split.test_y.as_ref(), pred.mean.as_ref());
    scores.max_relative_error = Some(scores.max_relative_error.map_or(error, |e| e.max(error)));
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage2 {
    /// Learn the new rows with the model's update method.
    Update,
    /// Do not learn them (old data only).
    None,
    /// Fit again from scratch on old and new rows (one-shot).
    FromScratch,
}

/// The first fit on the rows `x`, `y`, completed on them as the service's first fit is on its
/// batches' rows ([`mordant_estimator::first_fit::on_rows`]: shrinkage checked by leave-one-out, noise shapes,
/// tail).
fn first_fit(
    config: &ModelConfig,
    x: MatRef<'_, f64>,
    y: MatRef<'_, f64>,
) -> anyhow::Result<ModelState> {
    let stats = BatchStatistics::from_rows(&config.basis, x, y)?;
    let done = mordant_estimator::first_fit::on_rows(config, stats, x, y)?;
    if let Some((step, e)) = done.skipped.into_iter().next() {
        return Err(anyhow::Error::new(e).context(step));
    }
    Ok(done.state)
}

fn bayesian_two_stage(
    split: &Split,
    config: &ModelConfig,
    stage2: Stage2,
) -> anyhow::Result<TrialScores> {
    let basis = &config.basis;
    let mut scores = TrialScores::default();
    let start = Instant::now();
    let state =
        first_fit(config, split.old_x.as_ref(), split.old_y.as_ref()).context("first fit")?;
    scores.time1_s = Some(start.elapsed().as_secs_f64());
    scores.old_train = Some(score(&state, split.old_x.as_ref(), split.old_y.as_ref())?);
    scores.new_test = Some(score(&state, split.new_x.as_ref(), split.new_y.as_ref())?);
    scores.test1 = Some(score(&state, split.test_x.as_ref(), split.test_y.as_ref())?);
    test_uncertainty(&state, split, split.old_y.as_ref(), &mut scores)?;
    let start = Instant::now();
    let state = match stage2 {
        Stage2::None => return Ok(scores),
        Stage2::Update => {
            let new =
                BatchStatistics::from_rows(basis, split.new_x.as_ref(), split.new_y.as_ref())?;
            state.update(config, &new).context("update")?
        }
        Stage2::FromScratch => {
            first_fit(config, split.all_x.as_ref(), split.all_y.as_ref()).context("one-shot fit")?
        }
    };
    scores.time2_s = Some(start.elapsed().as_secs_f64());
    score_second_stage(&state, split, split.all_y.as_ref(), &mut scores)?;
    Ok(scores)
}

/// The cells of a model that has learnt the new rows.
fn score_second_stage(
    state: &ModelState,
    split: &Split,
    train_y: MatRef<'_, f64>,
    scores: &mut TrialScores,
) -> anyhow::Result<()> {
    scores.old_test = Some(score(state, split.old_x.as_ref(), split.old_y.as_ref())?);
    scores.new_train = Some(score(state, split.new_x.as_ref(), split.new_y.as_ref())?);
    scores.test2 = Some(score(state, split.test_x.as_ref(), split.test_y.as_ref())?);
    let pred = state.predict(split.test_x.as_ref())?;
    scores.test2_present = r2_present(split.test_y.as_ref(), pred.mean.as_ref());
    test_uncertainty(state, split, train_y, scores)
}

fn bayesian_new_only(split: &Split, config: &ModelConfig) -> anyhow::Result<TrialScores> {
    let mut scores = TrialScores::default();
    let start = Instant::now();
    let state =
        first_fit(config, split.new_x.as_ref(), split.new_y.as_ref()).context("fit on new rows")?;
    scores.time2_s = Some(start.elapsed().as_secs_f64());
    score_second_stage(&state, split, split.new_y.as_ref(), &mut scores)?;
    Ok(scores)
}

/// OLS or Bayesian ridge: fit on old rows, then again on all training rows.
fn baseline(
    split: &Split,
    fit: fn(MatRef<'_, f64>, MatRef<'_, f64>) -> anyhow::Result<baselines::LinearFit>,
) -> anyhow::Result<TrialScores> {
    let mut scores = TrialScores::default();
    let r2 = |model: &baselines::LinearFit, x: &Mat<f64>, y: &Mat<f64>| {
        r2_uniform(y.as_ref(), model.predict(x.as_ref()).mean.as_ref())
    };
    let start = Instant::now();
    let model = fit(split.old_x.as_ref(), split.old_y.as_ref())?;
    scores.time1_s = Some(start.elapsed().as_secs_f64());
    scores.old_train = Some(r2(&model, &split.old_x, &split.old_y));
    scores.new_test = Some(r2(&model, &split.new_x, &split.new_y));
    scores.test1 = Some(r2(&model, &split.test_x, &split.test_y));
    let pred1 = model.predict(split.test_x.as_ref()).mean;
    let ratio1 = max_abs_ratio(split.old_y.as_ref(), pred1.as_ref());
    let error1 = max_relative_error(split.old_y.as_ref(), split.test_y.as_ref(), pred1.as_ref());
    let start = Instant::now();
    let model = fit(split.all_x.as_ref(), split.all_y.as_ref())?;
    scores.time2_s = Some(start.elapsed().as_secs_f64());
    scores.old_test = Some(r2(&model, &split.old_x, &split.old_y));
    scores.new_train = Some(r2(&model, &split.new_x, &split.new_y));
    scores.test2 = Some(r2(&model, &split.test_x, &split.test_y));
    let pred = model.predict(split.test_x.as_ref());
    scores.test2_present = r2_present(split.test_y.as_ref(), pred.mean.as_ref());
    if let Some(variance) = &pred.variance {
        let (all, nz) = coverage95(
            split.test_y.as_ref(),
            pred.mean.as_ref(),
            variance.as_ref(),
            |_, _| Z95,
        );
        scores.coverage95 = Some(all);
        scores.coverage95_nonzero = nz;
    }
    let ratio2 = max_abs_ratio(split.all_y.as_ref(), pred.mean.as_ref());
    scores.max_abs_ratio = Some(ratio1.max(ratio2));
    let error2 = max_relative_error(
        split.all_y.as_ref(),
        split.test_y.as_ref(),
        pred.mean.as_ref(),
    );
    scores.max_relative_error = Some(error1.max(error2));
    Ok(scores)
}

fn median(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let mut v: Vec<f64> = values.flatten().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn summarise(model: &str, trials: &[TrialScores]) -> ReportRow {
    let med = |f: fn(&TrialScores) -> Option<f64>| median(trials.iter().map(f));
    ReportRow {
        model: model.to_owned(),
        old_train: med(|t| t.old_train),
        old_test: med(|t| t.old_test),
        new_train: med(|t| t.new_train),
        new_test: med(|t| t.new_test),
        test1: med(|t| t.test1),
        test2: med(|t| t.test2),
        test2_present: med(|t| t.test2_present),
        time1_s: med(|t| t.time1_s),
        time2_s: med(|t| t.time2_s),
        coverage95: med(|t| t.coverage95),
        coverage95_nonzero: med(|t| t.coverage95_nonzero),
        worst_test2: trials.iter().filter_map(|t| t.test2).min_by(f64::total_cmp),
        max_abs_ratio: trials
            .iter()
            .filter_map(|t| t.max_abs_ratio)
            .max_by(f64::total_cmp),
        max_relative_error: trials
            .iter()
            .filter_map(|t| t.max_relative_error)
            .max_by(f64::total_cmp),
    }
}

impl Report {
    /// The table as Markdown.
    pub fn to_markdown(&self) -> String {
        let header = [
            "model",
            "old train",
            "old test",
            "new train",
            "new test",
            "test 1",
            "test 2",
            "test 2, dyes present",
            "time 1 (s)",
            "time 2 (s)",
            "coverage95",
            "coverage95 non-zero",
            "worst test 2",
            "max |ŷ|/train range",
            "max |ŷ − y|/max(train range, |y|)",
        ];
        let mut out = format!("| {} |\n", header.join(" | "));
        out.push_str(&format!("|{}\n", " --- |".repeat(header.len())));
        let cell =
            |v: Option<f64>, digits: usize| v.map_or("—".to_owned(), |x| format!("{x:.digits$}"));
        for r in &self.rows {
            let cells = [
                r.model.clone(),
                cell(r.old_train, 4),
                cell(r.old_test, 4),
                cell(r.new_train, 4),
                cell(r.new_test, 4),
                cell(r.test1, 4),
                cell(r.test2, 4),
                cell(r.test2_present, 4),
                cell(r.time1_s, 4),
                cell(r.time2_s, 4),
                cell(r.coverage95, 3),
                cell(r.coverage95_nonzero, 3),
                cell(r.worst_test2, 4),
                cell(r.max_abs_ratio, 2),
                cell(r.max_relative_error, 2),
            ];
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        out
    }
}
