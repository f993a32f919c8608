//! Whether a match or a correction asks the forward map about colours it can say anything of.
//!
//! The map is linear in the recipe and the fabric's features, so it answers any numbers; but a
//! band read at full scale or above carries no weight in a match (an optical brightener
//! fluoresces there), and features or amounts far outside the range it learnt give K/S values
//! no dyeing has, from which the solve either overflows or cancels to noise that looks like a
//! recipe. Each such input is the client's to fix, so it is refused at its path before anything
//! is solved.

use super::{Detail, Details, Invalid, pointer_token, quote};
use crate::estimator::recipe::{DyeBounds, ForwardMap, MAX_CONCENTRATION};

/// How many times the darkest reading's K/S the map's K/S may reach before an input is read as
/// absurd: a linear map extrapolates past the darkest reading for the deepest shades, not by an
/// order of magnitude.
const REACH: f64 = 10.0;

/// The first K/S in `ks` that no dyeing has: not finite, or further from 0 than [`REACH`] times
/// `darkest`, the K/S of the darkest reading the map reads.
fn out_of_reach(ks: &[f64], darkest: f64) -> Option<f64> {
    ks.iter()
        .copied()
        .find(|v| !v.is_finite() || v.abs() > REACH * darkest)
}

/// The K/S of the darkest reading `map` reads (its transform at reflectance 0, which it clamps
/// to the smallest it reads).
fn darkest(map: &ForwardMap) -> f64 {
    map.transform().apply(0.0)
}

/// How a message says that the map reads something as K/S `ks`, past any reading's.
fn past(ks: f64, darkest: f64) -> String {
    format!("K/S {ks:.3e}, past any reading's (at most {darkest:.0})")
}

/// Checks target row `row` of a match or correction: its reflectance `target` (fractions, one
/// per band) has a band below full scale, and its other features `others` give the undyed
/// fabric a K/S within reach. Run on a row whose widths the map has checked (it has formed the
/// row's problem).
pub fn check_target(
    map: &ForwardMap,
    target: &[f64],
    others: &[f64],
    row: usize,
) -> Result<(), Invalid> {
    if target.iter().all(|&r| r >= 1.0) {
        return Err(Invalid::one(
            format!("/spectra/values/{row}"),
            "every band reads full scale or above, which says nothing about what absorbs \
             (an optical brightener fluoresces there): there is no colour to match",
        ));
    }
    let undyed = map.ks(&vec![0.0; map.dyes()], others);
    let darkest = darkest(map);
    if let Some(ks) = out_of_reach(&undyed, darkest) {
        return Err(Invalid::one(
            format!("/x/{row}"),
            format!(
                "the forward map reads the undyed fabric with these features as {}: the \
                 features are far outside the range the model was trained on",
                past(ks, darkest)
            ),
        ));
    }
    Ok(())
}

/// Checks the bounds (`bounds`, one per output, named by `outputs`) of the dyes a recipe may
/// use (`dyes`): a dye whose colour builds up along a curve is used at most at
/// [`MAX_CONCENTRATION`], so a lower bound above that is one no recipe meets, and is refused
/// rather than answered below it.
pub fn check_bounds(
    map: &ForwardMap,
    bounds: &[DyeBounds],
    dyes: &[usize],
    outputs: &[String],
) -> Result<(), Invalid> {
    let mut details = Details::default();
    for &i in dyes {
        let saturates = map.curves().get(i).is_some_and(|h| !h.is_linear());
        if let Some(b) = bounds
            .get(i)
            .filter(|b| saturates && b.min > MAX_CONCENTRATION)
        {
            details.push(
                format!("/bounds/{}/min", pointer_token(&outputs[i])),
                format!(
                    "{} is more than a recipe uses of a dye whose colour builds up along a \
                     curve (at most {MAX_CONCENTRATION})",
                    quote(b.min)
                ),
            );
        }
    }
    details.finish("invalid bounds")
}

/// A warning for target row `row` whose recipe (`concentration`, one amount per output, named
/// by `outputs`) holds a dye whose colour builds up along a curve at [`MAX_CONCENTRATION`]: the
/// match gives no more of it, so the target is deeper than the dyes reach and the recipe is the
/// nearest they come (its colour difference says how near). `None` for any other recipe.
pub fn at_the_most(
    map: &ForwardMap,
    concentration: &[f64],
    outputs: &[String],
    row: usize,
) -> Option<Detail> {
    // The cap is answered exactly, or within the rounding of a blended curve's inverse.
    let held: Vec<&str> = concentration
        .iter()
        .zip(map.curves())
        .zip(outputs)
        .filter(|((c, h), _)| !h.is_linear() && **c >= MAX_CONCENTRATION * (1.0 - 1e-9))
        .map(|(_, name)| name.as_str())
        .collect();
    (!held.is_empty()).then(|| {
        Detail::new(
            format!("/spectra/values/{row}"),
            format!(
                "the recipe holds {} at {MAX_CONCENTRATION} % owf, the most a match uses of a \
                 dye whose colour builds up along a curve: the target is deeper than these dyes \
                 reach, and the recipe is the nearest they come (see its colour difference)",
                held.join(", ")
            ),
        )
    })
}

/// Checks a correction's dip: the recipe dyed (`dyed`, one amount per output, named by
/// `outputs`) gives a K/S within reach on fabric `others`, no dye whose colour builds up along a
/// curve at more than [`MAX_CONCENTRATION`] (the curve is flat there, so K/S cannot say the
/// amount is absurd), and its measurement (`measured`, fractions) reads below full scale in a
/// band where the target (`target`) does too, since a correction fits only where both say what
/// absorbs. Run, like [`check_target`], on widths the map has checked.
pub fn check_dip(
    map: &ForwardMap,
    target: &[f64],
    others: &[f64],
    dyed: &[f64],
    measured: &[f64],
    outputs: &[String],
) -> Result<(), Invalid> {
    let darkest = darkest(map);
    let mut alone = vec![0.0; dyed.len()];
    let mut details = Details::default();
    for (i, &amount) in dyed.iter().enumerate().filter(|(_, a)| **a > 0.0) {
        let at = format!("/recipe/{}", pointer_token(&outputs[i]));
        let saturates = map.curves().get(i).is_some_and(|h| !h.is_linear());
        if saturates && amount > MAX_CONCENTRATION {
            details.push(
                at,
                format!(
                    "{} is more than a recipe uses of a dye whose colour builds up along a \
                     curve (at most {MAX_CONCENTRATION})",
                    quote(amount)
                ),
            );
            continue;
        }
        alone[i] = amount;
        if let Some(ks) = out_of_reach(&map.ks(&alone, others), darkest) {
            details.push(
                at,
                format!(
                    "the forward map reads {} of it as {}: far more than the model ever saw dyed",
                    quote(amount),
                    past(ks, darkest)
                ),
            );
        }
        alone[i] = 0.0;
    }
    details.finish("invalid correction request")?;
    if let Some(ks) = out_of_reach(&map.ks(dyed, others), darkest) {
        return Err(Invalid::one(
            "/recipe",
            format!(
                "the forward map reads this recipe as {}: its amounts are far more than the \
                 model ever saw dyed",
                past(ks, darkest)
            ),
        ));
    }
    if target
        .iter()
        .zip(measured)
        .all(|(&t, &m)| t >= 1.0 || m >= 1.0)
    {
        return Err(Invalid::one(
            "/measured",
            "the dip reads full scale or above in every band the target does not, which says \
             nothing about how the recipe dyed: there is nothing to correct by",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::{
        Basis, BatchStatistics, ModelConfig, ModelState, ReflectanceScale, Transform,
    };
    use faer::Mat;
    use rand::{Rng, SeedableRng};

    const BANDS: usize = 31;
    const DYES: [&str; 2] = ["yellow", "blue"];

    /// K/S of recipe `shown` (the dyes' amounts as their colour shows them) on fabric `fabric`
    /// at band `l` of 400–700 nm.
    fn ks(shown: [f64; 2], fabric: f64, l: usize) -> f64 {
        let nm = 400.0 + 10.0 * l as f64;
        let band = |centre: f64| 6.0 * (-0.5 * ((nm - centre) / 35.0).powi(2)).exp();
        0.02 + 0.03 * fabric + shown[0] * band(450.0) + shown[1] * band(600.0)
    }

    fn reading(c: [f64; 2], fabric: f64) -> Vec<f64> {
        (0..BANDS)
            .map(|l| Transform::KubelkaMunk.reflectance(ks(c, fabric, l)))
            .collect()
    }

    /// The forward map of 300 exact dips of two dyes on two fabrics, whose colour builds up as
    /// `s c / (s + c)` (`s = saturation`; linear when infinite).
    fn map(saturation: f64) -> ForwardMap {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let rows: Vec<([f64; 2], f64)> = (0..300)
            .map(|_| {
                let c = [rng.random_range(0.0..4.0), rng.random_range(0.0..4.0)];
                (c, f64::from(rng.random_range(0..2u8)))
            })
            .collect();
        let shown = |c: f64| {
            if saturation.is_finite() {
                saturation * c / (saturation + c)
            } else {
                c
            }
        };
        let x = Mat::from_fn(rows.len(), BANDS + 1, |i, j| {
            let (c, fabric) = rows[i];
            if j < BANDS {
                Transform::KubelkaMunk.reflectance(ks([shown(c[0]), shown(c[1])], fabric, j))
            } else {
                fabric
            }
        });
        let y = Mat::from_fn(rows.len(), 2, |i, k| rows[i].0[k]);
        let basis = Basis::spectral(
            BANDS,
            ReflectanceScale::Fraction,
            BANDS + 1,
            true,
            Transform::KubelkaMunk,
        );
        let statistics = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        ModelState::fit(&ModelConfig::new(basis, 2), statistics)
            .unwrap()
            .forward_map()
            .unwrap()
    }

    fn paths(refused: Result<(), Invalid>) -> Vec<String> {
        refused
            .unwrap_err()
            .details
            .into_iter()
            .map(|d| d.path)
            .collect()
    }

    #[test]
    fn a_recipe_at_the_most_of_a_dye_that_builds_up_is_flagged_at_its_row() {
        let outputs = ["yellow".to_owned(), "blue".to_owned()];
        let saturating = map(5.0);
        assert!(saturating.curves().iter().all(|h| !h.is_linear()));
        // A target deeper than the dyes give: the nearest recipe is at the cap.
        let deep = reading([5.0, 5.0], 1.0)
            .iter()
            .map(|r| r * 0.2)
            .collect::<Vec<_>>();
        let matched = saturating.match_recipe(&deep, &[1.0]).unwrap();
        let warned = at_the_most(&saturating, &matched.concentration, &outputs, 3)
            .unwrap_or_else(|| panic!("no warning for {matched:?}"));
        assert_eq!(warned.path, "/spectra/values/3");
        assert!(
            warned.message.contains("yellow, blue")
                && warned
                    .message
                    .contains("the target is deeper than these dyes reach,"),
            "{}",
            warned.message
        );
        // A target within reach, and any amount on a linear map, are not flagged.
        let within = saturating
            .match_recipe(&reading([1.0, 0.5], 1.0), &[1.0])
            .unwrap();
        assert_eq!(
            at_the_most(&saturating, &within.concentration, &outputs, 3),
            None
        );
        assert_eq!(
            at_the_most(&map(f64::INFINITY), &[100.0, 100.0], &outputs, 0),
            None
        );
    }

    #[test]
    fn ks_past_ten_darkest_readings_or_not_finite_is_out_of_reach() {
        assert_eq!(out_of_reach(&[0.1, -3.0, 4990.0], 499.0), None);
        assert_eq!(out_of_reach(&[0.1, 4990.5, 1e9], 499.0), Some(4990.5));
        assert_eq!(out_of_reach(&[-4991.0], 499.0), Some(-4991.0));
        assert!(out_of_reach(&[1.0, f64::NAN], 499.0).is_some_and(f64::is_nan));
        assert_eq!(out_of_reach(&[f64::INFINITY], 499.0), Some(f64::INFINITY));
    }

    #[test]
    fn targets_without_absorption_and_absurd_fabrics_are_refused_at_their_row() {
        let map = map(f64::INFINITY);
        let target = reading([1.0, 0.5], 1.0);
        assert!(check_target(&map, &target, &[1.0], 2).is_ok());
        // A deep shade, past anything dyed, is still a colour.
        assert!(check_target(&map, &reading([40.0, 40.0], 1.0), &[1.0], 2).is_ok());
        assert_eq!(
            paths(check_target(&map, &[1.0; BANDS], &[1.0], 2)),
            ["/spectra/values/2"]
        );
        let mut bright = vec![1.04; BANDS];
        bright[7] = 0.98;
        assert!(check_target(&map, &bright, &[0.0], 2).is_ok());
        assert_eq!(paths(check_target(&map, &target, &[1e200], 2)), ["/x/2"]);
        assert_eq!(paths(check_target(&map, &target, &[-1e6], 0)), ["/x/0"]);
    }

    #[test]
    fn a_dip_of_absurd_amounts_or_without_absorption_is_refused_at_its_path() {
        let linear = map(f64::INFINITY);
        let outputs = DYES.map(String::from);
        let target = reading([1.0, 0.5], 0.0);
        let dip = reading([1.1, 0.5], 0.0);
        let check = |map: &ForwardMap, dyed: [f64; 2], measured: &[f64]| {
            check_dip(map, &target, &[0.0], &dyed, measured, &outputs)
        };
        assert!(check(&linear, [1.0, 0.5], &dip).is_ok());
        assert_eq!(paths(check(&linear, [1e12, 0.5], &dip)), ["/recipe/yellow"]);
        assert_eq!(
            paths(check(&linear, [1e308, 1e308], &dip)),
            ["/recipe/yellow", "/recipe/blue"]
        );
        // Full scale wherever the target is not: nothing is left to correct by.
        let mut blank: Vec<f64> = target
            .iter()
            .map(|&r| if r < 0.5 { 1.0 } else { 0.9 })
            .collect();
        assert!(check(&linear, [1.0, 0.5], &blank).is_ok());
        blank.iter_mut().for_each(|r| *r = 1.0);
        assert_eq!(paths(check(&linear, [1.0, 0.5], &blank)), ["/measured"]);

        // A dye whose colour saturates reads any amount within reach: past the most a recipe
        // uses of it, the amount itself is refused.
        let saturating = map(5.0);
        assert!(
            saturating.curves().iter().any(|h| !h.is_linear()),
            "{:?}",
            saturating.curves()
        );
        let dyed = |amount: f64| {
            let mut dyed = [1.0, 0.5];
            for (i, h) in saturating.curves().iter().enumerate() {
                if !h.is_linear() {
                    dyed[i] = amount;
                }
            }
            dyed
        };
        assert!(check(&saturating, dyed(3.0), &dip).is_ok());
        let refused = paths(check(&saturating, dyed(1e12), &dip));
        assert!(
            !refused.is_empty() && refused.iter().all(|p| p.starts_with("/recipe/")),
            "{refused:?}"
        );

        // So is a lower bound past it; a linear dye's is the client's to ask.
        let deep = [DyeBounds {
            min: 150.0,
            max: f64::INFINITY,
        }; 2];
        let refused = paths(check_bounds(&saturating, &deep, &[0, 1], &outputs));
        let saturated: Vec<String> = (0..2)
            .filter(|&i| !saturating.curves()[i].is_linear())
            .map(|i| format!("/bounds/{}/min", DYES[i]))
            .collect();
        assert_eq!(refused, saturated);
        assert!(check_bounds(&saturating, &deep, &[], &outputs).is_ok());
        assert!(check_bounds(&linear, &deep, &[0, 1], &outputs).is_ok());
        let shallow = [DyeBounds {
            min: 100.0,
            max: f64::INFINITY,
        }; 2];
        assert!(check_bounds(&saturating, &shallow, &[0, 1], &outputs).is_ok());
    }
}
