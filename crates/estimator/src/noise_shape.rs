//! The noise variance as a power of the answer's size.
//!
//! One `σ²` per output says that a dose of 0.001 and a dose of 8 are measured alike. Analytical
//! error is seldom so: its standard deviation grows with the amount measured (a constant
//! coefficient of variation is its textbook shape), and an interval sized for the output's
//! average noise is then far too wide for small answers and too narrow for large ones. An output
//! may instead carry a shape,
//!
//! ```text
//! σ²(x) = s · w(μ(x)),      w(μ) = (c + |μ|)^{2θ} · m,      θ ∈ {¼, ½, ¾, 1}
//! ```
//!
//! (`θ = 0` is no shape, `w = 1`), where `μ(x)` is the answer's mean, `c` a twentieth of the
//! output's root mean square over the training rows (so that an answer of 0 keeps some noise)
//! and `m` the level that leaves the residuals `r_i = y_i − μ_i` which set the shape the mean
//! square in units of the reshaped noise that they had in units of `s`:
//!
//! ```text
//! m = mean(r²/(c + |μ|)^{2θ}) / mean(r²)
//! ```
//!
//! `θ` is the one of [`POWERS`] whose Gaussian likelihood of those residuals, profiled over the
//! level, is largest once every `θ ≠ 0` is charged BIC's `½ log n` for being chosen:
//!
//! ```text
//! ℓ_θ = −½ [2θ Σ log(c + |μ_i|) + n log mean(r²/(c + |μ_i|)^{2θ})] − ½ log n · [θ ≠ 0]
//! ```
//!
//! so an output whose residuals do not grow with its answers keeps `θ = 0`. Only the noise's
//! part of the predictive variance is reshaped; the means, the posterior and the evidence are
//! those of the model without it.

use crate::EstimatorError;

/// The powers `θ` the choice weighs; `0` is no shape.
pub const POWERS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

/// Fewer residuals than this set no shape: a power chosen on a handful of rows says nothing.
pub const SHAPE_ROWS: usize = 10;

/// `c` as a fraction of the output's root mean square over its training rows.
pub const OFFSET_FRACTION: f64 = 1.0 / 20.0;

/// An output's noise shape `w(μ) = (c + |μ|)^{2θ} · m` (see the module's doc), `θ > 0`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoiseShape {
    power: f64,
    offset: f64,
    level: f64,
}

impl NoiseShape {
    /// A shape of power `θ` (one of [`POWERS`] but 0), offset `c > 0` and level `m > 0`.
    pub fn new(power: f64, offset: f64, level: f64) -> Result<Self, EstimatorError> {
        if !(POWERS[1..].contains(&power)) {
            return Err(EstimatorError::NonFinite("noise shape power"));
        }
        if !(offset.is_finite() && offset > 0.0 && level.is_finite() && level > 0.0) {
            return Err(EstimatorError::NonFinite("noise shape offset or level"));
        }
        Ok(Self {
            power,
            offset,
            level,
        })
    }

    /// `θ`.
    pub fn power(&self) -> f64 {
        self.power
    }

    /// `c`.
    pub fn offset(&self) -> f64 {
        self.offset
    }

    /// `m`.
    pub fn level(&self) -> f64 {
        self.level
    }

    /// `w(μ) = (c + |μ|)^{2θ} · m`, the factor on the noise variance of an answer of mean `μ`.
    pub fn weight(&self, mean: f64) -> f64 {
        (self.offset + mean.abs()).powf(2.0 * self.power) * self.level
    }

    /// The shape the residuals `(μ_i, r_i)` choose at offset `c` (see the module's doc); `None`
    /// where they choose `θ = 0`, are fewer than [`SHAPE_ROWS`], are all 0, or `c` is not a
    /// positive number.
    pub fn choose(residuals: impl IntoIterator<Item = (f64, f64)>, offset: f64) -> Option<Self> {
        if !(offset.is_finite() && offset > 0.0) {
            return None;
        }
        // n, Σ log(c + |μ|) and, per power, Σ r²/(c + |μ|)^{2θ}: all the choice needs.
        let (mut n, mut logs) = (0usize, 0.0);
        let mut sums = [0.0; POWERS.len()];
        for (mean, residual) in residuals {
            let size = offset + mean.abs();
            let r2 = residual * residual;
            if !(size.is_finite() && r2.is_finite()) {
                return None;
            }
            n += 1;
            logs += size.ln();
            for (sum, power) in sums.iter_mut().zip(POWERS) {
                *sum += r2 / size.powf(2.0 * power);
            }
        }
        if n < SHAPE_ROWS || sums[0] <= 0.0 {
            return None;
        }
        let rows = n as f64;
        let likelihood = |i: usize| {
            let power = POWERS[i];
            let charge = if power == 0.0 { 0.0 } else { 0.5 * rows.ln() };
            -0.5 * (2.0 * power * logs + rows * (sums[i] / rows).ln()) - charge
        };
        let best = (0..POWERS.len())
            .filter(|&i| likelihood(i).is_finite())
            .max_by(|&a, &b| likelihood(a).total_cmp(&likelihood(b)))?;
        if best == 0 {
            return None;
        }
        Self::new(POWERS[best], offset, sums[best] / sums[0]).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stand-in for standard normal draws (a fixed sequence whose mean square
    /// is about 1), so that the tests do not depend on a generator.
    fn noise(i: usize) -> f64 {
        let u = ((i as f64 + 0.5) * 0.618_033_988_749_895).fract();
        // The inverse of a logistic, scaled to unit variance: heavy enough tails, mean 0.
        (u / (1.0 - u)).ln() * 3f64.sqrt() / std::f64::consts::PI
    }

    #[test]
    fn residuals_that_grow_in_proportion_to_the_answer_choose_the_power_one() {
        // A coefficient of variation of 5 % over answers from 0.01 to 8.
        let rows: Vec<(f64, f64)> = (0..400)
            .map(|i| {
                let mean = 0.01 + 8.0 * (i as f64 / 400.0).powi(2);
                (mean, 0.05 * mean * noise(i))
            })
            .collect();
        let shape = NoiseShape::choose(rows.iter().copied(), 0.001).unwrap();
        assert_eq!(shape.power(), 1.0);
        // The residuals keep their mean square in units of the reshaped noise.
        let ms = |f: &dyn Fn(f64, f64) -> f64| {
            rows.iter().map(|&(m, r)| f(m, r)).sum::<f64>() / rows.len() as f64
        };
        let before = ms(&|_, r| r * r);
        let after = ms(&|m, r| r * r / shape.weight(m));
        assert!((after / before - 1.0).abs() < 1e-12, "{after} vs {before}");
        // A small answer's noise is far below the average, a large one's above it.
        assert!(shape.weight(0.01) < 0.01 && shape.weight(8.0) > 1.0);
    }

    #[test]
    fn residuals_that_do_not_grow_with_the_answer_keep_no_shape() {
        let rows = (0..400).map(|i| (0.01 + 8.0 * i as f64 / 400.0, 0.05 * noise(i)));
        assert_eq!(NoiseShape::choose(rows, 0.02), None);
    }

    #[test]
    fn a_few_rows_or_exact_fits_set_no_shape() {
        let few = (0..SHAPE_ROWS - 1).map(|i| (i as f64, 0.1 * i as f64 * noise(i)));
        assert_eq!(NoiseShape::choose(few, 0.1), None);
        let exact = (0..100).map(|i| (i as f64, 0.0));
        assert_eq!(NoiseShape::choose(exact, 0.1), None);
        let rows = (0..100).map(|i| (i as f64, i as f64 * noise(i)));
        assert_eq!(NoiseShape::choose(rows, 0.0), None);
    }

    #[test]
    fn a_shape_is_refused_outside_its_powers_and_positive_numbers() {
        assert!(NoiseShape::new(0.0, 1.0, 1.0).is_err());
        assert!(NoiseShape::new(0.3, 1.0, 1.0).is_err());
        assert!(NoiseShape::new(0.5, 0.0, 1.0).is_err());
        assert!(NoiseShape::new(0.5, 1.0, f64::NAN).is_err());
        let shape = NoiseShape::new(0.5, 1.0, 2.0).unwrap();
        // (1 + 3)^1 · 2, whatever the sign of the answer.
        assert_eq!(shape.weight(-3.0), 8.0);
        assert_eq!(shape.weight(3.0), 8.0);
    }
}
