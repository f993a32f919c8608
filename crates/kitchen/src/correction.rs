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
//! [`ForwardMap::correction`]: mordant_estimator::recipe::ForwardMap::correction

use mordant_colour::CieLab;
use mordant_estimator::recipe::MatchProblem;

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
    let recipe = match problem.within(dyes, &bounds)? {
        Some(recipe) => {
            // A dye the correction takes out entirely is no longer used.
            let used = dyes
                .iter()
                .copied()
                .filter(|&i| recipe.concentration[i] > 0.0)
                .collect();
            Some(candidate(problem, colour, search, used, recipe)?)
        }
        None => None,
    };
    Ok(Correction { dip, recipe })
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
        // A dip that came out right is left as it was dyed.
        let exact = reflectance(&first);
        let problem = map.correction(&target, &[], &first, &exact).unwrap();
        let kept = correct(&problem, None, &dyes, &exact, &search).unwrap();
        assert!(kept.dip.is_none());
        for (a, b) in kept.recipe.unwrap().recipe.concentration.iter().zip(&first) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }
}
