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

/// The transform `t` applied to the spectral inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
}

impl Transform {
    /// `t(R)` for one reflectance fraction.
    #[inline]
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Transform::Identity => x,
            Transform::KubelkaMunk => {
                let r = x.max(MIN_REFLECTANCE);
                (1.0 - r) * (1.0 - r) / (2.0 * r)
            }
        }
    }
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// spectrum under Kubelka–Munk, and an intercept (the fabric's own K/S). Only such models
    /// keep `YᵀY`.
    pub fn can_match(&self) -> bool {
        self.declared
            && self.spectral > 0
            && self.transform == Transform::KubelkaMunk
            && self.intercept
    }

    /// A basis over `features` inputs. With [`Transform::KubelkaMunk`] every input is read as
    /// a reflectance fraction (models that declare no spectrum); see [`Basis::spectral`].
    pub fn new(features: usize, intercept: bool, transform: Transform) -> Self {
        let spectral = match transform {
            Transform::Identity => 0,
            Transform::KubelkaMunk => features,
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
