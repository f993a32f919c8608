//! Colour of reflectance spectra and colour differences, as a dye house judges a dyeing.
//!
//! A reflectance `R(λ)` (a fraction) is sampled every 1 nm from 380 to 780 nm, lit by a CIE
//! standard illuminant `S(λ)` and seen by the CIE 1964 10° standard observer:
//! `X = k Σ S(λ) R(λ) x̄₁₀(λ)` (and Y, Z alike) with `k = 100 / Σ S(λ) ȳ₁₀(λ)`, then CIELAB
//! relative to the perfect white `R ≡ 1` under the same illuminant. The illuminants are D65
//! (daylight, where shades are judged), A (incandescent light) and F11 (a three-band
//! fluorescent lamp, the shop light): a recipe whose colour matches under D65 and not under A or
//! F11 is metameric to the target.
//!
//! The illuminants, colour-matching functions, CIELAB and CIEDE2000 come from the `colorimetry`
//! crate (CIE tables compiled in); CMC(l:c), which it lacks, is written in [`cmc`] with its
//! reference; this crate samples the spectrum and reports the differences.

use colorimetry::colorant::Colorant;
use colorimetry::illuminant::CieIlluminant;
pub use colorimetry::lab::CieLab;
use colorimetry::observer::Observer;
use colorimetry::spectrum::Spectrum;
use std::sync::OnceLock;

/// First and last wavelength (nm) of the 1 nm samples the colour is integrated over.
pub const COLOUR_RANGE_NM: (usize, usize) = (380, 780);
const SAMPLES: usize = COLOUR_RANGE_NM.1 - COLOUR_RANGE_NM.0 + 1;

/// Errors of the colour computations.
#[derive(Debug, thiserror::Error)]
pub enum ColourError {
    #[error("reflectance at {nm} nm is {value}, not a finite number")]
    NonFinite { nm: usize, value: f64 },
    #[error("colour difference: {0}")]
    Colorimetry(#[from] colorimetry::Error),
    #[error("tristimulus weights: {0}")]
    Table(String),
}

/// A CIE standard illuminant a colour is seen under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Illuminant {
    /// Average daylight, 6504 K: where shades are matched and judged.
    D65,
    /// Incandescent (tungsten) light, 2856 K.
    A,
    /// A narrow three-band fluorescent lamp, 4000 K (TL84-like shop light).
    F11,
}

impl Illuminant {
    /// D65, then A and F11, the two lights metamerism is judged under.
    pub const ALL: [Illuminant; 3] = [Illuminant::D65, Illuminant::A, Illuminant::F11];

    /// The CIE's name of the illuminant.
    pub fn name(self) -> &'static str {
        match self {
            Illuminant::D65 => "D65",
            Illuminant::A => "A",
            Illuminant::F11 => "F11",
        }
    }

    fn cie(self) -> CieIlluminant {
        match self {
            Illuminant::D65 => CieIlluminant::D65,
            Illuminant::A => CieIlluminant::A,
            Illuminant::F11 => CieIlluminant::F11,
        }
    }
}

/// CIELAB (CIE 1964 10°) under `illuminant` of the reflectance fraction `r(λ)`, sampled every
/// 1 nm over [`COLOUR_RANGE_NM`] and clamped to [0, 1] (a surface colour reflects at most all
/// the light; a fluorescent brightener's excess is not colour the formula can use).
pub fn lab(r: impl Fn(f64) -> f64, illuminant: Illuminant) -> Result<CieLab, ColourError> {
    let mut values = [0.0; SAMPLES];
    for (k, v) in values.iter_mut().enumerate() {
        let nm = COLOUR_RANGE_NM.0 + k;
        let value = r(nm as f64);
        if !value.is_finite() {
            return Err(ColourError::NonFinite { nm, value });
        }
        *v = value.clamp(0.0, 1.0);
    }
    let colorant = Colorant::new(Spectrum::from(values))?;
    Ok(Observer::Cie1964.lab(&illuminant.cie(), &colorant))
}

/// The colour computation of [`lab`] as weights: `X = Σ_k r_k x_k` (and Y, Z alike) over the
/// 1 nm samples `r_k` of [`COLOUR_RANGE_NM`], `x_k = k S(λ_k) x̄₁₀(λ_k)`, and CIELAB relative to
/// the illuminant's white. A spectrum's colour is then a dot product, which is what ranking
/// many candidate recipes by colour needs; the weights are read off the `colorimetry` crate's own
/// integration (one unit spectrum per sample, once per process), so both ways agree to rounding.
#[derive(Clone, Debug)]
pub struct Tristimulus {
    weights: Vec<[f64; 3]>,
    white: colorimetry::xyz::XYZ,
}

impl Tristimulus {
    /// The weights of `illuminant` (computed at the first call, then shared).
    pub fn of(illuminant: Illuminant) -> Result<&'static Tristimulus, ColourError> {
        static TABLES: [OnceLock<Result<Tristimulus, String>>; 3] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let index = Illuminant::ALL
            .iter()
            .position(|i| *i == illuminant)
            .unwrap_or(0);
        TABLES[index]
            .get_or_init(|| Tristimulus::compute(illuminant).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| ColourError::Table(e.clone()))
    }

    fn compute(illuminant: Illuminant) -> Result<Tristimulus, ColourError> {
        let light = illuminant.cie();
        let mut white = Observer::Cie1964.xyz(&light, None);
        let weights = (0..SAMPLES)
            .map(|k| {
                let mut unit = [0.0; SAMPLES];
                unit[k] = 1.0;
                let relative =
                    Observer::Cie1964.rel_xyz(&light, &Colorant::new(Spectrum::from(unit))?);
                white = relative.white_point();
                Ok(relative.xyz().to_array())
            })
            .collect::<Result<Vec<_>, ColourError>>()?;
        Ok(Tristimulus { weights, white })
    }

    /// The weights `[x_k, y_k, z_k]` of the 1 nm samples from 380 nm.
    pub fn weights(&self) -> &[[f64; 3]] {
        &self.weights
    }

    /// CIELAB of tristimulus values `[X, Y, Z]` (Y = 100 for the perfect white).
    pub fn lab(&self, xyz: [f64; 3]) -> CieLab {
        CieLab::from_rxyz(colorimetry::xyz::RelXYZ::new(xyz, self.white))
    }
}

/// A CIELAB colour given by its coordinates, relative to `illuminant`'s white for the CIE 1964
/// 10° observer.
pub fn lab_coordinates(l: f64, a: f64, b: f64, illuminant: Illuminant) -> CieLab {
    let white = Observer::Cie1964.xyz(&illuminant.cie(), None);
    CieLab::new([l, a, b], white)
}

/// CIEDE2000 colour difference ΔE00 (`k_L = k_C = k_H = 1`) between two colours of the same
/// white and observer.
pub fn ciede2000(a: &CieLab, b: &CieLab) -> Result<f64, ColourError> {
    Ok(a.ciede2000(b)?)
}

/// The lightness and chroma weights `l:c` of CMC(l:c): 2:1 for acceptability (the textile
/// industry's pass/fail), 1:1 for perceptibility.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CmcWeights {
    pub lightness: f64,
    pub chroma: f64,
}

impl Default for CmcWeights {
    fn default() -> Self {
        Self {
            lightness: 2.0,
            chroma: 1.0,
        }
    }
}

/// CMC(l:c) colour difference of `sample` from `reference` (CIELAB coordinates `[L*, a*, b*]`).
///
/// Clarke, McDonald & Rigg (1984), "Modification to the JPC79 colour-difference formula",
/// J. Soc. Dyers Colour. 100, 128–132; ISO 105-J03. Not symmetric: the weights are the
/// reference's. With `C*` and `h` (degrees) of the reference:
///
/// ```text
/// S_L = 0.511                              if L* < 16
///     = 0.040975 L* / (1 + 0.01765 L*)     otherwise
/// S_C = 0.0638 C* / (1 + 0.0131 C*) + 0.638
/// F   = √(C*⁴ / (C*⁴ + 1900))
/// T   = 0.56 + |0.2 cos(h + 168°)|         if 164° ≤ h ≤ 345°
///     = 0.36 + |0.4 cos(h + 35°)|          otherwise
/// S_H = S_C (F T + 1 − F)
/// ΔE  = √((ΔL*/(l S_L))² + (ΔC*/(c S_C))² + (ΔH*/S_H)²)
/// ```
pub fn cmc(reference: [f64; 3], sample: [f64; 3], weights: CmcWeights) -> f64 {
    let [l1, a1, b1] = reference;
    let c1 = a1.hypot(b1);
    let h1 = hue_degrees(a1, b1);
    let d = Components::between(reference, sample);
    let s_l = if l1 < 16.0 {
        0.511
    } else {
        0.040975 * l1 / (1.0 + 0.01765 * l1)
    };
    let s_c = 0.0638 * c1 / (1.0 + 0.0131 * c1) + 0.638;
    let c4 = c1.powi(4);
    let f = (c4 / (c4 + 1900.0)).sqrt();
    let t = if (164.0..=345.0).contains(&h1) {
        0.56 + (0.2 * (h1 + 168.0).to_radians().cos()).abs()
    } else {
        0.36 + (0.4 * (h1 + 35.0).to_radians().cos()).abs()
    };
    let s_h = s_c * (f * t + 1.0 - f);
    ((d.lightness / (weights.lightness * s_l)).powi(2)
        + (d.chroma / (weights.chroma * s_c)).powi(2)
        + (d.hue / s_h).powi(2))
    .sqrt()
}

/// Hue angle `h = atan2(b*, a*)` in degrees, in [0, 360).
fn hue_degrees(a: f64, b: f64) -> f64 {
    let h = b.atan2(a).to_degrees();
    if h < 0.0 { h + 360.0 } else { h }
}

/// The CIELAB differences of a sample from a reference, as a colourist reads them: `ΔL*`
/// (positive: lighter), `ΔC*` (positive: more saturated) and `ΔH*`, the hue difference in
/// CIELAB units, `2√(C*₁C*₂) sin(Δh/2)` (positive: the sample's hue angle is larger, e.g. a red
/// that turned yellower), so that `ΔE*ab² = ΔL*² + ΔC*² + ΔH*²`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Components {
    pub lightness: f64,
    pub chroma: f64,
    pub hue: f64,
}

impl Components {
    /// The differences of `sample` from `reference` (`[L*, a*, b*]` each).
    pub fn between(reference: [f64; 3], sample: [f64; 3]) -> Self {
        let (c1, c2) = (reference[1].hypot(reference[2]), sample[1].hypot(sample[2]));
        let mut dh = hue_degrees(sample[1], sample[2]) - hue_degrees(reference[1], reference[2]);
        if dh > 180.0 {
            dh -= 360.0;
        } else if dh < -180.0 {
            dh += 360.0;
        }
        Self {
            lightness: sample[0] - reference[0],
            chroma: c2 - c1,
            hue: 2.0 * (c1 * c2).sqrt() * (dh.to_radians() / 2.0).sin(),
        }
    }
}

/// How far a sample's colour is from a reference's under one illuminant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Difference {
    /// CIEDE2000.
    pub de00: f64,
    /// CMC(l:c) with the weights asked for.
    pub cmc: f64,
    pub components: Components,
}

impl Difference {
    /// The difference of `sample` from `reference`, both under the same illuminant.
    pub fn between(
        reference: &CieLab,
        sample: &CieLab,
        weights: CmcWeights,
    ) -> Result<Self, ColourError> {
        let (r, s) = (reference.to_array(), sample.to_array());
        Ok(Self {
            de00: ciede2000(reference, sample)?,
            cmc: cmc(r, s, weights),
            components: Components::between(r, s),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs of Sharma, Wu & Dalal (2005), "The CIEDE2000 color-difference formula:
    /// implementation notes, supplementary test data, and mathematical observations", Table 1:
    /// (pair number, L*a*b* 1, L*a*b* 2, ΔE00 to four decimals).
    const SHARMA: [(u32, [f64; 3], [f64; 3], f64); 9] = [
        (1, [50.0, 2.6772, -79.7751], [50.0, 0.0, -82.7485], 2.0425),
        (2, [50.0, 3.1571, -77.2803], [50.0, 0.0, -82.7485], 2.8615),
        (7, [50.0, 0.0, 0.0], [50.0, -1.0, 2.0], 2.3669),
        (13, [50.0, 2.49, -0.001], [50.0, -2.49, 0.0009], 7.1792),
        (15, [50.0, 2.49, -0.001], [50.0, -2.49, 0.0011], 7.2195),
        (17, [50.0, 2.5, 0.0], [73.0, 25.0, -18.0], 27.1492),
        (19, [50.0, 2.5, 0.0], [56.0, -27.0, -3.0], 31.9030),
        (
            25,
            [60.2574, -34.0099, 36.2677],
            [60.4626, -34.1751, 39.4387],
            1.2644,
        ),
        (
            34,
            [2.0776, 0.0795, -1.1350],
            [0.9033, -0.0636, -0.5514],
            0.9082,
        ),
    ];

    #[test]
    fn the_tristimulus_weights_give_the_integrated_colour() {
        let curves: [fn(f64) -> f64; 3] = [
            |nm| 0.2 + 0.6 / (1.0 + (-(nm - 560.0) / 25.0).exp()),
            |nm| 0.05 + 0.5 * (-0.5 * ((nm - 470.0) / 30.0).powi(2)).exp(),
            |_| 1.0,
        ];
        for illuminant in Illuminant::ALL {
            let table = Tristimulus::of(illuminant).unwrap();
            assert_eq!(table.weights().len(), SAMPLES);
            for r in curves {
                let direct = lab(r, illuminant).unwrap();
                let mut xyz = [0.0; 3];
                for (k, w) in table.weights().iter().enumerate() {
                    let value = r((COLOUR_RANGE_NM.0 + k) as f64);
                    for (x, wx) in xyz.iter_mut().zip(w) {
                        *x += value * wx;
                    }
                }
                let weighed = table.lab(xyz);
                let (a, b) = (direct.to_array(), weighed.to_array());
                for (u, v) in a.iter().zip(&b) {
                    assert!(
                        (u - v).abs() < 1e-9,
                        "{}: {a:?} vs {b:?}",
                        illuminant.name()
                    );
                }
                assert!(ciede2000(&direct, &weighed).unwrap() < 1e-9);
            }
        }
        // No light reflected is black.
        let black = Tristimulus::of(Illuminant::A).unwrap().lab([0.0; 3]);
        assert_eq!(black.l(), 0.0);
    }

    #[test]
    fn ciede2000_matches_sharma_test_data() {
        for (pair, p, q, expected) in SHARMA {
            let d65 = Illuminant::D65;
            let (a, b) = (
                lab_coordinates(p[0], p[1], p[2], d65),
                lab_coordinates(q[0], q[1], q[2], d65),
            );
            let de = ciede2000(&a, &b).unwrap();
            assert!(
                (de - expected).abs() < 5e-5,
                "pair {pair}: {de} vs {expected}"
            );
            let back = ciede2000(&b, &a).unwrap();
            assert!((back - de).abs() < 1e-12, "pair {pair} is symmetric");
        }
    }

    /// CMC(2:1) and CMC(1:1) of reference → sample pairs, as computed by an independent
    /// implementation (colour-science 0.4.7, `colour.delta_E(reference, sample, method="CMC")`),
    /// covering both branches of `T` and of `S_L`.
    const CMC: [([f64; 3], [f64; 3], f64, f64); 6] = [
        (
            [50.0, 2.6772, -79.7751],
            [50.0, 0.0, -82.7485],
            1.73873610573,
            1.73873610573,
        ),
        (
            [60.2574, -34.0099, 36.2677],
            [60.4626, -34.1751, 39.4387],
            1.42048604536,
            1.4282295093,
        ),
        (
            [50.0, 2.5, 0.0],
            [73.0, 25.0, -18.0],
            37.9232761694,
            42.1087548456,
        ),
        (
            [10.0, 5.0, -3.0],
            [12.0, 4.0, -2.0],
            2.44428638743,
            4.1789307883,
        ),
        (
            [70.0, -30.0, 60.0],
            [69.0, -28.0, 63.0],
            1.66539081093,
            1.7969749849,
        ),
        (
            [40.0, 20.0, -50.0],
            [41.0, 18.0, -52.0],
            1.76980478412,
            1.98614706018,
        ),
    ];

    #[test]
    fn cmc_matches_an_independent_implementation() {
        let perceptibility = CmcWeights {
            lightness: 1.0,
            chroma: 1.0,
        };
        for (reference, sample, two_one, one_one) in CMC {
            let de = cmc(reference, sample, CmcWeights::default());
            assert!(
                (de - two_one).abs() < 1e-8,
                "{reference:?}: {de} vs {two_one}"
            );
            let de = cmc(reference, sample, perceptibility);
            assert!(
                (de - one_one).abs() < 1e-8,
                "{reference:?}: {de} vs {one_one}"
            );
        }
        // Not symmetric: the reference sets the ellipsoid.
        let (r, s) = (CMC[2].0, CMC[2].1);
        let w = CmcWeights::default();
        assert!((cmc(r, s, w) - cmc(s, r, w)).abs() > 1.0);
        assert_eq!(cmc(r, r, w), 0.0);
    }

    #[test]
    fn the_components_add_up_to_the_cielab_difference() {
        for (reference, sample, _, _) in CMC {
            let d = Components::between(reference, sample);
            let dab: f64 = (0..3).map(|i| (sample[i] - reference[i]).powi(2)).sum();
            let sum = d.lightness.powi(2) + d.chroma.powi(2) + d.hue.powi(2);
            assert!((sum - dab).abs() < 1e-9 * dab.max(1.0), "{sum} vs {dab}");
        }
        // A red turned yellower (hue angle up) has ΔH* > 0, a duller one ΔC* < 0.
        let d = Components::between([50.0, 60.0, 10.0], [50.0, 50.0, 20.0]);
        assert!(d.hue > 0.0 && d.chroma < 0.0 && d.lightness == 0.0, "{d:?}");
        // Across a* > 0, b* = 0 the hue angle wraps: 350° → 10° is +20°, not −340°.
        let d = Components::between([50.0, 40.0, -7.0], [50.0, 40.0, 7.0]);
        assert!(d.hue > 0.0 && (d.hue - 14.0).abs() < 0.1, "{d:?}");
    }

    #[test]
    fn whites_are_the_cie_white_points_of_the_ten_degree_observer() {
        // CIE 15 (10°): D65 (94.811, 100, 107.304), A (111.144, 100, 35.200),
        // F11 (103.866, 100, 65.627).
        for (illuminant, [xn, zn]) in [
            (Illuminant::D65, [94.811, 107.304]),
            (Illuminant::A, [111.144, 35.200]),
            (Illuminant::F11, [103.866, 65.627]),
        ] {
            let white = lab_coordinates(100.0, 0.0, 0.0, illuminant).white_point();
            let [x, y, z] = white.set_illuminance(100.0).to_array();
            assert!((x - xn).abs() < 0.1, "{illuminant:?}: X {x}");
            assert!((y - 100.0).abs() < 1e-9, "{illuminant:?}: Y {y}");
            assert!((z - zn).abs() < 0.1, "{illuminant:?}: Z {z}");
            let [l, a, b] = lab(|_| 1.0, illuminant).unwrap().to_array();
            assert!((l - 100.0).abs() < 1e-6 && a.abs() < 1e-6 && b.abs() < 1e-6);
        }
        // A neutral grey of 18 % reflectance has L* ≈ 49.5 and no hue under any light.
        for illuminant in Illuminant::ALL {
            let [l, a, b] = lab(|_| 0.18, illuminant).unwrap().to_array();
            assert!(
                (l - 49.5).abs() < 0.1 && a.abs() < 1e-6 && b.abs() < 1e-6,
                "{l}"
            );
        }
    }

    /// An orange's CIELAB under each illuminant, against colour-science 0.4.7 (`sd_to_XYZ` by
    /// integration at 1 nm over 380–780 nm, CIE 1964 10°, then `XYZ_to_Lab` on the
    /// illuminant's white).
    #[test]
    fn an_orange_under_daylight_tungsten_and_shop_light() {
        let orange = |nm: f64| 0.2 + 0.6 / (1.0 + (-(nm - 550.0) / 20.0).exp());
        for (illuminant, expected) in [
            (Illuminant::D65, [76.43337969, 20.85512448, 40.68034417]),
            (Illuminant::A, [80.95576062, 22.82865147, 47.73154534]),
            (Illuminant::F11, [79.28144944, 18.05085537, 45.75812244]),
        ] {
            let got = lab(orange, illuminant).unwrap().to_array();
            for (g, e) in got.iter().zip(expected) {
                assert!(
                    (g - e).abs() < 0.05,
                    "{illuminant:?}: {got:?} vs {expected:?}"
                );
            }
        }
        assert!(lab(|_| f64::NAN, Illuminant::A).is_err());
    }

    #[test]
    fn colours_under_different_lights_are_not_compared() {
        let (d65, a) = (
            lab(|_| 0.5, Illuminant::D65).unwrap(),
            lab(|_| 0.5, Illuminant::A).unwrap(),
        );
        assert!(Difference::between(&d65, &a, CmcWeights::default()).is_err());
        let same = Difference::between(&d65, &d65, CmcWeights::default()).unwrap();
        assert_eq!((same.de00, same.cmc), (0.0, 0.0));
    }
}
