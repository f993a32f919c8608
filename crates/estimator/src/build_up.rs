//! The forward map's build-up curves: how each dye's colour grows with its concentration
//! (each dye's curve is chosen in [`crate::forward::choose`]).
//!
//! The statistics keep the outputs through a fixed ladder of Langmuir curves
//! `h_s(c) = s·c/(s + c)`, `s ∈ {∞, 20, 10, 5, 2.5, 1.25}` ([`BuildUp`],
//! [`crate::statistics::BUILD_UP_SATURATIONS`]). A dye's curve is a blend of two neighbouring
//! rungs,
//!
//! ```text
//! h(c) = (1 − t)·h_{s_a}(c) + t·h_{s_{a+1}}(c),     position x = a + t ∈ [0, G]
//! ```
//!
//! so its design column is the same blend of two stored columns, and the forward regressions'
//! normal equations are exact quadratic forms in `ΨᵀΨ` and `ΦᵀΨ` for any `x`: the position is
//! continuous although the ladder is not. Why: a dye house's build-up saturates wherever its
//! dyes and fibre put it, not on a rung, and the nearest rung misses such a curve by the whole
//! gap between rungs (a factor of 2 in `s`), which at a few % owf is more colour than a
//! tolerance allows. The blend bends at low `c` like the Langmuir curve with
//! `1/s = (1 − t)/s_a + t/s_{a+1}` ([`Curve::saturation`]) and stays close to it over the
//! recipe range (`docs/simulate.md`, "The realistic world", measures what that buys).
//!
//! Every function here is pure.

use super::statistics::{BuildUp, build_up, build_up_inverse, build_up_slope};

/// A dye's build-up curve `h(c) = (1 − t)·h_{s_a}(c) + t·h_{s_b}(c)` between two saturations
/// `s_a ≥ s_b` (`∞`: linear). Increasing and concave on `c ≥ 0`, with `h(0) = 0` and
/// `h'(0) = 1`; negative `c` (no recipe has one) is taken as it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Curve {
    lower: f64,
    upper: f64,
    t: f64,
}

impl Curve {
    /// `h(c) = c`: the linear map.
    pub const LINEAR: Curve = Curve {
        lower: f64::INFINITY,
        upper: f64::INFINITY,
        t: 0.0,
    };

    /// The curve at `position` along `ladder` (the statistics' saturations, linear first,
    /// decreasing): rung `a = ⌊x⌋` blended with rung `a + 1` by `t = x − a`. The position is
    /// clamped to the ladder.
    pub fn at(ladder: &[f64], position: f64) -> Curve {
        if ladder.is_empty() {
            return Curve::LINEAR;
        }
        let [(a, _), (b, t)] = rung_weights(ladder.len(), position);
        Curve {
            lower: ladder[a],
            upper: ladder[b],
            t,
        }
    }

    /// `(1 − t)·f(s_a) + t·f(s_b)`, a rung of weight 0 left out (so that `c = ∞` on a linear
    /// rung does not meet `0·∞`).
    #[inline]
    fn blend(&self, f: impl Fn(f64) -> f64) -> f64 {
        if self.t == 0.0 {
            f(self.lower)
        } else if self.t == 1.0 {
            f(self.upper)
        } else {
            (1.0 - self.t) * f(self.lower) + self.t * f(self.upper)
        }
    }

    /// `h(c) = (1 − t)·h_{s_a}(c) + t·h_{s_b}(c)`; [`Self::limit`] at `c = ∞`.
    #[inline]
    pub fn value(&self, c: f64) -> f64 {
        if c == f64::INFINITY {
            return self.limit();
        }
        self.blend(|s| build_up(c, s))
    }

    /// `h'(c) = (1 − t)·s_a²/(s_a + c)² + t·s_b²/(s_b + c)²`.
    #[inline]
    pub fn slope(&self, c: f64) -> f64 {
        self.blend(|s| build_up_slope(c, s))
    }

    /// `h`'s limit as `c → ∞`, `(1 − t)·s_a + t·s_b` (`∞` when a linear rung has weight).
    pub fn limit(&self) -> f64 {
        self.blend(|s| s)
    }

    /// `h⁻¹(u)`: the concentration that gives `u`; `∞` for `u` at or beyond [`Self::limit`].
    /// A single rung inverts in closed form; a blend by Newton's method from the inverse of its
    /// flatter rung (the larger `s`, whose curve lies above the blend, so the start is below the
    /// root), where on a concave increasing function each step stays below the root and the
    /// iteration climbs to it monotonically.
    pub fn inverse(&self, u: f64) -> f64 {
        if self.t == 0.0 || self.lower == self.upper {
            return build_up_inverse(u, self.lower);
        }
        if self.t == 1.0 {
            return build_up_inverse(u, self.upper);
        }
        if u <= 0.0 {
            return u;
        }
        if u >= self.limit() {
            return f64::INFINITY;
        }
        let mut c = build_up_inverse(u, self.lower.max(self.upper));
        for _ in 0..100 {
            let step = (u - self.value(c)) / self.slope(c);
            if !step.is_finite() {
                break;
            }
            c += step;
            if step.abs() <= 4.0 * f64::EPSILON * c {
                break;
            }
        }
        c
    }

    /// Whether `h(c) = c`.
    pub fn is_linear(&self) -> bool {
        self.saturation().is_infinite()
    }

    /// The saturation of the Langmuir curve that bends alike at low `c` (the same second
    /// derivative at 0): `1/s = (1 − t)/s_a + t/s_b`; the rung's own `s` when `t` is 0 or 1.
    pub fn saturation(&self) -> f64 {
        if self.t == 0.0 {
            return self.lower;
        }
        if self.t == 1.0 {
            return self.upper;
        }
        1.0 / ((1.0 - self.t) / self.lower + self.t / self.upper)
    }
}

/// The weights of the statistics' curve columns that make the curve at `position`: rung `a`
/// with `1 − t` and rung `a + 1` with `t` (a weight of 0 left out).
/// A position outside the ladder is clamped to its ends.
pub(crate) fn rung_weights(rungs: usize, position: f64) -> [(usize, f64); 2] {
    let last = rungs.saturating_sub(1);
    let x = if position.is_nan() {
        0.0
    } else {
        position.clamp(0.0, last as f64)
    };
    let a = (x.floor() as usize).min(last.saturating_sub(1));
    let t = (x - a as f64).clamp(0.0, 1.0);
    [(a, 1.0 - t), ((a + 1).min(last), t)]
}

/// The curves of `positions` on the ladder of `build_up`.
pub(crate) fn curves_at(build_up: &BuildUp, positions: &[f64]) -> Vec<Curve> {
    positions
        .iter()
        .map(|&x| Curve::at(build_up.saturations(), x))
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::statistics::BuildUp;

    fn ladder() -> Vec<f64> {
        BuildUp::default_saturations()
    }

    #[test]
    fn a_rung_is_its_langmuir_curve_and_the_first_is_linear() {
        let ladder = ladder();
        assert!(Curve::at(&ladder, 0.0).is_linear() && Curve::LINEAR.is_linear());
        assert!(!Curve::at(&ladder, 0.01).is_linear());
        for (a, &s) in ladder.iter().enumerate() {
            let curve = Curve::at(&ladder, a as f64);
            assert_eq!(curve.saturation(), s);
            for c in [0.0, 0.3, 2.0, 7.5] {
                assert_eq!(curve.value(c), build_up(c, s));
                assert_eq!(
                    curve.inverse(curve.value(c)),
                    build_up_inverse(build_up(c, s), s)
                );
            }
        }
        // Beyond the ladder the position is clamped to its ends.
        assert_eq!(Curve::at(&ladder, -3.0), Curve::at(&ladder, 0.0));
        assert_eq!(Curve::at(&ladder, 99.0).saturation(), 1.25);
        assert_eq!(Curve::at(&[], 1.0), Curve::LINEAR);
    }

    #[test]
    fn a_blend_between_rungs_follows_the_langmuir_curve_it_bends_like() {
        // Position 2.57 between s = 10 and s = 5 bends like s = 7; over 0–6 % owf it stays within
        // 3 % of h_7, where either rung, h_10 or h_5, misses by more than 15 %.
        let ladder = ladder();
        let t = (1.0 / 10.0 - 1.0 / 7.0) / (1.0 / 10.0 - 1.0 / 5.0);
        let curve = Curve::at(&ladder, 2.0 + t);
        assert!((curve.saturation() - 7.0).abs() < 1e-12);
        let worst = |h: &dyn Fn(f64) -> f64| {
            (1..=60)
                .map(|k| {
                    let c = 0.1 * k as f64;
                    (h(c) / build_up(c, 7.0) - 1.0).abs()
                })
                .fold(0.0, f64::max)
        };
        assert!(worst(&|c| curve.value(c)) < 0.03);
        assert!(worst(&|c| build_up(c, 10.0)) > 0.15);
        assert!(worst(&|c| build_up(c, 5.0)) > 0.15);
    }

    proptest! {
        #[test]
        fn a_curve_inverts_and_its_slope_is_its_derivative(
            position in 0.0f64..5.0,
            c in 0.0f64..100.0,
        ) {
            let curve = Curve::at(&ladder(), position);
            let u = curve.value(c);
            prop_assert!(u <= c + 1e-12 && u >= 0.0);
            prop_assert!(u < curve.limit());
            let back = curve.inverse(u);
            prop_assert!((back - c).abs() <= 1e-9 * (1.0 + c), "{c} → {u} → {back}");
            let h = 1e-5 * (1.0 + c);
            let numeric = (curve.value(c + h) - curve.value((c - h).max(0.0))) / (c + h - (c - h).max(0.0));
            prop_assert!((numeric - curve.slope(c)).abs() <= 1e-6, "{numeric} vs {}", curve.slope(c));
            // Between its rungs: h_{s_b} ≤ h ≤ h_{s_a}.
            let (a, b) = (Curve::at(&ladder(), position.floor()), Curve::at(&ladder(), position.floor() + 1.0));
            prop_assert!(b.value(c) <= u + 1e-12 && u <= a.value(c) + 1e-12);
        }
    }

    #[test]
    fn a_blend_has_no_inverse_beyond_its_limit() {
        let curve = Curve::at(&ladder(), 3.5);
        assert_eq!(curve.limit(), 0.5 * 5.0 + 0.5 * 2.5);
        assert_eq!(curve.inverse(curve.limit()), f64::INFINITY);
        assert_eq!(curve.inverse(-0.5), -0.5);
        assert_eq!(curve.value(f64::INFINITY), curve.limit());
        assert_eq!(Curve::LINEAR.value(f64::INFINITY), f64::INFINITY);
        // Only a ladder whose rungs bend more and more can be blended along.
        assert!(BuildUp::is_ladder(&ladder()));
        assert!(!BuildUp::is_ladder(&[f64::INFINITY, 1.25, 20.0]));
        assert!(!BuildUp::is_ladder(&[20.0, 10.0]));
        assert!(!BuildUp::is_ladder(&[]));
        assert_eq!(Curve::at(&ladder(), 0.5).limit(), f64::INFINITY);
    }

    #[test]
    fn rung_weights_blend_two_neighbours() {
        assert_eq!(rung_weights(6, 0.0), [(0, 1.0), (1, 0.0)]);
        assert_eq!(rung_weights(6, 2.25), [(2, 0.75), (3, 0.25)]);
        assert_eq!(rung_weights(6, 5.0), [(4, 0.0), (5, 1.0)]);
        assert_eq!(rung_weights(6, 9.0), [(4, 0.0), (5, 1.0)]);
    }
}
