//! The colour kitchen's day on the simulated dye house: a target is matched with the service's
//! own defaults (`mordant_kitchen::Search::defaults`: the best of every recipe of up to three
//! dyes, by ΔE00), the first candidate is dyed ([`Simulator::dye`]: its uptake varies as a
//! row's does, and the reference instrument reads it with the simulation's noise), and a dip that
//! misses the tolerance is corrected once from its measurement (`mordant_kitchen::correct`) and
//! dyed again. Every colour difference is between true colours (the dyed sample before the
//! instrument) under D65 (pass/fail) and under A (metamerism), CIE 1964 10°.

use mordant_colour::CieLab;
use mordant_estimator::ModelState;
use mordant_kitchen::{Colorimeter, Search, Tolerance, candidates, combinations, correct};
use serde::Serialize;

use super::SimulateError;
use super::colour::{Illuminant, ciede2000};
use super::generate::{PRODUCTION_LOTS, Sample, Simulator};
use super::targets::{Renderer, Targets, quantile};

/// What the kitchen's day measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KitchenScore {
    pub targets: usize,
    /// ΔE00 (D65) of the pass/fail.
    pub tolerance_de00: f64,
    /// Share of targets whose first candidate, dyed, is within tolerance.
    pub first_shot_pass: f64,
    /// Share within tolerance after at most one correction of a failing dip.
    pub after_one_correction_pass: f64,
    /// Dips corrected (the first shots that failed).
    pub corrected: usize,
    /// Median ΔE00 of the dyed first candidate under D65, and after the correction (every
    /// target: a passing first shot counts as it is).
    pub median_first_de00: f64,
    pub median_final_de00: f64,
    /// Median ΔE00 under illuminant A of the dyed first candidate: its metamerism.
    pub median_metamerism_a: f64,
    /// Of the dyed first candidates within tolerance under D65, the share outside it under A.
    pub d65_pass_a_fail: f64,
    /// A reference for the first shot: the dose the target took up, dyed again with the same
    /// draws as the first candidate (lot, uptake spread, whiteness), passes this share of the
    /// time. Not a bound: a recipe can make up for the production lot's whiteness, the dose
    /// cannot.
    pub dose_first_shot_pass: f64,
    /// The same after one correction that knows the production lot's dye yield exactly (the
    /// dose divided by it), dyed with the correction's draws: a reference for the correction.
    pub dose_after_one_correction_pass: f64,
}

/// Matches, dyes and corrects every target of `targets` with the forward map of `state`.
pub(super) fn kitchen_day(
    sim: &Simulator,
    state: &ModelState,
    targets: &Targets,
    renderer: &Renderer,
) -> Result<KitchenScore, SimulateError> {
    let map = state.forward_map()?;
    let colorimeter = Colorimeter::new(&sim.config().grid)?;
    let search = Search::defaults(map.dyes());
    let tolerance = match search.tolerance {
        Tolerance::De00(v) | Tolerance::Cmc(v) => v,
    };
    let tried = combinations(&search.allowed, search.max_dyes);
    let (mut first_de, mut final_de, mut metamerism) = (Vec::new(), Vec::new(), Vec::new());
    let (mut first_pass, mut final_pass, mut corrected) = (0usize, 0usize, 0usize);
    let (mut d65_pass, mut a_fail) = (0usize, 0usize);
    let (mut dose_first, mut dose_final) = (0usize, 0usize);
    for (i, (dip, truth)) in targets.dips.iter().zip(&targets.truth).enumerate() {
        let substrate = dip.sample.substrate;
        let lot = PRODUCTION_LOTS + i as u64;
        let (first, fixed) = dose_redyed(sim, renderer, &dip.sample, lot, i as u64, truth)?;
        dose_first += usize::from(first <= tolerance);
        dose_final += usize::from(first <= tolerance || fixed <= tolerance);
        let truth_a =
            super::colour::lab(|nm| sim.true_reflectance(&dip.sample, nm), Illuminant::A)?;
        let row: Vec<f64> = targets.inputs.row(i).iter().copied().collect();
        let (target, others) = map.split_inputs(&row);
        let labs = colorimeter.labs(&target)?;
        let problem = map.problem(&target, others)?;
        let found = candidates(&problem, Some((&colorimeter, &labs)), &tried, &search)?;
        let Some(best) = found.first() else {
            first_de.push(f64::INFINITY);
            final_de.push(f64::INFINITY);
            continue;
        };
        let recipe = &best.recipe.concentration;
        let dyed = sim.dye(substrate, lot, recipe, 2 * i as u64, false);
        let seen = renderer.lab_of(&dyed.sample, Illuminant::D65)?;
        let de = ciede2000(truth, &seen)?;
        let under_a = renderer.lab_of(&dyed.sample, Illuminant::A)?;
        let de_a = ciede2000(&truth_a, &under_a)?;
        first_de.push(de);
        metamerism.push(de_a);
        if de <= tolerance {
            first_pass += 1;
            final_pass += 1;
            final_de.push(de);
            d65_pass += 1;
            if de_a > tolerance {
                a_fail += 1;
            }
            continue;
        }
        corrected += 1;
        // The dip read as the front end sends it: on the model's scale, split as match splits.
        let read: Vec<f64> = dyed.reflectance.iter().chain(others).copied().collect();
        let (measured, _) = map.split_inputs(&read);
        let problem = map.correction(&target, others, recipe, &measured)?;
        let fixed = correct(
            &problem,
            Some((&colorimeter, &labs)),
            &best.dyes,
            &measured,
            &search,
        )?;
        let de = match fixed.recipe {
            Some(next) => {
                let again = sim.dye(
                    substrate,
                    lot,
                    &next.recipe.concentration,
                    2 * i as u64 + 1,
                    false,
                );
                let seen = renderer.lab_of(&again.sample, Illuminant::D65)?;
                ciede2000(truth, &seen)?
            }
            None => de,
        };
        if de <= tolerance {
            final_pass += 1;
        }
        final_de.push(de);
    }
    let n = targets.len().max(1) as f64;
    Ok(KitchenScore {
        targets: targets.len(),
        tolerance_de00: tolerance,
        first_shot_pass: first_pass as f64 / n,
        after_one_correction_pass: final_pass as f64 / n,
        corrected,
        median_first_de00: quantile(&first_de, 0.5),
        median_final_de00: quantile(&final_de, 0.5),
        median_metamerism_a: quantile(&metamerism, 0.5),
        d65_pass_a_fail: a_fail as f64 / d65_pass.max(1) as f64,
        dose_first_shot_pass: dose_first as f64 / n,
        dose_after_one_correction_pass: dose_final as f64 / n,
    })
}

/// ΔE00 (D65) to the target's true colour of the dose `target` took up, dyed as target `i`'s
/// first shot is (lot `lot`, dyeing `2i`), and of that dose divided by the lot's dye yield,
/// dyed as its correction is (dyeing `2i + 1`). The spread no recipe can foresee is all that
/// is left: the lot's yield and whiteness, each dyeing's uptake.
fn dose_redyed(
    sim: &Simulator,
    renderer: &Renderer,
    target: &Sample,
    lot: u64,
    i: u64,
    truth: &CieLab,
) -> Result<(f64, f64), SimulateError> {
    let again = sim.dye(target.substrate, lot, &target.uptake, 2 * i, false);
    let first = ciede2000(truth, &renderer.lab_of(&again.sample, Illuminant::D65)?)?;
    let dye_yield = sim.lot(lot).dye_yield;
    let knowing: Vec<f64> = target.uptake.iter().map(|c| c / dye_yield).collect();
    let again = sim.dye(target.substrate, lot, &knowing, 2 * i + 1, false);
    let fixed = ciede2000(truth, &renderer.lab_of(&again.sample, Illuminant::D65)?)?;
    Ok((first, fixed))
}

#[cfg(test)]
mod tests {
    use super::super::evaluate::{EvaluationOptions, evaluate};
    use super::super::generate::{MODEL_GRID, NoiseModel, SimulationConfig};
    use super::*;

    #[test]
    fn a_dyeing_without_noise_is_the_recipe_s_true_reflectance() {
        let sim = Simulator::new(SimulationConfig {
            noise: NoiseModel::NONE,
            grid: MODEL_GRID,
            ..SimulationConfig::new(5)
        });
        let mut recipe = vec![0.0; sim.dyes().len()];
        recipe[1] = 0.8;
        recipe[6] = 0.3;
        let dip = sim.dye(1, 0, &recipe, 3, false);
        assert_eq!(dip.sample.uptake, recipe);
        for (r, nm) in dip.reflectance.iter().zip(MODEL_GRID.wavelengths()) {
            let truth = 100.0 * sim.true_reflectance(&dip.sample, nm);
            assert!((r - truth).abs() < 1e-12, "{nm}: {r} vs {truth}");
        }
        // Noise draws differ between dyeings, not between runs.
        let noisy = Simulator::new(SimulationConfig::new(5));
        assert_eq!(
            noisy.dye(1, 0, &recipe, 3, false),
            noisy.dye(1, 0, &recipe, 3, false)
        );
        assert_ne!(
            noisy.dye(1, 0, &recipe, 3, false),
            noisy.dye(1, 0, &recipe, 4, false)
        );
    }

    #[test]
    fn a_perfect_dye_house_passes_first_time_and_a_noisy_one_gains_from_correcting() {
        let options = |noise| EvaluationOptions {
            train_rows: 800,
            test_rows: 60,
            noise,
            ..EvaluationOptions::default()
        };
        let perfect = evaluate(&options(NoiseModel::NONE), MODEL_GRID)
            .unwrap()
            .kitchen;
        assert_eq!(perfect.first_shot_pass, 1.0, "{perfect:?}");
        assert_eq!(perfect.corrected, 0);
        assert_eq!(perfect.dose_first_shot_pass, 1.0, "{perfect:?}");
        let noisy = evaluate(&options(NoiseModel::LAB), MODEL_GRID)
            .unwrap()
            .kitchen;
        assert!(noisy.corrected > 0, "{noisy:?}");
        assert!(
            noisy.after_one_correction_pass > noisy.first_shot_pass,
            "{noisy:?}"
        );
        assert!(noisy.median_metamerism_a > 0.0 && noisy.d65_pass_a_fail < 0.5);
    }
}
