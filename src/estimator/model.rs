//! A model's whole state: running statistics and one posterior per output.

use faer::{Mat, MatRef};
use rayon::prelude::*;

use super::evidence::evidence;
use super::incremental::one_step;
use super::posterior::OutputPosterior;
use super::predictor::Predictor;
use super::statistics::{BatchStatistics, check_shape};
use super::{Basis, EstimatorError, FitOptions, NoisePrior};

/// How a model learns from a batch after its first fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpdateMethod {
    /// Algorithm 3: one Bayesian step with the hyperparameters held fixed.
    #[default]
    OneStep,
    /// Algorithm 2 on the accumulated statistics, warm-started from the current `(v, s)`.
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
    /// Starting prior variance of every basis function in Algorithm 2.
    pub prior_variance: f64,
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
            options: FitOptions::default(),
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
}

impl ModelState {
    pub(crate) fn from_parts(
        basis: Basis,
        totals: BatchStatistics,
        outputs: Vec<OutputState>,
    ) -> Result<Self, EstimatorError> {
        check_shape(totals.dim(), outputs.len(), basis.dim(), totals.outputs())?;
        Ok(Self {
            basis,
            totals,
            outputs,
        })
    }

    /// The first fit: Algorithm 2 from `v = prior_variance`, `s = q/N` on every output that has
    /// enough informative rows.
    pub fn fit(config: &ModelConfig, stats: BatchStatistics) -> Result<Self, EstimatorError> {
        check_config(config, &stats)?;
        let outputs = (0..config.outputs)
            .into_par_iter()
            .map(|k| fit_output(config, &stats, k, None))
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_parts(config.basis, stats, outputs)
    }

    /// Learns one more batch with the model's update method (and forgetting, if any).
    pub fn update(
        &self,
        config: &ModelConfig,
        batch: &BatchStatistics,
    ) -> Result<Self, EstimatorError> {
        check_config(config, batch)?;
        let weight = config.forgetting_weight(batch.rows());
        let rows_before = self.totals.rows();
        let mut totals = self.totals.clone();
        if weight != 1.0 {
            totals.scale(weight);
        }
        totals.add(batch)?;
        let outputs = self
            .outputs
            .par_iter()
            .enumerate()
            .map(|(k, output)| match (output, config.update) {
                (OutputState::Trained(post), UpdateMethod::OneStep) => {
                    let noise = noise_prior(config, &totals, k);
                    let data = batch.output(k);
                    one_step(post, rows_before, data, weight, noise)
                        .map(|p| OutputState::Trained(Box::new(p)))
                }
                (OutputState::Trained(post), UpdateMethod::Refit) => {
                    fit_output(config, &totals, k, Some(post))
                }
                (OutputState::Untrained, _) => fit_output(config, &totals, k, None),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_parts(self.basis, totals, outputs)
    }

    /// Algorithm 2 on the accumulated statistics, warm-started from the current `(v, s)`.
    pub fn refit(&self, config: &ModelConfig) -> Result<Self, EstimatorError> {
        check_config(config, &self.totals)?;
        let outputs = self
            .outputs
            .par_iter()
            .enumerate()
            .map(|(k, output)| fit_output(config, &self.totals, k, output.posterior()))
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_parts(self.basis, self.totals.clone(), outputs)
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

    /// Predictions for the raw input rows `x` (rows × d): `mean_k = φᵀμ_k` and
    /// `variance_k = s_k + φᵀΣ_kφ` (see [`Predictor`], which a server keeps per version). An
    /// untrained output predicts 0 with the mean square of its non-zero values (the noise floor
    /// if it has none).
    pub fn predict(&self, x: MatRef<'_, f64>) -> Result<Predictions, EstimatorError> {
        Predictor::new(self).predict(x)
    }

    /// Predictions for a design matrix `Φ` (rows × p).
    pub fn predict_design(&self, phi: MatRef<'_, f64>) -> Predictions {
        Predictor::new(self).predict_design(phi)
    }

    /// Mean square of an untrained output's non-zero values, what a prediction of 0 misses by
    /// when the dye is in fact used.
    pub(crate) fn untrained_variance(&self, k: usize) -> f64 {
        self.totals
            .nonzero_mean_square(k)
            .max(super::DEFAULT_NOISE_FLOOR)
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
    NoisePrior::for_output(stats, k, &config.options)
}

/// Algorithm 2 for output `k` on `stats`, from `warm` or from the prior, if the output has
/// enough informative rows.
fn fit_output(
    config: &ModelConfig,
    stats: &BatchStatistics,
    k: usize,
    warm: Option<&OutputPosterior>,
) -> Result<OutputState, EstimatorError> {
    if warm.is_none() && stats.nonzero()[k] < config.options.min_informative_rows {
        return Ok(OutputState::Untrained);
    }
    let data = stats.output(k);
    let (v, s) = match warm {
        Some(post) => (post.prior_variance().to_vec(), post.noise_variance()),
        None => (
            vec![config.prior_variance; stats.dim()],
            if data.q > 0.0 && data.n > 0.0 {
                data.q / data.n
            } else {
                1.0
            },
        ),
    };
    let noise = noise_prior(config, stats, k);
    let fit = evidence(data, v, s, noise, &config.options)?;
    Ok(OutputState::Trained(Box::new(fit.posterior)))
}
