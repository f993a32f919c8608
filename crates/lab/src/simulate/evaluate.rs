//! Measured in colour: how close the colour of a predicted recipe comes to its target, and how
//! fast a model with forgetting recovers from an instrument swap.
//!
//! **The model.** Inputs are the measured reflectance on the model's grid (percent, the
//! Kubelka–Munk transform on the spectral inputs only) and one 0/1 indicator per fabric other
//! than the first (dummy coding; the intercept carries the first fabric). Why this is linear:
//! the forward model is `K/S(λ) = K/S_sub(λ) + Σᵢ cᵢ kᵢ(λ)`, so when the dye curves are
//! independent on the grid every concentration is a fixed linear combination
//! `cᵢ = Σ_λ w_iλ (K/S(λ) − K/S_sub(λ)) = Σ_λ w_iλ K/S(λ) − Σ_λ w_iλ K/S_sub(λ)`. The first sum is
//! linear in the transformed spectrum; the second is one constant per fabric, which an intercept
//! plus one indicator per other fabric represents exactly. A single integer fabric code would
//! force those constants onto a straight line in the code, which nothing in the physics asks for.
//!
//! **The score.** For each held-out target: predict the recipe from its measured spectrum,
//! clamp negative concentrations to 0 (a recipe cannot use negative dye), dye the predicted
//! recipe on the target's fabric through the noise-free forward model, and take CIEDE2000
//! (D65, CIE 1964 10°) between that colour and the target's true colour (the sample as dyed,
//! before the instrument and its noise). The dye house accepts a match at ΔE00 ≤ 1 and a
//! production at ≤ 1.5 or so; hence the targets median < 1.0 and 90th percentile < 1.5.

use faer::Mat;
use serde::Serialize;

use super::SimulateError;
use super::colour::ciede2000;
use super::generate::{
    CONCENTRATION_RANGE, Grid, LabDip, NoiseModel, Recipes, Scenario, SimulationConfig, Simulator,
    World,
};
use super::kitchen::{KitchenScore, kitchen_day};
pub use super::targets::quantile;
use super::targets::{Renderer, Targets};
use mordant_estimator::{
    Basis, BatchStatistics, FitOptions, Forgetting, ModelConfig, ModelState, ReflectanceScale,
    Transform,
};

/// The model's inputs: a spectrum on `grid` and indicators of fabrics.
#[derive(Clone, Debug, PartialEq)]
pub struct Design {
    pub grid: Grid,
    /// Fabric codes with an indicator column (every fabric but the reference one).
    pub indicators: Vec<u32>,
    /// The transform of the spectrum (Kubelka–Munk, or Kubelka–Munk behind Saunderson's
    /// surface).
    pub transform: Transform,
}

impl Design {
    /// The model grid and an indicator for each fabric in production but the first
    /// ([`Simulator::fabric_features`]).
    pub fn standard(sim: &Simulator) -> Self {
        Self {
            grid: sim.config().grid,
            indicators: sim.fabric_features().iter().map(|s| s.code).collect(),
            transform: Transform::KubelkaMunk,
        }
    }

    /// Number of raw inputs `d`.
    pub fn features(&self) -> usize {
        self.grid.count + self.indicators.len()
    }

    /// The basis: the transform on the spectrum (percent), the indicators as they are, an
    /// intercept.
    pub fn basis(&self) -> Basis {
        Basis::spectral(
            self.grid.count,
            ReflectanceScale::Percent,
            self.features(),
            true,
            self.transform,
        )
    }

    /// The input rows of `dips` (rows × d).
    pub fn inputs(&self, dips: &[LabDip]) -> Mat<f64> {
        let s = self.grid.count;
        Mat::from_fn(dips.len(), self.features(), |i, j| {
            if j < s {
                dips[i].reflectance[j]
            } else {
                f64::from(u8::from(dips[i].sample.substrate == self.indicators[j - s]))
            }
        })
    }
}

/// The recipes of `dips` (rows × dyes), the outputs.
pub fn recipes(dips: &[LabDip]) -> Mat<f64> {
    let dyes = dips.first().map_or(0, |d| d.sample.recipe.len());
    Mat::from_fn(dips.len(), dyes, |i, k| dips[i].sample.recipe[k])
}

/// The statistics of `dips` for `design`.
pub fn statistics(design: &Design, dips: &[LabDip]) -> Result<BatchStatistics, SimulateError> {
    let y = recipes(dips);
    Ok(BatchStatistics::from_rows(
        &design.basis(),
        design.inputs(dips).as_ref(),
        y.as_ref(),
    )?)
}

/// Colour differences and concentration errors of one model on a set of targets.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Score {
    pub targets: usize,
    pub median_de00: f64,
    pub p90_de00: f64,
    pub mean_de00: f64,
    pub max_de00: f64,
    /// Root mean square of predicted minus true recipe over every target and dye (% owf),
    /// before clamping.
    pub concentration_rmse: f64,
    /// Share of predicted concentrations that were negative and clamped to 0.
    pub clamped_share: f64,
}

/// The recipes `state` predicts for `targets` with the inverse map (`POST …/predict`): per
/// target, the predictive mean of every dye.
fn predicted_recipes(
    state: &ModelState,
    targets: &Targets,
) -> Result<Vec<Vec<f64>>, SimulateError> {
    let mean = state.predict(targets.inputs.as_ref())?.mean;
    Ok((0..mean.nrows())
        .map(|i| (0..mean.ncols()).map(|k| mean[(i, k)]).collect())
        .collect())
}

/// The recipes `state` matches to `targets` (`POST …/match`): the non-negative recipe whose
/// K/S, through the forward map learnt from the same rows, fits the target's reflectance best.
fn matched_recipes(state: &ModelState, targets: &Targets) -> Result<Vec<Vec<f64>>, SimulateError> {
    let map = state.forward_map()?;
    (0..targets.len())
        .map(|i| {
            let row: Vec<f64> = targets.inputs.row(i).iter().copied().collect();
            Ok(map.match_inputs(&row)?.concentration)
        })
        .collect()
}

/// Scores recipes, one per target (negative concentrations are clamped to 0).
fn score_predicted(
    state: &ModelState,
    renderer: &Renderer,
    targets: &Targets,
) -> Result<Score, SimulateError> {
    score(&predicted_recipes(state, targets)?, renderer, targets)
}

fn score(
    recipes: &[Vec<f64>],
    renderer: &Renderer,
    targets: &Targets,
) -> Result<Score, SimulateError> {
    let dyes = recipes.first().map_or(0, Vec::len);
    let mut de = Vec::with_capacity(targets.len());
    let (mut sq, mut clamped) = (0.0, 0usize);
    for ((dip, truth), predicted) in targets.dips.iter().zip(&targets.truth).zip(recipes) {
        let mut recipe = Vec::with_capacity(dyes);
        for (&c, &truth) in predicted.iter().zip(&dip.sample.recipe) {
            sq += (c - truth).powi(2);
            if c < 0.0 {
                clamped += 1;
            }
            recipe.push(c.max(0.0));
        }
        let matched = renderer.lab(dip.sample.substrate, &recipe)?;
        de.push(ciede2000(truth, &matched)?);
    }
    let n = de.len().max(1) as f64;
    Ok(Score {
        targets: de.len(),
        median_de00: quantile(&de, 0.5),
        p90_de00: quantile(&de, 0.9),
        mean_de00: de.iter().sum::<f64>() / n,
        max_de00: de.iter().copied().fold(f64::NAN, f64::max),
        concentration_rmse: (sq / (n * dyes.max(1) as f64)).sqrt(),
        clamped_share: clamped as f64 / (n * dyes.max(1) as f64),
    })
}

/// Settings of [`evaluate`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EvaluationOptions {
    pub seed: u64,
    /// Lab dips learnt (the first fit plus incremental batches).
    pub train_rows: usize,
    /// Held-out targets scored.
    pub test_rows: usize,
    /// Rows of the first fit (Algorithm 2); the rest arrive in batches (Algorithm 3).
    pub first_fit_rows: usize,
    pub batch_rows: usize,
    /// Range of the log-uniform concentrations of the recipes, % owf.
    pub concentration_range: (f64, f64),
    /// How the recipes are composed.
    #[serde(skip)]
    pub recipes: Recipes,
    #[serde(skip)]
    pub noise: NoiseModel,
    /// Numerical settings of the estimator.
    #[serde(skip)]
    pub fit: FitOptions,
    /// The world the dips are dyed in.
    pub world: World,
    /// The model's transform of the spectrum.
    #[serde(skip)]
    pub transform: Transform,
}

impl Default for EvaluationOptions {
    fn default() -> Self {
        Self {
            seed: 0,
            train_rows: 2000,
            test_rows: 500,
            first_fit_rows: 300,
            batch_rows: 100,
            concentration_range: CONCENTRATION_RANGE,
            recipes: Recipes::Trichromatic,
            noise: NoiseModel::BENCHTOP,
            fit: FitOptions::default(),
            world: World::default(),
            transform: Transform::KubelkaMunk,
        }
    }
}

/// What [`evaluate`] measured.
#[derive(Clone, Debug, Serialize)]
pub struct EvaluationReport {
    pub options: EvaluationOptions,
    pub model_grid: String,
    /// The model's transform of the spectrum.
    pub model_transform: String,
    pub dyes: Vec<&'static str>,
    pub batches: usize,
    /// The recipes `POST …/match` answers: the acceptance is on these.
    pub score: Score,
    /// The predictive means `POST …/predict` answers (the inverse map), for comparison.
    pub predict_score: Score,
    /// The colour kitchen's day: match's first candidate dyed, a failing dip corrected once.
    pub kitchen: KitchenScore,
}

impl EvaluationReport {
    /// Whether the dye house's acceptance holds: median ΔE00 < 1.0 and 90th percentile < 1.5.
    pub fn accepted(&self) -> bool {
        self.score.median_de00 < 1.0 && self.score.p90_de00 < 1.5
    }

    /// A readable table.
    pub fn to_table(&self) -> String {
        let (s, p, k) = (&self.score, &self.predict_score, &self.kitchen);
        let o = &self.options;
        let verdict = |ok: bool| if ok { "yes" } else { "NO" };
        format!(
            "Colour accuracy of predicted recipes (D65, CIE 1964 10°, CIEDE2000)\n\
             {world} world; seed {seed}; {train} lab dips learnt ({first} in the first fit, then {batches} \
             batches of {batch}); {test} held-out targets; model grid {grid}, {transform}; {dyes} dyes\n\
             match: the recipe POST /v1/models/{{name}}/match answers (acceptance); \
             predict: the means POST …/predict answers\n\n\
             | metric | match | predict | target | met |\n\
             | --- | --- | --- | --- | --- |\n\
             | median ΔE00 | {median:.3} | {p_median:.3} | < 1.0 | {m_ok} |\n\
             | 90th percentile ΔE00 | {p90:.3} | {p_p90:.3} | < 1.5 | {p_ok} |\n\
             | mean ΔE00 | {mean:.3} | {p_mean:.3} | | |\n\
             | max ΔE00 | {max:.3} | {p_max:.3} | | |\n\
             | concentration RMSE (% owf) | {rmse:.4} | {p_rmse:.4} | | |\n\
             | concentrations clamped at 0 | {clamped:.1} % | {p_clamped:.1} % | | |\n\n\
             The colour kitchen's day: match's first candidate (the service's defaults: up to \
             three dyes, by ΔE00) dyed with the dye house's uptake variation and read by the \
             instrument; a dip outside ΔE00 {tol} (D65) corrected once from its measurement and \
             dyed again\n\n\
             | metric | value |\n\
             | --- | --- |\n\
             | first-shot pass rate (ΔE00 ≤ {tol}, D65) | {first_pass:.1} % |\n\
             | pass rate after one correction | {final_pass:.1} % ({corrected} dips corrected) |\n\
             | median ΔE00 of the first shot, after correction | {first_de:.3}, {final_de:.3} |\n\
             | median ΔE00 under A of the first shot (metamerism) | {meta:.3} |\n\
             | first shots within tolerance under D65 that fail under A | {a_fail:.1} % |\n\
             | the target's own dose dyed the same way: first shot, after a correction that knows \
             the lot's yield | {dose_first:.1} %, {dose_final:.1} % |\n",
            world = o.world,
            seed = o.seed,
            train = o.train_rows,
            first = o.first_fit_rows.min(o.train_rows),
            batches = self.batches,
            batch = o.batch_rows,
            test = s.targets,
            grid = self.model_grid,
            transform = self.model_transform,
            dyes = self.dyes.len(),
            median = s.median_de00,
            p_median = p.median_de00,
            m_ok = verdict(s.median_de00 < 1.0),
            p90 = s.p90_de00,
            p_p90 = p.p90_de00,
            p_ok = verdict(s.p90_de00 < 1.5),
            mean = s.mean_de00,
            p_mean = p.mean_de00,
            max = s.max_de00,
            p_max = p.max_de00,
            rmse = s.concentration_rmse,
            p_rmse = p.concentration_rmse,
            clamped = 100.0 * s.clamped_share,
            p_clamped = 100.0 * p.clamped_share,
            tol = k.tolerance_de00,
            first_pass = 100.0 * k.first_shot_pass,
            final_pass = 100.0 * k.after_one_correction_pass,
            corrected = k.corrected,
            first_de = k.median_first_de00,
            final_de = k.median_final_de00,
            meta = k.median_metamerism_a,
            a_fail = 100.0 * k.d65_pass_a_fail,
            dose_first = 100.0 * k.dose_first_shot_pass,
            dose_final = 100.0 * k.dose_after_one_correction_pass,
        )
    }
}

fn describe_transform(transform: Transform) -> String {
    match transform {
        Transform::Identity => "none".into(),
        Transform::KubelkaMunk => "Kubelka–Munk".into(),
        Transform::Saunderson(s) => {
            format!("Saunderson (k1 {}, k2 {}) and Kubelka–Munk", s.k1, s.k2)
        }
    }
}

fn describe(grid: &Grid) -> String {
    format!(
        "{}–{} nm every {} nm",
        grid.start_nm,
        grid.wavelength(grid.count.saturating_sub(1)),
        grid.interval_nm
    )
}

/// Trains a model on simulated lab dips measured on `grid` (the first fit, then one-step
/// batches) and scores it on held-out targets.
pub fn evaluate(
    options: &EvaluationOptions,
    grid: Grid,
) -> Result<EvaluationReport, SimulateError> {
    check_rows(
        options.first_fit_rows,
        options.batch_rows,
        options.test_rows,
    )?;
    let (sim, design, state, batches) = train(options, grid)?;
    let targets = Targets::new(&sim, |d| design.inputs(d), options.test_rows, false)?;
    let renderer = Renderer::new(&sim);
    let score = score(&matched_recipes(&state, &targets)?, &renderer, &targets)?;
    let predict_score = score_predicted(&state, &renderer, &targets)?;
    let kitchen = kitchen_day(&sim, &state, &targets, &renderer)?;
    Ok(EvaluationReport {
        options: *options,
        model_grid: describe(&grid),
        model_transform: describe_transform(options.transform),
        dyes: sim.dye_names(),
        batches,
        score,
        predict_score,
        kitchen,
    })
}

/// The simulator, the model's design and the model trained as [`evaluate`] trains it (the first
/// fit, then one-step batches), with the number of batches.
fn train(
    options: &EvaluationOptions,
    grid: Grid,
) -> Result<(Simulator, Design, ModelState, usize), SimulateError> {
    let sim = Simulator::new(SimulationConfig {
        grid,
        noise: options.noise,
        concentration_range: options.concentration_range,
        recipes: options.recipes,
        world: options.world,
        ..SimulationConfig::new(options.seed)
    });
    let design = Design {
        transform: options.transform,
        ..Design::standard(&sim)
    };
    let config = ModelConfig {
        options: options.fit,
        ..ModelConfig::new(design.basis(), sim.dyes().len())
    };
    let first = options.first_fit_rows.min(options.train_rows);
    let mut state = ModelState::fit(&config, statistics(&design, &sim.lab_dips(0..first))?)?;
    let mut batches = 0;
    let mut row = first;
    while row < options.train_rows {
        let end = (row + options.batch_rows).min(options.train_rows);
        state = state.update(&config, &statistics(&design, &sim.lab_dips(row..end))?)?;
        row = end;
        batches += 1;
    }
    Ok((sim, design, state, batches))
}

fn check_rows(first: usize, batch: usize, test: usize) -> Result<(), SimulateError> {
    if first == 0 || batch == 0 || test == 0 {
        return Err(SimulateError::Options(
            "the first fit, batches and the held-out set need at least one row each".into(),
        ));
    }
    Ok(())
}

/// Settings of [`forgetting_study`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ForgettingOptions {
    pub seed: u64,
    /// Rows measured with the reference instrument (the first fit included).
    pub pre_swap_rows: usize,
    /// Rows measured with the new instrument.
    pub post_swap_rows: usize,
    pub first_fit_rows: usize,
    pub batch_rows: usize,
    /// Half-life of the forgetting model, rows.
    pub half_life_rows: f64,
    pub test_rows: usize,
    /// A model has recovered once its median ΔE00 is at most its pre-swap level plus this.
    pub tolerance_de00: f64,
    /// Range of the log-uniform concentrations of the recipes, % owf.
    pub concentration_range: (f64, f64),
    /// How the recipes are composed.
    #[serde(skip)]
    pub recipes: Recipes,
    #[serde(skip)]
    pub noise: NoiseModel,
    /// Numerical settings of the estimator.
    #[serde(skip)]
    pub fit: FitOptions,
    /// The world the dips are dyed in.
    pub world: World,
}

impl Default for ForgettingOptions {
    fn default() -> Self {
        Self {
            seed: 0,
            pre_swap_rows: 2000,
            post_swap_rows: 3000,
            first_fit_rows: 300,
            batch_rows: 50,
            half_life_rows: 500.0,
            test_rows: 200,
            tolerance_de00: 0.5,
            concentration_range: CONCENTRATION_RANGE,
            recipes: Recipes::AnyThree,
            noise: NoiseModel::LAB,
            fit: FitOptions::default(),
            world: World::default(),
        }
    }
}

/// One model scored after one batch.
#[derive(Clone, Debug, Serialize)]
pub struct CurvePoint {
    pub model: String,
    /// Rows learnt so far.
    pub rows_seen: usize,
    /// Rows learnt since the swap (negative before it).
    pub post_swap_rows: i64,
    /// `reference` before the swap, `new` after: the instrument the targets were read with.
    pub instrument: &'static str,
    pub score: Score,
}

/// How one model went through the swap.
#[derive(Clone, Debug, Serialize)]
pub struct Recovery {
    pub model: String,
    pub half_life_rows: Option<f64>,
    /// Mean of the median ΔE00 over the last five pre-swap batches.
    pub pre_swap_median_de00: f64,
    /// `pre_swap_median_de00 + tolerance`.
    pub threshold_de00: f64,
    /// Median ΔE00 after the first post-swap batch.
    pub first_post_swap_median_de00: f64,
    /// Median ΔE00 at the end of the run.
    pub final_median_de00: f64,
    /// Post-swap rows until the median ΔE00 first came back to the threshold.
    pub rows_to_reach: Option<usize>,
    /// Post-swap rows from which on the median ΔE00 stayed at or below the threshold.
    pub rows_to_recover: Option<usize>,
}

/// What [`forgetting_study`] measured.
#[derive(Clone, Debug, Serialize)]
pub struct ForgettingReport {
    pub options: ForgettingOptions,
    pub scenario: &'static str,
    pub swap: String,
    pub models: Vec<Recovery>,
    pub curves: Vec<CurvePoint>,
}

impl ForgettingReport {
    /// The curves as CSV: one row per model and batch.
    pub fn curves_csv(&self) -> String {
        let mut out = String::from(
            "model,rows_seen,post_swap_rows,instrument,median_de00,p90_de00,mean_de00,concentration_rmse\n",
        );
        for p in &self.curves {
            out.push_str(&format!(
                "{},{},{},{},{:.4},{:.4},{:.4},{:.5}\n",
                p.model,
                p.rows_seen,
                p.post_swap_rows,
                p.instrument,
                p.score.median_de00,
                p.score.p90_de00,
                p.score.mean_de00,
                p.score.concentration_rmse
            ));
        }
        out
    }

    /// A readable table.
    pub fn to_table(&self) -> String {
        let o = &self.options;
        let rows = |r: Option<usize>| {
            r.map_or_else(
                || format!("not within {}", o.post_swap_rows),
                |r| r.to_string(),
            )
        };
        let mut out = format!(
            "Forgetting after an instrument swap ({swap})\n\
             seed {seed}; {pre} rows on the reference instrument, then {post} on the new one, \
             batches of {batch} (first fit {first}); {test} held-out targets read by the \
             instrument in use; recovered = median ΔE00 ≤ pre-swap level + {tol}\n\n\
             | model | pre-swap median | threshold | first after swap | final | rows to reach | rows to stay |\n\
             | --- | --- | --- | --- | --- | --- | --- |\n",
            swap = self.swap,
            seed = o.seed,
            pre = o.pre_swap_rows,
            post = o.post_swap_rows,
            batch = o.batch_rows,
            first = o.first_fit_rows,
            test = o.test_rows,
            tol = o.tolerance_de00,
        );
        for m in &self.models {
            out.push_str(&format!(
                "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} |\n",
                m.model,
                m.pre_swap_median_de00,
                m.threshold_de00,
                m.first_post_swap_median_de00,
                m.final_median_de00,
                rows(m.rows_to_reach),
                rows(m.rows_to_recover),
            ));
        }
        out
    }
}

/// Streams lab dips through two models, one without forgetting and one with a half-life, across
/// an instrument swap, and scores both after every batch on held-out targets read by the
/// instrument then in use.
pub fn forgetting_study(
    options: &ForgettingOptions,
    grid: Grid,
) -> Result<ForgettingReport, SimulateError> {
    check_rows(
        options.first_fit_rows,
        options.batch_rows,
        options.test_rows,
    )?;
    if !(options.half_life_rows.is_finite() && options.half_life_rows > 0.0) {
        return Err(SimulateError::Options(format!(
            "half-life {} rows is not positive",
            options.half_life_rows
        )));
    }
    if options.first_fit_rows > options.pre_swap_rows {
        return Err(SimulateError::Options(
            "the first fit must come before the swap".into(),
        ));
    }
    let sim = Simulator::new(SimulationConfig {
        grid,
        noise: options.noise,
        concentration_range: options.concentration_range,
        recipes: options.recipes,
        scenario: Scenario::InstrumentSwap,
        drift_at: options.pre_swap_rows,
        world: options.world,
        ..SimulationConfig::new(options.seed)
    });
    let design = Design {
        transform: options.world.transform(),
        ..Design::standard(&sim)
    };
    let renderer = Renderer::new(&sim);
    let before = Targets::new(&sim, |d| design.inputs(d), options.test_rows, false)?;
    let after = Targets::new(&sim, |d| design.inputs(d), options.test_rows, true)?;
    let plain = ModelConfig {
        options: options.fit,
        ..ModelConfig::new(design.basis(), sim.dyes().len())
    };
    let forgetting = ModelConfig {
        forgetting: Some(Forgetting {
            half_life_rows: options.half_life_rows,
        }),
        ..plain.clone()
    };
    let names = [
        "no_forgetting".to_owned(),
        format!("half_life_{}", options.half_life_rows),
    ];
    let configs = [plain, forgetting];
    let first = statistics(&design, &sim.lab_dips(0..options.first_fit_rows))?;
    let mut states = configs
        .iter()
        .map(|c| ModelState::fit(c, first.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let total = options.pre_swap_rows + options.post_swap_rows;
    let mut curves = Vec::new();
    let mut row = options.first_fit_rows;
    while row < total {
        // Batches do not straddle the swap, so every batch is read by one instrument.
        let limit = if row < options.pre_swap_rows {
            options.pre_swap_rows
        } else {
            total
        };
        let end = (row + options.batch_rows).min(limit);
        let batch = statistics(&design, &sim.lab_dips(row..end))?;
        row = end;
        let swapped = row > options.pre_swap_rows;
        let targets = if swapped { &after } else { &before };
        for ((state, config), name) in states.iter_mut().zip(&configs).zip(&names) {
            *state = state.update(config, &batch)?;
            curves.push(CurvePoint {
                model: name.clone(),
                rows_seen: row,
                post_swap_rows: row as i64 - options.pre_swap_rows as i64,
                instrument: if swapped { "new" } else { "reference" },
                score: score(&matched_recipes(state, targets)?, &renderer, targets)?,
            });
        }
    }
    let models = names
        .iter()
        .zip(&configs)
        .map(|(name, config)| recovery(name, config, &curves, options))
        .collect();
    let swap = super::generate::Instrument::SWAPPED;
    Ok(ForgettingReport {
        options: *options,
        scenario: Scenario::InstrumentSwap.as_str(),
        swap: format!(
            "gain {}, offset {:+} % R, wavelength shift {:+} nm",
            swap.gain, swap.offset_percent, swap.shift_nm
        ),
        models,
        curves,
    })
}

fn recovery(
    name: &str,
    config: &ModelConfig,
    curves: &[CurvePoint],
    options: &ForgettingOptions,
) -> Recovery {
    let own: Vec<&CurvePoint> = curves.iter().filter(|p| p.model == name).collect();
    let pre: Vec<f64> = own
        .iter()
        .filter(|p| p.post_swap_rows <= 0)
        .map(|p| p.score.median_de00)
        .collect();
    let last = &pre[pre.len().saturating_sub(5)..];
    let level = last.iter().sum::<f64>() / last.len().max(1) as f64;
    let threshold = level + options.tolerance_de00;
    let post: Vec<&&CurvePoint> = own.iter().filter(|p| p.post_swap_rows > 0).collect();
    let rows_to_reach = post
        .iter()
        .find(|p| p.score.median_de00 <= threshold)
        .map(|p| p.post_swap_rows as usize);
    // The first post-swap batch after the last one above the threshold.
    let rows_to_recover = match post.iter().rposition(|p| p.score.median_de00 > threshold) {
        None => post.first().map(|p| p.post_swap_rows as usize),
        Some(i) => post.get(i + 1).map(|p| p.post_swap_rows as usize),
    };
    Recovery {
        model: name.to_owned(),
        half_life_rows: config.forgetting.map(|f| f.half_life_rows),
        pre_swap_median_de00: level,
        threshold_de00: threshold,
        first_post_swap_median_de00: post.first().map_or(f64::NAN, |p| p.score.median_de00),
        final_median_de00: post.last().map_or(f64::NAN, |p| p.score.median_de00),
        rows_to_reach,
        rows_to_recover,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_interpolates_order_statistics() {
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[4.0, 1.0, 2.0, 3.0], 0.5), 2.5);
        assert!((quantile(&[0.0, 10.0], 0.9) - 9.0).abs() < 1e-12);
        assert_eq!(quantile(&[7.0], 0.9), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn indicators_code_the_fabrics_other_than_the_first() {
        let sim = Simulator::new(SimulationConfig {
            grid: crate::simulate::MODEL_GRID,
            ..SimulationConfig::new(2)
        });
        let design = Design::standard(&sim);
        assert_eq!(design.indicators, vec![1, 2]);
        let dips = sim.lab_dips(0..50);
        let x = design.inputs(&dips);
        assert_eq!(x.ncols(), 33);
        for (i, dip) in dips.iter().enumerate() {
            assert_eq!(x[(i, 0)], dip.reflectance[0]);
            let flags = [x[(i, 31)], x[(i, 32)]];
            let expected = match dip.sample.substrate {
                0 => [0.0, 0.0],
                1 => [1.0, 0.0],
                _ => [0.0, 1.0],
            };
            assert_eq!(flags, expected);
        }
    }

    #[test]
    fn a_perfect_recipe_scores_zero_and_a_wrong_one_does_not() {
        let sim = Simulator::new(SimulationConfig {
            grid: crate::simulate::MODEL_GRID,
            noise: NoiseModel::NONE,
            ..SimulationConfig::new(9)
        });
        let renderer = Renderer::new(&sim);
        let dip = sim.lab_dip(0);
        let truth = crate::simulate::colour::lab(
            |nm| sim.true_reflectance(&dip.sample, nm),
            crate::simulate::colour::Illuminant::D65,
        )
        .unwrap();
        let same = renderer
            .lab(dip.sample.substrate, &dip.sample.uptake)
            .unwrap();
        assert!(ciede2000(&truth, &same).unwrap() < 1e-6);
        let mut more = dip.sample.uptake.clone();
        let main = (0..more.len())
            .max_by(|&a, &b| more[a].total_cmp(&more[b]))
            .unwrap();
        more[main] *= 1.5;
        let off = renderer.lab(dip.sample.substrate, &more).unwrap();
        assert!(ciede2000(&truth, &off).unwrap() > 0.5);
    }

    #[test]
    fn the_forward_map_bends_each_dye_only_in_a_world_whose_build_up_saturates() {
        let map = |world| {
            let options = EvaluationOptions {
                train_rows: 800,
                noise: NoiseModel::NONE,
                world,
                transform: world.transform(),
                ..EvaluationOptions::default()
            };
            let (_, _, state, _) = train(&options, crate::simulate::MODEL_GRID).unwrap();
            state.forward_map().unwrap()
        };
        // The ideal world is linear in K/S: every dye keeps the linear curve.
        assert!(map(World::Ideal).curves().iter().all(|h| h.is_linear()));
        // The realistic world saturates at 8 % owf, between the ladder's rungs 10 and 5: every
        // dye takes a curve that bends like s = 5–11, the median of them near 8 (the lots' yield
        // spread scatters each dye's).
        let bent = map(World::Realistic);
        let mut saturations: Vec<f64> = bent.curves().iter().map(|h| h.saturation()).collect();
        assert!(
            saturations.iter().all(|s| (5.0..=11.0).contains(s)),
            "{saturations:?}"
        );
        saturations.sort_by(f64::total_cmp);
        let half = saturations.len() / 2;
        let median = 0.5 * (saturations[half - 1] + saturations[half]);
        assert!((7.0..=9.0).contains(&median), "{saturations:?}");
    }
}

#[cfg(test)]
mod diagnose {
    //! `cargo test --release --lib simulate::evaluate::diagnose -- --ignored --nocapture`:
    //! ΔE00 and concentration RMSE split by shade depth, by noise source and by recipe style;
    //! "oracle-zero" zeroes the dyes not in the recipe (a diagnostic, not a score), "true-recipe"
    //! dyes the recipe itself (the floor the uptake spread sets).
    use super::*;

    /// Depth, ΔE00, ΔE00 oracle-zero, ΔE00 of the true recipe, squared errors in / out of recipe.
    type Row = (f64, f64, f64, f64, f64, f64);

    fn run(name: &str, noise: NoiseModel, fit: FitOptions, range: (f64, f64), recipes: Recipes) {
        let options = EvaluationOptions {
            noise,
            recipes,
            fit,
            concentration_range: range,
            ..EvaluationOptions::default()
        };
        let Ok((sim, design, state, _)) = train(&options, crate::simulate::MODEL_GRID) else {
            println!("== {name}: fit failed");
            return;
        };
        let targets = Targets::new(&sim, |d| design.inputs(d), options.test_rows, false).unwrap();
        let renderer = Renderer::new(&sim);
        let mean = state.predict(targets.inputs.as_ref()).unwrap().mean;
        let mut rows = Vec::new();
        for (i, (dip, truth)) in targets.dips.iter().zip(&targets.truth).enumerate() {
            let used: Vec<bool> = dip.sample.recipe.iter().map(|c| *c > 0.0).collect();
            let depth: f64 = dip.sample.recipe.iter().sum();
            let (mut e_in, mut e_out) = (0.0, 0.0);
            let mut rec = vec![];
            let mut oracle = vec![];
            for k in 0..used.len() {
                let p = mean[(i, k)];
                let e = (p - dip.sample.recipe[k]).powi(2);
                if used[k] {
                    e_in += e
                } else {
                    e_out += e
                }
                rec.push(p.max(0.0));
                oracle.push(if used[k] { p.max(0.0) } else { 0.0 });
            }
            let de = ciede2000(truth, &renderer.lab(dip.sample.substrate, &rec).unwrap()).unwrap();
            let deo =
                ciede2000(truth, &renderer.lab(dip.sample.substrate, &oracle).unwrap()).unwrap();
            let deu = ciede2000(
                truth,
                &renderer
                    .lab(dip.sample.substrate, &dip.sample.recipe)
                    .unwrap(),
            )
            .unwrap();
            rows.push((depth, de, deo, deu, e_in, e_out));
        }
        let stats = |sel: &dyn Fn(&Row) -> bool| {
            let r: Vec<_> = rows.iter().filter(|r| sel(r)).collect();
            let de: Vec<f64> = r.iter().map(|r| r.1).collect();
            let deo: Vec<f64> = r.iter().map(|r| r.2).collect();
            let deu: Vec<f64> = r.iter().map(|r| r.3).collect();
            let n = r.len().max(1) as f64;
            let ein = (r.iter().map(|r| r.4).sum::<f64>() / (3.0 * n)).sqrt();
            let eout = (r.iter().map(|r| r.5).sum::<f64>() / (7.0 * n)).sqrt();
            format!(
                "n {:3} dE med {:5.2} p90 {:5.2} | oracle-zero med {:5.2} p90 {:5.2} | true-recipe med {:4.2} p90 {:4.2} | rmse in {:.4} out {:.4}",
                r.len(),
                quantile(&de, 0.5),
                quantile(&de, 0.9),
                quantile(&deo, 0.5),
                quantile(&deo, 0.9),
                quantile(&deu, 0.5),
                quantile(&deu, 0.9),
                ein,
                eout
            )
        };
        let s: Vec<f64> = state
            .noise_variances()
            .iter()
            .map(|v| v.unwrap_or(f64::NAN))
            .collect();
        println!(
            "== {name}: noise var per dye {:?}",
            s.iter().map(|v| format!("{:.2e}", v)).collect::<Vec<_>>()
        );
        println!("  all    {}", stats(&|_| true));
        println!("  pale   {}", stats(&|r| r.0 < 0.3));
        println!("  medium {}", stats(&|r| r.0 >= 0.3 && r.0 < 1.5));
        println!("  deep   {}", stats(&|r| r.0 >= 1.5));
    }

    #[test]
    #[ignore]
    fn breakdown() {
        let d = FitOptions::default();
        let bench = NoiseModel::BENCHTOP;
        let r = CONCENTRATION_RANGE;
        let lab = NoiseModel::LAB;
        let only = |f: fn(&mut NoiseModel)| {
            let mut n = NoiseModel::NONE;
            f(&mut n);
            n
        };
        let photo = only(|n| {
            n.photometric_abs = 0.05;
            n.photometric_rel = 0.005
        });
        let jitter = only(|n| n.wavelength_jitter_nm = 0.2);
        let uptake = only(|n| n.uptake_rel = 0.03);
        let b = |a: f64, rel: f64, u: f64| NoiseModel {
            photometric_abs: a,
            photometric_rel: rel,
            wavelength_jitter_nm: 0.0,
            uptake_rel: u,
        };
        for (name, n) in [
            ("lab", lab),
            ("photo", photo),
            ("jitter", jitter),
            ("uptake", uptake),
            ("none", NoiseModel::NONE),
            ("abs0.02+u", b(0.02, 0.0, 0.03)),
            ("abs0.01+u", b(0.01, 0.0, 0.03)),
            ("abs0.03+u", b(0.03, 0.0, 0.03)),
            ("bench", bench),
        ] {
            run(&format!("{name} any3"), n, d, r, Recipes::AnyThree);
            run(
                &format!("{name} trichromatic"),
                n,
                d,
                r,
                Recipes::Trichromatic,
            );
        }
    }
}
