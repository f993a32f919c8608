//! The colour of a spectrum sampled on a model's bands. A spectrum on any grid is interpolated
//! linearly onto the 1 nm samples of 380–780 nm (held at its end values beyond its ends, as ASTM
//! E308 extends data that stop short of the colour-matching functions' range) and integrated
//! with the CIE 1964 10° observer; both steps are linear in the bands, so the tristimulus values
//! are `XYZ = Σ_b R_b W_b` with per-band weights `W_b = Σ_k A_kb w_k` (`A` the interpolation,
//! `w_k` the illuminant's [`Tristimulus`] weights), computed once per grid.

use mordant_colour::{CieLab, ColourError, Illuminant, Tristimulus};
use mordant_estimator::grid::{Grid, interpolation};

/// The range a spectrum must cover for its colour to be computed (400–700 nm, what every
/// textile spectrophotometer measures).
pub const REQUIRED: Grid = Grid {
    start_nm: 400.0,
    interval_nm: 10.0,
    count: 31,
};

/// The 1 nm grid the colour is integrated over.
const COLOUR_GRID: Grid = Grid {
    start_nm: mordant_colour::COLOUR_RANGE_NM.0 as f64,
    interval_nm: 1.0,
    count: mordant_colour::COLOUR_RANGE_NM.1 - mordant_colour::COLOUR_RANGE_NM.0 + 1,
};

/// Whether spectra on `grid` cover the range colour needs (400–700 nm).
pub fn can_judge(grid: &Grid) -> bool {
    grid.covers(&REQUIRED)
}

/// The per-band tristimulus weights of one grid under D65, A and F11.
#[derive(Clone, Debug)]
pub struct Colorimeter {
    grid: Grid,
    /// In the order of [`Illuminant::ALL`]: the weights `W_b`, and the illuminant's table (for
    /// its white).
    lights: Vec<(Vec<[f64; 3]>, &'static Tristimulus)>,
}

impl Colorimeter {
    /// The weights for spectra on `grid`: each 1 nm sample's tristimulus weights shared between
    /// the bands the interpolation reads it from, in the interpolation's proportions.
    pub fn new(grid: &Grid) -> Result<Self, ColourError> {
        let mut lights: Vec<(Vec<[f64; 3]>, &'static Tristimulus)> = Illuminant::ALL
            .into_iter()
            .map(|illuminant| Ok((vec![[0.0; 3]; grid.count], Tristimulus::of(illuminant)?)))
            .collect::<Result<_, ColourError>>()?;
        for k in 0..COLOUR_GRID.count {
            let parts = match interpolation(grid, COLOUR_GRID.wavelength(k)) {
                (i, None) => [(i, 1.0), (i, 0.0)],
                (i, Some(t)) => [(i, 1.0 - t), (i + 1, t)],
            };
            for (weights, table) in &mut lights {
                let w = table.weights()[k];
                for (band, share) in parts {
                    for (wc, tc) in weights[band].iter_mut().zip(w) {
                        *wc += share * tc;
                    }
                }
            }
        }
        Ok(Self {
            grid: *grid,
            lights,
        })
    }

    /// Number of bands the weights are for.
    pub fn bands(&self) -> usize {
        self.grid.count
    }

    /// CIELAB under `illuminant` of reflectance `r` (fractions, one per band), each band
    /// clamped to [0, 1] first: a surface reflects at most all the light, and a brightener's
    /// excess must not leak into its neighbours through the interpolation.
    pub fn lab(&self, r: &[f64], illuminant: Illuminant) -> Result<CieLab, ColourError> {
        let index = Illuminant::ALL
            .iter()
            .position(|i| *i == illuminant)
            .unwrap_or(0);
        let (weights, table) = &self.lights[index];
        let mut xyz = [0.0; 3];
        for (b, (value, w)) in r.iter().zip(weights).enumerate() {
            if !value.is_finite() {
                return Err(ColourError::NonFinite {
                    nm: self.grid.wavelength(b).round() as usize,
                    value: *value,
                });
            }
            let v = value.clamp(0.0, 1.0);
            for (x, wx) in xyz.iter_mut().zip(w) {
                *x += v * wx;
            }
        }
        Ok(table.lab(xyz))
    }

    /// CIELAB under D65, A and F11 (the order of [`Illuminant::ALL`]).
    pub fn labs(&self, r: &[f64]) -> Result<[CieLab; 3], ColourError> {
        Ok([
            self.lab(r, Illuminant::D65)?,
            self.lab(r, Illuminant::A)?,
            self.lab(r, Illuminant::F11)?,
        ])
    }
}

#[cfg(test)]
mod tests {
    use mordant_estimator::grid::resample;

    use super::*;

    fn orange(nm: f64) -> f64 {
        0.2 + 0.6 / (1.0 + (-(nm - 550.0) / 20.0).exp())
    }

    #[test]
    fn the_weights_give_the_colour_of_the_interpolated_spectrum() {
        for grid in [
            Grid::new(400.0, 10.0, 31).unwrap(),
            Grid::new(360.0, 5.0, 85).unwrap(),
            Grid::new(395.5, 3.3, 100).unwrap(),
        ] {
            let colorimeter = Colorimeter::new(&grid).unwrap();
            let mut r: Vec<f64> = grid.wavelengths().map(orange).collect();
            r[3] = 1.2;
            let clamped: Vec<f64> = r.iter().map(|v| v.clamp(0.0, 1.0)).collect();
            let mut sampled = vec![0.0; COLOUR_GRID.count];
            resample(&grid, &clamped, &COLOUR_GRID, &mut sampled);
            for illuminant in Illuminant::ALL {
                let direct = mordant_colour::lab(
                    |nm| sampled[(nm - COLOUR_GRID.start_nm) as usize],
                    illuminant,
                )
                .unwrap();
                let weighed = colorimeter.lab(&r, illuminant).unwrap();
                let (a, b) = (direct.to_array(), weighed.to_array());
                for (u, v) in a.iter().zip(&b) {
                    assert!((u - v).abs() < 1e-9, "{}: {a:?} vs {b:?}", grid.describe());
                }
            }
        }
        let grid = Grid::new(400.0, 10.0, 31).unwrap();
        assert!(can_judge(&grid));
        assert!(!can_judge(&Grid::new(420.0, 10.0, 29).unwrap()));
        let colorimeter = Colorimeter::new(&grid).unwrap();
        let mut bad = vec![0.5; 31];
        bad[4] = f64::NAN;
        assert!(colorimeter.lab(&bad, Illuminant::D65).is_err());
    }
}
