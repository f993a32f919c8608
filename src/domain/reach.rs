//! Whether a match or a correction asks the forward map about colours it can say anything of.
//!
//! The map is linear in the recipe and the fabric's features, so it answers any numbers; but a
//! band read at full scale or above carries no weight in a match (an optical brightener
//! fluoresces there), and features or amounts far outside the range it learnt give K/S values
//! no dyeing has, from which the solve either overflows or cancels to noise that looks like a
//! recipe. Each such input is the client's to fix, so it is refused at its path before anything
//! is solved.

use super::{Detail, Invalid, pointer_token};
use crate::estimator::recipe::ForwardMap;

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

/// Checks target row `row` of a match or correction: its reflectance `target` (fractions, one
/// per band) has a band below full scale, and its other features `others` give the undyed
/// fabric a K/S within reach.
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
                "the forward map reads the undyed fabric with these features as K/S {ks:.3e}, \
                 past any reading's (at most {darkest:.0}): the features are far outside the \
                 range the model was trained on"
            ),
        ));
    }
    Ok(())
}

/// Checks a correction's dip: the recipe dyed (`dyed`, one amount per output, named by
/// `outputs`) gives a K/S within reach on fabric `others`, and its measurement (`measured`,
/// fractions) reads below full scale in a band where the target (`target`) does too, since a
/// correction fits only where both say what absorbs.
pub fn check_dip(
    map: &ForwardMap,
    target: &[f64],
    others: &[f64],
    dyed: &[f64],
    measured: &[f64],
    outputs: &[String],
) -> Result<(), Invalid> {
    let darkest = darkest(map);
    if out_of_reach(&map.ks(dyed, others), darkest).is_some() {
        let mut alone = vec![0.0; dyed.len()];
        let mut details = Vec::new();
        for (i, &amount) in dyed.iter().enumerate().filter(|(_, a)| **a > 0.0) {
            alone[i] = amount;
            if let Some(ks) = out_of_reach(&map.ks(&alone, others), darkest) {
                details.push(Detail::new(
                    format!("/recipe/{}", pointer_token(&outputs[i])),
                    format!(
                        "the forward map reads {amount:e} of it as K/S {ks:.3e}, past any \
                         reading's (at most {darkest:.0}): far more than the model ever saw dyed"
                    ),
                ));
            }
            alone[i] = 0.0;
        }
        if details.is_empty() {
            return Err(Invalid::one(
                "/recipe",
                format!(
                    "the forward map reads this recipe as a K/S past any reading's (at most \
                     {darkest:.0}): its amounts are far more than the model ever saw dyed"
                ),
            ));
        }
        return Err(Invalid::new("invalid correction request", details));
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

    #[test]
    fn ks_past_ten_darkest_readings_or_not_finite_is_out_of_reach() {
        assert_eq!(out_of_reach(&[0.1, -3.0, 4990.0], 499.0), None);
        assert_eq!(out_of_reach(&[0.1, 4990.5, 1e9], 499.0), Some(4990.5));
        assert_eq!(out_of_reach(&[-4991.0], 499.0), Some(-4991.0));
        assert!(out_of_reach(&[1.0, f64::NAN], 499.0).is_some_and(f64::is_nan));
        assert_eq!(out_of_reach(&[f64::INFINITY], 499.0), Some(f64::INFINITY));
    }
}
