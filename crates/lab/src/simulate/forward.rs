//! The Kubelka–Munk forward model: from a recipe on a fabric to its reflectance.
//!
//! For an opaque, light-scattering dyed fabric the Kubelka–Munk theory relates the reflectance
//! `R∞(λ)` (a fraction) of an infinitely thick layer to the ratio of its absorption `K` and
//! scattering `S` coefficients:
//!
//! ```text
//! K/S = (1 − R)² / (2R)                        (Kubelka–Munk function)
//! R   = 1 + K/S − √((K/S)² + 2 K/S)            (its inverse, the root of R² − 2(1 + K/S)R + 1 = 0 in (0, 1])
//! ```
//!
//! Dyes absorb, the fibre scatters, and absorptions add, so with concentrations `cᵢ` (% on
//! weight of fibre, "% owf") and each dye's unit K/S curve `kᵢ(λ)` (the K/S that 1 % owf of it
//! adds):
//!
//! ```text
//! K/S(λ) = K/S_substrate(λ) + Σᵢ cᵢ · kᵢ(λ)
//! ```
//!
//! Every dye curve here is a sum of Gaussian absorption bands
//! `kᵢ(λ) = Σ_b a_b · exp(−(λ − λ_b)² / (2 w_b²))` with centre `λ_b` (nm), width `w_b` (the
//! standard deviation in nm; FWHM = 2.355 w_b) and unit strength `a_b` (K/S per 1 % owf at the
//! band centre). The centres follow the usual absorption maxima of the hues (a yellow absorbs
//! blue light near 420–450 nm, a red green light near 500–540 nm, a blue orange-red light near
//! 590–640 nm); the strengths put a 1 % owf dyeing at K/S 5–14 at its maximum, the range of
//! reactive dyes on cotton.
//!
//! That is the ideal world ([`Physics::IDEAL`]), linear in K/S as the regression assumes. The
//! realistic world ([`Physics::REALISTIC`], `--world realistic`) adds what a dye house also
//! sees, each documented on its field of [`Physics`]: surface reflection (Saunderson), build-up
//! that saturates at depth, and fabric lots that differ in dye yield and whiteness:
//!
//! ```text
//! K/S(λ) = w · K/S_substrate(λ) + Σᵢ sᵢ kᵢ(λ) · cᵢ' / (1 + cᵢ' / c_sat),   cᵢ' = y · cᵢ · e^{εᵢ}
//! R_m(λ) = k₁ + (1 − k₁)(1 − k₂) R(λ) / (1 − k₂ R(λ)),   R(λ) = KM⁻¹(K/S(λ))
//! ```
//!
//! with the lot's yield `y` and whiteness factor `w` (log-normal about 1), each dyeing's uptake
//! spread `εᵢ` (the noise model's) and the dye lots' strengths `sᵢ`.
//!
//! All functions here are pure.

/// One Gaussian absorption band of a dye, `a · exp(−(λ − centre)² / (2 width²))`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Band {
    /// Wavelength of maximum absorption, nm.
    pub centre_nm: f64,
    /// Standard deviation of the band, nm (its FWHM is 2.355 times this).
    pub width_nm: f64,
    /// K/S added at the band centre by 1 % owf of the dye.
    pub strength: f64,
}

impl Band {
    /// The band's K/S per 1 % owf at wavelength `nm`.
    #[inline]
    pub fn at(&self, nm: f64) -> f64 {
        let z = (nm - self.centre_nm) / self.width_nm;
        self.strength * (-0.5 * z * z).exp()
    }
}

/// A dye of the range: its name (the CSV column and the model's output name) and its bands.
#[derive(Clone, Debug, PartialEq)]
pub struct Dye {
    pub name: &'static str,
    pub bands: Vec<Band>,
}

impl Dye {
    /// The unit K/S curve `k(λ) = Σ_b a_b exp(−(λ − λ_b)² / (2 w_b²))`: K/S per 1 % owf.
    pub fn unit_ks(&self, nm: f64) -> f64 {
        self.bands.iter().map(|b| b.at(nm)).sum()
    }
}

fn band(centre_nm: f64, width_nm: f64, strength: f64) -> Band {
    Band {
        centre_nm,
        width_nm,
        strength,
    }
}

/// The dye range of the simulated dye house: ten reactive-type dyes.
///
/// | name | bands (centre nm / width nm / K/S per 1 % owf) | hue |
/// | --- | --- | --- |
/// | `yellow_1` | 415/28/8 | greenish yellow |
/// | `yellow_2` | 450/35/10 | golden yellow |
/// | `orange_1` | 485/38/9 | orange |
/// | `red_1` | 505/35/11 | scarlet |
/// | `red_2` | 540/30/10 + 500/25/4 | bluish red |
/// | `violet_1` | 565/38/9 + 420/30/2 | violet |
/// | `blue_1` | 600/38/10 + 640/30/6 | royal blue |
/// | `turquoise_1` | 625/28/7 + 665/25/5 | turquoise |
/// | `navy_1` | 585/55/12 + 460/40/3 | navy |
/// | `black_1` | 560/100/14 + 420/50/4 | black |
pub fn dye_range() -> Vec<Dye> {
    vec![
        Dye {
            name: "yellow_1",
            bands: vec![band(415.0, 28.0, 8.0)],
        },
        Dye {
            name: "yellow_2",
            bands: vec![band(450.0, 35.0, 10.0)],
        },
        Dye {
            name: "orange_1",
            bands: vec![band(485.0, 38.0, 9.0)],
        },
        Dye {
            name: "red_1",
            bands: vec![band(505.0, 35.0, 11.0)],
        },
        Dye {
            name: "red_2",
            bands: vec![band(540.0, 30.0, 10.0), band(500.0, 25.0, 4.0)],
        },
        Dye {
            name: "violet_1",
            bands: vec![band(565.0, 38.0, 9.0), band(420.0, 30.0, 2.0)],
        },
        Dye {
            name: "blue_1",
            bands: vec![band(600.0, 38.0, 10.0), band(640.0, 30.0, 6.0)],
        },
        Dye {
            name: "turquoise_1",
            bands: vec![band(625.0, 28.0, 7.0), band(665.0, 25.0, 5.0)],
        },
        Dye {
            name: "navy_1",
            bands: vec![band(585.0, 55.0, 12.0), band(460.0, 40.0, 3.0)],
        },
        Dye {
            name: "black_1",
            bands: vec![band(560.0, 100.0, 14.0), band(420.0, 50.0, 4.0)],
        },
    ]
}

/// The families of a trichromatic recipe, indices into [`dye_range`]: the yellows and orange,
/// the reds and violet, the blues, navy and black. A recipe takes one dye of each.
pub const DYE_FAMILIES: [&[usize]; 3] = [&[0, 1, 2], &[3, 4, 5], &[6, 7, 8, 9]];

/// A fabric: its code (the `substrate` feature), name and undyed K/S curve
/// `K/S_substrate(λ) = base + blue · exp(−(λ − 380)/decay_nm)`: a flat floor (the white's
/// residual absorption) plus the yellowness of natural fibre, absorption that rises towards
/// the blue and ultraviolet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Substrate {
    pub code: u32,
    pub name: &'static str,
    /// K/S of the flat floor.
    pub base: f64,
    /// Extra K/S at 380 nm.
    pub blue: f64,
    /// Decay length of the blue absorption, nm.
    pub decay_nm: f64,
}

impl Substrate {
    /// `K/S_substrate(λ)`.
    pub fn ks(&self, nm: f64) -> f64 {
        self.base + self.blue * (-(nm - 380.0) / self.decay_nm).exp()
    }
}

/// The fabrics in production before any drift. Undyed reflectance at 550 nm: bleached cotton
/// ≈ 86 %, greige ≈ 73 %, polyester/cotton ≈ 81 %.
///
/// | code | name | base | blue (at 380 nm) | decay nm |
/// | --- | --- | --- | --- | --- |
/// | 0 | `bleached_cotton` | 0.010 | 0.05 | 40 |
/// | 1 | `greige_cotton` | 0.025 | 0.45 | 60 |
/// | 2 | `polyester_cotton` | 0.018 | 0.15 | 50 |
pub fn substrates() -> Vec<Substrate> {
    vec![
        Substrate {
            code: 0,
            name: "bleached_cotton",
            base: 0.010,
            blue: 0.05,
            decay_nm: 40.0,
        },
        Substrate {
            code: 1,
            name: "greige_cotton",
            base: 0.025,
            blue: 0.45,
            decay_nm: 60.0,
        },
        Substrate {
            code: 2,
            name: "polyester_cotton",
            base: 0.018,
            blue: 0.15,
            decay_nm: 50.0,
        },
    ]
}

/// The fabric of the `new_substrate` scenario, code 3: a viscose with a creamy tint,
/// base 0.025, blue 0.35, decay 70 nm (≈ 72 % at 550 nm).
pub fn new_substrate() -> Substrate {
    Substrate {
        code: 3,
        name: "viscose",
        base: 0.025,
        blue: 0.35,
        decay_nm: 70.0,
    }
}

/// Kubelka–Munk function `K/S = (1 − R)² / (2R)` of a reflectance fraction `R ∈ (0, 1]`.
#[inline]
pub fn ks_from_reflectance(r: f64) -> f64 {
    (1.0 - r) * (1.0 - r) / (2.0 * r)
}

/// Its inverse, the estimator's (the forward map predicts reflectance with it too).
pub use mordant_estimator::basis::reflectance_from_ks;

pub use mordant_estimator::Saunderson;

/// The physics of a simulated world beyond the linear Kubelka–Munk mixture.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Physics {
    /// Light reflected at the fabric's surface, read by the instrument with the body's
    /// ([`Saunderson`]); `None`: the instrument reads the body's reflectance.
    pub surface: Option<Saunderson>,
    /// Build-up: dye taken up at `c` % owf colours like `c / (1 + c / c_sat)` of it would in
    /// the linear world (a Langmuir-type isotherm: the fibre's dye sites fill). `None`: linear.
    pub saturation_owf: Option<f64>,
    /// Log-normal standard deviation of a fabric lot's dye yield `y` (every dye alike: the
    /// lot's pretreatment, its mercerisation and residual alkali), which every dyeing on the
    /// lot shares.
    pub lot_yield_rel: f64,
    /// Log-normal standard deviation of a fabric lot's own K/S (its whiteness after bleaching).
    pub lot_substrate_rel: f64,
}

impl Physics {
    /// The linear-in-K/S world the regression assumes: no surface, no saturation, every lot
    /// alike.
    pub const IDEAL: Physics = Physics {
        surface: None,
        saturation_owf: None,
        lot_yield_rel: 0.0,
        lot_substrate_rel: 0.0,
    };

    /// The world of a real dye house, with textbook figures:
    /// - the surface of [`Saunderson::TEXTILE`] (`k₁ = 0.04`, `k₂ = 0.6`);
    /// - `c_sat = 8` % owf: a 4 % owf dyeing shows two thirds of the colour a linear build-up
    ///   would give, 1 % owf 89 % (reactive dyes on cotton flatten above 3–5 % owf);
    /// - lots differing by 4 % in dye yield and 10 % in their own K/S.
    pub const REALISTIC: Physics = Physics {
        surface: Some(Saunderson::TEXTILE),
        saturation_owf: Some(8.0),
        lot_yield_rel: 0.04,
        lot_substrate_rel: 0.10,
    };

    /// The concentration `c` (% owf taken up) colours like in the linear world:
    /// `c / (1 + c / c_sat)`, or `c`.
    #[inline]
    pub fn effective(&self, c: f64) -> f64 {
        match self.saturation_owf {
            Some(sat) => c / (1.0 + c / sat),
            None => c,
        }
    }

    /// The reflectance fraction an instrument reads of a layer with K/S `ks`:
    /// `KM⁻¹(K/S)`, through the surface when the world has one.
    #[inline]
    pub fn reading(&self, ks: f64) -> f64 {
        let r = reflectance_from_ks(ks);
        match self.surface {
            Some(surface) => surface.measured(r),
            None => r,
        }
    }
}

/// `K/S(λ) = K/S_substrate(λ) + Σᵢ cᵢ kᵢ(λ)` for concentrations `c` (% owf, one per dye of
/// `dyes`, in the same order) and per-dye strength factors `strength` (1 for the reference dye
/// lot).
pub fn mixture_ks(
    substrate: &Substrate,
    dyes: &[Dye],
    c: &[f64],
    strength: &[f64],
    nm: f64,
) -> f64 {
    substrate.ks(nm)
        + dyes
            .iter()
            .zip(c)
            .zip(strength)
            .filter(|((_, c), _)| **c != 0.0)
            .map(|((dye, c), s)| c * s * dye.unit_ks(nm))
            .sum::<f64>()
}

/// The noise-free reflectance fraction of the recipe `c` on `substrate` at `nm`.
pub fn reflectance(
    substrate: &Substrate,
    dyes: &[Dye],
    c: &[f64],
    strength: &[f64],
    nm: f64,
) -> f64 {
    reflectance_from_ks(mixture_ks(substrate, dyes, c, strength, nm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflectance_formula_is_the_root_in_the_unit_interval() {
        for ks in [0.0, 1e-4, 0.25, 1.0, 7.5, 40.0, 1e4] {
            let r = reflectance_from_ks(ks);
            let direct = 1.0 + ks - (ks * ks + 2.0 * ks).sqrt();
            assert!(
                (r - direct).abs() <= 1e-12 * (1.0 + ks),
                "ks {ks}: {r} vs {direct}"
            );
            assert!(r > 0.0 && r <= 1.0);
            // R solves R² − 2(1 + K/S)R + 1 = 0.
            assert!((r * r - 2.0 * (1.0 + ks) * r + 1.0).abs() < 1e-9);
        }
        assert_eq!(reflectance_from_ks(0.0), 1.0);
        assert!((reflectance_from_ks(0.25) - 0.5).abs() < 1e-15);
    }

    #[test]
    fn kubelka_munk_round_trips() {
        for ks in [1e-3, 0.05, 0.5, 3.0, 25.0, 300.0] {
            let back = ks_from_reflectance(reflectance_from_ks(ks));
            assert!((back - ks).abs() <= 1e-9 * ks, "{ks} → {back}");
        }
        for r in [0.005, 0.02, 0.3, 0.8, 0.999] {
            let back = reflectance_from_ks(ks_from_reflectance(r));
            assert!((back - r).abs() < 1e-12, "{r} → {back}");
        }
        // It agrees with the estimator's basis transform.
        let km = mordant_estimator::Transform::KubelkaMunk;
        assert!((km.apply(0.37) - ks_from_reflectance(0.37)).abs() < 1e-15);
    }

    #[test]
    fn mixture_is_linear_in_the_recipe_in_ks_space() {
        let dyes = dye_range();
        let sub = substrates()[1];
        let ones = vec![1.0; dyes.len()];
        let mut a = vec![0.0; dyes.len()];
        let mut b = vec![0.0; dyes.len()];
        a[0] = 0.4;
        a[6] = 1.1;
        b[3] = 0.7;
        let sum: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        for nm in [400.0, 510.0, 620.0, 700.0] {
            let lhs = mixture_ks(&sub, &dyes, &sum, &ones, nm) - sub.ks(nm);
            let rhs = mixture_ks(&sub, &dyes, &a, &ones, nm)
                + mixture_ks(&sub, &dyes, &b, &ones, nm)
                - 2.0 * sub.ks(nm);
            assert!((lhs - rhs).abs() < 1e-12);
        }
        // More dye, darker at its absorption maximum; reflectance never above the fabric's.
        let mut deep = vec![0.0; dyes.len()];
        deep[3] = 3.0;
        let pale = reflectance(&sub, &dyes, &a, &ones, 505.0);
        assert!(reflectance(&sub, &dyes, &deep, &ones, 505.0) < pale);
        assert!(pale < reflectance(&sub, &dyes, &vec![0.0; dyes.len()], &ones, 505.0));
    }

    #[test]
    fn palette_is_documented_and_physical() {
        let dyes = dye_range();
        assert_eq!(dyes.len(), 10);
        let mut names: Vec<_> = dyes.iter().map(|d| d.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 10, "dye names are unique");
        for dye in &dyes {
            let peak = (380..=780)
                .map(|nm| dye.unit_ks(nm as f64))
                .fold(0.0, f64::max);
            assert!((5.0..=16.0).contains(&peak), "{}: {peak}", dye.name);
        }
        for s in substrates().iter().chain([new_substrate()].iter()) {
            let r550 = reflectance_from_ks(s.ks(550.0));
            assert!((0.7..0.95).contains(&r550), "{}: {r550}", s.name);
            assert!(s.ks(400.0) > s.ks(700.0), "natural fibre is yellowish");
        }
    }
}
