//! Held-out targets with their true colours, and the forward model tabulated to render the
//! colour of any recipe: what the evaluations score recipes against.

use faer::Mat;
use mordant_colour::CieLab;

use super::SimulateError;
use super::colour::{COLOUR_RANGE_NM, Illuminant};
use super::forward::Physics;
use super::generate::{LabDip, Sample, Simulator};

/// The forward model tabulated every 1 nm over [`COLOUR_RANGE_NM`] (unit K/S of every dye,
/// K/S of every fabric), with the world's physics, so that the colour of a recipe costs a few
/// thousand multiplications.
pub struct Renderer {
    dyes: Vec<Vec<f64>>,
    substrates: Vec<Vec<f64>>,
    physics: Physics,
}

impl Renderer {
    pub fn new(sim: &Simulator) -> Self {
        let nms: Vec<f64> = (COLOUR_RANGE_NM.0..=COLOUR_RANGE_NM.1)
            .map(|nm| nm as f64)
            .collect();
        Self {
            dyes: sim
                .dyes()
                .iter()
                .map(|d| nms.iter().map(|&nm| d.unit_ks(nm)).collect())
                .collect(),
            substrates: sim
                .substrates()
                .iter()
                .map(|s| nms.iter().map(|&nm| s.ks(nm)).collect())
                .collect(),
            physics: sim.physics(),
        }
    }

    /// CIELAB (D65) of concentrations `c` taken up on a nominal lot of fabric `substrate`
    /// with the reference dye lots: `Simulator::true_reflectance` of that sample.
    pub fn lab(&self, substrate: u32, c: &[f64]) -> Result<CieLab, SimulateError> {
        self.render(substrate, c, None, 1.0, Illuminant::D65)
    }

    /// CIELAB of `sample` as it is (its uptake, dye lots and fabric lot) under `illuminant`.
    pub fn lab_of(&self, sample: &Sample, illuminant: Illuminant) -> Result<CieLab, SimulateError> {
        self.render(
            sample.substrate,
            &sample.uptake,
            Some(&sample.strength),
            sample.whiteness,
            illuminant,
        )
    }

    fn render(
        &self,
        substrate: u32,
        c: &[f64],
        strength: Option<&[f64]>,
        whiteness: f64,
        illuminant: Illuminant,
    ) -> Result<CieLab, SimulateError> {
        let sub = &self.substrates[(substrate as usize).min(self.substrates.len() - 1)];
        let mut ks: Vec<f64> = sub.iter().map(|k| whiteness * k).collect();
        for (i, (curve, &ci)) in self.dyes.iter().zip(c).enumerate() {
            if ci != 0.0 {
                let s = strength.map_or(1.0, |s| s[i]);
                let amount = s * self.physics.effective(ci);
                for (k, u) in ks.iter_mut().zip(curve) {
                    *k += amount * u;
                }
            }
        }
        let start = COLOUR_RANGE_NM.0 as f64;
        Ok(super::colour::lab(
            |nm| self.physics.reading(ks[(nm - start) as usize]),
            illuminant,
        )?)
    }
}

/// Held-out targets and their true colours.
pub struct Targets {
    pub dips: Vec<LabDip>,
    pub inputs: Mat<f64>,
    pub truth: Vec<CieLab>,
}

impl Targets {
    /// Targets `0..count` of `sim`, in the drifted regime or not, with the model's `inputs` of
    /// their dips.
    pub fn new(
        sim: &Simulator,
        inputs: impl Fn(&[LabDip]) -> Mat<f64>,
        count: usize,
        drifted: bool,
    ) -> Result<Self, SimulateError> {
        let dips: Vec<LabDip> = (0..count).map(|i| sim.held_out(i, drifted)).collect();
        let truth = dips
            .iter()
            .map(|d| super::colour::lab(|nm| sim.true_reflectance(&d.sample, nm), Illuminant::D65))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            inputs: inputs(&dips),
            dips,
            truth,
        })
    }

    pub fn len(&self) -> usize {
        self.dips.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dips.is_empty()
    }
}

/// The `q`-quantile (0 ≤ q ≤ 1) of `values` by linear interpolation between order statistics
/// (`x_(⌊h⌋) + (h − ⌊h⌋)(x_(⌊h⌋+1) − x_(⌊h⌋))`, `h = (n − 1) q`, 0-based): NaN for no values.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}
