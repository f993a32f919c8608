//! A dyeing judged against its standard as a dye house judges it: CIEDE2000 and CMC(l:c) with
//! ΔL*, ΔC*, ΔH* under D65, A and F11, and a verdict against a tolerance under D65.

use mordant_colour::{CieLab, CmcWeights, ColourError, Difference, Illuminant};

/// Default tolerance: ΔE00 1.0 under D65, a common commercial pass/fail for textiles.
pub const DEFAULT_TOLERANCE: Tolerance = Tolerance::De00(1.0);

/// The colour difference a verdict is judged on, and its limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// CIEDE2000 at most this.
    De00(f64),
    /// CMC(l:c), with the request's weights, at most this.
    Cmc(f64),
}

impl Tolerance {
    /// The metric's name in the API, and the limit.
    pub fn parts(self) -> (&'static str, f64) {
        match self {
            Tolerance::De00(v) => ("de00", v),
            Tolerance::Cmc(v) => ("cmc", v),
        }
    }

    /// Whether `d` is within the tolerance.
    pub fn passes(self, d: &Difference) -> bool {
        match self {
            Tolerance::De00(v) => d.de00 <= v,
            Tolerance::Cmc(v) => d.cmc <= v,
        }
    }
}

/// The sample against the reference under one illuminant.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub illuminant: Illuminant,
    pub reference: CieLab,
    pub sample: CieLab,
    pub difference: Difference,
}

/// What a comparison found: D65 first, then A and F11.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub seen: Vec<Seen>,
    /// Whether the difference under D65 is within the tolerance.
    pub pass: bool,
}

impl Comparison {
    /// ΔE00 under D65.
    pub fn de00(&self) -> f64 {
        self.seen
            .first()
            .map_or(f64::INFINITY, |s| s.difference.de00)
    }

    /// The larger ΔE00 under A and F11: how far the match falls apart under the other lights.
    pub fn metamerism(&self) -> f64 {
        self.seen
            .iter()
            .skip(1)
            .fold(0.0, |worst, s| worst.max(s.difference.de00))
    }
}

/// `sample` against `reference` (each CIELAB under D65, A and F11, in that order) and the
/// verdict under D65.
pub fn judge(
    reference: &[CieLab; 3],
    sample: &[CieLab; 3],
    tolerance: Tolerance,
    cmc: CmcWeights,
) -> Result<Comparison, ColourError> {
    let seen = Illuminant::ALL
        .into_iter()
        .zip(reference.iter().zip(sample))
        .map(|(illuminant, (reference, sample))| {
            Ok(Seen {
                illuminant,
                reference: *reference,
                sample: *sample,
                difference: Difference::between(reference, sample, cmc)?,
            })
        })
        .collect::<Result<Vec<_>, ColourError>>()?;
    let pass = tolerance.passes(&seen[0].difference);
    Ok(Comparison { seen, pass })
}
