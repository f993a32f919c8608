//! Correcting a dyeing that came out off-shade: from the target, the recipe that was dyed and
//! the measured result, the recipe to dye next.
//!
//! The dip tells where the map is wrong near the recipe dyed: `Δ_λ = K/S(R_measured(λ)) −
//! K/S(λ; c_dyed, x)` ([`ForwardMap::correction`]). Assuming that error persists for recipes
//! near the one dyed — what a dye house's own conditions, a new lot of dye or of fabric add to
//! every dyeing alike — the corrected recipe is the match of the target against the map shifted
//! by `Δ`, with the dyes of the recipe dyed (a correction adjusts amounts; it does not bring in
//! other dyes), each within its bounds. Its predicted colour is the shifted map's: the
//! reflectance of `K/S(λ; c, x) + Δ_λ`. The assumption is first order: an error that grows with
//! the amount of a dye (a dye stronger than the map learnt) is corrected to its first order, so
//! a second correction, or learning the dip, takes the rest.
//!
//! **On the colour, from the better start.** The match's spectral least squares is the first
//! step. Where the bands cover the visible range, the recipe is then polished on its colour
//! under D65. Allen's tristimulus correction (E. Allen, "Basic equations used in computer color
//! matching", J. Opt. Soc. Am. 56, 1256–1259, 1966) iterates on XYZ with the map's Jacobian;
//! this takes damped steps of the same kind on CIELAB, Levenberg–Marquardt on
//! `f(c) = L*a*b*(R(c)) − L*a*b*(target)`, the CIELAB of the shifted map's reflectance:
//!
//! ```text
//! (JᵀJ + μ diag(JᵀJ)) δ = −Jᵀf,   J = ∂f/∂c (finite differences; the recipe's dyes that
//!                                           their bounds leave free to move),
//! ```
//!
//! each step projected onto the dyes' bounds and kept only if it lowers ΔE00 (the steps aim at
//! CIELAB's distance, which ΔE00 reweighs), starting from the better by ΔE00 of the spectral
//! solution and the recipe as dyed ([`MatchProblem::dyed`]). The shifted map reproduces the dip
//! at the recipe as dyed, so a correction is never predicted worse under D65 than the dip —
//! provided that recipe keeps to the request's bounds, and but for bands of the dip at full
//! scale (they carry no offset) and readings darker than the transform inverts. Only D65 is
//! polished: the colour under A and F11 follows from the dyes. Least squares in K/S weighs every
//! band as a spectrophotometer's noise does, including bands the eye barely sees; a dip whose
//! deviation sits there (or in a dye the map knows poorly) can pull the spectral solution far
//! from the dyed recipe and further from the target's colour than the dip was.
//!
//! [`ForwardMap::correction`]: mordant_estimator::recipe::ForwardMap::correction

use mordant_colour::{CieLab, Illuminant, ciede2000};
use mordant_estimator::recipe::{DyeBounds, MAX_CONCENTRATION, MatchProblem, RecipeMatch};

use super::candidates::{Candidate, KitchenError, Search, candidate};
use super::colorimeter::Colorimeter;
use super::judge::{Comparison, judge};

/// A correction: how the dip came out, and the recipe to dye next.
#[derive(Clone, Debug)]
pub struct Correction {
    /// The measured dip against the target; `None` without a colorimeter.
    pub dip: Option<Comparison>,
    /// The corrected recipe, its colour predicted by the shifted map; `None` when the dyes of
    /// the recipe dyed cannot be solved for within their bounds.
    pub recipe: Option<Candidate>,
}

/// The correction of a dip dyed with `dyes` (output indices) and measured `measured`
/// (reflectance fractions on the map's bands), from `problem` ([`ForwardMap::correction`] of
/// the target, the dyed recipe and the measurement). `colour` is the colorimeter and the
/// target's CIELAB under D65, A and F11 when the bands cover the visible range; `search` gives
/// the bounds, prices, tolerance and CMC weights (its allow-list and ranking do not apply).
///
/// [`ForwardMap::correction`]: mordant_estimator::recipe::ForwardMap::correction
pub fn correct(
    problem: &MatchProblem<'_>,
    colour: Option<(&Colorimeter, &[CieLab; 3])>,
    dyes: &[usize],
    measured: &[f64],
    search: &Search,
) -> Result<Correction, KitchenError> {
    let dip = match colour {
        Some((colorimeter, target)) => Some(judge(
            target,
            &colorimeter.labs(measured)?,
            search.tolerance,
            search.cmc,
        )?),
        None => None,
    };
    let bounds: Vec<_> = dyes.iter().map(|&i| search.bounds[i]).collect();
    let Some(spectral) = problem.within(dyes, &bounds)? else {
        return Ok(Correction { dip, recipe: None });
    };
    let recipe = match colour {
        Some((colorimeter, target)) => {
            polish(problem, colorimeter, &target[0], dyes, &bounds, spectral)?
        }
        None => spectral,
    };
    // A dye the correction takes out entirely is no longer used.
    let used = dyes
        .iter()
        .copied()
        .filter(|&i| recipe.concentration[i] > 0.0)
        .collect();
    let recipe = candidate(problem, colour, search, used, recipe)?;
    Ok(Correction {
        dip,
        recipe: Some(recipe),
    })
}

/// Steps of the colour polish at most; each costs one colour of the shifted map per dye and
/// one more, and a polish converges in a few.
const POLISH_STEPS: usize = 30;

/// ΔE00 below which the polish stops: far below what any instrument or eye tells apart.
const POLISH_DONE: f64 = 1e-3;

/// The correction polished on its colour under D65 (module documentation): from the better of
/// the spectral solution `spectral` and the recipe as dyed (the problem's, projected onto
/// `bounds`), Levenberg–Marquardt on the CIELAB difference to `target`, each step kept only if
/// it lowers ΔE00. Answers `spectral` itself (its variances exact) when it was the better start
/// and no step improved on it.
fn polish(
    problem: &MatchProblem<'_>,
    colorimeter: &Colorimeter,
    target: &CieLab,
    dyes: &[usize],
    bounds: &[DyeBounds],
    spectral: RecipeMatch,
) -> Result<RecipeMatch, KitchenError> {
    let lab = |c: &[f64]| colorimeter.lab(&problem.reflectance(c), Illuminant::D65);
    // A dye with a build-up curve gives no more colour past MAX_CONCENTRATION; a lower bound
    // above it is kept (the box is never empty).
    let limits: Vec<(f64, f64)> = bounds
        .iter()
        .map(|b| {
            let lo = b.min.max(0.0);
            (lo, b.max.min(MAX_CONCENTRATION).max(lo))
        })
        .collect();
    let project = |c: &mut [f64]| {
        for (&i, &(lo, hi)) in dyes.iter().zip(&limits) {
            c[i] = c[i].clamp(lo, hi);
        }
    };
    // The dyes free to move: a dye held at one amount by its bounds takes no step.
    let moving: Vec<(usize, (f64, f64))> = dyes
        .iter()
        .zip(&limits)
        .filter(|(_, (lo, hi))| hi > lo)
        .map(|(&i, &l)| (i, l))
        .collect();
    let from_spectral = ciede2000(target, &lab(&spectral.concentration)?)?;
    let mut c = spectral.concentration.clone();
    let mut best = from_spectral;
    let mut from_dyed = f64::INFINITY;
    if let Some(dyed) = problem.dyed() {
        let mut as_dyed = vec![0.0; c.len()];
        for &i in dyes {
            as_dyed[i] = dyed.get(i).copied().unwrap_or(0.0);
        }
        project(&mut as_dyed);
        from_dyed = ciede2000(target, &lab(&as_dyed)?)?;
        if from_dyed < best {
            (c, best) = (as_dyed, from_dyed);
        }
    }
    let k = moving.len();
    let mut moved = false;
    let mut damping = 1e-3;
    for _ in 0..POLISH_STEPS {
        if k == 0 || best < POLISH_DONE || damping > 1e8 {
            break;
        }
        let here = lab(&c)?.to_array();
        let f: Vec<f64> = here
            .iter()
            .zip(target.to_array())
            .map(|(a, b)| a - b)
            .collect();
        // J by finite differences, each step inside the dye's bounds.
        let mut jacobian = vec![[0.0; 3]; k];
        for (column, &(i, (lo, hi))) in jacobian.iter_mut().zip(&moving) {
            let h = (1e-4 * c[i].max(1e-2)).min(0.5 * (hi - lo));
            let h = if c[i] + h > hi { -h } else { h };
            let mut nudged = c.clone();
            nudged[i] += h;
            let there = lab(&nudged)?.to_array();
            for (d, (t, x)) in column.iter_mut().zip(there.iter().zip(here)) {
                *d = (t - x) / h;
            }
        }
        let normal =
            |a: usize, b: usize| -> f64 { (0..3).map(|q| jacobian[a][q] * jacobian[b][q]).sum() };
        let largest = (0..k).fold(0.0_f64, |m, a| m.max(normal(a, a)));
        if !largest.is_finite() || largest <= 0.0 {
            break;
        }
        let system: Vec<Vec<f64>> = (0..k)
            .map(|a| {
                let mut row: Vec<f64> = (0..k).map(|b| normal(a, b)).collect();
                row[a] += damping * (normal(a, a) + 1e-12 * largest);
                row.push(-(0..3).map(|q| jacobian[a][q] * f[q]).sum::<f64>());
                row
            })
            .collect();
        let Some(step) = solve(system) else {
            damping *= 8.0;
            continue;
        };
        let mut trial = c.clone();
        for (&(i, _), d) in moving.iter().zip(&step) {
            trial[i] += d;
        }
        project(&mut trial);
        let de = ciede2000(target, &lab(&trial)?)?;
        if de < best {
            (c, best, moved) = (trial, de, true);
            damping = (damping / 4.0).max(1e-9);
        } else {
            damping *= 8.0;
        }
    }
    if !moved && from_spectral <= from_dyed {
        return Ok(spectral);
    }
    let free: Vec<usize> = dyes
        .iter()
        .zip(&limits)
        .filter(|&(&i, &(lo, hi))| c[i] > lo && c[i] < hi)
        .map(|(&i, _)| i)
        .collect();
    // Dyes the polish moved off a bound can be too collinear for the free set's inverse: each
    // amount's variance is then its own (`s² / H_ii`), as for a dye at a bound.
    match problem
        .answer(&c, &free)
        .or_else(|_| problem.answer(&c, &[]))
    {
        Ok(recipe) => Ok(recipe),
        Err(_) if from_spectral <= from_dyed => Ok(spectral),
        Err(e) => Err(e.into()),
    }
}

/// The solution of the augmented system `[A | b]` (a few unknowns) by Gaussian elimination with
/// partial pivoting; `None` when `A` is singular to working precision.
fn solve(mut system: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let n = system.len();
    for col in 0..n {
        let pivot =
            (col..n).max_by(|&a, &b| system[a][col].abs().total_cmp(&system[b][col].abs()))?;
        let size = system[pivot][col].abs();
        if !size.is_finite() || size == 0.0 {
            return None;
        }
        system.swap(col, pivot);
        let (upper, lower) = system.split_at_mut(col + 1);
        let pivot = &upper[col];
        for row in lower {
            let factor = row[col] / pivot[col];
            for (x, p) in row.iter_mut().zip(pivot).skip(col) {
                *x -= factor * p;
            }
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let rest: f64 = (row + 1..n).map(|j| system[row][j] * x[j]).sum();
        x[row] = (system[row][n] - rest) / system[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use mordant_colour::CmcWeights;
    use mordant_estimator::grid::Grid;
    use mordant_estimator::recipe::DyeBounds;

    use super::*;
    use crate::Ranking;
    use crate::fixtures::{BANDS, DYES, forward_map, reflectance, reflectance_with};
    use crate::judge::DEFAULT_TOLERANCE;

    #[test]
    fn a_dip_from_a_stronger_red_is_corrected_towards_the_target() {
        let map = forward_map();
        let colorimeter = Colorimeter::new(&Grid::new(400.0, 10.0, BANDS).unwrap()).unwrap();
        let search = Search {
            allowed: (0..DYES).collect(),
            max_dyes: 3,
            bounds: vec![DyeBounds::default(); DYES],
            prices: Some(vec![1.0, 2.0, 3.0, 4.0]),
            ranking: Ranking::ColourDifference,
            max_candidates: 10,
            tolerance: DEFAULT_TOLERANCE,
            cmc: CmcWeights::default(),
        };
        let target = reflectance(&[0.4, 0.7, 0.2, 0.0]);
        let labs = colorimeter.labs(&target).unwrap();
        let first = map.match_recipe(&target, &[]).unwrap().concentration;
        // The dye house's red is 15 % stronger than the one the map learnt.
        let strength = [1.0, 1.15, 1.0, 1.0];
        let dip = reflectance_with(&first, strength);
        let dyes: Vec<usize> = (0..DYES).filter(|&i| first[i] > 0.0).collect();
        let problem = map.correction(&target, &[], &first, &dip).unwrap();
        let found = correct(&problem, Some((&colorimeter, &labs)), &dyes, &dip, &search).unwrap();
        let off = found.dip.unwrap();
        assert!(!off.pass && off.de00() > 1.0, "{off:?}");
        let recipe = found.recipe.unwrap();
        assert_eq!(recipe.dyes, dyes);
        // Less red, the rest about as before; the shifted map predicts a pass.
        let c = &recipe.recipe.concentration;
        assert!(
            c[1] < first[1] * 0.92 && c[1] > first[1] * 0.8,
            "{c:?} from {first:?}"
        );
        assert!(
            (c[0] - first[0]).abs() < 0.05 && (c[2] - first[2]).abs() < 0.05,
            "{c:?}"
        );
        let predicted = recipe.colour.unwrap();
        assert!(predicted.pass, "{predicted:?}");
        assert!(
            (recipe.cost.unwrap() - (c[0] + 2.0 * c[1] + 3.0 * c[2] + 4.0 * c[3])).abs() < 1e-12
        );
        // Dyed in the same dye house, the corrected recipe lands within tolerance.
        let redyed = colorimeter.labs(&reflectance_with(c, strength)).unwrap();
        let again = judge(&labs, &redyed, DEFAULT_TOLERANCE, CmcWeights::default()).unwrap();
        assert!(
            again.pass && again.de00() < off.de00() / 4.0,
            "{again:?} after {off:?}"
        );
        // A band of the dip at full scale (a brightener) says nothing: the correction is the
        // one without it, not one that adds dye to make up for fluorescence.
        let mut bright = dip.clone();
        bright[20] = 1.03;
        let problem = map.correction(&target, &[], &first, &bright).unwrap();
        let without = correct(&problem, None, &dyes, &bright, &search).unwrap();
        for (a, b) in without.recipe.unwrap().recipe.concentration.iter().zip(c) {
            assert!((a - b).abs() < 0.01 * (1.0 + b), "{a} vs {b}");
        }
        // A lower bound past MAX_CONCENTRATION still leaves the polish a box, and holds.
        let mut deep = search.clone();
        deep.bounds[1].min = 150.0;
        let problem = map.correction(&target, &[], &first, &dip).unwrap();
        let held = correct(&problem, Some((&colorimeter, &labs)), &dyes, &dip, &deep).unwrap();
        assert!(held.recipe.unwrap().recipe.concentration[1] >= 150.0);
        // A dip that came out right is left as it was dyed.
        let exact = reflectance(&first);
        let problem = map.correction(&target, &[], &first, &exact).unwrap();
        let kept = correct(&problem, None, &dyes, &exact, &search).unwrap();
        assert!(kept.dip.is_none());
        for (a, b) in kept.recipe.unwrap().recipe.concentration.iter().zip(&first) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn a_correction_is_never_predicted_worse_than_the_dip_it_corrects() {
        use rand::{Rng, SeedableRng};
        let map = forward_map();
        let colorimeter = Colorimeter::new(&Grid::new(400.0, 10.0, BANDS).unwrap()).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (mut spectral_worse, mut improved, mut held) = (0, 0, 0);
        for n in 0..300 {
            // One dye in every fourth target, up to all four otherwise.
            let only = (n % 4 == 2).then(|| rng.random_range(0..DYES));
            let truth: Vec<f64> = (0..DYES)
                .map(|i| {
                    let used = only.map_or(!rng.random_bool(0.4), |d| d == i);
                    if used {
                        rng.random_range(0.005..1.5)
                    } else {
                        0.0
                    }
                })
                .collect();
            let target = reflectance(&truth);
            let labs = colorimeter.labs(&target).unwrap();
            let first = map.match_recipe(&target, &[]).unwrap().concentration;
            let dyes: Vec<usize> = (0..DYES).filter(|&i| first[i] > 0.0).collect();
            if dyes.is_empty() {
                continue;
            }
            // Every fourth correction within bounds the dip's recipe keeps to: at most 5 %
            // more of each dye, and the first of them at least as much as was dyed.
            let mut bounds = vec![DyeBounds::default(); DYES];
            if n % 4 == 1 {
                for &i in &dyes {
                    bounds[i].max = 1.05 * first[i];
                }
                bounds[dyes[0]].min = first[dyes[0]];
            }
            let search = Search {
                allowed: (0..DYES).collect(),
                max_dyes: 3,
                bounds: bounds.clone(),
                prices: None,
                ranking: Ranking::ColourDifference,
                max_candidates: 10,
                tolerance: DEFAULT_TOLERANCE,
                cmc: CmcWeights::default(),
            };
            // Dyes of other strengths, and a deviation where the eye sees little (the blue end
            // of the spectrum, a drifting lamp) that least squares in K/S still weighs.
            let strength: [f64; DYES] = std::array::from_fn(|_| rng.random_range(0.7..1.4));
            let tilt = rng.random_range(-0.04..0.04);
            let dip: Vec<f64> = reflectance_with(&first, strength)
                .iter()
                .enumerate()
                .map(|(l, r)| (r + tilt * (-(l as f64) / 3.0).exp()).clamp(0.002, 0.99))
                .collect();
            let problem = map.correction(&target, &[], &first, &dip).unwrap();
            assert_eq!(problem.dyed(), Some(first.as_slice()));
            let found =
                correct(&problem, Some((&colorimeter, &labs)), &dyes, &dip, &search).unwrap();
            let off = found.dip.unwrap().de00();
            let recipe = found.recipe.unwrap();
            let predicted = recipe.colour.as_ref().unwrap().de00();
            assert!(predicted <= off + 1e-9, "{predicted} after a dip at {off}");
            for &i in &dyes {
                let c = recipe.recipe.concentration[i];
                assert!(
                    c == 0.0 || (c >= bounds[i].min && c <= bounds[i].max),
                    "{recipe:?}"
                );
                assert!(recipe.recipe.variance[i].is_finite(), "{recipe:?}");
            }
            held += usize::from(
                n % 4 == 1 && (recipe.recipe.concentration[dyes[0]] - first[dyes[0]]).abs() < 1e-12,
            );
            let within: Vec<DyeBounds> = dyes.iter().map(|&i| bounds[i]).collect();
            let spectral = problem.within(&dyes, &within).unwrap().unwrap();
            let alone = colorimeter
                .labs(&problem.reflectance(&spectral.concentration))
                .unwrap();
            let alone = judge(&labs, &alone, DEFAULT_TOLERANCE, CmcWeights::default())
                .unwrap()
                .de00();
            spectral_worse += usize::from(alone > off);
            improved += usize::from(predicted < alone - 1e-6);
            assert!(predicted <= alone + 1e-9, "{predicted} against {alone}");
        }
        // The polish is what holds the bound (the spectral solution alone breaks it here), it
        // improves on the spectral solution nearly always, and bounds do bind.
        assert!(
            spectral_worse > 0 && improved > 200 && held > 0,
            "{spectral_worse}, {improved}, {held}"
        );
    }
}
