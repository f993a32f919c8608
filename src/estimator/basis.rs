//! The basis map `φ(x) = (t(x₁), …, t(x_d), 1)`.

use faer::{Mat, MatRef};

use super::EstimatorError;

/// Reflectance below this fraction is clamped before the Kubelka–Munk function, which has a
/// pole at `R = 0` (a band that read 0 was not measured, it is not infinitely absorbing).
pub const MIN_REFLECTANCE: f64 = 1e-3;

/// The transform `t` applied to every input feature.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transform {
    /// `t(x) = x`.
    #[default]
    Identity,
    /// `t(R) = (1 − R)² / (2R)` with `R` a reflectance fraction clamped to
    /// [`MIN_REFLECTANCE`]: the Kubelka–Munk ratio K/S of absorption to scattering. For an
    /// opaque dyed layer K/S is, to a good approximation, the substrate's K/S plus a sum of
    /// dye concentrations times their unit absorptions, so concentrations are linear in it.
    KubelkaMunk,
}

impl Transform {
    /// `t(x)` for one value.
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

/// How raw input rows become basis vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Basis {
    /// Number of raw input features `d`.
    pub features: usize,
    /// Whether a constant `1` is appended (`p = d + 1`).
    pub intercept: bool,
    pub transform: Transform,
}

impl Basis {
    pub fn new(features: usize, intercept: bool, transform: Transform) -> Self {
        Self {
            features,
            intercept,
            transform,
        }
    }

    /// Number of basis functions `p`.
    pub fn dim(&self) -> usize {
        self.features + usize::from(self.intercept)
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
            match self.transform {
                Transform::Identity => {
                    for (o, v) in out.iter_mut().zip(src.iter()) {
                        *o = *v;
                    }
                }
                Transform::KubelkaMunk => {
                    for (o, v) in out.iter_mut().zip(src.iter()) {
                        *o = Transform::KubelkaMunk.apply(*v);
                    }
                }
            }
        }
        if self.intercept {
            phi.col_as_slice_mut(self.features).fill(1.0);
        }
        Ok(phi)
    }

    /// Writes `φ(x)` of one row (its `d` values) into `phi` (length p).
    pub(crate) fn fill_row(&self, x: impl Iterator<Item = f64>, phi: &mut [f64]) {
        for (o, v) in phi.iter_mut().zip(x) {
            *o = self.transform.apply(v);
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
        let mut phi: Vec<f64> = x.iter().map(|&v| self.transform.apply(v)).collect();
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
