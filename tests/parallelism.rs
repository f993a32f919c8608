//! A model's state does not depend on how many threads computed it. A thin version
//! (`database.full_state_every`) is read back by replaying its folds and checking the digest of
//! the state they give, and it may be replayed on another machine than the one that wrote it: a
//! replica, or the service moved to a host with more cores. So the first fit, a one-step update
//! and a refit must give the same bits whether faer is told to run sequentially or on 2 to 4
//! threads, and on rayon pools of 1 to 4 threads (the outputs, and the smooth prior's shapes,
//! are fitted in parallel).
//!
//! Its own test binary: it sets faer's process-wide parallelism, which would change the threads
//! (not the results, as these tests show) of other tests running beside it; its two tests take
//! turns ([`TURNS`]).

mod common;

use common::*;
use faer::{Mat, Par};
use mordant::estimator::{
    BatchStatistics, FittedFamily, ModelConfig, ModelState, PriorFamily, UpdateMethod, codec,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Mutex;

/// Held while a test sets faer's parallelism and computes under it.
static TURNS: Mutex<()> = Mutex::new(());

/// The encodings of [`states`]' three, and the number of threads that computed them.
type Encoded = (usize, [Vec<u8>; 3]);

/// The first fit, a one-step update and a refit update.
fn states(
    config: &ModelConfig,
    first: &BatchStatistics,
    batch: &BatchStatistics,
) -> [ModelState; 3] {
    let fitted = ModelState::fit(config, first.clone()).expect("first fit");
    let stepped = fitted.update(config, batch).expect("one-step update");
    let refit_config = ModelConfig {
        update: UpdateMethod::Refit,
        ..config.clone()
    };
    let refitted = fitted.update(&refit_config, batch).expect("refit update");
    [fitted, stepped, refitted]
}

/// [`states`] with faer sequential and on one rayon thread, then parallel on 2, 3 and 4: the
/// sequential states and the encodings of each.
fn under_every_parallelism(
    config: &ModelConfig,
    first: &BatchStatistics,
    batch: &BatchStatistics,
) -> ([ModelState; 3], Vec<Encoded>) {
    let _turn = TURNS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut sequential = None;
    let encodings = [1usize, 2, 3, 4]
        .into_iter()
        .map(|threads| {
            let par = if threads == 1 {
                Par::Seq
            } else {
                Par::rayon(threads)
            };
            faer::set_global_parallelism(par);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a rayon pool");
            let states = pool.install(|| states(config, first, batch));
            let encoded = states.each_ref().map(codec::encode);
            sequential.get_or_insert(states);
            (threads, encoded)
        })
        .collect();
    (sequential.expect("the sequential run"), encodings)
}

fn assert_same_bits(results: &[Encoded]) {
    let (_, sequential) = &results[0];
    for (threads, states) in &results[1..] {
        for (step, (a, b)) in ["first fit", "one-step update", "refit update"]
            .iter()
            .zip(sequential.iter().zip(states))
        {
            assert!(!a.is_empty(), "{step}: an empty encoding");
            assert!(
                a == b,
                "{step}: the state on {threads} threads differs from the sequential one"
            );
        }
    }
}

/// Smooth, strongly collinear spectra of `bands` bands (four absorption bands in varying
/// amounts) and `outputs` outputs linear in the amounts.
fn wide_spectra(seed: u64, rows: usize, bands: usize, outputs: usize) -> (Mat<f64>, Mat<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let amounts = Mat::from_fn(rows, 4, |_, _| rng.random_range(0.0..1.0));
    let centres = [0.2, 0.45, 0.6, 0.85];
    let x = Mat::from_fn(rows, bands, |i, j| {
        let t = j as f64 / bands as f64;
        let absorbance: f64 = (0..4)
            .map(|a| amounts[(i, a)] * (-((t - centres[a]) / 0.05).powi(2)).exp())
            .sum();
        (0.9 * (-absorbance).exp()).clamp(0.02, 0.98)
    });
    let noise: Vec<f64> = (0..rows * outputs)
        .map(|_| rng.random_range(-0.01..0.01))
        .collect();
    let y = Mat::from_fn(rows, outputs, |i, k| {
        (0..4)
            .map(|a| amounts[(i, a)] * ((a + k) % 3) as f64)
            .sum::<f64>()
            + noise[i * outputs + k]
    });
    (x, y)
}

#[test]
fn a_spectral_state_is_the_same_to_the_bit_on_any_number_of_threads() {
    let (bands, first_rows, batch_rows) = (300, 60, 40);
    let (x, y) = wide_spectra(17, first_rows + batch_rows, bands, 3);
    let basis = spectrum_basis(bands);
    // The smooth family, whose candidate shapes are formed in parallel (on these spectra the
    // default prior picks ridge).
    let config = ModelConfig {
        prior: PriorFamily::Smooth,
        ..ModelConfig::new(basis, y.ncols())
    };
    let first = stats(&basis, &rows(&x, 0..first_rows), &rows(&y, 0..first_rows));
    let batch = stats(
        &basis,
        &rows(&x, first_rows..first_rows + batch_rows),
        &rows(&y, first_rows..first_rows + batch_rows),
    );
    let ([fitted, ..], encodings) = under_every_parallelism(&config, &first, &batch);
    assert!(
        fitted
            .outputs()
            .iter()
            .filter_map(|o| o.posterior())
            .any(|p| p.prior().family == FittedFamily::Smooth),
        "no output took the smooth prior: {:?}",
        fitted
            .outputs()
            .iter()
            .map(|o| o.posterior().map(|p| p.prior().family))
            .collect::<Vec<_>>()
    );
    assert_same_bits(&encodings);
}

/// The dyeing data, split as `benches/estimator.rs` splits it: 82 outputs, most with structural
/// zeros (fitted by ARD), and a batch that grows the informative rows of some dyes by a quarter
/// or more, so that the one-step update fits their hyperparameters again.
#[test]
fn a_dyeing_state_is_the_same_to_the_bit_on_any_number_of_threads() {
    let data = dyeing();
    let basis = identity_basis(data.x.ncols());
    let config = ModelConfig::new(basis, data.y.ncols());
    let (split, end) = (1543, 2571);
    let first = stats(&basis, &rows(&data.x, 0..split), &rows(&data.y, 0..split));
    let batch = stats(
        &basis,
        &rows(&data.x, split..end),
        &rows(&data.y, split..end),
    );
    let ([fitted, stepped, _], encodings) = under_every_parallelism(&config, &first, &batch);
    let refitted = fitted
        .outputs()
        .iter()
        .zip(stepped.outputs())
        .filter(
            |(before, after)| match (before.posterior(), after.posterior()) {
                (Some(a), Some(b)) => a.prior() != b.prior(),
                (None, Some(_)) => true,
                _ => false,
            },
        )
        .count();
    assert!(
        refitted > 0,
        "the one-step update fitted no output's hyperparameters again"
    );
    assert_same_bits(&encodings);
}
