//! Regular wavelength grids, and spectra resampled linearly from one grid onto another: the
//! one grid type of the service (a model's declared spectrum, the grids requests arrive on) and
//! of the simulator (its instrument and model grids).

/// Wavelengths are compared with this tolerance (nm), so `400 + 30 · 10` covers `700`
/// whatever the rounding of the grid's arithmetic.
const NM_TOLERANCE: f64 = 1e-6;
/// Bounds on a grid's wavelengths (nm): from the far ultraviolet to the near infrared.
const MIN_NM: f64 = 100.0;
const MAX_NM: f64 = 5000.0;
/// The finest grid: band names (rounded to [`NM_DIGITS`]) stay distinct far below it.
pub const MIN_INTERVAL_NM: f64 = 0.01;
/// Band names carry wavelengths rounded to this many decimals of a nanometre.
pub const NM_DIGITS: i32 = 6;
/// A regular wavelength grid: `λ_i = start_nm + i · interval_nm`, `i = 0 … count − 1`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Grid {
    pub start_nm: f64,
    pub interval_nm: f64,
    pub count: usize,
}

impl Grid {
    /// A grid of at least two bands within [100, 5000] nm.
    pub fn new(start_nm: f64, interval_nm: f64, count: usize) -> Result<Self, String> {
        if !(start_nm.is_finite() && (MIN_NM..=MAX_NM).contains(&start_nm)) {
            return Err(format!(
                "start_nm must be a wavelength from {MIN_NM} to {MAX_NM} nm, found {start_nm}"
            ));
        }
        if !(interval_nm.is_finite() && interval_nm >= MIN_INTERVAL_NM) {
            return Err(format!(
                "interval_nm must be at least {MIN_INTERVAL_NM} nm, found {interval_nm}"
            ));
        }
        if count < 2 {
            return Err(format!("a spectrum needs at least 2 bands, found {count}"));
        }
        let grid = Self {
            start_nm,
            interval_nm,
            count,
        };
        if grid.end_nm() > MAX_NM + NM_TOLERANCE {
            return Err(format!(
                "the grid ends at {} nm, beyond {MAX_NM} nm",
                grid.end_nm()
            ));
        }
        Ok(grid)
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// `λ_i`.
    pub fn wavelength(&self, i: usize) -> f64 {
        self.start_nm + i as f64 * self.interval_nm
    }

    pub fn end_nm(&self) -> f64 {
        self.wavelength(self.count - 1)
    }

    /// Whether this grid's range contains `other`'s.
    pub fn covers(&self, other: &Grid) -> bool {
        self.start_nm <= other.start_nm + NM_TOLERANCE
            && self.end_nm() >= other.end_nm() - NM_TOLERANCE
    }

    /// The name of band `i`, e.g. `400nm` or `402.5nm`.
    pub fn band_name(&self, i: usize) -> String {
        nm_name(self.wavelength(i))
    }

    /// The range, for messages: `400–700 nm every 10 nm`.
    pub fn describe(&self) -> String {
        format!(
            "{}–{} nm every {} nm",
            self.start_nm,
            self.end_nm(),
            self.interval_nm
        )
    }
}

/// The name of a band at `nm`: the wavelength rounded to [`NM_DIGITS`] decimals, so that
/// `400 + 7 · 0.1` is `400.7nm` however the sum rounds.
pub fn nm_name(nm: f64) -> String {
    let scale = 10f64.powi(NM_DIGITS);
    format!("{}nm", (nm * scale).round() / scale)
}

/// The wavelength a column header such as `400nm`, `400.0nm` or `400 nm` names, if it names one.
pub fn band_wavelength(header: &str) -> Option<f64> {
    header
        .strip_suffix("nm")?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|nm| nm.is_finite())
}

/// Linear interpolation of a spectrum `values` on grid `from` at the wavelengths of `to`,
/// written to `out` (length `to.count()`):
///
/// ```text
/// r(λ) = (1 − t) · r_i + t · r_{i+1},   u = (λ − λ₀) / Δλ,   i = ⌊u⌋,   t = u − i
/// ```
///
/// Positions beyond `from`'s ends are clamped onto them: the end value is held, never
/// extrapolated along the slope. Model inputs are only resampled from grids that cover the
/// model's ([`Grid::covers`]), so there this clamps only within the tolerance of an end; colour
/// relies on the hold to extend a spectrum over the colour-matching functions' range. A
/// wavelength on `from`'s grid is copied exactly.
pub fn resample(from: &Grid, values: &[f64], to: &Grid, out: &mut [f64]) {
    debug_assert_eq!(values.len(), from.count);
    debug_assert_eq!(out.len(), to.count);
    for (k, o) in out.iter_mut().enumerate() {
        *o = match interpolation(from, to.wavelength(k)) {
            (i, None) => values[i],
            (i, Some(t)) => (1.0 - t) * values[i] + t * values[i + 1],
        };
    }
}

/// Where [`resample`] reads wavelength `nm` on grid `from`: band `i` alone (`None`), or
/// `(1 − t)` of band `i` and `t` of band `i + 1`.
pub fn interpolation(from: &Grid, nm: f64) -> (usize, Option<f64>) {
    let last = (from.count - 1) as f64;
    let u = ((nm - from.start_nm) / from.interval_nm).clamp(0.0, last);
    let mut i = u.floor();
    let mut t = u - i;
    // Within rounding of the next band: take it exactly.
    if 1.0 - t < 1e-9 {
        i += 1.0;
        t = 0.0;
    }
    let i = (i as usize).min(from.count - 1);
    if t < 1e-9 || i + 1 >= from.count {
        (i, None)
    } else {
        (i, Some(t))
    }
}

impl Grid {
    /// The wavelengths, nm.
    pub fn wavelengths(&self) -> impl Iterator<Item = f64> + '_ {
        (0..self.count).map(|i| self.wavelength(i))
    }

    /// The names of the bands (`400nm`, `402.5nm`, …), as CSV columns and model inputs.
    pub fn band_names(&self) -> Vec<String> {
        (0..self.count).map(|i| self.band_name(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resampling_holds_the_end_values_beyond_the_grid() {
        let from = Grid::new(400.0, 10.0, 3).unwrap();
        let to = Grid::new(390.0, 5.0, 7).unwrap();
        let mut out = [0.0; 7];
        resample(&from, &[1.0, 3.0, 2.0], &to, &mut out);
        assert_eq!(out, [1.0, 1.0, 1.0, 2.0, 3.0, 2.5, 2.0]);
    }
}
