//! A model's whole state: running statistics and one posterior per output.

use std::sync::atomic::{AtomicUsize, Ordering};

use faer::{Mat, MatRef};
use rayon::prelude::*;

use super::drift;
use super::evidence::{Alternate, FittedShapes, LargerAlpha, Shape, SharedScale, evidence};
use super::incremental::one_step;
use super::noise_shape::{self, NoiseShape};
use super::posterior::OutputPosterior;
use super::statistics::{BatchStatistics, OutputData, check_shape};
use super::tail::Tail;
use super::{Basis, EstimatorError, FitOptions, NoisePrior, PriorFamily, leave_one_out};

/// How much lower (in `−2 log`, relative) the fresh start's score must be to win over the warm
/// start's: two starts that reach the same optimum differ by round-off only.
const TIE_RELATIVE: f64 = 1e-9;

/// How a model learns from a batch after its first fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpdateMethod {
    /// Algorithm 3: one Bayesian step with the hyperparameters held fixed, until an output's
    /// rows have outgrown them ([`super::FitOptions::refit_growth`], a quarter more rows).
    #[default]
    OneStep,
    /// Algorithm 2 on the accumulated statistics, warm-started from the current `(v, s)` (and
    /// from the configured start where its optimum pruned a basis function whose revival would
    /// raise the evidence by more than one variance's Occam factor; see [`ModelState::refit`]).
    Refit,
}

/// Exponential forgetting: a row's weight halves after `half_life_rows` further rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Forgetting {
    pub half_life_rows: f64,
}

impl Forgetting {
    /// `2^(−N′/h)`, the weight of the old statistics before a batch of `rows` rows is added.
    pub fn weight(&self, rows: f64) -> f64 {
        (-rows / self.half_life_rows).exp2()
    }
}

/// What a model is: its basis, outputs and how it learns. Not part of the stored state.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub basis: Basis,
    pub outputs: usize,
    pub update: UpdateMethod,
    pub forgetting: Option<Forgetting>,
    /// Starting prior variance of every basis function in Algorithm 2 (ARD).
    pub prior_variance: f64,
    /// The prior family of the weights (see [`super::prior`]).
    pub prior: PriorFamily,
    pub options: FitOptions,
}

impl ModelConfig {
    pub fn new(basis: Basis, outputs: usize) -> Self {
        Self {
            basis,
            outputs,
            update: UpdateMethod::OneStep,
            forgetting: None,
            prior_variance: 1.0,
            prior: PriorFamily::default(),
            options: FitOptions::default(),
        }
    }

    /// The index of the intercept when the model's intercept is flat (an output whose zeros
    /// are structural keeps a shrinkable one: [`Self::output_flat_intercept`]).
    fn flat_intercept(&self) -> Option<usize> {
        (self.basis.intercept && self.options.flat_intercept).then_some(self.basis.features)
    }

    /// Whether output `k`'s zeros are structural on the statistics `stats` (see
    /// [`FitOptions`]): it is zero-inflated and its prior is ARD or `auto`, so its intercept is
    /// an ARD coefficient and `auto` fits it by ARD.
    fn structural_zeros(&self, stats: &BatchStatistics, k: usize) -> bool {
        stats.zero_inflated(k) && matches!(self.prior, PriorFamily::Ard | PriorFamily::Auto)
    }

    /// The index of output `k`'s flat intercept on the statistics `stats`, if it has one.
    fn output_flat_intercept(&self, stats: &BatchStatistics, k: usize) -> Option<usize> {
        self.flat_intercept()
            .filter(|_| !self.structural_zeros(stats, k))
    }

    /// The constant basis function, if any.
    fn intercept(&self) -> Option<usize> {
        self.basis.intercept.then_some(self.basis.features)
    }

    /// Bands of a declared spectrum (the smooth prior's axis); 0 without one.
    fn bands(&self) -> usize {
        if self.basis.declared {
            self.basis.spectral
        } else {
            0
        }
    }

    fn forgetting_weight(&self, rows: f64) -> f64 {
        self.forgetting.map_or(1.0, |f| f.weight(rows))
    }
}

/// One output: fitted, or waiting for enough informative rows (see [`FitOptions`]).
#[derive(Clone, Debug, PartialEq)]
pub enum OutputState {
    Untrained,
    Trained(Box<OutputPosterior>),
}

impl OutputState {
    pub fn posterior(&self) -> Option<&OutputPosterior> {
        match self {
            OutputState::Untrained => None,
            OutputState::Trained(p) => Some(p),
        }
    }
}

/// How a prediction treats the noise variance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Predictive {
    /// `variance = s + φᵀΣφ`: σ² plugged in (the paper's, and every state stored before the
    /// prior families).
    Plugin,
    /// σ² integrated over its posterior: with `ν = N_c − γ` residual degrees of freedom (`N_c`
    /// the rows less the flat intercept's one, `γ` the weights the data determine) the
    /// predictive is a Student-t of scale² `s + φᵀΣφ`, whose variance is
    /// `ν/(ν − 2) · (s + φᵀΣφ)` (ν taken as at least 3). It matters when few rows determine many
    /// weights: with 20 rows and γ = 15 the plug-in variance is 40 % too small.
    Student,
    /// σ² integrated over its posterior where it acts: `Σ = ΣA₀Σ + ΣAΣ` (`A₀` the prior's
    /// precision, `A` the data's, on the support), and with the weights' prior independent of
    /// σ² (the model whose degrees of freedom `ν` counts) only the second part, the variance
    /// the noise puts into the posterior mean, scales with σ², to first order (`Σ` itself
    /// depends on σ²; the answer is a variance, no longer a Student-t's). The first, the prior's
    /// own variance along directions the rows have not pinned down, does not:
    ///
    /// ```text
    /// variance = κ (s + φᵀΣAΣφ) + φᵀΣA₀Σφ,      κ = ν/(ν − 2)
    /// ```
    ///
    /// (the flat intercept, flat a priori, is all in the first term). [`Predictive::Student`]
    /// inflates the prior's part as well: on 21 spectra of 268 bands posted as named inputs its
    /// intervals covered every test value (ACCURACY.md). Every state fitted since; states
    /// stored with [`Predictive::Student`] keep it until an explicit refit.
    #[default]
    StudentNoise,
}

impl Predictive {
    /// `ν/(ν − 2)` for `rows` rows (weighted), `flat` flat parameters and `gamma` determined
    /// weights, or 1 for [`Predictive::Plugin`].
    pub fn inflation(self, rows: f64, flat: usize, gamma: f64) -> f64 {
        match self {
            Predictive::Plugin => 1.0,
            Predictive::Student | Predictive::StudentNoise => {
                let nu = (rows - flat as f64 - gamma).max(3.0);
                nu / (nu - 2.0)
            }
        }
    }
}

/// Predicted means and variances, rows × outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Predictions {
    pub mean: Mat<f64>,
    pub variance: Mat<f64>,
}

/// Everything a model has learnt: the basis it speaks, the (forgetting-weighted) statistics of
/// all rows folded so far, and the state of each output. Immutable: every fold makes a new one.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelState {
    basis: Basis,
    totals: BatchStatistics,
    outputs: Vec<OutputState>,
    predictive: Predictive,
    /// Per output, the (forgetting-weighted) informative rows its hyperparameters were fitted
    /// on; 0 for an untrained output.
    fitted_rows: Vec<f64>,
    /// Per output, the other prior shapes of its model average (see [`super::mixture`]): empty
    /// for an untrained output, an ARD fit, and every state stored before them.
    alternates: Vec<Vec<Alternate>>,
    /// Per output, how its noise variance grows with the answer ([`NoiseShape`]), set on the
    /// rows of the model's first fit; `None` (one `σ²` for every answer) for an untrained output
    /// and every state stored before them.
    noise_shapes: Vec<Option<NoiseShape>>,
    /// The degrees of freedom of the predictive's Student-t tail ([`super::tail`]), set on the
    /// rows of the model's first fit; `None` (a Gaussian) where they chose none, and for every
    /// state stored before it.
    tail: Option<Tail>,
}

impl ModelState {
    pub(crate) fn from_parts(
        basis: Basis,
        totals: BatchStatistics,
        outputs: Vec<OutputState>,
        predictive: Predictive,
        fitted_rows: Vec<f64>,
        alternates: Vec<Vec<Alternate>>,
    ) -> Result<Self, EstimatorError> {
        check_shape(totals.dim(), outputs.len(), basis.dim(), totals.outputs())?;
        for (what, found) in [
            ("fitted rows", fitted_rows.len()),
            ("alternates", alternates.len()),
        ] {
            if found != outputs.len() {
                return Err(EstimatorError::Dimension {
                    what,
                    expected: outputs.len(),
                    found,
                });
            }
        }
        for (output, alternates) in outputs.iter().zip(&alternates) {
            if output.posterior().is_none() && !alternates.is_empty() {
                return Err(EstimatorError::Untrained);
            }
            for alternate in alternates {
                if alternate.prior.dim() != basis.dim() {
                    return Err(EstimatorError::Dimension {
                        what: "alternate prior basis functions",
                        expected: basis.dim(),
                        found: alternate.prior.dim(),
                    });
                }
                alternate.prior.validate()?;
                if !(alternate.noise_variance.is_finite() && alternate.noise_variance > 0.0) {
                    return Err(EstimatorError::NonFinite("alternate noise variance"));
                }
            }
        }
        for output in &outputs {
            if let Some(post) = output.posterior()
                && post.dim() != basis.dim()
            {
                return Err(EstimatorError::Dimension {
                    what: "posterior basis functions",
                    expected: basis.dim(),
                    found: post.dim(),
                });
            }
        }
        let noise_shapes = vec![None; outputs.len()];
        Ok(Self {
            basis,
            totals,
            outputs,
            predictive,
            fitted_rows,
            alternates,
            noise_shapes,
            tail: None,
        })
    }

    /// The degrees of freedom of the predictive's tail, if the model has one.
    pub fn tail(&self) -> Option<f64> {
        self.tail.map(Tail::degrees_of_freedom)
    }

    /// This state with the tail `tail` (none: a Gaussian).
    pub fn with_tail(mut self, tail: Option<Tail>) -> Self {
        self.tail = tail;
        self
    }

    /// Output `k`'s noise shape, if it has one.
    pub fn noise_shape(&self, k: usize) -> Option<NoiseShape> {
        self.noise_shapes.get(k).copied().flatten()
    }

    /// This state with the noise shapes `shapes` (one per output; a shape only on a trained
    /// output).
    pub fn with_noise_shapes(
        mut self,
        shapes: Vec<Option<NoiseShape>>,
    ) -> Result<Self, EstimatorError> {
        if shapes.len() != self.outputs.len() {
            return Err(EstimatorError::Dimension {
                what: "noise shapes",
                expected: self.outputs.len(),
                found: shapes.len(),
            });
        }
        if shapes
            .iter()
            .zip(&self.outputs)
            .any(|(shape, output)| shape.is_some() && output.posterior().is_none())
        {
            return Err(EstimatorError::Untrained);
        }
        self.noise_shapes = shapes;
        Ok(self)
    }

    /// This state with the noise shapes that the rows `x`, `y` choose
    /// ([`Self::noise_shapes_from_rows`]); where the rows cannot set them (another width), the
    /// state as it was, with the reason.
    pub fn with_noise_shapes_from_rows(
        self,
        x: MatRef<'_, f64>,
        y: MatRef<'_, f64>,
    ) -> (Self, Result<(), EstimatorError>) {
        self.with_noise_shapes_of_outputs(x, y, |_| true)
    }

    /// [`Self::with_noise_shapes_from_rows`] for the outputs `which` names; the others keep
    /// theirs.
    pub fn with_noise_shapes_of_outputs(
        mut self,
        x: MatRef<'_, f64>,
        y: MatRef<'_, f64>,
        which: impl Fn(usize) -> bool,
    ) -> (Self, Result<(), EstimatorError>) {
        match self.noise_shapes_from_rows(x, y) {
            Ok(shapes) => {
                for (k, shape) in shapes.into_iter().enumerate() {
                    if which(k) {
                        self.noise_shapes[k] = shape;
                    }
                }
                (self, Ok(()))
            }
            Err(e) => (self, Err(e)),
        }
    }

    /// This state with `from`'s noise shapes on the outputs it still has trained, and its tail:
    /// both, set on a fit's rows, stay through the updates and refits after it that have none
    /// ([`super::first_fit::update_on_rows`] reads them again where it has them).
    fn keeping_first_fit(mut self, from: &ModelState) -> Self {
        for ((shape, output), kept) in self
            .noise_shapes
            .iter_mut()
            .zip(&self.outputs)
            .zip(&from.noise_shapes)
        {
            if output.posterior().is_some() {
                *shape = *kept;
            }
        }
        self.tail = from.tail;
        self
    }

    /// `Ok` where the rows `x`, `y` (raw inputs and outputs, as a batch holds them) are the rows
    /// this state's statistics were summed from; else why not.
    pub fn rows_behind(
        &self,
        x: MatRef<'_, f64>,
        y: MatRef<'_, f64>,
    ) -> Result<(), EstimatorError> {
        leave_one_out::design_of_rows(&self.basis, &self.totals, x, y).map(|_| ())
    }

    /// The noise shapes that the rows `x`, `y` (raw inputs and outputs, as a batch holds them)
    /// choose for each trained output ([`NoiseShape::choose`]): the residuals from the output's
    /// posterior mean, at `c` a twentieth of the root mean square of its values in this state's
    /// statistics. A zero-inflated output's shape is set by the rows where both its value and
    /// its mean are not 0 (a dose, not the exact 0 of a dye a recipe does not use); another's by
    /// every row where its mean is not 0.
    pub fn noise_shapes_from_rows(
        &self,
        x: MatRef<'_, f64>,
        y: MatRef<'_, f64>,
    ) -> Result<Vec<Option<NoiseShape>>, EstimatorError> {
        if y.nrows() != x.nrows() || y.ncols() != self.outputs.len() {
            return Err(EstimatorError::Dimension {
                what: "noise shape rows",
                expected: self.outputs.len(),
                found: y.ncols(),
            });
        }
        let design = self.basis.design(x)?;
        // One column for a model of one output: a sum faer would split by the pool's threads.
        let means = crate::product(design.as_ref(), self.coefficients().as_ref());
        let rows = self.totals.rows();
        Ok((0..self.outputs.len())
            .map(|k| {
                self.outputs[k].posterior()?;
                let offset = noise_shape::OFFSET_FRACTION * (self.totals.q()[k] / rows).sqrt();
                let sparse = self.totals.zero_inflated(k);
                let residuals = (0..y.nrows())
                    .map(|i| (means[(i, k)], y[(i, k)]))
                    .filter(|&(mean, value)| mean != 0.0 && !(sparse && value == 0.0))
                    .map(|(mean, value)| (mean, value - mean));
                NoiseShape::choose(residuals, offset)
            })
            .collect())
    }

    /// The rows output `k` counts as fitted on when it has just been fitted on all of `totals`:
    /// its informative rows if trained, else 0.
    fn rows_fitted_on(totals: &BatchStatistics, k: usize, output: &OutputState) -> f64 {
        match output {
            OutputState::Trained(_) => totals.informative_rows(k),
            OutputState::Untrained => 0.0,
        }
    }

    /// [`Self::rows_fitted_on`] for every output.
    fn rows_of_trained(totals: &BatchStatistics, outputs: &[OutputState]) -> Vec<f64> {
        outputs
            .iter()
            .enumerate()
            .map(|(k, output)| Self::rows_fitted_on(totals, k, output))
            .collect()
    }

    /// The state with one more output (appended after the others), as a new dye joins a live
    /// model: no row learnt so far used it, so its statistics over them are exact zeros
    /// ([`BatchStatistics::with_output_appended`]) and it is untrained until it has its
    /// informative rows, exactly as it would be had it been declared from the start. Every
    /// other output is unchanged.
    pub fn with_output_appended(&self) -> Self {
        Self {
            basis: self.basis,
            totals: self.totals.with_output_appended(),
            outputs: self
                .outputs
                .iter()
                .cloned()
                .chain([OutputState::Untrained])
                .collect(),
            predictive: self.predictive,
            fitted_rows: self.fitted_rows.iter().copied().chain([0.0]).collect(),
            alternates: self
                .alternates
                .iter()
                .cloned()
                .chain([Vec::new()])
                .collect(),
            noise_shapes: self.noise_shapes.iter().copied().chain([None]).collect(),
            tail: self.tail,
        }
    }

    /// The state with one more named feature (after the others, before the intercept) whose
    /// value was 0 in every row learnt so far, as a new fabric indicator is for every dyeing
    /// before it: the statistics are those rows' with the feature declared
    /// ([`BatchStatistics::with_function_inserted`]), and each trained output's posterior is the
    /// one-shot posterior of those statistics with its hyperparameters and the new weight's
    /// prior variance: the widest of the output's other named features' (the shared one under
    /// ridge), or `fallback` where it has none. A feature whose past values are unknown (a new
    /// sensor) cannot be added this way. A basis whose every input is transformed (Kubelka–Munk
    /// without a declared spectrum) takes none. Each alternate of an output's model average
    /// ([`super::mixture`]) extends its prior the same way.
    pub fn with_feature_appended(&self, fallback: f64) -> Result<Self, EstimatorError> {
        let basis = self.basis;
        if basis.transform != super::Transform::Identity && !basis.declared {
            return Err(EstimatorError::Dimension {
                what: "untransformed features",
                expected: 0,
                found: basis.features,
            });
        }
        if !(fallback.is_finite() && fallback > 0.0) {
            return Err(EstimatorError::NonFinite("prior variance of a new feature"));
        }
        let j = basis.features;
        let totals = self.totals.with_function_inserted(j)?;
        let named = |i: usize| i >= basis.spectral && i < basis.features;
        let extended = |prior: &super::Prior| {
            let widest = (0..prior.dim())
                .filter(|&i| named(i))
                .map(|i| prior.variance[i])
                .filter(|v| *v > 0.0 && v.is_finite())
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
            let mut variance = prior.variance.clone();
            variance.insert(j, widest.unwrap_or(fallback));
            super::Prior {
                variance,
                ..prior.clone()
            }
        };
        // An alternate's posterior comes from the statistics: its prior, extended as the
        // posterior's is, is all it needs.
        let alternates = self
            .alternates
            .iter()
            .map(|alternates| {
                alternates
                    .iter()
                    .map(|alternate| Alternate {
                        prior: extended(&alternate.prior),
                        noise_variance: alternate.noise_variance,
                    })
                    .collect()
            })
            .collect();
        let outputs = self
            .outputs
            .iter()
            .map(|output| match output {
                OutputState::Untrained => Ok(OutputState::Untrained),
                OutputState::Trained(post) => {
                    let extended = extended(post.prior());
                    // On the support, the new weight's data precision and natural mean are 0.
                    let support = post.active();
                    let at = support.iter().filter(|&&i| i < j).count();
                    let precision =
                        super::statistics::insert_zeros(post.precision_data(), Some(at), Some(at));
                    let mut natural = post.natural_mean().to_vec();
                    natural.insert(at, 0.0);
                    Ok(OutputState::Trained(Box::new(
                        OutputPosterior::from_natural(
                            extended,
                            post.noise_variance(),
                            precision,
                            natural,
                        )?,
                    )))
                }
            })
            .collect::<Result<Vec<_>, EstimatorError>>()?;
        Self::from_parts(
            super::Basis {
                features: basis.features + 1,
                ..basis
            },
            totals,
            outputs,
            self.predictive,
            self.fitted_rows.clone(),
            alternates,
        )
        .map(|state| state.keeping_first_fit(self))
    }

    /// How predictions treat σ².
    pub fn predictive(&self) -> Predictive {
        self.predictive
    }

    /// The first fit: Algorithm 2 from `v = prior_variance`, `s = q/N` on every output that has
    /// enough informative rows.
    pub fn fit(config: &ModelConfig, stats: BatchStatistics) -> Result<Self, EstimatorError> {
        Self::fit_with_shapes(config, stats).map(|(state, _)| state)
    }

    /// [`Self::fit`], with the prior shapes its evidence formed, for the state's predictor
    /// ([`Predictor::with_fitted_shapes`](super::Predictor::with_fitted_shapes)).
    pub fn fit_with_shapes(
        config: &ModelConfig,
        stats: BatchStatistics,
    ) -> Result<(Self, FittedShapes), EstimatorError> {
        Self::fit_on(config, stats, None).map(|(state, shapes, _)| (state, shapes))
    }

    /// [`Self::fit_with_shapes`] on the statistics of the rows `x`, `y` (raw inputs and outputs,
    /// as a batch holds them), each dense output fitted under ridge or smooth (and each
    /// alternate of its model average) taking the larger `α` that leave-one-out on those rows
    /// asks for, if any (the crate's `leave_one_out`). With the state and its shapes, how many
    /// members took one, or why the rows could not be read (they are not the statistics' rows,
    /// or not of their shape): then the fit is the evidence's alone.
    pub fn fit_on_rows(
        config: &ModelConfig,
        stats: BatchStatistics,
        x: MatRef<'_, f64>,
        y: MatRef<'_, f64>,
    ) -> Result<FitOnRows, EstimatorError> {
        Self::fit_on(config, stats, Some((x, y)))
    }

    fn fit_on(
        config: &ModelConfig,
        stats: BatchStatistics,
        rows: Option<(MatRef<'_, f64>, MatRef<'_, f64>)>,
    ) -> Result<FitOnRows, EstimatorError> {
        check_config(config, &stats)?;
        let mut fitter = Fitter::new(config, &stats, |k| Fitter::ready(config, &stats, k))?;
        let read = fitter.read_rows(rows, |k| Fitter::ready(config, &stats, k));
        let (outputs, alternates): (Vec<_>, Vec<_>) = (0..config.outputs)
            .into_par_iter()
            .map(|k| fitter.fit_output(k, None))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let moved = read.map(|()| fitter.moved.load(Ordering::Relaxed));
        let shared = fitter.shared;
        let fitted = Self::rows_of_trained(&stats, &outputs);
        let state = Self::from_parts(
            config.basis,
            stats,
            outputs,
            predictive(config),
            fitted,
            alternates,
        )?;
        let shapes = FittedShapes::new(shared, state.totals());
        Ok((state, shapes, moved))
    }

    /// Learns one more batch with the model's update method (and forgetting, if any).
    ///
    /// Under one-step updates, an output is fitted again (Algorithm 2 on the accumulated
    /// statistics, as [`Self::refit`] does; no row is read again) when its informative rows
    /// have grown by [`super::FitOptions::refit_growth`] since its hyperparameters were last
    /// fitted: a model that learnt its prior from a first batch of 10 spectra otherwise keeps
    /// that prior for good, however many rows follow, and answers with intervals too narrow for
    /// the prior's errors. Growth by a factor keeps the refits to a logarithm of the rows a
    /// model sees; between them every batch is one Bayesian step. It is fitted again too when
    /// the batch contradicts its posterior predictive ([`super::FitOptions::refit_surprise`];
    /// the batch's surprise, [`Self::surprise`]): rows from a new instrument or a new dye lot,
    /// which the one step would weigh under hyperparameters chosen for the rows before them.
    /// States stored before the prior families are never refitted here.
    pub fn update(
        &self,
        config: &ModelConfig,
        batch: &BatchStatistics,
    ) -> Result<Self, EstimatorError> {
        self.update_with_shapes(config, batch, &self.surprise(batch))
            .map(|(state, _)| state)
    }

    /// [`Self::update`] given the batch's surprise to this state (`self.surprise(batch)`, which
    /// a caller that has judged the batch already holds), with the prior shapes its refits'
    /// evidence formed (none where every output took one step), for the state's predictor.
    pub fn update_with_shapes(
        &self,
        config: &ModelConfig,
        batch: &BatchStatistics,
        surprise: &[Option<f64>],
    ) -> Result<(Self, FittedShapes), EstimatorError> {
        self.update_on_rows(config, batch, surprise, None)
            .map(|done| (done.state, done.shapes))
    }

    /// [`Self::update_with_shapes`] given `rows`, every row behind the statistics after the batch
    /// (`x`, `y`: raw inputs and outputs, as batches hold them): an output the batch fits again
    /// checks its shrinkage on them as a first fit does ([`Self::fit_on_rows`]), so that a model
    /// fed its rows in batches answers as one fed them at once. Rows that are not the
    /// statistics' (some purged, or the statistics weighted by forgetting) are not read, and the
    /// refit is the evidence's alone, as without them. With the state and its shapes, how many
    /// members of the refits' model averages took a larger `α` on the rows (where none did, the
    /// state is [`Self::update_with_shapes`]'s to the bit), or why the rows could not be read.
    pub fn update_on_rows(
        &self,
        config: &ModelConfig,
        batch: &BatchStatistics,
        surprise: &[Option<f64>],
        rows: Option<(MatRef<'_, f64>, MatRef<'_, f64>)>,
    ) -> Result<RefitOnRows, EstimatorError> {
        check_config(config, batch)?;
        let weight = config.forgetting_weight(batch.rows());
        let informative_before: Vec<f64> = (0..self.outputs.len())
            .map(|k| self.totals.informative_rows(k))
            .collect();
        let mut totals = self.totals.clone();
        if weight != 1.0 {
            totals.scale(weight);
        }
        totals.add(batch)?;
        // A current state's output whose intercept kind no longer matches its statistics (a dye
        // that became common, or the reverse) is fitted again: a pruned intercept could never
        // come back by one-step updates. So is one whose rows have outgrown its hyperparameters.
        // States stored before the prior families keep theirs until an explicit refit.
        let current = self.predictive != Predictive::Plugin;
        let growth = config.options.refit_growth;
        let stale = |k: usize, post: &OutputPosterior| {
            let kind_changed =
                post.prior().flat().is_some() != config.output_flat_intercept(&totals, k).is_some();
            // At least one row behind the last fit: an output that has never been non-zero (fitted
            // on 0 informative rows when nothing waits for them) is not refitted on every batch.
            let outgrown = growth > 0.0
                && totals.informative_rows(k) >= growth * (weight * self.fitted_rows[k]).max(1.0);
            current && (kind_changed || outgrown)
        };
        // A batch the output's posterior predictive does not expect, at `refit_surprise`
        // standard deviations: first as if σ² were known (no γ needed), then on the posterior's
        // residual degrees of freedom, whose γ costs a factor's inverse.
        let sigmas = config.options.refit_surprise;
        let contradicted: Vec<bool> = (0..self.outputs.len())
            .map(|k| {
                let (OutputState::Trained(post), Some(z)) =
                    (&self.outputs[k], surprise.get(k).copied().flatten())
                else {
                    return false;
                };
                let rows = self.noise_rows(batch, k, post);
                let beyond = |dof: f64| drift::surprise_deviate(z, rows, dof) >= sigmas;
                current
                    && sigmas > 0.0
                    && rows > 0.0
                    && beyond(f64::INFINITY)
                    && beyond(
                        (informative_before[k]
                            - usize::from(post.flat().is_some()) as f64
                            - post.effective_parameters())
                        .max(3.0),
                    )
            })
            .collect();
        // A trained output is fitted again under refit updates, once stale, or once a batch
        // contradicts it; else one step.
        let refits = |k: usize, post: &OutputPosterior| {
            config.update == UpdateMethod::Refit || stale(k, post) || contradicted[k]
        };
        let fits = |k: usize| match &self.outputs[k] {
            OutputState::Untrained => Fitter::ready(config, &totals, k),
            OutputState::Trained(post) => refits(k, post),
        };
        let mut fitter = Fitter::new(config, &totals, fits)?;
        // Rows the check cannot read leave the fits the evidence's, as without them.
        let read = fitter.read_rows(rows, fits);
        // A fit iterates; one step of a narrow output is microseconds, less than a rayon task.
        let parallel =
            self.basis.dim() >= super::PARALLEL_FROM || (0..self.outputs.len()).any(fits);
        let refitted = |k: usize, warm: Option<&OutputPosterior>| {
            let (output, alternates) = fitter.fit_output(k, warm)?;
            let rows = Self::rows_fitted_on(&totals, k, &output);
            Ok::<_, EstimatorError>((output, (rows, alternates)))
        };
        // A one-step output keeps its alternates: their hyperparameters stay fixed, as its own do.
        let (outputs, kept): (Vec<_>, Vec<_>) =
            super::map_outputs(self.outputs.len(), parallel, |k| match &self.outputs[k] {
                OutputState::Trained(post) if refits(k, post) => refitted(k, Some(post)),
                OutputState::Trained(post) => {
                    let noise = noise_prior(config, &totals, k);
                    // The batch's rows counted as the output's kind before it, as
                    // `informative_before` counts the rows behind the posterior.
                    let data = batch.output_as(k, self.totals.zero_inflated(k));
                    let kept = weight * self.fitted_rows[k];
                    one_step(post, informative_before[k], data, weight, noise).map(|p| {
                        (
                            OutputState::Trained(Box::new(p)),
                            (kept, self.alternates[k].clone()),
                        )
                    })
                }
                OutputState::Untrained => refitted(k, None),
            })
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let (fitted_rows, alternates) = kept.into_iter().unzip();
        let shrunk = read.map(|()| fitter.moved.load(Ordering::Relaxed));
        let fitted = (0..outputs.len())
            .map(|k| fits(k) && outputs[k].posterior().is_some())
            .collect();
        let shared = fitter.shared;
        let state = Self::from_parts(
            self.basis,
            totals,
            outputs,
            self.predictive,
            fitted_rows,
            alternates,
        )?
        .keeping_first_fit(self);
        let shapes = FittedShapes::new(shared, state.totals());
        Ok(RefitOnRows {
            state,
            shapes,
            fitted,
            shrunk,
        })
    }

    /// Algorithm 2 on the accumulated statistics, warm-started from the current `(v, s)`. ARD
    /// never revives a basis function it pruned, so where the warm optimum holds a pruned one
    /// whose revival would raise the evidence by more than one variance's Occam factor
    /// (Tipping & Faul's test, [`super::evidence::revivals`]), Algorithm 2 also runs from the
    /// configured start, and the optimum with the larger evidence times Occam factor is kept.
    ///
    /// A state stored before the prior families (an ARD prior with a shrunk intercept) moves to
    /// the model's prior family here: its refit starts afresh under that family, except for an
    /// output whose zeros are structural under `ard` or `auto`, whose ARD prior of the same kind
    /// is the warm start (beside the configured one, as above).
    pub fn refit(&self, config: &ModelConfig) -> Result<Self, EstimatorError> {
        self.refit_with_shapes(config).map(|(state, _)| state)
    }

    /// [`Self::refit`], with the prior shapes its evidence formed, for the state's predictor.
    pub fn refit_with_shapes(
        &self,
        config: &ModelConfig,
    ) -> Result<(Self, FittedShapes), EstimatorError> {
        self.refit_on_rows(config, None)
            .map(|done| (done.state, done.shapes))
    }

    /// [`Self::refit_with_shapes`] given `rows`, every row behind the statistics: each output's
    /// shrinkage checked on them as a first fit's is (see [`Self::update_on_rows`]), with how
    /// many members took a larger `α`, or why the rows could not be read.
    pub fn refit_on_rows(
        &self,
        config: &ModelConfig,
        rows: Option<(MatRef<'_, f64>, MatRef<'_, f64>)>,
    ) -> Result<RefitOnRows, EstimatorError> {
        check_config(config, &self.totals)?;
        let fitted = |k: usize| {
            self.outputs[k].posterior().is_some() || Fitter::ready(config, &self.totals, k)
        };
        let mut fitter = Fitter::new(config, &self.totals, fitted)?;
        let read = fitter.read_rows(rows, fitted);
        let (outputs, alternates): (Vec<_>, Vec<_>) = self
            .outputs
            .par_iter()
            .enumerate()
            .map(|(k, output)| fitter.fit_output(k, output.posterior()))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let shrunk = read.map(|()| fitter.moved.load(Ordering::Relaxed));
        let shared = fitter.shared;
        let fitted_rows = Self::rows_of_trained(&self.totals, &outputs);
        let fitted = outputs.iter().map(|o| o.posterior().is_some()).collect();
        let state = Self::from_parts(
            self.basis,
            self.totals.clone(),
            outputs,
            predictive(config),
            fitted_rows,
            alternates,
        )?
        .keeping_first_fit(self);
        let shapes = FittedShapes::new(shared, state.totals());
        Ok(RefitOnRows {
            state,
            shapes,
            fitted,
            shrunk,
        })
    }

    /// Per output, the surprise `z` of `batch` to this state's posterior ([`drift`]); `None` for
    /// an output that is not trained yet, or when the expected residual is 0 (an empty batch).
    pub fn surprise(&self, batch: &BatchStatistics) -> Vec<Option<f64>> {
        let widest = self
            .outputs
            .iter()
            .filter_map(|output| output.posterior().map(|post| post.active().len()))
            .max()
            .unwrap_or(0);
        let root = drift::needs_root(batch, widest)
            .then(|| drift::gram_root(batch.g()))
            .flatten();
        let parallel = self.basis.dim() >= super::PARALLEL_FROM;
        super::map_outputs(self.outputs.len(), parallel, |k| {
            let OutputState::Trained(post) = &self.outputs[k] else {
                return None;
            };
            let data = OutputData {
                informative: self.noise_rows(batch, k, post),
                ..batch.output(k)
            };
            drift::output_surprise(post, data, root.as_ref().map(|u| u.as_ref()))
        })
    }

    /// `N′` of output `k`, trained with posterior `post`: the rows of `batch` that carry its
    /// noise ([`drift::noise_rows`]).
    fn noise_rows(&self, batch: &BatchStatistics, k: usize, post: &OutputPosterior) -> f64 {
        let structural = self.pruned_intercept(post).then(|| post.weighted());
        drift::noise_rows(&self.totals, batch, k, structural)
    }

    /// Whether `post`, an output's posterior in this state, has pruned its intercept, so that it
    /// predicts exactly 0 on a row in which every basis function it uses is 0 (a structural
    /// zero: a dye whose lab-dip dose is 0).
    pub(crate) fn pruned_intercept(&self, post: &OutputPosterior) -> bool {
        post.flat().is_none()
            && self.basis.intercept
            && post.prior_variance()[self.basis.features] == 0.0
    }

    pub fn basis(&self) -> &Basis {
        &self.basis
    }

    /// The (forgetting-weighted) statistics of every row folded.
    pub fn totals(&self) -> &BatchStatistics {
        &self.totals
    }

    pub fn outputs(&self) -> &[OutputState] {
        &self.outputs
    }

    /// Per output, the (forgetting-weighted) informative rows its hyperparameters were last
    /// fitted on (0 untrained).
    pub fn fitted_rows(&self) -> &[f64] {
        &self.fitted_rows
    }

    /// The other prior shapes of output `k`'s model average ([`super::mixture`]).
    pub fn alternates(&self, k: usize) -> &[Alternate] {
        self.alternates.get(k).map_or(&[], Vec::as_slice)
    }

    /// Whether every number of the state (statistics, means, noise variances) is finite: the
    /// service never stores a state that is not.
    pub fn is_finite(&self) -> bool {
        self.totals.is_finite()
            && self.outputs.iter().all(|output| match output {
                OutputState::Untrained => true,
                OutputState::Trained(post) => {
                    post.noise_variance().is_finite() && post.mean().iter().all(|v| v.is_finite())
                }
            })
    }

    /// σ² of every output, `None` for an untrained one.
    pub fn noise_variances(&self) -> Vec<Option<f64>> {
        self.outputs
            .iter()
            .map(|o| o.posterior().map(OutputPosterior::noise_variance))
            .collect()
    }

    /// Posterior means of all outputs as a p × m matrix (zero columns for untrained outputs).
    pub fn coefficients(&self) -> Mat<f64> {
        let p = self.basis.dim();
        let mut w = Mat::zeros(p, self.outputs.len());
        for (k, output) in self.outputs.iter().enumerate() {
            if let Some(post) = output.posterior() {
                for (j, &mu) in post.mean().iter().enumerate() {
                    w[(j, k)] = mu;
                }
            }
        }
        w
    }

    /// Mean square of an untrained output's non-zero values, what a prediction of 0 misses by
    /// when the dye is in fact used.
    ///
    /// An output 0 in every one of the `N` rows (a dye no recipe has used yet) has no scale of
    /// its own; a recipe may still use it. Its variance is then the rule of succession over
    /// those rows, as for a structural zero (one pseudo-row at the dose scale `v̄` of the
    /// outputs that have been used, `Σ q_j / Σ N_nz,j`, the rows' `S = 0`):
    ///
    /// ```text
    /// v_k = v̄ / (N + 1)
    /// ```
    ///
    /// the second moment of "used at a dose like the others' once in `N + 1` rows", not the
    /// noise floor's certainty that it never will be.
    pub(crate) fn untrained_variance(&self, k: usize) -> f64 {
        let totals = &self.totals;
        let own = totals.nonzero_mean_square(k);
        let variance = if own > 0.0 {
            own
        } else {
            let used: f64 = totals.nonzero().iter().sum();
            let squares: f64 = totals.q().iter().sum();
            if used > 0.0 && squares.is_finite() {
                squares / used / (totals.rows().max(0.0) + 1.0)
            } else {
                0.0
            }
        };
        variance.max(super::DEFAULT_NOISE_FLOOR)
    }
}

fn check_config(config: &ModelConfig, stats: &BatchStatistics) -> Result<(), EstimatorError> {
    check_shape(
        stats.dim(),
        stats.outputs(),
        config.basis.dim(),
        config.outputs,
    )
}

fn noise_prior(config: &ModelConfig, stats: &BatchStatistics, k: usize) -> NoisePrior {
    NoisePrior::for_output(stats, k, config.intercept(), &config.options)
}

fn predictive(config: &ModelConfig) -> Predictive {
    if config.options.student {
        Predictive::StudentNoise
    } else {
        Predictive::Plugin
    }
}

/// A fit on its rows ([`ModelState::fit_on_rows`]): the state, the shapes its evidence formed,
/// and how many members took a larger `α`, or why the rows were not read.
pub type FitOnRows = (ModelState, FittedShapes, Result<usize, EstimatorError>);

/// A batch learnt, or a refit, given the rows behind its statistics
/// ([`ModelState::update_on_rows`], [`ModelState::refit_on_rows`]).
#[derive(Debug)]
pub struct RefitOnRows {
    pub state: ModelState,
    /// The prior shapes the refits' evidence formed, for the state's predictor.
    pub shapes: FittedShapes,
    /// Per output, whether Algorithm 2 fitted it here (a refit, or an untrained output's first
    /// fit) and it is trained: not one step, nor left untrained.
    pub fitted: Vec<bool>,
    /// How many members of the refits' model averages took a larger `α` on the rows, or why the
    /// rows could not be read.
    pub shrunk: Result<usize, EstimatorError>,
}

/// Fits outputs of one model on the same statistics: ARD one output at a time; ridge and smooth
/// with the eigendecompositions of their prior shapes shared by every output, prepared before
/// the outputs are fitted in parallel (faer's decompositions may themselves run on the rayon
/// pool). A smooth shape's kernel square root is formed by the first output whose evidence
/// picks it, without a lock: two outputs may form it at once, neither waits.
struct Fitter<'a> {
    config: &'a ModelConfig,
    stats: &'a BatchStatistics,
    shared: Option<SharedScale>,
    /// A first fit's rows, where the fit checks its shrinkage on them.
    rows: Option<leave_one_out::Rows<'a>>,
    /// How many members of the model averages kept took a larger `α` on those rows.
    moved: AtomicUsize,
}

impl<'a> Fitter<'a> {
    /// `fitted(k)`: whether output `k` will be fitted. The shared shapes are prepared only if
    /// one of those may use them: an output whose zeros are structural is fitted by ARD alone,
    /// so a batch that refits only such outputs has no use for the shapes' eigendecompositions.
    /// Nor can their failure fail it.
    fn new(
        config: &'a ModelConfig,
        stats: &'a BatchStatistics,
        fitted: impl Fn(usize) -> bool,
    ) -> Result<Self, EstimatorError> {
        let shares = (0..config.outputs).any(|k| fitted(k) && !config.structural_zeros(stats, k));
        let shared = if shares && config.prior != PriorFamily::Ard {
            Some(SharedScale::prepare(
                config.prior,
                config.bands(),
                stats.g(),
                stats.rows(),
                config.flat_intercept(),
            )?)
        } else {
            None
        };
        Ok(Self {
            config,
            stats,
            shared,
            rows: None,
            moved: AtomicUsize::new(0),
        })
    }

    /// Makes the rows `x`, `y` (every row behind the statistics) ready for the check, where some
    /// output that `fitted` names may take it ([`Self::fit_output`]): a dense output without a
    /// noise prior, fitted under a shared-scale family. `Ok` where they were not needed; why they
    /// could not be read otherwise (they are not the statistics' rows, or not of their shape),
    /// and the fit is then the evidence's alone.
    fn read_rows(
        &mut self,
        rows: Option<(MatRef<'a, f64>, MatRef<'a, f64>)>,
        fitted: impl Fn(usize) -> bool,
    ) -> Result<(), EstimatorError> {
        let (config, stats) = (self.config, self.stats);
        let checks = |k: usize| {
            fitted(k)
                && !config.structural_zeros(stats, k)
                && !stats.zero_inflated(k)
                && noise_prior(config, stats, k).rows == 0.0
        };
        let (Some((x, y)), Some(shared)) = (rows, &self.shared) else {
            return Ok(());
        };
        if !(0..config.outputs).any(checks) {
            return Ok(());
        }
        let rows = leave_one_out::Rows::new(
            &config.basis,
            stats,
            x,
            y,
            config.flat_intercept(),
            shared.len(),
        )?;
        self.rows = Some(rows);
        Ok(())
    }

    /// Whether output `k` (untrained so far) has the informative rows a first fit needs.
    fn ready(config: &ModelConfig, stats: &BatchStatistics, k: usize) -> bool {
        let needed = if stats.zero_inflated(k) {
            config.options.min_zero_inflated_rows
        } else {
            config.options.min_informative_rows
        };
        stats.nonzero()[k] >= needed
    }

    /// Algorithm 2 for output `k`, if it has enough informative rows: ARD from `warm` (an ARD
    /// posterior with the same kind of intercept) and, where its optimum pruned a basis
    /// function whose revival would raise the evidence by more than one variance's Occam
    /// factor, from the configured start too, or from the configured start alone; the other families afresh. Between two starts, and under
    /// [`PriorFamily::Auto`] between families, the larger evidence times Occam factor
    /// ([`super::evidence::EvidenceFit::family_score`]) wins; an output whose zeros are
    /// structural is fitted by ARD alone.
    ///
    /// With the output's state, the other shapes of its model average when a shared-scale
    /// family's fit wins ([`SharedScale::fit_checked`], its shrinkage checked on a first fit's
    /// rows where the fitter has them); none when ARD's does.
    fn fit_output(
        &self,
        k: usize,
        warm: Option<&OutputPosterior>,
    ) -> Result<(OutputState, Vec<Alternate>), EstimatorError> {
        let (config, stats) = (self.config, self.stats);
        if warm.is_none() && !Self::ready(config, stats, k) {
            return Ok((OutputState::Untrained, Vec::new()));
        }
        let data = stats.output(k);
        let noise = noise_prior(config, stats, k);
        // A zero-inflated output's zeros are structural (see `FitOptions`): under ARD its
        // intercept is a coefficient like the others, and `auto` fits it by ARD alone.
        let structural_zeros = config.structural_zeros(stats, k);
        let flat = config.output_flat_intercept(stats, k);
        debug_assert!(
            self.shared.is_some() || structural_zeros || config.prior == PriorFamily::Ard,
            "output {k} is fitted but `Fitter::new` was told it would not be"
        );
        // The shrinkage is checked on a first fit's rows for a dense output without a noise
        // prior (a zero-inflated output's doses are set by the prior as much as by its rows).
        let larger = |i: usize, shape: &Shape, alpha: f64| {
            self.rows.as_ref()?.larger_alpha(k, i, shape, alpha)
        };
        let checked = self.rows.is_some() && !stats.zero_inflated(k) && noise.rows == 0.0;
        let shared_fit = match &self.shared {
            Some(shared) if !structural_zeros => Some(shared.fit_checked(
                data,
                noise,
                checked.then_some(&larger as LargerAlpha<'_>),
            )?),
            _ => None,
        };
        // Auto weighs ARD against the others unless the inputs are a spectrum alone: one
        // variance per band is what the smooth prior exists to avoid, but named features beside
        // a spectrum (a lab-dip recipe) may matter one by one.
        let with_ard = structural_zeros
            || match config.prior {
                PriorFamily::Ard => true,
                PriorFamily::Auto => config.bands() == 0 || config.basis.features > config.bands(),
                PriorFamily::Ridge | PriorFamily::Smooth => false,
            };
        if !with_ard {
            let (fit, alternates, moved) = shared_fit.ok_or(EstimatorError::Untrained)?;
            self.moved.fetch_add(moved, Ordering::Relaxed);
            return Ok((OutputState::Trained(Box::new(fit.posterior)), alternates));
        }
        let afresh = || {
            let mut v = vec![config.prior_variance; stats.dim()];
            if let Some(f) = flat {
                v[f] = f64::INFINITY;
            }
            let variance = stats.output_variance(k, config.intercept());
            let s0 = if variance > 0.0 { variance } else { 1.0 };
            evidence(
                data,
                super::evidence::unit_free_start(data, v, s0)?,
                s0,
                noise,
                &config.options,
            )
        };
        // Warm start only from an ARD posterior with the same intercept prior. A basis function
        // pruned there stays pruned for good (v_j = 0 is a fixed point), so a prior learnt from
        // a few rows would bind the refit on many: where the warm optimum has pruned one whose
        // revival would pay its Occam factor (Tipping & Faul's test, `revivals`), Algorithm 2 also
        // runs from the configured start, and the optimum with the larger evidence times Occam
        // factor wins (by a margin, so that round-off does not choose between two starts that
        // reach the same optimum). Should that run fail, the warm one stands, as before it
        // existed.
        let warm = warm.filter(|post| {
            post.prior().family == super::FittedFamily::Ard && post.prior().flat() == flat
        });
        let fit = match warm {
            Some(post) => {
                let from_warm = evidence(
                    data,
                    post.prior_variance().to_vec(),
                    post.noise_variance(),
                    noise,
                    &config.options,
                )?;
                // Should the test itself fail, the second start decides, as it did before.
                let trapped = super::evidence::revivals(
                    data,
                    from_warm.posterior.prior_variance(),
                    from_warm.posterior.noise_variance(),
                )
                .map_or(true, |r| {
                    r.iter()
                        .any(super::evidence::Revival::pays_its_occam_factor)
                });
                match trapped.then(afresh).and_then(Result::ok) {
                    Some(fresh)
                        if fresh.family_score()
                            < from_warm.family_score()
                                - TIE_RELATIVE * from_warm.family_score().abs().max(1.0) =>
                    {
                        fresh
                    }
                    _ => from_warm,
                }
            }
            None => afresh()?,
        };
        let (fit, alternates) = match shared_fit {
            Some((shared, alternates, moved)) if shared.family_score() < fit.family_score() => {
                self.moved.fetch_add(moved, Ordering::Relaxed);
                (shared, alternates)
            }
            _ => (fit, Vec::new()),
        };
        Ok((OutputState::Trained(Box::new(fit.posterior)), alternates))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Predictor, Transform};
    use faer::Mat;

    /// Rows `from..from + rows` of three inputs and an intercept; output 0 non-zero in every
    /// row, output 1 in every row whose index is a multiple of `every`.
    fn rows(from: usize, rows: usize, every: usize) -> BatchStatistics {
        let x = |i: usize, j: usize| ((i * (j + 3)) as f64 * 0.37 + j as f64).sin();
        let phi = Mat::from_fn(rows, 4, |i, j| if j == 3 { 1.0 } else { x(from + i, j) });
        let y = Mat::from_fn(rows, 2, |i, k| {
            let i = from + i;
            let level = 1.0 + 0.5 * x(i, 0) - 0.3 * x(i, 2) + 0.01 * x(i + 7, 1);
            match k {
                0 => level,
                _ if i.is_multiple_of(every) => 0.2 * level,
                _ => 0.0,
            }
        });
        BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
    }

    /// 40 rows; output 1 non-zero in every fourth (zero-inflated: its zeros are structural
    /// under `auto`).
    fn dense_and_sparse() -> (ModelConfig, BatchStatistics) {
        let config = ModelConfig::new(Basis::new(3, true, Transform::Identity), 2);
        (config, rows(0, 40, 4))
    }

    /// A one-row batch in which the dense output 0 reads 0 moves its noise variance as the same
    /// row reading 10⁻¹² does: the 0 is a measurement. Counted by the batch's own zeros, the
    /// row was not informative and the step left σ² where it was.
    #[test]
    fn a_one_step_counts_a_zero_of_a_dense_output_as_a_measurement() {
        let (config, stats) = dense_and_sparse();
        // A 0 where the nearly noiseless output reads about 1 contradicts its posterior: without
        // this, the update would fit the output again rather than take the step under test.
        let config = ModelConfig {
            options: FitOptions {
                refit_surprise: 0.0,
                ..config.options
            },
            ..config
        };
        let state = ModelState::fit(&config, stats).unwrap();
        let before = state.outputs()[0].posterior().unwrap().noise_variance();
        let after = |y: f64| {
            let phi = Mat::from_fn(1, 4, |_, j| [0.9, -0.4, 0.7, 1.0][j]);
            let y = Mat::from_fn(1, 2, |_, k| [y, 0.0][k]);
            let batch = BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap();
            let updated = state.update(&config, &batch).unwrap();
            updated.outputs()[0].posterior().unwrap().noise_variance()
        };
        let (zero, tiny) = (after(0.0), after(1e-12));
        assert!((zero - tiny).abs() <= 1e-9 * tiny, "{zero} against {tiny}");
        assert!(
            (zero - before).abs() > 1e-6 * before,
            "{zero} against {before} before"
        );
    }

    /// The rows' noise shapes, read from the means of a one-output model whose rows and basis
    /// functions are many (a product whose sum faer would split by the pool's threads), are the
    /// same on any number of threads.
    #[test]
    fn noise_shapes_from_many_rows_are_the_same_on_any_number_of_threads() {
        let (n, p) = (300, 260);
        let x = Mat::from_fn(n, p, |i, j| ((i * 31 + j * 17) % 97) as f64 / 97.0);
        let y = Mat::from_fn(n, 1, |i, _| {
            let truth = 0.1 + (0..p).step_by(20).map(|j| x[(i, j)]).sum::<f64>();
            truth * (1.0 + 0.05 * ((i as f64 * 0.754_877_666).fract() - 0.5))
        });
        let basis = Basis::new(p, true, Transform::Identity);
        let config = ModelConfig {
            prior: PriorFamily::Ridge,
            ..ModelConfig::new(basis, 1)
        };
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let state = ModelState::fit(&config, stats).unwrap();
        let on = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    state
                        .noise_shapes_from_rows(x.as_ref(), y.as_ref())
                        .unwrap()
                })
        };
        let one = on(1);
        let shape = one[0].expect("a shape");
        for threads in [2, 3] {
            let other = on(threads)[0].expect("a shape");
            assert_eq!(
                shape.level().to_bits(),
                other.level().to_bits(),
                "{threads} threads"
            );
            assert_eq!(shape, other, "{threads} threads");
        }
    }

    /// Rows whose error grows in proportion to the answer (5 % of it) set a noise shape of
    /// power 1 on the first fit's rows: an answer near 0 is then given a small fraction of the
    /// output's one noise variance and a large one more than all of it, every prediction path
    /// agrees, and the shape stays through a one-step update, a refit, and an encoding.
    #[test]
    fn a_noise_that_grows_with_the_answer_narrows_small_answers_and_widens_large_ones() {
        let n = 300;
        let noise = |i: usize| ((i as f64 * 0.754_877_666).fract() - 0.5) * 12f64.sqrt();
        let x = Mat::from_fn(n, 2, |i, j| {
            let t = i as f64 / n as f64;
            if j == 0 {
                t * t
            } else {
                (i as f64 * 0.37).sin().abs()
            }
        });
        let y = Mat::from_fn(n, 1, |i, _| {
            let truth = 0.01 + 4.0 * x[(i, 0)] + 0.5 * x[(i, 1)];
            truth * (1.0 + 0.05 * noise(i))
        });
        let basis = Basis::new(2, true, Transform::Identity);
        let config = ModelConfig {
            prior: PriorFamily::Ridge,
            ..ModelConfig::new(basis, 1)
        };
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let plain = ModelState::fit(&config, stats).unwrap();
        let shapes = plain
            .noise_shapes_from_rows(x.as_ref(), y.as_ref())
            .unwrap();
        let shape = shapes[0].expect("a shape");
        assert_eq!(shape.power(), 1.0);
        let shaped = plain.clone().with_noise_shapes(shapes).unwrap();
        let probe = Mat::from_fn(2, 2, |i, j| if j == 0 { [0.0, 1.0][i] } else { 0.5 });
        let before = Predictor::new(&plain).predict(probe.as_ref()).unwrap();
        let after = Predictor::new(&shaped).predict(probe.as_ref()).unwrap();
        // The means are the model's own; only the noise part moves.
        assert_eq!(before.mean, after.mean);
        assert!(after.variance[(0, 0)] < 0.1 * before.variance[(0, 0)]);
        assert!(after.variance[(1, 0)] > before.variance[(1, 0)]);
        // The noise's part of each answer is what the shape makes of it, never above the whole.
        let shaped_predictor = Predictor::new(&shaped);
        for r in 0..2 {
            let mean = after.mean[(r, 0)];
            let noise = shaped_predictor.noise_variance_at(0, mean).unwrap();
            let unshaped = shaped_predictor.noise_variance(0).unwrap();
            assert!((noise - unshaped * shape.weight(mean)).abs() <= 1e-12 * noise);
            assert!(noise <= after.variance[(r, 0)]);
        }
        // Row by row, in blocks and through a design matrix: the same answer.
        let many = Mat::from_fn(40, 2, |i, j| (i as f64 * [0.13, 0.29][j]).fract());
        let predictor = Predictor::new(&shaped);
        let rows = predictor.predict(many.as_ref()).unwrap();
        let each = predictor.predict_each_row(many.as_ref()).unwrap();
        let design = predictor.predict_design(basis.design(many.as_ref()).unwrap().as_ref());
        for i in 0..40 {
            let one = predictor.predict(many.subrows(i, 1)).unwrap();
            assert_eq!(one.variance[(0, 0)], each.variance[(i, 0)]);
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-10 * a.abs().max(b.abs());
            assert!(close(rows.variance[(i, 0)], design.variance[(i, 0)]));
        }
        // Kept by a step, a refit and the codec; refused on an untrained output.
        let more = BatchStatistics::from_rows(&basis, x.subrows(0, 20), y.subrows(0, 20)).unwrap();
        let stepped = shaped.update(&config, &more).unwrap();
        assert_eq!(stepped.noise_shape(0), Some(shape));
        assert_eq!(stepped.refit(&config).unwrap().noise_shape(0), Some(shape));
        let decoded = crate::codec::decode(&crate::codec::encode(&shaped)).unwrap();
        assert_eq!(decoded, shaped);
        assert!(
            crate::codec::decode(&crate::codec::encode(&plain))
                .unwrap()
                .noise_shape(0)
                .is_none()
        );
        let untrained = shaped.with_output_appended();
        assert!(
            untrained
                .clone()
                .with_noise_shapes(vec![Some(shape), Some(shape)])
                .is_err()
        );
        assert_eq!(untrained.noise_shape(0), Some(shape));
    }

    /// Rows whose errors are heavy-tailed (a t with 3 degrees of freedom: most rows close, a
    /// few far off) set a tail on the first fit's rows; Gaussian errors set none. The tail
    /// leaves every mean and variance as it was, answers a trained output's non-zero means
    /// only, and stays through a one-step update, a refit, a new output and the codec.
    #[test]
    fn heavy_tailed_errors_set_a_tail_and_gaussian_ones_none() {
        let n = 600;
        let u = |i: usize, a: f64| ((i as f64 + 0.5) * a).fract();
        // A normal by Box–Muller from two sequences; a t₃ as a normal over √(χ²₃/3).
        let normal = |i: usize, a: f64, b: f64| {
            (-2.0 * u(i, a).ln()).sqrt() * (std::f64::consts::TAU * u(i, b)).cos()
        };
        let student = |i: usize| {
            let chi2: f64 = [0.414_213_56, 0.732_050_81, 0.236_067_98]
                .iter()
                .map(|&a| normal(i, a, 0.381_966_01).powi(2))
                .sum();
            normal(i, 0.618_033_99, 0.754_877_67) / (chi2 / 3.0).sqrt()
        };
        let x = Mat::from_fn(n, 2, |i, j| (i as f64 * [0.13, 0.29][j]).fract());
        let basis = Basis::new(2, true, Transform::Identity);
        let config = ModelConfig {
            prior: PriorFamily::Ridge,
            ..ModelConfig::new(basis, 1)
        };
        let fitted = |noise: &dyn Fn(usize) -> f64| {
            let y = Mat::from_fn(n, 1, |i, _| {
                1.0 + 2.0 * x[(i, 0)] - x[(i, 1)] + 0.1 * noise(i)
            });
            let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
            let state = ModelState::fit(&config, stats).unwrap();
            let tail = Predictor::new(&state)
                .tail_of_rows(x.as_ref(), y.as_ref())
                .unwrap();
            (state, tail)
        };
        let (gaussian, none) = fitted(&|i| normal(i, 0.618_033_99, 0.754_877_67));
        assert_eq!(none, None);
        let (plain, tail) = fitted(&student);
        let nu = tail.expect("a tail").degrees_of_freedom();
        assert!(nu <= 5.0, "ν = {nu}");
        let tailed = plain.clone().with_tail(tail);
        let probe = Mat::from_fn(3, 2, |i, j| (i as f64 * [0.31, 0.17][j]).fract());
        let (before, after) = (Predictor::new(&plain), Predictor::new(&tailed));
        let (a, b) = (
            before.predict(probe.as_ref()).unwrap(),
            after.predict(probe.as_ref()).unwrap(),
        );
        assert_eq!(
            (a.mean.clone(), a.variance.clone()),
            (b.mean.clone(), b.variance.clone())
        );
        assert_eq!(after.degrees_of_freedom(0, b.mean[(0, 0)]), Some(nu));
        assert_eq!(after.degrees_of_freedom(0, 0.0), None);
        assert_eq!(before.degrees_of_freedom(0, b.mean[(0, 0)]), None);
        assert_eq!(before.with_tail(tail).degrees_of_freedom(0, 1.0), Some(nu));
        // Kept by a step, a refit, a new output (untrained: no tail on its answers) and the
        // codec, which writes the states without one as before.
        let more =
            BatchStatistics::from_rows(&basis, x.subrows(0, 20), x.subrows(0, 20).subcols(0, 1))
                .unwrap();
        let stepped = tailed.update(&config, &more).unwrap();
        assert_eq!(stepped.tail(), Some(nu));
        assert_eq!(stepped.refit(&config).unwrap().tail(), Some(nu));
        let grown = tailed.with_output_appended();
        assert_eq!(grown.tail(), Some(nu));
        assert_eq!(Predictor::new(&grown).degrees_of_freedom(1, 1.0), None);
        let decoded = crate::codec::decode(&crate::codec::encode(&tailed)).unwrap();
        assert_eq!(decoded, tailed);
        assert_eq!(
            crate::codec::encode(&gaussian)[4],
            crate::codec::encode(&plain)[4]
        );
        assert!(
            crate::codec::decode(&crate::codec::encode(&plain))
                .unwrap()
                .tail()
                .is_none()
        );
        // A stored ν the choice does not weigh (a later release's) is read; one without a
        // finite variance is refused.
        let with_nu = |nu: f64| {
            let mut blob = crate::codec::encode(&tailed);
            let at = blob.len() - 12;
            blob[at..at + 8].copy_from_slice(&nu.to_le_bytes());
            let end = blob.len() - 4;
            let crc = crc32fast::hash(&blob[..end]);
            blob[end..].copy_from_slice(&crc.to_le_bytes());
            crate::codec::decode(&blob)
        };
        assert_eq!(with_nu(6.0).unwrap().tail(), Some(6.0));
        assert!(with_nu(1.5).is_err());
    }

    /// An output whose error does not grow with its answer keeps one noise variance.
    #[test]
    fn a_noise_that_does_not_grow_with_the_answer_sets_no_shape() {
        let n = 300;
        let x = Mat::from_fn(n, 1, |i, _| i as f64 / n as f64);
        let y = Mat::from_fn(n, 1, |i, _| {
            0.1 + 4.0 * x[(i, 0)] + 0.05 * ((i as f64 * 0.754_877_666).fract() - 0.5)
        });
        let basis = Basis::new(1, true, Transform::Identity);
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let state = ModelState::fit(&ModelConfig::new(basis, 1), stats).unwrap();
        let shapes = state
            .noise_shapes_from_rows(x.as_ref(), y.as_ref())
            .unwrap();
        assert_eq!(shapes, vec![None]);
    }

    /// A named feature that holds one value in every row (one fabric for a while) is the
    /// intercept's direction again. Its centred sums of squares are then round-off, of either
    /// sign where the value has no exact double (0.7, 0.3, 0.1): the fit refused the batch as
    /// "not positive definite" under ridge and `auto`, and so every batch after it. It fits,
    /// takes one-row batches that keep the value, and predicts as the model without the column.
    #[test]
    fn a_feature_that_holds_one_value_fits_as_if_it_were_absent() {
        let first = [
            [0.24, 0.54, 0.98, 1.55],
            [0.91, 0.12, 2.33, 1.13],
            [0.33, 0.78, 1.17, 1.80],
            [0.05, 0.47, 0.62, 1.49],
            [0.66, 0.29, 1.83, 1.30],
            [0.18, 0.95, 0.87, 1.96],
        ];
        let later = |i: usize| {
            let t = i as f64 * 0.37;
            let (a, b) = (t.sin().abs(), t.cos().abs());
            [a, b, 0.3 + 2.0 * a - 0.5 * b, 1.4 + 0.6 * b - 0.2 * a]
        };
        // Predictions after the first six rows and twelve one-row batches; `column`: the value
        // of a leading feature held in every row, or no such feature.
        let learn = |prior, column: Option<f64>| {
            let d = 2 + usize::from(column.is_some());
            let config = ModelConfig {
                prior,
                ..ModelConfig::new(Basis::new(d, true, Transform::Identity), 2)
            };
            let stats = |rows: &[[f64; 4]]| {
                let phi = Mat::from_fn(rows.len(), d + 1, |i, j| match (column, j) {
                    (_, j) if j == d => 1.0,
                    (Some(value), 0) => value,
                    (Some(_), j) => rows[i][j - 1],
                    (None, j) => rows[i][j],
                });
                let y = Mat::from_fn(rows.len(), 2, |i, k| rows[i][2 + k]);
                BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap()
            };
            let mut state = ModelState::fit(&config, stats(&first))
                .unwrap_or_else(|e| panic!("{prior:?}, {column:?}: {e}"));
            for i in 0..12 {
                state = state
                    .update(&config, &stats(&[later(i)]))
                    .unwrap_or_else(|e| panic!("{prior:?}, {column:?}, batch {i}: {e}"));
            }
            // The probe's value of the held feature is not the rows' own: nothing was learnt of
            // it, and the answer does not move with it.
            let probe = [[0.5, 0.4, 0.6], [0.1, 0.9, 0.2]];
            let probe = Mat::from_fn(2, d, |i, j| probe[i][j + 3 - d]);
            Predictor::new(&state).predict(probe.as_ref()).unwrap()
        };
        for prior in [PriorFamily::Auto, PriorFamily::Ridge, PriorFamily::Ard] {
            let without = learn(prior, None);
            for value in [0.1, 0.3, 0.7, 0.5, 0.0] {
                let with = learn(prior, Some(value));
                for i in 0..2 {
                    for k in 0..2 {
                        let (a, b) = (with.mean[(i, k)], without.mean[(i, k)]);
                        assert!((a - b).abs() < 1e-6, "{prior:?} {value}: {a} against {b}");
                        let (v, w) = (with.variance[(i, k)], without.variance[(i, k)]);
                        assert!(
                            (v - w).abs() < 1e-6 * w,
                            "{prior:?} {value}: variance {v} against {w}"
                        );
                    }
                }
            }
        }
    }

    /// ARD keeps three residual degrees of freedom where the rows allow, as the shared scales
    /// do (`evidence::residual_cap`): with more inputs than rows it could otherwise fit every
    /// row to the noise, estimate σ² on less than one residual and answer intervals far too
    /// narrow for new rows.
    #[test]
    fn ard_keeps_three_residual_degrees_of_freedom_with_more_inputs_than_rows() {
        // (rows, inputs, a smooth spectrum-like design or not)
        for (rows, p, smooth) in [
            (5, 20, false),
            (6, 20, true),
            (7, 50, false),
            (14, 40, false),
        ] {
            let x = |i: usize, j: usize| {
                if smooth {
                    ((i + 1) as f64 * 0.3 * j as f64 / p as f64 + i as f64).sin()
                } else {
                    ((i * 31 + j * 17) as f64 * 0.77 + (j * j) as f64).sin()
                }
            };
            let y = |i: usize| {
                let signal: f64 = (0..p).map(|j| ((j * 7) as f64).cos() * x(i, j)).sum();
                1.0 + signal + 0.1 * ((i * 13) as f64 * 2.3).sin()
            };
            let config = ModelConfig {
                prior: PriorFamily::Ard,
                ..ModelConfig::new(Basis::new(p, true, Transform::Identity), 1)
            };
            let phi = Mat::from_fn(rows, p + 1, |i, j| if j == p { 1.0 } else { x(i, j) });
            let targets = Mat::from_fn(rows, 1, |i, _| y(i));
            let stats = BatchStatistics::from_design(phi.as_ref(), targets.as_ref()).unwrap();
            let state = ModelState::fit(&config, stats).unwrap();
            let post = state.outputs()[0].posterior().unwrap();
            // The flat intercept uses one row; with four rows or fewer left, the cap is one
            // determined weight.
            let rows_left = rows as f64 - 1.0;
            let cap = if rows_left > 4.0 {
                rows_left - 3.0
            } else {
                1.0
            };
            let gamma = post.effective_parameters();
            assert!(gamma <= cap + 1e-6, "{rows} rows, {p} inputs: γ {gamma}");
            // The predictive's variance is its own (ν ≥ 3 without the clamp) and σ² is not the
            // rows' round-off.
            assert!(post.noise_variance() > 1e-6, "σ² {}", post.noise_variance());
        }
    }

    /// ARD keeps an input that explains the output whatever its units: a concentration posted in
    /// mol/L (about 10⁻⁴) started at the configured prior variance with a `γ_j` of about 10⁻⁸
    /// and was pruned for good, the model answering a constant; it starts where the rows would
    /// determine it half way, and the fit answers as with the same input in units of 10⁻⁴ mol/L,
    /// whether it explains most of the output or a modest share of it.
    #[test]
    fn ard_keeps_an_input_that_explains_the_output_in_any_units() {
        let rows = 30;
        let a = |i: usize| (i as f64 * 0.618_033_988_749_895).fract();
        let c = |i: usize| ((i as f64 + 0.5) * 0.754_877_666_246_692_7).fract();
        let noise = |i: usize| 0.01 * ((i * 13) as f64 * 2.3).sin();
        for (wa, wc) in [(2.0, 3.0), (3.0, 0.5)] {
            let y = Mat::from_fn(rows, 1, |i, _| 1.0 + wa * a(i) + wc * c(i) + noise(i));
            ard_fits_alike_in_any_units(rows, &a, &c, &y, wc);
        }
    }

    fn ard_fits_alike_in_any_units(
        rows: usize,
        a: &dyn Fn(usize) -> f64,
        c: &dyn Fn(usize) -> f64,
        y: &Mat<f64>,
        wc: f64,
    ) {
        let config = ModelConfig {
            prior: PriorFamily::Ard,
            ..ModelConfig::new(Basis::new(2, true, Transform::Identity), 1)
        };
        let fit = |unit: f64| {
            let x = Mat::from_fn(rows, 2, |i, j| if j == 0 { a(i) } else { c(i) * unit });
            let stats = BatchStatistics::from_rows(&config.basis, x.as_ref(), y.as_ref()).unwrap();
            let state = ModelState::fit(&config, stats).unwrap();
            let probe = Mat::from_fn(2, 2, |i, j| match (i, j) {
                (_, 0) => 0.5,
                (0, _) => 0.9 * unit,
                _ => 0.1 * unit,
            });
            (state.clone(), state.predict(probe.as_ref()).unwrap())
        };
        let (reference, expected) = fit(1.0);
        assert!(reference.outputs()[0].posterior().unwrap().prior_variance()[1] > 0.0);
        for unit in [1e-4, 1e-6, 1e4] {
            let (state, got) = fit(unit);
            let post = state.outputs()[0].posterior().unwrap();
            assert!(
                post.prior_variance()[1] > 0.0,
                "units of {unit}: the input was pruned"
            );
            let slope = state.coefficients()[(1, 0)] * unit;
            assert!(
                (slope - wc).abs() < 0.05 * wc,
                "units of {unit}: slope {slope} for {wc}"
            );
            for r in 0..2 {
                let (m, e) = (got.mean[(r, 0)], expected.mean[(r, 0)]);
                assert!(
                    (m - e).abs() < 1e-6 * e.abs(),
                    "units of {unit}: mean {m} against {e}"
                );
                let (v, e) = (got.variance[(r, 0)], expected.variance[(r, 0)]);
                assert!(
                    (v - e).abs() < 1e-4 * e,
                    "units of {unit}: variance {v} against {e}"
                );
            }
        }
    }

    /// Rows for the ridge tests below: three inputs about N(0, 1) (sums of uniforms), `y = x₀ +
    /// 2x₁ − x₂ + ½` and noise of 0.1.
    fn ridge_rows(rows: usize) -> (Mat<f64>, Mat<f64>) {
        let uniform = |i: usize, k: usize| ((i * 7 + k) as f64 * 0.618_033_988_749_895).fract();
        let normal = |i: usize, j: usize| (0..6).map(|k| uniform(i, 6 * j + k)).sum::<f64>() - 3.0;
        let x = Mat::from_fn(rows, 3, normal);
        let y = Mat::from_fn(rows, 1, |i, _| {
            x[(i, 0)] + 2.0 * x[(i, 1)] - x[(i, 2)] + 0.5 + 0.1 * normal(i, 3)
        });
        (x, y)
    }

    /// A ridge fit of [`ridge_rows`] with input `j` (every input for `None`) times `unit`, and
    /// its predictions at three probes in the same units.
    fn ridge_in_units(j: Option<usize>, unit: f64) -> (ModelState, Predictions) {
        let rows = 30;
        let config = ModelConfig {
            prior: PriorFamily::Ridge,
            ..ModelConfig::new(Basis::new(3, true, Transform::Identity), 1)
        };
        let (mut x, y) = ridge_rows(rows);
        let mut probe = Mat::from_fn(3, 3, |i, c| [0.3, -1.1, 0.7][(i + c) % 3]);
        for c in (0..3).filter(|&c| j.is_none_or(|j| j == c)) {
            x.col_mut(c).iter_mut().for_each(|v| *v *= unit);
            probe.col_mut(c).iter_mut().for_each(|v| *v *= unit);
        }
        let stats = BatchStatistics::from_rows(&config.basis, x.as_ref(), y.as_ref()).unwrap();
        let state = ModelState::fit(&config, stats).unwrap();
        let predictions = state.predict(probe.as_ref()).unwrap();
        (state, predictions)
    }

    /// A shape's eigenvalues are dropped as round-off below the eigensolver's own error, not
    /// below 10⁻¹² of the largest: with one input in units 10⁶ times the others, the others'
    /// directions fell under 10⁻¹², the evidence counted what they explain as noise (σ² 45
    /// times the residuals') while the posterior used them, and the intervals were as wide.
    #[test]
    fn ridge_keeps_the_directions_of_inputs_in_smaller_units() {
        let (reference, expected) = ridge_in_units(None, 1.0);
        let s0 = reference.outputs()[0].posterior().unwrap().noise_variance();
        for unit in [1e6, 3e6, 1e-6] {
            let (state, got) = ridge_in_units(Some(1), unit);
            let s = state.outputs()[0].posterior().unwrap().noise_variance();
            assert!(
                s < 1.5 * s0 && s > s0 / 1.5,
                "units of {unit}: σ² {s} against {s0}"
            );
            for r in 0..3 {
                let (m, e, v) = (
                    got.mean[(r, 0)],
                    expected.mean[(r, 0)],
                    expected.variance[(r, 0)],
                );
                assert!(
                    (m - e).abs() < 0.2 * v.sqrt(),
                    "units of {unit}: mean {m} against {e} (sd {})",
                    v.sqrt()
                );
                let w = got.variance[(r, 0)];
                assert!(w < 2.0 * v, "units of {unit}: variance {w} against {v}");
            }
        }
    }

    /// Ridge's answer does not depend on the units all inputs share, from 10⁻¹⁰⁰ to 10¹⁴⁰: its
    /// prior scale takes them. A guard of the whole fit (it passed before the fixes above too:
    /// these rows never move `α` by leave-one-out; `Shape::at_alpha`'s overflow is
    /// `evidence::tests::a_given_alpha_reads_alike_in_any_units_the_inputs_share`).
    #[test]
    fn ridge_answers_alike_in_the_units_all_inputs_share() {
        let (reference, expected) = ridge_in_units(None, 1.0);
        let s0 = reference.outputs()[0].posterior().unwrap().noise_variance();
        for unit in [1e-100, 1e-60, 1e60, 1e100, 1e140] {
            let (state, got) = ridge_in_units(None, unit);
            let s = state.outputs()[0].posterior().unwrap().noise_variance();
            // The evidence's search for `α` stops at a relative tolerance: the same to 10⁻⁶.
            assert!(
                (s - s0).abs() < 1e-6 * s0,
                "units of {unit}: σ² {s} against {s0}"
            );
            for r in 0..3 {
                let (m, e) = (got.mean[(r, 0)], expected.mean[(r, 0)]);
                assert!(
                    (m - e).abs() < 1e-6 * e.abs().max(1.0),
                    "units of {unit}: mean {m} against {e}"
                );
                let (w, v) = (got.variance[(r, 0)], expected.variance[(r, 0)]);
                assert!(
                    (w - v).abs() < 1e-6 * v,
                    "units of {unit}: variance {w} against {v}"
                );
            }
        }
    }

    /// The shared shapes are prepared only when an output that may use them is fitted, and an
    /// output fitted by ARD alone gets the same bits either way.
    #[test]
    fn shared_shapes_are_prepared_only_for_outputs_that_can_use_them() {
        let (config, stats) = dense_and_sparse();
        assert!(!stats.zero_inflated(0) && stats.zero_inflated(1));
        assert!(config.structural_zeros(&stats, 1));
        let every = Fitter::new(&config, &stats, |_| true).unwrap();
        let sparse_only = Fitter::new(&config, &stats, |k| k == 1).unwrap();
        let dense_only = Fitter::new(&config, &stats, |k| k == 0).unwrap();
        assert!(every.shared.is_some());
        assert!(sparse_only.shared.is_none());
        assert!(dense_only.shared.is_some());
        assert!(
            Fitter::new(&config, &stats, |_| false)
                .unwrap()
                .shared
                .is_none()
        );
        let ard = ModelConfig {
            prior: PriorFamily::Ard,
            ..config.clone()
        };
        assert!(
            Fitter::new(&ard, &stats, |_| true)
                .unwrap()
                .shared
                .is_none()
        );

        let sparse = sparse_only.fit_output(1, None).unwrap();
        assert!(matches!(sparse.0, OutputState::Trained(_)));
        assert_eq!(sparse, every.fit_output(1, None).unwrap());
        assert_eq!(
            dense_only.fit_output(0, None).unwrap(),
            every.fit_output(0, None).unwrap()
        );
    }

    /// Through the callers (whose predicates `fit_output` checks in debug builds): a batch of
    /// 8 rows, each non-zero in output 1, grows that output's informative rows by 80 % and the
    /// dense output's by 20 %, less than [`FitOptions::refit_growth`], so one step refits the
    /// sparse output alone; a refit update, and a refit after it, fit both.
    #[test]
    fn a_batch_that_outgrows_only_a_sparse_output_refits_it_alone() {
        let (config, first) = dense_and_sparse();
        let state = ModelState::fit(&config, first).unwrap();
        assert_eq!(state.fitted_rows(), &[40.0, 10.0]);
        let batch = rows(40, 8, 1);
        let stepped = state.update(&config, &batch).unwrap();
        assert!(stepped.totals().zero_inflated(1));
        assert_eq!(stepped.fitted_rows(), &[40.0, 18.0]);
        assert_ne!(stepped.outputs()[1], state.outputs()[1]);
        let refit = ModelConfig {
            update: UpdateMethod::Refit,
            ..config.clone()
        };
        let updated = state.update(&refit, &batch).unwrap();
        assert_eq!(updated.fitted_rows(), &[48.0, 18.0]);
        // The dense output's ridge fit depends on the statistics alone.
        let again = updated.refit(&config).unwrap();
        assert_eq!(again.fitted_rows(), &[48.0, 18.0]);
        assert_eq!(again.outputs()[0], updated.outputs()[0]);
    }
}
