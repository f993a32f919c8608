//! Colour of a reflectance spectrum and colour differences, through the `colorimetry` crate.
//!
//! A reflectance `R(λ)` (a fraction) is sampled every 1 nm from 380 to 780 nm, lit by CIE
//! standard illuminant D65 and seen by the CIE 1964 10° standard observer:
//! `X = k Σ S(λ) R(λ) x̄₁₀(λ)` (and Y, Z alike) with `k = 100 / Σ S(λ) ȳ₁₀(λ)`, then CIELAB
//! relative to the white `R ≡ 1` under the same illuminant and observer, and CIEDE2000
//! (`k_L = k_C = k_H = 1`) between two such colours. The illuminant, colour-matching functions,
//! CIELAB and CIEDE2000 all come from `colorimetry` (its CIE tables are compiled in); this module
//! only samples the spectrum.

use colorimetry::colorant::Colorant;
use colorimetry::lab::CieLab;
use colorimetry::observer::Observer;
use colorimetry::spectrum::Spectrum;

/// First and last wavelength (nm) and the number of 1 nm samples `colorimetry` integrates over.
pub const COLOUR_RANGE_NM: (usize, usize) = (380, 780);
const SAMPLES: usize = COLOUR_RANGE_NM.1 - COLOUR_RANGE_NM.0 + 1;

/// Errors of the colour computations.
#[derive(Debug, thiserror::Error)]
pub enum ColourError {
    #[error("reflectance at {nm} nm is {value}, not a finite number")]
    NonFinite { nm: usize, value: f64 },
    #[error("colour difference: {0}")]
    Colorimetry(#[from] colorimetry::Error),
}

/// CIELAB (D65, CIE 1964 10°) of the reflectance fraction `r(λ)`, sampled every 1 nm over
/// [`COLOUR_RANGE_NM`] and clamped to [0, 1] (a surface colour).
pub fn lab_d65_10(r: impl Fn(f64) -> f64) -> Result<CieLab, ColourError> {
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
    Ok(Observer::Cie1964.lab_d65(&colorant))
}

/// A CIELAB colour given by its coordinates, relative to D65 for the CIE 1964 10° observer.
pub fn lab(l: f64, a: f64, b: f64) -> CieLab {
    CieLab::new([l, a, b], Observer::Cie1964.xyz_d65())
}

/// CIEDE2000 colour difference ΔE00 between two colours of the same white and observer.
pub fn ciede2000(a: &CieLab, b: &CieLab) -> Result<f64, ColourError> {
    Ok(a.ciede2000(b)?)
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
    fn ciede2000_matches_sharma_test_data() {
        for (pair, p, q, expected) in SHARMA {
            let (a, b) = (lab(p[0], p[1], p[2]), lab(q[0], q[1], q[2]));
            let de = ciede2000(&a, &b).unwrap();
            assert!(
                (de - expected).abs() < 5e-5,
                "pair {pair}: {de} vs {expected}"
            );
            let back = ciede2000(&b, &a).unwrap();
            assert!((back - de).abs() < 1e-12, "pair {pair} is symmetric");
        }
    }

    #[test]
    fn white_is_the_d65_ten_degree_white_point() {
        // D65 for the CIE 1964 10° observer: X = 94.811, Y = 100, Z = 107.304 (CIE 15).
        let [x, y, z] = Observer::Cie1964
            .xyz_d65()
            .set_illuminance(100.0)
            .to_array();
        assert!((x - 94.811).abs() < 0.05, "{x}");
        assert!((y - 100.0).abs() < 1e-9, "{y}");
        assert!((z - 107.304).abs() < 0.05, "{z}");
        let [l, a, b] = lab_d65_10(|_| 1.0).unwrap().to_array();
        assert!((l - 100.0).abs() < 1e-6 && a.abs() < 1e-6 && b.abs() < 1e-6);
        // A neutral grey of 18 % reflectance has L* ≈ 49.5 and no hue.
        let [l, a, b] = lab_d65_10(|_| 0.18).unwrap().to_array();
        assert!(
            (l - 49.5).abs() < 0.1 && a.abs() < 1e-6 && b.abs() < 1e-6,
            "{l}"
        );
    }

    #[test]
    fn hues_land_where_they_should() {
        // Absorbing blue light (a yellow) gives b* > 0; absorbing green light (a magenta) a* > 0.
        let yellow = lab_d65_10(|nm| if nm < 500.0 { 0.1 } else { 0.9 }).unwrap();
        assert!(yellow.b() > 40.0, "{yellow:?}");
        let magenta = lab_d65_10(|nm| {
            if (500.0..600.0).contains(&nm) {
                0.1
            } else {
                0.9
            }
        })
        .unwrap();
        assert!(magenta.a() > 40.0, "{magenta:?}");
        assert!(lab_d65_10(|_| f64::NAN).is_err());
    }
}
