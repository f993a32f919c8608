use faer::Mat;
use mordant::estimator::*;
use mordant::evaluate::Dataset;
use rand::SeedableRng;
use rand::seq::SliceRandom;
fn main() {
    let f: Vec<String> = mordant::evaluate::dataset::DYEING_FEATURE_PREFIXES
        .iter()
        .map(|s| s.to_string())
        .collect();
    let o: Vec<String> = mordant::evaluate::dataset::DYEING_OUTPUT_PREFIXES
        .iter()
        .map(|s| s.to_string())
        .collect();
    let d = Dataset::from_csv(
        std::path::Path::new("../shared/data/dyeing/data.csv"),
        &f,
        &o,
    )
    .unwrap();
    let plain = std::env::args().nth(1).as_deref() == Some("plain");
    for seed in 0..20u64 {
        let mut order: Vec<usize> = (0..d.rows()).collect();
        order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        let n_test = (d.rows() as f64 * 0.2).round() as usize;
        let (test, train) = order.split_at(n_test);
        let n_old = (train.len() as f64 * 0.6).round() as usize;
        let (old, new) = train.split_at(n_old);
        for (name, rows) in [("old", old), ("new", new)] {
            let (x, y) = d.select(rows);
            let (tx, ty) = d.select(test);
            let basis = Basis::new(x.ncols(), true, Transform::Identity);
            let mut cfg = ModelConfig::new(basis, y.ncols());
            if plain {
                cfg.options = FitOptions::plain();
            }
            let phi = basis.design(x.as_ref()).unwrap();
            let st = ModelState::fit(
                &cfg,
                BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap(),
            )
            .unwrap();
            let p = st.predict(tx.as_ref()).unwrap();
            let mut worst = (0.0, 0, 0);
            for k in 0..ty.ncols() {
                for i in 0..ty.nrows() {
                    let e = (p.mean[(i, k)] - ty[(i, k)]).abs();
                    if e > worst.0 {
                        worst = (e, i, k);
                    }
                }
            }
            let (_, i, k) = worst;
            let nnz = (0..y.nrows()).filter(|&r| y[(r, k)] != 0.0).count();
            println!(
                "seed {seed} {name}: output {k} {} nnz_train={nnz} pred={:.4e} sd={:.3e} truth={} s={:?}",
                d.output_names[k],
                p.mean[(i, k)],
                p.variance[(i, k)].sqrt(),
                ty[(i, k)],
                st.outputs()[k].posterior().map(|p| p.noise_variance())
            );
        }
    }
    let _ = Mat::<f64>::zeros(1, 1);
}
