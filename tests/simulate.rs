//! The simulated dye house, end to end in process: lab dips through the Kubelka–Munk forward
//! model, a model fitted on them, predicted recipes dyed again and compared in CIEDE2000; and a
//! model with a half-life against one without across an instrument swap.

use mordant::estimator::FitOptions;
use mordant::simulate::{
    EvaluationOptions, ForgettingOptions, Grid, NoiseModel, evaluate, forgetting_study,
};

/// Fit options with a noise floor far below the default (which keeps σ² above 1 % of an
/// output's mean square): without measurement noise the data are exactly linear in K/S.
fn low_noise_floor() -> FitOptions {
    FitOptions {
        noise_floor_fraction: 1e-8,
        noise_prior_fraction: 1e-8,
        ..FitOptions::default()
    }
}

#[test]
fn noise_free_lab_dips_are_matched_within_the_acceptance() {
    let options = EvaluationOptions {
        seed: 2024,
        train_rows: 1000,
        test_rows: 200,
        first_fit_rows: 300,
        batch_rows: 100,
        noise: NoiseModel::NONE,
        fit: low_noise_floor(),
        ..EvaluationOptions::default()
    };
    let report = evaluate(&options, Grid::MODEL).unwrap();
    let score = report.score;
    println!("{}", report.to_table());
    assert_eq!(score.targets, 200);
    assert!(score.median_de00 < 1.0, "median ΔE00 {}", score.median_de00);
    assert!(
        score.p90_de00 < 1.5,
        "90th percentile ΔE00 {}",
        score.p90_de00
    );
    assert!(score.median_de00 <= score.p90_de00 && score.p90_de00 <= score.max_de00);
    assert!(report.accepted());
}

#[test]
fn too_little_data_does_not_pass_for_accurate() {
    // The same measurement with a model that saw 15 lab dips (fewer than its 34 basis
    // functions): the acceptance must be able to fail, or the test above would prove nothing.
    let options = EvaluationOptions {
        seed: 2024,
        train_rows: 15,
        test_rows: 100,
        first_fit_rows: 15,
        batch_rows: 15,
        noise: NoiseModel::NONE,
        fit: low_noise_floor(),
        ..EvaluationOptions::default()
    };
    let report = evaluate(&options, Grid::MODEL).unwrap();
    assert!(!report.accepted(), "{}", report.to_table());
}

#[test]
fn the_default_noise_floor_costs_colour_accuracy_even_without_noise() {
    // Trichromatic recipes, noise-free spectra: the service's fit options (σ² ≥ 1 % of each
    // output's mean square) against a floor far below it: the floor regularises, and pale
    // shades show it (see docs/simulate.md).
    let base = EvaluationOptions {
        seed: 2024,
        train_rows: 1000,
        test_rows: 200,
        noise: NoiseModel::NONE,
        ..EvaluationOptions::default()
    };
    let service = evaluate(&base, Grid::MODEL).unwrap();
    let low = evaluate(
        &EvaluationOptions {
            fit: low_noise_floor(),
            ..base
        },
        Grid::MODEL,
    )
    .unwrap();
    println!("{}\n{}", service.to_table(), low.to_table());
    assert!(low.accepted(), "{}", low.to_table());
    assert!(service.score.p90_de00 > low.score.p90_de00 + 0.5);
}

#[test]
fn measurement_noise_costs_colour_accuracy() {
    let base = EvaluationOptions {
        seed: 7,
        train_rows: 800,
        test_rows: 150,
        ..EvaluationOptions::default()
    };
    let quiet = evaluate(
        &EvaluationOptions {
            noise: NoiseModel::PROCESS_ONLY,
            ..base
        },
        Grid::MODEL,
    )
    .unwrap()
    .score;
    let benchtop = evaluate(&base, Grid::MODEL).unwrap().score;
    let lab = evaluate(
        &EvaluationOptions {
            noise: NoiseModel::LAB,
            ..base
        },
        Grid::MODEL,
    )
    .unwrap()
    .score;
    assert!(
        benchtop.median_de00 > quiet.median_de00,
        "{benchtop:?} vs {quiet:?}"
    );
    assert!(benchtop.concentration_rmse > quiet.concentration_rmse);
    assert!(lab.concentration_rmse > benchtop.concentration_rmse);
}

#[test]
fn forgetting_recovers_from_an_instrument_swap_sooner() {
    let options = ForgettingOptions {
        seed: 3,
        pre_swap_rows: 1000,
        post_swap_rows: 1500,
        first_fit_rows: 300,
        batch_rows: 100,
        half_life_rows: 300.0,
        test_rows: 100,
        noise: NoiseModel::PROCESS_ONLY,
        ..ForgettingOptions::default()
    };
    let report = forgetting_study(&options, Grid::MODEL).unwrap();
    println!("{}", report.to_table());
    let [plain, forgetting] = &report.models[..] else {
        panic!("two models expected")
    };
    assert!(plain.half_life_rows.is_none());
    assert_eq!(forgetting.half_life_rows, Some(300.0));
    // The swap hurts both.
    assert!(plain.first_post_swap_median_de00 > plain.pre_swap_median_de00 + 1.0);
    // The one that forgets ends closer to where it was.
    assert!(
        forgetting.final_median_de00 < plain.final_median_de00,
        "{forgetting:?} vs {plain:?}"
    );
    let curves = report.curves_csv();
    assert_eq!(curves.lines().count(), 1 + 2 * (2500 - 300) / 100);
}
