//! Lab dips: recipes dyed on a fabric, measured by a spectrophotometer, with noise and drift.
//!
//! Row `i` of a simulation is drawn from its own random stream (ChaCha8 seeded with the seed,
//! stream `i`), and every row draws the same random numbers in the same order whatever the
//! scenario. So a seed fixes the rows, a row does not depend on how many rows come before it,
//! and two scenarios at one seed differ exactly where the scenario acts.
//!
//! Per row:
//!
//! 1. **Fabric**: one of the [`substrates`] (uniform); from the drift row of `new_substrate`
//!    on, the [`new_substrate`] half of the time.
//! 2. **Recipe**: three distinct dyes of the [`dye_range`] (uniform), each at a concentration
//!    log-uniform in [`CONCENTRATION_RANGE`] % owf; the others 0.
//! 3. **Process noise**: the dye actually taken up is `y · cᵢ · exp(ε_i)`, `ε_i ~ N(0, σ_u²)`
//!    ([`NoiseModel::uptake_rel`]) and `y` the fabric lot's yield (1 in the ideal world); the
//!    row's `y` stays the recipe `cᵢ`. Every row is dyed on its own lot, drawn from a stream of
//!    its own ([`Simulator::lot`]), so the ideal world's rows are what they always were.
//! 4. **Colour**: `K/S(λ) = w · K/S_substrate(λ) + Σ sᵢ kᵢ(λ) eff(cᵢ')` with the taken-up `cᵢ'`,
//!    the build-up `eff` and lot whiteness `w` of the world's [`Physics`], and each dye lot's
//!    strength `sᵢ` (1, or [`DYE_LOT_STRENGTH`] for [`DYE_LOT_DYE`] from the drift row of
//!    `dye_lot` on), then `R(λ)` by the inverse Kubelka–Munk function and, in the realistic
//!    world, the surface's reflection ([`Physics::reading`], see [`super::forward`]).
//! 5. **Measurement** (reflectance in percent): the instrument reads at the nominal `λ` the
//!    reflectance at `λ + δ + j` (its wavelength error `δ` plus a per-measurement jitter
//!    `j ~ N(0, σ_λ²)`), with a photometric gain `g` and offset `o`, plus photometric noise:
//!    `R_meas(λ) = g · 100 R(λ + δ + j) + o + e(λ)`, `e(λ) ~ N(0, σ_a² + (σ_r · 100 R)²)`.
//!    The reference instrument has `g = 1, o = 0, δ = 0`; from the drift row of
//!    `instrument_swap` on, the lab reads with [`Instrument::SWAPPED`].

use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::forward::{DYE_FAMILIES, Dye, Physics, Substrate, dye_range, new_substrate, substrates};

/// Concentrations of a recipe's dyes are log-uniform between these (% owf): pale to deep shades.
pub const CONCENTRATION_RANGE: (f64, f64) = (0.01, 3.0);

/// Dyes in one recipe.
pub const DYES_PER_RECIPE: usize = 3;

/// Total concentration of a trichromatic recipe (its depth of shade), log-uniform between these
/// (% owf): a pale pastel at 0.05 % to a deep navy or black at 4 %.
pub const DEPTH_RANGE: (f64, f64) = (0.05, 4.0);

/// Smallest share of the depth one dye of a trichromatic recipe takes: a shading component at
/// 1/20 of the main dye is as far apart as recipes go (shares are log-uniform in [this, 1],
/// then normalised).
pub const MIN_SHARE: f64 = 0.05;

/// How recipes are composed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recipes {
    /// Any three distinct dyes of the range, each log-uniform in the configured concentration
    /// range independently (a stress test: two yellows and an orange, a 0.01 % component
    /// next to a 3 % one).
    #[default]
    AnyThree,
    /// How a dye house builds recipes: a trichromatic combination, one dye of each family of
    /// [`super::forward::DYE_FAMILIES`] (a yellow/orange, a red/violet, a blue/navy/black), the
    /// depth log-uniform in [`DEPTH_RANGE`] and the shares log-uniform in [[`MIN_SHARE`], 1].
    /// The default of the colour-accuracy evaluation.
    Trichromatic,
}

/// The dye whose lot changes in the `dye_lot` scenario (index into [`dye_range`]: `red_1`).
pub const DYE_LOT_DYE: usize = 3;

/// Strength of the new lot of [`DYE_LOT_DYE`] relative to the old: 15 % stronger.
pub const DYE_LOT_STRENGTH: f64 = 1.15;

/// Share of the rows dyed on the new fabric once the `new_substrate` scenario has started.
pub const NEW_SUBSTRATE_SHARE: f64 = 0.5;

/// First stream of the held-out targets: far from any row index a simulation will reach.
const HELD_OUT_STREAM: u64 = 1 << 48;
/// First random stream of the dyeings of [`Simulator::dye`], apart from every row's and target's.
const DYEING_STREAM: u64 = 1 << 49;
/// First random stream of the fabric lots ([`Simulator::lot`]): lot `n` draws from stream
/// `LOT_STREAM + n`, apart from every other draw.
const LOT_STREAM: u64 = 1 << 50;
/// Lots of production fabric, on which the colour kitchen dyes ([`Simulator::dye`]): apart
/// from the lots of the rows and targets, which are their streams.
pub const PRODUCTION_LOTS: u64 = 1 << 47;

/// Which world the simulator dyes in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum World {
    /// [`Physics::IDEAL`]: linear in K/S, the regression's own world. The library's default,
    /// in which the unit tests check the pipeline exactly; `mordant simulate` defaults to
    /// [`World::Realistic`], the world of the README's figures.
    #[default]
    Ideal,
    /// [`Physics::REALISTIC`]: surface reflection, saturating build-up, fabric lots.
    Realistic,
}

impl World {
    /// The transform a model of this world's readings should use: Kubelka–Munk behind the
    /// world's surface, if it has one.
    pub fn transform(self) -> mordant_estimator::Transform {
        match self.physics().surface {
            Some(surface) => mordant_estimator::Transform::Saunderson(surface),
            None => mordant_estimator::Transform::KubelkaMunk,
        }
    }
}

impl World {
    pub fn physics(self) -> Physics {
        match self {
            World::Ideal => Physics::IDEAL,
            World::Realistic => Physics::REALISTIC,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            World::Ideal => "ideal",
            World::Realistic => "realistic",
        }
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for World {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [World::Ideal, World::Realistic]
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| format!("unknown world {s:?}: expected realistic or ideal"))
    }
}

/// A fabric lot's deviations from the nominal fabric, shared by every dyeing on it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lot {
    /// Factor on the dye taken up (every dye alike).
    pub dye_yield: f64,
    /// Factor on the fabric's own K/S.
    pub whiteness: f64,
}

pub use mordant_estimator::grid::Grid;

/// The default instrument grid, 360–780 nm every 10 nm (43 bands).
pub const INSTRUMENT_GRID: Grid = Grid {
    start_nm: 360.0,
    interval_nm: 10.0,
    count: 43,
};

/// The default model grid, 400–700 nm every 10 nm (31 bands).
pub const MODEL_GRID: Grid = Grid {
    start_nm: 400.0,
    interval_nm: 10.0,
    count: 31,
};

/// How a spectrophotometer distorts what it measures: `g · 100 R(λ + δ) + o`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Instrument {
    /// Photometric gain `g`.
    pub gain: f64,
    /// Photometric offset `o`, percentage points of reflectance.
    pub offset_percent: f64,
    /// Wavelength error `δ`, nm: the reading labelled `λ` is the reflectance at `λ + δ`.
    pub shift_nm: f64,
}

impl Instrument {
    /// The instrument every model was trained with.
    pub const REFERENCE: Instrument = Instrument {
        gain: 1.0,
        offset_percent: 0.0,
        shift_nm: 0.0,
    };

    /// The replacement of the `instrument_swap` scenario: calibrated on its black trap (no
    /// photometric offset) but reading 2 % low against the old white scale and 3 nm long (a
    /// monochromator out of alignment). On a mid shade that is a colour difference of a few
    /// ΔE00. (An offset is left out on purpose: `K/S` of `R + o` is not linear in the recipe,
    /// so no linear model, forgetting or not, could learn it; see the forgetting study.)
    pub const SWAPPED: Instrument = Instrument {
        gain: 0.98,
        offset_percent: 0.0,
        shift_nm: 3.0,
    };
}

/// Measurement and process noise, all standard deviations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoiseModel {
    /// `σ_a`: photometric noise, percentage points of reflectance (a bench spectrophotometer's
    /// repeatability is 0.02–0.05).
    pub photometric_abs: f64,
    /// `σ_r`: photometric noise proportional to the reading (sample presentation: fabric
    /// texture, pressure on the port), as a fraction of it.
    pub photometric_rel: f64,
    /// `σ_λ`: wavelength jitter of one measurement, nm.
    pub wavelength_jitter_nm: f64,
    /// `σ_u`: log-normal spread of the dye taken up around the recipe (weighing, liquor ratio,
    /// exhaustion and fixation from one lab dip to the next).
    pub uptake_rel: f64,
}

impl NoiseModel {
    /// The default noise of a well-run lab: 0.05 pp + 0.5 % of the reading, 0.2 nm jitter, 3 %
    /// uptake spread.
    pub const LAB: NoiseModel = NoiseModel {
        photometric_abs: 0.05,
        photometric_rel: 0.005,
        wavelength_jitter_nm: 0.2,
        uptake_rel: 0.03,
    };

    /// A benchtop spectrophotometer as its spec sheet describes it, and a well-run lab: 0.02 pp
    /// photometric noise per band, no noise proportional to the reading, no per-measurement
    /// wavelength jitter, 3 % uptake spread. Short-term repeatability on a white tile of a
    /// d/8° sphere instrument (Datacolor 850, X-Rite Ci7800) is 0.01–0.03 ΔE*ab, i.e. per-band
    /// noise of order 0.01–0.05 percentage points; wavelength error is a systematic property
    /// of an instrument (see [`Instrument::SWAPPED`]), not random per reading; [`Self::LAB`]'s
    /// 0.5 % of reading (sample presentation) is kept as the noisier preset.
    pub const BENCHTOP: NoiseModel = NoiseModel {
        photometric_abs: 0.02,
        photometric_rel: 0.0,
        wavelength_jitter_nm: 0.0,
        uptake_rel: 0.03,
    };

    /// Process noise only (3 % uptake spread): a perfect spectrophotometer. The regime in which
    /// the service's linear model is accurate (see `mordant simulate --evaluate`).
    pub const PROCESS_ONLY: NoiseModel = NoiseModel {
        photometric_abs: 0.0,
        photometric_rel: 0.0,
        wavelength_jitter_nm: 0.0,
        uptake_rel: 0.03,
    };

    /// No noise at all (for checks of the forward model).
    pub const NONE: NoiseModel = NoiseModel {
        photometric_abs: 0.0,
        photometric_rel: 0.0,
        wavelength_jitter_nm: 0.0,
        uptake_rel: 0.0,
    };
}

/// A drift scenario: what changes from the drift row on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scenario {
    /// Nothing changes.
    #[default]
    None,
    /// The lab reads with [`Instrument::SWAPPED`]: spectra change, recipes do not.
    InstrumentSwap,
    /// [`DYE_LOT_DYE`] comes from a lot [`DYE_LOT_STRENGTH`] times as strong.
    DyeLot,
    /// [`new_substrate`] appears, in [`NEW_SUBSTRATE_SHARE`] of the rows.
    NewSubstrate,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Scenario::None,
        Scenario::InstrumentSwap,
        Scenario::DyeLot,
        Scenario::NewSubstrate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::None => "none",
            Scenario::InstrumentSwap => "instrument_swap",
            Scenario::DyeLot => "dye_lot",
            Scenario::NewSubstrate => "new_substrate",
        }
    }
}

impl FromStr for NoiseModel {
    type Err = String;

    /// `benchtop` ([`NoiseModel::BENCHTOP`]), `lab` ([`NoiseModel::LAB`]), `process_only` or `none`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lab" => Ok(NoiseModel::LAB),
            "benchtop" => Ok(NoiseModel::BENCHTOP),
            "process_only" => Ok(NoiseModel::PROCESS_ONLY),
            "none" => Ok(NoiseModel::NONE),
            other => Err(format!(
                "unknown noise {other:?}: expected benchtop, lab, process_only or none"
            )),
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.as_str() == s)
            .ok_or_else(|| {
                format!("unknown scenario {s:?}: expected none, instrument_swap, dye_lot or new_substrate")
            })
    }
}

/// What a simulation draws.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimulationConfig {
    pub seed: u64,
    pub scenario: Scenario,
    /// Index of the first row the scenario acts on.
    pub drift_at: usize,
    /// The instrument's wavelength grid.
    pub grid: Grid,
    pub noise: NoiseModel,
    /// Concentrations of a recipe's dyes are log-uniform in this range, % owf ([`Recipes::AnyThree`]).
    pub concentration_range: (f64, f64),
    pub recipes: Recipes,
    /// The physics dyed in.
    pub world: World,
}

impl SimulationConfig {
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            scenario: Scenario::None,
            drift_at: 0,
            grid: INSTRUMENT_GRID,
            noise: NoiseModel::LAB,
            concentration_range: CONCENTRATION_RANGE,
            recipes: Recipes::AnyThree,
            world: World::default(),
        }
    }
}

/// A dyed sample as it physically is.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Code of its fabric (index into [`Simulator::substrates`]).
    pub substrate: u32,
    /// The recipe, % owf per dye of the range (0 for the dyes not used): the row's `y`.
    pub recipe: Vec<f64>,
    /// The dye actually taken up, % owf per dye.
    pub uptake: Vec<f64>,
    /// Strength of each dye's lot relative to the reference lot.
    pub strength: Vec<f64>,
    /// Factor on the fabric's own K/S: its lot's whiteness ([`Lot::whiteness`]).
    pub whiteness: f64,
}

/// One row: a sample and its measured spectrum.
#[derive(Clone, Debug, PartialEq)]
pub struct LabDip {
    pub sample: Sample,
    /// The instrument that measured it.
    pub instrument: Instrument,
    /// Reflectance on the grid, percent.
    pub reflectance: Vec<f64>,
}

/// The random numbers of one row, drawn in a fixed order whatever the scenario.
struct Draws {
    substrate: f64,
    dyes: [usize; DYES_PER_RECIPE],
    log_concentration: [f64; DYES_PER_RECIPE],
    uptake: [f64; DYES_PER_RECIPE],
    jitter: f64,
    /// Uniform in [0, 1): the depth of a trichromatic recipe.
    depth: f64,
    /// Uniform in [0, 1) each: the dye picked in each family of a trichromatic recipe.
    family_pick: [f64; DYES_PER_RECIPE],
}

/// A standard normal deviate by the Box–Muller transform,
/// `√(−2 ln u₁) · cos(2π u₂)` with `u₁ ∈ (0, 1]`, `u₂ ∈ [0, 1)`.
pub fn standard_normal(rng: &mut impl Rng) -> f64 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Draws lab dips. Pure: the rows are a function of the configuration and their index.
#[derive(Clone, Debug)]
pub struct Simulator {
    config: SimulationConfig,
    dyes: Vec<Dye>,
    substrates: Vec<Substrate>,
}

impl Simulator {
    pub fn new(config: SimulationConfig) -> Self {
        let mut all = substrates();
        all.push(new_substrate());
        Self {
            config,
            dyes: dye_range(),
            substrates: all,
        }
    }

    pub fn config(&self) -> &SimulationConfig {
        &self.config
    }

    pub fn dyes(&self) -> &[Dye] {
        &self.dyes
    }

    /// Every fabric, by code: the ones in production first, the scenario's new one last.
    pub fn substrates(&self) -> &[Substrate] {
        &self.substrates
    }

    /// The fabrics that get an indicator feature: every fabric in production but the first,
    /// whose K/S the intercept carries (dummy coding). The `new_substrate` fabric has none: to
    /// a model it looks like the reference fabric, which is the drift that scenario makes.
    pub fn fabric_features(&self) -> &[Substrate] {
        let in_production = self.substrates.len() - 1;
        &self.substrates[1..in_production]
    }

    /// The indicator values of fabric `code`, one per [`Self::fabric_features`].
    pub fn fabric_indicators(&self, code: u32) -> Vec<f64> {
        self.fabric_features()
            .iter()
            .map(|s| f64::from(u8::from(s.code == code)))
            .collect()
    }

    /// Names of the dyes, the outputs in order.
    pub fn dye_names(&self) -> Vec<&'static str> {
        self.dyes.iter().map(|d| d.name).collect()
    }

    /// Whether row `row` is in the drifted regime.
    pub fn drifted(&self, row: usize) -> bool {
        self.config.scenario != Scenario::None && row >= self.config.drift_at
    }

    /// Row `row` of the simulation.
    pub fn lab_dip(&self, row: usize) -> LabDip {
        self.draw(row as u64, self.drifted(row))
    }

    /// Rows `start..end`.
    pub fn lab_dips(&self, rows: std::ops::Range<usize>) -> Vec<LabDip> {
        rows.map(|row| self.lab_dip(row)).collect()
    }

    /// Held-out target `i`, from streams no row uses; `drifted` picks the regime (the same
    /// sample and noise draws in both, so a target measured before and after an instrument swap
    /// is one physical sample read by two instruments).
    pub fn held_out(&self, i: usize, drifted: bool) -> LabDip {
        self.draw(
            HELD_OUT_STREAM + i as u64,
            drifted && self.config.scenario != Scenario::None,
        )
    }

    /// The world's physics.
    pub fn physics(&self) -> Physics {
        self.config.world.physics()
    }

    /// Fabric lot `n`: its yield and whiteness, log-normal about 1 with the world's spreads,
    /// from a stream of its own (so every dyeing on the lot sees the same, and the ideal
    /// world, whose spreads are 0, draws nothing that changes a row).
    pub fn lot(&self, n: u64) -> Lot {
        let physics = self.physics();
        let mut rng = self.rng(LOT_STREAM.wrapping_add(n));
        let dye_yield = (physics.lot_yield_rel * standard_normal(&mut rng)).exp();
        let whiteness = (physics.lot_substrate_rel * standard_normal(&mut rng)).exp();
        Lot {
            dye_yield,
            whiteness,
        }
    }

    /// Dyeing `n` of the simulation: `recipe` (% owf per dye) dyed on fabric `substrate` of
    /// lot `lot` (see [`Self::lot`]; the colour kitchen's are from [`PRODUCTION_LOTS`] on), its
    /// uptake varying as a row's does, with the drifted regime's dye lots when `drifted`, and
    /// read by the reference instrument with the simulation's noise. What a dye house gets
    /// back when it dyes a matched or corrected recipe.
    pub fn dye(&self, substrate: u32, lot: u64, recipe: &[f64], n: u64, drifted: bool) -> LabDip {
        let mut rng = self.rng(DYEING_STREAM + n);
        let fabric = self.lot(lot);
        let uptake = recipe
            .iter()
            .map(|&c| {
                c * fabric.dye_yield
                    * (self.config.noise.uptake_rel * standard_normal(&mut rng)).exp()
            })
            .collect();
        let mut strength = vec![1.0; recipe.len()];
        if drifted && self.config.scenario == Scenario::DyeLot && DYE_LOT_DYE < recipe.len() {
            strength[DYE_LOT_DYE] = DYE_LOT_STRENGTH;
        }
        let sample = Sample {
            substrate,
            recipe: recipe.to_vec(),
            uptake,
            strength,
            whiteness: fabric.whiteness,
        };
        let jitter = standard_normal(&mut rng);
        let reflectance = self.measure(&sample, Instrument::REFERENCE, jitter, &mut rng);
        LabDip {
            sample,
            instrument: Instrument::REFERENCE,
            reflectance,
        }
    }

    fn rng(&self, stream: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.config.seed);
        rng.set_stream(stream);
        rng
    }

    fn draw(&self, stream: u64, drifted: bool) -> LabDip {
        let mut rng = self.rng(stream);
        let draws = self.draws(&mut rng);
        let sample = self.sample(&draws, self.lot(stream), drifted);
        let instrument = if drifted && self.config.scenario == Scenario::InstrumentSwap {
            Instrument::SWAPPED
        } else {
            Instrument::REFERENCE
        };
        let reflectance = self.measure(&sample, instrument, draws.jitter, &mut rng);
        LabDip {
            sample,
            instrument,
            reflectance,
        }
    }

    fn draws(&self, rng: &mut ChaCha8Rng) -> Draws {
        let substrate = rng.random::<f64>();
        // A partial Fisher–Yates shuffle picks DYES_PER_RECIPE distinct dyes.
        let mut order: Vec<usize> = (0..self.dyes.len()).collect();
        let mut dyes = [0; DYES_PER_RECIPE];
        for (k, slot) in dyes.iter_mut().enumerate() {
            let pick = rng.random_range(k..order.len());
            order.swap(k, pick);
            *slot = order[k];
        }
        let (lo, hi) = self.config.concentration_range;
        let mut log_concentration = [0.0; DYES_PER_RECIPE];
        for v in &mut log_concentration {
            *v = lo.ln() + rng.random::<f64>() * (hi.ln() - lo.ln());
        }
        let mut uptake = [0.0; DYES_PER_RECIPE];
        for v in &mut uptake {
            *v = standard_normal(rng);
        }
        let jitter = standard_normal(rng);
        let depth = rng.random::<f64>();
        let mut family_pick = [0.0; DYES_PER_RECIPE];
        for v in &mut family_pick {
            *v = rng.random::<f64>();
        }
        Draws {
            substrate,
            dyes,
            log_concentration,
            uptake,
            jitter,
            depth,
            family_pick,
        }
    }

    fn sample(&self, draws: &Draws, lot: Lot, drifted: bool) -> Sample {
        let scenario = self.config.scenario;
        let in_production = self.substrates.len() - 1;
        let substrate = if drifted && scenario == Scenario::NewSubstrate {
            if draws.substrate < NEW_SUBSTRATE_SHARE {
                in_production
            } else {
                let u = (draws.substrate - NEW_SUBSTRATE_SHARE) / (1.0 - NEW_SUBSTRATE_SHARE);
                ((u * in_production as f64) as usize).min(in_production - 1)
            }
        } else {
            ((draws.substrate * in_production as f64) as usize).min(in_production - 1)
        };
        let n = self.dyes.len();
        let mut recipe = vec![0.0; n];
        let mut uptake = vec![0.0; n];
        let (dyes, concentrations) = self.recipe(draws);
        for k in 0..DYES_PER_RECIPE {
            let dye = dyes[k];
            let c = concentrations[k];
            recipe[dye] = c;
            uptake[dye] =
                c * lot.dye_yield * (self.config.noise.uptake_rel * draws.uptake[k]).exp();
        }
        let mut strength = vec![1.0; n];
        if drifted && scenario == Scenario::DyeLot {
            strength[DYE_LOT_DYE] = DYE_LOT_STRENGTH;
        }
        Sample {
            substrate: substrate as u32,
            recipe,
            uptake,
            strength,
            whiteness: lot.whiteness,
        }
    }

    /// The dyes and concentrations (% owf) of a row's recipe.
    fn recipe(&self, draws: &Draws) -> ([usize; DYES_PER_RECIPE], [f64; DYES_PER_RECIPE]) {
        match self.config.recipes {
            Recipes::AnyThree => (draws.dyes, draws.log_concentration.map(f64::exp)),
            Recipes::Trichromatic => {
                let mut dyes = [0; DYES_PER_RECIPE];
                for (k, family) in DYE_FAMILIES.iter().enumerate() {
                    let pick = ((draws.family_pick[k] * family.len() as f64) as usize)
                        .min(family.len() - 1);
                    dyes[k] = family[pick];
                }
                // Shares log-uniform in [MIN_SHARE, 1] (reusing the concentration draws,
                // uniform in [0, 1) once rescaled), normalised to the depth.
                let (lo, hi) = self.config.concentration_range;
                let span = hi.ln() - lo.ln();
                let shares = draws
                    .log_concentration
                    .map(|v| MIN_SHARE.powf(1.0 - (v - lo.ln()) / span));
                let total: f64 = shares.iter().sum();
                let (dlo, dhi) = DEPTH_RANGE;
                let depth = (dlo.ln() + draws.depth * (dhi.ln() - dlo.ln())).exp();
                (dyes, shares.map(|s| depth * s / total))
            }
        }
    }

    /// The true reflectance fraction of `sample` at `nm` as an instrument without error would
    /// read it: `K/S(λ) = w K/S_substrate(λ) + Σᵢ sᵢ kᵢ(λ) eff(cᵢ')`, read by
    /// [`Physics::reading`] (the module documentation).
    pub fn true_reflectance(&self, sample: &Sample, nm: f64) -> f64 {
        let physics = self.physics();
        let fabric = &self.substrates[(sample.substrate as usize).min(self.substrates.len() - 1)];
        let dyes: f64 = self
            .dyes
            .iter()
            .zip(&sample.uptake)
            .zip(&sample.strength)
            .filter(|((_, c), _)| **c != 0.0)
            .map(|((dye, c), s)| physics.effective(*c) * s * dye.unit_ks(nm))
            .sum();
        physics.reading(sample.whiteness * fabric.ks(nm) + dyes)
    }

    fn measure(
        &self,
        sample: &Sample,
        instrument: Instrument,
        jitter: f64,
        rng: &mut ChaCha8Rng,
    ) -> Vec<f64> {
        let noise = self.config.noise;
        let offset_nm = instrument.shift_nm + noise.wavelength_jitter_nm * jitter;
        self.config
            .grid
            .wavelengths()
            .map(|nm| {
                let percent = 100.0 * self.true_reflectance(sample, nm + offset_nm);
                let read = instrument.gain * percent + instrument.offset_percent;
                let sd = noise.photometric_abs.hypot(noise.photometric_rel * percent);
                read + sd * standard_normal(rng)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(scenario: Scenario) -> SimulationConfig {
        SimulationConfig {
            scenario,
            drift_at: 20,
            ..SimulationConfig::new(11)
        }
    }

    #[test]
    fn a_seed_fixes_the_rows_and_another_changes_them() {
        let a = Simulator::new(config(Scenario::None)).lab_dips(0..30);
        let b = Simulator::new(config(Scenario::None)).lab_dips(0..30);
        assert_eq!(a, b);
        let other = Simulator::new(SimulationConfig::new(12)).lab_dips(0..30);
        assert_ne!(a, other);
        // A row does not depend on the rows before it.
        let sim = Simulator::new(config(Scenario::None));
        assert_eq!(sim.lab_dip(17), a[17]);
    }

    #[test]
    fn recipes_use_three_dyes_in_range() {
        let sim = Simulator::new(SimulationConfig::new(3));
        let (lo, hi) = CONCENTRATION_RANGE;
        for dip in sim.lab_dips(0..200) {
            let used: Vec<f64> = dip
                .sample
                .recipe
                .iter()
                .copied()
                .filter(|c| *c != 0.0)
                .collect();
            assert_eq!(used.len(), DYES_PER_RECIPE);
            assert!(used.iter().all(|c| (lo..=hi).contains(c)));
            assert!(dip.sample.substrate < 3);
            assert_eq!(dip.reflectance.len(), INSTRUMENT_GRID.count);
            assert!(
                dip.reflectance
                    .iter()
                    .all(|r| r.is_finite() && *r > -1.0 && *r < 101.0)
            );
        }
    }

    #[test]
    fn trichromatic_recipes_take_one_dye_per_family_at_a_depth_in_range() {
        let sim = Simulator::new(SimulationConfig {
            recipes: Recipes::Trichromatic,
            ..SimulationConfig::new(3)
        });
        let (lo, hi) = DEPTH_RANGE;
        let mut depths = Vec::new();
        for dip in sim.lab_dips(0..300) {
            let recipe = &dip.sample.recipe;
            assert_eq!(recipe.iter().filter(|c| **c > 0.0).count(), DYES_PER_RECIPE);
            for family in DYE_FAMILIES {
                assert_eq!(family.iter().filter(|&&d| recipe[d] > 0.0).count(), 1);
            }
            let depth: f64 = recipe.iter().sum();
            assert!((lo * (1.0 - 1e-12)..=hi * (1.0 + 1e-12)).contains(&depth));
            let used: Vec<f64> = recipe.iter().copied().filter(|c| *c > 0.0).collect();
            let (min, max) = used
                .iter()
                .fold((f64::MAX, 0.0_f64), |(a, b), c| (a.min(*c), b.max(*c)));
            assert!(min >= MIN_SHARE * max * (1.0 - 1e-12), "{used:?}");
            depths.push(depth);
        }
        // Pale and deep shades both appear.
        assert!(depths.iter().any(|d| *d < 0.2) && depths.iter().any(|d| *d > 2.0));
    }

    #[test]
    fn noise_free_measurement_is_the_forward_model() {
        let sim = Simulator::new(SimulationConfig {
            noise: NoiseModel::NONE,
            ..SimulationConfig::new(5)
        });
        let dip = sim.lab_dip(4);
        assert_eq!(dip.sample.recipe, dip.sample.uptake);
        for (k, nm) in INSTRUMENT_GRID.wavelengths().enumerate() {
            let expected = 100.0 * sim.true_reflectance(&dip.sample, nm);
            assert!((dip.reflectance[k] - expected).abs() < 1e-12);
        }
    }

    #[test]
    fn the_realistic_world_has_a_surface_a_build_up_and_lots_that_persist() {
        let world = |world| {
            Simulator::new(SimulationConfig {
                noise: NoiseModel::NONE,
                world,
                ..SimulationConfig::new(5)
            })
        };
        let (ideal, real) = (world(World::Ideal), world(World::Realistic));
        // The ideal world's lots are all the nominal fabric; its rows are linear in K/S.
        assert_eq!(
            ideal.lot(3),
            Lot {
                dye_yield: 1.0,
                whiteness: 1.0
            }
        );
        assert_eq!(ideal.lab_dip(4).sample.whiteness, 1.0);
        // A realistic lot dyes alike every time; lots differ.
        assert_eq!(real.lot(3), real.lot(3));
        assert_ne!(real.lot(3), real.lot(4));
        let mut recipe = vec![0.0; real.dyes().len()];
        recipe[8] = 2.0;
        let a = real.dye(0, 7, &recipe, 1, false);
        let b = real.dye(0, 7, &recipe, 2, false);
        assert_eq!(
            a.sample.uptake, b.sample.uptake,
            "no noise: one lot, one dyeing"
        );
        assert_eq!(a.sample.uptake[8], 2.0 * real.lot(7).dye_yield);
        assert_eq!(a.sample.whiteness, real.lot(7).whiteness);
        // Noise-free, the reading is Saunderson's of Kubelka–Munk's of the saturated K/S.
        let physics = Physics::REALISTIC;
        let surface = physics.surface.unwrap();
        let nm = 585.0;
        let fabric = real.substrates()[0];
        let ks = a.sample.whiteness * fabric.ks(nm)
            + physics.effective(a.sample.uptake[8]) * real.dyes()[8].unit_ks(nm);
        let expected = surface.measured(mordant_estimator::basis::reflectance_from_ks(ks));
        assert!((real.true_reflectance(&a.sample, nm) - expected).abs() < 1e-15);
        // The surface keeps a deep shade's reading above k₁; the ideal world's goes below it.
        recipe[8] = 4.0;
        let deep =
            |sim: &Simulator| sim.true_reflectance(&sim.dye(0, 7, &recipe, 1, false).sample, nm);
        assert!(deep(&real) > surface.k1 && deep(&ideal) < surface.k1);
        // Build-up saturates: twice the dye gives less than twice its K/S.
        assert!(physics.effective(4.0) < 2.0 * physics.effective(2.0));
        assert_eq!(Physics::IDEAL.effective(4.0), 4.0);
        assert_eq!("realistic".parse::<World>(), Ok(World::Realistic));
        assert!("real".parse::<World>().is_err());
    }

    #[test]
    fn instrument_swap_changes_spectra_but_not_recipes() {
        let plain = Simulator::new(config(Scenario::None)).lab_dips(0..40);
        let swap = Simulator::new(config(Scenario::InstrumentSwap)).lab_dips(0..40);
        for (row, (a, b)) in plain.iter().zip(&swap).enumerate() {
            assert_eq!(a.sample, b.sample, "row {row}: the recipe and fabric stay");
            if row < 20 {
                assert_eq!(a, b, "row {row} is before the swap");
            } else {
                assert_eq!(b.instrument, Instrument::SWAPPED);
                let max = a
                    .reflectance
                    .iter()
                    .zip(&b.reflectance)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f64::max);
                assert!(
                    max > 0.3,
                    "row {row}: the new instrument reads differently ({max})"
                );
            }
        }
    }

    #[test]
    fn dye_lot_changes_only_rows_with_that_dye() {
        let plain = Simulator::new(config(Scenario::None)).lab_dips(0..80);
        let lot = Simulator::new(config(Scenario::DyeLot)).lab_dips(0..80);
        let mut changed = 0;
        for (row, (a, b)) in plain.iter().zip(&lot).enumerate() {
            assert_eq!(a.sample.recipe, b.sample.recipe);
            let uses = a.sample.recipe[DYE_LOT_DYE] != 0.0;
            if row >= 20 && uses {
                changed += 1;
                assert_eq!(b.sample.strength[DYE_LOT_DYE], DYE_LOT_STRENGTH);
                // A stronger lot: darker where the dye absorbs (500 nm, band 14 of 360–780).
                assert!(b.reflectance[14] < a.reflectance[14], "row {row}");
            } else {
                assert_eq!(a.reflectance, b.reflectance, "row {row}");
            }
        }
        assert!(changed > 5, "the dye appears in enough rows ({changed})");
    }

    #[test]
    fn new_substrate_appears_only_after_the_drift() {
        let sim = Simulator::new(config(Scenario::NewSubstrate));
        let dips = sim.lab_dips(0..200);
        let new_code = (sim.substrates().len() - 1) as u32;
        assert!(dips[..20].iter().all(|d| d.sample.substrate != new_code));
        let share = dips[20..]
            .iter()
            .filter(|d| d.sample.substrate == new_code)
            .count() as f64
            / 180.0;
        assert!((0.35..0.65).contains(&share), "{share}");
        // Recipes are unchanged by the scenario.
        let plain = Simulator::new(config(Scenario::None)).lab_dips(0..200);
        assert!(
            plain
                .iter()
                .zip(&dips)
                .all(|(a, b)| a.sample.recipe == b.sample.recipe)
        );
    }

    #[test]
    fn held_out_targets_are_one_sample_read_by_two_instruments() {
        let sim = Simulator::new(config(Scenario::InstrumentSwap));
        let before = sim.held_out(3, false);
        let after = sim.held_out(3, true);
        assert_eq!(before.sample, after.sample);
        assert_eq!(before.instrument, Instrument::REFERENCE);
        assert_eq!(after.instrument, Instrument::SWAPPED);
        assert_ne!(before.reflectance, after.reflectance);
        assert_ne!(before, sim.lab_dip(3), "targets are not training rows");
    }

    #[test]
    fn scenario_names_round_trip() {
        for sc in Scenario::ALL {
            assert_eq!(sc.as_str().parse::<Scenario>(), Ok(sc));
        }
        assert!("swap".parse::<Scenario>().is_err());
        assert_eq!(INSTRUMENT_GRID.band_names()[0], "360nm");
        assert_eq!(INSTRUMENT_GRID.band_names()[42], "780nm");
    }

    #[test]
    fn box_muller_is_standard_normal() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let xs: Vec<f64> = (0..20_000).map(|_| standard_normal(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03, "{mean}");
        assert!((var - 1.0).abs() < 0.05, "{var}");
    }
}
