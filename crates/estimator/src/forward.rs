//! The forward map's statistics: its normal equations, formed from the model's own statistics
//! without a second pass over the rows, and each dye's build-up curve chosen on them
//! ([`crate::build_up`]). [`crate::ModelState::forward_map`] fits the map on what these return.

use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Mat, Par};

use super::build_up::rung_weights;
use super::posterior::cholesky_lower;
use super::{Basis, BatchStatistics, EstimatorError};

/// The statistics of the forward map of a model with a declared spectrum, from the model's own
/// statistics.
///
/// The model regresses the concentrations `y` (m outputs) on `φ = [K/S_1..K/S_s, x_1..x_o, 1]`
/// (its statistics `G = ΦᵀΦ`, `B = ΦᵀY`, `YᵀY`). The forward map regresses `K/S_λ` on
/// `z = [y_1..y_m, x_1..x_o, 1]`; with `π(a) = s + a − m` the position in `φ` of `z_a`, `a ≥ m`:
///
/// ```text
/// G_f[a, b] = (YᵀY)[a, b]        a, b < m
///           = B[π(b), a]          a < m ≤ b   (and its mirror)
///           = G[π(a), π(b)]       a, b ≥ m
/// B_f[a, λ] = B[λ, a]             a < m
///           = G[π(a), λ]          a ≥ m
/// q_f[λ]    = G[λ, λ],  N_f = N
/// ```
///
/// Every band counts as non-zero in every row (K/S is 0 only for a reading at full scale). The
/// blocks are taken from the weighted copy of the statistics where they keep one
/// ([`forward_statistics_with`]).
pub fn forward_statistics(
    stats: &BatchStatistics,
    basis: &Basis,
) -> Result<BatchStatistics, EstimatorError> {
    forward_statistics_with(stats, basis, None)
}

/// [`forward_statistics`] with each dye `i` through the build-up curve at `positions[i]` along
/// the statistics' ladder ([`crate::build_up::Curve::at`]; 0 the linear one): the same blocks
/// with `y_i` replaced by `h_i(y_i) = Σ_a w_ia h_{s_a}(y_i)`, whose products are the same
/// weighted sums of `ΨᵀΨ` and `ΦᵀΨ` ([`crate::statistics::BuildUp`]):
///
/// ```text
/// (YᵀY)_f[i, j] = Σ_a Σ_b w_ia w_jb ΨᵀΨ[a·m + i, b·m + j],    B_f[·, i] = Σ_a w_ia ΦᵀΨ[·, a·m + i]
/// ```
///
/// `None`, or statistics without build-up, give the linear map. A position outside the ladder
/// is clamped to its ends; one that is not finite is refused.
///
/// Where the statistics keep the weighted copy ([`crate::statistics::Relative`]) every block
/// above is taken from it instead, `ΦᵀWΦ`, `ΦᵀWΨ`, `ΨᵀWΨ` with each row weighted by `1/L²`, and
/// scaled by `N / Σw`: the forward map is fitted in K/S error relative to each dip's depth, with
/// weights of mean 1.
pub fn forward_statistics_with(
    stats: &BatchStatistics,
    basis: &Basis,
    positions: Option<&[f64]>,
) -> Result<BatchStatistics, EstimatorError> {
    if !basis.declared || basis.spectral == 0 || !basis.transform.is_kubelka_munk() {
        return Err(EstimatorError::NoForwardMap(
            "the model has no spectrum under the Kubelka–Munk or Saunderson transform",
        ));
    }
    if !basis.intercept {
        return Err(EstimatorError::NoForwardMap(
            "the model has no intercept (the fabric's own K/S)",
        ));
    }
    debug_assert!(basis.can_match());
    let Some(yy) = stats.output_products() else {
        return Err(EstimatorError::NoForwardMap(
            "the model's statistics do not keep the outputs' cross products (folded before recipe matching)",
        ));
    };
    let (s, m, n) = (basis.spectral, stats.outputs(), stats.rows());
    if let Some(positions) = positions {
        if positions.iter().any(|x| !x.is_finite()) {
            return Err(EstimatorError::NonFinite("build-up curve positions"));
        }
        if positions.len() != m {
            return Err(EstimatorError::Dimension {
                what: "build-up curves",
                expected: m,
                found: positions.len(),
            });
        }
    }
    let g = stats.g();
    // Every dye through rung 0, the linear curve (a ladder of that rung alone).
    let linear = || vec![rung_weights(1, 0.0); m];
    // The products of the dyes' curves (ΨᵀΨ's rungs, or YᵀY), of the inputs with them (ΦᵀΨ or
    // B), the rows of ΦᵀΦ after the bands and the bands' squares: weighted by relative
    // precision where the statistics keep that, scaled to N rows of mean weight 1.
    let (psi, design, fabric, squares, factor, weights) = match stats.build_up() {
        Some(build_up) => {
            let rungs = build_up.saturations().len();
            let weights = positions.map_or_else(linear, |positions| {
                positions.iter().map(|&x| rung_weights(rungs, x)).collect()
            });
            match build_up.relative() {
                Some(relative)
                    if !relative.fits(basis.dim(), s) || relative.weight() <= 0.0 && n > 0.0 =>
                {
                    return Err(EstimatorError::Dimension {
                        what: "weighted build-up statistics",
                        expected: basis.dim() - s,
                        found: relative.fabric().nrows(),
                    });
                }
                Some(relative) => (
                    relative.gram(),
                    relative.design(),
                    relative.fabric(),
                    relative.squares().to_vec(),
                    if relative.weight() > 0.0 {
                        n / relative.weight()
                    } else {
                        1.0
                    },
                    weights,
                ),
                None => (
                    build_up.gram(),
                    build_up.design(),
                    g.subrows(s, g.nrows() - s),
                    (0..s).map(|l| g[(l, l)]).collect(),
                    1.0,
                    weights,
                ),
            }
        }
        None => (
            yy,
            stats.b(),
            g.subrows(s, g.nrows() - s),
            (0..s).map(|l| g[(l, l)]).collect(),
            1.0,
            linear(),
        ),
    };
    let p_f = m + basis.dim() - s;
    // z_a's position in φ (a ≥ m), and its row in `fabric`.
    let pi = |a: usize| s + a - m;
    let row = |a: usize| a - m;
    let g_f = Mat::from_fn(p_f, p_f, |a, c| {
        factor
            * match (a < m, c < m) {
                (true, true) => weights[a]
                    .iter()
                    .flat_map(|&(x, wx)| {
                        weights[c]
                            .iter()
                            .map(move |&(y, wy)| wx * wy * psi[(x * m + a, y * m + c)])
                    })
                    .sum(),
                (true, false) => weights[a]
                    .iter()
                    .map(|&(x, w)| w * design[(pi(c), x * m + a)])
                    .sum(),
                (false, true) => weights[c]
                    .iter()
                    .map(|&(x, w)| w * design[(pi(a), x * m + c)])
                    .sum(),
                // The lower triangle, mirrored: G_f stays exactly symmetric.
                (false, false) => fabric[(row(a.max(c)), pi(a.min(c)))],
            }
    });
    let b_f = Mat::from_fn(p_f, s, |a, l| {
        factor
            * if a < m {
                weights[a]
                    .iter()
                    .map(|&(x, w)| w * design[(l, x * m + a)])
                    .sum()
            } else {
                fabric[(row(a), l)]
            }
    });
    let q_f = squares.iter().map(|v| factor * v).collect();
    Ok(BatchStatistics::from_parts(g_f, b_f, q_f, vec![n; s], n))
}

/// Each dye's position along the build-up ladder for the forward map, chosen by the profile
/// likelihood of the forward regressions: with `RSS_λ(x)` the least-squares residual of band `λ`
/// when dye `i` goes through the curve at position `x_i`,
///
/// ```text
/// x̂ = argmax_x  −(N/2) Σ_λ ln RSS_λ(x)
/// ```
///
/// (each band's noise variance profiled out). Every choice has the same number of coefficients,
/// so the likelihoods compare as they are. Coordinate ascent from the linear map: each dye in
/// turn tries every rung, then a golden-section search between the rungs either side of its
/// best, and moves only when that is better by more than rounding; sweeps repeat until one
/// changes nothing (at most `MAX_SWEEPS`). `None` without build-up statistics (states folded
/// before them): the linear map.
pub fn choose(stats: &BatchStatistics, basis: &Basis) -> Result<Option<Vec<f64>>, EstimatorError> {
    let Some(build_up) = stats.build_up() else {
        return Ok(None);
    };
    let (m, last) = (
        stats.outputs(),
        build_up.saturations().len().saturating_sub(1),
    );
    let score = |positions: &[f64]| -> Result<f64, EstimatorError> {
        profile_log_rss(&forward_statistics_with(stats, basis, Some(positions))?)
    };
    let mut chosen = vec![0.0; m];
    let mut best = score(&chosen)?;
    let better = |score: f64, best: f64| score < best - 1e-9 * best.abs().max(1.0);
    for _sweep in 0..MAX_SWEEPS {
        let mut changed = false;
        for i in 0..m {
            let mut trial = chosen.clone();
            for a in 0..=last {
                trial[i] = a as f64;
                let s = score(&trial)?;
                if better(s, best) {
                    (best, chosen[i], changed) = (s, trial[i], true);
                }
            }
            let around = chosen[i];
            let (lo, hi) = ((around - 1.0).max(0.0), (around + 1.0).min(last as f64));
            let (x, s) = golden_section(lo, hi, POSITION_TOLERANCE, |x| {
                trial[i] = x;
                score(&trial)
            })?;
            if better(s, best) {
                (best, chosen[i], changed) = (s, x, true);
            }
        }
        if !changed {
            break;
        }
    }
    Ok(Some(chosen))
}

/// Sweeps of [`choose`]'s coordinate ascent.
const MAX_SWEEPS: usize = 4;

/// How finely [`choose`] places a dye between rungs: a position within this of the best, whose
/// curve differs from the best one's by less than a thousandth of the gap between the rungs.
const POSITION_TOLERANCE: f64 = 1e-3;

/// The minimum of `f` on `[lo, hi]` by golden-section search, to within `tol` in `x`: the
/// interval shrinks by `1/φ` per evaluation, so about `ln((hi − lo)/tol) / ln φ` of them.
/// Returns the better of the two last interior points and its value (`(lo, ∞)` for an empty
/// interval: the caller has evaluated the ends).
fn golden_section(
    lo: f64,
    hi: f64,
    tol: f64,
    mut f: impl FnMut(f64) -> Result<f64, EstimatorError>,
) -> Result<(f64, f64), EstimatorError> {
    const INV_PHI: f64 = 0.618_033_988_749_894_8;
    let (mut a, mut b) = (lo, hi);
    if b - a <= tol || b.is_nan() || a.is_nan() {
        return Ok((lo, f64::INFINITY));
    }
    let (mut c, mut d) = (b - INV_PHI * (b - a), a + INV_PHI * (b - a));
    let (mut fc, mut fd) = (f(c)?, f(d)?);
    while b - a > tol {
        if fc <= fd {
            (b, d, fd) = (d, c, fc);
            c = b - INV_PHI * (b - a);
            fc = f(c)?;
        } else {
            (a, c, fc) = (c, d, fd);
            d = a + INV_PHI * (b - a);
            fd = f(d)?;
        }
    }
    Ok(if fc <= fd { (c, fc) } else { (d, fd) })
}

/// `Σ_λ ln RSS_λ` of the least-squares fits of every band of the forward statistics `f`:
/// `RSS_λ = q_λ − b_λᵀ G⁻¹ b_λ = q_λ − ‖L⁻¹b_λ‖²` with `G + εI = LLᵀ` (`ε` a rounding-level
/// ridge, so that a dye no row used leaves `G` factorable), floored at a rounding-level share
/// of `q_λ`.
fn profile_log_rss(f: &BatchStatistics) -> Result<f64, EstimatorError> {
    let p = f.dim();
    let trace: f64 = (0..p).map(|j| f.g()[(j, j)]).sum();
    let ridge = 1e-12 * trace / p.max(1) as f64 + f64::MIN_POSITIVE;
    let g = Mat::from_fn(p, p, |i, j| {
        f.g()[(i, j)] + if i == j { ridge } else { 0.0 }
    });
    let l = cholesky_lower(g)?;
    let mut z = f.b().to_owned();
    solve_lower_triangular_in_place(l.as_ref(), z.as_mut(), Par::Seq);
    Ok((0..z.ncols())
        .map(|band| {
            let q = f.q()[band];
            let rss = q - z.col(band).squared_norm_l2();
            rss.max(1e-12 * q + f64::MIN_POSITIVE).ln()
        })
        .sum())
}

#[cfg(test)]
mod tests {
    use faer::Mat;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::build_up::Curve;
    use crate::statistics::BuildUp;
    use crate::{ReflectanceScale, Transform};

    #[test]
    fn a_blend_s_normal_equations_are_those_of_its_rows_through_the_blended_curves() {
        // Rows whose outputs went through each dye's curve before the statistics: the forward
        // statistics of the blend, formed from the kept rungs, are theirs.
        const BANDS: usize = 5;
        let basis = Basis::spectral(
            BANDS,
            ReflectanceScale::Fraction,
            BANDS + 1,
            true,
            Transform::KubelkaMunk,
        );
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let rows = 60;
        let x = Mat::from_fn(rows, BANDS + 1, |_, j| {
            if j < BANDS {
                rng.random_range(0.05..0.9)
            } else {
                f64::from(u8::from(rng.random_bool(0.5)))
            }
        });
        let y = Mat::from_fn(rows, 3, |_, _| {
            if rng.random_bool(0.3) {
                0.0
            } else {
                rng.random_range(0.0..4.0)
            }
        });
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let ladder = BuildUp::default_saturations();
        for positions in [[0.3, 2.57, 4.99], [0.0, 5.0, 1.5], [3.0, 0.75, 4.2]] {
            let curves: Vec<Curve> = positions.iter().map(|&x| Curve::at(&ladder, x)).collect();
            let bent = Mat::from_fn(rows, 3, |r, k| curves[k].value(y[(r, k)]));
            let direct = forward_statistics(
                &BatchStatistics::from_rows(&basis, x.as_ref(), bent.as_ref()).unwrap(),
                &basis,
            )
            .unwrap();
            let blended = forward_statistics_with(&stats, &basis, Some(&positions)).unwrap();
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-10 * (1.0 + a.abs().max(b.abs()));
            for i in 0..direct.dim() {
                for j in 0..direct.dim() {
                    assert!(
                        close(direct.g()[(i, j)], blended.g()[(i, j)]),
                        "{positions:?} G[{i},{j}]"
                    );
                }
                for l in 0..BANDS {
                    assert!(
                        close(direct.b()[(i, l)], blended.b()[(i, l)]),
                        "{positions:?} B[{i},{l}]"
                    );
                }
            }
            assert_eq!(direct.q(), blended.q());
        }
        // A position that is not a number is refused, not taken as linear.
        assert_eq!(
            forward_statistics_with(&stats, &basis, Some(&[0.0, f64::NAN, 1.0])).unwrap_err(),
            EstimatorError::NonFinite("build-up curve positions")
        );
    }

    #[test]
    fn golden_section_finds_a_minimum_inside_and_reports_an_empty_interval() {
        let (x, fx) = golden_section(0.0, 2.0, 1e-6, |x| Ok((x - 1.3).powi(2))).unwrap();
        assert!((x - 1.3).abs() < 1e-6 && fx < 1e-11, "{x} {fx}");
        let (x, fx) = golden_section(1.0, 1.0, 1e-3, |_| Ok(0.0)).unwrap();
        assert_eq!((x, fx), (1.0, f64::INFINITY));
    }
}
