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
//!
//! Everything the choice reads is a sum over the residuals, kept as a [`ShapeEvidence`]:
//! `n`, `Σ log(c + |μ_i|)` and, per power, `Σ r_i²/(c + |μ_i|)^{2θ}`. Sums add, so a model keeps
//! its outputs' evidence beside its statistics and adds each batch's to it, with `c` fixed
//! when the evidence starts: the first fit's residuals from its own posterior mean, then each
//! later batch's from the mean of the model before that batch (prequential residuals, which no
//! row ever has to be read again for). Forgetting weighs the evidence as it weighs the
//! statistics (every sum times the same factor).

use crate::EstimatorError;

/// The powers `θ` the choice weighs; `0` is no shape.
pub const POWERS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

/// Fewer residuals than this set no shape: a power chosen on a handful of rows says nothing.
pub const SHAPE_ROWS: usize = 10;

/// `c` as a fraction of the output's root mean square over its training rows.
pub const OFFSET_FRACTION: f64 = 1.0 / 20.0;

/// Evidence of this many rows chooses among [`POWERS`] well enough that a model adds no more to
/// it ([`crate::ModelState::wants_residuals`]): each batch's residuals need its rows read back,
/// which would then cost more than they could move the choice. Forgetting, which keeps the
/// evidence below it, keeps it following the rows.
pub const EVIDENCE_ROWS: usize = 10_000;

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
        ShapeEvidence::from_residuals(residuals, offset)?.choose()
    }
}

/// The sums over an output's residuals that choose its [`NoiseShape`] (see the module's doc):
/// at offset `c`, the (forgetting-weighted) count `n`, `Σ log(c + |μ_i|)` and, per power of
/// [`POWERS`], `Σ r_i²/(c + |μ_i|)^{2θ}`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShapeEvidence {
    offset: f64,
    rows: f64,
    logs: f64,
    sums: [f64; POWERS.len()],
}

impl ShapeEvidence {
    /// Evidence read back from its parts, checked: `c > 0`, `n ≥ 0` and every sum finite, the
    /// weighted ones not negative.
    pub fn from_parts(
        offset: f64,
        rows: f64,
        logs: f64,
        sums: [f64; POWERS.len()],
    ) -> Result<Self, EstimatorError> {
        if !(offset.is_finite() && offset > 0.0) {
            return Err(EstimatorError::NonFinite("noise shape evidence offset"));
        }
        if !(rows.is_finite() && rows >= 0.0 && logs.is_finite())
            || sums.iter().any(|s| !(s.is_finite() && *s >= 0.0))
        {
            return Err(EstimatorError::NonFinite("noise shape evidence sums"));
        }
        Ok(Self {
            offset,
            rows,
            logs,
            sums,
        })
    }

    /// The evidence of the residuals `(μ_i, r_i)` at offset `c`; `None` where `c` is not a
    /// positive number or a residual or mean is not finite.
    pub fn from_residuals(
        residuals: impl IntoIterator<Item = (f64, f64)>,
        offset: f64,
    ) -> Option<Self> {
        let mut evidence = Self::from_parts(offset, 0.0, 0.0, [0.0; POWERS.len()]).ok()?;
        for (mean, residual) in residuals {
            let size = offset + mean.abs();
            let r2 = residual * residual;
            if !(size.is_finite() && r2.is_finite()) {
                return None;
            }
            evidence.rows += 1.0;
            evidence.logs += size.ln();
            for (sum, power) in evidence.sums.iter_mut().zip(POWERS) {
                *sum += r2 / size.powf(2.0 * power);
            }
        }
        Some(evidence)
    }

    /// `c`.
    pub fn offset(&self) -> f64 {
        self.offset
    }

    /// `n`, the (weighted) residuals counted.
    pub fn rows(&self) -> f64 {
        self.rows
    }

    /// `Σ log(c + |μ_i|)`.
    pub fn logs(&self) -> f64 {
        self.logs
    }

    /// `Σ r_i²/(c + |μ_i|)^{2θ}`, one per power of [`POWERS`].
    pub fn sums(&self) -> [f64; POWERS.len()] {
        self.sums
    }

    /// The evidence of both sets of residuals, where both are at the same offset; `None` where
    /// they are not (sums at different `c` do not add).
    pub fn added(&self, other: &Self) -> Option<Self> {
        if self.offset != other.offset {
            return None;
        }
        let mut sums = self.sums;
        for (sum, more) in sums.iter_mut().zip(other.sums) {
            *sum += more;
        }
        Some(Self {
            rows: self.rows + other.rows,
            logs: self.logs + other.logs,
            sums,
            ..*self
        })
    }

    /// Every sum times `weight` (forgetting, `0 < weight ≤ 1`).
    pub fn scaled(&self, weight: f64) -> Self {
        Self {
            rows: self.rows * weight,
            logs: self.logs * weight,
            sums: self.sums.map(|s| s * weight),
            ..*self
        }
    }

    /// The shape these residuals choose (see the module's doc); `None` where they choose
    /// `θ = 0`, count fewer than [`SHAPE_ROWS`] or are all 0.
    pub fn choose(&self) -> Option<NoiseShape> {
        let (rows, sums, logs) = (self.rows, &self.sums, self.logs);
        if rows < SHAPE_ROWS as f64 || sums[0] <= 0.0 {
            return None;
        }
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
        NoiseShape::new(POWERS[best], self.offset, sums[best] / sums[0]).ok()
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
    fn evidence_adds_over_batches_and_chooses_as_the_rows_together_do() {
        let rows: Vec<(f64, f64)> = (0..600)
            .map(|i| {
                let mean = 0.05 + 4.0 * ((i * 37 % 600) as f64 / 600.0);
                (mean, 0.1 * mean.sqrt() * noise(i))
            })
            .collect();
        let whole = ShapeEvidence::from_residuals(rows.iter().copied(), 0.01).unwrap();
        let parts = rows
            .chunks(7)
            .map(|chunk| ShapeEvidence::from_residuals(chunk.iter().copied(), 0.01).unwrap())
            .reduce(|a, b| a.added(&b).unwrap())
            .unwrap();
        assert_eq!(parts.rows(), 600.0);
        assert!((parts.logs() - whole.logs()).abs() <= 1e-12 * whole.logs().abs());
        for (a, b) in parts.sums().iter().zip(whole.sums()) {
            assert!((a - b).abs() <= 1e-12 * b, "{a} vs {b}");
        }
        let shape = whole.choose().unwrap();
        assert_eq!(shape.power(), 0.5);
        assert_eq!(parts.choose().map(|s| s.power()), Some(0.5));
        // Sums at another offset do not add; forgetting scales every sum alike and keeps the
        // choice, whose level is a ratio of sums.
        let other = ShapeEvidence::from_residuals(rows.iter().copied(), 0.02).unwrap();
        assert_eq!(whole.added(&other), None);
        let halved = whole.scaled(0.5);
        assert_eq!(halved.rows(), 300.0);
        assert_eq!(halved.choose(), Some(shape));
        // Forgetting down to fewer than SHAPE_ROWS weighted rows leaves no shape to choose.
        assert_eq!(whole.scaled(1.0 / 100.0).choose(), None);
    }

    #[test]
    fn evidence_is_refused_outside_positive_finite_sums() {
        let sums = [1.0; POWERS.len()];
        assert!(ShapeEvidence::from_parts(0.1, 10.0, 1.0, sums).is_ok());
        assert!(ShapeEvidence::from_parts(0.0, 10.0, 1.0, sums).is_err());
        assert!(ShapeEvidence::from_parts(0.1, -1.0, 1.0, sums).is_err());
        assert!(ShapeEvidence::from_parts(0.1, 10.0, f64::NAN, sums).is_err());
        let mut negative = sums;
        negative[2] = -1.0;
        assert!(ShapeEvidence::from_parts(0.1, 10.0, 1.0, negative).is_err());
        assert_eq!(
            ShapeEvidence::from_residuals([(1.0, f64::INFINITY)], 0.1),
            None
        );
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
