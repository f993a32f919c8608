//! The basis map `φ(x) = (t(r₁), …, t(r_s), x₁, …, x_e, 1)`.
//!
//! A model's raw inputs are an optional reflectance spectrum `r` (its `s` bands, first) and
//! `e` other named features `x` (a fabric code, a lab-dip concentration, …). The transform `t`
//! applies to the spectral bands only; the other features always enter as they are.

use faer::{Mat, MatRef};

use super::EstimatorError;

/// Reflectance below this fraction is clamped before the Kubelka–Munk function, which has a
/// pole at `R = 0` (a band that read 0 was not measured, it is not infinitely absorbing).
pub const MIN_REFLECTANCE: f64 = 1e-3;

/// Saunderson's correction for the light a dyed fabric reflects at its surface, which never
/// enters the fibre and so carries no absorption:
///
/// ```text
/// R_m = k₁ + (1 − k₁)(1 − k₂) R_i / (1 − k₂ R_i)        (what the instrument reads)
/// R_i = (R_m − k₁) / (1 − k₁ − k₂ + k₂ R_m)              (its inverse: the body's reflectance)
/// ```
///
/// `k₁` is the share of collimated incident light reflected at the surface (Fresnel at normal
/// incidence, `((n − 1)/(n + 1))²`: 0.04 for a refractive index n = 1.5, cellulose and polyester
/// alike); `k₂` the share of diffuse light from inside reflected back in at the surface (0.4–0.6
/// for textiles; 0.6 the value most often used in colour matching). Kubelka–Munk holds for
/// `R_i`, the body's reflectance, not for `R_m`: without the correction a deep shade's K/S is
/// capped near `K/S(k₁)` and a linear map from concentrations bends at depth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Saunderson {
    /// External (specular) surface reflectance, in [0, 1).
    pub k1: f64,
    /// Internal reflectance of diffuse light at the surface, in [0, 1).
    pub k2: f64,
}

impl Saunderson {
    /// `k₁ = 0.04` (n = 1.5), `k₂ = 0.6`: the textbook values for textiles.
    pub const TEXTILE: Saunderson = Saunderson { k1: 0.04, k2: 0.6 };

    /// Whether `k₁` and `k₂` are finite and in [0, 1), where both directions are defined.
    pub fn is_valid(&self) -> bool {
        (0.0..1.0).contains(&self.k1) && (0.0..1.0).contains(&self.k2)
    }

    /// `R_m = k₁ + (1 − k₁)(1 − k₂) R_i / (1 − k₂ R_i)`: the reading of a body reflecting `R_i`.
    #[inline]
    pub fn measured(&self, r_i: f64) -> f64 {
        self.k1 + (1.0 - self.k1) * (1.0 - self.k2) * r_i / (1.0 - self.k2 * r_i)
    }

    /// `R_i = (R_m − k₁) / (1 − k₁ − k₂ + k₂ R_m)`: the body's reflectance behind a reading,
    /// clamped to [[`MIN_REFLECTANCE`], 1] (a reading below `k₁` is noise on a black).
    #[inline]
    pub fn internal(&self, r_m: f64) -> f64 {
        if r_m <= self.k1 {
            return MIN_REFLECTANCE;
        }
        // The denominator is at least (1 − k₁)(1 − k₂) > 0 above k₁.
        let r = (r_m - self.k1) / (1.0 - self.k1 - self.k2 + self.k2 * r_m);
        r.clamp(MIN_REFLECTANCE, 1.0)
    }

    /// `dR_m/dR_i = (1 − k₁)(1 − k₂) / (1 − k₂ R_i)²`.
    #[inline]
    pub fn slope(&self, r_i: f64) -> f64 {
        (1.0 - self.k1) * (1.0 - self.k2) / (1.0 - self.k2 * r_i).powi(2)
    }
}

/// The transform `t` applied to the spectral inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Transform {
    /// `t(x) = x`.
    #[default]
    Identity,
    /// `t(R) = (1 − R)² / (2R)`, the Kubelka–Munk ratio K/S of absorption to scattering, with
    /// `R` the reflectance as a fraction clamped below at [`MIN_REFLECTANCE`] (and at 1 above,
    /// for a declared spectrum: see [`Basis::spectral`]).
    ///
    /// Why it makes concentrations linear: for an opaque, light-scattering dyed layer the
    /// Kubelka–Munk theory gives `K/S = (1 − R∞)² / (2R∞)`, and absorption and scattering add
    /// over the colorants present, `K = K_sub + Σ cᵢkᵢ`, `S ≈ S_sub` (dyes absorb, the fibre
    /// scatters). Hence `K/S(λ) = K/S_sub(λ) + Σ cᵢ (kᵢ(λ)/S_sub(λ))`: at every wavelength K/S
    /// is the substrate's plus a sum of concentrations times unit absorptions, linear in the
    /// recipe, whereas reflectance itself is not.
    KubelkaMunk,
    /// `t(R_m) = KM(R_i(R_m))`: Kubelka–Munk of the body's reflectance once the surface's is
    /// taken out by [`Saunderson`]'s inverse. With `k₁ = k₂ = 0` it is [`Transform::KubelkaMunk`].
    Saunderson(Saunderson),
}

impl Transform {
    /// `t(R)` for one reflectance fraction.
    #[inline]
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Transform::Identity => x,
            Transform::KubelkaMunk => kubelka_munk(x.max(MIN_REFLECTANCE)),
            Transform::Saunderson(s) => kubelka_munk(s.internal(x)),
        }
    }

    /// Whether `t` reads reflectance and gives K/S (every transform but the identity).
    pub fn is_kubelka_munk(self) -> bool {
        self != Transform::Identity
    }

    /// The reflectance fraction an instrument reads for K/S `ks`: `t⁻¹` of a Kubelka–Munk
    /// transform ([`reflectance_from_ks`], then [`Saunderson::measured`] when it has one).
    #[inline]
    pub fn reflectance(self, ks: f64) -> f64 {
        let r = reflectance_from_ks(ks);
        match self {
            Transform::Saunderson(s) => s.measured(r),
            Transform::Identity | Transform::KubelkaMunk => r,
        }
    }

    /// `|dR_m / d(K/S)|` at a reading `r` (fraction), how much the reading moves per unit of
    /// K/S: `2R_i² / (1 − R_i²)` (Kubelka–Munk's inverse, at the body's reflectance `R_i` behind
    /// the reading, which is capped at `r_max` because the derivative grows without bound
    /// towards 1), times [`Saunderson::slope`] when the transform has a surface.
    #[inline]
    pub fn sensitivity(self, r: f64, r_max: f64) -> f64 {
        let r = r.min(r_max);
        let body = match self {
            Transform::Saunderson(s) => s.internal(r),
            Transform::Identity | Transform::KubelkaMunk => r.max(MIN_REFLECTANCE),
        };
        let km = 2.0 * body * body / (1.0 - body * body);
        match self {
            Transform::Saunderson(s) => km * s.slope(body),
            Transform::Identity | Transform::KubelkaMunk => km,
        }
    }
}

/// `(1 − R)² / (2R)`.
#[inline]
fn kubelka_munk(r: f64) -> f64 {
    (1.0 - r) * (1.0 - r) / (2.0 * r)
}

/// The inverse of Kubelka–Munk's `K/S = (1 − R)²/(2R)`: `R = 1 + K/S − √((K/S)² + 2 K/S)`, the
/// root in (0, 1], for `K/S ≥ 0` (a negative K/S, which no surface has, reads as 0: R = 1).
///
/// Written as `R = 1 / (1 + K/S + √((K/S)² + 2 K/S))`, the same root (the product of the two
/// roots of `R² − 2(1 + K/S)R + 1` is 1), which loses no digits to cancellation when K/S is large.
#[inline]
pub fn reflectance_from_ks(ks: f64) -> f64 {
    let ks = ks.max(0.0);
    1.0 / (1.0 + ks + (ks * ks + 2.0 * ks).sqrt())
}

/// How a spectrum's reflectances are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReflectanceScale {
    /// 0 to 1.
    #[default]
    Fraction,
    /// 0 to 100.
    Percent,
}

impl ReflectanceScale {
    /// The factor that turns a value on this scale into a fraction.
    #[inline]
    pub fn to_fraction(self) -> f64 {
        match self {
            ReflectanceScale::Fraction => 1.0,
            ReflectanceScale::Percent => 0.01,
        }
    }

    /// Full reflectance (a perfect white) on this scale.
    pub fn full(self) -> f64 {
        1.0 / self.to_fraction()
    }
}

/// How raw input rows become basis vectors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Basis {
    /// Number of raw input features `d = s + e`.
    pub features: usize,
    /// The first `s` raw inputs are a reflectance spectrum (`s ≤ d`).
    pub spectral: usize,
    /// How the spectral inputs are written.
    pub scale: ReflectanceScale,
    /// Whether a constant `1` is appended (`p = d + 1`).
    pub intercept: bool,
    /// Applied to the spectral inputs only.
    pub transform: Transform,
    /// The model declared its spectrum ([`Basis::spectral`]): reflectance above full scale
    /// (optical brighteners fluoresce) carries no absorption and is read as 1 (K/S = 0).
    /// Bases built by [`Basis::new`] keep the meaning they always had: the formula as it is.
    pub declared: bool,
}

impl Basis {
    /// Whether a model with this basis can match recipes (see [`super::recipe`]): a declared
    /// spectrum under Kubelka–Munk (Saunderson's or not), and an intercept (the fabric's own K/S). Only such models
    /// keep `YᵀY`.
    pub fn can_match(&self) -> bool {
        self.declared && self.spectral > 0 && self.transform.is_kubelka_munk() && self.intercept
    }

    /// A basis over `features` inputs. With [`Transform::KubelkaMunk`] every input is read as
    /// a reflectance fraction (models that declare no spectrum); see [`Basis::spectral`].
    pub fn new(features: usize, intercept: bool, transform: Transform) -> Self {
        let spectral = match transform {
            Transform::Identity => 0,
            Transform::KubelkaMunk | Transform::Saunderson(_) => features,
        };
        Self {
            features,
            spectral,
            scale: ReflectanceScale::Fraction,
            intercept,
            transform,
            declared: false,
        }
    }

    /// A basis whose first `spectral` of `features` inputs are a spectrum on `scale`,
    /// transformed by `transform`; the rest enter unchanged.
    pub fn spectral(
        spectral: usize,
        scale: ReflectanceScale,
        features: usize,
        intercept: bool,
        transform: Transform,
    ) -> Self {
        debug_assert!(spectral <= features);
        Self {
            features,
            spectral: spectral.min(features),
            scale,
            intercept,
            transform,
            declared: true,
        }
    }

    /// Number of basis functions `p`.
    pub fn dim(&self) -> usize {
        self.features + usize::from(self.intercept)
    }

    /// `φ_j` of raw input `j` with value `x`.
    #[inline]
    fn term(&self, j: usize, x: f64) -> f64 {
        if j < self.spectral && self.transform != Transform::Identity {
            let r = x * self.scale.to_fraction();
            self.transform
                .apply(if self.declared { r.min(1.0) } else { r })
        } else {
            x
        }
    }

    /// `dφ_j/dx` of raw input `j` at `x`: 1 for an untransformed input; for a reflectance under
    /// Kubelka–Munk `t'(R) · f` with `t'(R) = (R² − 1)/(2R²)` and `f` the scale's fraction
    /// (through Saunderson's inverse, `t'(R_i) / (dR_m/dR_i)`); 0 where the reading is clamped.
    pub fn slope(&self, j: usize, x: f64) -> f64 {
        if j >= self.spectral || self.transform == Transform::Identity {
            return 1.0;
        }
        let f = self.scale.to_fraction();
        let r = x * f;
        if (self.declared && r > 1.0) || r < MIN_REFLECTANCE {
            return 0.0;
        }
        let km_slope = |r: f64| (r * r - 1.0) / (2.0 * r * r);
        match self.transform {
            Transform::Identity => 1.0,
            Transform::KubelkaMunk => km_slope(r) * f,
            Transform::Saunderson(s) => {
                let body = s.internal(r);
                if body <= MIN_REFLECTANCE || body >= 1.0 {
                    return 0.0;
                }
                km_slope(body) / s.slope(body) * f
            }
        }
    }

    /// The design matrix `Φ` (rows × p) of the rows of `x` (rows × d).
    pub fn design(&self, x: MatRef<'_, f64>) -> Result<Mat<f64>, EstimatorError> {
        if x.ncols() != self.features {
            return Err(EstimatorError::Dimension {
                what: "input columns",
                expected: self.features,
                found: x.ncols(),
            });
        }
        let rows = x.nrows();
        let mut phi = Mat::<f64>::zeros(rows, self.dim());
        for j in 0..self.features {
            let out = phi.col_as_slice_mut(j);
            let src = x.col(j);
            for (o, v) in out.iter_mut().zip(src.iter()) {
                *o = self.term(j, *v);
            }
        }
        if self.intercept {
            phi.col_as_slice_mut(self.features).fill(1.0);
        }
        Ok(phi)
    }

    /// Writes `φ(x)` of one row (its `d` values) into `phi` (length p).
    pub(crate) fn fill_row(&self, x: impl Iterator<Item = f64>, phi: &mut [f64]) {
        for (j, (o, v)) in phi.iter_mut().zip(x).enumerate() {
            *o = self.term(j, v);
        }
        if self.intercept {
            phi[self.features] = 1.0;
        }
    }

    /// The basis vector `φ(x)` of one row.
    pub fn row(&self, x: &[f64]) -> Result<Vec<f64>, EstimatorError> {
        if x.len() != self.features {
            return Err(EstimatorError::Dimension {
                what: "input columns",
                expected: self.features,
                found: x.len(),
            });
        }
        let mut phi: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(j, &v)| self.term(j, v))
            .collect();
        if self.intercept {
            phi.push(1.0);
        }
        Ok(phi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelka_munk_matches_its_formula_and_clamps_zero() {
        assert!((Transform::KubelkaMunk.apply(0.5) - 0.25).abs() < 1e-15);
        assert_eq!(Transform::KubelkaMunk.apply(1.0), 0.0);
        let at_zero = Transform::KubelkaMunk.apply(0.0);
        assert!(at_zero.is_finite());
        assert_eq!(at_zero, Transform::KubelkaMunk.apply(MIN_REFLECTANCE));
    }

    #[test]
    fn saunderson_round_trips_and_reduces_to_kubelka_munk_without_a_surface() {
        let s = Saunderson::TEXTILE;
        for r_i in [0.002, 0.05, 0.3, 0.7, 0.95, 1.0] {
            let r_m = s.measured(r_i);
            assert!((s.internal(r_m) - r_i).abs() < 1e-12, "{r_i} → {r_m}");
            // The surface adds k₁ and the reading stays in (k₁, 1].
            assert!(r_m > s.k1 && r_m <= 1.0 + 1e-15);
            // The slope is the derivative of `measured`.
            let h = 1e-7;
            let numeric = (s.measured(r_i + h) - s.measured(r_i - h)) / (2.0 * h);
            if r_i < 1.0 {
                assert!((numeric - s.slope(r_i)).abs() < 1e-6, "{numeric}");
            }
        }
        // A reading at or below k₁ (noise on a black) is clamped, not negative, and never
        // white, whatever the coefficients.
        assert_eq!(s.internal(0.01), MIN_REFLECTANCE);
        let steep = Saunderson { k1: 0.04, k2: 0.97 };
        assert_eq!(steep.internal(0.005), MIN_REFLECTANCE);
        assert!(steep.internal(0.05) < steep.internal(0.5));
        let t = Transform::Saunderson(s);
        for ks in [0.0, 0.1, 2.0, 40.0] {
            assert!((t.apply(t.reflectance(ks)) - ks).abs() < 1e-9 * (1.0 + ks));
        }
        let none = Transform::Saunderson(Saunderson { k1: 0.0, k2: 0.0 });
        for r in [0.01, 0.4, 0.9] {
            assert!((none.apply(r) - Transform::KubelkaMunk.apply(r)).abs() < 1e-15);
            assert!(
                (none.sensitivity(r, 0.95) - Transform::KubelkaMunk.sensitivity(r, 0.95)).abs()
                    < 1e-15
            );
        }
        // The sensitivity is |dR_m/d(K/S)|.
        for r in [0.08, 0.3, 0.6] {
            let ks = t.apply(r);
            let h = 1e-6;
            let numeric = (t.reflectance(ks - h) - t.reflectance(ks + h)) / (2.0 * h);
            assert!(
                (numeric - t.sensitivity(r, 0.99)).abs() < 1e-5 * numeric,
                "{r}"
            );
        }
        assert!(!Saunderson { k1: 1.0, k2: 0.5 }.is_valid());
        assert!(
            !Saunderson {
                k1: 0.04,
                k2: f64::NAN
            }
            .is_valid()
        );
    }

    #[test]
    fn above_full_scale_absorbs_nothing_in_a_declared_spectrum_only() {
        let declared = Basis::spectral(
            1,
            ReflectanceScale::Fraction,
            1,
            false,
            Transform::KubelkaMunk,
        );
        assert_eq!(declared.row(&[1.07]).unwrap(), vec![0.0]);
        // A basis without a declared spectrum keeps the formula, as models made before did.
        let legacy = Basis::new(1, false, Transform::KubelkaMunk);
        let r: f64 = 1.07;
        assert_eq!(
            legacy.row(&[r]).unwrap(),
            vec![(1.0 - r) * (1.0 - r) / (2.0 * r)]
        );
        assert_ne!(declared, legacy);
    }

    #[test]
    fn kubelka_munk_applies_to_the_spectrum_only_on_its_scale() {
        let basis = Basis::spectral(
            2,
            ReflectanceScale::Percent,
            3,
            true,
            Transform::KubelkaMunk,
        );
        let phi = basis.row(&[50.0, 100.0, 7.0]).unwrap();
        assert_eq!(phi, vec![0.25, 0.0, 7.0, 1.0]);
        let design = basis
            .design(faer::mat![[50.0, 100.0, 7.0]].as_ref())
            .unwrap();
        assert_eq!(design.row(0).iter().copied().collect::<Vec<_>>(), phi);
        // Identity leaves the spectrum on its own scale.
        let identity = Basis::spectral(2, ReflectanceScale::Percent, 3, false, Transform::Identity);
        assert_eq!(
            identity.row(&[50.0, 100.0, 7.0]).unwrap(),
            vec![50.0, 100.0, 7.0]
        );
    }

    #[test]
    fn design_appends_intercept_column() {
        let basis = Basis::new(2, true, Transform::Identity);
        let x = faer::mat![[1.0, 2.0], [3.0, 4.0]];
        let phi = basis.design(x.as_ref()).unwrap();
        assert_eq!(phi.ncols(), 3);
        assert_eq!(phi[(1, 0)], 3.0);
        assert_eq!(phi[(0, 2)], 1.0);
        assert_eq!(basis.row(&[5.0, 6.0]).unwrap(), vec![5.0, 6.0, 1.0]);
    }

    #[test]
    fn design_rejects_wrong_width() {
        let basis = Basis::new(3, false, Transform::Identity);
        let x = faer::mat![[1.0, 2.0]];
        assert!(matches!(
            basis.design(x.as_ref()),
            Err(EstimatorError::Dimension {
                expected: 3,
                found: 2,
                ..
            })
        ));
    }
}
