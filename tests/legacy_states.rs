//! Model states stored by earlier releases load and predict exactly as they did
//! (`tests/data/legacy/`): formats 1 and 3, written by the release before the prior families'
//! encoder (a refit moves them to the current priors), and format 5, by the release before the
//! zero rows.

use faer::Mat;
use mordant::estimator::model::Predictive;
use mordant::estimator::{FittedFamily, ModelConfig, codec};
use serde_json::Value;

fn fixture(name: &str) -> (Vec<u8>, Value) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/legacy");
    let blob = std::fs::read(format!("{dir}/{name}.state")).expect("state fixture");
    let json = std::fs::read_to_string(format!("{dir}/{name}.json")).expect("predictions");
    (blob, serde_json::from_str(&json).expect("json"))
}

fn matrix(value: &Value) -> Mat<f64> {
    let rows: Vec<Vec<f64>> = serde_json::from_value(value.clone()).expect("rows");
    Mat::from_fn(rows.len(), rows[0].len(), |i, j| rows[i][j])
}

#[test]
fn states_of_the_previous_release_predict_as_they_did() {
    for (name, version) in [("v1", 1u16), ("v3", 3)] {
        let (blob, recorded) = fixture(name);
        assert_eq!(u16::from_le_bytes([blob[4], blob[5]]), version);
        let state = codec::decode(&blob).expect("decodes");
        assert_eq!(state.predictive(), Predictive::Plugin);
        for output in state.outputs() {
            if let Some(post) = output.posterior() {
                assert_eq!(post.prior().family, FittedFamily::Ard);
                assert_eq!(post.flat(), None, "{name}: the intercept stays shrunk");
            }
        }
        let pred = state.predict(matrix(&recorded["probe"]).as_ref()).unwrap();
        let (mean, variance) = (matrix(&recorded["mean"]), matrix(&recorded["variance"]));
        for i in 0..mean.nrows() {
            for k in 0..mean.ncols() {
                let (m, v) = (mean[(i, k)], variance[(i, k)]);
                assert!(
                    (pred.mean[(i, k)] - m).abs() <= 1e-12 * (1.0 + m.abs()),
                    "{name} mean ({i},{k})"
                );
                assert!(
                    (pred.variance[(i, k)] - v).abs() <= 1e-12 * v,
                    "{name} variance ({i},{k})"
                );
            }
        }
        // Written back (as every later fold does), it keeps predicting the same.
        let again = codec::decode(&codec::encode(&state)).unwrap();
        assert_eq!(again, state);
    }
}

/// A state stored by the release before state format 6 (`v5`: written by that release's
/// service through its API, a dye dosed in 8 rows of 40 beside a dense output, read from its
/// embedded store) predicts as it did, structural zeros included (it keeps no zero rows); the
/// format-5 encoding the previous release's thin versions are checked against gives back its
/// very bytes; and folds keep it without zero rows.
#[test]
fn a_state_of_the_release_before_zero_rows_predicts_as_it_did() {
    let (blob, recorded) = fixture("v5");
    assert_eq!(u16::from_le_bytes([blob[4], blob[5]]), 5);
    let state = codec::decode(&blob).expect("decodes");
    assert_eq!(
        state.predictive(),
        Predictive::Student,
        "fitted under the old rule"
    );
    assert!(state.totals().zero_rows().is_none());
    assert_eq!(
        codec::encode_previous(&state),
        blob,
        "the previous release's bytes"
    );
    let probe = matrix(&recorded["probe"]);
    let (mean, variance) = (matrix(&recorded["mean"]), matrix(&recorded["variance"]));
    let again = codec::decode(&codec::encode(&state)).unwrap();
    assert_eq!(again, state);
    for state in [&state, &again] {
        let pred = state.predict(probe.as_ref()).unwrap();
        for i in 0..mean.nrows() {
            for k in 0..mean.ncols() {
                let (m, v) = (mean[(i, k)], variance[(i, k)]);
                assert!((pred.mean[(i, k)] - m).abs() <= 1e-12 * (1.0 + m.abs()));
                assert!((pred.variance[(i, k)] - v).abs() <= 1e-12 * v, "({i},{k})");
            }
        }
    }
    assert_eq!(mean[(0, 0)], 0.0, "the fixture holds a structural zero");
    let config = ModelConfig::new(*state.basis(), 2);
    let folded = state
        .update(
            &config,
            &mordant::estimator::BatchStatistics::from_rows(
                state.basis(),
                probe.as_ref(),
                mean.as_ref(),
            )
            .unwrap(),
        )
        .unwrap();
    assert!(
        folded.totals().zero_rows().is_none(),
        "a sum with a side without them"
    );
    assert_eq!(
        folded.predictive(),
        Predictive::Student,
        "a fold keeps the rule"
    );
}

/// Folds never refit a stored state's hyperparameters, however many rows follow: they keep
/// the prior until an explicit refit.
#[test]
fn folds_keep_a_stored_states_prior_however_many_rows_follow() {
    let (blob, _) = fixture("v1");
    let state = codec::decode(&blob).unwrap();
    let config = ModelConfig::new(*state.basis(), state.outputs().len());
    // The state's own statistics again: every output's rows double.
    let updated = state.update(&config, state.totals()).unwrap();
    assert_eq!(updated.predictive(), Predictive::Plugin);
    for (a, b) in updated.outputs().iter().zip(state.outputs()) {
        if let (Some(a), Some(b)) = (a.posterior(), b.posterior()) {
            assert_eq!(a.prior_variance(), b.prior_variance());
        }
    }
}

#[test]
fn a_refit_moves_a_stored_state_to_the_current_priors() {
    let (blob, _) = fixture("v1");
    let state = codec::decode(&blob).unwrap();
    let config = ModelConfig::new(*state.basis(), state.outputs().len());
    let refit = state.refit(&config).unwrap();
    assert_eq!(refit.predictive(), Predictive::StudentNoise);
    let intercept = state.basis().features;
    let mut dense = 0;
    for (k, output) in refit.outputs().iter().enumerate() {
        if let Some(post) = output.posterior() {
            // The intercept is free, except where an output's zeros are structural.
            let v = post.prior_variance()[intercept];
            if refit.totals().zero_inflated(k) {
                assert!(v.is_finite(), "output {k}: {v}");
            } else {
                assert_eq!(v, f64::INFINITY, "output {k}");
                dense += 1;
            }
        }
    }
    assert!(dense > 0);
}
