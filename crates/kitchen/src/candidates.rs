//! Candidate recipes for one target: every combination of at most `max_dyes` of the allowed
//! dyes, each solved exactly within its bounds ([`MatchProblem::within`]), judged by the colour
//! the map predicts it dyes, priced, and ranked.
//!
//! A combination whose solution leaves one of its dyes at 0 is the solution of the smaller
//! combination without it (the minimum over a larger box that lies in a smaller one is the
//! smaller one's minimum, and it is unique), so it is listed once, under the dyes it uses. The
//! undyed fabric is a candidate only when no combination uses any dye.
//!
//! Ranking, as a colourist re-sorts the table:
//! * [`Ranking::ColourDifference`]: ΔE00 under D65, smallest first (for a model whose bands do
//!   not cover the visible range, the reflectance residual);
//! * [`Ranking::Cost`]: the candidates within tolerance first, cheapest first; then the others
//!   by ΔE00;
//! * [`Ranking::Metamerism`]: the candidates within tolerance first, by the larger of their
//!   ΔE00 under A and F11; then the others by ΔE00.

use mordant_colour::{CieLab, CmcWeights, ColourError};
use mordant_estimator::EstimatorError;
use mordant_estimator::recipe::{DyeBounds, MAX_BOUNDED_DYES, MatchProblem, RecipeMatch};

use super::colorimeter::Colorimeter;
use super::judge::{Comparison, Tolerance, judge};

/// How candidates are ordered (module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ranking {
    #[default]
    ColourDifference,
    Cost,
    Metamerism,
}

/// What a colourist asks of a candidate search.
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    /// The dyes a candidate may use (indices of the model's outputs, ascending).
    pub allowed: Vec<usize>,
    /// At most this many dyes in a candidate (1 to [`MAX_BOUNDED_DYES`]).
    pub max_dyes: usize,
    /// Per output: its bounds when used.
    pub bounds: Vec<DyeBounds>,
    /// Per output: price per unit of concentration, when prices were given.
    pub prices: Option<Vec<f64>>,
    pub ranking: Ranking,
    /// At most this many candidates are answered.
    pub max_candidates: usize,
    pub tolerance: Tolerance,
    pub cmc: CmcWeights,
}

/// Dyes in a candidate when a search does not say.
pub const DEFAULT_MAX_DYES: usize = 3;
/// Candidates answered per target when a search does not say.
pub const DEFAULT_MAX_CANDIDATES: usize = 10;

impl Search {
    /// What the service searches when a request gives no options, for a model of `dyes`
    /// outputs: any of them, at most [`DEFAULT_MAX_DYES`] at a time, unbounded above, unpriced,
    /// by ΔE00, [`DEFAULT_MAX_CANDIDATES`] answered, judged against ΔE00 1.0 with CMC 2:1.
    pub fn defaults(dyes: usize) -> Self {
        Self {
            allowed: (0..dyes).collect(),
            max_dyes: DEFAULT_MAX_DYES,
            bounds: vec![DyeBounds::default(); dyes],
            prices: None,
            ranking: Ranking::ColourDifference,
            max_candidates: DEFAULT_MAX_CANDIDATES,
            tolerance: crate::judge::DEFAULT_TOLERANCE,
            cmc: CmcWeights::default(),
        }
    }
}

/// Errors of a candidate search.
#[derive(Debug, thiserror::Error)]
pub enum KitchenError {
    #[error(transparent)]
    Estimator(#[from] EstimatorError),
    #[error("colour of a candidate: {0}")]
    Colour(#[from] ColourError),
}

/// One candidate recipe.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The dyes it uses (output indices, ascending).
    pub dyes: Vec<usize>,
    /// Its concentrations (one per output, 0 outside `dyes`), variances and residual.
    pub recipe: RecipeMatch,
    /// `Σ price_i c_i`, when prices were given.
    pub cost: Option<f64>,
    /// Its predicted colour against the target's; `None` without a colorimeter.
    pub colour: Option<Comparison>,
}

/// Every combination of 1 to `max` of `allowed` (in that order), smaller ones first, each in
/// lexicographic order.
pub fn combinations(allowed: &[usize], max: usize) -> Vec<Vec<usize>> {
    let mut all = Vec::new();
    for size in 1..=max.min(allowed.len()) {
        let mut index: Vec<usize> = (0..size).collect();
        loop {
            all.push(index.iter().map(|&i| allowed[i]).collect());
            // The rightmost position that can still move right, then everything after it.
            let Some(p) = (0..size)
                .rev()
                .find(|&p| index[p] < allowed.len() - size + p)
            else {
                break;
            };
            index[p] += 1;
            for q in p + 1..size {
                index[q] = index[q - 1] + 1;
            }
        }
    }
    all
}

/// How many combinations [`combinations`] makes of `n` allowed dyes, at most `max` at a time:
/// `Σ_{k=1..max} C(n, k)`; `None` when that overflows.
pub fn combination_count(n: usize, max: usize) -> Option<usize> {
    let mut total: usize = 0;
    let mut choose: usize = 1;
    for k in 1..=max.min(n) {
        // C(n, k) = C(n, k − 1) (n − k + 1) / k, exact at every step.
        choose = choose.checked_mul(n - k + 1)? / k;
        total = total.checked_add(choose)?;
    }
    Some(total)
}

/// The candidates for one target: its match problem, its colour under D65, A and F11 when the
/// model's bands cover the visible range (`colour`), and the combinations to try (from
/// [`combinations`] of `search.allowed`).
pub fn candidates(
    problem: &MatchProblem<'_>,
    colour: Option<(&Colorimeter, &[CieLab; 3])>,
    combinations: &[Vec<usize>],
    search: &Search,
) -> Result<Vec<Candidate>, KitchenError> {
    let mut found = Vec::new();
    let mut solved = false;
    let mut bounds = Vec::with_capacity(MAX_BOUNDED_DYES);
    for dyes in combinations {
        bounds.clear();
        bounds.extend(dyes.iter().map(|&i| search.bounds[i]));
        let recipe = match problem.within(dyes, &bounds) {
            Ok(Some(recipe)) => recipe,
            // A combination the map cannot solve (a dye never seen used, a degenerate one that
            // overflows) is no candidate; the others still are.
            Ok(None) | Err(EstimatorError::NonFinite(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        solved = true;
        if dyes.iter().any(|&i| recipe.concentration[i] <= 0.0) {
            continue;
        }
        found.push(candidate(problem, colour, search, dyes.clone(), recipe)?);
    }
    // Every solved combination left a dye at 0: the target is the fabric itself.
    if found.is_empty()
        && solved
        && let Some(recipe) = problem.within(&[], &[])?
    {
        found.push(candidate(problem, colour, search, Vec::new(), recipe)?);
    }
    rank(&mut found, search.ranking);
    found.truncate(search.max_candidates);
    Ok(found)
}

/// The non-negative recipe over every allowed dye (any number of them, bounds not applied),
/// judged and priced: what match answered before candidates, for a front end that asks for
/// it.
pub fn unrestricted(
    problem: &MatchProblem<'_>,
    colour: Option<(&Colorimeter, &[CieLab; 3])>,
    search: &Search,
) -> Result<Candidate, KitchenError> {
    let recipe = problem.nonnegative(&search.allowed)?;
    let dyes = (0..recipe.concentration.len())
        .filter(|&i| recipe.concentration[i] > 0.0)
        .collect();
    candidate(problem, colour, search, dyes, recipe)
}

pub(crate) fn candidate(
    problem: &MatchProblem<'_>,
    colour: Option<(&Colorimeter, &[CieLab; 3])>,
    search: &Search,
    dyes: Vec<usize>,
    recipe: RecipeMatch,
) -> Result<Candidate, KitchenError> {
    let cost = search.prices.as_ref().map(|prices| {
        dyes.iter()
            .map(|&i| prices[i] * recipe.concentration[i])
            .sum()
    });
    let colour = match colour {
        Some((colorimeter, target)) => {
            let dyed = colorimeter.labs(&problem.reflectance(&recipe.concentration))?;
            Some(judge(target, &dyed, search.tolerance, search.cmc)?)
        }
        None => None,
    };
    Ok(Candidate {
        dyes,
        recipe,
        cost,
        colour,
    })
}

/// Sorts `found` by `ranking` (module documentation); ties keep the combinations' order.
fn rank(found: &mut [Candidate], ranking: Ranking) {
    // The colour difference, or the residual where there is no colour.
    let difference = |c: &Candidate| {
        c.colour
            .as_ref()
            .map_or(c.recipe.residual_rms, Comparison::de00)
    };
    let passes = |c: &Candidate| c.colour.as_ref().is_none_or(|j| j.pass);
    match ranking {
        Ranking::ColourDifference => found.sort_by(|a, b| difference(a).total_cmp(&difference(b))),
        Ranking::Cost | Ranking::Metamerism => {
            let key = |c: &Candidate| match ranking {
                Ranking::Cost => c.cost.unwrap_or(f64::INFINITY),
                _ => c.colour.as_ref().map_or(0.0, Comparison::metamerism),
            };
            found.sort_by(|a, b| {
                passes(b).cmp(&passes(a)).then_with(|| {
                    if passes(a) {
                        key(a).total_cmp(&key(b))
                    } else {
                        difference(a).total_cmp(&difference(b))
                    }
                })
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use mordant_estimator::grid::Grid;
    use mordant_estimator::recipe::ForwardMap;

    use super::*;
    use crate::fixtures::{BANDS, DYES, forward_map, reflectance};
    use crate::judge::DEFAULT_TOLERANCE;

    fn search() -> Search {
        Search {
            allowed: (0..DYES).collect(),
            max_dyes: 3,
            bounds: vec![DyeBounds::default(); DYES],
            prices: None,
            ranking: Ranking::ColourDifference,
            max_candidates: 100,
            tolerance: DEFAULT_TOLERANCE,
            cmc: CmcWeights::default(),
        }
    }

    fn run(map: &ForwardMap, truth: &[f64], search: &Search) -> Vec<Candidate> {
        let target = reflectance(truth);
        let colorimeter = Colorimeter::new(&Grid::new(400.0, 10.0, BANDS).unwrap()).unwrap();
        let labs = colorimeter.labs(&target).unwrap();
        let problem = map.problem(&target, &[]).unwrap();
        let tried = combinations(&search.allowed, search.max_dyes);
        candidates(&problem, Some((&colorimeter, &labs)), &tried, search).unwrap()
    }

    #[test]
    fn the_target_s_own_dyes_come_first_and_every_candidate_is_listed_once() {
        let map = forward_map();
        let truth = [0.6, 0.0, 0.9, 0.0];
        let found = run(&map, &truth, &search());
        let best = &found[0];
        assert_eq!(best.dyes, [0, 2], "{best:?}");
        for (c, t) in best.recipe.concentration.iter().zip(truth) {
            assert!((c - t).abs() < 1e-3, "{best:?}");
        }
        let colour = best.colour.as_ref().unwrap();
        assert!(colour.pass && colour.de00() < 0.05, "{colour:?}");
        // Sorted by ΔE00; each set of dyes once, every dye in it used.
        let mut seen = std::collections::BTreeSet::new();
        for pair in found.windows(2) {
            assert!(
                pair[0].colour.as_ref().unwrap().de00() <= pair[1].colour.as_ref().unwrap().de00()
            );
        }
        for c in &found {
            assert!(seen.insert(c.dyes.clone()), "{:?} twice", c.dyes);
            assert!(!c.dyes.is_empty() && c.dyes.len() <= 3);
            for i in 0..DYES {
                assert_eq!(
                    c.dyes.contains(&i),
                    c.recipe.concentration[i] > 0.0,
                    "{c:?}"
                );
            }
            assert!(c.cost.is_none());
        }
        // A target no dye is needed for: the undyed fabric alone.
        let undyed = run(&map, &[0.0; DYES], &search());
        assert_eq!(undyed.len(), 1);
        assert!(undyed[0].dyes.is_empty() && undyed[0].recipe.concentration == [0.0; DYES]);
    }

    #[test]
    fn allow_list_bounds_prices_and_the_ranking_are_honoured() {
        let map = forward_map();
        let truth = [0.3, 0.8, 0.0, 0.0];
        // Without the red the target was dyed with, its neighbour takes its place.
        let without = Search {
            allowed: vec![0, 2, 3],
            ..search()
        };
        let found = run(&map, &truth, &without);
        assert!(found.iter().all(|c| !c.dyes.contains(&1)));
        assert!(found[0].dyes.contains(&3), "{:?}", found[0]);
        // A cap below the need holds, and the match is worse for it.
        let mut capped = search();
        capped.bounds[1] = DyeBounds { min: 0.0, max: 0.5 };
        let found = run(&map, &truth, &capped);
        assert!(found.iter().all(|c| c.recipe.concentration[1] <= 0.5));
        // Priced, by cost: every candidate within tolerance before any outside it, the cheaper
        // first; the cost is what the recipe's dyes cost.
        let prices = vec![1.0, 10.0, 2.0, 3.0];
        let by_cost = Search {
            prices: Some(prices.clone()),
            ranking: Ranking::Cost,
            tolerance: Tolerance::De00(15.0),
            ..search()
        };
        let found = run(&map, &truth, &by_cost);
        let passing = found
            .iter()
            .take_while(|c| c.colour.as_ref().unwrap().pass)
            .count();
        assert!(passing >= 2, "{found:?}");
        assert!(
            found[passing..]
                .iter()
                .all(|c| !c.colour.as_ref().unwrap().pass)
        );
        for pair in found[..passing].windows(2) {
            assert!(pair[0].cost.unwrap() <= pair[1].cost.unwrap());
        }
        for c in &found {
            let cost: f64 = (0..DYES)
                .map(|i| prices[i] * c.recipe.concentration[i])
                .sum();
            assert!((c.cost.unwrap() - cost).abs() < 1e-12);
        }
        // By metamerism: within tolerance first, the steadiest under A and F11 first.
        let by_metamerism = Search {
            ranking: Ranking::Metamerism,
            ..by_cost
        };
        let found = run(&map, &truth, &by_metamerism);
        let passing = found
            .iter()
            .take_while(|c| c.colour.as_ref().unwrap().pass)
            .count();
        for pair in found[..passing].windows(2) {
            let (a, b) = (
                pair[0].colour.as_ref().unwrap(),
                pair[1].colour.as_ref().unwrap(),
            );
            assert!(a.metamerism() <= b.metamerism());
        }
        // At most max_candidates, the best ones.
        let all = run(&map, &truth, &search());
        let few = run(
            &map,
            &truth,
            &Search {
                max_candidates: 2,
                ..search()
            },
        );
        assert_eq!(few.len(), 2);
        assert_eq!(few[0].dyes, all[0].dyes);
        assert_eq!(few[1].dyes, all[1].dyes);
    }

    #[test]
    fn combinations_are_every_subset_up_to_the_size() {
        let all = combinations(&[1, 4, 6, 9], 2);
        assert_eq!(
            all,
            vec![
                vec![1],
                vec![4],
                vec![6],
                vec![9],
                vec![1, 4],
                vec![1, 6],
                vec![1, 9],
                vec![4, 6],
                vec![4, 9],
                vec![6, 9]
            ]
        );
        let ten: Vec<usize> = (0..10).collect();
        assert_eq!(combinations(&ten, 3).len(), 10 + 45 + 120);
        assert_eq!(combinations(&[2, 3], 4).len(), 3);
        assert!(combinations(&[], 3).is_empty());
        for (n, max) in [(4, 2), (10, 3), (2, 4), (0, 3), (12, 4)] {
            let allowed: Vec<usize> = (0..n).collect();
            assert_eq!(
                combination_count(n, max),
                Some(combinations(&allowed, max).len())
            );
        }
        assert_eq!(
            combination_count(1024, 3),
            Some(1024 + 523_776 + 178_433_024)
        );
        assert_eq!(combination_count(usize::MAX, 2), None);
    }
}
