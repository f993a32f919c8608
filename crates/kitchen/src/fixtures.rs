//! A small simulated dye house the tests share: four dyes with Gaussian absorption bands on
//! 400–700 nm, and the forward map learnt from exact dips.

use faer::Mat;
use mordant_estimator::recipe::ForwardMap;
use mordant_estimator::{
    Basis, BatchStatistics, ModelConfig, ModelState, ReflectanceScale, Transform,
};
use rand::{Rng, SeedableRng};

pub const BANDS: usize = 31;
pub const DYES: usize = 4;

/// Unit K/S of four dyes with Gaussian bands on 400–700 nm every 10 nm: yellow, red, blue,
/// and a second red close to the first.
pub fn unit_ks(dye: usize, band: usize) -> f64 {
    let nm = 400.0 + 10.0 * band as f64;
    let centre = [440.0, 530.0, 620.0, 545.0][dye];
    6.0 * (-0.5 * ((nm - centre) / 35.0).powi(2)).exp()
}

/// The reflectance of recipe `c` in the world the map learnt.
pub fn reflectance(c: &[f64]) -> Vec<f64> {
    reflectance_with(c, [1.0; DYES])
}

/// The reflectance of recipe `c` where each dye is `strength` times as strong as the map
/// learnt (another batch of dye, another dye house's conditions).
pub fn reflectance_with(c: &[f64], strength: [f64; DYES]) -> Vec<f64> {
    (0..BANDS)
        .map(|l| {
            let ks = 0.02
                + (0..DYES)
                    .map(|i| strength[i] * c[i] * unit_ks(i, l))
                    .sum::<f64>();
            1.0 / (1.0 + ks + (ks * ks + 2.0 * ks).sqrt())
        })
        .collect()
}

/// The forward map learnt from 300 exact dips of up to three dyes.
pub fn forward_map() -> ForwardMap {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let recipes: Vec<Vec<f64>> = (0..300)
        .map(|_| {
            (0..DYES)
                .map(|_| {
                    if rng.random_bool(0.4) {
                        0.0
                    } else {
                        rng.random_range(0.01..2.0)
                    }
                })
                .collect()
        })
        .collect();
    let basis = Basis::spectral(
        BANDS,
        ReflectanceScale::Fraction,
        BANDS,
        true,
        Transform::KubelkaMunk,
    );
    let x = Mat::from_fn(300, BANDS, |i, j| reflectance(&recipes[i])[j]);
    let y = Mat::from_fn(300, DYES, |i, k| recipes[i][k]);
    let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
    ModelState::fit(&ModelConfig::new(basis, DYES), stats)
        .unwrap()
        .forward_map()
        .unwrap()
}
