use mordant::estimator::evidence::{OutputData, evidence};
use mordant::estimator::*;
use mordant::evaluate::Dataset;
use std::time::Instant;
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
    let rows: Vec<usize> = (0..1543).collect();
    let (x, y) = d.select(&rows);
    let basis = Basis::new(x.ncols(), true, Transform::Identity);
    let phi = basis.design(x.as_ref()).unwrap();
    let st = BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap();
    let pg: f64 = std::env::args()
        .nth(1)
        .map(|v| v.parse().unwrap())
        .unwrap_or(1e-10);
    let opts = FitOptions {
        prune_gamma: pg,
        ..FitOptions::default()
    };
    if std::env::var("SEQ").is_ok() {
        faer::set_global_parallelism(faer::Par::Seq);
    }
    let t0 = Instant::now();
    let mut tot = 0;
    let mut hist = vec![];
    for k in 0..y.ncols() {
        if st.nonzero()[k] < 5.0 {
            continue;
        }
        let data = OutputData {
            g: st.g(),
            b: st.b_col(k),
            q: st.q()[k],
            n: st.rows(),
        };
        let noise = NoisePrior::for_output(st.q()[k], st.nonzero()[k], &opts);
        let t = Instant::now();
        let fit = evidence(data, vec![1.0; 126], st.q()[k] / st.rows(), noise, &opts).unwrap();
        tot += fit.iterations;
        hist.push((
            fit.iterations,
            fit.posterior.active().len(),
            t.elapsed().as_micros(),
            fit.converged,
        ));
    }
    println!("total {:?} iters {tot} prune {pg}", t0.elapsed());
    println!("{:?}", hist);
}
